/* testca.c - the test PKI (testca.h). */
#include "testca.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DAY (24L * 3600L)

typedef struct issued {
    X509 *cert;
    EVP_PKEY *key;
} issued;

static void issued_free(issued *i)
{
    X509_free(i->cert);
    EVP_PKEY_free(i->key);
    i->cert = NULL;
    i->key = NULL;
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ext)
        return -1;
    int ok = X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    return ok == 1 ? 0 : -1;
}

/* A certificate for a new key (EC P-256, or RSA 2048 when rsa), valid from now+from_s to
 * now+until_s, signed by `by` (itself when NULL). kind: 'c' CA, 's' server, 'l' client. */
static int make_cert(issued *out, const char *cn, const issued *by, char kind, long from_s,
                     long until_s, int rsa)
{
    out->cert = NULL;
    out->key = rsa ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
    X509 *x = X509_new();
    if (!out->key || !x)
        goto fail;
    unsigned char serial[16];
    if (RAND_bytes(serial, sizeof serial) != 1)
        goto fail;
    serial[0] &= 0x7f; /* positive */
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x))) {
        BN_free(bn);
        goto fail;
    }
    BN_free(bn);
    X509_NAME *name = X509_get_subject_name(x);
    if (X509_set_version(x, 2) != 1 ||
        X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"pgpace tests",
                                   -1, -1, 0) != 1 ||
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1,
                                   0) != 1)
        goto fail;
    X509 *issuer = by ? by->cert : x;
    if (X509_set_issuer_name(x, X509_get_subject_name(issuer)) != 1 ||
        !X509_time_adj_ex(X509_getm_notBefore(x), 0, from_s, NULL) ||
        !X509_time_adj_ex(X509_getm_notAfter(x), 0, until_s, NULL) ||
        X509_set_pubkey(x, out->key) != 1)
        goto fail;
    if (add_ext(x, issuer, NID_subject_key_identifier, "hash") != 0)
        goto fail;
    if (by && add_ext(x, issuer, NID_authority_key_identifier, "keyid:always") != 0)
        goto fail;
    if (kind == 'c') {
        if (add_ext(x, issuer, NID_basic_constraints, "critical,CA:TRUE") != 0 ||
            add_ext(x, issuer, NID_key_usage, "critical,keyCertSign,cRLSign") != 0)
            goto fail;
    } else {
        if (add_ext(x, issuer, NID_basic_constraints, "critical,CA:FALSE") != 0 ||
            add_ext(x, issuer, NID_key_usage, "critical,digitalSignature,keyEncipherment") != 0 ||
            add_ext(x, issuer, NID_ext_key_usage, kind == 's' ? "serverAuth" : "clientAuth") != 0)
            goto fail;
        if (kind == 's' &&
            add_ext(x, issuer, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost") != 0)
            goto fail;
    }
    if (X509_sign(x, by ? by->key : out->key, EVP_sha256()) <= 0)
        goto fail;
    out->cert = x;
    return 0;
fail:
    X509_free(x);
    EVP_PKEY_free(out->key);
    out->key = NULL;
    fprintf(stderr, "testca: cannot make the certificate for %s\n", cn);
    ERR_print_errors_fp(stderr);
    return -1;
}

static FILE *open_out(char *path, const char *dir, const char *name)
{
    int n = snprintf(path, TESTCA_PATH, "%s/%s", dir, name);
    FILE *f = n > 0 && n < TESTCA_PATH ? fopen(path, "w") : NULL;
    if (!f)
        fprintf(stderr, "testca: cannot write %s\n", path);
    return f;
}

/* Writes the certificate (then `extra`, an intermediate, when given) and the key. */
static int write_pair(const testca *ca, const issued *i, const X509 *extra, char *cert_path,
                      char *key_path, const char *stem)
{
    char name[64];
    snprintf(name, sizeof name, "%s.crt", stem);
    FILE *f = open_out(cert_path, ca->dir, name);
    if (!f)
        return -1;
    int ok = PEM_write_X509(f, i->cert) == 1 && (!extra || PEM_write_X509(f, extra) == 1);
    ok = fclose(f) == 0 && ok;
    if (!ok || !key_path)
        return ok ? 0 : -1;
    snprintf(name, sizeof name, "%s.key", stem);
    f = open_out(key_path, ca->dir, name);
    if (!f)
        return -1;
    ok = PEM_write_PrivateKey(f, i->key, NULL, NULL, 0, NULL, NULL) == 1;
    ok = fclose(f) == 0 && ok;
    return ok ? 0 : -1;
}

int testca_make(testca *ca)
{
    memset(ca, 0, sizeof *ca);
    snprintf(ca->dir, sizeof ca->dir, "%s/pgpace-testca-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(ca->dir)) {
        fprintf(stderr, "testca: mkdtemp failed\n");
        return -1;
    }
    issued root = {0}, other = {0}, inter = {0}, server = {0}, a = {0}, b = {0}, chain = {0},
           expired = {0}, future = {0}, foreign = {0}, stray = {0}, rsa = {0};
    int rc = -1;
    if (make_cert(&root, "pgpace test CA", NULL, 'c', -DAY, 365 * DAY, 0) ||
        make_cert(&other, "other test CA", NULL, 'c', -DAY, 365 * DAY, 0) ||
        make_cert(&inter, "pgpace test intermediate", &root, 'c', -DAY, 365 * DAY, 0) ||
        make_cert(&server, "localhost", &root, 's', -3600, 30 * DAY, 0) ||
        make_cert(&a, "client-a", &root, 'l', -3600, 30 * DAY, 0) ||
        make_cert(&b, "client-b", &root, 'l', -3600, 30 * DAY, 0) ||
        make_cert(&chain, "client-chain", &inter, 'l', -3600, 30 * DAY, 0) ||
        make_cert(&expired, "client-expired", &root, 'l', -10 * DAY, -DAY, 0) ||
        make_cert(&future, "client-future", &root, 'l', DAY, 10 * DAY, 0) ||
        make_cert(&foreign, "client-foreign", &other, 'l', -3600, 30 * DAY, 0) ||
        make_cert(&stray, "stray", &root, 'l', -3600, 30 * DAY, 0) ||
        make_cert(&rsa, "client-rsa", &root, 'l', -3600, 30 * DAY, 1))
        goto done;
    if (write_pair(ca, &root, NULL, ca->ca_cert, NULL, "ca") ||
        write_pair(ca, &server, NULL, ca->server_cert, ca->server_key, "server") ||
        write_pair(ca, &a, NULL, ca->client_a_cert, ca->client_a_key, "client-a") ||
        write_pair(ca, &b, NULL, ca->client_b_cert, ca->client_b_key, "client-b") ||
        write_pair(ca, &chain, inter.cert, ca->chain_cert, ca->chain_key, "client-chain") ||
        write_pair(ca, &expired, NULL, ca->expired_cert, ca->expired_key, "client-expired") ||
        write_pair(ca, &future, NULL, ca->future_cert, ca->future_key, "client-future") ||
        write_pair(ca, &foreign, NULL, ca->foreign_cert, ca->foreign_key, "client-foreign"))
        goto done;
    char unused[TESTCA_PATH];
    if (write_pair(ca, &stray, NULL, unused, ca->stray_key, "stray") ||
        write_pair(ca, &rsa, NULL, ca->rsa_cert, NULL, "client-rsa"))
        goto done;
    FILE *f = open_out(ca->rsa_key, ca->dir, "client-rsa.key");
    if (!f)
        goto done;
    BIO *bio = BIO_new_fp(f, BIO_NOCLOSE);
    int ok =
        bio && PEM_write_bio_PrivateKey_traditional(bio, rsa.key, NULL, NULL, 0, NULL, NULL) == 1;
    BIO_free(bio);
    ok = fclose(f) == 0 && ok;
    f = ok ? open_out(ca->encrypted_key, ca->dir, "client-a-encrypted.key") : NULL;
    if (!f)
        goto done;
    static const char pass[] = "pass phrase";
    ok = PEM_write_PrivateKey(f, a.key, EVP_aes_256_cbc(), (const unsigned char *)pass,
                              (int)strlen(pass), NULL, NULL) == 1;
    ok = fclose(f) == 0 && ok;
    if (ok)
        rc = 0;
done:
    if (rc != 0) {
        fprintf(stderr, "testca: failed in %s\n", ca->dir);
        ERR_print_errors_fp(stderr);
    }
    issued *all[] = {&root,  &other,   &inter,  &server,  &a,     &b,
                     &chain, &expired, &future, &foreign, &stray, &rsa};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        issued_free(all[i]);
    return rc;
}

void testca_remove(const testca *ca)
{
    static const char *const names[] = {"ca.crt",
                                        "server.crt",
                                        "server.key",
                                        "client-a.crt",
                                        "client-a.key",
                                        "client-b.crt",
                                        "client-b.key",
                                        "client-chain.crt",
                                        "client-chain.key",
                                        "client-expired.crt",
                                        "client-expired.key",
                                        "client-future.crt",
                                        "client-future.key",
                                        "client-foreign.crt",
                                        "client-foreign.key",
                                        "stray.crt",
                                        "stray.key",
                                        "client-rsa.crt",
                                        "client-rsa.key",
                                        "client-a-encrypted.key"};
    char path[TESTCA_PATH + 32];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", ca->dir, names[i]);
        unlink(path);
    }
    rmdir(ca->dir);
}
