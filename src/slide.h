/* slide.h - sliding-window limits: "at most COUNT sends in any PERIOD", several windows at once.
 *
 * Contract: pure bookkeeping on caller-owned state; no I/O, no clock (every call takes `now`),
 * allocation only to grow a window's record. Times are int64 microseconds on one clock the
 * caller uses consistently (the dispatcher's: epoch microseconds on the database's scale).
 *
 * A window remembers the sends of its last PERIOD. A send at t stays in the window while
 * now - PERIOD < t, i.e. it leaves at t + PERIOD: the sends in the half-open (now - PERIOD, now]
 * are never more than COUNT when every send first asked slide_free_at(.., 1) and went no
 * earlier. Windows of up to SLIDE_EXACT sends keep every send's time, exactly; larger ones
 * merge the sends of each 1/SLIDE_EXACT of the period into one record kept at the latest of
 * their times, so a merged send is held in the window up to PERIOD/SLIDE_EXACT longer than it
 * was due (the limit is still never exceeded; at most 0.1 % of the capacity goes unused for a
 * while). Memory is bounded by about min(COUNT, SLIDE_EXACT) records per window.
 *
 * No instant is special: a day window frees one day after each send, whenever that falls (there
 * is no midnight), and a day is 86,400 seconds of the clock, leap seconds being ordinary
 * seconds of it. A clock that steps back leaves the sends recorded "in the future" in the window
 * until the clock passes them plus PERIOD (conservative: nothing is freed early), and a send
 * recorded out of order is kept at the latest time the window has seen.
 */
#ifndef PGPACE_SLIDE_H
#define PGPACE_SLIDE_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Windows counting at most this many sends keep each send's time; larger ones merge. */
#define SLIDE_EXACT 1024
/* A limit has at most this many windows (as pgpace.limits_error allows). */
#define SLIDE_MAX_WINDOWS 8
/* "Never": no instant frees enough (more is asked than the window ever holds). */
#define SLIDE_NEVER INT64_MAX

typedef struct slide_rec {
    int64_t first_us, last_us; /* the earliest and latest send merged into it */
    int64_t n;                 /* sends it stands for */
} slide_rec;

typedef struct slide_window {
    int64_t count;     /* COUNT */
    int64_t period_us; /* PERIOD */
    int64_t merge_us;  /* records span at most this (0: every send its own record) */
    int64_t guard_us;  /* a send stays this much longer than PERIOD (slide_limit_guard) */
    slide_rec *ring;   /* records, oldest first from head */
    size_t head, n, cap;
    int64_t used; /* sends in the records */
} slide_window;

/* A limit: its windows, shortest period first. */
typedef struct slide_limit {
    slide_window w[SLIDE_MAX_WINDOWS];
    int n;
} slide_limit;

/* Parses pgpace.limits_machine's form, "COUNT/PERIOD_S COUNT/PERIOD_S ..." ("" = no window),
 * into *out (empty windows, no send recorded). Returns 0, or -EINVAL (out left empty) when the
 * text is not that form, a count or period is out of range (1..1e9, 1..604800 s) or there are
 * more than SLIDE_MAX_WINDOWS. */
int slide_limit_parse(const char *machine, slide_limit *out) PGP_MUST_CHECK;

/* Keeps each send in its windows a little longer than PERIOD: 2 % of it, at least 1 ms and at
 * most 500 ms. A receiver counts arrivals, not sends: a request that took a millisecond longer
 * on its way than the one a PERIOD after it would otherwise arrive inside that one's window. */
void slide_limit_guard(slide_limit *l);

/* Whether two limits have the same windows (the records are not compared). */
bool slide_limit_same(const slide_limit *a, const slide_limit *b);

/* Moves the sends recorded in *from into *to (whose windows may differ; a changed limit keeps
 * what was sent): each window of *to is fed from the window of *from with the longest period
 * that still holds records, merged records at their latest time (conservative). *from is freed. */
void slide_limit_carry(slide_limit *to, slide_limit *from);

void slide_limit_free(slide_limit *l);

/* Records n sends at t in every window (they leave each window at t + its period). Returns 0, or
 * -ENOMEM when a window could not grow: the sends are then merged into its newest record (kept,
 * later than they were: still never exceeded). */
int slide_limit_record(slide_limit *l, int64_t t, int64_t n);

/* Records n sends at t in one window (as slide_limit_record does in each). */
int slide_window_record(slide_window *w, int64_t t, int64_t n);

/* Sends every window still allows at now, less `pending` (promised, not yet recorded): the
 * smallest of COUNT - (sends in (now - PERIOD, now]) - pending, at least 0. INT64_MAX for a limit
 * without windows. */
int64_t slide_limit_room(const slide_limit *l, int64_t now, int64_t pending);

/* The earliest t >= now at which `need` more sends, on top of `pending` ones that will be
 * recorded at or after now, fit every window: now when they fit already, SLIDE_NEVER when they
 * never can (pending + need is more than a window's COUNT). */
int64_t slide_limit_free_at(const slide_limit *l, int64_t now, int64_t pending, int64_t need);

/* The same for one window. */
int64_t slide_window_free_at(const slide_window *w, int64_t now, int64_t pending, int64_t need);
/* Sends in (now - PERIOD, now] of one window. */
int64_t slide_window_used(const slide_window *w, int64_t now);

/* The rate per minute of the limit's shortest window (its pace: COUNT per PERIOD and guard, so
 * that evenly spaced sends never wait for the window), 0 for none. */
double slide_limit_rate(const slide_limit *l);

/* "10/s, 50000/day" into buf (canonical text, as pgpace.limits_normalize writes it); "" for
 * none. Returns buf. */
const char *slide_limit_text(const slide_limit *l, char *buf, size_t len);
/* One window's period as canonical text ("s", "10s", "min", "day", "7day"). */
const char *slide_period_text(int64_t period_us, char *buf, size_t len);

#endif
