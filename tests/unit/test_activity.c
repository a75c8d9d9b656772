/* test_activity.c - a customer's recent requests for the status page (activity.h): the gap ring,
 * the per-minute rate from 5-second buckets and over the window observed, the per-tick counts
 * and the latest error.
 *
 * Expected values are worked out from the contract in activity.h, not read back from the code.
 */
#include "testlib.h"

#include "activity.h"

#include <math.h>
#include <string.h>

#define MS  1000LL
#define SEC 1000000LL
/* A monotonic clock some way in (uv_hrtime is never near 0), on a bucket boundary. */
#define T0 (1000 * SEC)

static void expect_gaps(const activity *a, const uint32_t *want, size_t n)
{
    uint32_t got[ACTIVITY_HISTORY + 5];
    memset(got, 0xab, sizeof got);
    assert_int_equal(activity_gaps(a, got, sizeof got / sizeof got[0]), n);
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i])
            fail_msg("gap %zu: got %u, want %u", i, got[i], want[i]);
    }
}

static void expect_ticks(const activity *a, int64_t current, const uint32_t *want, size_t n)
{
    uint32_t got[ACTIVITY_HISTORY + 5];
    memset(got, 0xab, sizeof got);
    assert_int_equal(activity_ticks(a, current, got, sizeof got / sizeof got[0]), n);
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i])
            fail_msg("tick %zu (current %lld): got %u, want %u", i, (long long)current, got[i],
                     want[i]);
    }
}

/* --- gaps ------------------------------------------------------------------------------------ */

static void fresh_has_nothing(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    uint32_t out[ACTIVITY_HISTORY];
    assert_int_equal(activity_gaps(&a, out, ACTIVITY_HISTORY), 0);
    assert_int_equal(activity_ticks(&a, 5, out, ACTIVITY_HISTORY), 0);
    assert_true(activity_per_minute(&a, T0) == 0.0);
    assert_string_equal(a.error_class, "");
    assert_int_equal(a.error_status, 0);
}

/* The first request has nothing before it: no gap. Then the gaps in order, oldest first. */
static void gaps_oldest_first(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    activity_note(&a, T0, -1);
    expect_gaps(&a, NULL, 0);
    activity_note(&a, T0 + 100 * MS, -1);
    activity_note(&a, T0 + 300 * MS, -1);
    activity_note(&a, T0 + 600 * MS, -1);
    activity_note(&a, T0 + 1600 * MS, -1);
    expect_gaps(&a, (const uint32_t[]){100, 200, 300, 1000}, 4);

    /* A smaller cap gets the latest ones, still oldest first. */
    uint32_t two[2];
    assert_int_equal(activity_gaps(&a, two, 2), 2);
    assert_int_equal(two[0], 300);
    assert_int_equal(two[1], 1000);
    assert_int_equal(activity_gaps(&a, two, 0), 0);
}

/* 35 requests make 34 gaps; the ring keeps the latest ACTIVITY_HISTORY of them, oldest first.
 * Gap k (k = 1..34) is k * 10 ms, so the kept ones are 50, 60, ..., 340. */
static void gaps_ring_wraps(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    int64_t t = T0;
    activity_note(&a, t, -1);
    uint32_t want[ACTIVITY_HISTORY];
    for (int k = 1; k <= 34; k++) {
        t += k * 10 * MS;
        activity_note(&a, t, -1);
        if (k == ACTIVITY_HISTORY) {
            /* Exactly full: gaps 1..30, nothing dropped yet. */
            for (int i = 0; i < ACTIVITY_HISTORY; i++)
                want[i] = (uint32_t)(i + 1) * 10;
            expect_gaps(&a, want, ACTIVITY_HISTORY);
        }
        if (k == ACTIVITY_HISTORY + 1) {
            for (int i = 0; i < ACTIVITY_HISTORY; i++)
                want[i] = (uint32_t)(i + 2) * 10;
            expect_gaps(&a, want, ACTIVITY_HISTORY);
        }
    }
    for (int i = 0; i < ACTIVITY_HISTORY; i++)
        want[i] = (uint32_t)(i + 5) * 10;
    expect_gaps(&a, want, ACTIVITY_HISTORY);

    /* Many more laps of the ring: still the latest 30, oldest first. */
    for (int k = 0; k < 100; k++) {
        t += (k + 1) * MS;
        activity_note(&a, t, -1);
    }
    for (int i = 0; i < ACTIVITY_HISTORY; i++)
        want[i] = (uint32_t)(71 + i);
    expect_gaps(&a, want, ACTIVITY_HISTORY);
}

/* Gaps are at most ACTIVITY_GAP_MAX_MS: an hour reads as itself, anything longer as an hour. */
static void gap_clamped_at_max(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    int64_t t = T0;
    activity_note(&a, t, -1);
    t += (int64_t)(ACTIVITY_GAP_MAX_MS - 1) * MS;
    activity_note(&a, t, -1);
    t += (int64_t)ACTIVITY_GAP_MAX_MS * MS;
    activity_note(&a, t, -1);
    t += (int64_t)(ACTIVITY_GAP_MAX_MS + 1) * MS;
    activity_note(&a, t, -1);
    t += 30LL * 24 * 3600 * SEC; /* a month */
    activity_note(&a, t, -1);
    t += 5 * MS;
    activity_note(&a, t, -1);
    expect_gaps(&a,
                (const uint32_t[]){ACTIVITY_GAP_MAX_MS - 1, ACTIVITY_GAP_MAX_MS,
                                   ACTIVITY_GAP_MAX_MS, ACTIVITY_GAP_MAX_MS, 5},
                5);
}

/* A time earlier than the latest counts as the latest: a gap of 0, never negative (which as a
 * uint32_t would read as ~49 days), and the next gap is measured from the latest time. */
static void earlier_time_counts_as_latest(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    activity_note(&a, T0, -1);
    activity_note(&a, T0 + 500 * MS, -1);
    activity_note(&a, T0 + 200 * MS, -1); /* the clock of another thread, slightly behind */
    activity_note(&a, T0 - 10 * SEC, -1);
    activity_note(&a, T0 + 700 * MS, -1);
    expect_gaps(&a, (const uint32_t[]){500, 0, 0, 200}, 4);

    /* All five requests are in the last minute (bucket 200 = [T0, T0 + 5 s), read at its
     * start + 1 s: 11 whole buckets and 1 s, 56 s). */
    assert_float_equal(activity_per_minute(&a, T0 + 1 * SEC), 5 * 60.0 / 56.0, 1e-9);
}

/* --- requests per minute --------------------------------------------------------------------- */

/* A steady 60/min stream (one request a second, at some phase within the second), read at now
 * right after the requests up to now were noted. The buckets within the last minute cover
 * between 55 and 60 s and hold the requests of that span, one more or less depending on where
 * the requests fall; so the reading is 60 within 60/55 (one request in 55 s), at any phase. */
static void steady_60_per_minute(void **state)
{
    (void)state;
    const int64_t phases[] = {0, 1, 300 * MS, 999 * MS}; /* request within its second */
    const int64_t intos[] = {0, 1, 1 * SEC, 2500 * MS, 4999 * MS, 5 * SEC - 1}; /* now in bucket */
    const double tol = 60.0 / 55.0 + 1e-9;
    for (size_t p = 0; p < sizeof phases / sizeof *phases; p++) {
        for (size_t i = 0; i < sizeof intos / sizeof *intos; i++) {
            activity a;
            activity_init(&a);
            int64_t now = T0 + 300 * SEC + intos[i]; /* five minutes of stream */
            int n = 0;
            for (int64_t t = T0 + phases[p]; t <= now; t += SEC, n++)
                activity_note(&a, t, -1);
            double r = activity_per_minute(&a, now);
            if (fabs(r - 60.0) > tol)
                fail_msg("phase %lld us, %lld us into the bucket: %.4f/min, want 60 +- %.4f",
                         (long long)phases[p], (long long)intos[i], r, tol);
        }
    }
    /* A faster stream reads as itself too: 600/min (every 100 ms) within 60/55. */
    activity a;
    activity_init(&a);
    int64_t now = T0 + 120 * SEC + 3700 * MS;
    for (int64_t t = T0 + 50 * MS; t <= now; t += 100 * MS)
        activity_note(&a, t, -1);
    assert_float_equal(activity_per_minute(&a, now), 600.0, tol);
}

/* After more than a minute without requests the rate is 0, however many came before. */
static void zero_after_a_silent_minute(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    int64_t t = T0;
    for (int i = 0; i < 600; i++, t += 100 * MS)
        activity_note(&a, t, -1);
    int64_t last = t - 100 * MS;
    assert_true(activity_per_minute(&a, last + 60 * SEC + 1) == 0.0);
    assert_true(activity_per_minute(&a, last + 61 * SEC) == 0.0);
    assert_true(activity_per_minute(&a, last + 3600 * SEC) == 0.0);
    assert_true(activity_per_minute(&a, last + 400LL * 24 * 3600 * SEC) == 0.0);
}

/* A burst, then silence: only the buckets within the last minute count, over the time they
 * cover. 100 requests at T0 + 200 ms (bucket 200, which starts at T0):
 *  - at T0 + 30 s (bucket 206; buckets 195..206 cover [T0 - 25 s, now], 55 s): 100 * 60 / 55;
 *  - at T0 + 59.2 s (bucket 211; buckets 200..211 from T0, 59.2 s): 100 * 60 / 59.2;
 *  - at T0 + 60.2 s (bucket 212; buckets 201..212): the burst is out, 0. */
static void burst_then_silence(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    for (int i = 0; i < 100; i++)
        activity_note(&a, T0 + 200 * MS, -1);
    assert_float_equal(activity_per_minute(&a, T0 + 30 * SEC), 100 * 60.0 / 55.0, 1e-9);
    assert_float_equal(activity_per_minute(&a, T0 + 59200 * MS), 100 * 60.0 / 59.2, 1e-9);
    assert_true(activity_per_minute(&a, T0 + 60200 * MS) == 0.0);
}

/* A long stream (120/min, every 500 ms from T0 to T0 + 299.5 s), then 32.5 s of silence: at
 * now = T0 + 332.5 s (bucket 266) the buckets within the last minute are 255..266, from
 * T0 + 275 s, covering 57.5 s; they hold the requests at T0 + 275 s .. T0 + 299.5 s, 50 of
 * them. So 50 * 60 / 57.5, not the 600 requests of the five minutes. */
static void only_the_last_minute_counts(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    for (int k = 0; k < 600; k++)
        activity_note(&a, T0 + k * 500 * MS, -1);
    assert_float_equal(activity_per_minute(&a, T0 + 332500 * MS), 50 * 60.0 / 57.5, 1e-9);
    /* 10 s later (bucket 268, from T0 + 285 s, 57.5 s): 30 requests, T0 + 285 .. 299.5 s. */
    assert_float_equal(activity_per_minute(&a, T0 + 342500 * MS), 30 * 60.0 / 57.5, 1e-9);

    /* The stream resumes after a pause shorter than the ring (buckets 260..269 stay silent):
     * the ring slots of the old buckets must not come back. 3 requests at T0 + 350 s
     * (bucket 270); at T0 + 351 s the buckets 259..270 cover 56 s and hold T0 + 295 ..
     * 299.5 s (10 requests) and the 3 new ones. */
    for (int i = 0; i < 3; i++)
        activity_note(&a, T0 + 350 * SEC, -1);
    assert_float_equal(activity_per_minute(&a, T0 + 351 * SEC), 13 * 60.0 / 56.0, 1e-9);
}

/* --- the window observed ---------------------------------------------------------------------- */

/* The case: a customer at 120/min, sending every 500 ms, 27 s after the dispatcher began
 * watching at since = T0 + 3 s (within bucket 200). Its requests at T0 + 3.2 s, 3.7 s, ...,
 * 29.7 s: 54 of them by now = T0 + 30 s. The window is the 27 s observed, partial, and the rate
 * 54 * 60 / 27 = 120; over the buckets' 55 s it would read 54 * 60 / 55, 58.9. */
static void partial_minute_reads_the_rate(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    int64_t since = T0 + 3 * SEC, now = T0 + 30 * SEC;
    for (int64_t t = since + 200 * MS; t <= now; t += 500 * MS)
        activity_note(&a, t, -1);
    activity_window w = activity_window_at(&a, now, since);
    assert_int_equal(w.count, 54);
    assert_int_equal(w.us, 27 * SEC);
    assert_true(w.partial);
    assert_float_equal(activity_window_rate(&w), 120.0, 1e-9);
    assert_float_equal(activity_per_minute(&a, now), 54 * 60.0 / 55.0, 1e-9);
}

/* A steady 120/min from the start of the watch, at any phase and at any moment of the first
 * minute from 5 s on: the rate is within one request's worth (60 / window) of 120, never the
 * count of a partial minute. After the minute the window is the buckets' own (not partial). */
static void steady_from_the_start_never_reads_low(void **state)
{
    (void)state;
    const int64_t phases[] = {0, 1, 250 * MS, 499 * MS};
    const int64_t sinces[] = {T0, T0 + 1, T0 + 2500 * MS, T0 + 5 * SEC - 1};
    for (size_t p = 0; p < sizeof phases / sizeof *phases; p++) {
        for (size_t k = 0; k < sizeof sinces / sizeof *sinces; k++) {
            activity a;
            activity_init(&a);
            int64_t since = sinces[k], next = since + phases[p];
            for (int64_t now = since + 5 * SEC; now <= since + 90 * SEC; now += 700 * MS) {
                for (; next <= now; next += 500 * MS)
                    activity_note(&a, next, -1);
                activity_window w = activity_window_at(&a, now, since);
                double r = activity_window_rate(&w), window_s = (double)w.us / 1e6;
                if (fabs(r - 120.0) > 60.0 / window_s + 1e-9)
                    fail_msg("since %lld, phase %lld, %.1f s in: %.3f/min over %.3f s (%llu)",
                             (long long)since, (long long)phases[p], (double)(now - since) / 1e6, r,
                             window_s, (unsigned long long)w.count);
                bool partial = now - since < 55 * SEC;
                if (partial) {
                    assert_true(w.partial);
                    assert_int_equal(w.us, now - since);
                } else if (now - since >= 60 * SEC) {
                    assert_false(w.partial);
                    assert_true(w.us >= 55 * SEC && w.us <= 60 * SEC);
                }
            }
        }
    }
}

/* Without a bound (since 0, or one older than the buckets) the window is the buckets' span, as
 * activity_per_minute reads it. */
static void old_since_is_the_full_window(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    for (int k = 0; k < 600; k++)
        activity_note(&a, T0 + k * 500 * MS, -1);
    int64_t now = T0 + 332500 * MS;
    activity_window w0 = activity_window_at(&a, now, 0);
    activity_window w1 = activity_window_at(&a, now, T0);
    assert_int_equal(w0.count, 50);
    assert_int_equal(w0.us, 57500 * MS);
    assert_false(w0.partial);
    assert_true(w1.count == w0.count && w1.us == w0.us && !w1.partial);
    assert_float_equal(activity_window_rate(&w0), activity_per_minute(&a, now), 1e-9);
}

/* Buckets that ended before since are not in the window: requests counted before the watch
 * began (another leadership of this instance) are not this one's. A request at since counts. */
static void before_since_left_out(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    for (int i = 0; i < 7; i++)
        activity_note(&a, T0 + 1 * SEC, -1); /* bucket 200 */
    int64_t since = T0 + 10 * SEC;           /* bucket 202 starts here */
    activity_note(&a, since, -1);
    activity_note(&a, since + 4 * SEC, -1);
    activity_window w = activity_window_at(&a, since + 20 * SEC, since);
    assert_int_equal(w.count, 2);
    assert_int_equal(w.us, 20 * SEC);
    assert_float_equal(activity_window_rate(&w), 6.0, 1e-9);
}

/* Under ACTIVITY_MIN_WINDOW_US there is no rate (NAN), though the count is there; a since after
 * now is an empty window. Nothing noted: a count of 0 over the window, a rate of 0. */
static void short_and_empty_windows(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    int64_t since = T0 + 200 * MS;
    for (int i = 0; i < 5; i++)
        activity_note(&a, since + 100 * MS, -1);
    activity_window w = activity_window_at(&a, since + 999 * MS, since);
    assert_int_equal(w.count, 5);
    assert_int_equal(w.us, 999 * MS);
    assert_true(isnan(activity_window_rate(&w)));
    w = activity_window_at(&a, since + 1 * SEC, since);
    assert_float_equal(activity_window_rate(&w), 300.0, 1e-9);
    w = activity_window_at(&a, since - 1 * SEC, since);
    assert_int_equal(w.us, 0);
    assert_true(w.partial);
    assert_true(isnan(activity_window_rate(&w)));

    activity none;
    activity_init(&none);
    w = activity_window_at(&none, T0 + 30 * SEC, T0 + 10 * SEC);
    assert_int_equal(w.count, 0);
    assert_int_equal(w.us, 20 * SEC);
    assert_true(w.partial);
    assert_true(activity_window_rate(&w) == 0.0);
}

/* Forgetting the count empties the minute, and keeps the gaps; later requests count again. */
static void forget_count_keeps_the_gaps(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    activity_note(&a, T0, -1);
    activity_note(&a, T0 + 300 * MS, -1);
    activity_forget_count(&a);
    assert_true(activity_per_minute(&a, T0 + 1 * SEC) == 0.0);
    expect_gaps(&a, (const uint32_t[]){300}, 1);
    activity_note(&a, T0 + 800 * MS, -1);
    expect_gaps(&a, (const uint32_t[]){300, 500}, 2);
    activity_window w = activity_window_at(&a, T0 + 2 * SEC, T0 + 500 * MS);
    assert_int_equal(w.count, 1);
}

/* --- batch ticks ----------------------------------------------------------------------------- */

/* Requests per tick, oldest first, starting at the first tick noted; skipped ticks read 0, and
 * ticks after the latest one noted up to current_tick too. */
static void ticks_counts_oldest_first(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    activity_note(&a, T0, -1); /* a request outside any batch: no tick */
    expect_ticks(&a, 10, NULL, 0);

    int64_t t = T0;
    const int64_t ticks[] = {10, 10, 11, 11, 11, 12};
    for (size_t i = 0; i < sizeof ticks / sizeof *ticks; i++)
        activity_note(&a, t += 10 * MS, ticks[i]);
    expect_ticks(&a, 12, (const uint32_t[]){2, 3, 1}, 3);
    expect_ticks(&a, 14, (const uint32_t[]){2, 3, 1, 0, 0}, 5);

    /* Skipped ticks in between. */
    activity_note(&a, t += 10 * MS, 15);
    activity_note(&a, t += 10 * MS, 15);
    activity_note(&a, t += 10 * MS, 17);
    expect_ticks(&a, 17, (const uint32_t[]){2, 3, 1, 0, 0, 2, 0, 1}, 8);

    /* A smaller cap: the latest ticks up to current_tick, oldest first. */
    uint32_t two[2];
    assert_int_equal(activity_ticks(&a, 17, two, 2), 2);
    assert_int_equal(two[0], 0);
    assert_int_equal(two[1], 1);
    assert_int_equal(activity_ticks(&a, 17, two, 0), 0);
}

/* Nothing before the first tick noted, even when it is tick 0 or the history would have room. */
static void ticks_none_before_the_first(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    activity_note(&a, T0, 1000);
    expect_ticks(&a, 1000, (const uint32_t[]){1}, 1);
    expect_ticks(&a, 1002, (const uint32_t[]){1, 0, 0}, 3);

    activity_init(&a);
    activity_note(&a, T0, 0);
    activity_note(&a, T0, 0);
    expect_ticks(&a, 0, (const uint32_t[]){2}, 1);
    expect_ticks(&a, 1, (const uint32_t[]){2, 0}, 2);
}

/* A current_tick far past the latest: the history's length of zeros. At exactly the edge the
 * oldest slot is still the latest tick noted; one further and it is gone. */
static void ticks_far_ahead_read_zero(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    activity_note(&a, T0, 10);
    activity_note(&a, T0, 11);
    activity_note(&a, T0, 11);
    activity_note(&a, T0, 12);
    uint32_t want[ACTIVITY_HISTORY] = {0};
    /* current 40: ticks 11..40 */
    want[0] = 2;
    want[1] = 1;
    expect_ticks(&a, 40, want, ACTIVITY_HISTORY);
    /* current 41: ticks 12..41 */
    memset(want, 0, sizeof want);
    want[0] = 1;
    expect_ticks(&a, 41, want, ACTIVITY_HISTORY);
    /* current 42 and beyond: ticks 13.., none noted */
    memset(want, 0, sizeof want);
    expect_ticks(&a, 42, want, ACTIVITY_HISTORY);
    expect_ticks(&a, 1000000, want, ACTIVITY_HISTORY);
    expect_ticks(&a, 1000000000000LL, want, ACTIVITY_HISTORY);
    /* The far end of the range: the count of ticks must not overflow. */
    activity_init(&a);
    activity_note(&a, T0, 0);
    expect_ticks(&a, INT64_MAX, want, ACTIVITY_HISTORY);
}

/* A customer switching between batch and the other modes starts its series afresh: one ring
 * holds either gaps or per-tick counts. */
static void mode_change_starts_the_series_afresh(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    activity_note(&a, T0, -1);
    activity_note(&a, T0 + 100 * MS, -1);
    activity_note(&a, T0 + 300 * MS, -1);
    uint32_t out[ACTIVITY_HISTORY];
    assert_int_equal(activity_gaps(&a, out, ACTIVITY_HISTORY), 2);
    /* Now batch: no gaps, and ticks from the first one noted. */
    activity_note(&a, T0 + 400 * MS, 7);
    activity_note(&a, T0 + 500 * MS, 7);
    assert_int_equal(activity_gaps(&a, out, ACTIVITY_HISTORY), 0);
    assert_int_equal(activity_ticks(&a, 7, out, ACTIVITY_HISTORY), 1);
    assert_int_equal(out[0], 2);
    /* Back to spaced: the ticks go; the gap since the latest request is the first. */
    activity_note(&a, T0 + 900 * MS, -1);
    assert_int_equal(activity_ticks(&a, 7, out, ACTIVITY_HISTORY), 0);
    assert_int_equal(activity_gaps(&a, out, ACTIVITY_HISTORY), 1);
    assert_int_equal(out[0], 400);
    /* The minute counts every request whatever the mode. */
    assert_true(activity_per_minute(&a, T0 + SEC) > 0);
}

/* A request with a tick number lower than the latest counts in the latest. */
static void ticks_lower_counts_in_latest(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    activity_note(&a, T0, 20);
    activity_note(&a, T0, 21);
    activity_note(&a, T0, 19);
    activity_note(&a, T0, 0);
    expect_ticks(&a, 21, (const uint32_t[]){1, 3}, 2);
    /* And nothing appears before the first tick noted (20) because of the lower ones. */
    expect_ticks(&a, 22, (const uint32_t[]){1, 3, 0}, 3);
}

/* More than ACTIVITY_HISTORY ticks: the latest 30, oldest first; ring slots of dropped ticks
 * must read 0 when the ticks that now map to them were skipped. */
static void ticks_wrap(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    /* Ticks 0..44, tick k with (k % 7) + 1 requests. */
    for (int64_t k = 0; k <= 44; k++) {
        for (int64_t i = 0; i < k % 7 + 1; i++)
            activity_note(&a, T0 + k * SEC, k);
    }
    uint32_t want[ACTIVITY_HISTORY];
    for (int i = 0; i < ACTIVITY_HISTORY; i++)
        want[i] = (uint32_t)((15 + i) % 7 + 1); /* ticks 15..44 */
    expect_ticks(&a, 44, want, ACTIVITY_HISTORY);

    /* Skip ticks 45..49 (their slots held 15..19), one request at 50: ticks 21..50. */
    activity_note(&a, T0 + 50 * SEC, 50);
    for (int i = 0; i < ACTIVITY_HISTORY; i++) {
        int64_t k = 21 + i;
        want[i] = k <= 44 ? (uint32_t)(k % 7 + 1) : k == 50 ? 1 : 0;
    }
    expect_ticks(&a, 50, want, ACTIVITY_HISTORY);

    /* A jump of exactly the history's length (50 -> 80): only tick 80 in ticks 51..80. */
    activity_note(&a, T0 + 80 * SEC, 80);
    memset(want, 0, sizeof want);
    want[ACTIVITY_HISTORY - 1] = 1;
    expect_ticks(&a, 80, want, ACTIVITY_HISTORY);
}

/* --- the latest error ------------------------------------------------------------------------ */

static void error_copied_and_truncated(void **state)
{
    (void)state;
    activity a;
    activity_init(&a);
    char cls[] = "http";
    activity_note_error(&a, T0 + 5 * SEC, cls, 503);
    cls[0] = 'X'; /* a copy, not the caller's pointer */
    assert_string_equal(a.error_class, "http");
    assert_int_equal(a.error_status, 503);
    assert_int_equal(a.error_us, T0 + 5 * SEC);

    /* The latest one replaces it; status 0 (no HTTP answer) is kept as 0. */
    activity_note_error(&a, T0 + 6 * SEC, "tls", 0);
    assert_string_equal(a.error_class, "tls");
    assert_int_equal(a.error_status, 0);
    assert_int_equal(a.error_us, T0 + 6 * SEC);

    /* Too long for the field: cut to fit (sizeof - 1 bytes and the NUL), status still kept. */
    const char *lng = "abcdefghijklmnopqrstuvwxyz0123456789";
    activity_note_error(&a, T0 + 7 * SEC, lng, 429);
    assert_int_equal(strlen(a.error_class), sizeof a.error_class - 1);
    assert_memory_equal(a.error_class, lng, sizeof a.error_class - 1);
    assert_int_equal(a.error_status, 429);
    assert_int_equal(a.error_us, T0 + 7 * SEC);

    /* Exactly the field's size - 1 fits whole. */
    char fit[sizeof a.error_class];
    memset(fit, 'q', sizeof fit - 1);
    fit[sizeof fit - 1] = '\0';
    activity_note_error(&a, T0 + 8 * SEC, fit, 500);
    assert_string_equal(a.error_class, fit);

    /* Errors do not touch the request history. */
    uint32_t out[ACTIVITY_HISTORY];
    assert_int_equal(activity_gaps(&a, out, ACTIVITY_HISTORY), 0);
    assert_true(activity_per_minute(&a, T0 + 8 * SEC) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fresh_has_nothing),
        cmocka_unit_test(gaps_oldest_first),
        cmocka_unit_test(gaps_ring_wraps),
        cmocka_unit_test(gap_clamped_at_max),
        cmocka_unit_test(earlier_time_counts_as_latest),
        cmocka_unit_test(steady_60_per_minute),
        cmocka_unit_test(zero_after_a_silent_minute),
        cmocka_unit_test(burst_then_silence),
        cmocka_unit_test(only_the_last_minute_counts),
        cmocka_unit_test(partial_minute_reads_the_rate),
        cmocka_unit_test(steady_from_the_start_never_reads_low),
        cmocka_unit_test(old_since_is_the_full_window),
        cmocka_unit_test(before_since_left_out),
        cmocka_unit_test(short_and_empty_windows),
        cmocka_unit_test(forget_count_keeps_the_gaps),
        cmocka_unit_test(ticks_counts_oldest_first),
        cmocka_unit_test(ticks_none_before_the_first),
        cmocka_unit_test(ticks_far_ahead_read_zero),
        cmocka_unit_test(ticks_lower_counts_in_latest),
        cmocka_unit_test(mode_change_starts_the_series_afresh),
        cmocka_unit_test(ticks_wrap),
        cmocka_unit_test(error_copied_and_truncated),
    };
    return TL_RUN(tests, NULL, NULL);
}
