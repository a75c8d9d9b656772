/* test_strbuf.c - the strbuf number formatters write what printf would. */
#include "strbuf.h"

#include "testlib.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void i64_as_printf(void **state)
{
    (void)state;
    static const int64_t values[] = {0,         1,         -1,        9,         10,
                                     -10,       99,        100,       12345678,  -987654321,
                                     INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        strbuf sb = {0};
        strbuf_puts(&sb, "{");
        strbuf_put_i64(&sb, values[i]);
        char want[32];
        snprintf(want, sizeof want, "{%" PRId64, values[i]);
        assert_string_equal(strbuf_str(&sb), want);
        strbuf_free(&sb);
    }
    /* And a pseudo-random spread over the whole range. */
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t v = (int64_t)(x >> (i % 64));
        if (i % 2)
            v = -v;
        strbuf sb = {0};
        strbuf_put_i64(&sb, v);
        char want[32];
        snprintf(want, sizeof want, "%" PRId64, v);
        assert_string_equal(strbuf_str(&sb), want);
        strbuf_free(&sb);
    }
}

static void fixed3_as_printf(void **state)
{
    (void)state;
    static const double values[] = {0,      1,      0.25,        12.3456, 999.9994,
                                    -3.125, -0.125, 1234567.891, 0.001,   42.0004};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        strbuf sb = {0};
        strbuf_put_fixed3(&sb, values[i]);
        char want[64];
        snprintf(want, sizeof want, "%.3f", values[i]);
        assert_string_equal(strbuf_str(&sb), want);
        strbuf_free(&sb);
    }
    /* Durations as the sender measures them (microsecond resolution, in ms): the same text as
     * printf, halves aside (none here: a whole number of microseconds is never a half). */
    for (int64_t us = 0; us < 2000000; us += 7) {
        double ms = (double)us / 1000.0;
        strbuf sb = {0};
        strbuf_put_fixed3(&sb, ms);
        char want[64];
        snprintf(want, sizeof want, "%.3f", ms);
        assert_string_equal(strbuf_str(&sb), want);
        strbuf_free(&sb);
    }
    const double odd[] = {NAN, INFINITY, -INFINITY, 1e300};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        strbuf sb = {0};
        strbuf_put_fixed3(&sb, odd[i]);
        assert_string_equal(strbuf_str(&sb), "0.000");
        strbuf_free(&sb);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(i64_as_printf),
        cmocka_unit_test(fixed3_as_printf),
    };
    return TL_RUN(tests, NULL, NULL);
}
