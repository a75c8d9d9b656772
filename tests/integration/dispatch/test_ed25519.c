/* test_ed25519.c - Standard Webhooks asymmetric signatures (whsk_ secrets, v1a entries): every
 * signature that reaches the receiver is verified by implementations other than pgpace's
 * secret.c: the `openssl` command line for v1a (`openssl pkeyutl -verify -rawin` under a PEM
 * public key built from the raw whpk_ bytes, itself also derived by `openssl pkey` from the
 * whsk_ seed) and tl_verify_signature (EVP_Q_mac) for v1. Covers Ed25519 alone, the rotation
 * from HMAC to Ed25519 and back (both entries verified, each on its own), and what SQL and the
 * CLI refuse (wrong length, bad base64, a whpk_ public key given as the secret). */
#include "fixture.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

extern char **environ;

/* The reference Go library's asymmetric test seed ("TESTSIGNINGKEYDONOTUSETHISFORANY"). */
#define SEED_B64  "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
#define SECRET_OK "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define PUB_B64   "ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="

static int setup(void **state)
{
    *state = fx_start();
    return 0;
}

static int teardown(void **state)
{
    fx_finish(*state);
    return 0;
}

/* ---- the independent verifier: the openssl command line ---- */

static char tmpdir[64];

static void write_file(const char *name, const void *data, size_t len)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, len, fp) != len || fclose(fp) != 0)
        fail_msg("cannot write %s", path);
}

/* Runs `openssl args...` in tmpdir with its output discarded; returns its exit status. */
static int run_openssl(const char *const *args)
{
    /* posix_spawnp takes char *const[]: copies, so nothing const is cast away. */
    char *argv[16] = {strdup("openssl")};
    size_t n = 1;
    for (; *args && n < 15; args++)
        argv[n++] = strdup(*args);
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, "openssl", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    for (size_t i = 0; i < n; i++)
        free(argv[i]);
    if (rc != 0)
        fail_msg("cannot run openssl (tests/tools/install-deps.sh installs it): %s", strerror(rc));
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        fail_msg("waitpid(openssl) failed");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static size_t b64_decode(const char *b64, unsigned char *out, size_t max)
{
    size_t len = strlen(b64);
    if (len == 0 || len % 4 != 0 || len / 4 * 3 > max)
        fail_msg("not base64: %s", b64);
    int n = EVP_DecodeBlock(out, (const unsigned char *)b64, (int)len);
    if (n < 0)
        fail_msg("not base64: %s", b64);
    return (size_t)n - (b64[len - 1] == '=') - (b64[len - 2] == '=');
}

/* The whpk_ public key of a whsk_ secret, derived by `openssl pkey` from a PKCS#8 DER key
 * (RFC 8410: 302e020100300506032b657004220420 + the 32-byte seed), into out (static). */
static const char *openssl_public_key(const char *whsk)
{
    static char out[64];
    static const unsigned char pkcs8[] = {0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06,
                                          0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20};
    assert_int_equal(strncmp(whsk, "whsk_", 5), 0);
    unsigned char der[sizeof pkcs8 + 33];
    memcpy(der, pkcs8, sizeof pkcs8);
    assert_int_equal(b64_decode(whsk + 5, der + sizeof pkcs8, 33), 32);
    write_file("priv.der", der, sizeof pkcs8 + 32);
    char pubpath[128], privpath[128];
    snprintf(privpath, sizeof privpath, "%s/priv.der", tmpdir);
    snprintf(pubpath, sizeof pubpath, "%s/derived.der", tmpdir);
    assert_int_equal(run_openssl(TL_ARGV("pkey", "-inform", "DER", "-in", privpath, "-pubout",
                                         "-outform", "DER", "-out", pubpath)),
                     0);
    unsigned char spki[64];
    FILE *fp = fopen(pubpath, "rb");
    assert_non_null(fp);
    size_t n = fread(spki, 1, sizeof spki, fp);
    fclose(fp);
    assert_int_equal(n, 44); /* 12-byte SubjectPublicKeyInfo prefix + 32 bytes */
    memcpy(out, "whpk_", 5);
    EVP_EncodeBlock((unsigned char *)out + 5, spki + 12, 32);
    return out;
}

/* Whether `openssl pkeyutl -verify -rawin` accepts the v1a entry `sig` over `signed_text`
 * under the whpk_ public key (PEM built from the raw bytes with the RFC 8410 prefix
 * 302a300506032b6570032100). */
static int openssl_verifies(const char *whpk, const char *signed_text, const char *sig)
{
    static const unsigned char spki[] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
                                         0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
    if (strncmp(whpk, "whpk_", 5) != 0 || strncmp(sig, "v1a,", 4) != 0)
        return 0;
    unsigned char der[sizeof spki + 33];
    memcpy(der, spki, sizeof spki);
    assert_int_equal(b64_decode(whpk + 5, der + sizeof spki, 33), 32);
    char pem[200] = "-----BEGIN PUBLIC KEY-----\n";
    size_t len = strlen(pem);
    len += (size_t)EVP_EncodeBlock((unsigned char *)pem + len, der, sizeof spki + 32);
    len += (size_t)snprintf(pem + len, sizeof pem - len, "\n-----END PUBLIC KEY-----\n");
    write_file("pub.pem", pem, len);
    unsigned char raw[70];
    size_t siglen = b64_decode(sig + 4, raw, sizeof raw);
    if (siglen != 64)
        return 0;
    write_file("sig.bin", raw, siglen);
    write_file("signed.txt", signed_text, strlen(signed_text));
    char pub[128], sigp[128], in[128];
    snprintf(pub, sizeof pub, "%s/pub.pem", tmpdir);
    snprintf(sigp, sizeof sigp, "%s/sig.bin", tmpdir);
    snprintf(in, sizeof in, "%s/signed.txt", tmpdir);
    return run_openssl(TL_ARGV("pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", pub, "-sigfile",
                               sigp, "-in", in)) == 0;
}

static int verifier_setup(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pgpace-ed25519-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    return 0;
}

static int verifier_teardown(void **state)
{
    static const char *const files[] = {"priv.der", "derived.der", "pub.pem", "sig.bin",
                                        "signed.txt"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", tmpdir, files[i]);
        unlink(path);
    }
    rmdir(tmpdir);
    return 0;
}

/* ---- helpers ---- */

/* The customer's i-th secret (1-based), owned. */
static char *secret_of(fx *f, const char *customer, int i)
{
    return tl_query_str(f->db->conn,
                        "SELECT signing_secrets[%d] FROM pgpace.customer WHERE name = '%s'", i,
                        customer);
}

/* The request's webhook-signature entries, split on spaces into entries[] (max n). */
static size_t split_entries(char *header, char **entries, size_t n)
{
    size_t k = 0;
    char *save = NULL;
    for (char *tok = strtok_r(header, " ", &save); tok && k < n; tok = strtok_r(NULL, " ", &save))
        entries[k++] = tok;
    return k;
}

/* Request i's signed content "<webhook-id>.<webhook-timestamp>.<body>" (owned) and its
 * webhook-signature header into sig (static). */
static char *signed_content(fx *f, size_t i, char sig[512])
{
    receiver_request rq;
    assert_int_equal(receiver_get(f->recv, i, &rq), 0);
    size_t len = strlen(rq.webhook_id) + strlen(rq.webhook_timestamp) + rq.body_len + 3;
    char *out = malloc(len);
    assert_non_null(out);
    snprintf(out, len, "%s.%s.%s", rq.webhook_id, rq.webhook_timestamp, rq.body);
    snprintf(sig, 512, "%s", rq.webhook_signature);
    free(rq.body);
    return out;
}

/* Asserts request i carries exactly the given kinds of entries in order ("v1a", "v1"), each
 * verified on its own: v1a by openssl under whpk[k], v1 by tl_verify_signature under
 * whsec[k]; and that a changed body fails both. */
static void assert_signed(fx *f, size_t i, size_t n, const char *const *kinds,
                          const char *const *keys)
{
    char header[512];
    char *content = signed_content(f, i, header);
    char copy[512];
    snprintf(copy, sizeof copy, "%s", header);
    char *entries[8];
    size_t got = split_entries(copy, entries, 8);
    if (got != n)
        fail_msg("request %zu: %zu signature entries, want %zu: %s", i, got, n, header);
    for (size_t k = 0; k < n; k++) {
        size_t klen = strlen(kinds[k]);
        if (strncmp(entries[k], kinds[k], klen) != 0 || entries[k][klen] != ',')
            fail_msg("request %zu entry %zu: want %s, got %s", i, k + 1, kinds[k], entries[k]);
        char tampered[512];
        snprintf(tampered, sizeof tampered, "%s ", content);
        if (strcmp(kinds[k], "v1a") == 0) {
            if (!openssl_verifies(keys[k], content, entries[k]))
                fail_msg("request %zu: openssl does not verify %s under %s over %s", i, entries[k],
                         keys[k], content);
            assert_false(openssl_verifies(keys[k], tampered, entries[k]));
        } else {
            /* tl_verify_signature takes the pieces and the whole header. */
            receiver_request rq;
            assert_int_equal(receiver_get(f->recv, i, &rq), 0);
            assert_true(tl_verify_signature(keys[k], rq.webhook_id, rq.webhook_timestamp, rq.body,
                                            entries[k]));
            assert_false(tl_verify_signature(keys[k], rq.webhook_id, rq.webhook_timestamp,
                                             "{\"n\": 999}", entries[k]));
            free(rq.body);
        }
    }
    free(content);
}

static int count_in_log(fx *f, const char *needle)
{
    char *log = fx_log(f);
    int n = 0;
    for (const char *p = log; (p = strstr(p, needle)); p++)
        n++;
    free(log);
    return n;
}

typedef struct log_wait {
    fx *f;
    const char *needle;
    int n;
} log_wait;

static int log_has_n(void *arg)
{
    log_wait *w = arg;
    return count_in_log(w->f, w->needle) >= w->n;
}

/* `pgpace customer set acme args...`, then waits for the running service to reload it. */
static void set_and_wait(fx *f, const char *const *args, int *reloads)
{
    const char *argv[16] = {"--db", f->db->conninfo, "customer", "set", "acme"};
    size_t n = 5;
    for (; *args && n < 15; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    if (p.status != 0)
        fail_msg("customer set: exit %d: %s", p.status, p.err);
    tl_proc_free(&p);
    log_wait w = {f, "event=customer_updated customer=acme", ++*reloads};
    assert_true(tl_wait_until(log_has_n, &w, 10000));
}

/* ---- tests ---- */

/* Ed25519 only: the generated whsk_ signs every webhook with one v1a entry; the public key
 * `customer get` prints is the one openssl derives from the secret, and verifies them. */
static void ed25519_only(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "600", "--key-type", "ed25519"));
    char *whsk = secret_of(f, "acme", 1);
    assert_int_equal(strncmp(whsk, "whsk_", 5), 0);
    assert_int_equal(strlen(whsk), 49);
    char whpk[64];
    snprintf(whpk, sizeof whpk, "%s", openssl_public_key(whsk));

    /* customer get: the public key always, the secret only with --show-secrets. */
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    char line[128];
    snprintf(line, sizeof line, "public_key         %s\n", whpk);
    tl_assert_contains(p.out, line);
    tl_assert_contains(p.out, "secret_kinds       ed25519\n");
    if (strstr(p.out, whsk + 5))
        fail_msg("customer get shows the whsk_ secret without --show-secrets:\n%s", p.out);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme", "--show-secrets"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, whsk);
    tl_assert_contains(p.out, line);
    tl_proc_free(&p);

    fx_run(f, NULL);
    fx_enqueue(f, "acme", NULL, 3);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 3, 10000), 3);
    for (size_t i = 0; i < 3; i++)
        assert_signed(f, i, 1, TL_ARGV("v1a"), TL_ARGV(whpk));
    fx_stop_service(f, 15000);
    /* The secret never reaches the log. */
    char *log = fx_log(f);
    if (strstr(log, whsk + 5))
        fail_msg("the service log holds the whsk_ secret:\n%s", log);
    free(log);
    free(whsk);
}

/* The reference seed given with --secret: its public key is the known one (the same as
 * unit/test_secret.c's vector), and SQL takes it too. */
static void given_secret_and_sql(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "600", "--secret", "whsk_" SEED_B64));
    assert_string_equal(openssl_public_key("whsk_" SEED_B64), "whpk_" PUB_B64);
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme"), NULL, NULL);
    tl_assert_contains(p.out, "public_key         whpk_" PUB_B64 "\n");
    tl_proc_free(&p);
    /* SQL rotation: the new secret first, the old one kept for the overlap. */
    tl_exec(f->db->conn,
            "SELECT pgpace.customer_set('beta', rate_per_minute => 600, webhook_url => 'http://"
            "127.0.0.1:%d/c/beta', signing_secrets => ARRAY['whsk_" SEED_B64 "'])",
            receiver_port(f->recv));
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('beta', signing_secrets => "
                         "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] || signing_secrets) FROM "
                         "pgpace.customer WHERE name = 'beta'");
    fx_run(f, NULL);
    fx_enqueue(f, "acme", NULL, 1);
    fx_enqueue(f, "beta", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/", 2, 10000), 2);
    for (size_t i = 0; i < 2; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        free(rq.body);
        if (strcmp(rq.path, "/c/acme") == 0)
            assert_signed(f, i, 1, TL_ARGV("v1a"), TL_ARGV("whpk_" PUB_B64));
        else
            assert_signed(f, i, 2, TL_ARGV("v1", "v1a"),
                          TL_ARGV("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whpk_" PUB_B64));
    }
    fx_stop_service(f, 15000);
}

/* HMAC to Ed25519 and back, each step with the overlap a receiver needs: during a rotation
 * the header holds both entries, the newest first, and each verifies on its own. */
static void rotation_hmac_to_ed25519_and_back(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    char *hmac = secret_of(f, "acme", 1);
    assert_int_equal(strncmp(hmac, "whsec_", 6), 0);
    fx_run(f, NULL);
    int reloads = count_in_log(f, "event=customer_updated customer=acme");
    size_t sent = 0;
    fx_enqueue(f, "acme", NULL, 1);
    sent++;
    assert_int_equal(receiver_wait(f->recv, "/c/acme", sent, 10000), sent);
    assert_signed(f, sent - 1, 1, TL_ARGV("v1"), TL_ARGV(hmac));

    /* Rotate to Ed25519: v1a (new) and v1 (old). */
    set_and_wait(f, TL_ARGV("--rotate-secret", "--key-type", "ed25519"), &reloads);
    char *ed = secret_of(f, "acme", 1);
    char *still = secret_of(f, "acme", 2);
    assert_int_equal(strncmp(ed, "whsk_", 5), 0);
    assert_string_equal(still, hmac);
    char whpk[64];
    snprintf(whpk, sizeof whpk, "%s", openssl_public_key(ed));
    fx_enqueue(f, "acme", NULL, 1);
    sent++;
    assert_int_equal(receiver_wait(f->recv, "/c/acme", sent, 10000), sent);
    assert_signed(f, sent - 1, 2, TL_ARGV("v1a", "v1"), TL_ARGV(whpk, hmac));

    /* The receiver switched: the HMAC secret retired, v1a alone. */
    set_and_wait(f, TL_ARGV("--retire-old-secrets"), &reloads);
    fx_enqueue(f, "acme", NULL, 1);
    sent++;
    assert_int_equal(receiver_wait(f->recv, "/c/acme", sent, 10000), sent);
    assert_signed(f, sent - 1, 1, TL_ARGV("v1a"), TL_ARGV(whpk));

    /* And back to HMAC: v1 (new) and v1a (old). */
    set_and_wait(f, TL_ARGV("--rotate-secret", "--key-type", "hmac"), &reloads);
    char *hmac2 = secret_of(f, "acme", 1);
    assert_int_equal(strncmp(hmac2, "whsec_", 6), 0);
    fx_enqueue(f, "acme", NULL, 1);
    sent++;
    assert_int_equal(receiver_wait(f->recv, "/c/acme", sent, 10000), sent);
    assert_signed(f, sent - 1, 2, TL_ARGV("v1", "v1a"), TL_ARGV(hmac2, whpk));
    fx_stop_service(f, 15000);

    /* --rotate-secret alone keeps the kind of the newest secret. */
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--retire-old-secrets"), NULL,
        NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    tl_exec(f->db->conn,
            "UPDATE pgpace.customer SET signing_secrets = ARRAY['%s'] WHERE name = "
            "'acme'",
            ed);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--rotate-secret"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "public key whpk_");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.customer WHERE name = 'acme' AND "
                                  "signing_secrets[1] ~ '^whsk_' AND signing_secrets[2] = '%s'",
                                  ed),
                     1);
    free(hmac);
    free(hmac2);
    free(ed);
    free(still);
}

/* Bad whsk_ secrets (wrong length, not base64, non-canonical), a whpk_ public key given as
 * the secret: refused by SQL (naming the entry) and by the CLI (naming the flag, exit 2),
 * never quoting the value, and nothing changed. */
static void bad_keys_refused(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    char *before = secret_of(f, "acme", 1);
    PGconn *c = f->db->conn;
    static const struct {
        const char *value, *sql_says, *cli_says;
    } cases[] = {
        /* 30 bytes, 33 bytes, the seed+public key 64-byte form, no padding. */
        {"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JB", "32-byte Ed25519 seed", "32-byte"},
        {"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlkK", "32-byte Ed25519 seed", "32-byte"},
        {"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTllmU3h6Dt1JKqLSahf2FBSTeius6i4rdBVBKUlrbj"
         "xz+A==",
         "32-byte Ed25519 seed", "32-byte"},
        {"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk", "32-byte Ed25519 seed", "32-byte"},
        /* Not base64 (a '!', base64url '_' and '-'), unused bits set. */
        {"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTl!=", "32-byte Ed25519 seed", "32-byte"},
        {"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNG_1JB-lk=", "32-byte Ed25519 seed", "32-byte"},
        {"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlm=", "32-byte Ed25519 seed", "32-byte"},
        /* The public key where the secret belongs. */
        {"whpk_" PUB_B64, "a whpk_ public key cannot sign", "a whpk_ public key cannot sign"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *v = cases[i].value;
        const char *b64 = v + 5;
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT pgpace.customer_set('acme', signing_secrets => "
                 "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', '%s'])",
                 v);
        tl_expect_sql_error(c, sql, "22023", "signing_secrets[2]", b64);
        tl_expect_sql_error(c, sql, "22023", cases[i].sql_says, b64);
        /* A direct writer meets the table's check. */
        snprintf(sql, sizeof sql,
                 "UPDATE pgpace.customer SET signing_secrets = ARRAY['%s'] WHERE name = 'acme'", v);
        tl_expect_sql_error(c, sql, "23514", "customer_secrets_valid", NULL);

        tl_proc p = tl_pgpace(
            TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--secret", v), NULL, NULL);
        if (p.status != 2 || !strstr(p.err, "--secret: ") || !strstr(p.err, cases[i].cli_says) ||
            strstr(p.err, b64))
            fail_msg("--secret %s: exit %d, stderr: %s", v, p.status, p.err);
        tl_proc_free(&p);
    }
    /* An empty list, a NULL entry, five secrets, another prefix. */
    tl_expect_sql_error(c, "SELECT pgpace.customer_set('acme', signing_secrets => '{}')", "22023",
                        "signing_secrets: expected 1 to 4", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.customer_set('acme', signing_secrets => ARRAY[NULL])",
                        "22023", "signing_secrets[1]", NULL);
    tl_expect_sql_error(c,
                        "SELECT pgpace.customer_set('acme', signing_secrets => "
                        "array_fill('whsk_" SEED_B64 "'::text, ARRAY[5]))",
                        "22023", "signing_secrets: expected 1 to 4", NULL);
    tl_expect_sql_error(
        c, "SELECT pgpace.customer_set('acme', signing_secrets => ARRAY['sk_" SEED_B64 "'])",
        "22023", "expected whsec_ (HMAC-SHA256) or whsk_ (Ed25519)", SEED_B64);

    /* whsec_ as the dispatcher decodes it: whole base64 quanta, 24 to 64 bytes (the table's
     * CHECK is looser, for rows written before; held_on_a_secret_it_cannot_use covers those). */
    static const char *const whsec_bad[] = {
        "'whsec_' || repeat('A', 33)",         /* not whole quanta */
        "'whsec_' || repeat('A', 88)",         /* 66 bytes */
        "'whsec_' || repeat('A', 87) || '='",  /* 65 bytes */
        "'whsec_' || repeat('A', 28) || '=='", /* 22 bytes */
    };
    for (size_t i = 0; i < sizeof whsec_bad / sizeof whsec_bad[0]; i++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT pgpace.customer_set('acme', signing_secrets => ARRAY[%s])", whsec_bad[i]);
        tl_expect_sql_error(c, sql, "22023", "whsec_ must be followed by base64 of 24 to 64 bytes",
                            NULL);
    }
    tl_exec(c, "SELECT pgpace.customer_set('bounds', rate_per_minute => 60, webhook_url => "
               "'https://example.com/b', "
               "signing_secrets => ARRAY['whsec_' || repeat('A', 32), 'whsec_' || repeat('A', "
               "86) || '=='])");

    /* --key-type: unknown, with a given secret, on an existing customer without rotation. */
    const struct {
        const char *const *argv;
        const char *says;
    } flags[] = {
        {TL_ARGV("--rotate-secret", "--key-type", "rsa"), "--key-type: expected hmac or ed25519"},
        {TL_ARGV("--key-type", "ed25519", "--secret", "whsk_" SEED_B64),
         "--key-type: applies to generated secrets"},
        {TL_ARGV("--key-type", "ed25519", "--retire-old-secrets"),
         "--key-type: applies to generated secrets"},
        {TL_ARGV("--key-type", "ed25519"), "--key-type: customer 'acme' exists"},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const char *argv[16] = {"--db", f->db->conninfo, "customer", "set", "acme"};
        size_t n = 5;
        for (const char *const *a = flags[i].argv; *a; a++)
            argv[n++] = *a;
        argv[n] = NULL;
        tl_proc p = tl_pgpace(argv, NULL, NULL);
        if (p.status != 2 || !strstr(p.err, flags[i].says) || strstr(p.err, SEED_B64))
            fail_msg("case %zu: exit %d, stderr: %s", i, p.status, p.err);
        tl_proc_free(&p);
    }
    char *after = secret_of(f, "acme", 1);
    assert_string_equal(before, after);
    assert_int_equal(tl_query_int(c, "SELECT cardinality(signing_secrets) FROM pgpace.customer "
                                     "WHERE name = 'acme'"),
                     1);
    free(before);
    free(after);
}

/* A secret the dispatcher cannot sign with, written past pgpace.customer_set (the CHECK lets
 * it through): the customer is held, its items wait (no failed attempt, no dead letter) and go
 * out signed once a good secret is set. */
static void held_on_a_secret_it_cannot_use(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    fx_customer(f, "beta", TL_ARGV("--rate", "600"));
    fx_run(f, NULL);
    PGconn *c = f->db->conn;
    tl_exec(c, "UPDATE pgpace.customer SET signing_secrets = ARRAY['whsec_' || repeat('A', 33)] "
               "WHERE name = 'acme'");
    assert_true(fx_wait_log(f, "event=customer_secret_invalid customer=acme", 10000));
    fx_enqueue(f, "acme", NULL, 2);
    fx_enqueue(f, "beta", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/beta", 1, 10000), 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 0), 0);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                     "pgpace.customer k ON k.id = a.customer_id WHERE k.name = "
                                     "'acme' AND a.outcome <> 'released'"),
                     0);
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--secret", SECRET_OK), NULL,
        NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 2, 10000), 2);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ed25519_only, setup, teardown),
        cmocka_unit_test_setup_teardown(given_secret_and_sql, setup, teardown),
        cmocka_unit_test_setup_teardown(rotation_hmac_to_ed25519_and_back, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_keys_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(held_on_a_secret_it_cannot_use, setup, teardown),
    };
    return TL_RUN(tests, verifier_setup, verifier_teardown);
}
