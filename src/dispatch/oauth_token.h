/* oauth_token.h - the pure parts of OAuth2 client credentials (oauth.h): what a token
 * endpoint's answer must be, and the form-urlencoding of RFC 6749 appendix B.
 *
 * Contract: no I/O, no state, no logging; safe on any bytes (fuzzed). A token handed out is
 * 1 to OAUTH_TOKEN_MAX characters of 0x21..0x7e (it goes into a header line as is) and its
 * lifetime 1 to OAUTH_MAX_LIFETIME_S seconds.
 */
#ifndef PGPACE_DISPATCH_OAUTH_TOKEN_H
#define PGPACE_DISPATCH_OAUTH_TOKEN_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>

#define OAUTH_BODY_MAX           (64 * 1024)
#define OAUTH_TOKEN_MAX          8192
#define OAUTH_DEFAULT_LIFETIME_S 3600
#define OAUTH_MAX_LIFETIME_S     (365 * 86400)

/* Parses a token endpoint's JSON answer. On success returns 0 with *token (malloc'd, the
 * caller frees) and *expires_in_s; else -EINVAL with *why a static text naming the problem
 * (never quoting the body). Pure. */
int oauth_parse_token(const char *body, size_t len, char **token, int64_t *expires_in_s,
                      const char **why) PGP_MUST_CHECK;

/* The application/x-www-form-urlencoded form of s (RFC 6749 appendix B) into out (cap bytes,
 * NUL-terminated). Returns the length, or -1 when it does not fit. Pure. */
long oauth_form_encode(const char *s, char *out, size_t cap);

#endif
