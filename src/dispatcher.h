/* dispatcher.h - `pgpace run`: leader election, fair claims, deliveries and finalisation.
 *
 * Contract:
 * - One libuv loop. One database connection (pgconn, pipeline mode) carries everything: the
 *   session advisory lock that makes an instance leader, the claims (so a leader that lost its
 *   connection cannot claim any more: fencing), LISTEN for wake-ups and live configuration,
 *   and batched finalisations.
 * - Every instance runs the same code: the one holding the lock leads, the others retry every
 *   standby_retry_ms. Losing the connection drops leadership at once; in-flight deliveries
 *   still finish and their finalisations are sent after reconnecting (the claim token makes a
 *   late finalisation harmless when the item was reclaimed meanwhile).
 * - Scheduling: spaced customers by GCRA from an in-memory min-heap and one timer;
 *   batch customers on aligned ticks, once per tick across failovers; unlimited customers as a
 *   work queue; carrier caps per round and in flight. Each claim round is one statement.
 * - dispatcher_shutdown(): stop claiming, let deliveries finish up to drain_timeout_ms, abort
 *   and release the rest (leases voided so items reappear at once), flush, close; done(status)
 *   runs when every handle is closed.
 */
#ifndef PGPACE_DISPATCHER_H
#define PGPACE_DISPATCHER_H

#include "common.h"
#include "config.h"

#include <uv.h>

typedef struct dispatcher dispatcher;
typedef void (*dispatcher_done_cb)(void *arg, int status);

/* Creates the dispatcher; the configuration is copied. */
int dispatcher_new(uv_loop_t *loop, const pgp_config *cfg, dispatcher **out,
                   pgp_error *err) PGP_MUST_CHECK;

void dispatcher_start(dispatcher *d);

/* Graceful stop (first SIGTERM). done runs once, after everything is closed, with 0 for a
 * clean stop or 1 when the service could not run (e.g. schema too old). */
void dispatcher_shutdown(dispatcher *d, dispatcher_done_cb done, void *arg);

/* Applies a reloaded configuration (SIGHUP). Everything takes effect at once except the
 * database connection and the instance name, which need a restart (logged). Returns 0, or an
 * error (the old configuration stays) when the new one cannot be applied. */
int dispatcher_reload(dispatcher *d, const pgp_config *cfg, pgp_error *err) PGP_MUST_CHECK;

/* Registers the callback for a stop the dispatcher decides itself (fatal start-up error). */
void dispatcher_on_exit(dispatcher *d, dispatcher_done_cb done, void *arg);

#endif
