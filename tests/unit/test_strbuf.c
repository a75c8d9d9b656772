/* test_strbuf.c - the strbuf number formatters write what printf would; strbuf_json_escape
 * writes the inside of a JSON string that decodes back to its input. */
#include "strbuf.h"

#include "testlib.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* The escaped text of s[0..n), appended after a prefix (which must be kept as it was). */
static char *json_escaped(const char *s, size_t n)
{
    strbuf sb = {0};
    strbuf_puts(&sb, "<");
    strbuf_json_escape(&sb, s, n);
    const char *str = strbuf_str(&sb);
    assert_non_null(str);
    assert_int_equal(str[0], '<');
    char *copy = strdup(str + 1);
    assert_non_null(copy);
    strbuf_free(&sb);
    return copy;
}

/* Decodes the inside of a JSON string (RFC 8259 section 7: no raw '"', '\' or control
 * characters U+0000-U+001F; escapes \" \\ \/ \b \f \n \r \t \uXXXX), accepting only \u escapes
 * below 0x100 (all an escaper of bytes needs). Returns the length, or -1 when it is not valid. */
static long json_unescape(const char *in, char *out)
{
    size_t o = 0;
    for (const char *p = in; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c < 0x20)
            return -1;
        if (c != '\\') {
            out[o++] = (char)c;
            continue;
        }
        p++;
        switch (*p) {
        case '"':
            out[o++] = '"';
            break;
        case '\\':
            out[o++] = '\\';
            break;
        case '/':
            out[o++] = '/';
            break;
        case 'b':
            out[o++] = '\b';
            break;
        case 'f':
            out[o++] = '\f';
            break;
        case 'n':
            out[o++] = '\n';
            break;
        case 'r':
            out[o++] = '\r';
            break;
        case 't':
            out[o++] = '\t';
            break;
        case 'u': {
            unsigned v = 0;
            for (int i = 1; i <= 4; i++) {
                if (!isxdigit((unsigned char)p[i]))
                    return -1;
                v = v * 16 + (unsigned)(isdigit((unsigned char)p[i])
                                            ? p[i] - '0'
                                            : tolower((unsigned char)p[i]) - 'a' + 10);
            }
            if (v > 0xff)
                return -1;
            out[o++] = (char)v;
            p += 4;
            break;
        }
        default:
            return -1;
        }
    }
    return (long)o;
}

static void expect_json(const char *s, size_t n, const char *want)
{
    char *got = json_escaped(s, n);
    if (strcmp(got, want) != 0)
        fail_msg("escaped to '%s', want '%s'", got, want);
    free(got);
}

/* As expect_json, but the hex digits of \u escapes may be either case (JSON allows both). */
static void expect_json_anycase(const char *s, size_t n, const char *want)
{
    char *got = json_escaped(s, n);
    if (strcasecmp(got, want) != 0)
        fail_msg("escaped to '%s', want '%s'", got, want);
    for (const char *u = got; (u = strstr(u, "\\")) != NULL; u += 2)
        assert_true(u[1] != 'U'); /* \U is not JSON */
    free(got);
}

/* A string literal's bytes (embedded NULs included), without its terminator. */
#define EXPECT_JSON(lit, want)         expect_json(lit, sizeof(lit) - 1, want)
#define EXPECT_JSON_ANYCASE(lit, want) expect_json_anycase(lit, sizeof(lit) - 1, want)

static void json_escape_specials(void **state)
{
    (void)state;
    EXPECT_JSON("", "");
    EXPECT_JSON("plain text: 1 + 1 = 2", "plain text: 1 + 1 = 2");
    EXPECT_JSON("say \"hi\"", "say \\\"hi\\\"");
    EXPECT_JSON("C:\\dir\\", "C:\\\\dir\\\\");
    EXPECT_JSON("\\\"", "\\\\\\\"");
    EXPECT_JSON("a\nb", "a\\nb");
    EXPECT_JSON("a\r\nb", "a\\r\\nb");
    EXPECT_JSON("\tx\t", "\\tx\\t");
    /* n is the length: bytes after it are not read, and a NUL within it is escaped. */
    expect_json("abcdef", 3, "abc");
    EXPECT_JSON_ANYCASE("a\0b", "a\\u0000b");
    /* Other control characters as \u00XX, DEL too. */
    EXPECT_JSON_ANYCASE("\x01", "\\u0001");
    EXPECT_JSON_ANYCASE("\x08\x0b\x0c", "\\u0008\\u000b\\u000c");
    EXPECT_JSON_ANYCASE("x\x1by", "x\\u001by");
    EXPECT_JSON_ANYCASE("\x1f", "\\u001f");
    EXPECT_JSON_ANYCASE("\x7f", "\\u007f");
    /* The neighbours of the escaped ranges are copied. */
    EXPECT_JSON(" ~/", " ~/");
    /* UTF-8 (and any byte from 0x80 up) passes through unchanged. */
    EXPECT_JSON("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    EXPECT_JSON("\x80\xff", "\x80\xff");
}

/* Every byte value, alone and all together: the output is a valid JSON string body with no
 * raw control character, quote or lone backslash, and it decodes back to the input. */
static void json_escape_round_trip(void **state)
{
    (void)state;
    char all[256];
    for (int c = 0; c < 256; c++) {
        char one = (char)c;
        char *got = json_escaped(&one, 1);
        char back[8];
        long n = json_unescape(got, back);
        if (n != 1 || back[0] != one)
            fail_msg("byte 0x%02x escaped to '%s', which decodes to %ld bytes", c, got, n);
        if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f)
            assert_true(strlen(got) == 1 && got[0] == one); /* copied as it is */
        else
            assert_true(strlen(got) > 1);
        free(got);
        all[c] = one;
    }
    char *got = json_escaped(all, sizeof all);
    char back[256];
    assert_int_equal(json_unescape(got, back), 256);
    assert_memory_equal(back, all, 256);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(i64_as_printf),
        cmocka_unit_test(fixed3_as_printf),
        cmocka_unit_test(json_escape_specials),
        cmocka_unit_test(json_escape_round_trip),
    };
    return TL_RUN(tests, NULL, NULL);
}
