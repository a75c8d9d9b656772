/* frontier_floor.h - a conservative scheduler state rebuilt from durable traces, for customers
 * the UNLOGGED frontier says nothing about.
 *
 * Contract: pure arithmetic; no I/O, no allocation, no clock. Times are int64_t epoch
 * microseconds.
 *
 * Why: pgpace.frontier is UNLOGGED (its updates write no WAL), so it is empty after a crash
 * restart of PostgreSQL and on a promoted standby. A new leader that was standing by has no
 * GCRA state of its own either, so without a floor every customer could send its whole burst at
 * once right after the failover, on top of the burst it may just have sent through the old
 * leader; and a batch customer could be given the tick it already had. What survives (it is
 * replicated) is the attempt log (delivery_attempt.started_at, when a request went out, written
 * once its outcome is) and the queue rows still leased (queue.claimed_at, when the claim ran).
 *
 * Spaced: GCRA lets a send at s through only when tat - tau <= s, and sets tat to
 * max(tat, s) + T, so right after any send at s, tat <= s + burst * T. Taking
 * tat = max(tat known, last send + burst * T) therefore never lets the sequence before and after
 * the failover exceed the burst; its price is that a customer with burst > 1 loses the burst it
 * had saved up (it restarts paced, as if it had just spent it).
 *
 * The last send is bounded by the latest attempt logged and, for items claimed but whose
 * attempts are not written yet, by the latest claim plus claim_to_send_us: a spaced customer's
 * items are claimed at most the lookahead plus the coalescing window before their slots and sent
 * at them, plus whatever lateness the caller allows for (a claim answered late, a busy loop,
 * clocks that disagree). A send later than that whose attempt was not written either is the
 * case the floor cannot see.
 *
 * Batch: the tick that contains the latest claim or attempt (plus slack_us for clocks that
 * disagree) counts as dispatched; a floor never lowers a known last tick.
 */
#ifndef PGPACE_FRONTIER_FLOOR_H
#define PGPACE_FRONTIER_FLOOR_H

#include <stdbool.h>
#include <stdint.h>

/* The latest durable traces of one customer's sends; has_*: whether there is one. */
typedef struct frontier_trace {
    bool has_attempt, has_claim;
    int64_t attempt_us; /* latest delivery_attempt.started_at */
    int64_t claim_us;   /* latest queue.claimed_at of a row still leased */
} frontier_trace;

/* The latest time a send can have gone out: max(attempt, claim + claim_to_send_us), saturating.
 * false (and *out untouched) when the trace has neither. */
bool frontier_last_send(const frontier_trace *t, int64_t claim_to_send_us, int64_t *out);

/* max(tat, last_send + burst * period), saturating; burst < 1 counts as 1 and period < 1 as 1.
 * tat may be GCRA_TAT_NONE. */
int64_t frontier_floor_tat(int64_t tat, int64_t last_send_us, int64_t period_us, int burst);

/* Raises (*have_tick, *last_tick) to the tick containing last_us + slack_us for ticks of
 * tick_ms milliseconds aligned to the epoch; a later known tick stays. Returns whether it
 * changed anything. tick_ms < 1 changes nothing. */
bool frontier_floor_tick(bool *have_tick, int64_t *last_tick, int64_t last_us, int64_t slack_us,
                         int tick_ms);

#endif
