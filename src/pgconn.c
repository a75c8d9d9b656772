/* pgconn.c - one asynchronous, self-reconnecting PostgreSQL connection on libuv (pgconn.h): the
 * object's lifecycle (new, start, reset, close), the socket watch and the libuv callbacks,
 * connecting with TCP keepalives, the LISTENs of each new session, loss and reconnection with
 * jittered backoff, and libpq's error text. Statements in flight, prepared statements, results
 * and notifications are pgconn_pipeline.c's.
 */
#include "pgconn.h"
#include "pgconn_internal.h"

#include "backoff.h"
#include "conn_hosts.h"
#include "log.h"
#include "prng.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void timer_cb(uv_timer_t *t);
static void poll_cb(uv_poll_t *p, int status, int events);

/* ---- small helpers ---- */

static void free_conn(pgconn *c)
{
    free(c->conninfo);
    free(c->hosts);
    free(c->hostaddrs);
    free(c->ports);
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
void pgc_libpq_error(const pgconn *c, size_t mark, char *buf, size_t size)
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

size_t pgc_error_mark(const pgconn *c)
{
    return strlen(PQerrorMessage(c->conn));
}

bool pgc_is_fatal_severity(const char *sev)
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
    if (pgc_is_fatal_severity(sev)) {
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

/* The deadline of one host within an attempt. The socket's tcp_user_timeout (user_timeout_ms)
 * already fails a connect that no SYN-ACK answers (measured: a host whose SYNs are dropped fails
 * after exactly that, and libpq goes on to the next host), so this one, a little longer, only
 * ends an attempt at a host that took the connection but never answered. */
#define HOST_DEADLINE_SLACK_MS 2000

static uint64_t host_deadline_ms(const pgconn *c)
{
    return (uint64_t)(user_timeout_ms(c) + HOST_DEADLINE_SLACK_MS);
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
int pgc_watch_set(pgconn *c, int events)
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

/* ---- loss and reconnection ---- */

/* The connection (or attempt) is gone: drop the PGconn, arm the reconnect, then tell the
 * owner: NULL to every pending callback, then on_state(LOST). Every failed attempt is
 * reported, so an owner can count them. */
void pgc_conn_lost(pgconn *c, const char *error)
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

    pgc_fail_pending(c);
    if (c->state == ST_BACKOFF && c->on_state)
        c->on_state(c, PGCONN_LOST, c->arg);
}

/* A failure noticed where user callbacks must not run (inside pgconn_query, which may itself
 * be called from a callback): the timer reports it from the loop. */
void pgc_lose_later(pgconn *c, const char *error)
{
    assert(c->state == ST_READY);
    if (c->loss_pending)
        return;
    snprintf(c->last_error, sizeof c->last_error, "%s", error);
    c->loss_pending = true;
    uv_timer_start(&c->timer, timer_cb, 0, 0);
}

void pgc_conn_lost_libpq(pgconn *c, size_t mark)
{
    char buf[sizeof c->last_error];
    pgc_libpq_error(c, mark, buf, sizeof buf);
    pgc_conn_lost(c, buf);
}

/* ---- connecting ---- */

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
void pgc_listen_done(pgconn *c, PGresult *res)
{
    assert(c->state == ST_LISTENING && c->listens_left > 0);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        char msg[sizeof c->last_error];
        char err[768];
        copy_line(err, sizeof err, PQresultErrorMessage(res));
        snprintf(msg, sizeof msg, "LISTEN failed: %s", err);
        PQclear(res);
        pgc_conn_lost(c, msg);
        return;
    }
    PQclear(res);
    if (--c->listens_left == 0)
        become_ready(c);
}

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
        pgc_push_entry(c, e);
        c->listens_left++;
    }
    return 0;
}

static void connected(pgconn *c)
{
    assert(c->state == ST_CONNECTING);
    size_t mark = pgc_error_mark(c);
    if (PQsetnonblocking(c->conn, 1) != 0 || PQenterPipelineMode(c->conn) != 1) {
        pgc_conn_lost_libpq(c, mark);
        return;
    }
    c->state = ST_LISTENING;
    if (send_listens(c) < 0) {
        pgc_conn_lost_libpq(c, mark);
        return;
    }
    char err[sizeof c->last_error];
    if (pgc_flush_and_arm(c, err, sizeof err) < 0) {
        pgc_conn_lost(c, err);
        return;
    }
    if (c->listens_left == 0)
        become_ready(c);
}

/* Waits for what PQconnectPoll asked for, on whatever socket it now uses. */
static void connect_wait(pgconn *c, PostgresPollingStatusType st)
{
    int rc = pgc_watch_set(c, st == PGRES_POLLING_READING ? UV_READABLE : UV_WRITABLE);
    if (rc < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot watch the connection socket: %s", uv_strerror(rc));
        pgc_conn_lost(c, msg);
    }
}

/* libpq moved on to another host of the list (the one before failed or was not what
 * target_session_attrs asks for): that host gets a deadline of its own. */
static void note_attempt_host(pgconn *c)
{
    const char *host = PQhost(c->conn), *port = PQport(c->conn);
    if (host == c->attempt_host && port == c->attempt_port)
        return;
    if (c->attempt_host || c->attempt_port)
        uv_timer_start(&c->timer, timer_cb, host_deadline_ms(c), 0);
    c->attempt_host = host;
    c->attempt_port = port;
}

static void connect_step(pgconn *c)
{
    assert(c->state == ST_CONNECTING);
    watch_pause(c);
    PostgresPollingStatusType st = PQconnectPoll(c->conn);
    switch (st) {
    case PGRES_POLLING_READING:
    case PGRES_POLLING_WRITING:
        note_attempt_host(c);
        connect_wait(c, st);
        break;
    case PGRES_POLLING_OK:
        connected(c);
        break;
    case PGRES_POLLING_FAILED:
    default:
        pgc_conn_lost_libpq(c, 0);
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
    const char *keys[11] = {
        "dbname",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        have_app ? "application_name" : "fallback_application_name",
    };
    const char *vals[11] = {
        c->conninfo,
        "1",
        idle,
        interval,
        "3",
        user_timeout,
        have_app ? c->application_name : "pgpace",
    };
    /* After attempts that timed out, the hosts in another order (conn_hosts.h); a list of
     * another length than the hosts' (one port for all) stays as it is. An empty value would be
     * ignored by libpq, so only lists that exist are given. */
    size_t nk = 7;
    char *rotated[3] = {NULL, NULL, NULL};
    if (c->n_hosts > 1 && c->rotation % c->n_hosts != 0) {
        static const char *const names[] = {"host", "hostaddr", "port"};
        const char *lists[] = {c->hosts, c->hostaddrs, c->ports};
        for (size_t i = 0; i < 3; i++) {
            if (conn_list_count(lists[i]) != c->n_hosts)
                continue;
            rotated[i] = conn_list_rotate(lists[i], c->rotation);
            if (rotated[i]) {
                keys[nk] = names[i];
                vals[nk++] = rotated[i];
            }
        }
    }
    keys[nk] = NULL;
    vals[nk] = NULL;
    c->state = ST_CONNECTING;
    c->fatal_msg[0] = '\0';
    c->attempt_host = c->attempt_port = NULL;
    c->conn = PQconnectStartParams(keys, vals, 1);
    for (size_t i = 0; i < 3; i++)
        free(rotated[i]);
    if (!c->conn) {
        pgc_conn_lost(c, "out of memory starting a connection");
        return;
    }
    PQsetNoticeReceiver(c->conn, notice_cb, c);
    if (PQstatus(c->conn) == CONNECTION_BAD) {
        pgc_conn_lost_libpq(c, 0);
        return;
    }
    uv_timer_start(&c->timer, timer_cb, host_deadline_ms(c), 0);
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
        snprintf(msg, sizeof msg, "connection attempt timed out after %llu ms",
                 (unsigned long long)host_deadline_ms(c));
        /* The next attempt starts with the next host: this one may hang every attempt. */
        if (c->n_hosts > 1)
            c->rotation = (c->rotation + 1) % c->n_hosts;
        pgc_conn_lost(c, msg);
        break;
    }
    case ST_READY:
        if (c->loss_pending) {
            char msg[sizeof c->last_error];
            memcpy(msg, c->last_error, sizeof msg);
            pgc_conn_lost(c, msg);
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
        pgc_conn_lost(c, msg);
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
            pgc_conn_lost(c, msg);
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
        pgc_io_step(c, events);
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

/* A keyword's value in a parsed conninfo (NULL: none), else the environment variable libpq
 * would take it from; NULL when neither gives a non-empty one. */
static const char *conninfo_value(const PQconninfoOption *opts, const char *key, const char *env)
{
    for (const PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, key) == 0 && o->val && *o->val)
            return o->val;
    const char *v = getenv(env);
    return v && *v ? v : NULL;
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
    PQconninfoOption *parsed = NULL;
    if (strchr(ci, '=') || strncmp(ci, "postgresql://", 13) == 0 ||
        strncmp(ci, "postgres://", 11) == 0) {
        char *perr = NULL;
        parsed = PQconninfoParse(ci, &perr);
        PQfreemem(perr); /* may quote a password: not logged */
        if (!parsed)
            return -EINVAL;
    }

    pgconn *c = calloc(1, sizeof *c);
    if (!c) {
        PQconninfoFree(parsed);
        return -ENOMEM;
    }
    bool oom = false;
    /* The host lists, as libpq will see them: from the conninfo, else the environment. */
    const char *hosts = conninfo_value(parsed, "host", "PGHOST");
    const char *hostaddrs = conninfo_value(parsed, "hostaddr", "PGHOSTADDR");
    c->hosts = dup_or_null(hosts, &oom);
    c->hostaddrs = dup_or_null(hostaddrs, &oom);
    c->ports = dup_or_null(conninfo_value(parsed, "port", "PGPORT"), &oom);
    c->n_hosts = conn_list_count(hosts ? hosts : hostaddrs);
    PQconninfoFree(parsed);
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

bool pgconn_ready(const pgconn *c)
{
    return c->state == ST_READY && !c->loss_pending;
}

const char *pgconn_last_error(const pgconn *c)
{
    return c->last_error;
}

void pgconn_reset(pgconn *c)
{
    if (c->state == ST_CONNECTING || c->state == ST_LISTENING || c->state == ST_READY)
        pgc_conn_lost(c, "connection reset by the application");
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
    pgc_fail_pending(c);
}
