/* pgconn.c - one asynchronous, pipelined, self-reconnecting PostgreSQL connection on libuv. */
#include "pgconn.h"

#include "backoff.h"
#include "log.h"
#include "prng.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the connection is. Every wait is armed for exactly one of these states. */
typedef enum conn_state {
    ST_IDLE,       /* created, pgconn_start not called yet */
    ST_BACKOFF,    /* no PGconn; the timer fires the next connection attempt */
    ST_CONNECTING, /* PQconnectPoll in progress; the timer is the attempt's deadline */
    ST_LISTENING,  /* connected, pipeline on, LISTENs in flight; the deadline still runs */
    ST_READY,      /* accepting queries; the timer only serves a deferred loss */
    ST_CLOSING,    /* pgconn_close called; waiting for the handles' close callbacks */
} conn_state;

/* One statement sent to the server whose outcome has not been delivered yet. */
typedef struct entry {
    struct entry *next;
    pgconn_result_cb cb; /* NULL: the outcome is dropped */
    void *arg;
    PGresult *last; /* the latest result of this statement, delivered at its sync */
    bool internal;  /* one of our LISTENs: no user callback, not counted as pending */
    int stmt_slot;  /* c->stmts index when sent as a prepared statement, else -1 */
    unsigned stmt_id;
    bool prepare_pending; /* carried the Prepare: the next result is the Prepare's own */
    bool prepare_failed;
} entry;

/* A statement prepared on the current session, keyed by the address of its text. */
typedef struct prepared_stmt {
    const char *sql;
    unsigned id; /* the server-side name is "pgpace_<id>"; 0 = free slot */
    bool ready;  /* its Prepare succeeded; until then calls go out unprepared, so nothing is
                    queued behind a Prepare that may fail */
} prepared_stmt;

#define PGCONN_MAX_PREPARED 32

/* A uv_poll_t for one socket. libpq may replace its socket while connecting (another host or
 * address), and a poll handle is bound to one fd for life, so each socket gets its own watch,
 * freed in its close callback. */
typedef struct sock_watch {
    uv_poll_t poll;
    pgconn *owner;
    int fd;
    int events; /* what the handle is started with; 0 when stopped */
} sock_watch;

struct pgconn {
    uv_loop_t *loop;
    uv_timer_t timer;  /* reconnect backoff, connect deadline, or a deferred loss */
    uv_timer_t kick;   /* processes results libpq read while sending (see send_query) */
    sock_watch *watch; /* the current socket's watch, NULL when none */
    int handles;       /* open libuv handles (the timer and every watch not yet closed) */

    conn_state state;
    unsigned gen;      /* bumped on every loss and on close: code that ran user callbacks
                          checks it to know the PGconn it held is gone */
    PGconn *conn;      /* NULL unless CONNECTING, LISTENING or READY */
    bool loss_pending; /* a send failed in user context; the timer reports the loss */
    int attempt;       /* reconnect attempts since the last READY, for the backoff */
    int poll_errors;   /* poll callbacks in a row with an error status */
    prng rng;          /* the reconnect backoff's jitter */

    prepared_stmt stmts[PGCONN_MAX_PREPARED]; /* emptied on every loss */
    unsigned next_stmt_id;

    entry *head, *tail; /* statements in flight, in sending order */
    size_t npending;    /* user entries among them */
    int listens_left;   /* LISTENs not yet synced after a connect */

    /* Options, copied. */
    char *conninfo;
    char *application_name;
    char **listen; /* NULL-terminated, never NULL itself */
    int nlisten;
    int keepalive_idle_s;
    int reconnect_min_ms;
    int reconnect_max_ms;
    pgconn_state_cb on_state;
    pgconn_notify_cb on_notify;
    void *arg;

    pgconn_closed_cb closed_cb;
    void *closed_arg;

    char last_error[1024]; /* connection-level error of the last loss or failed attempt */
    char fatal_msg[512];   /* a FATAL the server sent before hanging up (why we were cut) */
};

static void timer_cb(uv_timer_t *t);
static void poll_cb(uv_poll_t *p, int status, int events);
static void conn_lost(pgconn *c, const char *error);

/* ---- small helpers ---- */

static void free_conn(pgconn *c)
{
    free(c->conninfo);
    free(c->application_name);
    for (char **l = c->listen; l && *l; l++)
        free(*l);
    free(c->listen);
    free(c);
}

static void handle_closed(uv_handle_t *h)
{
    pgconn *c;
    if (h->type == UV_POLL) {
        sock_watch *w = h->data;
        c = w->owner;
        free(w);
    } else {
        c = h->data;
    }
    assert(c->handles > 0);
    if (--c->handles > 0 || c->state != ST_CLOSING)
        return;
    pgconn_closed_cb cb = c->closed_cb;
    void *arg = c->closed_arg;
    free_conn(c);
    if (cb)
        cb(arg);
}

/* Copies a libpq message into dst as one line: whitespace runs (libpq's newlines and tabs)
 * become one space, trailing space is dropped. */
static void copy_line(char *dst, size_t size, const char *src)
{
    size_t n = 0;
    bool space = false;
    for (; *src && n + 1 < size; src++) {
        if (*src == ' ' || *src == '\n' || *src == '\t' || *src == '\r') {
            space = n > 0;
            continue;
        }
        if (space && n + 2 < size)
            dst[n++] = ' ';
        space = false;
        dst[n++] = *src;
    }
    dst[n] = '\0';
}

/* The connection-level error libpq reported since `mark` (the length of PQerrorMessage before
 * the failing call). libpq appends query errors to the same buffer in pipeline mode, and those
 * may quote parameter values, so only the tail written by the failing call is used; a FATAL
 * the server sent just before hanging up (the real reason) goes first. */
static void libpq_error(const pgconn *c, size_t mark, char *buf, size_t size)
{
    const char *msg = c->conn ? PQerrorMessage(c->conn) : "out of memory";
    size_t len = strlen(msg);
    char tail[sizeof c->last_error - sizeof c->fatal_msg - 2];
    copy_line(tail, sizeof tail, mark < len ? msg + mark : msg);
    if (tail[0] == '\0')
        snprintf(tail, sizeof tail, "connection broken");
    if (c->fatal_msg[0])
        snprintf(buf, size, "%s; %s", c->fatal_msg, tail);
    else
        snprintf(buf, size, "%s", tail);
}

static size_t error_mark(const pgconn *c)
{
    return strlen(PQerrorMessage(c->conn));
}

static bool is_fatal_severity(const char *sev)
{
    return sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0);
}

/* Server notices would go to stderr by default. Their text can quote data, so only the
 * severity and SQLSTATE are logged; a FATAL (sent as a notice when no query is running, e.g.
 * "terminating connection due to administrator command") is kept as the reason of the loss
 * that follows. */
static void notice_cb(void *arg, const PGresult *res)
{
    pgconn *c = arg;
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (is_fatal_severity(sev)) {
        const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        snprintf(c->fatal_msg, sizeof c->fatal_msg, "%s: %s", sev, m ? m : "");
    } else if (sev && strcmp(sev, "WARNING") == 0) {
        LOG_WARN("db_notice", LOG_S("severity", sev), LOG_S("sqlstate", state ? state : ""));
    } else {
        LOG_DEBUG("db_notice", LOG_S("severity", sev ? sev : ""),
                  LOG_S("sqlstate", state ? state : ""));
    }
}

static const char *conn_host(const pgconn *c)
{
    const char *h = c->conn ? PQhost(c->conn) : NULL;
    return h && *h ? h : "(default)";
}

static const char *conn_port(const pgconn *c)
{
    const char *p = c->conn ? PQport(c->conn) : NULL;
    return p && *p ? p : "(default)";
}

static int reconnect_delay_ms(pgconn *c)
{
    double r = prng_double(&c->rng);
    int64_t us = backoff_delay_us(c->attempt, (int64_t)c->reconnect_min_ms * 1000,
                                  (int64_t)c->reconnect_max_ms * 1000, r);
    int64_t ms = us / 1000;
    if (ms < c->reconnect_min_ms)
        ms = c->reconnect_min_ms;
    if (ms > c->reconnect_max_ms)
        ms = c->reconnect_max_ms;
    if (c->attempt < 62)
        c->attempt++;
    return (int)ms;
}

/* TCP keepalive idle + 3 probes: the same budget bounds a connection attempt, so a silent
 * server during connect is noticed as soon as it would be on an established connection. */
static int keepalive_interval_s(const pgconn *c)
{
    int i = c->keepalive_idle_s / 3;
    return i < 1 ? 1 : i;
}

static int64_t user_timeout_ms(const pgconn *c)
{
    return ((int64_t)c->keepalive_idle_s + 3 * (int64_t)keepalive_interval_s(c)) * 1000;
}

/* ---- the socket watch ---- */

static void watch_close(pgconn *c)
{
    sock_watch *w = c->watch;
    if (!w)
        return;
    c->watch = NULL;
    uv_close((uv_handle_t *)&w->poll, handle_closed);
}

/* Stops the watch before libpq may close or replace its socket (PQconnectPoll): libuv must
 * not watch an fd that gets closed, and a stopped handle re-registers from scratch. */
static void watch_pause(pgconn *c)
{
    if (c->watch) {
        uv_poll_stop(&c->watch->poll);
        c->watch->events = 0;
    }
}

/* Watches the connection's current socket for `events`, replacing the watch if libpq moved
 * to another fd. */
static int watch_set(pgconn *c, int events)
{
    assert(c->conn);
    assert(c->state == ST_CONNECTING || c->state == ST_LISTENING || c->state == ST_READY);
    assert(events == UV_READABLE || events == UV_WRITABLE || events == (UV_READABLE | UV_WRITABLE));
    int fd = PQsocket(c->conn);
    if (fd < 0)
        return -EBADF;
    if (c->watch && c->watch->fd != fd) {
        watch_pause(c);
        watch_close(c);
    }
    if (!c->watch) {
        sock_watch *w = calloc(1, sizeof *w);
        if (!w)
            return -ENOMEM;
        int rc = uv_poll_init_socket(c->loop, &w->poll, fd);
        if (rc < 0) {
            free(w);
            return rc;
        }
        w->poll.data = w;
        w->owner = c;
        w->fd = fd;
        c->watch = w;
        c->handles++;
    }
    if (c->watch->events == events)
        return 0;
    int rc = uv_poll_start(&c->watch->poll, events, poll_cb);
    if (rc < 0)
        return rc;
    c->watch->events = events;
    return 0;
}

/* ---- the queue ---- */

static void push_entry(pgconn *c, entry *e)
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
        if (e->cb)
            e->cb(c, res, e->arg);
    }
    PQclear(res);
    free(e);
}

/* Every statement in flight gets NULL, in order. The list is detached first, so callbacks
 * that call pgconn_query (refused: not READY) or pgconn_close see an empty queue. */
static void fail_pending(pgconn *c)
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

/* ---- loss and reconnection ---- */

/* The connection (or attempt) is gone: drop the PGconn, arm the reconnect, then tell the
 * owner: NULL to every pending callback, then on_state(LOST). Every failed attempt is
 * reported, so an owner can count them. */
static void conn_lost(pgconn *c, const char *error)
{
    assert(c->state == ST_CONNECTING || c->state == ST_LISTENING || c->state == ST_READY);
    snprintf(c->last_error, sizeof c->last_error, "%s", error);
    if (c->state == ST_READY)
        LOG_WARN("db_connection_lost", LOG_S("host", conn_host(c)), LOG_S("port", conn_port(c)),
                 LOG_S("error", c->last_error), LOG_I("pending", c->npending));
    else
        LOG_WARN("db_connect_failed", LOG_S("host", conn_host(c)), LOG_S("port", conn_port(c)),
                 LOG_S("error", c->last_error), LOG_I("attempt", c->attempt + 1));
    char host[256];
    snprintf(host, sizeof host, "%s", conn_host(c));

    c->gen++;
    watch_pause(c);
    watch_close(c);
    PQfinish(c->conn);
    c->conn = NULL;
    c->loss_pending = false;
    c->poll_errors = 0;
    c->listens_left = 0;
    c->fatal_msg[0] = '\0';
    memset(c->stmts, 0, sizeof c->stmts); /* prepared statements die with the session */
    c->state = ST_BACKOFF;

    int delay = reconnect_delay_ms(c);
    LOG_INFO("db_reconnecting", LOG_S("host", host), LOG_I("delay_ms", delay),
             LOG_I("attempt", c->attempt));
    uv_timer_start(&c->timer, timer_cb, (uint64_t)delay, 0);

    fail_pending(c);
    if (c->state == ST_BACKOFF && c->on_state)
        c->on_state(c, PGCONN_LOST, c->arg);
}

/* A failure noticed where user callbacks must not run (inside pgconn_query, which may itself
 * be called from a callback): the timer reports it from the loop. */
static void lose_later(pgconn *c, const char *error)
{
    assert(c->state == ST_READY);
    if (c->loss_pending)
        return;
    snprintf(c->last_error, sizeof c->last_error, "%s", error);
    c->loss_pending = true;
    uv_timer_start(&c->timer, timer_cb, 0, 0);
}

static void conn_lost_libpq(pgconn *c, size_t mark)
{
    char buf[sizeof c->last_error];
    libpq_error(c, mark, buf, sizeof buf);
    conn_lost(c, buf);
}

/* ---- connected: pipeline I/O ---- */

/* Flushes what libpq buffered and watches for the reply: always readable (results,
 * notifications, a hang-up), writable too while output remains. */
static int flush_and_arm(pgconn *c, char *err, size_t size)
{
    size_t mark = error_mark(c);
    int r = PQflush(c->conn);
    if (r < 0) {
        libpq_error(c, mark, err, size);
        return -EIO;
    }
    int rc = watch_set(c, UV_READABLE | (r > 0 ? UV_WRITABLE : 0));
    if (rc < 0) {
        snprintf(err, size, "cannot watch the socket: %s", uv_strerror(rc));
        return rc;
    }
    return 0;
}

static void become_ready(pgconn *c)
{
    assert(c->state == ST_LISTENING && c->listens_left == 0);
    uv_timer_stop(&c->timer); /* the connect deadline */
    c->state = ST_READY;
    c->attempt = 0;
    LOG_INFO("db_connected", LOG_S("host", conn_host(c)), LOG_S("port", conn_port(c)),
             LOG_I("backend_pid", PQbackendPID(c->conn)), LOG_I("channels", c->nlisten));
    if (c->on_state)
        c->on_state(c, PGCONN_READY, c->arg);
}

/* One of our LISTENs finished: any error means this session cannot serve the owner (e.g. a
 * standby refuses LISTEN), so the connection is dropped and retried like a loss. */
static void listen_done(pgconn *c, PGresult *res)
{
    assert(c->state == ST_LISTENING && c->listens_left > 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        char msg[sizeof c->last_error];
        char err[768];
        copy_line(err, sizeof err, PQresultErrorMessage(res));
        snprintf(msg, sizeof msg, "LISTEN failed: %s", err);
        PQclear(res);
        conn_lost(c, msg);
        return;
    }
    PQclear(res);
    if (--c->listens_left == 0)
        become_ready(c);
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
            conn_lost(c, c->fatal_msg);
            return;
        }
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            pop_entry(c);
            PGresult *res = e->last;
            e->last = NULL;
            if (e->internal) {
                free(e);
                listen_done(c, res);
            } else {
                deliver(c, e, res);
            }
            continue;
        }
        /* The statement's result (or, defensively, PGRES_PIPELINE_ABORTED, which cannot
         * happen with one sync per statement, delivered as the outcome all the same). */
        if (st == PGRES_FATAL_ERROR &&
            is_fatal_severity(PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED))) {
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

static void io_step(pgconn *c, int events)
{
    unsigned gen = c->gen;
    size_t mark = error_mark(c);
    if ((events & UV_READABLE) && !PQconsumeInput(c->conn)) {
        conn_lost_libpq(c, mark);
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
        conn_lost_libpq(c, strlen(PQerrorMessage(c->conn)));
        return;
    }
    char err[sizeof c->last_error];
    if (flush_and_arm(c, err, sizeof err) < 0)
        conn_lost(c, err);
}

/* Results libpq read into its buffer while sending, from user context: processed from the loop
 * (callbacks may not run inside pgconn_query). Without this, a result read during the flush of
 * the next statement (a claim's, under load) would wait until some later statement made the
 * socket readable again. */
static void kick_cb(uv_timer_t *t)
{
    pgconn *c = t->data;
    if (c->state == ST_READY && c->conn && !c->loss_pending)
        io_step(c, 0);
}

/* ---- connecting ---- */

/* Sends one LISTEN per channel, each with its own sync, as regular pipeline entries. */
static int send_listens(pgconn *c)
{
    for (char **l = c->listen; *l; l++) {
        char *ident = PQescapeIdentifier(c->conn, *l, strlen(*l));
        if (!ident)
            return -EIO;
        size_t len = strlen(ident) + sizeof "LISTEN ";
        char *sql = malloc(len);
        entry *e = calloc(1, sizeof *e);
        int ok = sql && e;
        if (ok) {
            e->stmt_slot = -1;
            snprintf(sql, len, "LISTEN %s", ident);
            ok = PQsendQueryParams(c->conn, sql, 0, NULL, NULL, NULL, NULL, 0) &&
                 PQpipelineSync(c->conn);
        }
        PQfreemem(ident);
        free(sql);
        if (!ok) {
            free(e);
            return -EIO;
        }
        e->internal = true;
        push_entry(c, e);
        c->listens_left++;
    }
    return 0;
}

static void connected(pgconn *c)
{
    assert(c->state == ST_CONNECTING);
    size_t mark = error_mark(c);
    if (PQsetnonblocking(c->conn, 1) != 0 || PQenterPipelineMode(c->conn) != 1) {
        conn_lost_libpq(c, mark);
        return;
    }
    c->state = ST_LISTENING;
    if (send_listens(c) < 0) {
        conn_lost_libpq(c, mark);
        return;
    }
    char err[sizeof c->last_error];
    if (flush_and_arm(c, err, sizeof err) < 0) {
        conn_lost(c, err);
        return;
    }
    if (c->listens_left == 0)
        become_ready(c);
}

/* Waits for what PQconnectPoll asked for, on whatever socket it now uses. */
static void connect_wait(pgconn *c, PostgresPollingStatusType st)
{
    int rc = watch_set(c, st == PGRES_POLLING_READING ? UV_READABLE : UV_WRITABLE);
    if (rc < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot watch the connection socket: %s", uv_strerror(rc));
        conn_lost(c, msg);
    }
}

static void connect_step(pgconn *c)
{
    assert(c->state == ST_CONNECTING);
    watch_pause(c);
    PostgresPollingStatusType st = PQconnectPoll(c->conn);
    switch (st) {
    case PGRES_POLLING_READING:
    case PGRES_POLLING_WRITING:
        connect_wait(c, st);
        break;
    case PGRES_POLLING_OK:
        connected(c);
        break;
    case PGRES_POLLING_FAILED:
    default:
        conn_lost_libpq(c, 0);
        break;
    }
}

static void start_connect(pgconn *c)
{
    assert(c->state == ST_BACKOFF && !c->conn && !c->watch);
    char idle[16], interval[16], user_timeout[24];
    snprintf(idle, sizeof idle, "%d", c->keepalive_idle_s);
    snprintf(interval, sizeof interval, "%d", keepalive_interval_s(c));
    snprintf(user_timeout, sizeof user_timeout, "%lld", (long long)user_timeout_ms(c));
    bool have_app = c->application_name && *c->application_name;
    /* Later keywords override the expanded conninfo: keepalives are ours (the contract
     * promises them), and so is application_name when the owner set one; otherwise the
     * conninfo may name it and "pgpace" is the fallback. */
    const char *const keys[] = {
        "dbname",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        have_app ? "application_name" : "fallback_application_name",
        NULL,
    };
    const char *const vals[] = {
        c->conninfo,
        "1",
        idle,
        interval,
        "3",
        user_timeout,
        have_app ? c->application_name : "pgpace",
        NULL,
    };
    c->state = ST_CONNECTING;
    c->fatal_msg[0] = '\0';
    c->conn = PQconnectStartParams(keys, vals, 1);
    if (!c->conn) {
        conn_lost(c, "out of memory starting a connection");
        return;
    }
    PQsetNoticeReceiver(c->conn, notice_cb, c);
    if (PQstatus(c->conn) == CONNECTION_BAD) {
        conn_lost_libpq(c, 0);
        return;
    }
    uv_timer_start(&c->timer, timer_cb, (uint64_t)user_timeout_ms(c), 0);
    /* libpq: before the first PQconnectPoll, behave as if it had asked for writable. */
    connect_wait(c, PGRES_POLLING_WRITING);
}

/* ---- libuv callbacks ---- */

static void timer_cb(uv_timer_t *t)
{
    pgconn *c = t->data;
    switch (c->state) {
    case ST_BACKOFF:
        start_connect(c);
        break;
    case ST_CONNECTING:
    case ST_LISTENING: {
        char msg[128];
        snprintf(msg, sizeof msg, "connection attempt timed out after %lld ms",
                 (long long)user_timeout_ms(c));
        conn_lost(c, msg);
        break;
    }
    case ST_READY:
        if (c->loss_pending) {
            char msg[sizeof c->last_error];
            memcpy(msg, c->last_error, sizeof msg);
            conn_lost(c, msg);
        }
        break;
    case ST_IDLE:
    case ST_CLOSING:
        break;
    }
}

static void poll_cb(uv_poll_t *p, int status, int events)
{
    sock_watch *w = p->data;
    pgconn *c = w->owner;
    assert(w == c->watch);
    if (c->loss_pending) {
        char msg[sizeof c->last_error];
        memcpy(msg, c->last_error, sizeof msg);
        conn_lost(c, msg);
        return;
    }
    if (status < 0) {
        /* libuv reports POLLERR as UV_EBADF and stops the handle. The socket's own error
         * (refused, reset) is what libpq finds and words best, so libpq looks first; only if
         * it sees nothing twice in a row does the poll error itself end the connection. */
        w->events = 0;
        if (++c->poll_errors > 2) {
            char msg[256];
            snprintf(msg, sizeof msg, "socket poll error: %s", uv_strerror(status));
            conn_lost(c, msg);
            return;
        }
        events = UV_READABLE | UV_WRITABLE;
    } else {
        c->poll_errors = 0;
    }
    switch (c->state) {
    case ST_CONNECTING:
        connect_step(c);
        break;
    case ST_LISTENING:
    case ST_READY:
        io_step(c, events);
        break;
    default:
        assert(!"poll event in a state without a socket");
        break;
    }
}

/* ---- public API ---- */

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *oom = true;
    return d;
}

int pgconn_new(uv_loop_t *loop, const pgconn_options *opts, pgconn **out)
{
    if (!loop || !opts || !out || !opts->conninfo || opts->keepalive_idle_s <= 0 ||
        opts->keepalive_idle_s > 86400 || opts->reconnect_min_ms <= 0 ||
        opts->reconnect_max_ms < opts->reconnect_min_ms)
        return -EINVAL;
    /* A malformed conninfo would fail every attempt forever: refuse it now. A bare database
     * name (no '=', not a URI) is valid and left to libpq. */
    const char *ci = opts->conninfo;
    if (strchr(ci, '=') || strncmp(ci, "postgresql://", 13) == 0 ||
        strncmp(ci, "postgres://", 11) == 0) {
        char *perr = NULL;
        PQconninfoOption *parsed = PQconninfoParse(ci, &perr);
        PQfreemem(perr); /* may quote a password: not logged */
        if (!parsed)
            return -EINVAL;
        PQconninfoFree(parsed);
    }

    pgconn *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    bool oom = false;
    size_t nlisten = 0;
    for (const char *const *l = opts->listen; l && *l; l++)
        nlisten++;
    c->conninfo = dup_or_null(opts->conninfo, &oom);
    c->application_name = dup_or_null(opts->application_name, &oom);
    c->listen = calloc(nlisten + 1, sizeof *c->listen);
    oom = oom || !c->listen;
    for (size_t i = 0; c->listen && i < nlisten; i++)
        c->listen[i] = dup_or_null(opts->listen[i], &oom);
    if (oom) {
        /* A failed copy leaves a NULL inside the list: free every slot, not up to it. */
        for (size_t i = 0; c->listen && i < nlisten; i++)
            free(c->listen[i]);
        free(c->listen);
        c->listen = NULL;
        free_conn(c);
        return -ENOMEM;
    }
    c->nlisten = (int)nlisten;
    c->loop = loop;
    c->keepalive_idle_s = opts->keepalive_idle_s;
    c->reconnect_min_ms = opts->reconnect_min_ms;
    c->reconnect_max_ms = opts->reconnect_max_ms;
    c->on_state = opts->on_state;
    c->on_notify = opts->on_notify;
    c->arg = opts->arg;
    c->state = ST_IDLE;
    prng_seed(&c->rng);
    int rc = uv_timer_init(loop, &c->timer);
    if (rc < 0) {
        free_conn(c);
        return rc;
    }
    c->timer.data = c;
    c->handles = 1;
    rc = uv_timer_init(loop, &c->kick);
    if (rc < 0) {
        /* The timer is initialised: it must be closed, which frees the struct afterwards. */
        c->state = ST_CLOSING;
        uv_close((uv_handle_t *)&c->timer, handle_closed);
        return rc;
    }
    c->kick.data = c;
    c->handles = 2;
    *out = c;
    return 0;
}

void pgconn_start(pgconn *c)
{
    if (c->state != ST_IDLE)
        return;
    /* The first attempt runs from the loop, so a connection that fails at once reports
     * through on_state from a loop callback, never from inside this call. */
    c->state = ST_BACKOFF;
    uv_timer_start(&c->timer, timer_cb, 0, 0);
}

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
    size_t mark = error_mark(c);
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
        libpq_error(c, mark, err, sizeof err);
        lose_later(c, err);
        return -ENOTCONN;
    }
    e->cb = cb;
    e->arg = arg;
    push_entry(c, e);
    /* From here the statement is accepted: a failure reaches its callback as NULL. */
    if (!PQpipelineSync(c->conn)) {
        libpq_error(c, mark, err, sizeof err);
        lose_later(c, err);
    } else if (flush_and_arm(c, err, sizeof err) < 0) {
        lose_later(c, err);
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

bool pgconn_ready(const pgconn *c)
{
    return c->state == ST_READY && !c->loss_pending;
}

size_t pgconn_pending(const pgconn *c)
{
    return c->npending;
}

const char *pgconn_last_error(const pgconn *c)
{
    return c->last_error;
}

void pgconn_reset(pgconn *c)
{
    if (c->state == ST_CONNECTING || c->state == ST_LISTENING || c->state == ST_READY)
        conn_lost(c, "connection reset by the application");
}

void pgconn_close(pgconn *c, pgconn_closed_cb closed_cb, void *arg)
{
    if (c->state == ST_CLOSING)
        return;
    c->state = ST_CLOSING;
    c->gen++;
    c->closed_cb = closed_cb;
    c->closed_arg = arg;
    c->loss_pending = false;
    watch_pause(c);
    watch_close(c);
    PQfinish(c->conn);
    c->conn = NULL;
    uv_close((uv_handle_t *)&c->timer, handle_closed);
    uv_close((uv_handle_t *)&c->kick, handle_closed);
    fail_pending(c);
}
