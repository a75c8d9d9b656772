/* fuzz_retry_after.c - retry_after_parse (Retry-After values come from remote servers).
 *
 * Also checks backoff_delay_us (below) with integers and a double taken from the same bytes.
 *
 * Input: 8 bytes now_epoch_s (little-endian int64), 8 bytes max_s, then the header value (cut at
 * its first NUL). The value is also parsed with a realistic clock (2025-06-01) and cap (3600 s)
 * and with the most extreme clocks, since those are where the date arithmetic could overflow.
 * Invariants, beyond "no crash, no sanitizer report (signed overflow included)":
 *   - success => 0 <= delay <= max_s; failure => -EINVAL and *delay_s untouched;
 *   - max_s < 0 always fails;
 *   - after trimming SP/HTAB/CR/LF, a value of digits only always succeeds with
 *     min(value, max_s) (saturating); a value with any non-digit after a leading digit fails;
 *   - dates: IMF-fixdate and asctime do not depend on the clock except through
 *     delay = max(0, at - now): parsed at now = 0 with no cap they give the same instant as
 *     timegm() of the same fields; parsed at now - k they give k more (when not capped);
 *   - acceptance of a value does not depend on max_s.
 */
#include "fuzz_util.h"

#include "backoff.h"

#include <errno.h>
#include <stdbool.h>
#include <time.h>

#define SENTINEL ((int64_t)0x5eed5eed5eed5eedLL)

static int parse(const char *v, int64_t now, int64_t max, int64_t *out)
{
    int64_t d = SENTINEL;
    int rc = retry_after_parse(v, now, max, &d);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL, "rc %d for '%s'", rc, fuzz_show(v));
    if (rc == 0)
        FUZZ_CHECK(d >= 0 && d <= max, "'%s' now=%lld max=%lld gave delay %lld", fuzz_show(v),
                   (long long)now, (long long)max, (long long)d);
    else
        FUZZ_CHECK(d == SENTINEL, "'%s': *delay_s written on error", fuzz_show(v));
    *out = d;
    return rc;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Digits-only oracle: returns true and the saturated value when the trimmed value is digits. */
static bool digits_only(const char *v, bool *starts_digit, int64_t *value)
{
    size_t b = 0, e = strlen(v);
    while (b < e && is_ows(v[b]))
        b++;
    while (e > b && is_ows(v[e - 1]))
        e--;
    *starts_digit = b < e && v[b] >= '0' && v[b] <= '9';
    if (b == e)
        return false;
    int64_t x = 0;
    for (size_t i = b; i < e; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        int dgt = v[i] - '0';
        x = x > (INT64_MAX - dgt) / 10 ? INT64_MAX : x * 10 + dgt;
    }
    *value = x;
    return true;
}

/* Independent reading of IMF-fixdate / asctime fields into an instant with timegm(). Only used
 * on values retry_after_parse accepted, so it can be lax. Returns false for other forms. */
static bool oracle_instant(const char *v, int64_t *at)
{
    static const char *const mon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    size_t b = 0, e = strlen(v);
    while (b < e && is_ows(v[b]))
        b++;
    while (e > b && is_ows(v[e - 1]))
        e--;
    char t[64];
    if (e - b >= sizeof t)
        return false;
    memcpy(t, v + b, e - b);
    t[e - b] = '\0';
    char m[4] = {0};
    int day, year, hh, mm, ss;
    struct tm tm = {0};
    if (strlen(t) == 29 && t[3] == ',') {
        if (sscanf(t + 5, "%2d %3s %4d %2d:%2d:%2d", &day, m, &year, &hh, &mm, &ss) != 6)
            return false;
    } else if (strlen(t) == 24 && t[3] == ' ') {
        if (sscanf(t + 4, "%3s %2d %2d:%2d:%2d %4d", m, &day, &hh, &mm, &ss, &year) != 6)
            return false;
    } else {
        return false; /* RFC 850: depends on the clock's century */
    }
    int mi = -1;
    for (int i = 0; i < 12; i++)
        if (strcmp(m, mon[i]) == 0)
            mi = i;
    FUZZ_CHECK(mi >= 0, "accepted date with month '%s': '%s'", m, fuzz_show(v));
    tm.tm_year = year - 1900;
    tm.tm_mon = mi;
    tm.tm_mday = day;
    tm.tm_hour = hh;
    tm.tm_min = mm;
    tm.tm_sec = ss;
    errno = 0;
    time_t r = timegm(&tm);
    if (r == (time_t)-1 && errno)
        return false;
    FUZZ_CHECK(tm.tm_mday == day || ss == 60, "accepted a date that does not exist: '%s'",
               fuzz_show(v));
    *at = (int64_t)r;
    return true;
}

/* backoff_delay_us lives in the same module and is as cheap to check: any attempt, base, cap
 * and r (NaN, infinities and negatives included) give a value in [0, 1.5 * cap] that is at
 * least half of min(cap, base * 2^attempt). */
static void check_backoff(int attempt, int64_t base, int64_t cap, double r)
{
    int64_t got = backoff_delay_us(attempt, base, cap, r);
    int64_t c = cap < 0 ? 0 : cap, b = base < 0 ? 0 : base;
    int64_t hi = c / 2 >= INT64_MAX - c ? INT64_MAX : c + c / 2 + 1; /* +1: c odd */
    FUZZ_CHECK(got >= 0 && got <= hi, "backoff(%d, %lld, %lld, %g) = %lld", attempt,
               (long long)base, (long long)cap, r, (long long)got);
    int64_t d = b;
    for (int i = 0; i < (attempt < 0 ? 0 : attempt) && i < 64 && d > 0 && d < c; i++)
        d = d > INT64_MAX / 2 ? INT64_MAX : d * 2;
    if (d > c)
        d = c;
    FUZZ_CHECK(got >= d / 2, "backoff(%d, %lld, %lld, %g) = %lld < %lld / 2", attempt,
               (long long)base, (long long)cap, r, (long long)got, (long long)d);
    if (b == 0)
        FUZZ_CHECK(got == 0, "backoff with base 0 = %lld", (long long)got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *d = data;
    size_t n = size;
    int64_t now = (int64_t)fuzz_take_u64(&d, &n, 8);
    int64_t max = (int64_t)fuzz_take_u64(&d, &n, 8);
    char *v = fuzz_strndup(d, n);

    double r;
    memcpy(&r, &max, sizeof r);
    check_backoff((int)now, max, (int64_t)((uint64_t)now ^ ((uint64_t)max << 7)), r);
    check_backoff((int)(now >> 32), now, max, (double)(uint32_t)max / 4294967296.0);

    int64_t got;
    int rc = parse(v, now, max, &got);
    if (max < 0)
        FUZZ_CHECK(rc == -EINVAL, "max_s %lld accepted", (long long)max);

    const int64_t now_real = 1748736000; /* 2025-06-01T00:00:00Z */
    int64_t real, nocap, tmp;
    int rc_real = parse(v, now_real, 3600, &real);
    int rc_nocap = parse(v, now_real, INT64_MAX, &nocap);
    FUZZ_CHECK(rc_real == rc_nocap, "'%s': acceptance depends on max_s", fuzz_show(v));
    if (max >= 0)
        FUZZ_CHECK(rc == 0 || rc_real != 0 || parse(v, now, INT64_MAX, &tmp) != 0,
                   "'%s': accepted with max 3600, not with max %lld", fuzz_show(v), (long long)max);
    /* Extreme clocks must not overflow (UBSan) and must still respect the bounds. */
    (void)parse(v, INT64_MIN, INT64_MAX, &tmp);
    (void)parse(v, INT64_MAX, INT64_MAX, &tmp);
    (void)parse(v, INT64_MIN, 0, &tmp);

    bool starts_digit;
    int64_t value;
    if (digits_only(v, &starts_digit, &value)) {
        FUZZ_CHECK(rc_nocap == 0 && nocap == value, "'%s': delta-seconds gave rc %d delay %lld",
                   fuzz_show(v), rc_nocap, (long long)nocap);
        FUZZ_CHECK(rc_real == 0 && real == (value < 3600 ? value : 3600),
                   "'%s': delta-seconds not capped: %lld", fuzz_show(v), (long long)real);
    } else if (starts_digit) {
        FUZZ_CHECK(rc_nocap == -EINVAL, "'%s': digits with trailing garbage accepted",
                   fuzz_show(v));
    } else if (rc_nocap == 0) {
        int64_t at0, at;
        if (oracle_instant(v, &at)) {
            /* Not RFC 850, so acceptance cannot depend on the clock. */
            FUZZ_CHECK(parse(v, 0, INT64_MAX, &at0) == 0,
                       "'%s': accepted at one clock, not at now=0", fuzz_show(v));
            /* delay at now=0 is max(0, at) */
            FUZZ_CHECK(at0 == (at > 0 ? at : 0), "'%s': instant %lld, timegm says %lld",
                       fuzz_show(v), (long long)at0, (long long)at);
            int64_t far = -400000000000LL; /* year ~ -10700: before any accepted date */
            int64_t dfar;
            FUZZ_CHECK(parse(v, far, INT64_MAX, &dfar) == 0 && dfar == at - far,
                       "'%s': delay at now=%lld is %lld, expected %lld", fuzz_show(v),
                       (long long)far, (long long)dfar, (long long)(at - far));
            FUZZ_CHECK(nocap == (at > now_real ? at - now_real : 0),
                       "'%s': delay %lld at 2025-06-01, expected %lld", fuzz_show(v),
                       (long long)nocap, (long long)(at - now_real));
        }
    }
    free(v);
    return 0;
}
