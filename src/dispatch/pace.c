/* pace.c - pacing that listens to the receiver (pure: no I/O, no clock, no allocation).
 *
 * A throttled answer (429, or 503 with Retry-After) is the receiver saying "slower", so it slows
 * the customer, not only the item:
 * - Retry-After holds the customer: nothing is sent before it ends.
 * - Spaced and batch customers have an effective rate, at most their configured rate: each
 *   throttle multiplies it by `decrease` (never below `floor` x the configured rate), each
 *   success adds `increase` x the configured rate back (AIMD, as TCP finds a link's capacity).
 *   Requests already on their way when the rate was lowered were sent at the old rate: their
 *   throttles do not lower it again, or one burst of answers would take it to the floor.
 *   A Retry-After alone cannot teach a rate (a token bucket of 60/min with Retry-After: 1 fed at
 *   120/min throttles one request in three forever), so a throttle with one lowers it too.
 * - An unlimited customer has no rate to lower: it gets an in-flight cap instead, set below what
 *   it had in flight at the throttle and raised by one after each cap's worth of successes; and
 *   without Retry-After it is held for a backoff that doubles with each throttle in a row.
 */
#include "internal.h"

#include <math.h>

double pace_rate(const pace *p, double configured)
{
    return p->rate > 0 && p->rate < configured ? p->rate : configured;
}

bool pace_on_throttle(pace *p, customer_mode mode, double configured, int in_flight,
                      const pace_policy *pol, int64_t sent_us, int64_t retry_after_us, int64_t now)
{
    /* The receiver's own Retry-After holds, whenever the request was sent. */
    if (retry_after_us > 0 && now + retry_after_us > p->hold_until_us)
        p->hold_until_us = now + retry_after_us;
    if (sent_us < p->lowered_us)
        return false; /* sent before the last decrease: already accounted for */
    p->lowered_us = now;
    p->streak++;
    /* Without a Retry-After (or with "0"), an unlimited customer has nothing else to slow it. */
    if (retry_after_us <= 0 && mode == MODE_UNLIMITED) {
        int64_t hold = pol->hold_base_us;
        for (int i = 1; i < p->streak && hold < pol->hold_cap_us; i++)
            hold *= 2;
        if (hold > pol->hold_cap_us)
            hold = pol->hold_cap_us;
        if (now + hold > p->hold_until_us)
            p->hold_until_us = now + hold;
    }
    if (mode == MODE_UNLIMITED) {
        int base = p->cap > 0 && p->cap < in_flight ? p->cap : in_flight;
        int cap = (int)floor((double)base * pol->decrease);
        if (cap < 1)
            cap = 1;
        bool changed = cap != p->cap;
        p->cap = cap;
        p->cap_credit = 0;
        return changed;
    }
    double floor_rate = configured * pol->floor;
    double rate = pace_rate(p, configured) * pol->decrease;
    if (rate < floor_rate)
        rate = floor_rate;
    bool changed = rate != p->rate;
    p->rate = rate;
    return changed;
}

bool pace_on_success(pace *p, customer_mode mode, double configured, const pace_policy *pol,
                     int cap_max)
{
    p->streak = 0;
    if (mode == MODE_UNLIMITED) {
        if (p->cap <= 0)
            return false;
        p->cap_credit += 1;
        if (p->cap_credit < p->cap)
            return false;
        p->cap_credit = 0;
        p->cap++;
        if (p->cap >= cap_max)
            p->cap = 0; /* as much as it could use anyway: unthrottled */
        return true;
    }
    if (!(p->rate > 0))
        return false;
    p->rate += configured * pol->increase;
    if (p->rate >= configured)
        p->rate = 0; /* back to the configured rate */
    return true;
}
