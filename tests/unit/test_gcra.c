/* test_gcra.c - GCRA spacing (exact, drift-free, saturating) and batch credit. */
#include "testlib.h"

#include "gcra.h"

#include <errno.h>
#include <limits.h>
#include <math.h>

#define SEC 1000000LL

static void period_rounds_and_clamps(void **state)
{
    assert_int_equal(gcra_period_us(60), SEC);
    assert_int_equal(gcra_period_us(1200), 50000);
    assert_int_equal(gcra_period_us(0.5), 120 * SEC);
    assert_int_equal(gcra_period_us(7), 8571429); /* 8571428.57... rounds up */
    assert_int_equal(gcra_period_us(6e6), 10);
    assert_int_equal(gcra_period_us(1e-6), 60000000LL * SEC);
    assert_int_equal(gcra_period_us(1e12), 1);
    assert_int_equal(gcra_period_us(INFINITY), 1);
    assert_int_equal(gcra_period_us(1e-300), GCRA_PERIOD_MAX_US);
    assert_int_equal(gcra_period_us(0), -EINVAL);
    assert_int_equal(gcra_period_us(-1), -EINVAL);
    assert_int_equal(gcra_period_us(NAN), -EINVAL);
    assert_int_equal(gcra_period_us(-INFINITY), -EINVAL);
}

/* A dispatcher woken exactly at eligibility sends one item per period, and after n items the
 * state is exactly n periods past the start: no rounding or wake-up time leaks in. */
static void check_exact_spacing(double rate, int burst)
{
    int64_t period = gcra_period_us(rate);
    int64_t start = 1700000000LL * SEC + 123;
    int64_t tat = GCRA_TAT_NONE;
    assert_int_equal(gcra_eligible_at(tat, period, burst), INT64_MIN);
    /* Use up the burst first so that every later take is paced. */
    assert_int_equal(gcra_take(&tat, start, period, burst, burst), burst);
    assert_int_equal(tat, start + burst * period);
    int64_t prev = start;
    for (int64_t n = burst + 1; n <= 100000; n++) {
        int64_t at = gcra_eligible_at(tat, period, burst);
        if (n > burst + 1)
            assert_int_equal(at - prev, period);
        prev = at;
        assert_int_equal(gcra_take(&tat, at - 1, period, burst, 1), 0);
        assert_int_equal(gcra_take(&tat, at, period, burst, 3), 1);
        assert_int_equal(tat, start + n * period);
    }
}

static void exact_spacing_60(void **state)
{
    check_exact_spacing(60, 1);
    check_exact_spacing(60, 4);
}

static void exact_spacing_1200(void **state)
{
    check_exact_spacing(1200, 1);
    check_exact_spacing(1200, 10);
}

static void exact_spacing_half(void **state)
{
    check_exact_spacing(0.5, 1);
    check_exact_spacing(0.5, 2);
}

static void exact_spacing_7(void **state)
{
    check_exact_spacing(7, 1);
    check_exact_spacing(7, 3);
}

/* A naive now() + T schedule loses every wake-up delay; with tolerance, GCRA absorbs delays
 * shorter than tau and the long-run count stays exact. */
static void late_wakeups_within_tolerance_do_not_drift(void **state)
{
    int64_t period = gcra_period_us(60);
    int burst = 2;
    int64_t start = 5000;
    int64_t tat = GCRA_TAT_NONE;
    assert_int_equal(gcra_take(&tat, start, period, burst, 1), 1);
    uint32_t x = 12345;
    for (int n = 2; n <= 10000; n++) {
        x = x * 1103515245u + 12345u;
        int64_t delay = (int64_t)(x >> 8) % period; /* always < tau == T */
        int64_t now = gcra_eligible_at(tat, period, burst) + delay;
        /* An early wake-up at tat - tau (delay 0) is the ideal case; any later one is fine. */
        assert_int_equal(gcra_take(&tat, now, period, burst, 1), 1);
        assert_int_equal(tat, start + n * period);
    }
}

static void burst_then_spacing(void **state)
{
    int64_t period = gcra_period_us(60);
    int64_t t0 = 10 * SEC;
    int64_t tat = GCRA_TAT_NONE;
    assert_int_equal(gcra_take(&tat, t0, period, 5, 10), 5);
    assert_int_equal(tat, t0 + 5 * period);
    assert_int_equal(gcra_take(&tat, t0, period, 5, 1), 0);
    assert_int_equal(gcra_eligible_at(tat, period, 5), t0 + period);
    assert_int_equal(gcra_take(&tat, t0 + period - 1, period, 5, 1), 0);
    assert_int_equal(gcra_take(&tat, t0 + period, period, 5, 1), 1);
    assert_int_equal(gcra_take(&tat, t0 + 2 * period, period, 5, 1), 1);
    assert_int_equal(tat, t0 + 7 * period);
}

static void burst_one_at_a_time(void **state)
{
    int64_t period = gcra_period_us(60);
    int64_t tat = GCRA_TAT_NONE;
    for (int i = 0; i < 5; i++)
        assert_int_equal(gcra_take(&tat, 0, period, 5, 1), 1);
    assert_int_equal(gcra_take(&tat, 0, period, 5, 1), 0);
    assert_int_equal(tat, 5 * period);
}

static void idle_refills_burst_but_no_more(void **state)
{
    int64_t period = gcra_period_us(60);
    int64_t t0 = 0;
    int64_t tat = GCRA_TAT_NONE;
    assert_int_equal(gcra_take(&tat, t0, period, 5, 5), 5);
    /* Two periods later, two items have been earned back. */
    int64_t t1 = t0 + 2 * period;
    int64_t saved = tat;
    assert_int_equal(gcra_take(&tat, t1, period, 5, 10), 2);
    assert_int_equal(tat, saved + 2 * period);
    /* A long idle refills the burst completely, never beyond it. */
    int64_t t2 = t1 + 1000 * period;
    assert_int_equal(gcra_take(&tat, t2, period, 5, 1000), 5);
    assert_int_equal(tat, t2 + 5 * period);
    int64_t t3 = t2 + 86400 * SEC;
    assert_true(gcra_eligible_at(tat, period, 5) <= t3);
    assert_int_equal(gcra_take(&tat, t3, period, 5, INT_MAX), 5);
}

static void late_wakeup_rebases_on_now(void **state)
{
    int64_t period = gcra_period_us(1200);
    int64_t tat = 1000 + period;
    int64_t now = tat + 777;
    assert_int_equal(gcra_take(&tat, now, period, 1, 1), 1);
    assert_int_equal(tat, now + period);
    /* Equal to tat: derived from tat, not re-based. */
    now = tat;
    assert_int_equal(gcra_take(&tat, now, period, 1, 1), 1);
    assert_int_equal(tat, now + period);
}

static void want_beyond_allowance_returns_conforming_count(void **state)
{
    int64_t period = 100;
    int64_t tat = 1000; /* now 1000, burst 3: three conform */
    assert_int_equal(gcra_take(&tat, 1000, period, 3, 7), 3);
    assert_int_equal(tat, 1300);
    /* Never past now + tau + T. */
    assert_true(tat <= 1000 + 2 * period + period);
    tat = 1000;
    assert_int_equal(gcra_take(&tat, 1000, period, 3, 2), 2);
    assert_int_equal(tat, 1200);
    assert_int_equal(gcra_take(&tat, 1000, period, 3, 2), 1);
    assert_int_equal(tat, 1300);
}

static void want_zero_and_bad_arguments(void **state)
{
    int64_t tat = 42;
    assert_int_equal(gcra_take(&tat, 0, 100, 1, 0), 0);
    assert_int_equal(tat, 42);
    assert_int_equal(gcra_take(NULL, 0, 100, 1, 1), -EINVAL);
    assert_int_equal(gcra_take(&tat, 0, 0, 1, 1), -EINVAL);
    assert_int_equal(gcra_take(&tat, 0, -5, 1, 1), -EINVAL);
    assert_int_equal(gcra_take(&tat, 0, 100, 0, 1), -EINVAL);
    assert_int_equal(gcra_take(&tat, 0, 100, 1, -1), -EINVAL);
    assert_int_equal(tat, 42);
    /* The pure helpers clamp instead. */
    assert_int_equal(gcra_tolerance_us(100, 0), 0);
    assert_int_equal(gcra_tolerance_us(0, 3), 2);
    assert_int_equal(gcra_eligible_at(500, 100, -7), 500);
}

static void extreme_rates_saturate_without_overflow(void **state)
{
    /* 6e6/min: 10 µs periods, huge burst. */
    int64_t fast = gcra_period_us(6e6);
    int64_t tat = GCRA_TAT_NONE;
    assert_int_equal(gcra_take(&tat, 0, fast, INT_MAX, INT_MAX), INT_MAX);
    assert_int_equal(tat, (int64_t)INT_MAX * 10);
    /* 1e-6/min: a period of about two years; a huge burst saturates tau. */
    int64_t slow = gcra_period_us(1e-6);
    assert_int_equal(gcra_tolerance_us(slow, INT_MAX), INT64_MAX);
    tat = GCRA_TAT_NONE;
    assert_int_equal(gcra_take(&tat, 0, slow, INT_MAX, 3), 3);
    assert_int_equal(tat, 3 * slow);
    assert_int_equal(gcra_eligible_at(tat, slow, INT_MAX), 3 * slow - INT64_MAX);
    assert_int_equal(gcra_eligible_at(-3 * slow, slow, INT_MAX), INT64_MIN);
    tat = GCRA_TAT_NONE;
    assert_int_equal(gcra_take(&tat, 0, slow, 1, 5), 1);
    assert_int_equal(gcra_eligible_at(tat, slow, 1), slow);
    /* Near the end of time (year 292277) the state saturates instead of wrapping; pacing
     * there is defined but meaningless. */
    tat = INT64_MAX - 5;
    assert_int_equal(gcra_take(&tat, INT64_MAX - 5, slow, 2, 2), 1);
    assert_int_equal(tat, INT64_MAX);
    assert_int_equal(gcra_take(&tat, INT64_MAX, slow, 2, 2), 1);
    assert_int_equal(tat, INT64_MAX);
    tat = INT64_MAX;
    assert_int_equal(gcra_take(&tat, INT64_MIN, GCRA_PERIOD_MAX_US, INT_MAX, 1), 0);
    assert_int_equal(tat, INT64_MAX);
    tat = GCRA_TAT_NONE;
    /* tau saturated at INT64_MAX, so only INT64_MAX / T + 1 items fit, not the whole burst. */
    assert_int_equal(gcra_take(&tat, INT64_MIN, GCRA_PERIOD_MAX_US, INT_MAX, INT_MAX), 1001);
    assert_int_equal(tat, INT64_MIN + 1000 * GCRA_PERIOD_MAX_US + GCRA_PERIOD_MAX_US);
    assert_int_equal(gcra_eligible_at(INT64_MIN, 1, 1), INT64_MIN);
    assert_int_equal(gcra_eligible_at(INT64_MAX, GCRA_PERIOD_MAX_US, INT_MAX),
                     INT64_MAX - gcra_tolerance_us(GCRA_PERIOD_MAX_US, INT_MAX));
}

/* Runs `ticks` consecutive ticks and returns the allowances. */
static void run_ticks(double rate, int ticks, int *out)
{
    double credit = 0;
    for (int i = 0; i < ticks; i++) {
        out[i] = batch_allowance(rate, &credit, 1, 0);
        assert_true(credit >= 0 && credit < 1);
    }
}

static void batch_half_alternates(void **state)
{
    int got[1000];
    run_ticks(0.5, 1000, got);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(got[i], i % 2);
}

static void batch_two_and_a_half_alternates(void **state)
{
    int got[1000];
    run_ticks(2.5, 1000, got);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(got[i], 2 + i % 2);
}

static void batch_inexact_fractions_stay_exact(void **state)
{
    int got[3000];
    run_ticks(0.1, 3000, got);
    for (int i = 0; i < 3000; i++)
        assert_int_equal(got[i], i % 10 == 9);
    run_ticks(1.0 / 3.0, 3000, got);
    for (int i = 0; i < 3000; i++)
        assert_int_equal(got[i], i % 3 == 2);
    run_ticks(7, 3000, got);
    for (int i = 0; i < 3000; i++)
        assert_int_equal(got[i], 7);
    run_ticks(0.7, 3000, got);
    int total = 0;
    for (int i = 0; i < 3000; i++)
        total += got[i];
    assert_int_equal(total, 2100);
}

static void batch_cap_prevents_hoarding(void **state)
{
    double credit = 0.5;
    assert_int_equal(batch_allowance(10, &credit, 1000000, 0), 10);
    assert_true(credit == 0.5);
    credit = 0.5;
    assert_int_equal(batch_allowance(0.5, &credit, 1000, 0), 1);
    assert_true(credit == 0.5);
    assert_int_equal(batch_allowance(0.5, &credit, 1, 0), 1);
    assert_int_equal(batch_allowance(0.5, &credit, 1, 0), 0);
    /* Explicit caps: allow some catch-up, but never slow the steady state. */
    credit = 0;
    assert_int_equal(batch_allowance(10, &credit, 5, 25), 25);
    assert_int_equal(batch_allowance(10, &credit, 1, 3), 10);
    assert_int_equal(batch_allowance(10, &credit, 3, NAN), 10);
    assert_int_equal(batch_allowance(10, &credit, INT64_MAX, -1), 10);
    assert_true(batch_default_cap(0.25) == 1);
    assert_true(batch_default_cap(40) == 40);
}

static void batch_same_tick_grants_nothing(void **state)
{
    double credit = 0.5;
    assert_int_equal(batch_allowance(100, &credit, 0, 0), 0);
    assert_true(credit == 0.5);
    assert_int_equal(batch_allowance(100, &credit, -3, 0), 0);
    assert_true(credit == 0.5);
}

static void batch_unused_allowance_is_dropped(void **state)
{
    double credit = 0;
    assert_int_equal(batch_allowance(2.5, &credit, 1, 0), 2);
    batch_refund(&credit, 2); /* nothing was due */
    assert_true(credit == 0.5);
    assert_int_equal(batch_allowance(2.5, &credit, 1, 0), 3);
    batch_refund(&credit, 3);
    assert_true(credit == 0);
    credit = 3.75;
    batch_refund(&credit, 0);
    assert_true(credit == 0.75);
    credit = -2;
    batch_refund(&credit, 0);
    assert_true(credit == 0);
    credit = NAN;
    batch_refund(&credit, 1);
    assert_true(credit == 0);
    credit = INFINITY;
    batch_refund(&credit, 1);
    assert_true(credit == 0);
    batch_refund(NULL, 1);
    /* A carried whole item (older rule, hand edit) is not honoured either. */
    credit = 5.5;
    assert_int_equal(batch_allowance(1, &credit, 1, 0), 1);
    assert_true(credit == 0.5);
}

static void batch_extremes_and_bad_arguments(void **state)
{
    double credit = 0;
    assert_int_equal(batch_allowance(6e6, &credit, 1, 0), 6000000);
    assert_int_equal(batch_allowance(6e6, &credit, INT64_MAX, 0), 6000000);
    assert_int_equal(batch_allowance(6e6, &credit, INT64_MAX, INFINITY), INT_MAX);
    assert_true(credit == 0);
    assert_int_equal(batch_allowance(1e-6, &credit, 1, 0), 0);
    assert_true(credit > 0 && credit < 1e-5);
    assert_int_equal(batch_allowance(1e-6, &credit, INT64_MAX, 0), 1);
    assert_int_equal(batch_allowance(0, &credit, 1, 0), -EINVAL);
    assert_int_equal(batch_allowance(-1, &credit, 1, 0), -EINVAL);
    assert_int_equal(batch_allowance(NAN, &credit, 1, 0), -EINVAL);
    assert_int_equal(batch_allowance(INFINITY, &credit, 1, 0), -EINVAL);
    assert_int_equal(batch_allowance(1, NULL, 1, 0), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(period_rounds_and_clamps),
        cmocka_unit_test(exact_spacing_60),
        cmocka_unit_test(exact_spacing_1200),
        cmocka_unit_test(exact_spacing_half),
        cmocka_unit_test(exact_spacing_7),
        cmocka_unit_test(late_wakeups_within_tolerance_do_not_drift),
        cmocka_unit_test(burst_then_spacing),
        cmocka_unit_test(burst_one_at_a_time),
        cmocka_unit_test(idle_refills_burst_but_no_more),
        cmocka_unit_test(late_wakeup_rebases_on_now),
        cmocka_unit_test(want_beyond_allowance_returns_conforming_count),
        cmocka_unit_test(want_zero_and_bad_arguments),
        cmocka_unit_test(extreme_rates_saturate_without_overflow),
        cmocka_unit_test(batch_half_alternates),
        cmocka_unit_test(batch_two_and_a_half_alternates),
        cmocka_unit_test(batch_inexact_fractions_stay_exact),
        cmocka_unit_test(batch_cap_prevents_hoarding),
        cmocka_unit_test(batch_same_tick_grants_nothing),
        cmocka_unit_test(batch_unused_allowance_is_dropped),
        cmocka_unit_test(batch_extremes_and_bad_arguments),
    };
    return TL_RUN(tests, NULL, NULL);
}
