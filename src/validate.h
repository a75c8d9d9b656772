/* validate.h - pure checks of user input shared by the CLI, config and (later) HTTP API.
 *
 * Contract: each function returns 0 when the input is acceptable, or -EINVAL with a message in
 * *err that names the field (`what`) and says what was expected. No I/O, no allocation beyond
 * the stack; safe to fuzz. The database enforces the same rules with CHECK constraints; these
 * exist so that the user gets a precise message before anything is sent.
 */
#ifndef PGPACE_VALIDATE_H
#define PGPACE_VALIDATE_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Customer/carrier names: 1-128 chars of A-Z a-z 0-9 . _ : @ -, starting alphanumeric. */
int validate_name(const char *what, const char *s, pgp_error *err) PGP_MUST_CHECK;

/* Rate per minute: a finite decimal number > 0 (e.g. "60", "0.5", "1e3"); rejects NaN, inf,
 * empty, trailing garbage. */
int validate_rate(const char *what, const char *s, double *out, pgp_error *err) PGP_MUST_CHECK;

/* The range of a validate_double value; each bound is inclusive or exclusive. */
typedef struct double_range {
    double min, max;
    bool min_inclusive, max_inclusive;
} double_range;

/* A decimal number within `range`, in the notation validate_rate accepts (e.g. "0.9", "5e-2");
 * rejects NaN, inf, hex, empty, trailing garbage and values that overflow or underflow. The
 * message says the range in words, as validate_double_range does. */
int validate_double(const char *what, const char *s, const double_range *range, double *out,
                    pgp_error *err) PGP_MUST_CHECK;

/* The range in words into buf: "greater than 0 and less than 1", "at least 0.5 and at most 1". */
void validate_double_range(char *buf, size_t n, const double_range *range);

/* A base-10 integer in [min, max] with no trailing garbage. */
int validate_int(const char *what, const char *s, long long min, long long max, long long *out,
                 pgp_error *err) PGP_MUST_CHECK;

/* "spaced", "batch" or "unlimited". */
int validate_mode(const char *what, const char *s, pgp_error *err) PGP_MUST_CHECK;

/* Webhook URL: http:// or https:// (case-insensitive), a non-empty host (name, IPv4 or
 * bracketed IPv6), optional port 1-65535, optional path/query; no userinfo, no whitespace or
 * control characters, no fragment, at most 2048 bytes. */
int validate_url(const char *what, const char *s, pgp_error *err) PGP_MUST_CHECK;

#endif
