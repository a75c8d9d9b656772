/* oauth_token.c - the pure parts of OAuth2 client credentials (oauth_token.h).
 *
 * JSON comes from jansson (Debian's libjansson): a token response is untrusted input from a
 * server the customer names, and a maintained, fuzzed parser with duplicate-key and NUL
 * rejection is less risk than a hand-written one for the few fields needed here. What pgpace
 * then demands of the fields is here, checked by unit/dispatch/test_oauth.c and
 * fuzz/fuzz_oauth_token.c.
 */
#include "oauth_token.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

long oauth_form_encode(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                     (*p >= '0' && *p <= '9') || *p == '*' || *p == '-' || *p == '.' || *p == '_';
        size_t need = plain || *p == ' ' ? 1 : 3;
        if (n + need >= cap)
            return -1;
        if (plain) {
            out[n++] = (char)*p;
        } else if (*p == ' ') {
            out[n++] = '+';
        } else {
            out[n++] = '%';
            out[n++] = hex[*p >> 4];
            out[n++] = hex[*p & 15];
        }
    }
    if (n >= cap)
        return -1;
    out[n] = '\0';
    return (long)n;
}

static bool token_chars_ok(const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] > 0x7e)
            return false;
    return true;
}

int oauth_parse_token(const char *body, size_t len, char **token, int64_t *expires_in_s,
                      const char **why)
{
    *token = NULL;
    *expires_in_s = 0;
    *why = NULL;
    if (len == 0 || len > OAUTH_BODY_MAX) {
        *why = len ? "the response is too large" : "the response is empty";
        return -EINVAL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        *why = "the response is not JSON";
        return -EINVAL;
    }
    int rc = -EINVAL;
    if (!json_is_object(root)) {
        *why = "the response is not a JSON object";
        goto done;
    }
    json_t *at = json_object_get(root, "access_token");
    if (!json_is_string(at)) {
        *why = "access_token is missing or not a string";
        goto done;
    }
    size_t tlen = json_string_length(at);
    const char *tval = json_string_value(at);
    if (tlen == 0 || tlen > OAUTH_TOKEN_MAX || !token_chars_ok(tval, tlen)) {
        *why = "access_token is not 1 to 8192 printable ASCII characters without space";
        goto done;
    }
    json_t *tt = json_object_get(root, "token_type");
    if (!json_is_string(tt) || strcasecmp(json_string_value(tt), "bearer") != 0) {
        *why = "token_type is not Bearer";
        goto done;
    }
    int64_t life = OAUTH_DEFAULT_LIFETIME_S;
    json_t *ei = json_object_get(root, "expires_in");
    if (ei && !json_is_null(ei)) {
        double v = -1;
        if (json_is_integer(ei)) {
            v = (double)json_integer_value(ei);
        } else if (json_is_real(ei)) {
            v = json_real_value(ei);
        } else if (json_is_string(ei)) {
            /* Some servers send it quoted; nothing but digits is accepted. */
            const char *sv = json_string_value(ei);
            size_t sl = json_string_length(ei);
            if (sl > 0 && sl <= 12 && strspn(sv, "0123456789") == sl)
                v = strtod(sv, NULL);
        }
        if (!(v >= 1 && v <= OAUTH_MAX_LIFETIME_S)) {
            *why = "expires_in is not a number of seconds from 1 to 31536000";
            goto done;
        }
        life = (int64_t)v;
    }
    *token = malloc(tlen + 1);
    if (!*token) {
        *why = "out of memory";
        rc = -ENOMEM;
        goto done;
    }
    memcpy(*token, tval, tlen + 1);
    *expires_in_s = life;
    rc = 0;
done:
    json_decref(root);
    return rc;
}
