/* backoff.h - retry delays: capped exponential backoff with jitter, and Retry-After parsing.
 *
 * Contract: pure functions, no I/O, no allocation, no clock, no locale, no randomness of their
 * own (the caller passes the random number and the current time, so results are reproducible
 * in tests). Inputs come from remote servers: retry_after_parse() is a strict hand parser that
 * accepts exactly the RFC 9110 forms and is safe to fuzz.
 */
#ifndef PGPACE_BACKOFF_H
#define PGPACE_BACKOFF_H

#include "common.h"

#include <stdint.h>

/* The retry delay: min(cap, base * 2^attempt) * (0.5 + r), in [0, 1.5 * cap]. The exponential
 * part saturates, so any attempt up to INT_MAX is fine; attempt < 0 counts as 0, a negative base
 * or cap as 0, and r outside [0, 1) (or NaN) is clamped into it. The result is saturated at
 * INT64_MAX. Never fails. */
int64_t backoff_delay_us(int attempt, int64_t base_us, int64_t cap_us, double r);

/* Parses a Retry-After field value into a delay in seconds from now_epoch_s, clamped to
 * [0, max_s]. Accepted (RFC 9110 §10.2.3 and §5.6.7), with optional surrounding spaces, tabs,
 * CR and LF:
 *   - delta-seconds: one or more ASCII digits; values too large for any integer clamp to max_s;
 *   - IMF-fixdate:   "Sun, 06 Nov 1994 08:49:37 GMT";
 *   - RFC 850:       "Sunday, 06-Nov-94 08:49:37 GMT" (a two-digit year more than 50 years
 *                    ahead of now_epoch_s's year means the previous century);
 *   - asctime:       "Sun Nov  6 08:49:37 1994".
 * Dates are case-sensitive as RFC 9110 says; the weekday must be a weekday name but need not
 * match the date; the date must exist (no Feb 30) in years 0000-9999; second 60 (a leap
 * second) is allowed. A date in the past gives 0. Anything else (signs, fractions, empty, trailing
 * garbage) is -EINVAL, as are NULL pointers and max_s < 0; *delay_s is untouched on error. */
int retry_after_parse(const char *value, int64_t now_epoch_s, int64_t max_s,
                      int64_t *delay_s) PGP_MUST_CHECK;

#endif
