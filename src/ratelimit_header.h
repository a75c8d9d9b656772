/* ratelimit_header.h - what a receiver announced about its rate limit in an answer's headers.
 *
 * Contract: pure functions, no I/O, no clock (the caller passes the time), no allocation, no
 * locale. Every value comes from a remote server: the parser is strict, bounded and fuzzed
 * (tests/fuzz/fuzz_ratelimit_header.c). rl_parse() reads the raw field values (each one the
 * field's lines joined with ", " as RFC 9110 §5.3 allows for list fields; NULL when absent) of
 * these forms:
 *
 *   IETF current (draft-ietf-httpapi-ratelimit-headers-08 and later), Structured Fields:
 *     RateLimit-Policy: "burst";q=100;w=60, "daily";q=5000;w=86400   (name: string or token)
 *     RateLimit: "burst";r=50;t=30
 *   Policies whose quota unit (qu) is not "requests" do not apply (pgpace counts requests) and
 *   are skipped with their RateLimit items; q is required (an integer), w optional (integer
 *   seconds), pk ignored. RateLimit's r is required, t optional.
 *   IETF draft 07: RateLimit: limit=100, remaining=50, reset=30 (a Dictionary) with an optional
 *     RateLimit-Policy: 100;w=60, 5000;w=86400 (Integers with a window parameter).
 *   IETF drafts 00-06: RateLimit-Limit: 100 (drafts up to 04 may list quota policies after the
 *     limit: "100, 100;w=60"), RateLimit-Remaining: 50, RateLimit-Reset: 30, and the optional
 *     RateLimit-Policy of integers as in draft 07.
 *   X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, X-RateLimit-Reset-After (the
 *     common unofficial form): numbers read with the same syntax; Reset and Reset-After may have
 *     up to 3 decimals ("1470173023.123", "64.57").
 *
 * Rules (why: a wrong announcement must never stall a customer for long, nor speed it up):
 *   - Reset: any reset value (t, reset, RateLimit-Reset, X-RateLimit-Reset(-After)) >= 1e9 is
 *     an epoch instant (no window lasts 31 years), converted with now_epoch_s; a smaller one is
 *     seconds from now. An instant more than RL_EPOCH_SLACK_S (one day) away from now_epoch_s,
 *     either way, is "absurd" (the clocks disagree or the value is garbage: it cannot be told
 *     which); an instant up to a day in the past means the window has reset: 0. A reset farther
 *     than retry_after_max_s is clamped to it (reset_clamped set): a day quota used up holds the
 *     endpoint as long as pgpace ever holds one, then an attempt finds out more.
 *   - Several policies (lists): limit/window_s describe the one with the lowest rate (limit /
 *     window), windows[] every one with a window; remaining/reset come from the most
 *     restrictive state: an exhausted one (remaining 0) with the latest reset, else the one with
 *     the fewest remaining. remaining > limit is checked within one policy.
 *   - Several forms in one answer: each is read on its own, then merged, the IETF current form
 *     first, then draft 07, the early drafts, X-RateLimit-*; a field one form lacks is taken
 *     from the next. When two forms state the same field differently (limit, window, remaining
 *     exactly, reset by more than 1 s) the answer is "contradictory".
 *   - A field repeated with the same value ("50, 50", as a proxy that duplicates headers
 *     produces) is that value; different values of a single-number field are "contradictory".
 *   - Result RL_IGNORED with a static reason, and nothing usable in *out, when anything is:
 *     "malformed" (not the syntax above, a required parameter missing, a value too long for the
 *     capture: rl_raw.truncated), "contradictory" (above, and remaining > limit), "absurd"
 *     (negative numbers, limit 0, window 0 or longer than RL_WINDOW_MAX_S, the epoch rule).
 *     One bad field spoils the whole answer: a receiver that sends nonsense is not half-trusted.
 */
#ifndef PGPACE_RATELIMIT_HEADER_H
#define PGPACE_RATELIMIT_HEADER_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RL_WINDOWS_MAX   8          /* windows[] kept at most (more policies: the tightest) */
#define RL_WINDOW_MAX_S  31622400.0 /* 366 days: a longer window is absurd */
#define RL_EPOCH_MIN     1e9        /* reset values from here on are epoch instants */
#define RL_EPOCH_SLACK_S 86400.0    /* an epoch instant farther from now than this is absurd */

/* The raw field values of one answer (NULL: the field was absent). Not NUL-free checked: the
 * strings end at their NUL. */
typedef struct rl_raw {
    const char *policy;        /* RateLimit-Policy */
    const char *ratelimit;     /* RateLimit */
    const char *limit;         /* RateLimit-Limit */
    const char *remaining;     /* RateLimit-Remaining */
    const char *reset;         /* RateLimit-Reset */
    const char *x_limit;       /* X-RateLimit-Limit */
    const char *x_remaining;   /* X-RateLimit-Remaining */
    const char *x_reset;       /* X-RateLimit-Reset */
    const char *x_reset_after; /* X-RateLimit-Reset-After */
    bool truncated; /* a value was cut short by its capture, or held a control byte: the answer
                       is malformed */
} rl_raw;

/* The forms that contributed (rl_announce.forms bits). */
enum {
    RL_FORM_IETF = 1,       /* RateLimit-Policy / RateLimit, current drafts */
    RL_FORM_IETF07 = 2,     /* RateLimit: limit=, remaining=, reset= */
    RL_FORM_IETF_EARLY = 4, /* RateLimit-Limit / -Remaining / -Reset (integer RateLimit-Policy) */
    RL_FORM_X = 8,          /* X-RateLimit-* */
};

typedef struct rl_window {
    double limit;    /* requests ... */
    double window_s; /* ... per this many seconds (> 0) */
} rl_window;

typedef struct rl_announce {
    bool have_limit;
    double limit;    /* requests per window (>= 1) */
    double window_s; /* the window of `limit` in seconds; 0 when the answer did not say */
    bool have_remaining;
    int64_t remaining; /* requests left in the current window (>= 0) */
    bool have_reset;
    double reset_s;     /* seconds from now until the window resets, in [0, retry_after_max_s] */
    bool reset_clamped; /* the announced reset was farther than retry_after_max_s */
    size_t n_windows;   /* policies with a stated window, tightest (lowest rate) first */
    rl_window windows[RL_WINDOWS_MAX];
    unsigned forms; /* RL_FORM_* bits */
} rl_announce;

typedef enum rl_status {
    RL_NONE,    /* no rate limit field, or none about requests (every policy in another unit) */
    RL_OK,      /* *out describes the announcement */
    RL_IGNORED, /* fields present but not usable: *reason says why */
} rl_status;

/* Reads the fields of `raw` (see the contract). now_epoch_s: the caller's clock (epoch
 * seconds); retry_after_max_s: the longest hold the caller accepts (>= 0; NaN or negative
 * counts as 0). *out is zeroed first and filled on RL_OK; *reason (may be NULL) is set to a
 * static string on RL_IGNORED, to NULL otherwise. */
rl_status rl_parse(const rl_raw *raw, double now_epoch_s, double retry_after_max_s,
                   rl_announce *out, const char **reason) PGP_MUST_CHECK;

/* The announced pace in requests per minute: limit * 60 / window_s when both are known (the
 * receiver's steady rate); else, with remaining > 0 and a reset > 0, remaining * 60 / reset_s
 * (what is left spread evenly until the reset: the length of a full window is unknown, so the
 * limit alone says nothing about time; not when the reset was clamped, as spreading over the
 * shorter time would be faster than announced). Returns false (and leaves *per_minute alone)
 * when the answer states no rate, e.g. only a limit, or remaining 0 (a hold: rl_hold_s). */
bool rl_rate_per_minute(const rl_announce *a, double *per_minute) PGP_MUST_CHECK;

/* How long to hold every send to this receiver: reset_s when remaining is 0 and a reset > 0 is
 * known. Returns false (and leaves *hold_s alone) otherwise: remaining 0 without a reset says
 * nothing about how long (the caller's 429 handling decides then). */
bool rl_hold_s(const rl_announce *a, double *hold_s) PGP_MUST_CHECK;

#endif
