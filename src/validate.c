/* validate.c - pure checks of names, rates, bounded numbers, integers, modes, webhook URLs,
 * extra header lines and receiver credentials. */
#include "validate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NAME_MAX_LEN 128
#define RATE_MAX     6000000.0
#define URL_MAX_LEN  2048
#define EXCERPT_MAX  64

/* Inputs are echoed back in messages; they may be huge or hold control bytes (these functions
 * get fuzzed), so they are shown escaped and cut short. */
typedef struct excerpt {
    char s[EXCERPT_MAX * 4 + 8];
} excerpt;

static excerpt quote_n(const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    excerpt e;
    size_t o = 0;
    size_t i;
    for (i = 0; i < len && i < EXCERPT_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\\' || c == '\'') {
            e.s[o++] = '\\';
            e.s[o++] = 'x';
            e.s[o++] = hex[c >> 4];
            e.s[o++] = hex[c & 15];
        } else {
            e.s[o++] = (char)c;
        }
    }
    if (i < len) {
        memcpy(e.s + o, "...", 3);
        o += 3;
    }
    e.s[o] = '\0';
    return e;
}

static excerpt quote(const char *s)
{
    /* Bounded: never scan far past what can be shown. */
    return quote_n(s, strnlen(s, EXCERPT_MAX + 1));
}

static bool is_alnum(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int validate_name(const char *what, const char *s, pgp_error *err)
{
    if (!s || !*s)
        return pgp_error_set(err, -EINVAL, "%s: must not be empty", what);
    size_t len = strnlen(s, NAME_MAX_LEN + 1);
    if (len > NAME_MAX_LEN)
        return pgp_error_set(err, -EINVAL, "%s: must be at most %d characters, got '%s'", what,
                             NAME_MAX_LEN, quote(s).s);
    if (!is_alnum((unsigned char)s[0]))
        return pgp_error_set(err, -EINVAL, "%s: must start with a letter or digit, got '%s'", what,
                             quote(s).s);
    for (size_t i = 1; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!is_alnum(c) && !strchr("._:@-", c))
            return pgp_error_set(err, -EINVAL,
                                 "%s: character '%s' at position %zu is not allowed (use A-Z a-z "
                                 "0-9 . _ : @ -), got '%s'",
                                 what, quote_n(s + i, 1).s, i + 1, quote(s).s);
    }
    return 0;
}

/* strtod alone would accept "nan", "inf", hex floats and leading spaces, so the text must first
 * match plain decimal notation: [+-] digits [. digits] [e [+-] digits]. */
static bool is_decimal_number(const char *s)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    size_t int_digits = 0, frac_digits = 0;
    while (is_digit((unsigned char)*p)) {
        p++;
        int_digits++;
    }
    if (*p == '.') {
        p++;
        while (is_digit((unsigned char)*p)) {
            p++;
            frac_digits++;
        }
    }
    if (int_digits + frac_digits == 0)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit((unsigned char)*p))
            return false;
        while (is_digit((unsigned char)*p))
            p++;
    }
    return *p == '\0';
}

int validate_rate(const char *what, const char *s, double *out, pgp_error *err)
{
    if (!s || !*s)
        return pgp_error_set(err, -EINVAL,
                             "%s: expected a number per minute greater than 0 (e.g. 60, 0.5, 1e3), "
                             "got an empty value",
                             what);
    if (!is_decimal_number(s))
        return pgp_error_set(err, -EINVAL,
                             "%s: expected a decimal number per minute greater than 0 (e.g. 60, "
                             "0.5, 1e3), got '%s'",
                             what, quote(s).s);
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    /* A decimal point other than '.' (a non-C LC_NUMERIC) stops strtod early. */
    if (end == s || *end != '\0')
        return pgp_error_set(err, -EINVAL, "%s: could not parse '%s' as a number", what,
                             quote(s).s);
    /* ERANGE with a small result is underflow: "1e-400" is not a usable positive rate. */
    if (v <= 0.0 || (errno == ERANGE && fabs(v) < 1.0))
        return pgp_error_set(err, -EINVAL, "%s: must be greater than 0 per minute, got '%s'", what,
                             quote(s).s);
    if (!isfinite(v) || v > RATE_MAX)
        return pgp_error_set(err, -EINVAL, "%s: at most %.0f per minute, got '%s'", what, RATE_MAX,
                             quote(s).s);
    if (out)
        *out = v;
    return 0;
}

void validate_double_range(char *buf, size_t n, const double_range *range)
{
    snprintf(buf, n, "%s %g and %s %g", range->min_inclusive ? "at least" : "greater than",
             range->min, range->max_inclusive ? "at most" : "less than", range->max);
}

static bool in_range(double v, const double_range *r)
{
    bool above = r->min_inclusive ? v >= r->min : v > r->min;
    bool below = r->max_inclusive ? v <= r->max : v < r->max;
    return above && below;
}

int validate_double(const char *what, const char *s, const double_range *range, double *out,
                    pgp_error *err)
{
    char words[128];
    validate_double_range(words, sizeof words, range);
    bool ok = s && is_decimal_number(s);
    double v = 0.0;
    if (ok) {
        errno = 0;
        char *end = NULL;
        v = strtod(s, &end);
        /* ERANGE: beyond a double (inf) or below its smallest normal value ("1e-400"); either
         * is not the number written. A decimal point other than '.' (a non-C LC_NUMERIC) stops
         * strtod early. */
        ok = end != s && *end == '\0' && errno != ERANGE && isfinite(v) && in_range(v, range);
    }
    if (!ok)
        return pgp_error_set(err, -EINVAL, "%s: expected a number %s, got '%s'", what, words,
                             quote(s ? s : "").s);
    if (out)
        *out = v;
    return 0;
}

int validate_int(const char *what, const char *s, long long min, long long max, long long *out,
                 pgp_error *err)
{
    const char *p = s ? s : "";
    if (*p == '-')
        p++;
    bool ok = is_digit((unsigned char)*p);
    while (ok && *p) {
        ok = is_digit((unsigned char)*p);
        p++;
    }
    long long v = 0;
    if (ok) {
        errno = 0;
        v = strtoll(s, NULL, 10);
        ok = errno != ERANGE && v >= min && v <= max;
    }
    if (!ok)
        return pgp_error_set(err, -EINVAL, "%s: expected an integer from %lld to %lld, got '%s'",
                             what, min, max, quote(s ? s : "").s);
    if (out)
        *out = v;
    return 0;
}

int validate_mode(const char *what, const char *s, pgp_error *err)
{
    static const char *const modes[] = {"spaced", "batch", "unlimited"};
    for (size_t i = 0; s && i < PGP_ARRAY_LEN(modes); i++)
        if (strcmp(s, modes[i]) == 0)
            return 0;
    return pgp_error_set(err, -EINVAL, "%s: must be one of spaced, batch, unlimited; got '%s'",
                         what, quote(s ? s : "").s);
}

/* Dotted quad only, no leading zeros: resolvers read "0177.0.0.1" as octal 127.0.0.1, which
 * would make the host mean something other than what it looks like. */
static bool is_ipv4(const char *s, size_t len)
{
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        if (part > 0) {
            if (i >= len || s[i] != '.')
                return false;
            i++;
        }
        size_t start = i;
        unsigned v = 0;
        while (i < len && is_digit((unsigned char)s[i]) && i - start < 3) {
            v = v * 10 + (unsigned)(s[i] - '0');
            i++;
        }
        size_t digits = i - start;
        if (digits == 0 || v > 255 || (digits > 1 && s[start] == '0'))
            return false;
    }
    return i == len;
}

static int check_port(const char *what, const char *p, size_t len, pgp_error *err)
{
    if (len == 0)
        return pgp_error_set(err, -EINVAL, "%s: port must be 1-65535, got nothing after ':'", what);
    unsigned long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit((unsigned char)p[i]))
            return pgp_error_set(err, -EINVAL, "%s: port must be 1-65535, got '%s'", what,
                                 quote_n(p, len).s);
        if (v <= 65535)
            v = v * 10 + (unsigned long)(p[i] - '0');
    }
    if (v < 1 || v > 65535)
        return pgp_error_set(err, -EINVAL, "%s: port must be 1-65535, got '%s'", what,
                             quote_n(p, len).s);
    return 0;
}

static int check_ipv6(const char *what, const char *a, size_t len, pgp_error *err)
{
    /* a points at '['. */
    const char *close = memchr(a, ']', len);
    if (!close)
        return pgp_error_set(err, -EINVAL, "%s: IPv6 address is missing its closing ']'", what);
    size_t hlen = (size_t)(close - a) - 1;
    bool has_colon = false;
    for (size_t i = 1; i <= hlen; i++) {
        unsigned char c = (unsigned char)a[i];
        if (c == ':')
            has_colon = true;
        else if (!is_hex(c) && c != '.')
            return pgp_error_set(err, -EINVAL,
                                 "%s: invalid IPv6 address '[%s]' (only hex digits, ':' and '.' "
                                 "are allowed between the brackets)",
                                 what, quote_n(a + 1, hlen).s);
    }
    char buf[INET6_ADDRSTRLEN];
    struct in6_addr addr;
    if (hlen == 0 || !has_colon || hlen >= sizeof buf)
        return pgp_error_set(err, -EINVAL, "%s: invalid IPv6 address '[%s]'", what,
                             quote_n(a + 1, hlen).s);
    memcpy(buf, a + 1, hlen);
    buf[hlen] = '\0';
    if (inet_pton(AF_INET6, buf, &addr) != 1)
        return pgp_error_set(err, -EINVAL, "%s: invalid IPv6 address '[%s]'", what,
                             quote_n(a + 1, hlen).s);
    size_t rest = len - (size_t)(close - a) - 1;
    if (rest == 0)
        return 0;
    if (close[1] != ':')
        return pgp_error_set(err, -EINVAL, "%s: unexpected '%s' after the IPv6 address", what,
                             quote_n(close + 1, rest).s);
    return check_port(what, close + 2, rest - 1, err);
}

static int check_host_port(const char *what, const char *a, size_t len, pgp_error *err)
{
    if (len == 0)
        return pgp_error_set(err, -EINVAL, "%s: missing host", what);
    if (a[0] == '[')
        return check_ipv6(what, a, len, err);
    const char *colon = memchr(a, ':', len);
    size_t hlen = colon ? (size_t)(colon - a) : len;
    if (hlen == 0)
        return pgp_error_set(err, -EINVAL, "%s: missing host", what);
    bool numeric = true;
    for (size_t i = 0; i < hlen; i++) {
        unsigned char c = (unsigned char)a[i];
        if (c == '%') {
            if (i + 2 >= hlen || !is_hex((unsigned char)a[i + 1]) ||
                !is_hex((unsigned char)a[i + 2]))
                return pgp_error_set(err, -EINVAL,
                                     "%s: host '%s' has a '%%' not followed by two hex digits",
                                     what, quote_n(a, hlen).s);
        } else if (!is_alnum(c) && !strchr(".-_~", c)) {
            return pgp_error_set(err, -EINVAL,
                                 "%s: host '%s' contains '%s', which is not allowed in a host name",
                                 what, quote_n(a, hlen).s, quote_n(a + i, 1).s);
        }
        if (!is_digit(c) && c != '.')
            numeric = false;
    }
    /* Resolvers also read hex and short forms as IPv4 ("0x7f.1", "0x7f000001", "2130706433"):
     * a host whose every label is a number (decimal or 0x hex) must be a plain dotted quad, so
     * what the URL says is what it reaches. */
    bool looks_numeric = hlen > 0;
    for (size_t i = 0; i < hlen && looks_numeric;) {
        size_t j = i;
        if (j + 1 < hlen && a[j] == '0' && (a[j + 1] == 'x' || a[j + 1] == 'X')) {
            j += 2;
            while (j < hlen && is_hex((unsigned char)a[j]))
                j++;
        } else {
            while (j < hlen && is_digit((unsigned char)a[j]))
                j++;
        }
        looks_numeric = j > i && (j == hlen || a[j] == '.');
        i = j + 1;
    }
    if (looks_numeric && !numeric)
        return pgp_error_set(err, -EINVAL,
                             "%s: host '%s' is a number in hex or short form; write the address "
                             "as four decimal numbers (a.b.c.d)",
                             what, quote_n(a, hlen).s);
    if (numeric && !is_ipv4(a, hlen))
        return pgp_error_set(err, -EINVAL,
                             "%s: invalid IPv4 address '%s' (expected four numbers 0-255 without "
                             "leading zeros)",
                             what, quote_n(a, hlen).s);
    if (colon)
        return check_port(what, colon + 1, len - hlen - 1, err);
    return 0;
}

int validate_url(const char *what, const char *s, pgp_error *err)
{
    if (!s || !*s)
        return pgp_error_set(err, -EINVAL, "%s: must not be empty", what);
    size_t len = strnlen(s, URL_MAX_LEN + 1);
    if (len > URL_MAX_LEN)
        return pgp_error_set(err, -EINVAL, "%s: longer than %d bytes", what, URL_MAX_LEN);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f)
            return pgp_error_set(err, -EINVAL,
                                 "%s: contains whitespace or a control character (byte 0x%02x at "
                                 "position %zu)",
                                 what, c, i + 1);
        if (c == '#')
            return pgp_error_set(err, -EINVAL,
                                 "%s: fragments ('#...') are not allowed; they are never sent to "
                                 "the server",
                                 what);
    }

    /* RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) followed by ':'. */
    size_t sl = 0;
    while (sl < len && (is_alnum((unsigned char)s[sl]) || strchr("+-.", s[sl])))
        sl++;
    if (sl == 0 || sl == len || s[sl] != ':' || !is_alnum((unsigned char)s[0]) ||
        is_digit((unsigned char)s[0]))
        return pgp_error_set(err, -EINVAL, "%s: must start with http:// or https://, got '%s'",
                             what, quote(s).s);
    if (!((sl == 4 && strncasecmp(s, "http", 4) == 0) ||
          (sl == 5 && strncasecmp(s, "https", 5) == 0)))
        return pgp_error_set(err, -EINVAL, "%s: scheme must be http or https, got '%s'", what,
                             quote_n(s, sl).s);
    if (len - sl < 3 || s[sl + 1] != '/' || s[sl + 2] != '/')
        return pgp_error_set(err, -EINVAL, "%s: expected '://' after '%s'", what, quote_n(s, sl).s);

    const char *auth = s + sl + 3;
    size_t alen = strcspn(auth, "/?");
    if (memchr(auth, '@', alen))
        return pgp_error_set(err, -EINVAL, "%s: user info (user@host) is not allowed", what);
    return check_host_port(what, auth, alen, err);
}

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* C0, DEL and C1 (U+0080 to U+009F, UTF-8 C2 80 to C2 9F): the set pgpace.customer_set_headers
 * and customer_set_auth refuse, spelled out there too (a regex class would depend on the
 * database's locale), so the CLI never accepts what SQL then refuses. */
static bool has_control(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return true;
        if (c == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f)
            return true;
    }
    return false;
}

int validate_header_line(const char *what, const char *line,
                         char name_out[VALIDATE_HEADER_NAME_MAX + 1], pgp_error *err)
{
    static const char *const reserved[] = {"content-type", "content-length", "host",
                                           "user-agent",   "authorization",  "transfer-encoding",
                                           "connection",   "traceparent",    "tracestate",
                                           "expect",       "keep-alive",     "te",
                                           "trailer",      "upgrade",        "proxy-connection"};
    name_out[0] = '\0';
    const char *colon = line ? strchr(line, ':') : NULL;
    if (!colon)
        return pgp_error_set(err, -EINVAL, "%s: expected \"Name: value\"", what);
    size_t nlen = (size_t)(colon - line);
    bool token = nlen >= 1 && nlen <= VALIDATE_HEADER_NAME_MAX;
    for (size_t i = 0; token && i < nlen; i++)
        token = is_tchar((unsigned char)line[i]);
    if (!token)
        return pgp_error_set(err, -EINVAL,
                             "%s: the name must be 1 to %d characters of letters, digits and "
                             "!#$%%&'*+-.^_`|~ (an HTTP token)",
                             what, VALIDATE_HEADER_NAME_MAX);
    memcpy(name_out, line, nlen);
    name_out[nlen] = '\0';
    bool is_reserved = strncasecmp(name_out, "webhook-", 8) == 0;
    for (size_t i = 0; !is_reserved && i < sizeof reserved / sizeof reserved[0]; i++)
        is_reserved = strcasecmp(name_out, reserved[i]) == 0;
    if (is_reserved)
        return pgp_error_set(err, -EINVAL,
                             "%s: %s is reserved (pgpace sets it, or it would change the "
                             "request's framing)%s",
                             what, name_out,
                             strcasecmp(name_out, "authorization") == 0 ? "; use --auth" : "");
    const char *v = colon + 1;
    const char *end = v + strlen(v);
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t vlen = (size_t)(end - v);
    if (vlen == 0)
        return pgp_error_set(err, -EINVAL, "%s: the value of %s is empty", what, name_out);
    if (has_control(v, vlen))
        return pgp_error_set(err, -EINVAL,
                             "%s: the value of %s contains a control character (CR, LF, tab, "
                             "...)",
                             what, name_out);
    if (vlen > VALIDATE_HEADER_VALUE_MAX)
        return pgp_error_set(err, -EINVAL, "%s: the value of %s is longer than %d bytes", what,
                             name_out, VALIDATE_HEADER_VALUE_MAX);
    return 0;
}

int validate_auth(const char *what, const char *s, validate_auth_parts *out, pgp_error *err)
{
    out->scheme = NULL;
    out->username[0] = '\0';
    out->secret = NULL;
    if (s && strcmp(s, "none") == 0) {
        out->scheme = "none";
        return 0;
    }
    if (s && strncmp(s, "basic:", 6) == 0) {
        const char *user = s + 6;
        const char *colon = strchr(user, ':');
        size_t ulen = colon ? (size_t)(colon - user) : 0;
        if (!colon || ulen == 0 || ulen >= sizeof out->username || has_control(user, ulen))
            return pgp_error_set(err, -EINVAL,
                                 "%s: expected basic:USER:PASSWORD with USER 1 to 256 bytes "
                                 "without a colon or a control character",
                                 what);
        const char *pw = colon + 1;
        size_t plen = strlen(pw);
        if (plen == 0 || plen > 1024 || has_control(pw, plen))
            return pgp_error_set(err, -EINVAL,
                                 "%s: the password must be 1 to 1024 bytes without a control "
                                 "character",
                                 what);
        memcpy(out->username, user, ulen);
        out->username[ulen] = '\0';
        out->scheme = "basic";
        out->secret = pw;
        return 0;
    }
    if (s && strncmp(s, "bearer:", 7) == 0) {
        const char *tok = s + 7;
        size_t i = 0;
        while (tok[i] && ((tok[i] >= '0' && tok[i] <= '9') || (tok[i] >= 'a' && tok[i] <= 'z') ||
                          (tok[i] >= 'A' && tok[i] <= 'Z') || strchr("-._~+/", tok[i])))
            i++;
        size_t body = i;
        while (tok[i] == '=')
            i++;
        if (body == 0 || tok[i] != '\0' || i > 4096)
            return pgp_error_set(err, -EINVAL,
                                 "%s: the token must be 1 to 4096 characters of letters, digits "
                                 "and -._~+/ (then = padding)",
                                 what);
        out->scheme = "bearer";
        out->secret = tok;
        return 0;
    }
    return pgp_error_set(err, -EINVAL, "%s: expected basic:USER:PASSWORD, bearer:TOKEN or none",
                         what);
}

bool validate_origins(const char *list)
{
    int count = 0;
    const char *p = list;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, " ");
        size_t scheme = strncmp(p, "https://", 8) == 0 ? 8 : strncmp(p, "http://", 7) == 0 ? 7 : 0;
        if (scheme == 0 || n == scheme || n > 300 || ++count > 8)
            return false;
        for (size_t i = scheme; i < n; i++) {
            char ch = p[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == ':' || ch == '[' ||
                  ch == ']'))
                return false;
        }
        p += n;
    }
    return true;
}
