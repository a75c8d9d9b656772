/* fuzz_validate.c - validate_name, validate_rate, validate_double, validate_int, validate_mode,
 * validate_url.
 *
 * Input: the whole input is the string (cut at its first NUL, as a C caller would see it); every
 * validator runs on it. validate_int also gets bounds taken from the first 16 bytes, besides a
 * few fixed ranges. Invariants, beyond "no crash, no sanitizer report":
 *   - every rejection returns -EINVAL with a message that starts with "<what>: ";
 *   - validate_name accepts only 1-128 chars of [A-Za-z0-9._:@-] starting alphanumeric;
 *   - validate_rate accepts only plain decimal text and yields a finite 0 < v <= 6e6;
 *   - validate_double accepts only plain decimal text and yields a finite v within its range
 *     (each bound inclusive or exclusive), the value strtod gives;
 *   - validate_int accepts only [-]digits, yields min <= v <= max and v == strtoll(s);
 *   - validate_mode accepts exactly "spaced", "batch", "unlimited";
 *   - validate_url accepts only strings of at most 2048 bytes that start with http:// or
 *     https:// (any case), with no whitespace, control bytes, '#', or '@' in the authority,
 *     and whose host is non-empty.
 */
#include "fuzz_util.h"

#include "validate.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <strings.h>

#include <arpa/inet.h>
#include <netinet/in.h>

static void check_err(int rc, const pgp_error *err, const char *what, const char *s)
{
    FUZZ_CHECK(rc == 0 || rc == -EINVAL, "%s: unexpected return %d for '%s'", what, rc,
               fuzz_show(s));
    if (rc == 0)
        return;
    size_t wl = strlen(what);
    FUZZ_CHECK(strnlen(err->msg, sizeof err->msg) < sizeof err->msg, "%s: unterminated message",
               what);
    FUZZ_CHECK(strncmp(err->msg, what, wl) == 0 && strncmp(err->msg + wl, ": ", 2) == 0,
               "%s: message does not name the field: '%s'", what, fuzz_show(err->msg));
}

static bool name_char(unsigned char c)
{
    return isalnum(c) || c == '.' || c == '_' || c == ':' || c == '@' || c == '-';
}

static void fuzz_name(const char *s)
{
    pgp_error err = {{0}};
    int rc = validate_name("name", s, &err);
    check_err(rc, &err, "name", s);
    if (rc == 0) {
        size_t len = strlen(s);
        FUZZ_CHECK(len >= 1 && len <= 128, "name accepted with length %zu", len);
        FUZZ_CHECK(isalnum((unsigned char)s[0]), "name accepted not starting alnum: '%s'",
                   fuzz_show(s));
        for (size_t i = 0; i < len; i++)
            FUZZ_CHECK(name_char((unsigned char)s[i]) && (unsigned char)s[i] < 0x80,
                       "name accepted with byte 0x%02x: '%s'", (unsigned char)s[i], fuzz_show(s));
    }
    /* NULL is documented as "must not be empty". */
    FUZZ_CHECK(validate_name("name", NULL, NULL) == -EINVAL, "NULL name accepted");
}

static void fuzz_rate(const char *s)
{
    pgp_error err = {{0}};
    double v = -1;
    int rc = validate_rate("rate", s, &v, &err);
    check_err(rc, &err, "rate", s);
    if (rc == 0) {
        FUZZ_CHECK(isfinite(v) && v > 0 && v <= 6000000.0, "rate '%s' accepted as %g", fuzz_show(s),
                   v);
        for (const char *p = s; *p; p++)
            FUZZ_CHECK(strchr("0123456789+-.eE", *p) != NULL,
                       "rate accepted with character 0x%02x: '%s'", (unsigned char)*p,
                       fuzz_show(s));
        double again = -1;
        FUZZ_CHECK(validate_rate("rate", s, &again, NULL) == 0 && again == v,
                   "rate not deterministic for '%s'", fuzz_show(s));
    }
}

static void fuzz_double_range(const char *s, const double_range *r)
{
    pgp_error err = {{0}};
    double v = 42;
    int rc = validate_double("double", s, r, &v, &err);
    check_err(rc, &err, "double", s);
    if (rc != 0) {
        FUZZ_CHECK(v == 42, "double '%s': output written on error", fuzz_show(s));
        return;
    }
    FUZZ_CHECK(isfinite(v), "double '%s' accepted as %g", fuzz_show(s), v);
    FUZZ_CHECK(r->min_inclusive ? v >= r->min : v > r->min, "double '%s' = %g below the range",
               fuzz_show(s), v);
    FUZZ_CHECK(r->max_inclusive ? v <= r->max : v < r->max, "double '%s' = %g above the range",
               fuzz_show(s), v);
    for (const char *p = s; *p; p++)
        FUZZ_CHECK(strchr("0123456789+-.eE", *p) != NULL,
                   "double accepted with character 0x%02x: '%s'", (unsigned char)*p, fuzz_show(s));
    FUZZ_CHECK(strtod(s, NULL) == v, "double '%s' gave %g, strtod %g", fuzz_show(s), v,
               strtod(s, NULL));
}

static void fuzz_double(const char *s)
{
    static const double_range ranges[] = {
        {0, 1, false, false}, {0, 1, false, true}, {-1e300, 1e300, true, true}, {5, 5, true, true}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        fuzz_double_range(s, &ranges[i]);
}

static void fuzz_int_range(const char *s, long long min, long long max)
{
    pgp_error err = {{0}};
    long long v = 0;
    int rc = validate_int("int", s, min, max, &v, &err);
    check_err(rc, &err, "int", s);
    if (rc == 0) {
        FUZZ_CHECK(v >= min && v <= max, "int '%s' accepted as %lld outside [%lld, %lld]",
                   fuzz_show(s), v, min, max);
        const char *p = s;
        if (*p == '-')
            p++;
        FUZZ_CHECK(*p != '\0', "int accepted without digits: '%s'", fuzz_show(s));
        for (; *p; p++)
            FUZZ_CHECK(*p >= '0' && *p <= '9', "int accepted with 0x%02x: '%s'", (unsigned char)*p,
                       fuzz_show(s));
        errno = 0;
        long long ref = strtoll(s, NULL, 10);
        FUZZ_CHECK(errno == 0 && ref == v, "int '%s' gave %lld, strtoll %lld", fuzz_show(s), v,
                   ref);
    }
}

static void fuzz_int(const char *s, long long a, long long b)
{
    fuzz_int_range(s, LLONG_MIN, LLONG_MAX);
    fuzz_int_range(s, 0, 65535);
    fuzz_int_range(s, -5, 5);
    fuzz_int_range(s, a < b ? a : b, a < b ? b : a);
    /* An empty range (min > max) accepts nothing. */
    if (a != b) {
        long long lo = a < b ? a : b, hi = a < b ? b : a;
        FUZZ_CHECK(validate_int("int", s, hi, lo, NULL, NULL) == -EINVAL,
                   "int '%s' accepted in empty range [%lld, %lld]", fuzz_show(s), hi, lo);
    }
}

static void fuzz_mode(const char *s)
{
    pgp_error err = {{0}};
    int rc = validate_mode("mode", s, &err);
    check_err(rc, &err, "mode", s);
    bool known = strcmp(s, "spaced") == 0 || strcmp(s, "batch") == 0 || strcmp(s, "unlimited") == 0;
    FUZZ_CHECK((rc == 0) == known, "mode '%s': rc %d", fuzz_show(s), rc);
}

static void fuzz_url(const char *s)
{
    pgp_error err = {{0}};
    int rc = validate_url("url", s, &err);
    check_err(rc, &err, "url", s);
    if (rc != 0)
        return;
    size_t len = strlen(s);
    FUZZ_CHECK(len <= 2048, "url of %zu bytes accepted", len);
    size_t skip;
    if (strncasecmp(s, "http://", 7) == 0)
        skip = 7;
    else if (strncasecmp(s, "https://", 8) == 0)
        skip = 8;
    else
        FUZZ_CHECK(0, "url accepted without http:// or https://: '%s'", fuzz_show(s));
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        FUZZ_CHECK(c > 0x20 && c != 0x7f && c != '#', "url accepted with byte 0x%02x: '%s'", c,
                   fuzz_show(s));
    }
    const char *auth = s + skip;
    size_t alen = strcspn(auth, "/?");
    FUZZ_CHECK(alen > 0 && auth[0] != ':', "url accepted with an empty host: '%s'", fuzz_show(s));
    FUZZ_CHECK(memchr(auth, '@', alen) == NULL, "url accepted with userinfo: '%s'", fuzz_show(s));
    /* Finding F1 (README): the "no leading zeros" rule exists because resolvers read numeric
     * forms other than the dotted quad (octal, hex, fewer parts) as IPv4; any host that
     * inet_aton() takes as an address must therefore be a canonical dotted quad. */
    if (auth[0] != '[') {
        char host[300];
        size_t hl = strcspn(auth, ":/?");
        if (hl < sizeof host) {
            memcpy(host, auth, hl);
            host[hl] = '\0';
            struct in_addr ia;
            char canon[INET_ADDRSTRLEN];
            if (inet_aton(host, &ia) && inet_ntop(AF_INET, &ia, canon, sizeof canon))
                FUZZ_CHECK(strcmp(canon, host) == 0,
                           "url host '%s' is accepted as a name but resolves as IPv4 %s", host,
                           canon);
        }
    }
    /* Everything before the port is the host: a bracketed IPv6 literal or name/IPv4 chars. */
    if (auth[0] == '[') {
        const char *close = memchr(auth, ']', alen);
        FUZZ_CHECK(close != NULL, "url accepted with unclosed '[': '%s'", fuzz_show(s));
    } else {
        for (size_t i = 0; i < alen && auth[i] != ':'; i++)
            FUZZ_CHECK(isalnum((unsigned char)auth[i]) || strchr(".-_~%", auth[i]),
                       "url host accepted with 0x%02x: '%s'", (unsigned char)auth[i], fuzz_show(s));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_strndup(data, size);
    /* Bounds for the free-range validate_int check come from the first 16 bytes (the same bytes
     * are also part of the string: a fuzzer can still steer both). */
    const uint8_t *d = data;
    size_t n = size;
    long long a = (long long)fuzz_take_u64(&d, &n, 8);
    long long b = (long long)fuzz_take_u64(&d, &n, 8);

    fuzz_name(s);
    fuzz_rate(s);
    fuzz_double(s);
    fuzz_int(s, a, b);
    fuzz_mode(s);
    fuzz_url(s);
    free(s);
    return 0;
}
