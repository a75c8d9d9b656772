/* client_cert.h - a customer's client certificate for mutual TLS: checked with OpenSSL, described
 * for people, and held in memory for the sender.
 *
 * Contract:
 * - client_cert_check() is what `pgpace customer set --client-cert/--client-key` runs before it
 *   writes, and client_cert_new() what the dispatcher runs when it loads a customer: the
 *   certificate text is PEM with at least one certificate (the leaf first; every further one, an
 *   intermediate, must parse too), the key text a PEM private key that is not encrypted
 *   (nothing could give its passphrase) and that matches the leaf (X509_check_private_key).
 *   Only client_cert_check() also requires the leaf to be valid at `now` (notBefore <= now <=
 *   notAfter): the dispatcher keeps an expired certificate loaded and fails the customer's
 *   deliveries with error_class "client_cert" (client_cert_usable), so that one expiring while
 *   loaded is caught the same way.
 * - Messages name what is wrong (and the dates when it is the validity), never the key's bytes;
 *   the caller adds which flag or field. OpenSSL's error queue is left empty.
 * - A client_cert is reference-counted and immutable: the creator holds one reference, every
 *   request in flight another (http_sender.h), so a customer reloaded while its requests are in
 *   flight can release its copy at once. Single-threaded (the loop's thread). Its key bytes are
 *   wiped (OPENSSL_cleanse) when it is freed.
 */
#ifndef PGPACE_CLIENT_CERT_H
#define PGPACE_CLIENT_CERT_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest certificate (chain) or key text accepted, as pgpace.customer's CHECK says. */
#define CLIENT_CERT_MAX_BYTES 65536

/* Which of the two inputs a refusal is about. */
typedef enum client_cert_field { CLIENT_CERT_FIELD_CERT, CLIENT_CERT_FIELD_KEY } client_cert_field;

/* What is shown of a certificate (none of it is secret). Dates are UTC, "YYYY-MM-DD HH:MM:SSZ". */
typedef struct client_cert_info {
    char subject[256]; /* RFC 2253, truncated */
    char issuer[256];
    char not_before[24];
    char not_after[24];
    int64_t not_before_s; /* epoch seconds */
    int64_t not_after_s;
    char sha256[96]; /* the leaf's DER SHA-256, "AB:CD:..." (as openssl x509 -fingerprint) */
    int chain;       /* certificates in the text, the leaf included */
} client_cert_info;

/* Describes the first certificate of a PEM text (the others must parse too). Returns 0 or
 * -EINVAL with the reason in err. */
int client_cert_describe(const char *cert_pem, size_t cert_len, client_cert_info *info,
                         pgp_error *err) PGP_MUST_CHECK;

/* The whole check of `customer set` (see the contract), at time now_s (epoch seconds). On a
 * refusal returns -EINVAL, *field says which input and err why; info is filled as far as the
 * certificate parsed. */
int client_cert_check(const char *cert_pem, size_t cert_len, const char *key_pem, size_t key_len,
                      int64_t now_s, client_cert_info *info, client_cert_field *field,
                      pgp_error *err) PGP_MUST_CHECK;

typedef struct client_cert client_cert;

/* Checks (all but the dates) and copies NUL-terminated PEM texts into a new object with one
 * reference. Returns 0, -EINVAL (err says why, without the key) or -ENOMEM. */
int client_cert_new(const char *cert_pem, const char *key_pem, client_cert **out,
                    pgp_error *err) PGP_MUST_CHECK;
void client_cert_retain(client_cert *c);
/* Drops a reference; the last one frees it (wiping the key). NULL is a no-op. */
void client_cert_release(client_cert *c);

/* The PEM texts as given (not NUL-counted lengths), valid while a reference is held. */
void client_cert_pem(const client_cert *c, const char **cert, size_t *cert_len, const char **key,
                     size_t *key_len);
const client_cert_info *client_cert_get_info(const client_cert *c);

/* Whether the leaf is valid at now_s; if not, why (with the dates) in why. */
bool client_cert_usable(const client_cert *c, int64_t now_s, char *why, size_t why_len);

#endif
