/* pgconn.h - one asynchronous PostgreSQL connection on the libuv loop.
 *
 * Contract:
 * - Non-blocking throughout: PQconnectStartParams/PQconnectPoll to connect, the socket watched
 *   with a uv_poll_t, PQflush() > 0 means "wait for writable", on readable PQconsumeInput then
 *   PQgetResult while !PQisBusy. The connection runs in pipeline mode: every pgconn_query() is
 *   PQsendQueryParams + PQpipelineSync, so statements are batched on the wire and an error in one
 *   does not abort the others (each is its own implicit transaction).
 * - Every accepted query's callback runs exactly once, in order: with its final PGresult
 *   (which may be an error result; the callback must not PQclear it), or with NULL when the
 *   connection was lost before the outcome was known (the statement may or may not have run).
 * - On loss (socket error, server gone, keepalive timeout): pending callbacks get NULL, then
 *   on_state(PGCONN_LOST); reconnection follows with jittered exponential backoff between
 *   reconnect_min_ms and reconnect_max_ms; after a successful (re)connect the listed channels
 *   are LISTENed again, then on_state(PGCONN_READY). Session state such as advisory locks is
 *   gone after a loss: owners must react to PGCONN_LOST.
 * - TCP keepalives (and tcp_user_timeout) are always set so a silent partition is noticed.
 * - Notifications are delivered through on_notify as they arrive.
 * - pgconn_close() is safe to call once at any time; pending callbacks get NULL; the struct
 *   is freed after its libuv handles closed, then closed_cb runs.
 * - No blocking call is ever made on the loop.
 */
#ifndef PGPACE_PGCONN_H
#define PGPACE_PGCONN_H

#include "common.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <uv.h>

typedef struct pgconn pgconn;

typedef enum pgconn_state { PGCONN_READY, PGCONN_LOST } pgconn_state;

typedef void (*pgconn_result_cb)(pgconn *c, PGresult *res, void *arg);

/* Called from inside a result callback with a non-NULL result: the callback keeps the PGresult
 * (its strings stay valid) and must PQclear it itself. */
void pgconn_keep_result(pgconn *c);
typedef void (*pgconn_state_cb)(pgconn *c, pgconn_state state, void *arg);
typedef void (*pgconn_notify_cb)(pgconn *c, const char *channel, const char *payload, void *arg);
typedef void (*pgconn_closed_cb)(void *arg);

typedef struct pgconn_options {
    const char *conninfo;         /* libpq conninfo/URL; "" = environment (copied) */
    const char *application_name; /* shown in pg_stat_activity (copied) */
    int keepalive_idle_s;         /* TCP keepalive idle; probes every idle/3 s, 3 probes */
    int reconnect_min_ms;         /* first reconnect delay */
    int reconnect_max_ms;         /* cap of the reconnect backoff */
    const char *const *listen;    /* NULL-terminated channel names to LISTEN, or NULL (copied) */
    pgconn_state_cb on_state;
    pgconn_notify_cb on_notify;
    void *arg; /* passed to on_state and on_notify */
} pgconn_options;

int pgconn_new(uv_loop_t *loop, const pgconn_options *opts, pgconn **out) PGP_MUST_CHECK;

/* Starts connecting (asynchronously). Errors are reported through on_state / the log. */
void pgconn_start(pgconn *c);

/* Queues a statement. Params are copied. Returns -ENOTCONN when the connection is not READY
 * (the callback will not run), -ENOMEM on allocation failure. */
int pgconn_query(pgconn *c, const char *sql, int nparams, const char *const *params,
                 pgconn_result_cb cb, void *arg) PGP_MUST_CHECK;

/* As pgconn_query, for a statement sent often: it is prepared once per session (Prepare and
 * the first Execute share a sync, so no extra round trip) and executed by name afterwards,
 * which saves the server parsing and, once its plan cache settles on a generic plan, planning.
 * `sql` must stay valid and unchanged for the connection's life: its address is the key. */
int pgconn_query_prepared(pgconn *c, const char *sql, int nparams, const char *const *params,
                          pgconn_result_cb cb, void *arg) PGP_MUST_CHECK;

bool pgconn_ready(const pgconn *c);

/* Reads what the server has sent so far into libpq's buffer, without parsing or delivering it:
 * for a callback that works long on one result while the next is on its way. The server blocks
 * once the socket's buffer is full (about 200 KB), so without this it computes little of the
 * next statement's result meanwhile. Safe from inside a result callback. */
void pgconn_read_ahead(pgconn *c);

/* Statements sent or queued whose callback has not run yet. */
size_t pgconn_pending(const pgconn *c);

/* The last connection-level error message (for logs), "" if none. */
const char *pgconn_last_error(const pgconn *c);

/* Drops the connection now (as if it were lost), then reconnects as after a loss. For tests and
 * for a leader that must give up its session (e.g. on a fencing doubt). */
void pgconn_reset(pgconn *c);

void pgconn_close(pgconn *c, pgconn_closed_cb closed_cb, void *arg);

#endif
