/* test_oauth.c - the pure parts of OAuth2 client credentials (src/dispatch/oauth.c): what a
 * token endpoint's answer must be to give a token (and how long it lives), and the
 * form-urlencoding of the client credentials (RFC 6749 2.3.1, appendix B). */
#include "testlib.h"

#include "dispatch/oauth.h"

#include <stdlib.h>
#include <string.h>

/* Parses body (NUL-terminated, or len bytes) expecting success with token and lifetime. */
static void accepts(const char *body, const char *token, int64_t life)
{
    char *got = NULL;
    int64_t got_life = 0;
    const char *why = NULL;
    if (oauth_parse_token(body, strlen(body), &got, &got_life, &why) != 0)
        fail_msg("refused (%s): %s", why, body);
    assert_string_equal(got, token);
    assert_int_equal(got_life, life);
    free(got);
}

static void refuses(const char *body, size_t len, const char *want_why)
{
    char *got = NULL;
    int64_t life = -7;
    const char *why = NULL;
    if (oauth_parse_token(body, len, &got, &life, &why) != -EINVAL)
        fail_msg("accepted: %.200s", body);
    assert_null(got);
    assert_non_null(why);
    if (!strstr(why, want_why))
        fail_msg("%.200s: says '%s', not '%s'", body, why, want_why);
}

#define REFUSES(body, why) refuses((body), strlen(body), (why))

static void token_responses(void **state)
{
    (void)state;
    accepts("{\"access_token\":\"abc.DEF-_~+/=\",\"token_type\":\"Bearer\",\"expires_in\":120}",
            "abc.DEF-_~+/=", 120);
    accepts("{\"token_type\":\"bearer\",\"access_token\":\"t\",\"scope\":\"a b\",\"x\":[1,{}]}",
            "t", OAUTH_DEFAULT_LIFETIME_S);
    accepts("{\"access_token\":\"t\",\"token_type\":\"BEARER\",\"expires_in\":\"3600\"}", "t",
            3600);
    accepts("{\"access_token\":\"t\",\"token_type\":\"Bearer\",\"expires_in\":59.9}", "t", 59);
    accepts("{\"access_token\":\"t\",\"token_type\":\"Bearer\",\"expires_in\":null}", "t",
            OAUTH_DEFAULT_LIFETIME_S);
    accepts(" {\"access_token\":\"t\",\"token_type\":\"Bearer\",\"expires_in\":31536000}\n", "t",
            31536000);

    REFUSES("", "empty");
    REFUSES("not json", "not JSON");
    REFUSES("{\"access_token\":\"t\",\"token_type\":\"Bearer\"} trailing", "not JSON");
    REFUSES("[\"access_token\"]", "not a JSON object");
    REFUSES("{\"token_type\":\"Bearer\"}", "access_token");
    REFUSES("{\"access_token\":42,\"token_type\":\"Bearer\"}", "access_token");
    REFUSES("{\"access_token\":\"\",\"token_type\":\"Bearer\"}", "access_token");
    REFUSES("{\"access_token\":\"a b\",\"token_type\":\"Bearer\"}", "access_token");
    REFUSES("{\"access_token\":\"a\\r\\nX: 1\",\"token_type\":\"Bearer\"}", "access_token");
    REFUSES("{\"access_token\":\"a\\u00e9\",\"token_type\":\"Bearer\"}", "access_token");
    /* An embedded NUL would cut the header short: jansson refuses \u0000 by default. */
    REFUSES("{\"access_token\":\"a\\u0000b\",\"token_type\":\"Bearer\"}", "not JSON");
    /* Duplicate keys: which one wins is ambiguous, so neither does. */
    REFUSES("{\"access_token\":\"a\",\"access_token\":\"b\",\"token_type\":\"Bearer\"}",
            "not JSON");
    REFUSES("{\"access_token\":\"t\"}", "token_type");
    REFUSES("{\"access_token\":\"t\",\"token_type\":\"mac\"}", "token_type");
    REFUSES("{\"access_token\":\"t\",\"token_type\":\"Bearer \"}", "token_type");
    static const char *const lives[] = {"0",       "-1",   "0.5",    "31536001", "1e300",
                                        "\"12a\"", "\"\"", "\"-5\"", "true",     "{}"};
    for (size_t i = 0; i < sizeof lives / sizeof lives[0]; i++) {
        char body[200];
        snprintf(body, sizeof body,
                 "{\"access_token\":\"t\",\"token_type\":\"Bearer\",\"expires_in\":%s}", lives[i]);
        REFUSES(body, "expires_in");
    }

    /* Sizes: a token of OAUTH_TOKEN_MAX characters is fine, one more is not; a body beyond
     * OAUTH_BODY_MAX is refused before parsing. */
    size_t cap = OAUTH_BODY_MAX + 64;
    char *big = malloc(cap);
    char *tok = malloc(OAUTH_TOKEN_MAX + 2);
    if (!big || !tok) {
        free(big);
        free(tok);
        fail_msg("out of memory");
        return;
    }
    memset(tok, 'x', OAUTH_TOKEN_MAX);
    tok[OAUTH_TOKEN_MAX] = '\0';
    snprintf(big, cap, "{\"access_token\":\"%s\",\"token_type\":\"Bearer\"}", tok);
    accepts(big, tok, OAUTH_DEFAULT_LIFETIME_S);
    strcat(tok, "x");
    snprintf(big, cap, "{\"access_token\":\"%s\",\"token_type\":\"Bearer\"}", tok);
    REFUSES(big, "access_token");
    memset(big, ' ', cap);
    static const char small[] = "{\"access_token\":\"t\",\"token_type\":\"Bearer\"}";
    memcpy(big, small, sizeof small - 1);
    refuses(big, OAUTH_BODY_MAX + 1, "too large");
    free(tok);
    free(big);
}

static void form_encoding(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(oauth_form_encode("client-1", out, sizeof out), 8);
    assert_string_equal(out, "client-1");
    oauth_form_encode("a b:c+d/e*f.g_h~i%", out, sizeof out);
    assert_string_equal(out, "a+b%3Ac%2Bd%2Fe*f.g_h%7Ei%25");
    oauth_form_encode("\xc3\xa9=&", out, sizeof out);
    assert_string_equal(out, "%C3%A9%3D%26");
    assert_int_equal(oauth_form_encode("", out, sizeof out), 0);
    assert_string_equal(out, "");
    /* Exactly fitting (with its NUL), and one byte short. */
    assert_int_equal(oauth_form_encode("ab%", out, 6), 5);
    assert_int_equal(oauth_form_encode("ab%", out, 5), -1);
    assert_int_equal(oauth_form_encode("abc", out, 3), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(token_responses),
        cmocka_unit_test(form_encoding),
    };
    return TL_RUN(tests, NULL, NULL);
}
