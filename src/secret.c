/* secret.c - whsec_ secret generation and Standard Webhooks signing with OpenSSL. */
#include "secret.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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

static void hmac_fetch(void)
{
    hmac_impl = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

int secret_sign(const char *secret, const char *msg_id, long long timestamp, const char *body,
                size_t body_len, char out[SECRET_SIGNATURE_MAX], pgp_error *err)
{
    unsigned char key[128];
    int keylen = decode_key(secret, key, sizeof key);
    if (keylen <= 0)
        return pgp_error_set(err, -EINVAL, "signing secret is not a valid whsec_ base64 value");

    char prefix[160];
    int plen = snprintf(prefix, sizeof prefix, "%s.%lld.", msg_id, timestamp);
    if (plen < 0 || (size_t)plen >= sizeof prefix) {
        OPENSSL_cleanse(key, sizeof key);
        return pgp_error_set(err, -EINVAL, "webhook id too long to sign");
    }

    unsigned char mac[EVP_MAX_MD_SIZE];
    size_t maclen = 0;
    int ok = 0;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    (void)pthread_once(&hmac_once, hmac_fetch);
    EVP_MAC_CTX *ctx = hmac_impl ? EVP_MAC_CTX_new(hmac_impl) : NULL;
    if (ctx && EVP_MAC_init(ctx, key, (size_t)keylen, params) == 1 &&
        EVP_MAC_update(ctx, (const unsigned char *)prefix, (size_t)plen) == 1 &&
        EVP_MAC_update(ctx, (const unsigned char *)body, body_len) == 1 &&
        EVP_MAC_final(ctx, mac, &maclen, sizeof mac) == 1)
        ok = 1;
    EVP_MAC_CTX_free(ctx);
    OPENSSL_cleanse(key, sizeof key);
    if (!ok || maclen != 32)
        return pgp_error_set(err, -EIO, "HMAC-SHA256 failed");
    memcpy(out, "v1,", 3);
    EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)maclen);
    return 0;
}
