/* secret.h - Standard Webhooks signing secrets: generation and HMAC-SHA256 signatures.
 *
 * Contract: secrets are "whsec_" + base64 of random bytes. secret_sign() produces
 * "v1,<base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>"))>" where key is the base64-decoded
 * part after the prefix. Secrets are never logged: error messages name the problem, not the
 * value.
 */
#ifndef PGPACE_SECRET_H
#define PGPACE_SECRET_H

#include "common.h"

#include <stddef.h>

#define SECRET_PREFIX       "whsec_"
#define SECRET_RANDOM_BYTES 32
/* "v1," + base64 of a 32-byte digest (44) + NUL. */
#define SECRET_SIGNATURE_MAX 48

/* Writes a new secret (NUL-terminated) into out; outlen must be at least 64. */
int secret_generate(char *out, size_t outlen, pgp_error *err) PGP_MUST_CHECK;

int secret_sign(const char *secret, const char *msg_id, long long timestamp, const char *body,
                size_t body_len, char out[SECRET_SIGNATURE_MAX], pgp_error *err) PGP_MUST_CHECK;

#endif
