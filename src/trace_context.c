/* trace_context.c - W3C Trace Context checks, mirroring pgpace.trace_context_error (see the
 * header for the rules and why there are two copies). */
#include "trace_context.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define TRACESTATE_MAX_MEMBERS 32

static bool is_lower_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* Whether s starts with n lowercase hex digits; *all_zero says whether they are all 0. */
static bool hex_run(const char *s, size_t n, bool *all_zero)
{
    *all_zero = true;
    for (size_t i = 0; i < n; i++) {
        if (!is_lower_hex(s[i]))
            return false;
        if (s[i] != '0')
            *all_zero = false;
    }
    return true;
}

static int check_traceparent(const char *what, const char *tp, pgp_error *err)
{
    size_t len = strnlen(tp, TRACEPARENT_MAX + 1);
    bool zero_version, zero_trace, zero_parent, zero_flags;
    /* version(2) - trace-id(32) - parent-id(16) - flags(2): dashes at 2, 35, 52. */
    bool shaped = len >= 55 && len <= TRACEPARENT_MAX && hex_run(tp, 2, &zero_version) &&
                  tp[2] == '-' && hex_run(tp + 3, 32, &zero_trace) && tp[35] == '-' &&
                  hex_run(tp + 36, 16, &zero_parent) && tp[52] == '-' &&
                  hex_run(tp + 53, 2, &zero_flags) && (len == 55 || tp[55] == '-');
    for (size_t i = 56; shaped && i < len; i++)
        if ((unsigned char)tp[i] < 0x21 || (unsigned char)tp[i] > 0x7e)
            shaped = false;
    if (!shaped)
        return pgp_error_set(err, -EINVAL,
                             "%s: must be version-traceid-parentid-flags: 2, 32, 16 and 2 "
                             "lowercase hex digits joined by \"-\" (W3C Trace Context)",
                             what);
    if (tp[0] == 'f' && tp[1] == 'f')
        return pgp_error_set(err, -EINVAL,
                             "%s: must not have version ff (invalid in W3C Trace Context)", what);
    if (zero_version && len != 55)
        return pgp_error_set(
            err, -EINVAL, "%s: must be exactly 55 characters for version 00, got %zu", what, len);
    if (zero_trace)
        return pgp_error_set(err, -EINVAL, "%s: must not have an all-zero trace-id", what);
    if (zero_parent)
        return pgp_error_set(err, -EINVAL, "%s: must not have an all-zero parent-id", what);
    return 0;
}

static bool key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' ||
           c == '/';
}

/* key = simple-key / tenant-id "@" system-id (the spec's grammar and lengths). */
static bool valid_key(const char *k, size_t n)
{
    const char *at = memchr(k, '@', n);
    if (!at) {
        if (n < 1 || n > 256 || !(k[0] >= 'a' && k[0] <= 'z'))
            return false;
        for (size_t i = 1; i < n; i++)
            if (!key_char(k[i]))
                return false;
        return true;
    }
    size_t tn = (size_t)(at - k), sn = n - tn - 1;
    if (tn < 1 || tn > 241 || sn < 1 || sn > 14)
        return false;
    if (!((k[0] >= 'a' && k[0] <= 'z') || (k[0] >= '0' && k[0] <= '9')) ||
        !(at[1] >= 'a' && at[1] <= 'z'))
        return false;
    for (size_t i = 1; i < tn; i++)
        if (!key_char(k[i]))
            return false;
    for (size_t i = 2; i < sn + 1; i++)
        if (!key_char(at[i]))
            return false;
    return true;
}

/* value = 0*255(chr) nblk-chr; chr = SP / nblk-chr; nblk-chr = printable ASCII but , and =. */
static bool valid_value(const char *v, size_t n)
{
    if (n < 1 || n > 256 || v[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e || v[i] == ',' || v[i] == '=')
            return false;
    return true;
}

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

static int check_tracestate(const char *what, const char *ts, pgp_error *err)
{
    size_t len = strnlen(ts, TRACESTATE_MAX + 1);
    if (len == 0)
        return pgp_error_set(err, -EINVAL, "%s: must not be empty (leave it out)", what);
    if (len > TRACESTATE_MAX)
        return pgp_error_set(err, -EINVAL, "%s: must be at most %d characters, got %zu", what,
                             TRACESTATE_MAX, strlen(ts));
    if (ows(ts[0]) || ows(ts[len - 1]))
        return pgp_error_set(err, -EINVAL, "%s: must not start or end with a space or tab", what);
    int members = 0, pos = 0;
    /* Keys seen so far (a member is at least "k=v": at most (512 + 1) / 2 of them). */
    struct {
        const char *s;
        size_t n;
    } keys[(TRACESTATE_MAX + 1) / 2];
    const char *p = ts, *end = ts + len;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        pos++;
        const char *a = p, *b = stop;
        while (a < b && ows(*a))
            a++;
        while (b > a && ows(b[-1]))
            b--;
        if (a < b) {
            members++;
            const char *eq = memchr(a, '=', (size_t)(b - a));
            if (!eq || !valid_key(a, (size_t)(eq - a)) ||
                !valid_value(eq + 1, (size_t)(b - eq - 1)))
                return pgp_error_set(err, -EINVAL,
                                     "%s: must be a list of key=value members separated by "
                                     "commas (W3C Trace Context): member %d is not",
                                     what, pos);
            size_t klen = (size_t)(eq - a);
            for (int k = 0; k < members - 1; k++)
                if (keys[k].n == klen && memcmp(keys[k].s, a, klen) == 0)
                    return pgp_error_set(err, -EINVAL,
                                         "%s: must list each key once (W3C Trace Context): "
                                         "member %d repeats an earlier key",
                                         what, pos);
            keys[members - 1].s = a;
            keys[members - 1].n = klen;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    if (members == 0)
        return pgp_error_set(err, -EINVAL, "%s: must have a list-member (leave it out)", what);
    if (members > TRACESTATE_MAX_MEMBERS)
        return pgp_error_set(err, -EINVAL, "%s: must have at most %d list-members, got %d", what,
                             TRACESTATE_MAX_MEMBERS, members);
    return 0;
}

int trace_context_check(const char *tp_what, const char *traceparent, const char *ts_what,
                        const char *tracestate, pgp_error *err)
{
    if (traceparent) {
        int rc = check_traceparent(tp_what, traceparent, err);
        if (rc != 0)
            return rc;
    }
    if (!tracestate)
        return 0;
    if (!traceparent)
        return pgp_error_set(err, -EINVAL, "%s: must come with a traceparent (%s)", ts_what,
                             tp_what);
    return check_tracestate(ts_what, tracestate, err);
}
