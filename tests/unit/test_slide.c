/* test_slide.c - sliding-window limits: never exceeded at any instant, exact where they keep
 * every send, conservative where they merge, and indifferent to where a day "begins". */
#include "testlib.h"

#include "slide.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SEC 1000000LL
#define DAY (86400 * SEC)

/* 2026-11-29 13:37:11.123456 UTC: a day that starts nowhere near midnight. */
#define T0 (1795959431LL * SEC + 123456)

static void parse_forms_and_errors(void **state)
{
    (void)state;
    slide_limit l;
    assert_int_equal(slide_limit_parse("10/1 50000/86400", &l), 0);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.w[0].count, 10);
    assert_int_equal(l.w[0].period_us, SEC);
    assert_int_equal(l.w[1].count, 50000);
    assert_int_equal(l.w[1].period_us, DAY);
    assert_int_equal(l.w[0].merge_us, 0);          /* exact: every send kept */
    assert_int_equal(l.w[1].merge_us, DAY / 1024); /* merged by 1/1024 of a day */
    char buf[128];
    assert_string_equal(slide_limit_text(&l, buf, sizeof buf), "10/s, 50000/day");
    assert_true(slide_limit_rate(&l) == 600.0);
    slide_limit_free(&l);

    assert_int_equal(slide_limit_parse("", &l), 0);
    assert_int_equal(l.n, 0);
    assert_int_equal(slide_limit_room(&l, T0, 5), INT64_MAX);
    assert_int_equal(slide_limit_free_at(&l, T0, 5, 1), T0);
    assert_int_equal(slide_limit_parse("100/10 7/90 5/120 1/604800", &l), 0);
    assert_string_equal(slide_limit_text(&l, buf, sizeof buf), "100/10s, 7/90s, 5/2min, 1/7day");
    slide_limit_free(&l);

    const char *bad[] = {
        "10",        "10/",          "/1",       "0/1",       "10/0",
        "10/604801", "1000000001/1", "10/1 5/1", "10/60 5/1", "1/1 1/2 1/3 1/4 1/5 1/6 1/7 1/8 1/9",
        "10/1x",     "-1/1",         "10/-1",    "1e3/1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(slide_limit_parse(bad[i], &l), -EINVAL);
        assert_int_equal(l.n, 0);
    }
}

/* The most sends of a record in any half-open (t - P, t]: the definition the windows keep. */
static int64_t max_in_any_window(const int64_t *sends, size_t n, int64_t period)
{
    int64_t best = 0;
    size_t lo = 0;
    for (size_t hi = 0; hi < n; hi++) {
        while (sends[lo] <= sends[hi] - period)
            lo++;
        if ((int64_t)(hi - lo + 1) > best)
            best = (int64_t)(hi - lo + 1);
    }
    return best;
}

/* A sender that sends whenever the limit lets it, at random instants: no window is ever
 * exceeded, and an exact window is used fully (it frees exactly one period after a send). */
static void never_exceeded_random_arrivals(void **state)
{
    (void)state;
    slide_limit l;
    assert_int_equal(slide_limit_parse("5/1 20/10 2000/60", &l), 0);
    size_t cap = 200000, n = 0;
    int64_t *sends = malloc(cap * sizeof *sends);
    assert_non_null(sends);
    srand(7);
    int64_t now = T0;
    for (int step = 0; step < 400000 && n < cap; step++) {
        now += rand() % 40000; /* up to 40 ms between tries */
        int64_t at = slide_limit_free_at(&l, now, 0, 1);
        if (at == now) {
            assert_true(slide_limit_room(&l, now, 0) >= 1);
            assert_int_equal(slide_limit_record(&l, now, 1), 0);
            sends[n++] = now;
        } else {
            assert_true(at > now);
            assert_int_equal(slide_limit_room(&l, now, 0), 0);
            /* Exact windows free exactly when a recorded send leaves one. */
            assert_int_equal(slide_limit_room(&l, at, 0) >= 1, 1);
            assert_int_equal(slide_limit_room(&l, at - 1, 0), 0);
        }
    }
    assert_true(n > 1000);
    assert_true(max_in_any_window(sends, n, SEC) <= 5);
    assert_true(max_in_any_window(sends, n, 10 * SEC) <= 20);
    assert_true(max_in_any_window(sends, n, 60 * SEC) <= 2000);
    assert_int_equal(max_in_any_window(sends, n, 10 * SEC), 20); /* and fully used */
    free(sends);
    slide_limit_free(&l);
}

/* A large window merges sends, each kept at the latest time of its record: never exceeded, and
 * what goes unused is at most a record's span. */
static void merged_window_is_conservative(void **state)
{
    (void)state;
    slide_limit l;
    assert_int_equal(slide_limit_parse("5000/60", &l), 0);
    int64_t merge = l.w[0].merge_us;
    assert_true(merge > 0 && merge <= 60 * SEC / 1024);
    size_t n = 0, cap = 40000;
    int64_t *sends = malloc(cap * sizeof *sends);
    assert_non_null(sends);
    int64_t now = T0;
    for (int step = 0; step < 300000 && n < cap; step++) {
        now += 1000 + rand() % 3000;
        if (slide_limit_free_at(&l, now, 0, 1) == now) {
            assert_int_equal(slide_limit_record(&l, now, 1), 0);
            sends[n++] = now;
        }
    }
    assert_true(max_in_any_window(sends, n, 60 * SEC) <= 5000);
    /* Memory stays bounded by the number of records, not sends. */
    assert_true(l.w[0].n <= 1026);
    /* Over a long run it still delivers nearly the whole limit (within 1 %). */
    double minutes = (double)(now - T0) / (60.0 * SEC);
    assert_true((double)n / minutes > 5000 * 0.99 * (minutes - 1) / minutes);
    free(sends);
    slide_limit_free(&l);
}

/* A day window that runs out holds until one day after each send, whatever time of day that is
 * (no midnight), and frees them one by one as they leave: no burst at the edge. */
static void day_window_frees_one_day_after_each_send(void **state)
{
    (void)state;
    slide_limit l;
    assert_int_equal(slide_limit_parse("2/1 3/86400", &l), 0);
    int64_t at[3] = {T0, T0 + 5 * SEC, T0 + 3600 * SEC};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(slide_limit_free_at(&l, at[i], 0, 1), at[i]);
        assert_int_equal(slide_limit_record(&l, at[i], 1), 0);
    }
    /* Held for the rest of the day. */
    assert_int_equal(slide_limit_free_at(&l, T0 + 3601 * SEC, 0, 1), T0 + DAY);
    assert_int_equal(slide_limit_room(&l, T0 + DAY - 1, 0), 0);
    assert_int_equal(slide_limit_room(&l, T0 + DAY, 0), 1);
    /* Two more need the second send to leave too: 5 s later, not at once. */
    assert_int_equal(slide_limit_free_at(&l, T0 + DAY, 0, 2), T0 + DAY + 5 * SEC);
    /* A pending (promised) send counts like a recorded one. */
    assert_int_equal(slide_limit_free_at(&l, T0 + DAY, 1, 1), T0 + DAY + 5 * SEC);
    assert_int_equal(slide_limit_free_at(&l, T0 + DAY, 0, 4), SLIDE_NEVER);
    assert_int_equal(slide_limit_free_at(&l, T0 + DAY, 3, 1), SLIDE_NEVER);
    /* A leap second is an ordinary second of the clock: 86,400 of them after the send, the send
     * has left (the clock's day, not a calendar's). */
    assert_int_equal(slide_limit_room(&l, T0 + 86400 * SEC, 0), 1);
    slide_limit_free(&l);
}

/* The clock steps back: sends recorded "later" stay in the window until the clock passes them
 * plus the period (nothing is freed early), and sends recorded meanwhile are kept at the latest
 * time seen. Forward again, everything frees as it should. */
static void clock_steps_free_nothing_early(void **state)
{
    (void)state;
    slide_limit l;
    assert_int_equal(slide_limit_parse("2/10", &l), 0);
    assert_int_equal(slide_limit_record(&l, T0, 1), 0);
    assert_int_equal(slide_limit_record(&l, T0 + SEC, 1), 0);
    int64_t back = T0 - 3600 * SEC; /* stepped back an hour */
    assert_int_equal(slide_limit_room(&l, back, 0), 0);
    assert_int_equal(slide_limit_free_at(&l, back, 0, 1), T0 + 10 * SEC);
    /* Recorded while the clock is back: kept at the latest time seen, T0 + 1 s. */
    assert_int_equal(slide_limit_record(&l, back, 1), 0);
    assert_int_equal(slide_window_used(&l.w[0], T0 + 10 * SEC), 2);
    assert_int_equal(slide_window_used(&l.w[0], T0 + 11 * SEC), 0);
    /* Stepped forward a day: all gone. */
    assert_int_equal(slide_limit_room(&l, T0 + DAY, 0), 2);
    assert_int_equal(slide_limit_record(&l, T0 + DAY, 1), 0);
    assert_int_equal(slide_window_used(&l.w[0], T0 + DAY), 1);
    slide_limit_free(&l);
}

/* A changed limit keeps what was sent (fed from the longest window that remembers it). */
static void carry_keeps_history(void **state)
{
    (void)state;
    slide_limit old, neu;
    assert_int_equal(slide_limit_parse("10/1 100/60", &old), 0);
    for (int i = 0; i < 30; i++)
        assert_int_equal(slide_limit_record(&old, T0 + i * 500000, 1), 0);
    assert_int_equal(slide_limit_parse("5/1 40/60", &neu), 0);
    assert_false(slide_limit_same(&old, &neu));
    slide_limit_carry(&neu, &old);
    int64_t now = T0 + 15 * SEC;
    assert_int_equal(slide_window_used(&neu.w[1], now), 30);
    assert_int_equal(slide_limit_room(&neu, now, 0), 4); /* one send in the last second */
    assert_int_equal(slide_limit_room(&neu, now, 6), 0);
    assert_int_equal(slide_window_free_at(&neu.w[1], now, 0, 11), T0 + 60 * SEC);
    assert_int_equal(slide_limit_free_at(&neu, now, 0, 11), SLIDE_NEVER); /* 11 > 5/s */
    slide_limit_free(&neu);
}

/* The guard keeps each send 2 % of its period longer (1 ms..500 ms), and the pace follows. */
static void guard_keeps_sends_longer(void **state)
{
    (void)state;
    slide_limit l;
    assert_int_equal(slide_limit_parse("4/1 10/5 100/86400", &l), 0);
    slide_limit_guard(&l);
    assert_int_equal(l.w[0].guard_us, 20000);
    assert_int_equal(l.w[1].guard_us, 100000);
    assert_int_equal(l.w[2].guard_us, 500000);
    assert_true(slide_limit_rate(&l) > 235.29 && slide_limit_rate(&l) < 235.30); /* 4/1.02 s */
    for (int i = 0; i < 4; i++)
        assert_int_equal(slide_limit_record(&l, T0 + i * 250000, 1), 0);
    assert_int_equal(slide_limit_free_at(&l, T0 + SEC, 0, 1), T0 + SEC + 20000);
    slide_limit_free(&l);
}

/* Extremes: counts of a billion, a week's period, times near the int64 limits. */
static void extremes_do_not_overflow(void **state)
{
    (void)state;
    slide_limit l;
    assert_int_equal(slide_limit_parse("1000000000/1 1/604800", &l), 0);
    assert_int_equal(slide_limit_record(&l, INT64_MAX - 10, 1), 0);
    assert_int_equal(slide_limit_free_at(&l, INT64_MAX - 5, 0, 1), SLIDE_NEVER);
    assert_int_equal(slide_limit_room(&l, INT64_MAX - 5, 0), 0);
    assert_int_equal(slide_limit_record(&l, INT64_MIN + 1, 1000), 0);
    slide_limit_free(&l);
    assert_int_equal(slide_limit_parse("3/1", &l), 0);
    assert_int_equal(slide_limit_record(&l, T0, 0), 0);
    assert_int_equal(slide_limit_record(&l, T0, -4), 0);
    assert_int_equal(slide_limit_room(&l, T0, -2), 3);
    assert_int_equal(slide_limit_record(&l, T0, 7), 0); /* over (a resumed history): held */
    assert_int_equal(slide_limit_room(&l, T0, 0), 0);
    assert_int_equal(slide_limit_free_at(&l, T0, 0, 1), T0 + SEC);
    slide_limit_free(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_forms_and_errors),
        cmocka_unit_test(never_exceeded_random_arrivals),
        cmocka_unit_test(merged_window_is_conservative),
        cmocka_unit_test(day_window_frees_one_day_after_each_send),
        cmocka_unit_test(clock_steps_free_nothing_early),
        cmocka_unit_test(carry_keeps_history),
        cmocka_unit_test(guard_keeps_sends_longer),
        cmocka_unit_test(extremes_do_not_overflow),
    };
    return TL_RUN(tests, NULL, NULL);
}
