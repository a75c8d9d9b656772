/* status_health.h - the status page's reading of a customer's state: the order of sort=state
 * and when the health check will disable a failing customer at its current pace.
 *
 * Contract:
 * - Pure: no clock, no allocation; times are microseconds of one clock (the dispatcher's
 *   now_us scale, which failing_since is on).
 * - Problems are flags whose values are their rank: a customer with a worse problem sorts
 *   before every customer without it, whatever else either has (disabled, held, failing,
 *   breaker open, paused, throttled, half open; none is ok, last). Ties go by the next one.
 * - The disable estimate follows pgpace.health_check (sql/functions/14_health.sql): a failing
 *   streak is disabled once it is at least disable_after old AND at least min_attempts attempts
 *   failed in it. The second is projected at the pace this instance counted failures at; the
 *   check runs every check_interval, so the disable comes at its first run after the estimate.
 */
#ifndef PGPACE_STATUS_HEALTH_H
#define PGPACE_STATUS_HEALTH_H

#include <stdint.h>

enum status_problem {
    STATUS_HALF_OPEN = 1 << 0,
    STATUS_THROTTLED = 1 << 1,
    STATUS_PAUSED = 1 << 2,
    STATUS_BREAKER_OPEN = 1 << 3,
    STATUS_FAILING = 1 << 4,
    STATUS_HELD = 1 << 5,
    STATUS_DISABLED = 1 << 6,
};

/* sort=state's key of a customer's problems (status_problem flags): ascending keys put the
 * worst first, then the next worst, ..., customers without a problem last. */
double status_state_key(unsigned problems);

/* A failing streak as the dispatcher knows it. */
typedef struct status_streak {
    int64_t failing_since_us; /* the streak's first failure; 0 = not failing */
    int failures;             /* failed attempts of it that this instance counted */
    int64_t counted_since_us; /* since when it counted them (>= failing_since_us) */
    int64_t disable_after_us; /* [health] disable_after; 0 = never disabled */
    int min_attempts;         /* [health] disable_min_attempts */
} status_streak;

/* When the health check may disable the customer at the earliest, at the pace of failures seen
 * since counted_since_us (at now_us): failing_since_us + disable_after_us once min_attempts
 * failures are counted, else the later of that and when the pace reaches them. 0 when it
 * cannot be said: not failing, disabling off, or no failure counted yet (no pace). */
int64_t status_disable_estimate(const status_streak *s, int64_t now_us);

#endif
