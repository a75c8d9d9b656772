/* fuzz_secret.c - secret_sign with arbitrary secrets, ids, timestamps and bodies.
 *
 * Input: 1 byte secret length L, L bytes of secret, 1 byte id length M, M bytes of id, 8 bytes
 * timestamp (little-endian), the rest is the body (any bytes, NULs included, in an exact-size
 * buffer). Secret and id are cut at their first NUL as a C caller would see them.
 * Invariants, beyond "no crash, no out-of-bounds read (ASan)":
 *   - success => out is "v1," + 44 base64 characters, and equals an independent computation:
 *     HMAC-SHA256 (OpenSSL's one-shot HMAC()) keyed with the secret decoded by a strict RFC 4648
 *     decoder, over "<id>.<timestamp>.<body>" (when the strict decoder accepts the secret);
 *   - a strictly valid "whsec_" secret whose key fits (<= 126 bytes), with an id that fits,
 *     is always accepted;
 *   - failure => -EINVAL or -EIO with a message that does not contain the secret's base64;
 *   - whsk_ secrets: success => "v1a," + 88 characters (values: unit/test_secret.c).
 */
#include "fuzz_util.h"

#include "secret.h"

#include <errno.h>
#include <stdbool.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict padded base64: length a multiple of 4, '=' only as the last one or two characters,
 * unused bits zero. Returns the decoded length or -1. */
static int strict_b64(const char *s, unsigned char *out, size_t max)
{
    size_t len = strlen(s);
    if (len == 0 || len % 4)
        return -1;
    size_t pad = s[len - 1] == '=' ? (s[len - 2] == '=' ? 2 : 1) : 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++) {
            bool padpos = i + 4 == len && (size_t)j >= 4 - pad;
            v[j] = padpos ? 0 : b64val((unsigned char)s[i + j]);
            if (v[j] < 0)
                return -1;
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        size_t n = i + 4 == len ? 3 - pad : 3;
        if (i + 4 == len && ((pad == 1 && (w & 0xff)) || (pad == 2 && (w & 0xffff))))
            return -1; /* non-canonical: bits set under the padding */
        for (size_t k = 0; k < n; k++) {
            if (o >= max)
                return -1;
            out[o++] = (unsigned char)(w >> (16 - 8 * k));
        }
    }
    return (int)o;
}

/* Strict except for non-zero bits under the padding ("QR==" for "A"), which RFC 4648 lets a
 * decoder accept. */
static bool strict_b64_loose_bits(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len % 4)
        return false;
    size_t pad = s[len - 1] == '=' ? (s[len - 2] == '=' ? 2 : 1) : 0;
    for (size_t i = 0; i < len - pad; i++)
        if (b64val((unsigned char)s[i]) < 0)
            return false;
    return true;
}

static const char *take_str(const uint8_t **d, size_t *n, char **owned)
{
    size_t len = (size_t)fuzz_take_u64(d, n, 1);
    if (len > *n)
        len = *n;
    *owned = fuzz_strndup(*d, len);
    *d += len;
    *n -= len;
    return *owned;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *d = data;
    size_t n = size;
    char *secret_owned, *id_owned;
    const char *secret = take_str(&d, &n, &secret_owned);
    const char *id = take_str(&d, &n, &id_owned);
    long long ts = (long long)fuzz_take_u64(&d, &n, 8);
    char *body = malloc(n ? n : 1);
    if (!body)
        abort();
    if (n)
        memcpy(body, d, n);

    char out[SECRET_SIGNATURE_MAX];
    memset(out, 0x7f, sizeof out);
    pgp_error err;
    memset(&err, 0, sizeof err);
    int rc = secret_sign(secret, id, ts, body, n, out, &err);

    /* whsk_ (Ed25519) secrets are checked against fixed vectors in unit/test_secret.c; here only
     * their shape and that a failure does not echo them. */
    if (strncmp(secret, SECRET_ED25519_PREFIX, 5) == 0 ||
        strncmp(secret, SECRET_PUBLIC_PREFIX, 5) == 0) {
        if (rc == 0)
            FUZZ_CHECK(secret[2] == 's' && memcmp(out, "v1a,", 4) == 0 &&
                           strnlen(out, sizeof out) == 92,
                       "bad v1a signature for secret '%s'", fuzz_show(secret));
        else
            FUZZ_CHECK(strlen(secret) < 13 || strstr(err.msg, secret + 5) == NULL,
                       "error message leaks the key");
        goto done;
    }

    const size_t plen = strlen(SECRET_PREFIX);
    bool prefixed = strncmp(secret, SECRET_PREFIX, plen) == 0;
    unsigned char key[256];
    int keylen = prefixed ? strict_b64(secret + plen, key, sizeof key) : -1;
    char prefix[512];
    int idlen = snprintf(prefix, sizeof prefix, "%s.%lld.", id, ts);
    bool id_fits = idlen > 0 && idlen < 160;

    if (rc == 0) {
        FUZZ_CHECK(memcmp(out, "v1,", 3) == 0 && strnlen(out, sizeof out) == 47,
                   "bad signature format for secret '%s'", fuzz_show(secret));
        for (int i = 3; i < 47; i++)
            FUZZ_CHECK(b64val((unsigned char)out[i]) >= 0 || (i == 46 && out[i] == '='),
                       "non-base64 signature byte 0x%02x", (unsigned char)out[i]);
        FUZZ_CHECK(prefixed, "secret without the whsec_ prefix accepted: '%s'", fuzz_show(secret));
        /* Finding F2 (README): EVP_DecodeBlock is lenient ("whsec_====" signs with a one-byte
         * zero key, '=' mid-string is taken as data). Only accepted base64 should sign. */
        FUZZ_CHECK(keylen > 0 || strict_b64_loose_bits(secret + plen),
                   "secret '%s' is not base64 but was accepted", fuzz_show(secret));
        if (keylen > 0) {
            /* Independent signature. */
            unsigned char mac[EVP_MAX_MD_SIZE];
            unsigned int maclen = 0;
            size_t total = (size_t)idlen + n;
            unsigned char *msg = malloc(total ? total : 1);
            if (!msg)
                abort();
            memcpy(msg, prefix, (size_t)idlen);
            if (n)
                memcpy(msg + idlen, body, n);
            FUZZ_CHECK(HMAC(EVP_sha256(), key, keylen, msg, total, mac, &maclen) != NULL &&
                           maclen == 32,
                       "reference HMAC failed");
            free(msg);
            char expect[SECRET_SIGNATURE_MAX];
            memcpy(expect, "v1,", 3);
            EVP_EncodeBlock((unsigned char *)expect + 3, mac, 32);
            FUZZ_CHECK(strcmp(expect, out) == 0,
                       "signature mismatch for secret '%s': got %s, expected %s", fuzz_show(secret),
                       out, expect);
        }
    } else {
        FUZZ_CHECK(rc == -EINVAL || rc == -EIO, "secret_sign returned %d", rc);
        FUZZ_CHECK(err.msg[0] != '\0', "failure without a message");
        if (prefixed && strlen(secret + plen) >= 8)
            FUZZ_CHECK(strstr(err.msg, secret + plen) == NULL, "error message leaks the secret");
        FUZZ_CHECK(!(keylen >= 24 && keylen <= 64 && id_fits), /* secret.h: 24-64 byte keys */
                   "valid secret '%s' (key %d bytes) refused: %s", fuzz_show(secret), keylen,
                   err.msg);
    }
done:
    free(body);
    free(secret_owned);
    free(id_owned);
    return 0;
}
