/* test_json_dupkey.c - json_dupkey() finds a member name repeated in one object, compares names
 * as decoded strings, names the first repeat with its path, tells malformed text apart, and
 * agrees with jansson's JSON_REJECT_DUPLICATES on random documents. */
#include "common.h"
#include "json_dupkey.h"

#include "testlib.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dup(const char *s, char *where, size_t cap)
{
    return json_dupkey(s, strlen(s), where, cap);
}

static void expect(const char *text, int rc, const char *want)
{
    char where[128];
    int got = dup(text, where, sizeof where);
    if (got != rc || strcmp(where, want) != 0)
        fail_msg("%s: got %d '%s', want %d '%s'", text, got, where, rc, want);
}

static void repeats_are_found_and_named(void **state)
{
    (void)state;
    expect("{\"customer\":\"a\",\"customer\":\"b\",\"payload\":{}}", 1, "customer");
    expect("{\"customer\":\"a\",\"payload\":{\"x\":1,\"y\":[{\"id\":1,\"id\":2}]}}", 1,
           "payload.y[0].id");
    expect("{\"a\":[1,2,{\"b\":{\"c\":1,\"c\":2}}]}", 1, "a[2].b.c");
    expect("[{\"k\":1},{\"k\":1,\"k\":2}]", 1, "[1].k");
    /* One name spelt two ways. */
    expect("{\"a\":1,\"\\u0061\":2}", 1, "a");
    expect("{\"\\u00e9\":1,\"\xc3\xa9\":2}", 1, "\xc3\xa9");
    expect("{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}", 1, "\xf0\x9f\x98\x80");
    /* Names that are not plain are written as JSON strings. */
    expect("{\"p\":{\"a.b\":1,\"a.b\":2}}", 1, "p[\"a.b\"]");
    expect("{\"\":1,\"\":2}", 1, "[\"\"]");
    expect("{\"x\\n\":1,\"x\\n\":2}", 1, "[\"x\\u000a\"]");
    /* The first repeat in reading order. */
    expect("{\"a\":{\"b\":1,\"b\":2},\"a\":3}", 1, "a.b");
    expect("{\"z\":1,\"y\":2,\"y\":3,\"z\":4}", 1, "y");
    /* A path cut to fit, NUL included. */
    char small[5];
    assert_int_equal(dup("{\"payload\":{\"n\":1,\"n\":2}}", small, sizeof small), 1);
    assert_string_equal(small, "payl");
}

static void distinct_names_pass(void **state)
{
    (void)state;
    expect("{}", 0, "");
    expect("[]", 0, "");
    expect("1", 0, "");
    expect(" \"s\" ", 0, "");
    expect("{\"a\":1,\"b\":{\"a\":2},\"c\":[{\"a\":3},{\"a\":4}]}", 0, "");
    expect("{\"A\":1,\"a\":2}", 0, "");
    expect("{\"a\":\"a\",\"b\":\"a\"}", 0, "");
    expect("{\"n\":-0.5e+3,\"t\":true,\"f\":false,\"z\":null}", 0, "");
    /* Many names in one object (the set grows). */
    char *big = malloc(200000);
    assert_non_null(big);
    size_t n = 0;
    n += (size_t)sprintf(big + n, "{");
    for (int i = 0; i < 10000; i++)
        n += (size_t)sprintf(big + n, "%s\"k%d\":%d", i ? "," : "", i, i);
    sprintf(big + n, "}");
    char where[32];
    assert_int_equal(dup(big, where, sizeof where), 0);
    sprintf(big + n - 0, ",\"k9999\":0}");
    assert_int_equal(dup(big, where, sizeof where), 1);
    assert_string_equal(where, "k9999");
    free(big);
}

static void malformed_text_is_left_to_the_parser(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "{",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\":1,}",
        "[1,]",
        "{\"a\":1}x",
        "{\"a\":1 \"b\":2}",
        "{a:1}",
        "\"unterminated",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\udc00\"",
        "\"\\ud800x\"",
        "01",
        "1.",
        "-",
        "1e",
        "tru",
        "nul",
        "[1 2]",
        "{\"a\":1]",
        "[1}",
        "\"a\tb\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char where[16] = "untouched";
        if (dup(bad[i], where, sizeof where) != -1 || where[0] != '\0')
            fail_msg("'%s' was not refused as malformed", bad[i]);
    }
    /* A NUL is a byte like any other: malformed outside a string. */
    char where[16];
    assert_int_equal(json_dupkey("{\"a\":1}\0", 8, where, sizeof where), -1);
}

/* ---- random documents, against jansson ------------------------------------------------------- */

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

static void gen(char *buf, size_t *n, size_t cap, unsigned *s, int depth)
{
    static const char *const names[] = {"a", "b", "\\u0061", "c", "\\u00e9", "\xc3\xa9", "d\\n"};
    unsigned k = rnd(s) % (depth > 4 ? 3 : 6);
    if (*n + 64 > cap)
        k = 0;
    if (k == 0) {
        *n += (size_t)snprintf(buf + *n, cap - *n, "%u", rnd(s) % 100);
    } else if (k == 1) {
        *n += (size_t)snprintf(buf + *n, cap - *n, "\"%s\"", names[rnd(s) % 7]);
    } else if (k == 2) {
        *n += (size_t)snprintf(buf + *n, cap - *n, "null");
    } else if (k == 3 || k == 4) {
        unsigned m = rnd(s) % 4;
        buf[(*n)++] = '{';
        for (unsigned i = 0; i < m; i++) {
            *n +=
                (size_t)snprintf(buf + *n, cap - *n, "%s\"%s\":", i ? "," : "", names[rnd(s) % 7]);
            gen(buf, n, cap, s, depth + 1);
        }
        buf[(*n)++] = '}';
    } else {
        unsigned m = rnd(s) % 4;
        buf[(*n)++] = '[';
        for (unsigned i = 0; i < m; i++) {
            if (i)
                buf[(*n)++] = ',';
            gen(buf, n, cap, s, depth + 1);
        }
        buf[(*n)++] = ']';
    }
    buf[*n] = '\0';
}

static void agrees_with_jansson(void **state)
{
    (void)state;
    unsigned s = 20261129;
    int dups = 0, clean = 0;
    for (int i = 0; i < 20000; i++) {
        char doc[8192];
        size_t n = 0;
        gen(doc, &n, sizeof doc, &s, 0);
        json_error_t err;
        json_t *j = json_loadb(doc, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
        json_t *any = json_loadb(doc, n, JSON_DECODE_ANY, &err);
        assert_non_null(any); /* the generator writes valid JSON */
        char where[64];
        int rc = json_dupkey(doc, n, where, sizeof where);
        if (rc != (j ? 0 : 1))
            fail_msg("%s: json_dupkey %d, jansson %s", doc, rc, j ? "accepts" : "refuses");
        dups += rc == 1;
        clean += rc == 0;
        json_decref(j);
        json_decref(any);
    }
    print_message("# 20000 random documents: %d with a repeated name, %d without\n", dups, clean);
    assert_true(dups > 1000 && clean > 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(repeats_are_found_and_named),
        cmocka_unit_test(distinct_names_pass),
        cmocka_unit_test(malformed_text_is_left_to_the_parser),
        cmocka_unit_test(agrees_with_jansson),
    };
    return TL_RUN(tests, NULL, NULL);
}
