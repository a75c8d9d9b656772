/* common.h - conventions shared by every module: error reporting and small helpers.
 *
 * Contract: functions that can fail return int, 0 on success or a negative errno-style code,
 * and are marked PGP_MUST_CHECK. The human-readable reason goes into a caller-owned pgp_error,
 * so messages are composed where the failure is understood and printed once, by the caller.
 */
#ifndef PGPACE_COMMON_H
#define PGPACE_COMMON_H

#include <stdarg.h>
#include <stddef.h>

#define PGP_MUST_CHECK        __attribute__((warn_unused_result))
#define PGP_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define PGP_ARRAY_LEN(a)      (sizeof(a) / sizeof((a)[0]))

/* A message long enough for a libpq error with detail and hint plus our own context. */
typedef struct pgp_error {
    char msg[2048];
} pgp_error;

/* Sets e->msg (if e is not NULL) and returns code, so callers can write
 * `return pgp_error_set(err, -EINVAL, "...")`. */
int pgp_error_set(pgp_error *e, int code, const char *fmt, ...) PGP_PRINTF(3, 4);

/* Prepends context to an existing message: "context: old message". */
int pgp_error_prefix(pgp_error *e, int code, const char *fmt, ...) PGP_PRINTF(3, 4);

#endif
