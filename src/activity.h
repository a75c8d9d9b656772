/* activity.h - what a customer's recent requests looked like, for the status page: the gaps
 * between its latest requests, the requests of each of its latest batch ticks, and how many went
 * out in the last minute.
 *
 * Contract:
 * - Pure and allocation-free: one fixed-size struct per customer (the dispatcher makes it at
 *   the customer's first request, so idle customers cost nothing).
 * - Times are microseconds of one monotonic clock (the dispatcher's uv_hrtime): a wall-clock
 *   step neither invents a gap nor loses the minute. A time earlier than the latest one noted
 *   counts as the latest (never a negative gap). Batch ticks are tick numbers (the tick's start
 *   divided by its length); a tick number lower than the latest counts in the latest.
 * - Requests noted with a tick (a batch customer) keep per-tick counts and no gaps; those noted
 *   without keep gaps. Switching between the two starts the series afresh (a mode change).
 * - Gaps are whole milliseconds, at most ACTIVITY_GAP_MAX_MS (longer pauses read as that).
 * - The rate is over the time actually observed: a dispatcher that began watching 27 s ago
 *   divides by those 27 s, not by a minute (activity_window), so a customer sending at its
 *   rate never reads below it during its first minute.
 */
#ifndef PGPACE_ACTIVITY_H
#define PGPACE_ACTIVITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACTIVITY_HISTORY    30        /* gaps and ticks remembered */
#define ACTIVITY_BUCKETS    12        /* the last minute, in buckets of: */
#define ACTIVITY_BUCKET_US  5000000LL /* 5 s */
#define ACTIVITY_GAP_MAX_MS 3600000u  /* an hour */
/* A window shorter than this gives no rate (a burst in the first milliseconds would read as
 * thousands per minute). */
#define ACTIVITY_MIN_WINDOW_US 1000000LL

typedef struct activity {
    int64_t last_us; /* the latest request; 0 = none yet */
    /* The gaps before the latest requests (ms), or for a batch customer (requests noted with a
     * tick) its requests per tick, by tick number modulo: one ring, as a customer is in one mode
     * at a time (a change of mode starts it afresh). */
    uint32_t series[ACTIVITY_HISTORY];
    uint8_t n_gaps, gap_next;           /* gaps in series, and where the next goes */
    int64_t bucket;                     /* number (t / ACTIVITY_BUCKET_US) of the latest bucket */
    uint32_t buckets[ACTIVITY_BUCKETS]; /* requests per bucket, by bucket number modulo */
    int64_t tick;                       /* the latest tick number noted; -1 = none (gaps) */
    int64_t first_tick;                 /* the first one noted */
    char error_class[24];               /* the latest failure's class ("http", "tls"); "" = none */
    int error_status;                   /* its HTTP status; 0 = none */
    int64_t error_us;                   /* when it ended */
} activity;

void activity_init(activity *a);

/* A request went out at t_us; tick: its batch tick number, or -1 (not a batch customer). */
void activity_note(activity *a, int64_t t_us, int64_t tick);

/* The minute's counts start afresh (the gaps, ticks and latest error stay): what was counted
 * before is not in any later window. */
void activity_forget_count(activity *a);

/* A request failed at t_us (its class is copied, cut to fit; status 0 = no HTTP answer). */
void activity_note_error(activity *a, int64_t t_us, const char *error_class, int status);

/* The requests of the last minute at now_us, and the time they were observed in. */
typedef struct activity_window {
    uint64_t count; /* requests in it */
    int64_t us;     /* its length: 55 to 60 s, less when cut by since_us; 0 when none */
    bool partial;   /* cut by since_us: less than the buckets' span was observed */
} activity_window;

/* The requests of the buckets within the last minute at now_us, over the time those buckets
 * cover (55 to 60 s), or from since_us on when that is later (0: no bound): the time before it
 * was not observed (this instance did not lead yet, or the customer did not exist). Buckets
 * that ended before since_us are left out. */
activity_window activity_window_at(const activity *a, int64_t now_us, int64_t since_us);

/* Per minute over the window: count * 60 / its seconds; NAN when it is shorter than
 * ACTIVITY_MIN_WINDOW_US (too short to say). */
double activity_window_rate(const activity_window *w);

/* Requests per minute over the last minute at now_us, unbounded (activity_window_at with
 * since_us 0): so a steady rate reads as itself; 0 when nothing was noted. */
double activity_per_minute(const activity *a, int64_t now_us);

/* Copies the latest gaps, oldest first, into out (at most cap); returns how many. */
size_t activity_gaps(const activity *a, uint32_t *out, size_t cap);

/* Copies the requests of the ticks up to and including current_tick, oldest first, into out
 * (at most cap, at most ACTIVITY_HISTORY, and none before the first tick noted; ticks with none
 * are 0, so the series shows skipped ticks); returns how many (0 when no tick was noted). */
size_t activity_ticks(const activity *a, int64_t current_tick, uint32_t *out, size_t cap);

#endif
