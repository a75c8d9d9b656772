/* backoff.c - exponential backoff with jitter and a strict Retry-After parser. */
#include "backoff.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

int64_t backoff_delay_us(int attempt, int64_t base_us, int64_t cap_us, double r)
{
    if (attempt < 0)
        attempt = 0;
    if (base_us < 0)
        base_us = 0;
    if (cap_us < 0)
        cap_us = 0;
    int64_t d;
    if (base_us == 0)
        d = 0;
    else if (attempt >= 63 || base_us > (INT64_MAX >> attempt))
        d = INT64_MAX;
    else
        d = base_us << attempt;
    if (d > cap_us)
        d = cap_us;
    if (!(r >= 0))
        r = 0;
    if (r >= 1)
        r = 0x1.fffffffffffffp-1; /* the largest double below 1 */
    /* Integer half plus a jitter below d: no double ever has to hold 1.5 * INT64_MAX. The
     * conversion of d to double may round up, hence the clamp. */
    int64_t jitter = (int64_t)((double)d * r);
    if (jitter > d)
        jitter = d;
    int64_t half = d / 2;
    return half > INT64_MAX - jitter ? INT64_MAX : half + jitter;
}

/* A bounded view of the input; the parser never looks past n. */
typedef struct cursor {
    const char *p;
    size_t n;
} cursor;

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool eat_lit(cursor *c, const char *lit)
{
    size_t len = strlen(lit);
    if (c->n < len || memcmp(c->p, lit, len) != 0)
        return false;
    c->p += len;
    c->n -= len;
    return true;
}

static bool eat_digits(cursor *c, int count, int *out)
{
    if (c->n < (size_t)count)
        return false;
    int v = 0;
    for (int i = 0; i < count; i++) {
        if (!is_digit(c->p[i]))
            return false;
        v = v * 10 + (c->p[i] - '0');
    }
    c->p += count;
    c->n -= (size_t)count;
    *out = v;
    return true;
}

/* Names in each list never prefix one another, so the first match is the only one. */
static bool eat_name(cursor *c, const char *const *names, int count, int *index)
{
    for (int i = 0; i < count; i++) {
        if (eat_lit(c, names[i])) {
            *index = i;
            return true;
        }
    }
    return false;
}

static const char *const WKDAY[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
static const char *const WKDAY_LONG[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                         "Friday", "Saturday", "Sunday"};
static const char *const MONTH[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

typedef struct civil {
    int64_t year;
    int month, day, hour, min, sec;
} civil;

static bool eat_wkday(cursor *c)
{
    int ignored;
    return eat_name(c, WKDAY, 7, &ignored);
}

static bool eat_month(cursor *c, int *month)
{
    int i;
    if (!eat_name(c, MONTH, 12, &i))
        return false;
    *month = i + 1;
    return true;
}

static bool eat_time(cursor *c, civil *t)
{
    return eat_digits(c, 2, &t->hour) && eat_lit(c, ":") && eat_digits(c, 2, &t->min) &&
           eat_lit(c, ":") && eat_digits(c, 2, &t->sec);
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static bool civil_valid(const civil *t)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    /* Four-digit years only: an RFC 850 year resolved against an absurd clock could otherwise
     * overflow the conversion to seconds. */
    if (t->year < 0 || t->year > 9999 || t->month < 1 || t->month > 12 || t->day < 1)
        return false;
    int max = mdays[t->month - 1] + (t->month == 2 && is_leap(t->year));
    /* 60 admits a leap second; it simply counts as the first second of the next minute. */
    return t->day <= max && t->hour <= 23 && t->min <= 59 && t->sec <= 60;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Howard Hinnant's days_from_civil / civil_from_days (proleptic Gregorian, 1970-01-01 = 0),
 * in int64 so that any now_epoch_s is safe. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int64_t year_from_days(int64_t z)
{
    z += 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    return yoe + era * 400 + (mp >= 10);
}

static int64_t civil_to_epoch(const civil *t)
{
    return days_from_civil(t->year, t->month, t->day) * 86400 + t->hour * 3600 + t->min * 60 +
           t->sec;
}

/* "Sun, 06 Nov 1994 08:49:37 GMT" */
static bool parse_imf(cursor c, civil *t)
{
    int year;
    if (!(eat_wkday(&c) && eat_lit(&c, ", ") && eat_digits(&c, 2, &t->day) && eat_lit(&c, " ") &&
          eat_month(&c, &t->month) && eat_lit(&c, " ") && eat_digits(&c, 4, &year) &&
          eat_lit(&c, " ") && eat_time(&c, t) && eat_lit(&c, " GMT") && c.n == 0))
        return false;
    t->year = year;
    return true;
}

/* "Sunday, 06-Nov-94 08:49:37 GMT" */
static bool parse_rfc850(cursor c, int64_t now_epoch_s, civil *t)
{
    int ignored, yy;
    if (!(eat_name(&c, WKDAY_LONG, 7, &ignored) && eat_lit(&c, ", ") &&
          eat_digits(&c, 2, &t->day) && eat_lit(&c, "-") && eat_month(&c, &t->month) &&
          eat_lit(&c, "-") && eat_digits(&c, 2, &yy) && eat_lit(&c, " ") && eat_time(&c, t) &&
          eat_lit(&c, " GMT") && c.n == 0))
        return false;
    int64_t now_year = year_from_days(floor_div(now_epoch_s, 86400));
    int64_t year = now_year - (now_year - floor_div(now_year, 100) * 100) + yy;
    if (year > now_year + 50)
        year -= 100;
    t->year = year;
    return true;
}

/* "Sun Nov  6 08:49:37 1994" (the day is either two digits or a space and one digit) */
static bool parse_asctime(cursor c, civil *t)
{
    int year;
    if (!(eat_wkday(&c) && eat_lit(&c, " ") && eat_month(&c, &t->month) && eat_lit(&c, " ")))
        return false;
    if (!(eat_lit(&c, " ") ? eat_digits(&c, 1, &t->day) : eat_digits(&c, 2, &t->day)))
        return false;
    if (!(eat_lit(&c, " ") && eat_time(&c, t) && eat_lit(&c, " ") && eat_digits(&c, 4, &year) &&
          c.n == 0))
        return false;
    t->year = year;
    return true;
}

int retry_after_parse(const char *value, int64_t now_epoch_s, int64_t max_s, int64_t *delay_s)
{
    if (value == NULL || delay_s == NULL || max_s < 0)
        return -EINVAL;
    cursor c = {value, strlen(value)};
    while (c.n > 0 && is_ows(c.p[0])) {
        c.p++;
        c.n--;
    }
    while (c.n > 0 && is_ows(c.p[c.n - 1]))
        c.n--;
    if (c.n == 0)
        return -EINVAL;

    if (is_digit(c.p[0])) {
        /* Keep scanning after saturating: "99999999999999999999x" must still be rejected. */
        int64_t v = 0;
        for (size_t i = 0; i < c.n; i++) {
            if (!is_digit(c.p[i]))
                return -EINVAL;
            int digit = c.p[i] - '0';
            v = v > (INT64_MAX - digit) / 10 ? INT64_MAX : v * 10 + digit;
        }
        *delay_s = v < max_s ? v : max_s;
        return 0;
    }

    civil t = {0};
    if (!parse_imf(c, &t) && !parse_rfc850(c, now_epoch_s, &t) && !parse_asctime(c, &t))
        return -EINVAL;
    if (!civil_valid(&t))
        return -EINVAL;
    int64_t at = civil_to_epoch(&t);
    /* at is within years 0-9999; only now can be extreme. */
    int64_t delay;
    if (now_epoch_s <= 0 && at > INT64_MAX + now_epoch_s)
        delay = INT64_MAX;
    else if (now_epoch_s > 0 && at < INT64_MIN + now_epoch_s)
        delay = 0;
    else
        delay = at - now_epoch_s;
    if (delay < 0)
        delay = 0;
    *delay_s = delay < max_s ? delay : max_s;
    return 0;
}
