/* status_query.c - the query string of GET /v1/status (status_query.h). */
#include "status_query.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const sort_names[] = {"name",     "rate",      "effective",
                                         "observed", "in_flight", "state"};
static const char *const sort_desc_names[] = {"-name",     "-rate",      "-effective",
                                              "-observed", "-in_flight", "-state"};

const char *status_sort_spelling(status_sort s, bool descending)
{
    return descending ? sort_desc_names[s] : sort_names[s];
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decodes src[0..n) into out (cap bytes with the NUL). -1 on a bad escape, -2 when it
 * does not fit, -3 for a control character or NUL. */
static int decode(const char *src, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)src[i];
        if (ch == '+') {
            ch = ' ';
        } else if (ch == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hexval(src[i + 1]);
            int lo = hexval(src[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            ch = hi * 16 + lo;
            i += 2;
        }
        if (ch < 0x20 || ch == 0x7f)
            return -3;
        if (o + 1 >= cap)
            return -2;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return 0;
}

static int fail(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return -1;
}

int status_query_parse(const char *query, status_query *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->limit = STATUS_DEFAULT_LIMIT;
    out->sort = STATUS_SORT_NAME;
    const char *p = query ? query : "";
    while (*p) {
        size_t len = strcspn(p, "&");
        const char *eq = memchr(p, '=', len);
        size_t klen = eq ? (size_t)(eq - p) : len;
        const char *v = eq ? eq + 1 : p + len;
        size_t vlen = eq ? len - klen - 1 : 0;
        char value[STATUS_MAX_FILTER + 1];
        int drc = decode(v, vlen, value, sizeof value);
        if (klen == 6 && strncmp(p, "filter", 6) == 0) {
            if (drc == -1)
                return fail(err, errlen, "filter: bad percent-encoding");
            if (drc == -2)
                return fail(err, errlen, "filter: at most 200 bytes");
            if (drc == -3)
                return fail(err, errlen, "filter: control characters are not allowed");
            memcpy(out->filter, value, strlen(value) + 1);
        } else if ((klen == 6 && strncmp(p, "offset", 6) == 0) ||
                   (klen == 5 && strncmp(p, "limit", 5) == 0)) {
            bool is_limit = klen == 5;
            const char *msg =
                is_limit ? "limit: expected 1 to 500" : "offset: expected 0 to 1000000000";
            if (drc != 0 || !*value || strlen(value) > 10 ||
                strspn(value, "0123456789") != strlen(value))
                return fail(err, errlen, msg);
            long long n = 0;
            for (const char *d = value; *d; d++)
                n = n * 10 + (*d - '0');
            if (is_limit) {
                if (n < 1 || n > STATUS_MAX_LIMIT)
                    return fail(err, errlen, msg);
                out->limit = (int)n;
            } else {
                if (n > 1000000000LL)
                    return fail(err, errlen, msg);
                out->offset = (long)n;
            }
        } else if (klen == 4 && strncmp(p, "sort", 4) == 0) {
            const char *msg = "sort: expected name, rate, effective, observed, in_flight or "
                              "state, optionally after '-'";
            if (drc != 0)
                return fail(err, errlen, msg);
            bool desc = value[0] == '-';
            const char *key = desc ? value + 1 : value;
            size_t i = 0;
            while (i < sizeof sort_names / sizeof *sort_names && strcmp(key, sort_names[i]) != 0)
                i++;
            if (i == sizeof sort_names / sizeof *sort_names)
                return fail(err, errlen, msg);
            out->sort = (status_sort)i;
            out->descending = desc;
        }
        p += len;
        if (*p == '&')
            p++;
    }
    return 0;
}

bool status_name_matches(const char *name, const char *filter)
{
    return !*filter || strcasestr(name, filter) != NULL;
}
