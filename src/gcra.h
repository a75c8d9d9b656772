/* gcra.h - per-customer pacing: GCRA for `spaced` customers, fractional credit for `batch`.
 *
 * Contract: pure arithmetic on caller-owned state (the `frontier` row); no I/O, no allocation,
 * no clock. Times are int64_t microseconds on whatever clock the caller uses consistently.
 *
 * Spaced: period T = 60 s / rate, tolerance tau = (burst - 1) * T. A customer may send at t
 * when tat - tau <= t; each item sent sets tat = max(tat, t) + T. The new tat is derived from
 * the old one whenever t <= tat, so a dispatcher woken exactly at gcra_eligible_at() sends
 * items exactly T apart, and wake-up delays shorter than tau are absorbed instead of
 * accumulating into drift. A wake-up after tat re-bases on t: idle time is not banked beyond
 * the burst.
 * The state "never sent" (or a lost UNLOGGED frontier row) is GCRA_TAT_NONE = INT64_MIN, which
 * needs no special case: it is simply a tat infinitely far in the past. All arithmetic
 * saturates at the int64 limits instead of overflowing (pacing is only meaningful well inside
 * them, which epoch or monotonic microseconds are for the next 290,000 years).
 *
 * Batch: each tick grants rate * ticks_elapsed of credit, of which whole items may be sent.
 * Only the fractional part is carried to the next tick: allowance that was not used (fewer
 * items were due) is dropped, so an idle customer cannot save up a flood. What a gap of several
 * ticks (e.g. a failover) can add is capped separately by credit_cap.
 */
#ifndef PGPACE_GCRA_H
#define PGPACE_GCRA_H

#include "common.h"

#include <stdint.h>

/* "No state": any tat at or before now - tau behaves the same, this one is just the farthest. */
#define GCRA_TAT_NONE INT64_MIN

/* Periods are clamped here so that rates far below anything sensible (e.g. 1e-300/min) still
 * give a finite period instead of an out-of-range conversion; about 292 years. */
#define GCRA_PERIOD_MAX_US (INT64_MAX / 1000)

/* T in microseconds, 60e6 / rate rounded to nearest, at least 1 and at most GCRA_PERIOD_MAX_US.
 * Returns -EINVAL when rate is not a number > 0 (infinity gives 1). Rounding to whole
 * microseconds makes the long-run rate off by at most 0.5 µs per period (less than 1e-6
 * relative for periods of half a second or more). */
int64_t gcra_period_us(double rate_per_minute) PGP_MUST_CHECK;

/* tau = (burst - 1) * period, saturating; burst < 1 is treated as 1, period < 1 as 1. */
int64_t gcra_tolerance_us(int64_t period_us, int burst);

/* Earliest time at which one item conforms: tat - tau (INT64_MIN for GCRA_TAT_NONE). This is
 * the key to put in the scheduler heap. Same clamping of burst and period as above. */
int64_t gcra_eligible_at(int64_t tat, int64_t period_us, int burst);

/* Takes up to `want` items at `now`: returns how many conform (0..want) and advances *tat by T
 * for each, starting from max(*tat, now). Stops at the first item that would not conform, so
 * afterwards *tat <= now + tau + T. Returns -EINVAL (and leaves *tat alone) when tat is NULL,
 * period_us < 1, burst < 1 or want < 0. */
int gcra_take(int64_t *tat, int64_t now, int64_t period_us, int burst, int want) PGP_MUST_CHECK;

/* The default credit_cap: one tick's worth of credit, or one item for rates below 1/min. */
double batch_default_cap(double rate_per_minute);

/* Whole items allowed this tick. Adds min(rate * ticks_elapsed, credit_cap) to the carried
 * credit, returns floor of the result (at most INT_MAX) and keeps the remainder
 * in *credit, which is always in [0, 1) afterwards.
 *
 * - ticks_elapsed is the number of ticks since this customer's last recorded tick: normally 1;
 *   more after a gap; 0 or less when this tick was already dispatched (e.g. by the previous
 *   leader), which grants nothing and returns 0.
 * - The cap bounds the credit one call can add, not the total: with the default cap,
 *   max(rate, 1), the steady state (ticks_elapsed == 1) is never clipped, so 2.5/min gives
 *   2, 3, 2, 3, ... and 0.5/min gives 0, 1, 0, 1, ...; after a gap of any length the customer
 *   gets what one tick gives (plus the carried fraction), never the missed ticks. A cap <= 0 or NaN
 * selects the default; a cap below the rate is raised to the rate (a cap must never slow the steady
 * state).
 * - A carried credit outside [0, 1) (NaN, negative, or a whole item left over from an older
 *   rule) is clamped into it first: whole items are never carried.
 * - Sums within 1e-9 of a whole number count as reaching it, so rates like 0.1/min give an item
 *   on exactly every 10th tick despite binary rounding.
 * Returns -EINVAL when credit is NULL or the rate is not a finite number > 0. */
int batch_allowance(double rate_per_minute, double *credit, int64_t ticks_elapsed,
                    double credit_cap) PGP_MUST_CHECK;

/* Called when only `allowed - unused` items were due. The chosen rule is that unused whole
 * items are dropped (they are not carried, not even up to the cap), which batch_allowance has
 * already arranged by keeping only the fraction; this normalises *credit into [0, 1) and exists
 * so that call sites state the rule instead of inventing a refund. */
void batch_refund(double *credit, int unused);

#endif
