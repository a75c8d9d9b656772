/* test_status_query.c - GET /v1/status's query string (status_query.h): defaults, each
 * parameter at its bounds and just beyond, percent-decoding of the filter, errors that name the
 * parameter, repeated and unknown parameters, the sort's spelling and the name filter.
 */
#include "testlib.h"

#include "status_query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const LIMIT_ERR = "limit: expected 1 to 500"; /* the header's example */

static status_query parse_ok(const char *query)
{
    status_query q;
    char err[256] = "";
    if (status_query_parse(query, &q, err, sizeof err) != 0)
        fail_msg("'%s' refused: %s", query ? query : "(NULL)", err);
    return q;
}

/* Fails with an error that starts with prefix ("limit: "); returns it for exact checks. */
static const char *parse_err(const char *query, const char *prefix)
{
    static char err[256];
    status_query q;
    memset(err, 0, sizeof err);
    if (status_query_parse(query, &q, err, sizeof err) != -1)
        fail_msg("'%s' accepted, expected an error starting '%s'", query, prefix);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("'%s': error '%s' does not start with '%s'", query, err, prefix);
    return err;
}

static void expect_defaults(const status_query *q)
{
    assert_int_equal(q->offset, 0);
    assert_int_equal(q->limit, STATUS_DEFAULT_LIMIT);
    assert_int_equal(q->sort, STATUS_SORT_NAME);
    assert_false(q->descending);
    assert_string_equal(q->filter, "");
}

static void defaults(void **state)
{
    (void)state;
    status_query q = parse_ok(NULL);
    expect_defaults(&q);
    q = parse_ok("");
    expect_defaults(&q);
    q = parse_ok("&");
    expect_defaults(&q);
    q = parse_ok("&&&");
    expect_defaults(&q);
    /* Whatever was in the struct before does not leak through. */
    memset(&q, 0x5a, sizeof q);
    char err[64];
    assert_int_equal(status_query_parse("", &q, err, sizeof err), 0);
    expect_defaults(&q);
}

static void limit_bounds(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("limit=1").limit, 1);
    assert_int_equal(parse_ok("limit=500").limit, 500);
    assert_int_equal(parse_ok("limit=50").limit, 50);
    assert_int_equal(parse_ok("limit=%35%30").limit, 50); /* values are percent-decoded */

    const char *bad[] = {
        "limit=0",   "limit=501",         "limit=1000",  "limit=",
        "limit=abc", "limit=-1",          "limit=+1",    "limit=1.5",
        "limit=1e2", "limit=0x10",        "limit=%20",   "limit=5%",
        "limit=%zz", "limit=12345678901", "limit=50abc", "limit=4294967297",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_string_equal(parse_err(bad[i], "limit: "), LIMIT_ERR);
    /* A value far longer than any buffer the parser might use. */
    char big[700] = "limit=";
    memset(big + 6, '9', 600);
    big[606] = '\0';
    assert_string_equal(parse_err(big, "limit: "), LIMIT_ERR);
}

static void offset_bounds(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("offset=0").offset, 0);
    assert_int_equal(parse_ok("offset=1").offset, 1);
    assert_int_equal(parse_ok("offset=1000000000").offset, 1000000000L);
    assert_int_equal(parse_ok("offset=999999999").offset, 999999999L);

    const char *bad[] = {"offset=1000000001",
                         "offset=9999999999",
                         "offset=99999999999",
                         "offset=-1",
                         "offset=",
                         "offset=x",
                         "offset=1 ",
                         "offset=18446744073709551617"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        parse_err(bad[i], "offset: ");
    /* The error also says what was expected, as limit's does. */
    assert_non_null(strstr(parse_err("offset=1000000001", "offset: "), "1000000000"));
}

static void sort_keys(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        status_sort sort;
    } keys[] = {
        {"name", STATUS_SORT_NAME},           {"rate", STATUS_SORT_RATE},
        {"effective", STATUS_SORT_EFFECTIVE}, {"observed", STATUS_SORT_OBSERVED},
        {"in_flight", STATUS_SORT_IN_FLIGHT}, {"state", STATUS_SORT_STATE},
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        char query[64];
        snprintf(query, sizeof query, "sort=%s", keys[i].key);
        status_query q = parse_ok(query);
        assert_int_equal(q.sort, keys[i].sort);
        assert_false(q.descending);
        snprintf(query, sizeof query, "sort=-%s", keys[i].key);
        q = parse_ok(query);
        assert_int_equal(q.sort, keys[i].sort);
        assert_true(q.descending);
        /* The other parameters keep their defaults. */
        assert_int_equal(q.limit, STATUS_DEFAULT_LIMIT);
        assert_int_equal(q.offset, 0);
    }
    status_query q = parse_ok("sort=%2Drate"); /* '-' percent-encoded */
    assert_int_equal(q.sort, STATUS_SORT_RATE);
    assert_true(q.descending);

    const char *bad[] = {"sort=size",  "sort=",          "sort=-",     "sort=--name",
                         "sort=+name", "sort=%2Bname",   "sort=name-", "sort=names",
                         "sort=nam",   "sort=in-flight", "sort=%zz",   "sort=name%00"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        parse_err(bad[i], "sort: ");
}

static void filter_decoding(void **state)
{
    (void)state;
    assert_string_equal(parse_ok("filter=acme").filter, "acme");
    assert_string_equal(parse_ok("filter=").filter, "");
    assert_string_equal(parse_ok("filter=a+b").filter, "a b");
    assert_string_equal(parse_ok("filter=+").filter, " ");
    assert_string_equal(parse_ok("filter=%41").filter, "A");
    assert_string_equal(parse_ok("filter=%41bc").filter, "Abc");
    assert_string_equal(parse_ok("filter=ab%41").filter, "abA"); /* an escape at the end */
    assert_string_equal(parse_ok("filter=%6a%6A").filter, "jj"); /* either case of hex */
    assert_string_equal(parse_ok("filter=%2B").filter, "+");     /* a literal plus */
    assert_string_equal(parse_ok("filter=%20").filter, " ");     /* space is no control */
    assert_string_equal(parse_ok("filter=a%26b").filter, "a&b"); /* not a separator */
    assert_string_equal(parse_ok("filter=a%3Db").filter, "a=b");
    assert_string_equal(parse_ok("filter=a=b").filter, "a=b"); /* the first '=' splits */
    assert_string_equal(parse_ok("filter=%25").filter, "%");   /* decoded once, not twice */
    assert_string_equal(parse_ok("filter=%2541").filter, "%41");
    assert_string_equal(parse_ok("filter=%C3%A9").filter, "\xc3\xa9"); /* UTF-8 bytes pass */
    assert_string_equal(parse_ok("filter=~").filter, "~");
    assert_string_equal(parse_ok("filter=ac&limit=3").filter, "ac");

    const char *bad[] = {"filter=%4",  "filter=%zz", "filter=%",    "filter=ab%",
                         "filter=%4g", "filter=%g4", "filter=%%41", "filter=a%2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        parse_err(bad[i], "filter: ");
}

static void filter_control_characters(void **state)
{
    (void)state;
    const char *bad[] = {"filter=%00",  "filter=a%00b", "filter=%0a", "filter=%0D", "filter=%09",
                         "filter=%1f",  "filter=%1B",   "filter=%7f", "filter=%7F", "filter=x%01",
                         "filter=\x01", "filter=a\tb",  "filter=\x7f"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        parse_err(bad[i], "filter: ");
    /* The neighbours of the refused ranges are fine. */
    assert_string_equal(parse_ok("filter=%21").filter, "!");
    assert_string_equal(parse_ok("filter=%7e").filter, "~");
    assert_string_equal(parse_ok("filter=%80").filter, "\x80");
}

/* At most STATUS_MAX_FILTER (200) bytes once decoded: the raw length does not count. */
static void filter_length(void **state)
{
    (void)state;
    char query[8 + 3 * 202 + 1];
    char want[202];

    memcpy(query, "filter=", 7);
    memset(query + 7, 'f', 200);
    query[7 + 200] = '\0';
    memset(want, 'f', 200);
    want[200] = '\0';
    assert_string_equal(parse_ok(query).filter, want);

    memset(query + 7, 'f', 201);
    query[7 + 201] = '\0';
    parse_err(query, "filter: ");

    /* 200 bytes written as 600 characters of escapes: fine; 201 of them: too long. */
    size_t o = 7;
    for (int i = 0; i < 200; i++, o += 3)
        memcpy(query + o, "%41", 3);
    query[o] = '\0';
    memset(want, 'A', 200);
    want[200] = '\0';
    assert_string_equal(parse_ok(query).filter, want);
    memcpy(query + o, "%41", 4);
    parse_err(query, "filter: ");

    /* 199 plus a '+' (one byte) is 200. */
    memset(query + 7, 'f', 199);
    memcpy(query + 7 + 199, "+", 2);
    memset(want, 'f', 199);
    memcpy(want + 199, " ", 2);
    assert_string_equal(parse_ok(query).filter, want);
}

/* Parameters other than the four are ignored, whatever their value (a cache-buster, say). */
static void unknown_parameters_ignored(void **state)
{
    (void)state;
    status_query q = parse_ok("_=1712345678901&limit=5&foo=bar");
    assert_int_equal(q.limit, 5);
    q = parse_ok("foo=%zz&bar=%00&baz=%");
    expect_defaults(&q);
    q = parse_ok("x=&=5&==&limits=0&filte=%zz&filters=%zz&filter_=%00&sorts=nope&offset_=x");
    expect_defaults(&q);
    char big[600] = "junk=";
    memset(big + 5, 'j', 500);
    big[505] = '\0';
    q = parse_ok(big);
    expect_defaults(&q);
}

/* A repeated parameter must be valid each time; the last counts. */
static void repeated_last_wins(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("limit=5&limit=7").limit, 7);
    assert_int_equal(parse_ok("offset=9&offset=0").offset, 0);
    status_query q = parse_ok("sort=-rate&sort=name");
    assert_int_equal(q.sort, STATUS_SORT_NAME);
    assert_false(q.descending);
    q = parse_ok("sort=name&sort=-state");
    assert_int_equal(q.sort, STATUS_SORT_STATE);
    assert_true(q.descending);
    assert_string_equal(parse_ok("filter=abc&filter=de").filter, "de");
    assert_string_equal(parse_ok("filter=abc&filter=").filter, "");
    q = parse_ok("limit=5&filter=a&offset=3&sort=-rate&limit=9&filter=b");
    assert_int_equal(q.limit, 9);
    assert_int_equal(q.offset, 3);
    assert_int_equal(q.sort, STATUS_SORT_RATE);
    assert_true(q.descending);
    assert_string_equal(q.filter, "b");
    /* A bad value fails, first or last. */
    assert_string_equal(parse_err("limit=5&limit=0", "limit: "), LIMIT_ERR);
    assert_string_equal(parse_err("limit=0&limit=5", "limit: "), LIMIT_ERR);
}

/* A parameter without '=' has an empty value: empty limit, offset and sort are bad values,
 * an empty filter matches everything, an unknown one is ignored. */
static void parameter_without_equals(void **state)
{
    (void)state;
    assert_string_equal(parse_err("limit", "limit: "), LIMIT_ERR);
    assert_string_equal(parse_err("limit&offset=1", "limit: "), LIMIT_ERR);
    parse_err("offset", "offset: ");
    parse_err("sort", "sort: ");
    assert_string_equal(parse_ok("filter").filter, "");
    assert_string_equal(parse_ok("filter=x&filter").filter, "");
    status_query q = parse_ok("nocache&limit=3&flag");
    assert_int_equal(q.limit, 3);
}

static void sort_spelling_round_trip(void **state)
{
    (void)state;
    assert_string_equal(status_sort_spelling(STATUS_SORT_NAME, false), "name");
    assert_string_equal(status_sort_spelling(STATUS_SORT_RATE, true), "-rate");
    assert_string_equal(status_sort_spelling(STATUS_SORT_IN_FLIGHT, false), "in_flight");
    assert_string_equal(status_sort_spelling(STATUS_SORT_STATE, true), "-state");
    const status_sort all[] = {STATUS_SORT_NAME,     STATUS_SORT_RATE,      STATUS_SORT_EFFECTIVE,
                               STATUS_SORT_OBSERVED, STATUS_SORT_IN_FLIGHT, STATUS_SORT_STATE};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        for (int desc = 0; desc <= 1; desc++) {
            const char *sp = status_sort_spelling(all[i], desc);
            assert_non_null(sp);
            assert_int_equal(sp[0] == '-', desc);
            char query[64];
            snprintf(query, sizeof query, "sort=%s", sp);
            status_query q = parse_ok(query);
            assert_int_equal(q.sort, all[i]);
            assert_int_equal(q.descending, desc);
        }
    }
}

static void name_matches(void **state)
{
    (void)state;
    assert_true(status_name_matches("acme", ""));
    assert_true(status_name_matches("", ""));
    assert_true(status_name_matches("acme", "acme"));
    assert_true(status_name_matches("Acme-Corp", "acme"));
    assert_true(status_name_matches("acme-corp", "CORP"));
    assert_true(status_name_matches("acme-corp", "e-C"));
    assert_true(status_name_matches("ACME", "cM"));
    assert_true(status_name_matches("a.b:c@d", ":C@"));
    assert_false(status_name_matches("acme", "acmex"));
    assert_false(status_name_matches("acme", "x"));
    assert_false(status_name_matches("", "a"));
    assert_false(status_name_matches("acme corp", "acme-corp"));
    /* The decoded filter, end to end. */
    assert_true(status_name_matches("shop_EU.1", parse_ok("filter=p%5Feu").filter));
    assert_false(status_name_matches("shop_EU.1", parse_ok("filter=p+eu").filter));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),
        cmocka_unit_test(limit_bounds),
        cmocka_unit_test(offset_bounds),
        cmocka_unit_test(sort_keys),
        cmocka_unit_test(filter_decoding),
        cmocka_unit_test(filter_control_characters),
        cmocka_unit_test(filter_length),
        cmocka_unit_test(unknown_parameters_ignored),
        cmocka_unit_test(repeated_last_wins),
        cmocka_unit_test(parameter_without_equals),
        cmocka_unit_test(sort_spelling_round_trip),
        cmocka_unit_test(name_matches),
    };
    return TL_RUN(tests, NULL, NULL);
}
