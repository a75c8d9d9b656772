/* slide.c - sliding-window limits (the contract is slide.h). */
#include "slide.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT_MAX  1000000000LL
#define PERIOD_MAX (7LL * 86400)

static slide_rec *rec_at(const slide_window *w, size_t i)
{
    return &w->ring[(w->head + i) % w->cap];
}

static void window_init(slide_window *w, int64_t count, int64_t period_us)
{
    memset(w, 0, sizeof *w);
    w->count = count;
    w->period_us = period_us;
    w->merge_us = count > SLIDE_EXACT ? period_us / SLIDE_EXACT : 0;
}

static void window_free(slide_window *w)
{
    free(w->ring);
    w->ring = NULL;
    w->head = w->n = w->cap = 0;
    w->used = 0;
}

int slide_limit_parse(const char *machine, slide_limit *out)
{
    memset(out, 0, sizeof *out);
    if (!machine)
        return 0;
    const char *p = machine;
    int64_t last_period = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long long count = strtoll(p, &end, 10);
        if (end == p || *end != '/' || errno)
            goto bad;
        p = end + 1;
        long long period = strtoll(p, &end, 10);
        if (end == p || (*end != ' ' && *end != '\0') || errno)
            goto bad;
        p = end;
        if (count < 1 || count > COUNT_MAX || period < 1 || period > PERIOD_MAX ||
            out->n == SLIDE_MAX_WINDOWS || period <= last_period)
            goto bad;
        last_period = period;
        window_init(&out->w[out->n++], count, period * 1000000LL);
    }
    return 0;
bad:
    memset(out, 0, sizeof *out);
    return -EINVAL;
}

void slide_limit_guard(slide_limit *l)
{
    for (int i = 0; i < l->n; i++) {
        int64_t g = l->w[i].period_us / 50;
        l->w[i].guard_us = g < 1000 ? 1000 : g > 500000 ? 500000 : g;
    }
}

/* How long a send stays in the window. */
static int64_t stay(const slide_window *w)
{
    return w->period_us + w->guard_us;
}

bool slide_limit_same(const slide_limit *a, const slide_limit *b)
{
    if (a->n != b->n)
        return false;
    for (int i = 0; i < a->n; i++)
        if (a->w[i].count != b->w[i].count || a->w[i].period_us != b->w[i].period_us)
            return false;
    return true;
}

void slide_limit_free(slide_limit *l)
{
    for (int i = 0; i < l->n; i++)
        window_free(&l->w[i]);
}

/* Drops the records that left the window by `now` (the latest time recorded: a clock that went
 * back frees nothing). */
static void window_expire(slide_window *w, int64_t now)
{
    while (w->n > 0) {
        slide_rec *r = rec_at(w, 0);
        if (r->last_us > INT64_MAX - stay(w) || r->last_us + stay(w) > now)
            break;
        w->used -= r->n;
        w->head = (w->head + 1) % w->cap;
        w->n--;
    }
}

static int window_grow(slide_window *w)
{
    size_t cap = w->cap ? w->cap * 2 : 8;
    slide_rec *ring = malloc(cap * sizeof *ring);
    if (!ring)
        return -ENOMEM;
    for (size_t i = 0; i < w->n; i++)
        ring[i] = *rec_at(w, i);
    free(w->ring);
    w->ring = ring;
    w->cap = cap;
    w->head = 0;
    return 0;
}

int slide_window_record(slide_window *w, int64_t t, int64_t n)
{
    if (n <= 0)
        return 0;
    window_expire(w, t);
    int rc = 0;
    if (w->n > 0) {
        slide_rec *last = rec_at(w, w->n - 1);
        /* Out of order (or the clock went back): kept at the latest time already seen. */
        bool merge = t <= last->last_us || (w->merge_us > 0 && t - last->first_us < w->merge_us);
        /* More records than the window can ever need (sends recorded beyond its count, e.g. a
         * resumed history): merged rather than grown without bound. */
        size_t bound = (size_t)(w->count < SLIDE_EXACT ? w->count : SLIDE_EXACT) + 2;
        merge = merge || w->n >= bound;
        if (!merge && w->n == w->cap && (rc = window_grow(w)) != 0)
            merge = true;
        if (merge) {
            if (t > last->last_us)
                last->last_us = t;
            last->n += n;
            w->used += n;
            return rc;
        }
    } else if (w->cap == 0 && (rc = window_grow(w)) != 0) {
        return rc; /* nothing recorded yet and no room: see the contract (rare; not retried) */
    }
    *rec_at(w, w->n) = (slide_rec){.first_us = t, .last_us = t, .n = n};
    w->n++;
    w->used += n;
    return 0;
}

int slide_limit_record(slide_limit *l, int64_t t, int64_t n)
{
    int rc = 0;
    for (int i = 0; i < l->n; i++) {
        int r = slide_window_record(&l->w[i], t, n);
        if (r != 0)
            rc = r;
    }
    return rc;
}

/* Index of the first record still in the window at now, and the sends before it. */
static size_t first_in(const slide_window *w, int64_t now, int64_t *gone)
{
    size_t i = 0;
    *gone = 0;
    for (; i < w->n; i++) {
        const slide_rec *r = rec_at(w, i);
        if (r->last_us > INT64_MAX - stay(w) || r->last_us + stay(w) > now)
            break;
        *gone += r->n;
    }
    return i;
}

int64_t slide_window_used(const slide_window *w, int64_t now)
{
    int64_t gone;
    (void)first_in(w, now, &gone);
    return w->used - gone;
}

int64_t slide_window_free_at(const slide_window *w, int64_t now, int64_t pending, int64_t need)
{
    if (pending < 0)
        pending = 0;
    if (need < 0)
        need = 0;
    if (pending > w->count || need > w->count - pending)
        return SLIDE_NEVER;
    int64_t gone;
    size_t i = first_in(w, now, &gone);
    int64_t excess = w->used - gone + pending + need - w->count;
    for (; excess > 0 && i < w->n; i++) {
        const slide_rec *r = rec_at(w, i);
        excess -= r->n;
        if (excess <= 0) {
            if (r->last_us > INT64_MAX - stay(w))
                return SLIDE_NEVER;
            int64_t at = r->last_us + stay(w);
            return at > now ? at : now;
        }
    }
    return now;
}

int64_t slide_limit_room(const slide_limit *l, int64_t now, int64_t pending)
{
    int64_t room = INT64_MAX;
    for (int i = 0; i < l->n; i++) {
        int64_t r = l->w[i].count - slide_window_used(&l->w[i], now) - (pending > 0 ? pending : 0);
        if (r < room)
            room = r;
    }
    return room > 0 ? room : 0;
}

int64_t slide_limit_free_at(const slide_limit *l, int64_t now, int64_t pending, int64_t need)
{
    int64_t at = now;
    for (int i = 0; i < l->n; i++) {
        int64_t t = slide_window_free_at(&l->w[i], now, pending, need);
        if (t > at)
            at = t;
    }
    return at;
}

void slide_limit_carry(slide_limit *to, slide_limit *from)
{
    const slide_window *donor = NULL;
    for (int i = 0; i < from->n; i++)
        if (from->w[i].n > 0 && (!donor || from->w[i].period_us > donor->period_us))
            donor = &from->w[i];
    for (int i = 0; donor && i < to->n; i++)
        for (size_t k = 0; k < donor->n; k++) {
            const slide_rec *r = rec_at(donor, k);
            (void)slide_window_record(&to->w[i], r->last_us, r->n);
        }
    slide_limit_free(from);
}

double slide_limit_rate(const slide_limit *l)
{
    if (l->n == 0)
        return 0;
    return (double)l->w[0].count * 60e6 / (double)stay(&l->w[0]);
}

const char *slide_period_text(int64_t period_us, char *buf, size_t len)
{
    int64_t s = period_us / 1000000;
    static const struct {
        int64_t secs;
        const char *unit;
    } units[] = {{86400, "day"}, {3600, "h"}, {60, "min"}, {1, "s"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (s % units[i].secs != 0)
            continue;
        int64_t k = s / units[i].secs;
        if (k == 1)
            snprintf(buf, len, "%s", units[i].unit);
        else
            snprintf(buf, len, "%" PRId64 "%s", k, units[i].unit);
        return buf;
    }
    snprintf(buf, len, "%" PRId64 "us", period_us);
    return buf;
}

const char *slide_limit_text(const slide_limit *l, char *buf, size_t len)
{
    size_t at = 0;
    if (len)
        buf[0] = '\0';
    for (int i = 0; i < l->n && at < len; i++) {
        char period[32];
        int w = snprintf(buf + at, len - at, "%s%" PRId64 "/%s", i ? ", " : "", l->w[i].count,
                         slide_period_text(l->w[i].period_us, period, sizeof period));
        if (w < 0)
            break;
        at += (size_t)w;
    }
    return buf;
}
