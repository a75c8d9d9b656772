/* test_timebase.c - the dispatcher's clock: the first sample and large differences step it,
 * small ones are slewed at most 0.1 % without ever running backwards, slow samples are not
 * used, and the wall clock's steps (which this clock never reads after start) change nothing. */
#include "testlib.h"

#include "timebase.h"

#define SEC 1000000LL

static const int64_t wall0 = 1800000000LL * SEC; /* an epoch time */
static const int64_t mono0 = 5000 * SEC;         /* a monotonic time */

static void starts_on_the_wall_clock_and_runs_with_the_monotonic_one(void **state)
{
    timebase tb;
    tb_init(&tb, wall0, mono0);
    assert_int_equal(tb_now(&tb, mono0), wall0);
    assert_int_equal(tb_now(&tb, mono0 + 7 * SEC), wall0 + 7 * SEC);
}

/* The first sample sets the offset whatever it says (a dispatcher 5 s ahead of the server runs
 * on the server's time from its first connection), half a round trip counted. */
static void the_first_sample_steps(void **state)
{
    for (int sign = -1; sign <= 1; sign += 2) {
        timebase tb;
        tb_init(&tb, wall0, mono0);
        int64_t server = wall0 + sign * 5 * SEC; /* the server's clock differs by 5 s */
        int64_t delta = 0;
        /* Asked at mono0, answered 2 ms later; the server read its clock at mono0 + 1 ms. */
        assert_int_equal(tb_sample(&tb, mono0, mono0 + 2000, server + 1000, &delta),
                         TB_SAMPLE_STEPPED);
        assert_int_equal(delta, sign * 5 * SEC);
        assert_int_equal(tb_now(&tb, mono0 + 2000), server + 2000);
        assert_int_equal(tb_now(&tb, mono0 + 60 * SEC), server + 60 * SEC);
    }
}

/* After the first: a difference within TIMEBASE_STEP_US is slewed, at most 1 ms per second, in
 * either direction, and the clock never goes backwards while it is. */
static void small_differences_are_slewed(void **state)
{
    for (int sign = -1; sign <= 1; sign += 2) {
        timebase tb;
        tb_init(&tb, wall0, mono0);
        assert_int_equal(tb_sample(&tb, mono0, mono0, wall0, NULL), TB_SAMPLE_STEPPED);
        int64_t m = mono0 + SEC;
        int64_t diff = sign * 200000; /* 200 ms */
        assert_int_equal(tb_sample(&tb, m, m, wall0 + SEC + diff, NULL), TB_SAMPLE_SLEWED);
        int64_t prev = tb_now(&tb, m);
        assert_int_equal(prev, wall0 + SEC); /* nothing applied yet */
        /* Read every 1.5 ms for 250 s: each step is 1.5 ms +- 0.1 %, never backwards. */
        for (int64_t t = m + 1500; t <= m + 250 * SEC; t += 1500) {
            int64_t now = tb_now(&tb, t);
            int64_t step = now - prev;
            if (step < 1500 - 2 || step > 1500 + 2)
                fail_msg("at +%lld us: the clock moved %lld us in 1500", (long long)(t - m),
                         (long long)step);
            prev = now;
        }
        /* 200 ms at 1 ms/s: done after 200 s; exact from then on. */
        assert_int_equal(tb_now(&tb, m + 250 * SEC), wall0 + SEC + 250 * SEC + diff);
    }
}

/* Read rarely, the slew still keeps its rate: one read after 10 s moves at most 10 ms more. */
static void slewing_is_bounded_by_elapsed_time(void **state)
{
    timebase tb;
    tb_init(&tb, wall0, mono0);
    tb_sample(&tb, mono0, mono0, wall0, NULL);
    assert_int_equal(tb_sample(&tb, mono0, mono0, wall0 + 400000, NULL), TB_SAMPLE_SLEWED);
    assert_int_equal(tb_now(&tb, mono0 + 10 * SEC), wall0 + 10 * SEC + 10000);
    /* Reads under a millisecond apart each move less than 1 us, but they add up. */
    int64_t now = 0;
    for (int i = 1; i <= 1000; i++)
        now = tb_now(&tb, mono0 + 10 * SEC + i * 100);
    assert_int_equal(now, wall0 + 10 * SEC + 100000 + 10000 + 100);
}

/* More than TIMEBASE_STEP_US: the server's clock was stepped (or a failover reached a server
 * whose clock differs): followed at once. */
static void large_differences_step(void **state)
{
    timebase tb;
    tb_init(&tb, wall0, mono0);
    tb_sample(&tb, mono0, mono0, wall0, NULL);
    int64_t delta = 0;
    assert_int_equal(tb_sample(&tb, mono0 + SEC, mono0 + SEC, wall0 + SEC - 30 * SEC, &delta),
                     TB_SAMPLE_STEPPED);
    assert_int_equal(delta, -30 * SEC);
    assert_int_equal(tb_now(&tb, mono0 + 2 * SEC), wall0 + 2 * SEC - 30 * SEC);
    assert_int_equal(tb_sample(&tb, mono0 + 3 * SEC, mono0 + 3 * SEC,
                               wall0 + 3 * SEC - 30 * SEC + TIMEBASE_STEP_US, NULL),
                     TB_SAMPLE_SLEWED);
    assert_int_equal(tb_sample(&tb, mono0 + 3 * SEC, mono0 + 3 * SEC,
                               wall0 + 3 * SEC - 30 * SEC + TIMEBASE_STEP_US + 1, NULL),
                     TB_SAMPLE_STEPPED);
}

/* A slow answer says little about when the server read its clock: after the first sample it
 * is not used; nor is one answered before it was asked. */
static void slow_samples_are_ignored(void **state)
{
    timebase tb;
    tb_init(&tb, wall0, mono0);
    /* The first is used even when slow: it is better than this host's wall clock. */
    assert_int_equal(tb_sample(&tb, mono0, mono0 + 300000, wall0 + 7 * SEC, NULL),
                     TB_SAMPLE_STEPPED);
    int64_t before = tb_now(&tb, mono0 + SEC);
    int64_t delta = 1;
    assert_int_equal(
        tb_sample(&tb, mono0 + SEC, mono0 + SEC + TIMEBASE_MAX_RTT_US + 1, wall0, &delta),
        TB_SAMPLE_IGNORED);
    assert_int_equal(delta, 0);
    assert_int_equal(tb_sample(&tb, mono0 + SEC, mono0 + SEC - 1, wall0, NULL), TB_SAMPLE_IGNORED);
    assert_int_equal(tb_now(&tb, mono0 + 2 * SEC), before + SEC);
}

/* The process-wide clock: monotonic between reads, whatever the wall clock does (the
 * integration tests step the wall clock with libfaketime; here: it never goes backwards and
 * follows the monotonic clock). */
static void the_process_clock_follows_the_monotonic_clock(void **state)
{
    int64_t m0 = timebase_mono_us(), n0 = timebase_now_us();
    int64_t prev = n0;
    for (int i = 0; i < 100000; i++) {
        int64_t n = timebase_now_us();
        assert_true(n >= prev);
        prev = n;
    }
    int64_t m1 = timebase_mono_us(), n1 = timebase_now_us();
    assert_true((n1 - n0) - (m1 - m0) < 1000 && (n1 - n0) - (m1 - m0) > -1000);
    /* Starts on the wall clock (no sample taken here). */
    int64_t off = timebase_now_us() - timebase_wall_us();
    assert_true(off < SEC && off > -SEC);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(starts_on_the_wall_clock_and_runs_with_the_monotonic_one),
        cmocka_unit_test(the_first_sample_steps),
        cmocka_unit_test(small_differences_are_slewed),
        cmocka_unit_test(slewing_is_bounded_by_elapsed_time),
        cmocka_unit_test(large_differences_step),
        cmocka_unit_test(slow_samples_are_ignored),
        cmocka_unit_test(the_process_clock_follows_the_monotonic_clock),
    };
    return TL_RUN(tests, NULL, NULL);
}
