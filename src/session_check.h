/* session_check.h - does a connection keep one PostgreSQL server session of its own?
 *
 * A pooler such as PgBouncer in transaction or statement mode runs each transaction of a
 * client on whichever server session is free and hands the client's session to other clients
 * in between. It does not say so, so this looks at what happens, with four probes
 * (sql/queries/session_probe.sql), each sent once the one before answered:
 *   A  on the checked connection: writes a random nonce into its session, reads the session
 *      (backend pid, server start);
 *   B  on a short-lived second connection with the same conninfo: reads its session;
 *   reads  SESSION_CHECK_READS statements on the checked connection again, each reading its
 *      session.
 * Pooled when B ran in A's session (pid or nonce), or a read did not (pid or nonce differ).
 * A pool that reuses the server connection released last (PgBouncer's default) gives B the
 * session A just released; one that goes round its server connections (server_round_robin)
 * gives the first or second read another one; in a pool busy with other clients, consecutive
 * statements land on different server connections. Measured with PgBouncer 1.18:
 * transaction and statement pooling are seen every time in an idle pool (pool sizes 1 to 5,
 * either setting, with server_reset_query_always); session pooling and direct connections
 * never look pooled.
 *
 * What it cannot see: other clients of the same pool taking A's server connection just before
 * B and giving it back before every read can make one check miss (the dispatcher checks every
 * new session, so a miss is not for good); a pooler with other rules of server reuse is seen
 * only as far as they give B A's session or a read another one.
 *
 * Contract:
 * - session_check_start() runs on the loop and never blocks it. The checked connection must be
 * READY; the check sends nothing on it after session_check_cancel().
 * - B gets timeout_ms to connect and answer. If it does not (a session pool that is full, a
 *   server at max_connections, a refused login), the reads still run; the outcome is then
 *   UNVERIFIED unless they showed pooling.
 * - The caller cancels the check when the checked connection is lost (PGCONN_LOST): going on
 *   on its next session would compare two sessions.
 * - The callback runs exactly once, from a loop callback, unless session_check_cancel() ran
 *   before. `detail` says what gave pooling away, why B did not answer, or the statement's
 *   error; it is valid during the callback only.
 * - After the callback ran, or after cancel, the handle is the module's: it frees itself once
 *   its libuv handles closed and its statement on the checked connection (if any) answered,
 *   so the checked connection may be closed right after a cancel.
 */
#ifndef PGPACE_SESSION_CHECK_H
#define PGPACE_SESSION_CHECK_H

#include "common.h"
#include "pgconn.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* Reads on the checked connection after B: in an idle pool two suffice (the round robin); a
 * busy one makes each further read another chance to land elsewhere, at one round trip each. */
#define SESSION_CHECK_READS 8

typedef enum session_check_outcome {
    SESSION_CHECK_OWN,        /* one server session of its own, as far as the probes show */
    SESSION_CHECK_POOLED,     /* its statements run in more than one session, or another
                                 client's ran in its session */
    SESSION_CHECK_UNVERIFIED, /* no pooling seen, but B did not answer: not conclusive */
    SESSION_CHECK_FAILED,     /* a probe on the checked connection failed (detail: error) */
    SESSION_CHECK_LOST,       /* the checked connection was lost during the check */
} session_check_outcome;

typedef void (*session_check_cb)(session_check_outcome outcome, const char *detail, void *arg);

typedef struct session_check session_check;

/* Starts the check on `conn` (READY). `conninfo` is what `conn` connected with ("" = libpq
 * environment); `application_name` names the second connection (copied). Returns 0, or
 * -ENOMEM / -ENOTCONN (the callback will not run). */
int session_check_start(uv_loop_t *loop, pgconn *conn, const char *conninfo,
                        const char *application_name, int timeout_ms, session_check_cb cb,
                        void *arg, session_check **out) PGP_MUST_CHECK;

/* The callback will not run and nothing more is sent on the checked connection. NULL is
 * ignored; a handle whose callback already ran must not be passed. */
void session_check_cancel(session_check *s);

/* The same check, blocking (for the command line, never on the loop): `conn` is the checked
 * connection, B gets timeout_ms. Returns OWN, POOLED, UNVERIFIED or FAILED (never LOST), with
 * `detail` as for the callback. */
session_check_outcome session_check_run(PGconn *conn, const char *conninfo,
                                        const char *application_name, int timeout_ms, char *detail,
                                        size_t detail_len);

/* ---- the decision, pure (for the tests) ---- */

/* What one probe saw. */
typedef struct session_probe {
    bool seen;
    long long pid;
    long long server_start; /* postmaster start, epoch microseconds */
    char nonce[40];         /* "" when the session has none */
} session_probe;

/* NULL when the probes show one session of its own; otherwise what gave pooling away. `b` may
 * be unseen (the second connection did not answer); a and the reads must be seen. */
const char *session_check_verdict(const session_probe *a, const session_probe *b,
                                  const session_probe *reads, int n_reads);

#endif
