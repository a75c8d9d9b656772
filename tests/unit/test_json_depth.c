/* test_json_depth.c - json_depth() counts the nesting of arrays and objects outside strings,
 * exactly for valid JSON, never below zero for stray closers, stops at stop_at, and agrees with
 * a byte-at-a-time reference on random texts of the characters that matter. */
#include "common.h"
#include "json_depth.h"

#include "testlib.h"

#include <stdlib.h>
#include <string.h>

/* The contract, one byte at a time: the reference json_depth() must agree with. */
static size_t reference_depth(const char *s, size_t len)
{
    size_t depth = 0, max = 0;
    int in_string = 0, escaped = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (escaped)
                escaped = 0;
            else if (c == '\\')
                escaped = 1;
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > max)
                max = depth;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return max;
}

static size_t depth_of(const char *s)
{
    return json_depth(s, strlen(s), 0);
}

static void valid_json(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t depth;
    } cases[] = {
        {"", 0},
        {"1", 0},
        {"\"text\"", 0},
        {"[]", 1},
        {"{}", 1},
        {"{\"a\":1}", 1},
        {"[[]]", 2},
        {"{\"a\":[1]}", 2},
        {"[[1],[[2]],{\"b\":{\"c\":[3]}}]", 4},
        /* Brackets inside strings do not count, escaped quotes do not end them. */
        {"[\"]\"]", 1},
        {"[\"[[[[\"]", 1},
        {"{\"a\\\"[[\":\"}\\\\\"}", 1},
        {"[\"\\\\\", [1]]", 2},
        {"[\"\\u005b\"]", 1},
        {"{\"customer\":\"acme\",\"payload\":{\"a\":[{\"b\":[]}]}}", 5},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(cases); i++) {
        size_t got = depth_of(cases[i].text);
        if (got != cases[i].depth)
            fail_msg("%s: depth %zu, want %zu", cases[i].text, got, cases[i].depth);
        assert_int_equal(reference_depth(cases[i].text, strlen(cases[i].text)), cases[i].depth);
    }
}

static void invalid_text(void **state)
{
    (void)state;
    /* Stray closers never take the count below zero; levels opened after them count. */
    assert_int_equal(depth_of("]]]["), 1);
    assert_int_equal(depth_of("[]]][["), 2);
    assert_int_equal(depth_of("}{]["), 1);
    assert_int_equal(depth_of("}}{["), 2);
    /* An unterminated string hides the rest (a parser stops there). */
    assert_int_equal(depth_of("[\"[[[["), 1);
    assert_int_equal(depth_of("[\"\\"), 1);
    assert_int_equal(depth_of("[\"\\\""), 1);
    /* Mismatched pairs are counted as levels all the same. */
    assert_int_equal(depth_of("[}[}[}"), 1);
    assert_int_equal(depth_of("[{[{"), 4);
    /* NUL bytes are ordinary bytes. */
    assert_int_equal(json_depth("[\0[\0\"\0[\"", 9, 0), 2);
    /* Only len bytes are read. */
    assert_int_equal(json_depth("[[[[", 2, 0), 2);
    assert_int_equal(json_depth("[", 0, 0), 0);
}

static void deep_and_stop(void **state)
{
    (void)state;
    size_t n = 100000;
    char *s = malloc(2 * n);
    assert_non_null(s);
    memset(s, '[', n);
    memset(s + n, ']', n);
    assert_int_equal(json_depth(s, 2 * n, 0), n);
    assert_int_equal(json_depth(s, 2 * n, 258), 258);
    assert_int_equal(json_depth(s, 257, 258), 257);
    /* Deep in one place, shallow after: the greatest depth is kept. */
    s[n] = '"';
    s[n + 1] = '"';
    assert_int_equal(json_depth(s, 2 * n, 0), n);
    free(s);
}

/* A string of backslashes: an even run before the quote leaves it closing the string, an odd
 * run escapes it. Long runs cost one pass (the scan is linear however they are arranged). */
static void backslash_runs(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    char *s = malloc(n + 8);
    assert_non_null(s);
    for (size_t run = n - 1; run <= n; run++) {
        s[0] = '"';
        memset(s + 1, '\\', run);
        memcpy(s + 1 + run, "\"[[", 3);
        size_t len = run + 4;
        size_t want = run % 2 == 0 ? 2 : 0;
        assert_int_equal(json_depth(s, len, 0), want);
        assert_int_equal(reference_depth(s, len), want);
    }
    /* Many short strings with escaped quotes in a row. */
    size_t len = 0;
    s[len++] = '[';
    while (len + 6 < n) {
        memcpy(s + len, "\"\\\"[\",", 6);
        len += 6;
    }
    s[len++] = ']';
    assert_int_equal(json_depth(s, len, 0), 1);
    free(s);
}

static void random_texts_match_the_reference(void **state)
{
    (void)state;
    static const char alphabet[] = "[]{}\"\\\\a:,";
    uint64_t x = 0x9E3779B97F4A7C15ull;
    char buf[64];
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t len = (size_t)(x % sizeof buf);
        uint64_t y = x;
        for (size_t k = 0; k < len; k++) {
            y = y * 6364136223846793005ull + 1442695040888963407ull;
            buf[k] = alphabet[(y >> 33) % (sizeof alphabet - 1)];
        }
        size_t want = reference_depth(buf, len);
        size_t got = json_depth(buf, len, 0);
        if (got != want)
            fail_msg("'%.*s': depth %zu, reference %zu", (int)len, buf, got, want);
        size_t stop = 1 + (size_t)(x % 4);
        assert_int_equal(json_depth(buf, len, stop), want < stop ? want : stop);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_json),
        cmocka_unit_test(invalid_text),
        cmocka_unit_test(deep_and_stop),
        cmocka_unit_test(backslash_runs),
        cmocka_unit_test(random_texts_match_the_reference),
    };
    return TL_RUN(tests, NULL, NULL);
}
