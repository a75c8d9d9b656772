/* session_check.c - the session check (contract in session_check.h): probe A and the reads on
 * the checked pgconn, B on a second connection of its own driven with libpq's non-blocking calls
 * on the loop. The second connection is raw libpq, not a pgconn: it is one statement long,
 * must not reconnect, and must not log as the dispatcher's connection does.
 */
#include "session_check.h"

#include "prng.h"
#include "sql_embed.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A, B, then the reads on the checked connection (C, D, ...). */
enum { PROBE_A, PROBE_B, PROBE_READS, PROBES = PROBE_READS + SESSION_CHECK_READS };

struct session_check {
    uv_loop_t *loop;
    pgconn *conn; /* the checked connection; never touched once `done` */
    char *conninfo, *app_name;
    int timeout_ms;
    session_check_cb cb;
    void *arg;
    bool done;        /* the callback ran or cancel was called */
    bool conn_busy;   /* a probe on the checked connection whose callback has not run */
    int handles;      /* open libuv handles: the timer and the second connection's watch */
    uv_timer_t timer; /* B's deadline */
    /* B's connection: connecting until `side_query_sent`, then reading its answer. */
    PGconn *side;
    uv_poll_t *watch;
    int watch_fd;
    bool side_query_sent;
    char side_error[256]; /* why B did not answer, "" if it did */
    session_probe probe[PROBES];
    int next; /* the probe after the one on the checked connection in flight */
    char nonce[17];
};

static void on_handle_closed(uv_handle_t *h);
static void send_probe(session_check *s, int which);

static void maybe_free(session_check *s)
{
    if (!s->done || s->conn_busy || s->handles > 0)
        return;
    free(s->conninfo);
    free(s->app_name);
    free(s);
}

static void on_handle_closed(uv_handle_t *h)
{
    session_check *s = h->data;
    if (h != (uv_handle_t *)&s->timer)
        free(h);
    s->handles--;
    maybe_free(s);
}

/* ---- the second connection (B) ---- */

static void side_close(session_check *s)
{
    if (s->watch) {
        uv_poll_stop(s->watch);
        uv_close((uv_handle_t *)s->watch, on_handle_closed);
        s->watch = NULL;
    }
    if (s->side) {
        PQfinish(s->side);
        s->side = NULL;
    }
    if (!uv_is_closing((uv_handle_t *)&s->timer))
        uv_timer_stop(&s->timer);
}

/* Copies libpq's message without its final newline: it goes into one log line. */
static void copy_message(char *out, size_t len, const char *msg)
{
    snprintf(out, len, "%s", msg);
    size_t n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        out[--n] = '\0';
}

/* B is over, answered or not: the checked connection's probes go on. */
static void side_end(session_check *s, const char *why)
{
    if (why && !s->side_error[0])
        copy_message(s->side_error, sizeof s->side_error, why);
    side_close(s);
    send_probe(s, PROBE_READS);
}

static void on_side_event(uv_poll_t *w, int status, int events);

/* Watches B's current socket for `events`; libpq may have replaced it while connecting. */
static int side_watch(session_check *s, int events)
{
    int fd = PQsocket(s->side);
    if (fd < 0)
        return -EBADF;
    if (s->watch && s->watch_fd != fd) {
        uv_poll_stop(s->watch);
        uv_close((uv_handle_t *)s->watch, on_handle_closed);
        s->watch = NULL;
    }
    if (!s->watch) {
        uv_poll_t *w = calloc(1, sizeof *w);
        if (!w)
            return -ENOMEM;
        int rc = uv_poll_init_socket(s->loop, w, fd);
        if (rc < 0) {
            free(w);
            return rc;
        }
        w->data = s;
        s->watch = w;
        s->watch_fd = fd;
        s->handles++;
    }
    return uv_poll_start(s->watch, events, on_side_event);
}

static void parse_probe(const PGresult *res, session_probe *p)
{
    p->seen = true;
    p->pid = strtoll(PQgetvalue(res, 0, SQL_SESSION_PROBE_C_PID), NULL, 10);
    p->server_start = strtoll(PQgetvalue(res, 0, SQL_SESSION_PROBE_C_SERVER_START), NULL, 10);
    snprintf(p->nonce, sizeof p->nonce, "%s", PQgetvalue(res, 0, SQL_SESSION_PROBE_C_NONCE));
}

static bool probe_shape_ok(const PGresult *res)
{
    return PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
           PQnfields(res) == SQL_SESSION_PROBE_NCOLS;
}

/* B is connected: send its probe (the nonce parameter NULL: read only). */
static void side_send(session_check *s)
{
    const char *params[] = {[SQL_SESSION_PROBE_P_NONCE] = NULL};
    if (PQsetnonblocking(s->side, 1) != 0 ||
        !PQsendQueryParams(s->side, sql_q_session_probe, SQL_SESSION_PROBE_NPARAMS, NULL, params,
                           NULL, NULL, 0)) {
        side_end(s, PQerrorMessage(s->side));
        return;
    }
    s->side_query_sent = true;
    int f = PQflush(s->side);
    if (f < 0 || side_watch(s, f > 0 ? UV_READABLE | UV_WRITABLE : UV_READABLE) != 0)
        side_end(s, f < 0 ? PQerrorMessage(s->side) : "cannot watch the socket");
}

static void side_read(session_check *s)
{
    if (!PQconsumeInput(s->side)) {
        side_end(s, PQerrorMessage(s->side));
        return;
    }
    if (PQisBusy(s->side))
        return;
    PGresult *res = PQgetResult(s->side);
    const char *why = NULL;
    if (res && probe_shape_ok(res))
        parse_probe(res, &s->probe[PROBE_B]);
    else
        why = res ? PQresultErrorMessage(res) : "no result";
    side_end(s, why); /* copies why; PQfinish discards whatever else was coming */
    PQclear(res);
}

static void side_connect_step(session_check *s)
{
    if (s->watch) {
        /* libpq may close or replace the socket in PQconnectPoll: the watch must not be on. */
        uv_poll_stop(s->watch);
    }
    switch (PQconnectPoll(s->side)) {
    case PGRES_POLLING_READING:
        if (side_watch(s, UV_READABLE) != 0)
            side_end(s, "cannot watch the socket");
        return;
    case PGRES_POLLING_WRITING:
        if (side_watch(s, UV_WRITABLE) != 0)
            side_end(s, "cannot watch the socket");
        return;
    case PGRES_POLLING_OK:
        side_send(s);
        return;
    default:
        side_end(s, PQerrorMessage(s->side));
        return;
    }
}

static void on_side_event(uv_poll_t *w, int status, int events)
{
    session_check *s = w->data;
    if (status < 0)
        events |= UV_READABLE; /* the error shows in what libpq reads next */
    if (!s->side_query_sent) {
        side_connect_step(s);
        return;
    }
    if (events & UV_WRITABLE) {
        int f = PQflush(s->side);
        if (f < 0) {
            side_end(s, PQerrorMessage(s->side));
            return;
        }
        if (f == 0 && side_watch(s, UV_READABLE) != 0) {
            side_end(s, "cannot watch the socket");
            return;
        }
    }
    if (events & UV_READABLE)
        side_read(s);
}

static void on_side_timeout(uv_timer_t *t)
{
    session_check *s = t->data;
    char why[96];
    snprintf(why, sizeof why, "a second connection got no session within %d ms", s->timeout_ms);
    side_end(s, why);
}

static void side_start(session_check *s)
{
    const char *const keys[] = {"dbname", "application_name", NULL};
    const char *const vals[] = {s->conninfo, s->app_name, NULL};
    s->side = PQconnectStartParams(keys, vals, 1);
    if (!s->side || PQstatus(s->side) == CONNECTION_BAD) {
        side_end(s, s->side ? PQerrorMessage(s->side) : "out of memory");
        return;
    }
    uv_timer_start(&s->timer, on_side_timeout, (uint64_t)s->timeout_ms, 0);
    /* libpq: before the first PQconnectPoll, behave as if it had asked for writable. */
    if (side_watch(s, UV_WRITABLE) != 0)
        side_end(s, "cannot watch the socket");
}

/* ---- the checked connection (A and the reads) ---- */

static void finish(session_check *s, session_check_outcome outcome, const char *detail)
{
    s->done = true;
    side_close(s);
    uv_close((uv_handle_t *)&s->timer, on_handle_closed);
    s->cb(outcome, detail, s->arg);
    maybe_free(s);
}

static void decide(session_check *s)
{
    const session_probe *p = s->probe;
    const char *why =
        session_check_verdict(&p[PROBE_A], &p[PROBE_B], &p[PROBE_READS], SESSION_CHECK_READS);
    if (why)
        finish(s, SESSION_CHECK_POOLED, why);
    else if (!p[PROBE_B].seen)
        finish(s, SESSION_CHECK_UNVERIFIED, s->side_error);
    else
        finish(s, SESSION_CHECK_OWN, "");
}

static void on_probe(pgconn *conn, PGresult *res, void *arg)
{
    (void)conn;
    session_check *s = arg;
    s->conn_busy = false;
    if (s->done) {
        maybe_free(s);
        return;
    }
    if (!res) {
        finish(s, SESSION_CHECK_LOST, "the connection was lost");
        return;
    }
    if (!probe_shape_ok(res)) {
        char why[256];
        copy_message(why, sizeof why, PQresultErrorMessage(res));
        finish(s, SESSION_CHECK_FAILED, why);
        return;
    }
    int which = s->next - 1;
    parse_probe(res, &s->probe[which]);
    if (which == PROBE_A)
        side_start(s);
    else if (which + 1 < PROBES)
        send_probe(s, which + 1);
    else
        decide(s);
}

static void send_probe(session_check *s, int which)
{
    const char *params[] = {[SQL_SESSION_PROBE_P_NONCE] = which == PROBE_A ? s->nonce : NULL};
    int rc =
        pgconn_query(s->conn, sql_q_session_probe, SQL_SESSION_PROBE_NPARAMS, params, on_probe, s);
    if (rc == 0) {
        s->conn_busy = true;
        s->next = which + 1;
        return;
    }
    if (which != PROBE_A) /* A's failure is session_check_start's return value */
        finish(s, rc == -ENOTCONN ? SESSION_CHECK_LOST : SESSION_CHECK_FAILED,
               rc == -ENOTCONN ? "the connection was lost" : "out of memory");
}

int session_check_start(uv_loop_t *loop, pgconn *conn, const char *conninfo,
                        const char *application_name, int timeout_ms, session_check_cb cb,
                        void *arg, session_check **out)
{
    *out = NULL;
    session_check *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->conninfo = strdup(conninfo);
    s->app_name = strdup(application_name);
    if (!s->conninfo || !s->app_name) {
        free(s->conninfo);
        free(s->app_name);
        free(s);
        return -ENOMEM;
    }
    s->loop = loop;
    s->conn = conn;
    s->timeout_ms = timeout_ms;
    s->cb = cb;
    s->arg = arg;
    s->watch_fd = -1;
    /* Only has to differ from what another session could hold: not a secret. */
    prng r;
    prng_seed(&r);
    snprintf(s->nonce, sizeof s->nonce, "%016" PRIx64, prng_next(&r));
    send_probe(s, PROBE_A);
    if (!s->conn_busy) {
        int rc = pgconn_ready(conn) ? -ENOMEM : -ENOTCONN;
        free(s->conninfo);
        free(s->app_name);
        free(s);
        return rc;
    }
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    s->handles = 1;
    *out = s;
    return 0;
}

void session_check_cancel(session_check *s)
{
    if (!s || s->done)
        return;
    s->done = true;
    side_close(s);
    uv_close((uv_handle_t *)&s->timer, on_handle_closed);
    maybe_free(s);
}

/* ---- blocking, for the command line ---- */

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until B's socket is ready for `events` (POLLIN/POLLOUT) or the deadline passed. */
static bool wait_socket(PGconn *c, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = PQsocket(c), .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

/* B, blocking: connects, sends the read, returns what it saw or why not (in why). */
static void blocking_side(const char *conninfo, const char *app_name, int timeout_ms,
                          session_probe *b, char *why, size_t why_len)
{
    long long deadline = now_ms() + timeout_ms;
    const char *const keys[] = {"dbname", "application_name", NULL};
    const char *const vals[] = {conninfo, app_name, NULL};
    PGconn *c = PQconnectStartParams(keys, vals, 1);
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (c && PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
           st != PGRES_POLLING_FAILED) {
        if (!wait_socket(c, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline))
            break;
        st = PQconnectPoll(c);
    }
    const char *params[] = {[SQL_SESSION_PROBE_P_NONCE] = NULL};
    bool sent = c && st == PGRES_POLLING_OK && PQsetnonblocking(c, 1) == 0 &&
                PQsendQueryParams(c, sql_q_session_probe, SQL_SESSION_PROBE_NPARAMS, NULL, params,
                                  NULL, NULL, 0);
    int f = sent ? PQflush(c) : -1;
    while (f > 0 && wait_socket(c, POLLOUT, deadline))
        f = PQflush(c);
    bool answered = false;
    while (f == 0 && wait_socket(c, POLLIN, deadline)) {
        if (!PQconsumeInput(c))
            break;
        if (PQisBusy(c))
            continue;
        PGresult *res = PQgetResult(c);
        if (res && probe_shape_ok(res))
            parse_probe(res, b);
        else
            copy_message(why, why_len, res ? PQresultErrorMessage(res) : "no result");
        PQclear(res);
        answered = true;
        break;
    }
    if (!answered && !why[0]) {
        if (!c)
            snprintf(why, why_len, "out of memory");
        else if ((PQstatus(c) == CONNECTION_BAD || st == PGRES_POLLING_FAILED || f < 0))
            copy_message(why, why_len, PQerrorMessage(c));
        else
            snprintf(why, why_len, "a second connection got no session within %d ms", timeout_ms);
    }
    PQfinish(c);
}

static bool blocking_probe(PGconn *conn, const char *nonce, session_probe *p, char *why,
                           size_t why_len)
{
    const char *params[] = {[SQL_SESSION_PROBE_P_NONCE] = nonce};
    PGresult *res = PQexecParams(conn, sql_q_session_probe, SQL_SESSION_PROBE_NPARAMS, NULL, params,
                                 NULL, NULL, 0);
    bool ok = res && probe_shape_ok(res);
    if (ok)
        parse_probe(res, p);
    else
        copy_message(why, why_len, res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
    PQclear(res);
    return ok;
}

session_check_outcome session_check_run(PGconn *conn, const char *conninfo,
                                        const char *application_name, int timeout_ms, char *detail,
                                        size_t detail_len)
{
    session_probe p[PROBES] = {{0}};
    char nonce[17];
    prng r;
    prng_seed(&r);
    snprintf(nonce, sizeof nonce, "%016" PRIx64, prng_next(&r));
    detail[0] = '\0';
    if (!blocking_probe(conn, nonce, &p[PROBE_A], detail, detail_len))
        return SESSION_CHECK_FAILED;
    char side_error[256] = "";
    blocking_side(conninfo, application_name, timeout_ms, &p[PROBE_B], side_error,
                  sizeof side_error);
    for (int i = PROBE_READS; i < PROBES; i++)
        if (!blocking_probe(conn, NULL, &p[i], detail, detail_len))
            return SESSION_CHECK_FAILED;
    const char *why =
        session_check_verdict(&p[PROBE_A], &p[PROBE_B], &p[PROBE_READS], SESSION_CHECK_READS);
    snprintf(detail, detail_len, "%s", why ? why : p[PROBE_B].seen ? "" : side_error);
    return why               ? SESSION_CHECK_POOLED
           : p[PROBE_B].seen ? SESSION_CHECK_OWN
                             : SESSION_CHECK_UNVERIFIED;
}

/* ---- the decision ---- */

static bool same_session(const session_probe *x, const session_probe *y)
{
    return x->pid == y->pid && x->server_start == y->server_start;
}

const char *session_check_verdict(const session_probe *a, const session_probe *b,
                                  const session_probe *reads, int n_reads)
{
    if (b->seen && same_session(a, b))
        return "a second connection was given this connection's server session";
    if (b->seen && strcmp(b->nonce, a->nonce) == 0)
        return "a second connection saw the value this connection set in its session";
    for (int i = 0; i < n_reads; i++) {
        if (!same_session(a, &reads[i]))
            return "this connection's statements ran in different server sessions";
        if (strcmp(reads[i].nonce, a->nonce) != 0)
            return "a value this connection set in its session was gone by a later statement";
    }
    return NULL;
}
