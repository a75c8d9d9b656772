/* test_status_health.c - the status page's reading of a customer's state (status_health.h): the
 * order of sort=state over every combination of problems, and when the health check may disable
 * a failing customer at its pace, worked out from pgpace.health_check's rule (disable_after AND
 * min_attempts), not read back from the code. */
#include "testlib.h"

#include "status_health.h"

#include <stdbool.h>
#include <stdint.h>

#define SEC 1000000LL
#define MIN (60 * SEC)
/* The dispatcher's clock: epoch microseconds, some time in. */
#define T0 (1800000000LL * SEC)

/* The problems from worst to least bad, as the README lists them for sort=state. */
static const unsigned order[] = {STATUS_DISABLED,     STATUS_HELD,   STATUS_FAILING,
                                 STATUS_BREAKER_OPEN, STATUS_PAUSED, STATUS_THROTTLED,
                                 STATUS_HALF_OPEN};
#define N_PROBLEMS (sizeof order / sizeof *order)

/* The reference order of two sets: the first problem (worst first) that one has and the other
 * not decides; negative when a goes first. */
static int reference(unsigned a, unsigned b)
{
    for (size_t i = 0; i < N_PROBLEMS; i++) {
        bool in_a = a & order[i], in_b = b & order[i];
        if (in_a != in_b)
            return in_a ? -1 : 1;
    }
    return 0;
}

/* Every pair of the 128 sets: ascending keys are the reference order, so problems come first
 * and a customer without any (ok) last; a failing customer before one whose breaker is open or
 * that is paused, after a disabled or held one. */
static void state_order_problems_first(void **state)
{
    (void)state;
    unsigned all = 0;
    for (size_t i = 0; i < N_PROBLEMS; i++)
        all |= order[i];
    assert_int_equal(all, (1u << N_PROBLEMS) - 1); /* seven distinct flags */
    for (unsigned a = 0; a <= all; a++) {
        for (unsigned b = 0; b <= all; b++) {
            double ka = status_state_key(a), kb = status_state_key(b);
            int got = ka < kb ? -1 : ka > kb ? 1 : 0;
            if (got != reference(a, b))
                fail_msg("problems %#x and %#x: keys %g and %g, want %d", a, b, ka, kb,
                         reference(a, b));
        }
    }
    assert_true(status_state_key(STATUS_FAILING) < status_state_key(0));
    assert_true(status_state_key(STATUS_FAILING) <
                status_state_key(STATUS_BREAKER_OPEN | STATUS_PAUSED | STATUS_THROTTLED));
    assert_true(status_state_key(STATUS_DISABLED) <
                status_state_key(STATUS_HELD | STATUS_FAILING | STATUS_BREAKER_OPEN));
}

/* Enough failures counted: disable_after after the streak began, whatever the pace. */
static void enough_failures_wait_for_disable_after(void **state)
{
    (void)state;
    status_streak s = {.failing_since_us = T0,
                       .failures = 30,
                       .counted_since_us = T0,
                       .disable_after_us = 5 * MIN,
                       .min_attempts = 20};
    assert_true(status_disable_estimate(&s, T0 + 1 * MIN) == T0 + 5 * MIN);
    s.failures = 20;
    assert_true(status_disable_estimate(&s, T0 + 1 * MIN) == T0 + 5 * MIN);
    /* Past it (the check has not run yet): still when the rule was met. */
    assert_true(status_disable_estimate(&s, T0 + 7 * MIN) == T0 + 5 * MIN);
}

/* Too few failures yet: the rest at the pace counted. 5 failures in the 1 min since T0 (one
 * every 12 s): the 15 more of min_attempts 20 take 3 min more, at T0 + 4 min, before
 * disable_after (10 min) ends: T0 + 10 min. With disable_after 2 min: T0 + 4 min. */
static void too_few_failures_projected_at_the_pace(void **state)
{
    (void)state;
    status_streak s = {.failing_since_us = T0,
                       .failures = 5,
                       .counted_since_us = T0,
                       .disable_after_us = 10 * MIN,
                       .min_attempts = 20};
    assert_true(status_disable_estimate(&s, T0 + 1 * MIN) == T0 + 10 * MIN);
    s.disable_after_us = 2 * MIN;
    assert_true(status_disable_estimate(&s, T0 + 1 * MIN) == T0 + 4 * MIN);
    /* Counted only since this instance loaded the customer (T0 + 40 s): 5 in 20 s, one every
     * 4 s, so 15 more in 60 s: T0 + 2 min, exactly disable_after. */
    s.counted_since_us = T0 + 40 * SEC;
    assert_true(status_disable_estimate(&s, T0 + 1 * MIN) == T0 + 2 * MIN);
    /* A slower pace later on: 5 in 5 min (one a minute), 15 more take 15 min. */
    s.counted_since_us = T0;
    assert_true(status_disable_estimate(&s, T0 + 5 * MIN) == T0 + 20 * MIN);
    /* A fraction rounds up to the next microsecond: 3 in 1 s, 1 more takes 1/3 s. */
    status_streak f = {.failing_since_us = T0,
                       .failures = 3,
                       .counted_since_us = T0,
                       .disable_after_us = 1,
                       .min_attempts = 4};
    assert_true(status_disable_estimate(&f, T0 + SEC) == T0 + SEC + 333334);
}

/* Nothing to say: not failing, disabling off, no failure counted yet, or no time to count in. */
static void no_estimate(void **state)
{
    (void)state;
    status_streak s = {.failing_since_us = 0,
                       .failures = 5,
                       .counted_since_us = T0,
                       .disable_after_us = 5 * MIN,
                       .min_attempts = 20};
    assert_true(status_disable_estimate(&s, T0 + MIN) == 0);
    s.failing_since_us = T0;
    s.disable_after_us = 0;
    assert_true(status_disable_estimate(&s, T0 + MIN) == 0);
    s.disable_after_us = 5 * MIN;
    s.failures = 0;
    assert_true(status_disable_estimate(&s, T0 + MIN) == 0);
    s.failures = 5;
    assert_true(status_disable_estimate(&s, T0) == 0);
    /* Enough failures need no pace: the estimate stands even with nothing counted in time. */
    s.failures = 20;
    assert_true(status_disable_estimate(&s, T0) == T0 + 5 * MIN);
}

/* The largest settings do not overflow: ten years, a million attempts, one failure a year. */
static void far_estimates_stay_in_range(void **state)
{
    (void)state;
    const int64_t year = 365LL * 24 * 60 * MIN;
    status_streak s = {.failing_since_us = T0,
                       .failures = 1,
                       .counted_since_us = T0,
                       .disable_after_us = 10 * year,
                       .min_attempts = 1000000};
    int64_t at = status_disable_estimate(&s, T0 + year);
    assert_true(at > T0 + 10 * year);
    s.disable_after_us = INT64_MAX;
    assert_true(status_disable_estimate(&s, T0 + year) > T0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(state_order_problems_first),
        cmocka_unit_test(enough_failures_wait_for_disable_after),
        cmocka_unit_test(too_few_failures_projected_at_the_pace),
        cmocka_unit_test(no_estimate),
        cmocka_unit_test(far_estimates_stay_in_range),
    };
    return TL_RUN(tests, NULL, NULL);
}
