/* test_validate.c - input checks: accepted values and exact messages for rejected ones. */
#include "testlib.h"

#include "validate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define assert_contains(hay, needle)                                                               \
    do {                                                                                           \
        if (!strstr((hay), (needle))) {                                                            \
            print_error("expected to find\n  %s\nin\n  %s\n", (needle), (hay));                    \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

typedef struct bad_case {
    const char *in;
    const char *msg; /* substring expected in the message */
} bad_case;

static void url_ok(const char *u)
{
    pgp_error err = {{0}};
    int rc = validate_url("webhook_url", u, &err);
    if (rc != 0) {
        print_error("expected '%s' to be accepted, got: %s\n", u, err.msg);
        fail();
    }
}

static void url_bad(const char *u, const char *msg)
{
    pgp_error err = {{0}};
    int rc = validate_url("webhook_url", u, &err);
    if (rc != -EINVAL || !strstr(err.msg, msg)) {
        print_error("expected '%s' to be rejected with\n  %s\ngot rc %d:\n  %s\n", u, msg, rc,
                    err.msg);
        fail();
    }
}

static void test_name(void **state)
{
    static const char *const good[] = {"a", "Z", "0", "acme", "acme-corp_1.eu:prod@x", "9lives"};
    pgp_error err = {{0}};
    for (size_t i = 0; i < PGP_ARRAY_LEN(good); i++)
        assert_int_equal(validate_name("customer", good[i], &err), 0);
    char name[200];
    memset(name, 'n', 128);
    name[128] = '\0';
    assert_int_equal(validate_name("customer", name, &err), 0);

    name[128] = 'n';
    name[129] = '\0';
    assert_int_equal(validate_name("customer", name, &err), -EINVAL);
    assert_contains(err.msg, "customer: must be at most 128 characters");

    static const bad_case bad[] = {
        {"", "customer: must not be empty"},
        {"-acme", "customer: must start with a letter or digit, got '-acme'"},
        {".x", "customer: must start with a letter or digit"},
        {"_x", "customer: must start with a letter or digit"},
        {"acme corp", "customer: character ' ' at position 5 is not allowed (use A-Z a-z 0-9 . "
                      "_ : @ -), got 'acme corp'"},
        {"a/b", "character '/' at position 2 is not allowed"},
        {"a\nb", "character '\\x0a' at position 2 is not allowed"},
        {"caf\xc3\xa9", "character '\\xc3' at position 4 is not allowed"},
        {"a'b", "character '\\x27' at position 2"},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        assert_int_equal(validate_name("customer", bad[i].in, &err), -EINVAL);
        assert_contains(err.msg, bad[i].msg);
    }
    assert_int_equal(validate_name("customer", NULL, &err), -EINVAL);
    assert_string_equal(err.msg, "customer: must not be empty");
    /* err may be NULL when only the verdict matters. */
    assert_int_equal(validate_name("customer", "-", NULL), -EINVAL);
}

static void test_rate(void **state)
{
    static const struct {
        const char *in;
        double v;
    } good[] = {{"60", 60},       {"0.5", 0.5},    {"1e3", 1000}, {".5", 0.5},       {"5.", 5},
                {"6000000", 6e6}, {"1E-3", 0.001}, {"+2", 2},     {"0.0001", 0.0001}};
    pgp_error err = {{0}};
    for (size_t i = 0; i < PGP_ARRAY_LEN(good); i++) {
        double v = -1;
        int rc = validate_rate("rate", good[i].in, &v, &err);
        if (rc != 0)
            print_error("%s: %s\n", good[i].in, err.msg);
        assert_int_equal(rc, 0);
        assert_true(v == good[i].v);
    }
    static const bad_case bad[] = {
        {"0", "rate: must be greater than 0 per minute, got '0'"},
        {"0.0", "must be greater than 0"},
        {"-1", "rate: must be greater than 0 per minute, got '-1'"},
        {"-0", "must be greater than 0"},
        {"1e-400", "must be greater than 0"},
        {"-1e999", "must be greater than 0"},
        {"nan", "rate: expected a decimal number per minute greater than 0 (e.g. 60, 0.5, 1e3), "
                "got 'nan'"},
        {"NaN", "got 'NaN'"},
        {"inf", "expected a decimal number"},
        {"Infinity", "expected a decimal number"},
        {"-inf", "expected a decimal number"},
        {"", "rate: expected a number per minute greater than 0 (e.g. 60, 0.5, 1e3), got an empty "
             "value"},
        {" 5", "got ' 5'"},
        {"5 ", "got '5 '"},
        {"5x", "got '5x'"},
        {"0x10", "got '0x10'"},
        {"0x1p3", "got '0x1p3'"},
        {"1e", "got '1e'"},
        {"1e+", "expected a decimal number"},
        {".", "expected a decimal number"},
        {"1.2.3", "expected a decimal number"},
        {"1,5", "expected a decimal number"},
        {"6000000.1", "rate: at most 6000000 per minute, got '6000000.1'"},
        {"1e7", "at most 6000000 per minute"},
        {"1e999", "at most 6000000 per minute"},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        double v = 42;
        int rc = validate_rate("rate", bad[i].in, &v, &err);
        if (rc != -EINVAL || !strstr(err.msg, bad[i].msg)) {
            print_error("'%s': expected\n  %s\ngot rc %d:\n  %s\n", bad[i].in, bad[i].msg, rc,
                        err.msg);
            fail();
        }
        assert_true(v == 42); /* untouched on error */
    }
    assert_int_equal(validate_rate("rate", NULL, NULL, &err), -EINVAL);
}

static void test_double(void **state)
{
    static const double_range open = {0, 1, false, false};  /* 0 < x < 1 */
    static const double_range upper = {0, 1, false, true};  /* 0 < x <= 1 */
    static const double_range closed = {-2, 3, true, true}; /* -2 <= x <= 3 */
    static const struct {
        const double_range *range;
        const char *in;
        double v;
    } good[] = {
        {&open, "0.9", 0.9},       {&open, ".5", 0.5},
        {&open, "5e-2", 0.05},     {&open, "+0.003", 0.003},
        {&open, "1E-300", 1e-300}, {&open, "0.99999999999999989", 0.99999999999999989},
        {&upper, "1", 1},          {&upper, "1.0", 1},
        {&upper, "1e0", 1},        {&closed, "-2", -2},
        {&closed, "3", 3},         {&closed, "-0", 0},
        {&closed, "2.5", 2.5},
    };
    pgp_error err = {{0}};
    for (size_t i = 0; i < PGP_ARRAY_LEN(good); i++) {
        double v = -1;
        int rc = validate_double("--x", good[i].in, good[i].range, &v, &err);
        if (rc != 0)
            print_error("%s: %s\n", good[i].in, err.msg);
        assert_int_equal(rc, 0);
        assert_true(v == good[i].v);
    }
    static const struct {
        const double_range *range;
        bad_case c;
    } bad[] = {
        {&open, {"0", "--x: expected a number greater than 0 and less than 1, got '0'"}},
        {&open, {"1", "--x: expected a number greater than 0 and less than 1, got '1'"}},
        {&open, {"-0", "got '-0'"}},
        {&open, {"-0.5", "got '-0.5'"}},
        {&open, {"0.99999999999999999", "got '0.99999999999999999'"}}, /* rounds to 1 */
        {&open, {"nan", "got 'nan'"}},
        {&open, {"NaN", "got 'NaN'"}},
        {&open, {"inf", "got 'inf'"}},
        {&open, {"-Infinity", "got '-Infinity'"}},
        {&open, {"0x0.8p0", "got '0x0.8p0'"}},
        {&open, {"", "--x: expected a number greater than 0 and less than 1, got ''"}},
        {&open, {" 0.5", "got ' 0.5'"}},
        {&open, {"0.5 ", "got '0.5 '"}},
        {&open, {"0.5x", "got '0.5x'"}},
        {&open, {"0,5", "got '0,5'"}},
        {&open, {".", "got '.'"}},
        {&open, {"1e", "got '1e'"}},
        {&open, {"1e-400", "got '1e-400'"}}, /* underflows */
        {&upper, {"1e999", "--x: expected a number greater than 0 and at most 1, got '1e999'"}},
        {&upper, {"1.0000000000000002", "at most 1"}},
        {&upper, {"0", "greater than 0 and at most 1, got '0'"}},
        {&closed, {"-2.0000000000000004", "--x: expected a number at least -2 and at most 3"}},
        {&closed, {"3.0000000000000004", "at least -2 and at most 3"}},
        {&closed, {"\x01\n", "got '\\x01\\x0a'"}}, /* control bytes are shown escaped */
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        double v = 42;
        int rc = validate_double("--x", bad[i].c.in, bad[i].range, &v, &err);
        if (rc != -EINVAL || !strstr(err.msg, bad[i].c.msg)) {
            print_error("'%s': expected\n  %s\ngot rc %d:\n  %s\n", bad[i].c.in, bad[i].c.msg, rc,
                        err.msg);
            fail();
        }
        assert_true(v == 42); /* untouched on error */
    }
    assert_int_equal(validate_double("--x", NULL, &open, NULL, &err), -EINVAL);
    assert_string_equal(err.msg, "--x: expected a number greater than 0 and less than 1, got ''");
    assert_int_equal(validate_double("--x", "0.5", &open, NULL, NULL), 0);

    char words[128];
    validate_double_range(words, sizeof words, &upper);
    assert_string_equal(words, "greater than 0 and at most 1");
    validate_double_range(words, sizeof words, &closed);
    assert_string_equal(words, "at least -2 and at most 3");
}

static void test_int(void **state)
{
    pgp_error err = {{0}};
    long long v = 0;
    assert_int_equal(validate_int("n", "0", 0, 10, &v, &err), 0);
    assert_int_equal(v, 0);
    assert_int_equal(validate_int("n", "10", 0, 10, &v, &err), 0);
    assert_int_equal(v, 10);
    assert_int_equal(validate_int("n", "-5", -10, 10, &v, &err), 0);
    assert_int_equal(v, -5);
    assert_int_equal(validate_int("n", "9223372036854775807", 0, 9223372036854775807LL, &v, &err),
                     0);
    assert_true(v == 9223372036854775807LL);
    assert_int_equal(
        validate_int("n", "-9223372036854775808", -9223372036854775807LL - 1, 0, &v, &err), 0);
    assert_true(v == -9223372036854775807LL - 1);

    static const char *const bad[] = {"11",
                                      "-1",
                                      "",
                                      "abc",
                                      "1x",
                                      " 1",
                                      "1 ",
                                      "+1",
                                      "0x1",
                                      "1.0",
                                      "1e3",
                                      "-",
                                      "--1",
                                      "9223372036854775808",
                                      "-9223372036854775809",
                                      "99999999999999999999999"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        v = 77;
        assert_int_equal(validate_int("n", bad[i], 0, 10, &v, &err), -EINVAL);
        char want[256];
        snprintf(want, sizeof want, "n: expected an integer from 0 to 10, got '%s'", bad[i]);
        assert_string_equal(err.msg, want);
        assert_int_equal(v, 77);
    }
    assert_int_equal(validate_int("n", NULL, 0, 10, &v, &err), -EINVAL);
    assert_string_equal(err.msg, "n: expected an integer from 0 to 10, got ''");
}

static void test_mode(void **state)
{
    pgp_error err = {{0}};
    assert_int_equal(validate_mode("mode", "spaced", &err), 0);
    assert_int_equal(validate_mode("mode", "batch", &err), 0);
    assert_int_equal(validate_mode("mode", "unlimited", &err), 0);
    static const char *const bad[] = {"", "Spaced", "batched", "spaced ", "unlimit"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        assert_int_equal(validate_mode("mode", bad[i], &err), -EINVAL);
        char want[256];
        snprintf(want, sizeof want, "mode: must be one of spaced, batch, unlimited; got '%s'",
                 bad[i]);
        assert_string_equal(err.msg, want);
    }
    assert_int_equal(validate_mode("mode", NULL, &err), -EINVAL);
}

static void test_url_good(void **state)
{
    static const char *const good[] = {
        "http://example.com",
        "https://example.com/",
        "HTTPS://Example.COM/hook",
        "HtTp://example.com",
        "https://example.com:443/a/b?c=d&e=f",
        "https://example.com?x=1",
        "https://example.com:1",
        "https://example.com:65535/",
        "https://example.com:08080/",
        "http://localhost/",
        "http://a",
        "http://my_host.internal-1.example~x/",
        "http://ex%41mple.com/",
        "http://127.0.0.1:8080/hook",
        "http://0.0.0.0/",
        "http://255.255.255.255/",
        "http://[::1]/",
        "http://[::1]:8080/x",
        "https://[2001:db8::1]",
        "https://[2001:db8:0:0:0:0:0:1]?q",
        "http://[::ffff:192.0.2.1]/",
        "https://example.com/p@th/with@signs?and=@",
        "https://example.com/%20encoded/%E2%82%AC",
        "https://example.com/caf\xc3\xa9",
        "https://example.com/a:b;c,d=e!f$g&h'i(j)k*l+m",
        "https://example.com.:443/",
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(good); i++)
        url_ok(good[i]);

    char u[2100];
    int n = snprintf(u, sizeof u, "https://example.com/");
    memset(u + n, 'p', 2048 - (size_t)n);
    u[2048] = '\0';
    url_ok(u);
}

static void test_url_bad(void **state)
{
    static const bad_case bad[] = {
        {"", "webhook_url: must not be empty"},
        {"ftp://example.com/", "webhook_url: scheme must be http or https, got 'ftp'"},
        {"httpx://example.com/", "scheme must be http or https, got 'httpx'"},
        {"file:///etc/passwd", "scheme must be http or https, got 'file'"},
        {"javascript:alert(1)", "scheme must be http or https, got 'javascript'"},
        {"example.com/hook", "webhook_url: must start with http:// or https://"},
        {"//example.com/", "must start with http:// or https://"},
        {"://example.com/", "must start with http:// or https://"},
        {"1http://x", "must start with http:// or https://"},
        {"http:example.com", "webhook_url: expected '://' after 'http'"},
        {"http:/example.com", "expected '://' after 'http'"},
        {"http:", "expected '://' after 'http'"},
        {"http://", "webhook_url: missing host"},
        {"http:///path", "webhook_url: missing host"},
        {"http://?q", "webhook_url: missing host"},
        {"http://:8080/", "webhook_url: missing host"},
        {"http://user@example.com/", "webhook_url: user info (user@host) is not allowed"},
        {"http://user:pw@example.com/", "user info (user@host) is not allowed"},
        {"http://@example.com/", "user info (user@host) is not allowed"},
        {"http://example.com@evil.com/", "user info (user@host) is not allowed"},
        {"http://example.com/#frag", "webhook_url: fragments ('#...') are not allowed"},
        {"http://example.com#", "fragments ('#...') are not allowed"},
        {"http://exa mple.com/", "webhook_url: contains whitespace or a control character (byte "
                                 "0x20 at position 11)"},
        {" http://example.com/", "byte 0x20 at position 1"},
        {"http://example.com/ ", "byte 0x20 at position 20"},
        {"http://example.com/\t", "byte 0x09"},
        {"http://example.com/\r\nX-Injected: 1", "byte 0x0d"},
        {"http://example.com/\x7f", "byte 0x7f"},
        {"http://example.com/\x01", "byte 0x01"},
        {"http://example.com:0/", "webhook_url: port must be 1-65535, got '0'"},
        {"http://example.com:65536/", "port must be 1-65535, got '65536'"},
        {"http://example.com:99999999999999999999/", "port must be 1-65535"},
        {"http://example.com:/", "webhook_url: port must be 1-65535, got nothing after ':'"},
        {"http://example.com:", "port must be 1-65535, got nothing after ':'"},
        {"http://example.com:80a/", "port must be 1-65535, got '80a'"},
        {"http://example.com:-1/", "port must be 1-65535, got '-1'"},
        {"http://example.com:+80/", "port must be 1-65535"},
        {"http://example.com:80:80/", "port must be 1-65535, got '80:80'"},
        {"http://exa\\mple.com/", "host 'exa\\x5cmple.com' contains '\\x5c'"},
        {"http://exa!mple.com/", "host 'exa!mple.com' contains '!', which is not allowed"},
        {"http://ex%4mple.com/", "has a '%' not followed by two hex digits"},
        {"http://ex%/", "has a '%' not followed by two hex digits"},
        {"http://caf\xc3\xa9.example/", "contains '\\xc3', which is not allowed"},
        {"http://999.1.1.1/", "webhook_url: invalid IPv4 address '999.1.1.1'"},
        {"http://1.2.3/", "invalid IPv4 address '1.2.3'"},
        {"http://1.2.3.4.5/", "invalid IPv4 address"},
        {"http://0177.0.0.1/", "invalid IPv4 address '0177.0.0.1' (expected four numbers 0-255 "
                               "without leading zeros)"},
        {"http://2130706433/", "invalid IPv4 address"},
        {"http://1..2.3/", "invalid IPv4 address"},
        {"http://[::1/", "webhook_url: IPv6 address is missing its closing ']'"},
        {"http://[]/", "webhook_url: invalid IPv6 address '[]'"},
        {"http://[1.2.3.4]/", "invalid IPv6 address '[1.2.3.4]'"},
        {"http://[:::::]/", "invalid IPv6 address"},
        {"http://[12345::1]/", "invalid IPv6 address"},
        {"http://[fe80::1%25eth0]/", "only hex digits, ':' and '.' are allowed"},
        {"http://[::g]/", "only hex digits"},
        {"http://[::1]x/", "webhook_url: unexpected 'x' after the IPv6 address"},
        {"http://[::1]:/", "port must be 1-65535, got nothing after ':'"},
        {"http://[::1]:0/", "port must be 1-65535"},
        {"http://[::1]:70000/", "port must be 1-65535"},
        {"http://::1/", "webhook_url: missing host"},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++)
        url_bad(bad[i].in, bad[i].msg);

    char u[2200];
    int n = snprintf(u, sizeof u, "https://example.com/");
    memset(u + n, 'p', 2049 - (size_t)n);
    u[2049] = '\0';
    url_bad(u, "webhook_url: longer than 2048 bytes");

    pgp_error err = {{0}};
    assert_int_equal(validate_url("webhook_url", NULL, &err), -EINVAL);
    assert_string_equal(err.msg, "webhook_url: must not be empty");
}

/* Inputs are echoed shortened and escaped, so a hostile value cannot flood or garble a log. */
static void test_message_excerpt(void **state)
{
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big, "ftp", 3);
    big[3] = ':';
    pgp_error err = {{0}};
    assert_int_equal(validate_url("u", big, &err), -EINVAL);
    assert_string_equal(err.msg, "u: longer than 2048 bytes");
    big[100] = '\0';
    assert_int_equal(validate_url("u", big, &err), -EINVAL);
    assert_string_equal(err.msg, "u: scheme must be http or https, got 'ftp'");
    assert_int_equal(validate_int("n", big, 0, 1, NULL, &err), -EINVAL);
    assert_contains(err.msg, "xxx...'");
    assert_true(strlen(err.msg) < 200);
    assert_int_equal(validate_mode("m", "\x1b[31mred", &err), -EINVAL);
    assert_string_equal(err.msg, "m: must be one of spaced, batch, unlimited; got '\\x1b[31mred'");
}

/* Refused: resolvers read these as IPv4 addresses that the URL does not show. */
static void url_rejects_numeric_host_forms(void **state)
{
    const char *bad[] = {"http://0x7f.1/", "http://0x7f000001/", "http://0x7/", "http://0x7f65536/",
                         "https://0X7F.0.0.1/x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pgp_error err = {{0}};
        assert_int_not_equal(validate_url("webhook_url", bad[i], &err), 0);
        assert_non_null(strstr(err.msg, "hex or short form"));
    }
    const char *good[] = {"http://0x.example.com/", "http://a0x7f.example/", "http://127.0.0.1/",
                          "http://7f.example/"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        pgp_error err = {{0}};
        if (validate_url("webhook_url", good[i], &err) != 0)
            fail_msg("%s rejected: %s", good[i], err.msg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(url_rejects_numeric_host_forms),
        cmocka_unit_test(test_name),
        cmocka_unit_test(test_rate),
        cmocka_unit_test(test_double),
        cmocka_unit_test(test_int),
        cmocka_unit_test(test_mode),
        cmocka_unit_test(test_url_good),
        cmocka_unit_test(test_url_bad),
        cmocka_unit_test(test_message_excerpt),
    };
    return TL_RUN(tests, NULL, NULL);
}
