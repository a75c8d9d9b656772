/* fuzz_status_query.c - status_query_parse, status_sort_spelling, status_name_matches.
 *
 * Input: the whole input is the query string (cut at its first NUL, as a C caller would see it).
 * Invariants, beyond "no crash, no sanitizer report":
 *   - the result is 0 or -1; on -1 the error starts with "offset:", "limit:", "sort:" or
 *     "filter:" and fits its buffer;
 *   - on success 1 <= limit <= 500, 0 <= offset <= 1e9, the sort is one of the six, and the
 *     filter is at most 200 bytes with no control character (0x00-0x1f, 0x7f);
 *   - an independent reading of the contract (split at '&', then at the first '=', values
 *     percent-decoded with '+' as space, the last of a repeated parameter counts, others
 *     ignored) agrees: an accepted query gives exactly its values, and a refused one names a
 *     parameter one of whose values is bad. (Whether a bad value that a later one of the same
 *     parameter overrides may still fail the query is left open: the parser refuses it.)
 *   - the success is stable: the query written back in canonical form (every filter byte
 *     escaped) parses to the same values, and the sort's spelling reads back as the same sort;
 *   - status_name_matches agrees with a naive ASCII case-insensitive search, on the input and
 *     the decoded filter both ways, and finds the filter in a name that contains it with its
 *     case flipped; "" matches every name.
 */
#include "fuzz_util.h"

#include "status_query.h"

#include <ctype.h>
#include <stdbool.h>

enum { K_OFFSET, K_LIMIT, K_SORT, K_FILTER, K_COUNT };
static const char *const key_names[K_COUNT] = {"offset", "limit", "sort", "filter"};
static const char *const sort_keys[] = {"name",     "rate",      "effective",
                                        "observed", "in_flight", "state"};
#define N_SORTS (sizeof sort_keys / sizeof *sort_keys)

/* The reference reading of one value. */
typedef enum { V_BAD, V_OK, V_EITHER } verdict;

typedef struct ref_value {
    verdict v;
    long long num;                      /* offset, limit */
    int sort;                           /* sort */
    bool desc;                          /* sort */
    char filter[STATUS_MAX_FILTER + 1]; /* filter, decoded */
    size_t filter_len;
} ref_value;

static int hex(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) ('+' is a space); false on a bad escape. out has room for n bytes. */
static bool ref_decode(const char *s, size_t n, char *out, size_t *out_len)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            out[o++] = ' ';
        } else if (s[i] == '%') {
            if (n - i < 3 || hex((unsigned char)s[i + 1]) < 0 || hex((unsigned char)s[i + 2]) < 0)
                return false;
            out[o++] = (char)(hex((unsigned char)s[i + 1]) * 16 + hex((unsigned char)s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    *out_len = o;
    return true;
}

static void ref_read(int key, const char *s, size_t n, ref_value *r)
{
    memset(r, 0, sizeof *r);
    r->v = V_BAD;
    char *d = malloc(n + 1);
    if (!d)
        abort();
    size_t dl;
    if (!ref_decode(s, n, d, &dl)) {
        free(d);
        return;
    }
    if (key == K_FILTER) {
        if (dl > STATUS_MAX_FILTER) {
            free(d);
            return;
        }
        for (size_t i = 0; i < dl; i++) {
            unsigned char c = (unsigned char)d[i];
            if (c < 0x20 || c == 0x7f) {
                free(d);
                return;
            }
        }
        memcpy(r->filter, d, dl);
        r->filter[dl] = '\0';
        r->filter_len = dl;
        r->v = V_OK;
    } else if (key == K_SORT) {
        bool desc = dl > 0 && d[0] == '-';
        const char *k = d + desc;
        size_t kl = dl - desc;
        for (size_t i = 0; i < N_SORTS; i++) {
            if (strlen(sort_keys[i]) == kl && memcmp(k, sort_keys[i], kl) == 0) {
                r->sort = (int)i;
                r->desc = desc;
                r->v = V_OK;
            }
        }
    } else {
        /* Plain decimal digits whose value is within the range. Leading zeros are not
         * mentioned by the contract: with more than 10 digits either answer is fine. */
        bool digits = dl > 0;
        long long v = 0;
        for (size_t i = 0; i < dl; i++) {
            if (d[i] < '0' || d[i] > '9')
                digits = false;
            else if (v <= 10000000000LL)
                v = v * 10 + (d[i] - '0');
        }
        long long lo = key == K_LIMIT ? 1 : 0;
        long long hi = key == K_LIMIT ? STATUS_MAX_LIMIT : 1000000000LL;
        if (digits && v >= lo && v <= hi) {
            r->num = v;
            r->v = dl > 10 ? V_EITHER : V_OK;
        }
    }
    free(d);
}

/* Naive ASCII case-insensitive substring search. */
static bool ref_matches(const char *name, const char *filter)
{
    size_t nl = strlen(name), fl = strlen(filter);
    for (size_t i = 0; i + fl <= nl; i++) {
        size_t j = 0;
        while (j < fl && tolower((unsigned char)name[i + j]) == tolower((unsigned char)filter[j]))
            j++;
        if (j == fl)
            return true;
    }
    return false;
}

static void check_matches(const char *name, const char *filter)
{
    bool got = status_name_matches(name, filter);
    FUZZ_CHECK(got == ref_matches(name, filter), "status_name_matches('%s', ...) = %d",
               fuzz_show(name), got);
}

static int parse(const char *s, status_query *q, char **err_out)
{
    /* An exactly-sized heap buffer, so that ASan sees a write past the error's end. */
    enum { ERRLEN = 128 };
    char *err = malloc(ERRLEN);
    if (!err)
        abort();
    memset(err, 0x5a, ERRLEN);
    int rc = status_query_parse(s, q, err, ERRLEN);
    FUZZ_CHECK(rc == 0 || rc == -1, "'%s': returned %d", fuzz_show(s), rc);
    if (rc != 0)
        FUZZ_CHECK(memchr(err, '\0', ERRLEN) != NULL, "'%s': unterminated error", fuzz_show(s));
    *err_out = err;
    return rc;
}

/* The query written back: offset, limit, sort as spelled, every filter byte escaped. */
static void round_trip(const char *s, const status_query *q)
{
    const char *sp = status_sort_spelling(q->sort, q->descending);
    FUZZ_CHECK(sp != NULL && (sp[0] == '-') == q->descending, "'%s': sort spelled '%s'",
               fuzz_show(s), sp ? sp : "(null)");
    char canon[64 + 3 * (STATUS_MAX_FILTER + 1)];
    int o = snprintf(canon, sizeof canon, "offset=%ld&limit=%d&sort=%s&filter=", q->offset,
                     q->limit, sp);
    for (const char *f = q->filter; *f; f++)
        o += snprintf(canon + o, sizeof canon - (size_t)o, "%%%02X", (unsigned char)*f);
    status_query back;
    char *err;
    int rc = parse(canon, &back, &err);
    FUZZ_CHECK(rc == 0, "'%s': canonical form '%s' refused: %s", fuzz_show(s), canon, err);
    FUZZ_CHECK(back.offset == q->offset && back.limit == q->limit && back.sort == q->sort &&
                   back.descending == q->descending && strcmp(back.filter, q->filter) == 0,
               "'%s': canonical form '%s' parses differently", fuzz_show(s), canon);
    free(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_strndup(data, size);
    size_t len = strlen(s);

    status_query q;
    char *err;
    int rc = parse(s, &q, &err);

    /* The reference reading: the last value of each parameter, and whether any was bad. */
    ref_value last[K_COUNT], cur;
    bool seen[K_COUNT] = {false}, any_bad[K_COUNT] = {false}, last_bad = false;
    for (size_t p = 0; p <= len;) {
        size_t seg = strcspn(s + p, "&");
        const char *eq = memchr(s + p, '=', seg);
        size_t kl = eq ? (size_t)(eq - (s + p)) : seg;
        const char *v = eq ? eq + 1 : s + p + seg;
        size_t vl = eq ? seg - kl - 1 : 0;
        for (int k = 0; k < K_COUNT; k++) {
            if (strlen(key_names[k]) == kl && memcmp(s + p, key_names[k], kl) == 0) {
                ref_read(k, v, vl, &cur);
                if (cur.v != V_OK)
                    any_bad[k] = true;
                last[k] = cur;
                seen[k] = true;
            }
        }
        p += seg + 1;
    }
    for (int k = 0; k < K_COUNT; k++)
        if (seen[k] && last[k].v == V_BAD)
            last_bad = true;

    if (rc != 0) {
        int named = -1;
        for (int k = 0; k < K_COUNT; k++) {
            size_t kl = strlen(key_names[k]);
            if (strncmp(err, key_names[k], kl) == 0 && err[kl] == ':')
                named = k;
        }
        FUZZ_CHECK(named >= 0, "'%s': error does not name a parameter: '%s'", fuzz_show(s), err);
        FUZZ_CHECK(any_bad[named], "'%s': refused (%s) though every %s is fine", fuzz_show(s), err,
                   key_names[named]);
    } else {
        FUZZ_CHECK(!last_bad, "'%s': accepted though a parameter's last value is bad",
                   fuzz_show(s));
        FUZZ_CHECK(q.limit >= 1 && q.limit <= STATUS_MAX_LIMIT, "'%s': limit %d", fuzz_show(s),
                   q.limit);
        FUZZ_CHECK(q.offset >= 0 && q.offset <= 1000000000L, "'%s': offset %ld", fuzz_show(s),
                   q.offset);
        FUZZ_CHECK((unsigned)q.sort < N_SORTS, "'%s': sort %d", fuzz_show(s), (int)q.sort);
        size_t fl = strnlen(q.filter, sizeof q.filter);
        FUZZ_CHECK(fl <= STATUS_MAX_FILTER, "'%s': filter of %zu bytes", fuzz_show(s), fl);
        for (size_t i = 0; i < fl; i++) {
            unsigned char c = (unsigned char)q.filter[i];
            FUZZ_CHECK(c >= 0x20 && c != 0x7f, "'%s': filter with byte 0x%02x", fuzz_show(s), c);
        }
        /* Exactly the values of the reference reading (defaults where absent). */
        long long want_off = seen[K_OFFSET] ? last[K_OFFSET].num : 0;
        long long want_lim = seen[K_LIMIT] ? last[K_LIMIT].num : STATUS_DEFAULT_LIMIT;
        FUZZ_CHECK(q.offset == want_off && q.limit == want_lim,
                   "'%s': offset %ld limit %d, expected %lld and %lld", fuzz_show(s), q.offset,
                   q.limit, want_off, want_lim);
        int want_sort = seen[K_SORT] ? last[K_SORT].sort : STATUS_SORT_NAME;
        bool want_desc = seen[K_SORT] && last[K_SORT].desc;
        FUZZ_CHECK((int)q.sort == want_sort && q.descending == want_desc,
                   "'%s': sort %d%s, expected %d%s", fuzz_show(s), (int)q.sort,
                   q.descending ? " desc" : "", want_sort, want_desc ? " desc" : "");
        const char *want_filter = seen[K_FILTER] ? last[K_FILTER].filter : "";
        FUZZ_CHECK(strcmp(q.filter, want_filter) == 0, "'%s': filter '%s', expected '%s'",
                   fuzz_show(s), q.filter, want_filter);

        round_trip(s, &q);

        /* The filter, case flipped, inside a longer name is found. */
        char name[2 * STATUS_MAX_FILTER + 16];
        int o = snprintf(name, sizeof name, "pre-");
        for (size_t i = 0; i < fl; i++) {
            unsigned char c = (unsigned char)q.filter[i];
            name[o++] = (char)(isupper(c) ? tolower(c) : toupper(c));
        }
        snprintf(name + o, sizeof name - (size_t)o, "-post");
        FUZZ_CHECK(status_name_matches(name, q.filter), "'%s': filter not found in '%s'",
                   fuzz_show(s), name);
        check_matches(s, q.filter);
        check_matches(q.filter, s);
    }
    /* Every sort and direction is spelled, and the spelling reads back. */
    for (size_t i = 0; i < N_SORTS; i++) {
        for (int desc = 0; desc <= 1; desc++) {
            const char *sp = status_sort_spelling((status_sort)i, desc);
            FUZZ_CHECK(sp && strcmp(sp + desc, sort_keys[i]) == 0 && (sp[0] == '-') == desc,
                       "sort %zu%s spelled '%s'", i, desc ? " desc" : "", sp ? sp : "(null)");
        }
    }
    FUZZ_CHECK(status_name_matches(s, ""), "'' does not match '%s'", fuzz_show(s));
    /* The input halves as name and filter (any bytes, control characters included). */
    char *half = fuzz_strndup((const uint8_t *)s, len / 2);
    check_matches(s + len / 2, half);
    free(half);

    free(err);
    free(s);
    return 0;
}
