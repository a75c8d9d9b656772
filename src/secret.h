/* secret.h - Standard Webhooks signing secrets: generation, parsing and signatures.
 *
 * Contract: two kinds of secret, told apart by their prefix (Standard Webhooks spec,
 * "Signature scheme"):
 *   - symmetric: "whsec_" + base64 of 24 to 64 random bytes; signs with
 *     "v1,<base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>"))>";
 *   - asymmetric: "whsk_" + base64 of a 32-byte Ed25519 seed (RFC 8032 private key, as the
 *     reference Go library's NewKeyFromSeed takes it), exactly 44 canonical characters; signs
 *     with "v1a,<base64(Ed25519(seed, "<id>.<timestamp>.<body>"))>" (a 64-byte signature).
 *     Its public key, for the receiver, is "whpk_" + base64 of the 32-byte Ed25519 public key.
 * A secret_key is a secret parsed once (decoded, the Ed25519 key derived), so signing many
 * requests with it does no parsing. It is read-only once parsed: any thread may sign with it.
 * Each thread that signs with whsec_ keys keeps one HMAC context, keyed with the last key it
 * used (freed when the thread ends, and dropped when that key is freed on the thread).
 * Secrets are never logged: error messages name the problem, never the value.
 */
#ifndef PGPACE_SECRET_H
#define PGPACE_SECRET_H

#include "common.h"

#include <stddef.h>

#define SECRET_PREFIX         "whsec_"
#define SECRET_ED25519_PREFIX "whsk_"
#define SECRET_PUBLIC_PREFIX  "whpk_"
#define SECRET_RANDOM_BYTES   32
/* The longest signature: "v1a," + base64 of a 64-byte Ed25519 signature (88) + NUL = 93. */
#define SECRET_SIGNATURE_MAX 96
/* "whpk_" + base64 of 32 bytes (44) + NUL. */
#define SECRET_PUBLIC_KEY_MAX 50
/* The longest secret text accepted: "whsec_" + base64 of 64 bytes (88). */
#define SECRET_TEXT_MAX 94

typedef enum secret_type { SECRET_HMAC, SECRET_ED25519 } secret_type;

typedef struct secret_key secret_key;

/* Writes a new whsec_ secret (NUL-terminated) into out; outlen must be at least 64. */
int secret_generate(char *out, size_t outlen, pgp_error *err) PGP_MUST_CHECK;
/* Writes a new secret of the given type: whsec_ as above, or whsk_ of a random 32-byte seed
 * (every 32-byte string is a valid Ed25519 seed). outlen must be at least 64. */
int secret_generate_type(secret_type type, char *out, size_t outlen, pgp_error *err) PGP_MUST_CHECK;

/* Parses a whsec_ or whsk_ secret into *out (free with secret_key_free). -EINVAL with a
 * message naming what is wrong (a whpk_ public key given as a secret has its own), -ENOMEM,
 * or -EIO when OpenSSL fails. */
int secret_key_parse(const char *secret, secret_key **out, pgp_error *err) PGP_MUST_CHECK;
/* Whether secret_key_parse takes the secret, with its -EINVAL message when not, without making
 * the key: no allocation and no Ed25519 derivation (a dispatcher checks every customer's secrets
 * at load and parses them at its first request). */
int secret_check(const char *secret, pgp_error *err) PGP_MUST_CHECK;
void secret_key_free(secret_key *k);
secret_type secret_key_type(const secret_key *k);
/* The whpk_ public key of an Ed25519 secret; -EINVAL for a whsec_ one (it has none). */
int secret_key_public(const secret_key *k, char out[SECRET_PUBLIC_KEY_MAX],
                      pgp_error *err) PGP_MUST_CHECK;
/* Signs "<msg_id>.<timestamp>.<body>" into out ("v1,..." or "v1a,...", NUL-terminated). */
int secret_key_sign(const secret_key *k, const char *msg_id, long long timestamp, const char *body,
                    size_t body_len, char out[SECRET_SIGNATURE_MAX], pgp_error *err) PGP_MUST_CHECK;

/* secret_key_parse + secret_key_sign + secret_key_free: for one-off signatures and checks. */
int secret_sign(const char *secret, const char *msg_id, long long timestamp, const char *body,
                size_t body_len, char out[SECRET_SIGNATURE_MAX], pgp_error *err) PGP_MUST_CHECK;

#endif
