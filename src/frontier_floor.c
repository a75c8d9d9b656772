/* frontier_floor.c - the scheduler state a lost frontier row is rebuilt to; see
 * frontier_floor.h for why it is safe. */
#include "frontier_floor.h"

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

bool frontier_last_send(const frontier_trace *t, int64_t claim_to_send_us, int64_t *out)
{
    if (!t || (!t->has_attempt && !t->has_claim))
        return false;
    int64_t last = INT64_MIN;
    if (t->has_attempt)
        last = t->attempt_us;
    if (t->has_claim) {
        int64_t c = sat_add(t->claim_us, claim_to_send_us > 0 ? claim_to_send_us : 0);
        if (c > last)
            last = c;
    }
    *out = last;
    return true;
}

int64_t frontier_floor_tat(int64_t tat, int64_t last_send_us, int64_t period_us, int burst)
{
    if (period_us < 1)
        period_us = 1;
    if (burst < 1)
        burst = 1;
    int64_t span;
    if (__builtin_mul_overflow(period_us, (int64_t)burst, &span))
        span = INT64_MAX;
    int64_t floor = sat_add(last_send_us, span);
    return floor > tat ? floor : tat;
}

bool frontier_floor_tick(bool *have_tick, int64_t *last_tick, int64_t last_us, int64_t slack_us,
                         int tick_ms)
{
    if (!have_tick || !last_tick || tick_ms < 1)
        return false;
    int64_t at = sat_add(last_us, slack_us > 0 ? slack_us : 0);
    if (at < 0)
        return false; /* before the epoch: no tick pgpace ever ran */
    int64_t tick = at / 1000 / tick_ms;
    if (*have_tick && *last_tick >= tick)
        return false;
    *have_tick = true;
    *last_tick = tick;
    return true;
}
