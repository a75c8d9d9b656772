/* test_receiver_settings.c - the table of receiver settings (src/receiver_settings.c) and what
 * reads it: the long options built from it, each kind of value read into its customer_set.sql
 * parameter (words such as 'default' and 'none' included), the custom options (event patterns,
 * filters, headers), the rules between options, and the help text made from it. */
#include "testlib.h"

#include "receiver_settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P(x) SQL_CUSTOMER_SET_P_##x

static size_t row(const char *name)
{
    for (size_t i = 0; i < receiver_settings_count; i++)
        if (strcmp(receiver_settings[i].name, name) == 0)
            return i;
    fail_msg("no setting --%s", name);
    return 0;
}

/* Reads "--name value" into v; returns rs_take's result. */
static int take(rs_values *v, const char *name, const char *arg, pgp_error *err)
{
    return rs_take(row(name), arg, v, err);
}

static void long_options_follow_the_table(void **state)
{
    static const struct option common[] = {{"db", required_argument, NULL, 1}, {NULL, 0, NULL, 0}};
    struct option opts[80];
    int n = rs_long_options(RS_CUSTOMER, common, 2000, opts, 80);
    assert_true(n > 20);
    assert_string_equal(opts[0].name, "db");
    assert_null(opts[n].name);
    int found = 0;
    for (int i = 1; i < n; i++) {
        const receiver_setting *s = &receiver_settings[opts[i].val - 2000];
        assert_string_equal(opts[i].name, s->name);
        assert_int_equal(opts[i].has_arg, s->arg ? required_argument : no_argument);
        assert_true(s->scope & RS_CUSTOMER);
        found += strcmp(s->name, "events") == 0;
    }
    assert_int_equal(found, 0); /* endpoints only */
    n = rs_long_options(RS_ENDPOINT_SET, NULL, 0, opts, 80);
    bool events = false, no_filter = false;
    for (int i = 0; i < n; i++) {
        events = events || strcmp(opts[i].name, "events") == 0;
        no_filter = no_filter || strcmp(opts[i].name, "no-filter") == 0;
    }
    assert_true(events && no_filter);
    assert_int_equal(rs_long_options(RS_CUSTOMER, NULL, 0, opts, 5), -1);
}

static void values_reach_their_parameters(void **state)
{
    rs_values v = {0};
    pgp_error err;
    assert_int_equal(take(&v, "rate", "0.5", &err), 0);
    assert_string_equal(v.param[P(RATE)], "0.5");
    assert_int_equal(take(&v, "mode", "batch", &err), 0);
    assert_string_equal(v.param[P(MODE)], "batch");
    assert_int_equal(take(&v, "paused", NULL, &err), 0);
    assert_string_equal(v.param[P(PAUSED)], "true");
    assert_int_equal(take(&v, "active", NULL, &err), 0);
    assert_string_equal(v.param[P(PAUSED)], "false");
    assert_int_equal(take(&v, "connect-timeout-ms", "default", &err), 0);
    assert_string_equal(v.param[P(CONNECT_TIMEOUT_MS)], "0");
    assert_int_equal(take(&v, "throttle-floor", "0.5", &err), 0);
    assert_string_equal(v.param[P(THROTTLE_FLOOR)], "0.5");
    assert_int_equal(take(&v, "max-age", "2h", &err), 0);
    assert_string_equal(v.param[P(MAX_AGE)], "7200 seconds");
    assert_int_equal(take(&v, "max-age", "none", &err), 0);
    assert_string_equal(v.param[P(MAX_AGE)], "0");
    /* 'none' clears through its own parameter; a number after it wins, and the reverse. */
    assert_int_equal(take(&v, "max-in-flight", "none", &err), 0);
    assert_string_equal(v.param[P(CLEAR_MAX_IN_FLIGHT)], "true");
    assert_null(v.param[P(MAX_IN_FLIGHT)]);
    assert_int_equal(take(&v, "max-in-flight", "7", &err), 0);
    assert_null(v.param[P(CLEAR_MAX_IN_FLIGHT)]);
    assert_string_equal(v.param[P(MAX_IN_FLIGHT)], "7");
    assert_true(rs_any_param(&v));
    rs_values_free(&v);
    rs_values empty = {0};
    assert_false(rs_any_param(&empty));
}

static void bad_values_name_their_option(void **state)
{
    static const struct {
        const char *name, *arg, *says;
    } cases[] = {
        {"rate", "0", "--rate: must be greater than 0"},
        {"burst", "0", "--burst: expected an integer from 1 to 1000000"},
        {"max-in-flight", "x",
         "--max-in-flight: expected an integer from 1 to 1000000, got 'x' "
         "(or 'none')"},
        {"request-timeout-ms", "99", "(or 'default')"},
        {"throttle-decrease", "1",
         "--throttle-decrease: expected a number greater than 0 and "
         "less than 1, got '1' (or 'default')"},
        {"max-age", "366d", "--max-age: expected a duration such as 90s"},
        {"mode", "fast", "--mode: must be one of spaced, batch, unlimited"},
        {"url", "ftp://x", "--url: scheme must be http or https"},
        {"key-type", "rsa", "--key-type: expected hmac or ed25519, got 'rsa'"},
        {"proxy", "socks5://p:1", "--proxy"},
        {"auth", "digest:x", "(or oauth2 with --oauth-* flags)"},
        {"secret", "whsec_x", "--secret: expected whsec_"},
        {"header", "Host: x", "--header #1: Host is reserved"},
        {"oauth-scope", "a  b", "--oauth-scope: expected scope tokens"},
        {"events", "a*b", "--events: pattern 1 ('a*b'): a wildcard * may only end a pattern"},
        {"events", "ok,", "--events: pattern 2 is empty"},
        {"events", " ,x", "--events: pattern 1 (''): is empty"},
        {"filter", "{", "--filter: not JSON"},
        {"filter", "null", "--filter: must be a JSON object such as {\"region\":\"eu\"}"},
        {"filter", "true", "got a boolean"},
        {"filter", "{\"region\":\"eu\",\"region\":\"us\"}",
         "--filter: duplicate member region: an object names it twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rs_values v = {0};
        pgp_error err = {{0}};
        if (take(&v, cases[i].name, cases[i].arg, &err) != -EINVAL ||
            !strstr(err.msg, cases[i].says))
            fail_msg("--%s '%s': %s", cases[i].name, cases[i].arg, err.msg);
        rs_values_free(&v);
    }
}

static void events_become_an_array_literal(void **state)
{
    static const struct {
        const char *arg, *literal;
    } cases[] = {
        {"", "{}"},
        {"order.*", "{\"order.*\"}"},
        {" order.* , invoice.paid ", "{\"order.*\",\"invoice.paid\"}"},
        {"*", "{\"*\"}"},
        {"a\"b,c\\d", "{\"a\\\"b\",\"c\\\\d\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rs_values v = {0};
        pgp_error err;
        assert_int_equal(take(&v, "events", cases[i].arg, &err), 0);
        assert_string_equal(v.events, cases[i].literal);
        rs_values_free(&v);
    }
    /* At most 64 patterns. */
    char many[65 * 3 + 1] = "";
    for (int i = 0; i < 65; i++)
        strcat(many, i ? ",ab" : "ab");
    rs_values v = {0};
    pgp_error err;
    assert_int_equal(take(&v, "events", many, &err), -EINVAL);
    tl_assert_contains(err.msg, "--events: at most 64 patterns");
    rs_values_free(&v);
}

static void rules_between_options(void **state)
{
    static const struct {
        const char *a, *a_arg, *b, *b_arg, *says;
    } cases[] = {
        {"header", "X-A: 1", "clear-headers", NULL, "use --header or --clear-headers"},
        {"oauth-client-id", "id", "rate", "1", "go with --auth oauth2"},
        {"auth", "oauth2", "rate", "1", "--oauth-token-url is required"},
        {"client-cert", "c.pem", "rate", "1", "--client-cert needs --client-key"},
        {"client-key", "k.pem", "clear-client-cert", NULL, "not both"},
        {"rotate-secret", NULL, "retire-old-secrets", NULL, "use one of --secret"},
        {"key-type", "hmac", "retire-old-secrets", NULL, "--key-type: applies to generated"},
        {"filter", "{}", "no-filter", NULL, "use --filter or --no-filter, not both"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rs_values v = {0};
        pgp_error err;
        assert_int_equal(take(&v, cases[i].a, cases[i].a_arg, &err), 0);
        assert_int_equal(take(&v, cases[i].b, cases[i].b_arg, &err), 0);
        if (rs_check(&v, &err) != -EINVAL || !strstr(err.msg, cases[i].says))
            fail_msg("--%s --%s: %s", cases[i].a, cases[i].b, err.msg);
        rs_values_free(&v);
    }
    /* What rs_check fills: the header array, the auth parameters. */
    rs_values v = {0};
    pgp_error err;
    assert_int_equal(take(&v, "header", "X-A: 1", &err), 0);
    assert_int_equal(take(&v, "header", "X-B: \"q\"", &err), 0);
    assert_int_equal(take(&v, "auth", "basic:alice:pw", &err), 0);
    assert_int_equal(rs_check(&v, &err), 0);
    assert_string_equal(v.param[P(HEADERS)], "{\"X-A: 1\",\"X-B: \\\"q\\\"\"}");
    assert_string_equal(v.param[P(AUTH_SCHEME)], "basic");
    assert_string_equal(v.param[P(AUTH_USERNAME)], "alice");
    assert_string_equal(v.param[P(AUTH_SECRET)], "pw");
    assert_null(v.param[P(OAUTH_TOKEN_URL)]);
    rs_values_free(&v);
    rs_values cleared = {0};
    assert_int_equal(take(&cleared, "clear-headers", NULL, &err), 0);
    assert_int_equal(rs_check(&cleared, &err), 0);
    assert_string_equal(cleared.param[P(HEADERS)], "{}");
    rs_values_free(&cleared);
}

/* The help: every option of the scope in it (beside the one it is explained with, for some), no
 * line wider than 96 columns. */
static void help_is_made_from_the_table(void **state)
{
    for (unsigned scope = RS_CUSTOMER; scope <= RS_ENDPOINT_SET; scope <<= 1) {
        char *buf = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&buf, &len);
        rs_help(out, scope);
        fclose(out);
        for (const char *p = buf; *p;) {
            size_t n = strcspn(p, "\n");
            if (n > 96)
                fail_msg("a help line of %zu columns: %.*s", n, (int)n, p);
            p += n + (p[n] == '\n');
        }
        for (size_t i = 0; i < receiver_settings_count; i++) {
            const receiver_setting *s = &receiver_settings[i];
            char opt[64];
            snprintf(opt, sizeof opt, "--%s", s->name);
            const char *at = strstr(buf, opt);
            while (at && at[strlen(opt)] != ' ' && at[strlen(opt)] != '\n')
                at = strstr(at + 1, opt);
            if ((s->scope & scope) && !at)
                fail_msg("scope %u: --%s is not in the help", scope, s->name);
        }
        free(buf);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(long_options_follow_the_table),
        cmocka_unit_test(values_reach_their_parameters),
        cmocka_unit_test(bad_values_name_their_option),
        cmocka_unit_test(events_become_an_array_literal),
        cmocka_unit_test(rules_between_options),
        cmocka_unit_test(help_is_made_from_the_table),
    };
    return TL_RUN(tests, NULL, NULL);
}
