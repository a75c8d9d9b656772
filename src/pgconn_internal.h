/* pgconn_internal.h - what the two files of a pgconn share: the struct and the calls between
 * them. Private to them; the public contract is pgconn.h.
 *
 * Who owns what:
 * - pgconn.c           the connection: create, start, reset, close; the socket watch and the
 *                      libuv callbacks; connecting with keepalives, the LISTENs of a new session,
 *                      becoming READY; loss and reconnection with backoff; libpq's error text.
 * - pgconn_pipeline.c  statements in flight: the queue, prepared statements, sending, reading
 *                      results and delivering them in order, notifications.
 *
 * Contract between them:
 * - Everything runs on the loop thread. c->state, c->conn and the socket watch are pgconn.c's:
 *   pgconn_pipeline.c sends only while READY (pgconn.c queues the LISTENs, as internal entries,
 *   while LISTENING) and reports trouble through pgc_conn_lost() from a loop callback, or
 *   pgc_lose_later() from inside a user's call.
 * - c->gen changes on every loss and on close: code that ran a user callback or pgc_conn_lost()
 *   compares it before touching c->conn again.
 * - pgc_fail_pending() and pgc_conn_lost() run user callbacks; pgc_lose_later() never does.
 */
#ifndef PGPACE_PGCONN_INTERNAL_H
#define PGPACE_PGCONN_INTERNAL_H

#include "pgconn.h"
#include "prng.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

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
    bool result_kept;   /* the running callback took its PGresult (pgconn_keep_result) */
    int listens_left;   /* LISTENs not yet synced after a connect */

    /* Options, copied. */
    char *conninfo;
    /* Its host, hostaddr and port lists (NULL when not given) and how many hosts: with more
     * than one, each attempt that times out rotates the order the next one tries them in
     * (conn_hosts.h). */
    char *hosts, *hostaddrs, *ports;
    int n_hosts;
    int rotation;
    /* The host the attempt in progress is at (libpq's own strings, compared by address): its
     * deadline restarts when libpq moves on to the next one. */
    const char *attempt_host, *attempt_port;
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

/* ---- pgconn.c ----------------------------------------------------------------------------- */

/* libpq's connection-level error since `mark` (see pgconn.c), as one line into buf. */
void pgc_libpq_error(const pgconn *c, size_t mark, char *buf, size_t size);
/* The length of PQerrorMessage now: the mark for pgc_libpq_error(). */
size_t pgc_error_mark(const pgconn *c);
/* A FATAL or PANIC severity (the server is ending the session). */
bool pgc_is_fatal_severity(const char *sev);

/* Watches the current socket for `events` (UV_READABLE and/or UV_WRITABLE). 0 or -errno. */
int pgc_watch_set(pgconn *c, int events);

/* The connection or attempt is gone (CONNECTING, LISTENING or READY): reconnects after a
 * backoff, then NULL to every pending callback and on_state(PGCONN_LOST). */
void pgc_conn_lost(pgconn *c, const char *error);
/* The same with libpq's error since `mark` as the reason. */
void pgc_conn_lost_libpq(pgconn *c, size_t mark);
/* A failure noticed inside a user call (READY only): the timer reports the loss from the loop. */
void pgc_lose_later(pgconn *c, const char *error);

/* The outcome of one of the LISTENs sent at connect (the pipeline's internal entries); takes
 * res. */
void pgc_listen_done(pgconn *c, PGresult *res);

/* ---- pgconn_pipeline.c -------------------------------------------------------------------- */

/* Appends a sent statement to the in-flight queue. */
void pgc_push_entry(pgconn *c, entry *e);
/* NULL to every statement in flight, in order (runs user callbacks). */
void pgc_fail_pending(pgconn *c);
/* Flushes libpq's output and watches the socket; -errno with the reason in err on failure. */
int pgc_flush_and_arm(pgconn *c, char *err, size_t size);
/* Reads and delivers what the socket has (LISTENING or READY); may end in pgc_conn_lost(). */
void pgc_io_step(pgconn *c, int events);

#endif
