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

/* A customer's extra header line "Name: value" (pgpace.customer_set_headers holds the same
 * rules): the name an HTTP token (RFC 9110) of 1 to VALIDATE_HEADER_NAME_MAX characters, not
 * reserved (webhook-*, content-type, content-length, host, user-agent, authorization,
 * transfer-encoding, connection, traceparent, tracestate, expect, keep-alive, te, trailer,
 * upgrade, proxy-connection; any case); the value, without the spaces and tabs around it, 1 to
 * VALIDATE_HEADER_VALUE_MAX bytes without control characters (no CR/LF: header injection). The
 * name is copied to name_out (for the caller's duplicate check). Messages never quote the value
 * (a secret), nor a name that is not a token (a mistyped line may hold a secret there). */
#define VALIDATE_HEADER_NAME_MAX  64
#define VALIDATE_HEADER_VALUE_MAX 4096
#define VALIDATE_HEADERS_MAX      20
int validate_header_line(const char *what, const char *line,
                         char name_out[VALIDATE_HEADER_NAME_MAX + 1],
                         pgp_error *err) PGP_MUST_CHECK;

/* Receiver authentication as the CLI spells it: "none", "basic:USER:PASSWORD" (USER 1 to 256
 * bytes without a colon, PASSWORD 1 to 1024 bytes; no control characters) or "bearer:TOKEN"
 * (1 to 4096 characters of token68: letters, digits, -._~+/ then '=' padding). On success
 * scheme is "none", "basic" or "bearer", username the user (basic; else ""), secret points into
 * s (the password or token; NULL for none). Messages never quote credentials. */
typedef struct validate_auth_parts {
    const char *scheme;
    char username[257];
    const char *secret;
} validate_auth_parts;
int validate_auth(const char *what, const char *s, validate_auth_parts *out,
                  pgp_error *err) PGP_MUST_CHECK;

/* A list of web origins (a frame-ancestors list, [http] portal_frame_ancestors): "" or
 * space-separated origins, each http:// or https:// and a host (letters, digits, '.', '-', or a
 * bracketed IPv6 address) with an optional port, at most 8 of them. */
bool validate_origins(const char *list);

#endif
