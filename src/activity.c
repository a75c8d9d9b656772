/* activity.c - a customer's recent requests (activity.h). */
#include "activity.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void activity_init(activity *a)
{
    memset(a, 0, sizeof *a);
    a->tick = -1;
}

/* Moves the bucket ring forward to number b, emptying the buckets it passes. */
static void buckets_advance(activity *a, int64_t b)
{
    if (b <= a->bucket)
        return;
    int64_t skip = b - a->bucket;
    if (skip >= ACTIVITY_BUCKETS || a->last_us == 0) {
        memset(a->buckets, 0, sizeof a->buckets);
    } else {
        for (int64_t i = a->bucket + 1; i <= b; i++)
            a->buckets[i % ACTIVITY_BUCKETS] = 0;
    }
    a->bucket = b;
}

static void ticks_advance(activity *a, int64_t tick)
{
    if (a->tick >= 0 && tick <= a->tick)
        return;
    if (a->tick < 0)
        a->first_tick = tick;
    if (a->tick < 0 || tick - a->tick >= ACTIVITY_HISTORY) {
        memset(a->series, 0, sizeof a->series);
    } else {
        for (int64_t i = a->tick + 1; i <= tick; i++)
            a->series[i % ACTIVITY_HISTORY] = 0;
    }
    a->tick = tick;
}

void activity_note(activity *a, int64_t t_us, int64_t tick)
{
    if (t_us < a->last_us)
        t_us = a->last_us;
    if (tick >= 0 && a->n_gaps > 0) {
        /* Now a batch customer: its gaps go, its ticks start. */
        a->n_gaps = 0;
        a->gap_next = 0;
    } else if (tick < 0 && a->tick >= 0) {
        /* No longer one: its ticks go. */
        a->tick = -1;
        memset(a->series, 0, sizeof a->series);
    }
    if (a->last_us > 0 && tick < 0) {
        int64_t gap = (t_us - a->last_us) / 1000;
        a->series[a->gap_next] =
            gap > (int64_t)ACTIVITY_GAP_MAX_MS ? ACTIVITY_GAP_MAX_MS : (uint32_t)gap;
        a->gap_next = (uint8_t)((a->gap_next + 1) % ACTIVITY_HISTORY);
        if (a->n_gaps < ACTIVITY_HISTORY)
            a->n_gaps++;
    }
    buckets_advance(a, t_us / ACTIVITY_BUCKET_US);
    a->last_us = t_us;
    if (a->buckets[a->bucket % ACTIVITY_BUCKETS] < UINT32_MAX)
        a->buckets[a->bucket % ACTIVITY_BUCKETS]++;
    if (tick >= 0) {
        ticks_advance(a, tick < a->tick ? a->tick : tick);
        if (a->series[a->tick % ACTIVITY_HISTORY] < UINT32_MAX)
            a->series[a->tick % ACTIVITY_HISTORY]++;
    }
}

void activity_forget_count(activity *a)
{
    memset(a->buckets, 0, sizeof a->buckets);
}

void activity_note_error(activity *a, int64_t t_us, const char *error_class, int status)
{
    snprintf(a->error_class, sizeof a->error_class, "%s", error_class ? error_class : "http");
    a->error_status = status;
    a->error_us = t_us;
}

activity_window activity_window_at(const activity *a, int64_t now_us, int64_t since_us)
{
    activity_window w = {0};
    int64_t now_b = now_us / ACTIVITY_BUCKET_US;
    if (a->last_us > 0 && now_b < a->bucket)
        now_b = a->bucket; /* now before the latest request: read as at that request */
    int64_t into = now_us - now_b * ACTIVITY_BUCKET_US;
    if (into < 0)
        into = 0;
    int64_t first_b = now_b - (ACTIVITY_BUCKETS - 1);
    int64_t start = first_b * ACTIVITY_BUCKET_US, end = now_b * ACTIVITY_BUCKET_US + into;
    if (since_us > start) {
        start = since_us < end ? since_us : end;
        w.partial = true;
        if (since_us / ACTIVITY_BUCKET_US > first_b)
            first_b = since_us / ACTIVITY_BUCKET_US;
    }
    w.us = end - start;
    if (a->last_us == 0)
        return w;
    for (int64_t b = first_b; b <= a->bucket; b++) {
        if (b >= 0 && b > a->bucket - ACTIVITY_BUCKETS)
            w.count += a->buckets[b % ACTIVITY_BUCKETS];
    }
    return w;
}

double activity_window_rate(const activity_window *w)
{
    if (w->us < ACTIVITY_MIN_WINDOW_US)
        return NAN;
    return (double)w->count * 60e6 / (double)w->us;
}

double activity_per_minute(const activity *a, int64_t now_us)
{
    if (a->last_us == 0)
        return 0;
    activity_window w = activity_window_at(a, now_us, 0);
    return activity_window_rate(&w);
}

size_t activity_gaps(const activity *a, uint32_t *out, size_t cap)
{
    size_t n = a->n_gaps < cap ? a->n_gaps : cap;
    /* The newest n of the ring, oldest first. */
    for (size_t i = 0; i < n; i++) {
        size_t back = n - i; /* 1 = the newest */
        out[i] = a->series[(a->gap_next + ACTIVITY_HISTORY - back) % ACTIVITY_HISTORY];
    }
    return n;
}

size_t activity_ticks(const activity *a, int64_t current_tick, uint32_t *out, size_t cap)
{
    if (a->tick < 0)
        return 0;
    if (current_tick < a->tick)
        current_tick = a->tick;
    size_t n = cap < ACTIVITY_HISTORY ? cap : ACTIVITY_HISTORY;
    /* first_tick >= 0, so the difference cannot overflow (the + 1 could). */
    if (current_tick - a->first_tick < (int64_t)n)
        n = (size_t)(current_tick - a->first_tick) + 1;
    for (size_t i = 0; i < n; i++) {
        int64_t t = current_tick - (int64_t)(n - 1 - i);
        out[i] = t >= 0 && t <= a->tick && t > a->tick - ACTIVITY_HISTORY
                     ? a->series[t % ACTIVITY_HISTORY]
                     : 0;
    }
    return n;
}
