/* fuzz_oauth_token.c - oauth_parse_token and oauth_form_encode (src/dispatch/oauth_token.c):
 * a token endpoint is a server the customer names, so its answers are hostile input.
 *
 * Input: the response body as is. Invariants, beyond "no crash, no sanitizer report":
 *   - success => 0 and a NUL-terminated token of 1 to OAUTH_TOKEN_MAX characters, each 0x21 to
 *     0x7e (it becomes a header line as it is: no CR, LF, space or NUL), a lifetime of 1 to
 *     OAUTH_MAX_LIFETIME_S seconds, and no reason; failure => -EINVAL, a reason, no token;
 *   - a body over OAUTH_BODY_MAX bytes always fails;
 *   - form-encoding the input (cut at its first NUL) gives only A-Z a-z 0-9 * - . _ + %XX, and
 *     decoding that gives the input back; a buffer one byte too short gives -1.
 */
#include "fuzz_util.h"

#include "dispatch/oauth_token.h"

#include <errno.h>
#include <stdbool.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void check_form(const char *v)
{
    size_t n = strlen(v);
    size_t cap = 3 * n + 1;
    char *out = malloc(cap);
    if (!out)
        abort();
    long len = oauth_form_encode(v, out, cap);
    FUZZ_CHECK(len >= 0 && (size_t)len == strlen(out), "'%s': encode gave %ld", fuzz_show(v), len);
    char *back = malloc(n + 1);
    if (!back)
        abort();
    size_t b = 0;
    for (long i = 0; i < len; i++) {
        char c = out[i];
        if (c == '%') {
            FUZZ_CHECK(i + 2 < len, "'%s': truncated escape", fuzz_show(v));
            FUZZ_CHECK(hexval(out[i + 1]) >= 0 && hexval(out[i + 2]) >= 0,
                       "'%s': bad escape in '%s'", fuzz_show(v), fuzz_show(out));
            back[b++] = (char)(hexval(out[i + 1]) * 16 + hexval(out[i + 2]));
            i += 2;
        } else if (c == '+') {
            back[b++] = ' ';
        } else {
            FUZZ_CHECK((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                           c == '*' || c == '-' || c == '.' || c == '_',
                       "'%s': unescaped 0x%02x", fuzz_show(v), (unsigned char)c);
            back[b++] = c;
        }
        FUZZ_CHECK(b <= n, "'%s': decodes longer than the input", fuzz_show(v));
    }
    FUZZ_CHECK(b == n && memcmp(back, v, n) == 0, "'%s': does not decode back", fuzz_show(v));
    /* Exactly len + 1 bytes fit; one fewer does not. */
    FUZZ_CHECK(oauth_form_encode(v, out, (size_t)len + 1) == len, "'%s': exact fit refused",
               fuzz_show(v));
    FUZZ_CHECK(oauth_form_encode(v, out, (size_t)len) == -1, "'%s': overflow not reported",
               fuzz_show(v));
    free(back);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = fuzz_strndup(data, size);
    char *token = (char *)1;
    int64_t life = -1;
    const char *why = (const char *)1;
    int rc = oauth_parse_token(body, size, &token, &life, &why);
    if (rc == 0) {
        FUZZ_CHECK(token && why == NULL, "success without a token, or with a reason");
        size_t n = strlen(token);
        FUZZ_CHECK(n >= 1 && n <= OAUTH_TOKEN_MAX, "token of %zu characters", n);
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK(token[i] >= 0x21 && token[i] <= 0x7e, "token byte 0x%02x",
                       (unsigned char)token[i]);
        FUZZ_CHECK(life >= 1 && life <= OAUTH_MAX_LIFETIME_S, "lifetime %lld", (long long)life);
        FUZZ_CHECK(size <= OAUTH_BODY_MAX, "a body of %zu bytes accepted", size);
        free(token);
    } else {
        FUZZ_CHECK(rc == -EINVAL || rc == -ENOMEM, "rc %d", rc);
        FUZZ_CHECK(token == NULL && why != NULL && why != (const char *)1,
                   "failure left a token or no reason");
    }
    check_form(body);
    free(body);
    return 0;
}
