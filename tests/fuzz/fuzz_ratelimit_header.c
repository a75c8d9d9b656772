/* fuzz_ratelimit_header.c - rl_parse (RateLimit / X-RateLimit-* values come from remote servers).
 *
 * Input: 8 bytes now (little-endian int64, milliseconds since the epoch), 4 bytes max (uint32
 * seconds), 1 byte flags (bit 0: rl_raw.truncated), then the nine field values in rl_raw's
 * order separated by 0x1f; a value starting with 0x1e is NULL (absent), missing ones are NULL.
 * Invariants, beyond "no crash, no sanitizer report":
 *   - the status is one of the three; reason set (to one of the three strings) exactly when
 *     RL_IGNORED; no field at all => RL_NONE; RL_NONE / RL_IGNORED leave *out zeroed;
 *   - RL_OK: something is stated; limit >= 1 with window 0 or in [1, RL_WINDOW_MAX_S];
 *     remaining >= 0; 0 <= reset <= max, reset_clamped => reset == max; windows sorted
 *     tightest first, each with limit >= 1 and a window in range; forms non-empty;
 *   - truncated never gives RL_OK; the same input parses the same way twice; the status does
 *     not depend on max (0, the input's, infinity, NaN: clamping only);
 *   - rl_rate_per_minute: when true, finite and > 0; rl_hold_s: when true, in (0, max];
 *   - X-RateLimit-Remaining alone as 1-15 digits (spaces/tabs around) is that number.
 */
#include "fuzz_util.h"

#include "ratelimit_header.h"

#include <math.h>
#include <stdbool.h>

static const char *parse(const rl_raw *raw, double now, double max, rl_status *st, rl_announce *a)
{
    const char *why = "sentinel";
    *st = rl_parse(raw, now, max, a, &why);
    FUZZ_CHECK(*st == RL_NONE || *st == RL_OK || *st == RL_IGNORED, "status %d", (int)*st);
    if (*st == RL_IGNORED)
        FUZZ_CHECK(why && (strcmp(why, "malformed") == 0 || strcmp(why, "contradictory") == 0 ||
                           strcmp(why, "absurd") == 0),
                   "reason '%s'", why ? why : "(null)");
    else
        FUZZ_CHECK(why == NULL, "reason '%s' with status %d", why, (int)*st);
    double m = max >= 0 ? max : 0;
    if (*st != RL_OK) {
        FUZZ_CHECK(!a->have_limit && !a->have_remaining && !a->have_reset && a->n_windows == 0 &&
                       a->forms == 0,
                   "output written with status %d", (int)*st);
        return why;
    }
    FUZZ_CHECK(a->have_limit || a->have_remaining || a->have_reset, "RL_OK stating nothing");
    FUZZ_CHECK(a->forms != 0, "RL_OK without a form");
    if (a->have_limit) {
        FUZZ_CHECK(a->limit >= 1 && isfinite(a->limit), "limit %g", a->limit);
        FUZZ_CHECK(a->window_s == 0 || (a->window_s >= 1 && a->window_s <= RL_WINDOW_MAX_S),
                   "window %g", a->window_s);
    }
    if (a->have_remaining)
        FUZZ_CHECK(a->remaining >= 0, "remaining %lld", (long long)a->remaining);
    if (a->have_reset) {
        FUZZ_CHECK(a->reset_s >= 0 && a->reset_s <= m, "reset %g, max %g", a->reset_s, m);
        if (a->reset_clamped)
            FUZZ_CHECK(a->reset_s == m, "clamped reset %g != max %g", a->reset_s, m);
    }
    FUZZ_CHECK(a->n_windows <= RL_WINDOWS_MAX, "%zu windows", a->n_windows);
    for (size_t i = 0; i < a->n_windows; i++) {
        const rl_window *w = &a->windows[i];
        FUZZ_CHECK(w->limit >= 1 && w->window_s >= 1 && w->window_s <= RL_WINDOW_MAX_S,
                   "window %zu: %g per %g", i, w->limit, w->window_s);
        if (i > 0)
            FUZZ_CHECK(w->limit / w->window_s >= w[-1].limit / w[-1].window_s,
                       "windows not tightest first at %zu", i);
    }
    double pm, hold;
    if (rl_rate_per_minute(a, &pm))
        FUZZ_CHECK(pm > 0 && isfinite(pm), "rate %g", pm);
    if (rl_hold_s(a, &hold))
        FUZZ_CHECK(hold > 0 && hold <= m, "hold %g, max %g", hold, m);
    return why;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *d = data;
    size_t n = size;
    double now = (double)(int64_t)fuzz_take_u64(&d, &n, 8) / 1000;
    double max = (double)(uint32_t)fuzz_take_u64(&d, &n, 4);
    unsigned flags = (unsigned)fuzz_take_u64(&d, &n, 1);
    char *buf = fuzz_strndup(d, n);

    const char *v[9] = {0};
    char *p = buf;
    for (int i = 0; i < 9 && p; i++) {
        char *sep = memchr(p, 0x1f, strlen(p));
        if (sep)
            *sep = '\0';
        v[i] = p[0] == 0x1e ? NULL : p;
        p = sep ? sep + 1 : NULL;
    }
    rl_raw raw = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], (flags & 1) != 0};
    bool any = false;
    for (int i = 0; i < 9; i++)
        any = any || v[i];

    rl_status st, st2, st_max[4];
    rl_announce a, a2, tmp;
    const char *why = parse(&raw, now, max, &st, &a);
    if (!any)
        FUZZ_CHECK(st == RL_NONE, "no field gave status %d", (int)st);
    if (raw.truncated && any)
        FUZZ_CHECK(st == RL_IGNORED, "truncated gave status %d", (int)st);
    const char *why2 = parse(&raw, now, max, &st2, &a2);
    FUZZ_CHECK(st == st2 && why == why2 && memcmp(&a, &a2, sizeof a) == 0,
               "two parses of one input differ");
    static const double maxes[4] = {0, 3600, INFINITY, NAN};
    for (int i = 0; i < 4; i++) {
        (void)parse(&raw, now, maxes[i], &st_max[i], &tmp);
        FUZZ_CHECK(st_max[i] == st, "status %d with max %g, %d with max %g", (int)st_max[i],
                   maxes[i], (int)st, max);
    }

    /* Oracle: X-RateLimit-Remaining alone, digits only. */
    if (v[6] && !raw.truncated) {
        bool others = false;
        for (int i = 0; i < 9; i++)
            others = others || (i != 6 && v[i]);
        const char *s = v[6];
        size_t b = 0, e = strlen(s);
        while (b < e && is_ows(s[b]))
            b++;
        while (e > b && is_ows(s[e - 1]))
            e--;
        bool digits = e > b && e - b <= 15;
        long long val = 0;
        for (size_t i = b; digits && i < e; i++) {
            digits = s[i] >= '0' && s[i] <= '9';
            val = val * 10 + (s[i] - '0');
        }
        if (!others && digits)
            FUZZ_CHECK(st == RL_OK && a.have_remaining && a.remaining == val,
                       "X-RateLimit-Remaining '%s' gave status %d remaining %lld", fuzz_show(s),
                       (int)st, (long long)a.remaining);
    }
    free(buf);
    return 0;
}
