/* test_backoff.c - backoff arithmetic at its limits and Retry-After in every form. */
#include "testlib.h"

#include "backoff.h"

#include <errno.h>
#include <limits.h>
#include <math.h>

#define SEC 1000000LL

static void backoff_doubles_until_cap(void **state)
{
    /* r = 0.5 makes the factor exactly 1. */
    assert_int_equal(backoff_delay_us(0, SEC, 3600 * SEC, 0.5), SEC);
    assert_int_equal(backoff_delay_us(1, SEC, 3600 * SEC, 0.5), 2 * SEC);
    assert_int_equal(backoff_delay_us(5, SEC, 3600 * SEC, 0.5), 32 * SEC);
    assert_int_equal(backoff_delay_us(11, SEC, 3600 * SEC, 0.5), 2048 * SEC);
    assert_int_equal(backoff_delay_us(12, SEC, 3600 * SEC, 0.5), 3600 * SEC);
    assert_int_equal(backoff_delay_us(40, SEC, 3600 * SEC, 0.5), 3600 * SEC);
}

static void backoff_jitter_spans_half_to_one_and_a_half(void **state)
{
    assert_int_equal(backoff_delay_us(3, 1000, INT64_MAX, 0), 4000);
    assert_int_equal(backoff_delay_us(3, 1000, INT64_MAX, 0.25), 6000);
    assert_int_equal(backoff_delay_us(3, 1000, INT64_MAX, 0.75), 10000);
    int64_t top = backoff_delay_us(3, 1000, INT64_MAX, 0x1.fffffffffffffp-1);
    assert_true(top >= 11999 && top < 12000);
    /* Out-of-range r is clamped into [0, 1). */
    assert_int_equal(backoff_delay_us(3, 1000, INT64_MAX, -1), 4000);
    assert_int_equal(backoff_delay_us(3, 1000, INT64_MAX, NAN), 4000);
    assert_int_equal(backoff_delay_us(3, 1000, INT64_MAX, 7), top);
    assert_int_equal(backoff_delay_us(3, 1000, INT64_MAX, INFINITY), top);
}

static void backoff_saturates_for_any_attempt(void **state)
{
    int64_t cap = 86400 * SEC;
    for (int a = 0; a < 200; a++) {
        int64_t d = backoff_delay_us(a, 1000, cap, 0.5);
        assert_true(d >= 1000 && d <= cap);
    }
    assert_int_equal(backoff_delay_us(62, 1, INT64_MAX, 0.5), (int64_t)1 << 62);
    assert_int_equal(backoff_delay_us(63, 1, cap, 0.5), cap);
    assert_int_equal(backoff_delay_us(64, 1, cap, 0.5), cap);
    assert_int_equal(backoff_delay_us(INT_MAX, 1, cap, 0.5), cap);
    assert_int_equal(backoff_delay_us(INT_MAX, INT64_MAX, cap, 0.5), cap);
    assert_int_equal(backoff_delay_us(30, INT64_MAX / 4, cap, 0.5), cap);
    /* 1.5 * INT64_MAX does not fit: saturate. */
    assert_int_equal(backoff_delay_us(INT_MAX, 1, INT64_MAX, 0.9), INT64_MAX);
    assert_int_equal(backoff_delay_us(INT_MAX, 1, INT64_MAX, 0), INT64_MAX / 2);
}

static void backoff_odd_inputs(void **state)
{
    assert_int_equal(backoff_delay_us(-5, 1000, SEC, 0.5), 1000);
    assert_int_equal(backoff_delay_us(INT_MIN, 1000, SEC, 0.5), 1000);
    assert_int_equal(backoff_delay_us(3, 0, SEC, 0.5), 0);
    assert_int_equal(backoff_delay_us(3, -10, SEC, 0.5), 0);
    assert_int_equal(backoff_delay_us(3, 1000, 0, 0.5), 0);
    assert_int_equal(backoff_delay_us(3, 1000, -1, 0.9), 0);
    /* A cap below the base wins. */
    assert_int_equal(backoff_delay_us(0, 1000, 10, 0.5), 10);
}

/* 1994-11-06 08:49:37 UTC, the RFC's example date. */
#define EXAMPLE 784111777LL

static int64_t ra(const char *v, int64_t now, int64_t max)
{
    int64_t d = -12345;
    int rc = retry_after_parse(v, now, max, &d);
    if (rc != 0) {
        assert_int_equal(d, -12345); /* untouched on error */
        return rc;
    }
    return d;
}

static void retry_after_delta_seconds(void **state)
{
    assert_int_equal(ra("120", 0, 3600), 120);
    assert_int_equal(ra("0", 0, 3600), 0);
    assert_int_equal(ra("000120", 0, 3600), 120);
    assert_int_equal(ra(" 5\t", 0, 3600), 5);
    assert_int_equal(ra("5\r\n", 0, 3600), 5);
    assert_int_equal(ra("3600", 0, 3600), 3600);
    assert_int_equal(ra("3601", 0, 3600), 3600);
    assert_int_equal(ra("9223372036854775807", 0, 3600), 3600);
    assert_int_equal(ra("9223372036854775808", 0, 3600), 3600);
    assert_int_equal(ra("99999999999999999999999999999999999999", 0, INT64_MAX), INT64_MAX);
    assert_int_equal(ra("9223372036854775806", 0, INT64_MAX), INT64_MAX - 1);
    assert_int_equal(ra("7", 0, 0), 0);
}

static void retry_after_imf_fixdate(void **state)
{
    const char *d = "Sun, 06 Nov 1994 08:49:37 GMT";
    assert_int_equal(ra(d, EXAMPLE - 30, 3600), 30);
    assert_int_equal(ra(d, EXAMPLE, 3600), 0);
    assert_int_equal(ra(d, EXAMPLE + 30, 3600), 0); /* past */
    assert_int_equal(ra(d, EXAMPLE - 100000, 3600), 3600);
    assert_int_equal(ra(d, 0, INT64_MAX), EXAMPLE);
    assert_int_equal(ra("  Sun, 06 Nov 1994 08:49:37 GMT \r\n", EXAMPLE - 1, 60), 1);
    /* Wrong weekday is accepted. */
    assert_int_equal(ra("Wed, 06 Nov 1994 08:49:37 GMT", EXAMPLE - 1, 60), 1);
    /* Leap years and the month table. */
    assert_int_equal(ra("Thu, 29 Feb 2024 00:00:00 GMT", 1709164800 - 10, 60), 10);
    assert_int_equal(ra("Sat, 01 Jan 2000 00:00:00 GMT", 946684800 - 10, 60), 10);
    assert_int_equal(ra("Tue, 29 Feb 2000 00:00:00 GMT", 951782400 - 10, 60), 10);
    assert_int_equal(ra("Fri, 31 Dec 9999 23:59:59 GMT", 253402300799 - 10, 60), 10);
    assert_int_equal(ra("Thu, 01 Jan 1970 00:00:00 GMT", -10, 60), 10);
    assert_int_equal(ra("Mon, 01 Jan 0000 00:00:00 GMT", -62167219200 - 5, 60), 5);
    /* A leap second counts as the next minute's first second. */
    assert_int_equal(ra("Sat, 31 Dec 2016 23:59:60 GMT", 1483228800 - 10, 60), 10);
}

static void retry_after_obsolete_forms(void **state)
{
    int64_t now = EXAMPLE - 40;
    assert_int_equal(ra("Sunday, 06-Nov-94 08:49:37 GMT", now, 3600), 40);
    assert_int_equal(ra("Sun Nov  6 08:49:37 1994", now, 3600), 40);
    assert_int_equal(ra("Sun Nov 06 08:49:37 1994", now, 3600), 40);
    assert_int_equal(ra("Thu Nov 17 08:49:37 1994", EXAMPLE, INT64_MAX), 11 * 86400);
    /* Two-digit years: the century of `now`, unless that is more than 50 years ahead. */
    int64_t y2024 = 1704067200; /* 2024-01-01 */
    assert_int_equal(ra("Monday, 01-Jan-24 00:00:10 GMT", y2024, 60), 10);
    assert_int_equal(ra("Monday, 01-Jan-74 00:00:00 GMT", y2024, INT64_MAX),
                     3281990400 - y2024); /* 2074: exactly 50 years ahead is still ahead */
    assert_int_equal(ra("Monday, 01-Jan-75 00:00:00 GMT", y2024, INT64_MAX), 0); /* 1975 */
    int64_t y2099 = 4070908800;                                                  /* 2099-01-01 */
    /* RFC 9110 only moves far-future years back, never near-past ones forward: 2000. */
    assert_int_equal(ra("Saturday, 01-Jan-00 00:00:05 GMT", y2099, INT64_MAX), 0);
    assert_int_equal(ra("Friday, 01-Jan-99 00:00:05 GMT", y2099, INT64_MAX), 5);
}

static void retry_after_rejects_garbage(void **state)
{
    static const char *const bad[] = {
        "",
        " ",
        "\t\r\n",
        "-1",
        "+5",
        "1.5",
        "1e3",
        "0x10",
        "5 6",
        "5s",
        "５",
        "abc",
        "120;",
        "99999999999999999999x",
        "Sun, 06 Nov 1994 08:49:37 GMT garbage",
        "Sun, 06 Nov 1994 08:49:37 GMTx",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun 06 Nov 1994 08:49:37 GMT",
        "Sun,  06 Nov 1994 08:49:37 GMT",
        "sun, 06 nov 1994 08:49:37 gmt",
        "SUN, 06 NOV 1994 08:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 Nov 19945 08:49:37 GMT",
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 29 Feb 1900 08:49:37 GMT",
        "Sun, 30 Feb 2000 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:3 GMT",
        "Sun, 0a Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT\x01",
        "Sun, -6 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sunday, 06 Nov 94 08:49:37 GMT",
        "Sun, 06-Nov-94 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37",
        "Sundae, 06-Nov-94 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994",
        "Sun Nov   6 08:49:37 1994",
        "Sun Nov  6 08:49:37 94",
        "Sun Nov  6 08:49:37 1994 GMT",
        "Sun Nov  0 08:49:37 1994",
        "Sun, Nov  6 08:49:37 1994",
        "Sun",
        "Sun,",
        "Sun, 06 Nov 1994 08:49:37 GM",
        "S",
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        int64_t d = -7;
        if (retry_after_parse(bad[i], EXAMPLE, 3600, &d) != -EINVAL)
            fail_msg("accepted \"%s\" as %lld", bad[i], (long long)d);
        assert_int_equal(d, -7);
    }
}

static void retry_after_bad_arguments(void **state)
{
    int64_t d = -7;
    assert_int_equal(retry_after_parse(NULL, 0, 60, &d), -EINVAL);
    assert_int_equal(retry_after_parse("5", 0, 60, NULL), -EINVAL);
    assert_int_equal(retry_after_parse("5", 0, -1, &d), -EINVAL);
    assert_int_equal(d, -7);
}

static void retry_after_extreme_clocks(void **state)
{
    const char *d = "Sun, 06 Nov 1994 08:49:37 GMT";
    assert_int_equal(ra(d, INT64_MIN, INT64_MAX), INT64_MAX);
    assert_int_equal(ra(d, INT64_MIN + 1, 100), 100);
    assert_int_equal(ra(d, INT64_MAX, INT64_MAX), 0);
    /* RFC 850 against clocks whose year leaves 0000-9999: no overflow, just rejected. */
    assert_int_equal(ra("Sunday, 06-Nov-94 08:49:37 GMT", INT64_MAX, 60), -EINVAL);
    assert_int_equal(ra("Sunday, 06-Nov-94 08:49:37 GMT", INT64_MIN, 60), -EINVAL);
    assert_int_equal(ra("Sunday, 06-Nov-94 08:49:37 GMT", -62167219200 - 1, 60), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(backoff_doubles_until_cap),
        cmocka_unit_test(backoff_jitter_spans_half_to_one_and_a_half),
        cmocka_unit_test(backoff_saturates_for_any_attempt),
        cmocka_unit_test(backoff_odd_inputs),
        cmocka_unit_test(retry_after_delta_seconds),
        cmocka_unit_test(retry_after_imf_fixdate),
        cmocka_unit_test(retry_after_obsolete_forms),
        cmocka_unit_test(retry_after_rejects_garbage),
        cmocka_unit_test(retry_after_bad_arguments),
        cmocka_unit_test(retry_after_extreme_clocks),
    };
    return TL_RUN(tests, NULL, NULL);
}
