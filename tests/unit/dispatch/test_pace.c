/* test_pace.c - pacing that listens to the receiver (src/dispatch/pace.c): a throttle lowers a
 * paced customer's effective rate by the factor and never below the floor, answers to requests
 * sent before the last decrease do not lower it again, successes climb back additively and never
 * above the configured rate, Retry-After holds the customer (only ever later), and an unlimited
 * customer gets an in-flight cap (and a doubling hold without Retry-After) that successes lift. */
#include "testlib.h"

#include "dispatch/internal.h"

#define SEC 1000000LL
#define T0  (1700000000LL * SEC)

static const pace_policy pol = {.decrease = 0.5,
                                .increase = 0.1,
                                .floor = 0.2,
                                .hold_base_us = 1 * SEC,
                                .hold_cap_us = 8 * SEC};

static void throttle_lowers_to_the_floor(void **state)
{
    pace p = {0};
    assert_true(pace_rate(&p, 120) == 120);
    assert_true(pace_on_throttle(&p, MODE_SPACED, 120, 1, &pol, T0, -1, T0 + 10));
    assert_true(pace_rate(&p, 120) == 60);
    assert_int_equal(p.hold_until_us, 0); /* no Retry-After: no hold for a paced customer */
    assert_true(pace_on_throttle(&p, MODE_SPACED, 120, 1, &pol, T0 + 20, -1, T0 + 30));
    assert_true(pace_rate(&p, 120) == 30);
    assert_true(pace_on_throttle(&p, MODE_SPACED, 120, 1, &pol, T0 + 40, -1, T0 + 50));
    assert_true(pace_rate(&p, 120) == 24); /* 15 is below the floor, 0.2 x 120 */
    assert_false(pace_on_throttle(&p, MODE_SPACED, 120, 1, &pol, T0 + 60, -1, T0 + 70));
    assert_true(pace_rate(&p, 120) == 24);
}

static void answers_to_earlier_requests_do_not_lower_again(void **state)
{
    pace p = {0};
    assert_true(pace_on_throttle(&p, MODE_BATCH, 100, 5, &pol, T0, -1, T0 + 100));
    /* Four more throttles of requests sent before the decrease (a burst's answers). */
    for (int i = 1; i <= 4; i++)
        assert_false(pace_on_throttle(&p, MODE_BATCH, 100, 5, &pol, T0 + i, -1, T0 + 100 + i));
    assert_true(pace_rate(&p, 100) == 50);
    assert_int_equal(p.streak, 1);
    /* One sent after it does. */
    assert_true(pace_on_throttle(&p, MODE_BATCH, 100, 5, &pol, T0 + 101, -1, T0 + 200));
    assert_true(pace_rate(&p, 100) == 25);
}

static void successes_climb_back_to_the_configured_rate(void **state)
{
    pace p = {0};
    assert_false(pace_on_success(&p, MODE_SPACED, 120, &pol, 16)); /* not throttled */
    assert_true(pace_on_throttle(&p, MODE_SPACED, 120, 1, &pol, T0, -1, T0));
    assert_true(pace_rate(&p, 120) == 60);
    for (int i = 1; i <= 4; i++) {
        assert_true(pace_on_success(&p, MODE_SPACED, 120, &pol, 16));
        assert_true(pace_rate(&p, 120) > 60 + 12 * i - 1e-9 &&
                    pace_rate(&p, 120) < 60 + 12 * i + 1e-9);
        assert_int_equal(p.streak, 0);
    }
    /* 108 + 12 = 120: back to the configured rate, never above it. */
    assert_true(pace_on_success(&p, MODE_SPACED, 120, &pol, 16));
    assert_true(p.rate == 0);
    assert_true(pace_rate(&p, 120) == 120);
    assert_false(pace_on_success(&p, MODE_SPACED, 120, &pol, 16));
    /* An effective rate above a lowered configured rate is not used. */
    p.rate = 90;
    assert_true(pace_rate(&p, 60) == 60);
}

static void retry_after_holds_and_only_ever_later(void **state)
{
    pace p = {0};
    pace_on_throttle(&p, MODE_SPACED, 120, 1, &pol, T0, 5 * SEC, T0);
    assert_int_equal(p.hold_until_us, T0 + 5 * SEC);
    /* A shorter one later does not shorten it. */
    pace_on_throttle(&p, MODE_SPACED, 120, 1, &pol, T0, 1 * SEC, T0 + SEC);
    assert_int_equal(p.hold_until_us, T0 + 5 * SEC);
    pace_on_throttle(&p, MODE_SPACED, 120, 1, &pol, T0, 10 * SEC, T0 + SEC);
    assert_int_equal(p.hold_until_us, T0 + 11 * SEC);
    /* Retry-After: 0 holds nothing. */
    pace q = {0};
    pace_on_throttle(&q, MODE_SPACED, 120, 1, &pol, T0, 0, T0);
    assert_int_equal(q.hold_until_us, 0);
}

static void unlimited_gets_a_cap_and_a_backoff(void **state)
{
    pace p = {0};
    assert_true(pace_on_throttle(&p, MODE_UNLIMITED, 60, 16, &pol, T0, -1, T0));
    assert_int_equal(p.cap, 8);
    assert_true(p.rate == 0); /* no rate to lower */
    assert_int_equal(p.hold_until_us, T0 + 1 * SEC);
    assert_true(pace_on_throttle(&p, MODE_UNLIMITED, 60, 8, &pol, T0 + 1, -1, T0 + 2));
    assert_int_equal(p.cap, 4);
    assert_int_equal(p.hold_until_us, T0 + 2 + 2 * SEC); /* doubles with each in a row */
    for (int i = 0; i < 6; i++)
        pace_on_throttle(&p, MODE_UNLIMITED, 60, 1, &pol, T0 + 3 + i, -1, T0 + 3 + i);
    assert_int_equal(p.cap, 1);
    assert_int_equal(p.hold_until_us, T0 + 8 + 8 * SEC); /* at most hold_cap */
    /* One more per cap's worth of successes; lifted at cap_max. */
    assert_true(pace_on_success(&p, MODE_UNLIMITED, 60, &pol, 4));
    assert_int_equal(p.cap, 2);
    assert_false(pace_on_success(&p, MODE_UNLIMITED, 60, &pol, 4));
    assert_true(pace_on_success(&p, MODE_UNLIMITED, 60, &pol, 4));
    assert_int_equal(p.cap, 3);
    for (int i = 0; i < 2; i++)
        assert_false(pace_on_success(&p, MODE_UNLIMITED, 60, &pol, 4));
    assert_true(pace_on_success(&p, MODE_UNLIMITED, 60, &pol, 4));
    assert_int_equal(p.cap, 0);
    /* One burst of throttles (requests sent before the decrease) is one step of the backoff. */
    pace b = {0};
    pace_on_throttle(&b, MODE_UNLIMITED, 60, 16, &pol, T0, -1, T0 + 100);
    for (int i = 1; i <= 15; i++)
        pace_on_throttle(&b, MODE_UNLIMITED, 60, 16, &pol, T0 + i, -1, T0 + 100 + i);
    assert_int_equal(b.hold_until_us, T0 + 100 + 1 * SEC);
    assert_int_equal(b.cap, 8);
    /* Retry-After: 0 asks for no wait: the backoff still applies. */
    pace z = {0};
    pace_on_throttle(&z, MODE_UNLIMITED, 60, 4, &pol, T0, 0, T0);
    assert_int_equal(z.hold_until_us, T0 + 1 * SEC);
    /* With a Retry-After the hold is the receiver's. */
    pace q = {0};
    pace_on_throttle(&q, MODE_UNLIMITED, 60, 3, &pol, T0, 30 * SEC, T0);
    assert_int_equal(q.hold_until_us, T0 + 30 * SEC);
    assert_int_equal(q.cap, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(throttle_lowers_to_the_floor),
        cmocka_unit_test(answers_to_earlier_requests_do_not_lower_again),
        cmocka_unit_test(successes_climb_back_to_the_configured_rate),
        cmocka_unit_test(retry_after_holds_and_only_ever_later),
        cmocka_unit_test(unlimited_gets_a_cap_and_a_backoff),
    };
    return TL_RUN(tests, NULL, NULL);
}
