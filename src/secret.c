/* secret.c - whsec_ (HMAC-SHA256) and whsk_ (Ed25519) secrets and Standard Webhooks signing
 * with OpenSSL. */
#include "secret.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/rand.h>

int secret_generate(char *out, size_t outlen, pgp_error *err)
{
    unsigned char raw[SECRET_RANDOM_BYTES];
    char b64[((SECRET_RANDOM_BYTES + 2) / 3) * 4 + 1];
    if (outlen < sizeof SECRET_PREFIX + sizeof b64)
        return pgp_error_set(err, -EINVAL, "secret buffer too small");
    if (RAND_bytes(raw, sizeof raw) != 1)
        return pgp_error_set(err, -EIO, "cannot generate a signing secret: no random bytes");
    EVP_EncodeBlock((unsigned char *)b64, raw, sizeof raw);
    snprintf(out, outlen, "%s%s", SECRET_PREFIX, b64);
    OPENSSL_cleanse(raw, sizeof raw);
    return 0;
}

int secret_generate_type(secret_type type, char *out, size_t outlen, pgp_error *err)
{
    if (type == SECRET_HMAC)
        return secret_generate(out, outlen, err);
    unsigned char seed[32];
    char b64[((sizeof seed + 2) / 3) * 4 + 1];
    if (outlen < sizeof SECRET_ED25519_PREFIX + sizeof b64)
        return pgp_error_set(err, -EINVAL, "secret buffer too small");
    if (RAND_bytes(seed, sizeof seed) != 1)
        return pgp_error_set(err, -EIO, "cannot generate a signing key: no random bytes");
    EVP_EncodeBlock((unsigned char *)b64, seed, sizeof seed);
    snprintf(out, outlen, "%s%s", SECRET_ED25519_PREFIX, b64);
    OPENSSL_cleanse(seed, sizeof seed);
    OPENSSL_cleanse(b64, sizeof b64);
    return 0;
}

/* Decodes the base64 key of a whsec_ secret, strictly: only the base64 alphabet, padding only
 * at the end, 24 to 64 bytes of key (OpenSSL's decoder alone would accept "====" as an empty
 * key, which anyone could sign with). Returns the key length or -EINVAL. */
static int decode_key(const char *secret, unsigned char *key, size_t keymax)
{
    size_t prefix = strlen(SECRET_PREFIX);
    if (strncmp(secret, SECRET_PREFIX, prefix) != 0)
        return -EINVAL;
    const char *b64 = secret + prefix;
    size_t len = strlen(b64);
    if (len == 0 || len % 4 != 0 || (len / 4) * 3 > keymax)
        return -EINVAL;
    size_t pad = 0;
    for (size_t i = 0; i < len; i++) {
        char c = b64[i];
        bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '+' || c == '/';
        if (c == '=' && i >= len - 2)
            pad++;
        else if (!alpha || pad > 0)
            return -EINVAL;
    }
    int n = EVP_DecodeBlock(key, (const unsigned char *)b64, (int)len);
    if (n < 0)
        return -EINVAL;
    n -= (int)pad; /* EVP_DecodeBlock counts padding as zero bytes */
    return n >= 24 && n <= 64 ? n : -EINVAL;
}

/* The HMAC implementation, looked up once: a fetch per signature cost about a microsecond, a
 * few per cent of a delivery. Never freed (one object for the process's life). */
static EVP_MAC *hmac_impl;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

/* One HMAC context per signing thread, kept keyed with the last key it signed with: a context
 * made, given its digest ("SHA256", looked up by name in OpenSSL's provider store) and keyed
 * for every signature was half of a signature's cost, about 2 us of a delivery's 23 (perf,
 * bench/DELIVERY_CPU.md). Another signature with the same key only restarts the keyed state;
 * another key re-keys the context. Keys are told apart by a serial number, never by address,
 * as a freed key's address may be a new key's. The context is freed when its thread ends. */
typedef struct hmac_scratch {
    EVP_MAC_CTX *ctx;
    uint64_t serial; /* the key ctx holds; 0: none (a failure leaves it unknown) */
} hmac_scratch;
static pthread_key_t hmac_scratch_key;
static bool hmac_scratch_ok; /* the thread-specific key exists */
static atomic_uint_fast64_t hmac_serials;

static void hmac_scratch_free(void *p)
{
    hmac_scratch *sc = p;
    EVP_MAC_CTX_free(sc->ctx);
    free(sc);
}

static void hmac_fetch(void)
{
    hmac_impl = EVP_MAC_fetch(NULL, "HMAC", NULL);
    hmac_scratch_ok = pthread_key_create(&hmac_scratch_key, hmac_scratch_free) == 0;
}

/* Sized to its key: every customer of a dispatcher holds one per secret (a fixed 128-byte buffer
 * for keys of at most 64 was 144 bytes a customer). */
struct secret_key {
    secret_type type;
    int keylen; /* the bytes of key[] */
    union {
        EVP_PKEY *pkey;  /* Ed25519: the private key (its public half derived once) */
        uint64_t serial; /* HMAC: this key among all parsed (hmac_scratch), from 1 */
    } u;
    unsigned char key[]; /* HMAC: the decoded key; Ed25519: the raw public key (32 bytes) */
};

#define HMAC_KEY_MAX    128
#define ED25519_PUB_LEN 32

#define ED25519_SEED_LEN 32
#define ED25519_B64_LEN  44 /* base64 of 32 bytes: 43 characters and one '=' */

static bool b64_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

/* Decodes the base64 of a whsk_ secret: exactly 44 characters, the last '=', and the unused
 * low bits of the last data character zero, so one key has one spelling (a lenient decoder
 * would take 4 spellings of each key; the SQL check, pgpace.valid_secrets, is as strict). */
static bool decode_seed(const char *b64, unsigned char seed[ED25519_SEED_LEN])
{
    if (strlen(b64) != ED25519_B64_LEN || b64[43] != '=')
        return false;
    for (size_t i = 0; i < 43; i++)
        if (!b64_alpha(b64[i]))
            return false;
    if (!strchr("AEIMQUYcgkosw048", b64[42]))
        return false;
    unsigned char buf[33];
    if (EVP_DecodeBlock(buf, (const unsigned char *)b64, ED25519_B64_LEN) != 33) {
        OPENSSL_cleanse(buf, sizeof buf);
        return false;
    }
    memcpy(seed, buf, ED25519_SEED_LEN); /* the 33rd byte is the padding's zero */
    OPENSSL_cleanse(buf, sizeof buf);
    return true;
}

/* The seed of a whsk_ secret's base64, or -EINVAL saying what is wrong with it. */
static int ed25519_seed(const char *b64, unsigned char seed[ED25519_SEED_LEN], pgp_error *err)
{
    if (!decode_seed(b64, seed) && strlen(b64) == 88)
        return pgp_error_set(err, -EINVAL,
                             "whsk_ must be followed by base64 of a 32-byte Ed25519 seed "
                             "(44 characters ending in '='); this is 64 bytes (seed and public "
                             "key, libsodium's form?): keep its first 32 bytes");
    if (!decode_seed(b64, seed))
        return pgp_error_set(err, -EINVAL,
                             "whsk_ must be followed by base64 of a 32-byte Ed25519 seed "
                             "(44 characters ending in '=')");
    return 0;
}

static int parse_ed25519(const char *b64, secret_key *k, pgp_error *err)
{
    unsigned char seed[ED25519_SEED_LEN];
    int rc = ed25519_seed(b64, seed, err);
    if (rc != 0)
        return rc;
    /* Derives the public key now (a scalar multiplication, as costly as a signature): once per
     * parse instead of once per request. The type first: it tells secret_key_free to free pkey. */
    k->type = SECRET_ED25519;
    k->u.pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, sizeof seed);
    OPENSSL_cleanse(seed, sizeof seed);
    size_t publen = ED25519_PUB_LEN;
    if (!k->u.pkey || EVP_PKEY_get_raw_public_key(k->u.pkey, k->key, &publen) != 1 ||
        publen != ED25519_PUB_LEN) {
        ERR_clear_error(); /* callers read the queue for their own errors (mTLS, config) */
        return pgp_error_set(err, -EIO, "cannot load the Ed25519 key (OpenSSL)");
    }
    return 0;
}

static const char public_not_secret[] =
    "a whpk_ public key cannot sign: give the whsk_ secret key (the public key is derived from "
    "it)";
static const char hmac_invalid[] = "signing secret is not a valid whsec_ base64 value";

int secret_check(const char *secret, pgp_error *err)
{
    size_t sk = strlen(SECRET_ED25519_PREFIX);
    if (strncmp(secret, SECRET_PUBLIC_PREFIX, strlen(SECRET_PUBLIC_PREFIX)) == 0)
        return pgp_error_set(err, -EINVAL, "%s", public_not_secret);
    if (strncmp(secret, SECRET_ED25519_PREFIX, sk) == 0) {
        unsigned char seed[ED25519_SEED_LEN];
        int rc = ed25519_seed(secret + sk, seed, err);
        OPENSSL_cleanse(seed, sizeof seed);
        return rc;
    }
    unsigned char key[HMAC_KEY_MAX];
    int keylen = decode_key(secret, key, sizeof key);
    OPENSSL_cleanse(key, sizeof key);
    return keylen > 0 ? 0 : pgp_error_set(err, -EINVAL, "%s", hmac_invalid);
}

int secret_key_parse(const char *secret, secret_key **out, pgp_error *err)
{
    *out = NULL;
    size_t sk = strlen(SECRET_ED25519_PREFIX);
    if (strncmp(secret, SECRET_PUBLIC_PREFIX, strlen(SECRET_PUBLIC_PREFIX)) == 0)
        return pgp_error_set(err, -EINVAL, "%s", public_not_secret);
    secret_key *k;
    int rc = 0;
    if (strncmp(secret, SECRET_ED25519_PREFIX, sk) == 0) {
        k = calloc(1, sizeof *k + ED25519_PUB_LEN);
        if (!k)
            return pgp_error_set(err, -ENOMEM, "out of memory");
        k->keylen = ED25519_PUB_LEN;
        rc = parse_ed25519(secret + sk, k, err);
    } else {
        unsigned char key[HMAC_KEY_MAX];
        int keylen = decode_key(secret, key, sizeof key);
        if (keylen <= 0) {
            OPENSSL_cleanse(key, sizeof key);
            return pgp_error_set(err, -EINVAL, "%s", hmac_invalid);
        }
        k = calloc(1, sizeof *k + (size_t)keylen);
        if (!k) {
            OPENSSL_cleanse(key, sizeof key);
            return pgp_error_set(err, -ENOMEM, "out of memory");
        }
        k->type = SECRET_HMAC;
        k->keylen = keylen;
        k->u.serial = atomic_fetch_add(&hmac_serials, 1) + 1;
        memcpy(k->key, key, (size_t)keylen);
        OPENSSL_cleanse(key, sizeof key);
    }
    if (rc != 0) {
        secret_key_free(k);
        return rc;
    }
    *out = k;
    return 0;
}

/* A freed key's keyed state does not outlive it in this thread's context: the context goes
 * (EVP_MAC_CTX_free wipes it) and the next signature makes another. Another thread's context
 * holds it until that thread signs with another key or ends. */
static void hmac_scratch_forget(uint64_t serial)
{
    (void)pthread_once(&hmac_once, hmac_fetch);
    if (!hmac_scratch_ok)
        return;
    hmac_scratch *sc = pthread_getspecific(hmac_scratch_key);
    if (sc && sc->ctx && sc->serial == serial) {
        EVP_MAC_CTX_free(sc->ctx);
        sc->ctx = NULL;
        sc->serial = 0;
    }
}

void secret_key_free(secret_key *k)
{
    if (!k)
        return;
    if (k->type == SECRET_ED25519)
        EVP_PKEY_free(k->u.pkey);
    else
        hmac_scratch_forget(k->u.serial);
    OPENSSL_cleanse(k, sizeof *k + (size_t)k->keylen);
    free(k);
}

secret_type secret_key_type(const secret_key *k)
{
    return k->type;
}

int secret_key_public(const secret_key *k, char out[SECRET_PUBLIC_KEY_MAX], pgp_error *err)
{
    if (k->type != SECRET_ED25519)
        return pgp_error_set(err, -EINVAL, "a whsec_ secret has no public key");
    memcpy(out, SECRET_PUBLIC_PREFIX, strlen(SECRET_PUBLIC_PREFIX));
    EVP_EncodeBlock((unsigned char *)out + strlen(SECRET_PUBLIC_PREFIX), k->key, ED25519_PUB_LEN);
    return 0;
}

/* This thread's HMAC context (hmac_scratch), made at its first signature; NULL: no memory. */
static hmac_scratch *hmac_scratch_get(void)
{
    (void)pthread_once(&hmac_once, hmac_fetch);
    if (!hmac_impl || !hmac_scratch_ok)
        return NULL;
    hmac_scratch *sc = pthread_getspecific(hmac_scratch_key);
    if (!sc) {
        sc = calloc(1, sizeof *sc);
        if (!sc)
            return NULL;
        if (pthread_setspecific(hmac_scratch_key, sc) != 0) {
            free(sc);
            return NULL;
        }
    }
    if (!sc->ctx) {
        char digest[] = "SHA256";
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
        sc->serial = 0;
        sc->ctx = EVP_MAC_CTX_new(hmac_impl);
        if (!sc->ctx || EVP_MAC_CTX_set_params(sc->ctx, params) != 1) {
            EVP_MAC_CTX_free(sc->ctx);
            sc->ctx = NULL;
            return NULL;
        }
    }
    return sc;
}

static int sign_hmac(const secret_key *k, const char *prefix, size_t plen, const char *body,
                     size_t body_len, char out[SECRET_SIGNATURE_MAX], pgp_error *err)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    size_t maclen = 0;
    int ok = 0;
    hmac_scratch *sc = hmac_scratch_get();
    if (sc) {
        /* With no key, EVP_MAC_init restarts from the key it holds. */
        bool same = sc->serial == k->u.serial;
        sc->serial = 0;
        if (EVP_MAC_init(sc->ctx, same ? NULL : k->key, same ? 0 : (size_t)k->keylen, NULL) == 1 &&
            EVP_MAC_update(sc->ctx, (const unsigned char *)prefix, plen) == 1 &&
            EVP_MAC_update(sc->ctx, (const unsigned char *)body, body_len) == 1 &&
            EVP_MAC_final(sc->ctx, mac, &maclen, sizeof mac) == 1) {
            ok = 1;
            sc->serial = k->u.serial;
        }
    }
    if (!ok || maclen != 32) {
        ERR_clear_error();
        return pgp_error_set(err, -EIO, "HMAC-SHA256 failed");
    }
    memcpy(out, "v1,", 3);
    EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)maclen);
    OPENSSL_cleanse(mac, sizeof mac);
    return 0;
}

/* Pure Ed25519 (RFC 8032) hashes the whole message twice, so OpenSSL signs it only in one
 * piece: the prefix and the body are joined, on the stack when small (most webhooks). */
static int sign_ed25519(const secret_key *k, const char *prefix, size_t plen, const char *body,
                        size_t body_len, char out[SECRET_SIGNATURE_MAX], pgp_error *err)
{
    unsigned char small[4096];
    size_t total = plen + body_len;
    if (total < plen)
        return pgp_error_set(err, -EINVAL, "body too large to sign");
    unsigned char *msg = total <= sizeof small ? small : malloc(total);
    if (!msg)
        return pgp_error_set(err, -ENOMEM, "out of memory signing a webhook");
    memcpy(msg, prefix, plen);
    if (body_len)
        memcpy(msg + plen, body, body_len);
    unsigned char sig[64];
    size_t siglen = sizeof sig;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, k->u.pkey) == 1 &&
             EVP_DigestSign(ctx, sig, &siglen, msg, total) == 1 && siglen == sizeof sig;
    EVP_MD_CTX_free(ctx);
    if (msg != small)
        free(msg);
    if (!ok) {
        ERR_clear_error();
        return pgp_error_set(err, -EIO, "Ed25519 signing failed");
    }
    memcpy(out, "v1a,", 4);
    EVP_EncodeBlock((unsigned char *)out + 4, sig, (int)siglen);
    return 0;
}

/* "<msg_id>.<timestamp>." into buf, or -1 when it does not fit (as snprintf's "%s.%lld." did,
 * which cost 0.3 % of the dispatcher's CPU per delivery). */
static int sign_prefix(char *buf, size_t cap, const char *msg_id, long long timestamp)
{
    size_t idlen = strlen(msg_id);
    char digits[24];
    size_t nd = 0;
    unsigned long long u =
        timestamp < 0 ? 0ULL - (unsigned long long)timestamp : (unsigned long long)timestamp;
    do {
        digits[nd++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t need = idlen + 1 + (timestamp < 0) + nd + 1;
    if (need >= cap)
        return -1;
    char *p = buf;
    memcpy(p, msg_id, idlen);
    p += idlen;
    *p++ = '.';
    if (timestamp < 0)
        *p++ = '-';
    while (nd)
        *p++ = digits[--nd];
    *p++ = '.';
    *p = '\0';
    return (int)(p - buf);
}

int secret_key_sign(const secret_key *k, const char *msg_id, long long timestamp, const char *body,
                    size_t body_len, char out[SECRET_SIGNATURE_MAX], pgp_error *err)
{
    char prefix[160];
    int plen = sign_prefix(prefix, sizeof prefix, msg_id, timestamp);
    if (plen < 0)
        return pgp_error_set(err, -EINVAL, "webhook id too long to sign");
    if (k->type == SECRET_ED25519)
        return sign_ed25519(k, prefix, (size_t)plen, body, body_len, out, err);
    return sign_hmac(k, prefix, (size_t)plen, body, body_len, out, err);
}

int secret_sign(const char *secret, const char *msg_id, long long timestamp, const char *body,
                size_t body_len, char out[SECRET_SIGNATURE_MAX], pgp_error *err)
{
    secret_key *k = NULL;
    int rc = secret_key_parse(secret, &k, err);
    if (rc != 0)
        return rc;
    rc = secret_key_sign(k, msg_id, timestamp, body, body_len, out, err);
    secret_key_free(k);
    return rc;
}
