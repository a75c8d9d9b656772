/* client_cert.c - checks, descriptions and in-memory copies of customers' client certificates
 * for mutual TLS (client_cert.h). OpenSSL parses; nothing here touches the network. */
#include "client_cert.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct client_cert {
    unsigned refs;
    client_cert_info info;
    size_t cert_len, key_len;
    char *key;   /* points into text, after the certificate's NUL */
    char text[]; /* the certificate text, NUL, the key text, NUL */
};

/* The reason of OpenSSL's latest error (library text, never input bytes), and an empty queue. */
static const char *ssl_reason(char *buf, size_t n)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, n, "%s", r ? r : "no details");
    ERR_clear_error();
    return buf;
}

static void name_text(const X509_NAME *name, char *out, size_t n)
{
    out[0] = '\0';
    BIO *b = BIO_new(BIO_s_mem());
    if (!b)
        return;
    /* RFC 2253 escapes control characters, so the text is safe to print and log. */
    if (X509_NAME_print_ex(b, name, 0, XN_FLAG_RFC2253) >= 0) {
        char *data = NULL;
        long len = BIO_get_mem_data(b, &data);
        if (len > 0 && data)
            snprintf(out, n, "%.*s", (int)len, data);
    }
    BIO_free(b);
}

/* An ASN.1 time as epoch seconds and "YYYY-MM-DD HH:MM:SSZ". */
static bool time_of(const ASN1_TIME *t, int64_t *secs, char *out, size_t n)
{
    struct tm tm;
    if (!t || ASN1_TIME_to_tm(t, &tm) != 1)
        return false;
    *secs = (int64_t)timegm(&tm);
    strftime(out, n, "%Y-%m-%d %H:%M:%SZ", &tm);
    return true;
}

/* Parses every certificate of a PEM text: the leaf into *leaf (the caller frees it), the count
 * into info->chain. */
static int parse_chain(const char *pem, size_t len, X509 **leaf, client_cert_info *info,
                       pgp_error *err)
{
    *leaf = NULL;
    char why[256];
    if (len > CLIENT_CERT_MAX_BYTES)
        return pgp_error_set(err, -EINVAL, "longer than %d bytes", CLIENT_CERT_MAX_BYTES);
    if (!pem || len == 0 || memchr(pem, '\0', len))
        return pgp_error_set(err, -EINVAL, "%s",
                             !pem || len == 0 ? "empty" : "contains a NUL byte (not a PEM text)");
    if (!memmem(pem, len, "-----BEGIN CERTIFICATE-----", 27))
        return pgp_error_set(err, -EINVAL,
                             "not a PEM certificate (no -----BEGIN CERTIFICATE----- line)");
    BIO *b = BIO_new_mem_buf(pem, (int)len);
    if (!b)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    int n = 0;
    int rc = 0;
    for (;;) {
        X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
        if (!x) {
            unsigned long e = ERR_peek_last_error();
            /* The end of the text: no further PEM block. */
            if (n > 0 && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) {
                ERR_clear_error();
                break;
            }
            rc = pgp_error_set(err, -EINVAL, "certificate #%d does not parse as PEM (%s)", n + 1,
                               ssl_reason(why, sizeof why));
            break;
        }
        n++;
        if (n == 1)
            *leaf = x;
        else
            X509_free(x);
    }
    BIO_free(b);
    if (rc != 0) {
        X509_free(*leaf);
        *leaf = NULL;
        return rc;
    }
    info->chain = n;
    name_text(X509_get_subject_name(*leaf), info->subject, sizeof info->subject);
    name_text(X509_get_issuer_name(*leaf), info->issuer, sizeof info->issuer);
    if (!time_of(X509_get0_notBefore(*leaf), &info->not_before_s, info->not_before,
                 sizeof info->not_before) ||
        !time_of(X509_get0_notAfter(*leaf), &info->not_after_s, info->not_after,
                 sizeof info->not_after)) {
        X509_free(*leaf);
        *leaf = NULL;
        ERR_clear_error();
        return pgp_error_set(err, -EINVAL, "the certificate's validity dates do not parse");
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    info->sha256[0] = '\0';
    if (X509_digest(*leaf, EVP_sha256(), md, &mdlen) == 1) {
        char *p = info->sha256;
        for (unsigned i = 0; i < mdlen && (size_t)(p - info->sha256) + 4 <= sizeof info->sha256;
             i++)
            p += snprintf(p, 4, i ? ":%02X" : "%02X", md[i]);
    }
    ERR_clear_error();
    return 0;
}

int client_cert_describe(const char *cert_pem, size_t cert_len, client_cert_info *info,
                         pgp_error *err)
{
    memset(info, 0, sizeof *info);
    X509 *leaf = NULL;
    int rc = parse_chain(cert_pem, cert_len, &leaf, info, err);
    X509_free(leaf);
    return rc;
}

/* The passphrase callback: an encrypted key asks for one. Refusing tells the caller so. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    *(bool *)u = true;
    return -1;
}

/* Checks the key text and that it matches leaf. */
static int check_key(const char *pem, size_t len, X509 *leaf, pgp_error *err)
{
    char why[256];
    if (len > CLIENT_CERT_MAX_BYTES)
        return pgp_error_set(err, -EINVAL, "longer than %d bytes", CLIENT_CERT_MAX_BYTES);
    if (!pem || len == 0 || memchr(pem, '\0', len))
        return pgp_error_set(err, -EINVAL, "%s",
                             !pem || len == 0 ? "empty" : "contains a NUL byte (not a PEM text)");
    if (memmem(pem, len, "-----BEGIN ENCRYPTED PRIVATE KEY-----", 37) ||
        memmem(pem, len, "Proc-Type: 4,ENCRYPTED", 22))
        return pgp_error_set(err, -EINVAL,
                             "passphrase-protected keys are not supported (decrypt it first, "
                             "e.g. openssl pkey -in KEY -out KEY.plain)");
    if (!memmem(pem, len, "PRIVATE KEY-----", 16))
        return pgp_error_set(err, -EINVAL,
                             "not a PEM private key (no -----BEGIN ... PRIVATE KEY----- line)");
    BIO *b = BIO_new_mem_buf(pem, (int)len);
    if (!b)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    bool asked = false;
    EVP_PKEY *pkey = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, &asked);
    BIO_free(b);
    if (!pkey) {
        if (asked) {
            ERR_clear_error();
            return pgp_error_set(err, -EINVAL, "passphrase-protected keys are not supported");
        }
        return pgp_error_set(err, -EINVAL, "the private key does not parse as PEM (%s)",
                             ssl_reason(why, sizeof why));
    }
    int ok = leaf ? X509_check_private_key(leaf, pkey) : 1;
    EVP_PKEY_free(pkey);
    ERR_clear_error();
    if (ok != 1)
        return pgp_error_set(err, -EINVAL, "the private key does not match the certificate");
    return 0;
}

int client_cert_check(const char *cert_pem, size_t cert_len, const char *key_pem, size_t key_len,
                      int64_t now_s, client_cert_info *info, client_cert_field *field,
                      pgp_error *err)
{
    memset(info, 0, sizeof *info);
    *field = CLIENT_CERT_FIELD_CERT;
    X509 *leaf = NULL;
    int rc = parse_chain(cert_pem, cert_len, &leaf, info, err);
    if (rc != 0)
        return rc;
    char now_text[24] = "?";
    time_t now_t = (time_t)now_s;
    struct tm now_tm;
    if (gmtime_r(&now_t, &now_tm))
        strftime(now_text, sizeof now_text, "%Y-%m-%d %H:%M:%SZ", &now_tm);
    if (now_s < info->not_before_s)
        rc = pgp_error_set(err, -EINVAL, "the certificate is not valid yet (notBefore %s, now %s)",
                           info->not_before, now_text);
    else if (now_s > info->not_after_s)
        rc = pgp_error_set(err, -EINVAL, "the certificate has expired (notAfter %s, now %s)",
                           info->not_after, now_text);
    if (rc == 0) {
        *field = CLIENT_CERT_FIELD_KEY;
        rc = check_key(key_pem, key_len, leaf, err);
    }
    X509_free(leaf);
    return rc;
}

int client_cert_new(const char *cert_pem, const char *key_pem, client_cert **out, pgp_error *err)
{
    *out = NULL;
    if (!cert_pem)
        cert_pem = "";
    if (!key_pem)
        key_pem = "";
    size_t cl = strlen(cert_pem), kl = strlen(key_pem);
    client_cert_info info;
    memset(&info, 0, sizeof info);
    X509 *leaf = NULL;
    int rc = parse_chain(cert_pem, cl, &leaf, &info, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "client certificate");
    rc = check_key(key_pem, kl, leaf, err);
    X509_free(leaf);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "client key");
    client_cert *c = malloc(sizeof *c + cl + 1 + kl + 1);
    if (!c)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    c->refs = 1;
    c->info = info;
    c->cert_len = cl;
    c->key_len = kl;
    memcpy(c->text, cert_pem, cl + 1);
    c->key = c->text + cl + 1;
    memcpy(c->key, key_pem, kl + 1);
    *out = c;
    return 0;
}

void client_cert_retain(client_cert *c)
{
    if (c)
        c->refs++;
}

void client_cert_release(client_cert *c)
{
    if (!c || --c->refs > 0)
        return;
    OPENSSL_cleanse(c->key, c->key_len);
    free(c);
}

void client_cert_pem(const client_cert *c, const char **cert, size_t *cert_len, const char **key,
                     size_t *key_len)
{
    *cert = c->text;
    *cert_len = c->cert_len;
    *key = c->key;
    *key_len = c->key_len;
}

const client_cert_info *client_cert_get_info(const client_cert *c)
{
    return &c->info;
}

bool client_cert_usable(const client_cert *c, int64_t now_s, char *why, size_t why_len)
{
    if (now_s < c->info.not_before_s) {
        snprintf(why, why_len, "client certificate not valid yet (notBefore %s)",
                 c->info.not_before);
        return false;
    }
    if (now_s > c->info.not_after_s) {
        snprintf(why, why_len, "client certificate expired (notAfter %s)", c->info.not_after);
        return false;
    }
    return true;
}
