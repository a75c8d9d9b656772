/* pgconn_pipeline.c - a pgconn's statements in flight (pgconn.h): each pgconn_query() sent in
 * pipeline mode with its own sync, the queue of statements whose outcome is due, prepared
 * statements (prepared once per session, executed by name), reading results and delivering
 * each statement's last one in order, and notifications. The connection itself (connecting,
 * loss, the socket watch) is pgconn.c's.
 */
#include "pgconn.h"
#include "pgconn_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the queue ---- */

void pgc_push_entry(pgconn *c, entry *e)
{
    if (c->tail)
        c->tail->next = e;
    else
        c->head = e;
    c->tail = e;
    if (!e->internal)
        c->npending++;
}

static entry *pop_entry(pgconn *c)
{
    entry *e = c->head;
    if (!e)
        return NULL;
    c->head = e->next;
    if (!c->head)
        c->tail = NULL;
    e->next = NULL;
    return e;
}

/* A prepared statement whose Prepare failed, or that the server no longer knows (someone ran
 * DEALLOCATE or DISCARD on the session), is prepared again under a new name next time. */
static void forget_failed_stmt(pgconn *c, const entry *e, const PGresult *res)
{
    if (e->stmt_slot < 0 || !res)
        return;
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return;
    prepared_stmt *ps = &c->stmts[e->stmt_slot];
    const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    /* 26000: invalid_sql_statement_name. Other errors of the Execute leave the statement. */
    if (ps->id == e->stmt_id && (e->prepare_failed || (code && strcmp(code, "26000") == 0))) {
        ps->sql = NULL;
        ps->id = 0;
    }
}

/* Runs the entry's callback with `res` (NULL or its result), then frees both. */
static void deliver(pgconn *c, entry *e, PGresult *res)
{
    forget_failed_stmt(c, e, res);
    if (!e->internal) {
        assert(c->npending > 0);
        c->npending--;
        /* Per callback: one may close the connection, which delivers the other entries in a
         * nested call before this one has looked at its own flag. */
        bool outer = c->result_kept;
        c->result_kept = false;
        if (e->cb)
            e->cb(c, res, e->arg);
        if (c->result_kept)
            res = NULL; /* now the callback's to PQclear */
        c->result_kept = outer;
    }
    PQclear(res);
    free(e);
}

/* Every statement in flight gets NULL, in order. The list is detached first, so callbacks
 * that call pgconn_query (refused: not READY) or pgconn_close see an empty queue. */
void pgc_fail_pending(pgconn *c)
{
    entry *e = c->head;
    c->head = c->tail = NULL;
    while (e) {
        entry *next = e->next;
        PQclear(e->last);
        e->last = NULL;
        deliver(c, e, NULL);
        e = next;
    }
    assert(c->npending == 0);
}

/* ---- connected: pipeline I/O ---- */

/* Flushes what libpq buffered and watches for the reply: always readable (results,
 * notifications, a hang-up), writable too while output remains. */
int pgc_flush_and_arm(pgconn *c, char *err, size_t size)
{
    size_t mark = pgc_error_mark(c);
    int r = PQflush(c->conn);
    if (r < 0) {
        pgc_libpq_error(c, mark, err, size);
        return -EIO;
    }
    int rc = pgc_watch_set(c, UV_READABLE | (r > 0 ? UV_WRITABLE : 0));
    if (rc < 0) {
        snprintf(err, size, "cannot watch the socket: %s", uv_strerror(rc));
        return rc;
    }
    return 0;
}

static void drain_notifies(pgconn *c)
{
    unsigned gen = c->gen;
    PGnotify *n;
    while (c->gen == gen && (n = PQnotifies(c->conn)) != NULL) {
        if (c->on_notify)
            c->on_notify(c, n->relname, n->extra, c->arg);
        PQfreemem(n);
    }
}

/* Reads every complete result. Per statement libpq yields its result(s), a NULL, then the
 * PGRES_PIPELINE_SYNC of its own sync: the sync completes the head entry, which gets the
 * last result. Two NULLs in a row mean nothing more is in flight. */
static void process_results(pgconn *c)
{
    unsigned gen = c->gen;
    int nulls = 0;
    while (c->gen == gen && PQstatus(c->conn) != CONNECTION_BAD && !PQisBusy(c->conn)) {
        PGresult *r = PQgetResult(c->conn);
        if (!r) {
            if (++nulls >= 2 || !c->head)
                break;
            continue;
        }
        nulls = 0;
        entry *e = c->head;
        ExecStatusType st = PQresultStatus(r);
        if (!e) {
            /* Nothing was sent that this could answer: libpq and we disagree. */
            PQclear(r);
            snprintf(c->fatal_msg, sizeof c->fatal_msg, "unexpected result (%s) while idle",
                     PQresStatus(st));
            pgc_conn_lost(c, c->fatal_msg);
            return;
        }
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            pop_entry(c);
            PGresult *res = e->last;
            e->last = NULL;
            if (e->internal) {
                free(e);
                pgc_listen_done(c, res);
            } else {
                deliver(c, e, res);
            }
            continue;
        }
        /* The statement's result (or, defensively, PGRES_PIPELINE_ABORTED, which cannot
         * happen with one sync per statement, delivered as the outcome all the same). */
        if (st == PGRES_FATAL_ERROR &&
            pgc_is_fatal_severity(PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED))) {
            const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
            snprintf(c->fatal_msg, sizeof c->fatal_msg, "FATAL: %s", m ? m : "");
        }
        if (e->prepare_pending) {
            e->prepare_pending = false;
            e->prepare_failed = st != PGRES_COMMAND_OK;
            if (!e->prepare_failed) {
                if (c->stmts[e->stmt_slot].id == e->stmt_id)
                    c->stmts[e->stmt_slot].ready = true;
                PQclear(r);
                continue;
            }
        }
        /* A failed Prepare aborts the Execute sent with it under the same sync: the
         * Prepare's error is the one worth reporting. */
        if (st == PGRES_PIPELINE_ABORTED && e->last &&
            PQresultStatus(e->last) == PGRES_FATAL_ERROR) {
            PQclear(r);
            continue;
        }
        PQclear(e->last);
        e->last = r;
    }
}

void pgc_io_step(pgconn *c, int events)
{
    unsigned gen = c->gen;
    size_t mark = pgc_error_mark(c);
    if ((events & UV_READABLE) && !PQconsumeInput(c->conn)) {
        pgc_conn_lost_libpq(c, mark);
        return;
    }
    /* Also on a writable-only event: libpq reads whatever the server sent while it waits to
     * send (so that neither side blocks), and those results would otherwise sit in its buffer
     * with nothing left on the socket to wake us. */
    drain_notifies(c);
    if (c->gen != gen)
        return;
    process_results(c);
    if (c->gen != gen)
        return;
    drain_notifies(c);
    if (c->gen != gen)
        return;
    if (PQstatus(c->conn) == CONNECTION_BAD) {
        /* Broken while parsing: what libpq wrote since may include query errors. */
        pgc_conn_lost_libpq(c, strlen(PQerrorMessage(c->conn)));
        return;
    }
    char err[sizeof c->last_error];
    if (pgc_flush_and_arm(c, err, sizeof err) < 0)
        pgc_conn_lost(c, err);
}

/* Results libpq read into its buffer while sending, from user context: processed from the loop
 * (callbacks may not run inside pgconn_query). Without this, a result read during the flush of
 * the next statement (a claim's, under load) would wait until some later statement made the
 * socket readable again. */
static void kick_cb(uv_timer_t *t)
{
    pgconn *c = t->data;
    if (c->state == ST_READY && c->conn && !c->loss_pending)
        pgc_io_step(c, 0);
}

/* ---- sending ---- */

/* The slot of `sql` among the prepared statements, or a free slot (ps->id == 0) to prepare it
 * in, or -1 when it is being prepared or the cache is full (it is then sent unprepared). */
static int stmt_slot(pgconn *c, const char *sql)
{
    int free_slot = -1;
    for (int i = 0; i < PGCONN_MAX_PREPARED; i++) {
        if (c->stmts[i].id && c->stmts[i].sql == sql)
            return c->stmts[i].ready ? i : -1;
        if (!c->stmts[i].id && free_slot < 0)
            free_slot = i;
    }
    return free_slot;
}

static int send_query(pgconn *c, const char *sql, int nparams, const char *const *params,
                      bool prepared, pgconn_result_cb cb, void *arg)
{
    if (!c || !sql || nparams < 0 || nparams > 65535 || (nparams > 0 && !params))
        return -EINVAL;
    if (c->state != ST_READY || c->loss_pending)
        return -ENOTCONN;
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->stmt_slot = -1;
    char err[sizeof c->last_error];
    size_t mark = pgc_error_mark(c);
    /* libpq copies sql and params into its output buffer here: nothing to keep. A refusal
     * leaves the pipeline in doubt, so the connection is reset (from the loop: callbacks may
     * not run inside this call). */
    int sent;
    int slot = prepared ? stmt_slot(c, sql) : -1;
    if (slot >= 0) {
        prepared_stmt *ps = &c->stmts[slot];
        char name[32];
        sent = 1;
        if (!ps->id) {
            /* Prepare and first Execute share one sync: no extra round trip. */
            if (++c->next_stmt_id == 0)
                c->next_stmt_id = 1;
            snprintf(name, sizeof name, "pgpace_%u", c->next_stmt_id);
            sent = PQsendPrepare(c->conn, name, sql, nparams, NULL);
            if (sent) {
                ps->sql = sql;
                ps->id = c->next_stmt_id;
                e->prepare_pending = true;
            }
        } else {
            snprintf(name, sizeof name, "pgpace_%u", ps->id);
        }
        e->stmt_slot = slot;
        e->stmt_id = ps->id;
        sent = sent && PQsendQueryPrepared(c->conn, name, nparams, params, NULL, NULL, 0);
    } else {
        sent = PQsendQueryParams(c->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    }
    if (!sent) {
        free(e);
        pgc_libpq_error(c, mark, err, sizeof err);
        pgc_lose_later(c, err);
        return -ENOTCONN;
    }
    e->cb = cb;
    e->arg = arg;
    pgc_push_entry(c, e);
    /* From here the statement is accepted: a failure reaches its callback as NULL. */
    if (!PQpipelineSync(c->conn)) {
        pgc_libpq_error(c, mark, err, sizeof err);
        pgc_lose_later(c, err);
    } else if (pgc_flush_and_arm(c, err, sizeof err) < 0) {
        pgc_lose_later(c, err);
    } else if (!PQisBusy(c->conn)) {
        uv_timer_start(&c->kick, kick_cb, 0, 0); /* a result is already buffered */
    }
    return 0;
}

int pgconn_query(pgconn *c, const char *sql, int nparams, const char *const *params,
                 pgconn_result_cb cb, void *arg)
{
    return send_query(c, sql, nparams, params, false, cb, arg);
}

int pgconn_query_prepared(pgconn *c, const char *sql, int nparams, const char *const *params,
                          pgconn_result_cb cb, void *arg)
{
    return send_query(c, sql, nparams, params, true, cb, arg);
}

size_t pgconn_pending(const pgconn *c)
{
    return c->npending;
}

void pgconn_read_ahead(pgconn *c)
{
    /* Only bytes into libpq's buffer: nothing is parsed or delivered here. A failure leaves the
     * connection BAD, which the loop's next step (or the one this callback runs in) handles. */
    if (c->state == ST_READY && c->conn && !c->loss_pending && c->npending > 0)
        (void)PQconsumeInput(c->conn);
}

void pgconn_keep_result(pgconn *c)
{
    c->result_kept = true;
}
