/* test_mtls.c - mutual TLS per customer against a real HTTPS receiver on loopback that requires
 * client certificates of a test CA made at test time (tests/lib/testca.h, tls_server.h):
 * what `customer set --client-cert/--client-key` and pgpace.customer_set_client_cert refuse
 * (and that their messages hold no key), that a customer's certificate reaches the receiver
 * (its CN is what the receiver saw, a chain is sent whole), that a customer without one is
 * refused by the receiver as a TLS failure and loses no item, that customers with different
 * certificates (or none) to the same host:port never share a connection, and that a stored
 * certificate the dispatcher cannot use fails its deliveries with error_class client_cert. */
#include "fixture.h"
#include "client_cert.h"
#include "http_sender.h"
#include "netcheck.h"
#include "testca.h"
#include "tls_server.h"

#include <libpq-fe.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct mtls {
    fx *f;
    testca ca;
    tls_server *srv;
    char ini[512]; /* fx_run lines trusting the test CA */
} mtls;

static int setup(void **state)
{
    mtls *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->f = fx_start();
    assert_int_equal(testca_make(&m->ca), 0);
    m->srv = tls_server_start(m->ca.ca_cert, m->ca.server_cert, m->ca.server_key);
    assert_non_null(m->srv);
    snprintf(m->ini, sizeof m->ini, "delivery.ca_file = %s\n", m->ca.ca_cert);
    *state = m;
    return 0;
}

static int teardown(void **state)
{
    mtls *m = *state;
    fx_finish(m->f);
    tls_server_stop(m->srv);
    testca_remove(&m->ca);
    free(m);
    return 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 131072);
    assert_non_null(buf);
    size_t n = fread(buf, 1, 131071, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The second line of a PEM file (base64 of the key itself): what must never show up in a
 * message or a log. Static buffer. */
static const char *secret_line(const char *key_path)
{
    static char line[128];
    char *text = slurp(key_path);
    const char *p = strchr(text, '\n');
    assert_non_null(p);
    size_t len = strcspn(p + 1, "\n");
    assert_true(len > 20 && len < sizeof line);
    memcpy(line, p + 1, len);
    line[len] = '\0';
    free(text);
    return line;
}

/* "AB:CD:..." of the SHA-256 of the first certificate's DER in a PEM file. */
static void der_sha256(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    unsigned char *der = NULL;
    int len = i2d_X509(x, &der);
    assert_true(len > 0);
    unsigned char md[32];
    assert_int_equal(EVP_Digest(der, (size_t)len, md, NULL, EVP_sha256(), NULL), 1);
    OPENSSL_free(der);
    X509_free(x);
    size_t o = 0;
    for (int i = 0; i < 32 && o + 4 <= n; i++)
        o += (size_t)snprintf(out + o, n - o, i ? ":%02X" : "%02X", md[i]);
}

/* `customer set NAME --url URL(srv)/c/NAME [--client-cert C --client-key K] args...`. */
static tl_proc set_customer(mtls *m, const char *name, const char *cert, const char *key,
                            const char *const *args)
{
    char url[256], path[64];
    snprintf(path, sizeof path, "/c/%s", name);
    tls_server_url(m->srv, path, url, sizeof url);
    const char *argv[32] = {"--db", m->f->db->conninfo, "customer", "set", name, "--url", url};
    size_t n = 7;
    if (cert) {
        argv[n++] = "--client-cert";
        argv[n++] = cert;
    }
    if (key) {
        argv[n++] = "--client-key";
        argv[n++] = key;
    }
    for (; args && *args && n < 31; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    return tl_pgpace(argv, NULL, NULL);
}

static void customer_ok(mtls *m, const char *name, const char *cert, const char *key,
                        const char *const *args)
{
    tl_proc p = set_customer(m, name, cert, key, args);
    if (p.status != 0)
        fail_msg("customer set %s: exit %d: %s", name, p.status, p.err);
    tl_proc_free(&p);
}

static void cli_refuses_bad_certificates(void **state)
{
    mtls *m = *state;
    testca *ca = &m->ca;
    customer_ok(m, "acme", NULL, NULL, TL_ARGV("--rate", "60"));
    char *garbage = tl_temp_file("hello, not a certificate\n");
    char *corrupt = tl_temp_file("-----BEGIN CERTIFICATE-----\nAAAAnotbase64!!\n"
                                 "-----END CERTIFICATE-----\n");
    /* 70000 bytes that begin like a certificate. */
    char *big_text = malloc(70001);
    assert_non_null(big_text);
    memset(big_text, 'A', 70000);
    memcpy(big_text, "-----BEGIN CERTIFICATE-----\n", 28);
    big_text[70000] = '\0';
    char *big = tl_temp_file(big_text);
    free(big_text);
    /* A valid certificate after a line with a control character (OpenSSL skips the line; SQL
     * would refuse the text); the certificate and its key in one file. */
    char *cert_a = slurp(ca->client_a_cert), *key_a_text = slurp(ca->client_a_key);
    size_t cl = strlen(cert_a), kl = strlen(key_a_text);
    char *ctl_text = malloc(cl + 8), *both_text = malloc(cl + kl + 1);
    assert_true(ctl_text && both_text);
    snprintf(ctl_text, cl + 8, "x\x01y\n%s", cert_a);
    snprintf(both_text, cl + kl + 1, "%s%s", key_a_text, cert_a);
    char *ctl = tl_temp_file(ctl_text), *both = tl_temp_file(both_text);
    free(cert_a);
    free(key_a_text);
    free(ctl_text);
    free(both_text);
    char missing[200];
    snprintf(missing, sizeof missing, "%s/no-such-file.pem", ca->dir);
    const char *key_a = secret_line(ca->client_a_key);
    char key_a_copy[128];
    snprintf(key_a_copy, sizeof key_a_copy, "%s", key_a);
    const struct {
        const char *cert, *key, *flag, *file, *want;
    } cases[] = {
        {garbage, ca->client_a_key, "--client-cert", garbage, "not a PEM certificate"},
        {corrupt, ca->client_a_key, "--client-cert", corrupt, "certificate #1 does not parse"},
        {ca->client_a_cert, ca->client_a_cert, "--client-key", ca->client_a_cert,
         "not a PEM private key"},
        {ca->client_a_cert, ca->stray_key, "--client-key", ca->stray_key,
         "the private key does not match the certificate"},
        {ca->client_a_cert, ca->client_b_key, "--client-key", ca->client_b_key, "does not match"},
        {ca->expired_cert, ca->expired_key, "--client-cert", ca->expired_cert,
         "the certificate has expired (notAfter 20"},
        {ca->future_cert, ca->future_key, "--client-cert", ca->future_cert,
         "the certificate is not valid yet (notBefore 20"},
        {ca->client_a_cert, ca->encrypted_key, "--client-key", ca->encrypted_key,
         "passphrase-protected keys are not supported"},
        {missing, ca->client_a_key, "--client-cert", missing, "cannot open: No such file"},
        {ca->client_a_cert, missing, "--client-key", missing, "cannot open: No such file"},
        {big, ca->client_a_key, "--client-cert", big, "larger than 65536 bytes"},
        {ca->client_a_cert, big, "--client-key", big, "larger than 65536 bytes"},
        {ca->client_a_cert, "/dev/null", "--client-key", "/dev/null", "empty"},
        {ctl, ca->client_a_key, "--client-cert", ctl, "contains a control character"},
        {both, ca->client_a_key, "--client-cert", both, "holds a private key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tl_proc p = set_customer(m, "acme", cases[i].cert, cases[i].key, NULL);
        char want_prefix[400];
        snprintf(want_prefix, sizeof want_prefix, "pgpace customer set: %s %s: ", cases[i].flag,
                 cases[i].file);
        if (p.status != 2 || !strstr(p.err, want_prefix) || !strstr(p.err, cases[i].want) ||
            strstr(p.err, key_a_copy) || strstr(p.err, "-----BEGIN PRIVATE KEY-----"))
            fail_msg("case %zu (%s): exit %d, stderr: %s", i, cases[i].want, p.status, p.err);
        tl_proc_free(&p);
    }
    /* Half a pair, or a pair with --clear-client-cert. */
    tl_proc p = set_customer(m, "acme", ca->client_a_cert, NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--client-cert needs --client-key");
    tl_proc_free(&p);
    p = set_customer(m, "acme", ca->client_a_cert, ca->client_a_key,
                     TL_ARGV("--clear-client-cert"));
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--clear-client-cert, not both");
    tl_proc_free(&p);
    /* Nothing was written, nor was anything else of the command (one transaction). */
    assert_int_equal(tl_query_int(m->f->db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                                  "client_cert IS NULL AND client_key IS NULL"),
                     1);
    p = set_customer(m, "acme", ca->expired_cert, ca->expired_key, TL_ARGV("--rate", "99"));
    assert_int_equal(p.status, 2);
    tl_proc_free(&p);
    assert_int_equal(
        tl_query_int(m->f->db->conn, "SELECT rate_per_minute::int FROM pgpace.customer"), 60);
    unlink(garbage);
    unlink(corrupt);
    unlink(big);
    unlink(ctl);
    unlink(both);
    free(garbage);
    free(corrupt);
    free(big);
    free(ctl);
    free(both);
}

static void cli_stores_shows_and_clears(void **state)
{
    mtls *m = *state;
    testca *ca = &m->ca;
    customer_ok(m, "acme", ca->client_a_cert, ca->client_a_key, TL_ARGV("--rate", "60"));
    char *stored = tl_query_str(m->f->db->conn, "SELECT client_cert FROM pgpace.customer");
    char *file = slurp(ca->client_a_cert);
    assert_string_equal(stored, file); /* as given, byte for byte */
    free(stored);
    free(file);
    /* A traditional "BEGIN RSA PRIVATE KEY" and a chain (leaf, then intermediate) go too. */
    customer_ok(m, "rsa", ca->rsa_cert, ca->rsa_key, TL_ARGV("--rate", "60"));
    customer_ok(m, "chain", ca->chain_cert, ca->chain_key, TL_ARGV("--rate", "60"));

    const char *key_line = secret_line(ca->client_a_key);
    char key_copy[128];
    snprintf(key_copy, sizeof key_copy, "%s", key_line);
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", m->f->db->conninfo, "customer", "get", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "client_cert        CN=client-a,O=pgpace tests");
    tl_assert_contains(p.out, "client_cert_issuer CN=pgpace test CA,O=pgpace tests");
    tl_assert_contains(p.out, "client_cert_until  20");
    tl_assert_contains(p.out, "client_cert_sha256 ");
    tl_assert_contains(p.out, "client_key         (hidden)");
    if (strstr(p.out, key_copy) || strstr(p.out, "PRIVATE KEY"))
        fail_msg("customer get shows the key without --show-secrets:\n%s", p.out);
    /* The fingerprint is the DER's SHA-256, as `openssl x509 -fingerprint -sha256` prints it
     * (32 colon-separated upper-case pairs), computed here from the DER encoding. */
    char want_fp[128];
    der_sha256(ca->client_a_cert, want_fp, sizeof want_fp);
    char want_line[160];
    snprintf(want_line, sizeof want_line, "client_cert_sha256 %s\n", want_fp);
    tl_assert_contains(p.out, want_line);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", m->f->db->conninfo, "customer", "get", "chain"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "client_cert_issuer CN=pgpace test intermediate");
    tl_assert_contains(p.out, "client_cert_chain  2");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", m->f->db->conninfo, "customer", "get", "acme", "--show-secrets"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, key_copy);
    tl_proc_free(&p);

    /* Other settings leave it alone; --clear-client-cert removes both. */
    customer_ok(m, "acme", NULL, NULL, TL_ARGV("--rate", "30"));
    assert_int_equal(tl_query_int(m->f->db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                                  "name = 'acme' AND client_cert IS NOT NULL"),
                     1);
    customer_ok(m, "acme", NULL, NULL, TL_ARGV("--clear-client-cert"));
    assert_int_equal(tl_query_int(m->f->db->conn,
                                  "SELECT count(*) FROM pgpace.customer WHERE name = 'acme' AND "
                                  "client_cert IS NULL AND client_key IS NULL"),
                     1);
    p = tl_pgpace(TL_ARGV("--db", m->f->db->conninfo, "customer", "get", "acme"), NULL, NULL);
    tl_assert_contains(p.out, "client_cert        none");
    tl_proc_free(&p);
}

/* Runs sql expecting SQLSTATE `state` and a message containing `field`. */
static void expect_sql_error(PGconn *c, const char *sql, const char *state, const char *field)
{
    /* A CHECK violation's DETAIL shows the failing row, as PostgreSQL always does, to the
     * writer who sent it: only the function's own messages are held to never quoting the key. */
    bool direct = strncmp(sql, "UPDATE", 6) == 0;
    PGresult *res = PQexec(c, sql);
    const char *got = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorMessage(res);
    if (PQresultStatus(res) != PGRES_FATAL_ERROR || !got || strcmp(got, state) != 0 ||
        !strstr(msg, field))
        fail_msg("%.120s: SQLSTATE %s (want %s): %s", sql, got ? got : "-", state, msg);
    if (!direct && (strstr(msg, "MIGHAgEAMBMG") || strstr(msg, "s3cretkey")))
        fail_msg("%.120s: the message quotes the key: %s", sql, msg);
    PQclear(res);
}

static void sql_refuses_bad_certificates(void **state)
{
    mtls *m = *state;
    PGconn *c = m->f->db->conn;
    customer_ok(m, "acme", NULL, NULL, TL_ARGV("--rate", "60"));
#define CERT "'-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n'"
#define KEY  "'-----BEGIN PRIVATE KEY-----\ns3cretkey\n-----END PRIVATE KEY-----\n'"
    expect_sql_error(c, "SELECT pgpace.customer_set_client_cert('acme', " CERT ", NULL)", "22023",
                     "client_key");
    expect_sql_error(c, "SELECT pgpace.customer_set_client_cert('acme', NULL, " KEY ")", "22023",
                     "client_cert");
    expect_sql_error(c, "SELECT pgpace.customer_set_client_cert('acme', 'MIIB', " KEY ")", "22023",
                     "client_cert: expected a PEM certificate");
    expect_sql_error(c,
                     "SELECT pgpace.customer_set_client_cert('acme', " CERT
                     " || repeat('A', 65536), " KEY ")",
                     "22023", "client_cert: longer than 65536 bytes");
    expect_sql_error(c,
                     "SELECT pgpace.customer_set_client_cert('acme', " CERT ", " KEY
                     " || repeat('A', 65536))",
                     "22023", "client_key: longer than 65536 bytes");
    expect_sql_error(c, "SELECT pgpace.customer_set_client_cert('acme', " CERT ", 's3cretkey')",
                     "22023", "client_key: expected a PEM private key");
    expect_sql_error(c,
                     "SELECT pgpace.customer_set_client_cert('acme', " CERT
                     ", '-----BEGIN ENCRYPTED PRIVATE KEY-----\ns3cretkey\n-----END ENCRYPTED "
                     "PRIVATE KEY-----\n')",
                     "22023", "client_key: passphrase-protected keys are not supported");
    expect_sql_error(
        c, "SELECT pgpace.customer_set_client_cert('acme', " CERT " || E'\\x01', " KEY ")", "22023",
        "client_cert: contains a control character");
    expect_sql_error(
        c, "SELECT pgpace.customer_set_client_cert('acme', " CERT ", " KEY " || E'\\x1b[2J')",
        "22023", "client_key: contains a control character");
    expect_sql_error(c, "SELECT pgpace.customer_set_client_cert('ghost', " CERT ", " KEY ")",
                     "P0002", "ghost");
    /* The constraints hold for a direct writer. */
    expect_sql_error(c, "UPDATE pgpace.customer SET client_cert = " CERT, "23514",
                     "customer_client_cert_valid");
    expect_sql_error(c, "UPDATE pgpace.customer SET client_cert = 'x', client_key = " KEY, "23514",
                     "customer_client_cert_valid");
    expect_sql_error(c,
                     "UPDATE pgpace.customer SET client_cert = " CERT ", client_key = 'no armour'",
                     "23514", "customer_client_cert_valid");
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE client_cert "
                                     "IS NULL"),
                     1);
    /* The shape is all SQL checks: a well-armoured pair is stored; NULL, NULL clears. */
    tl_exec(c, "SELECT pgpace.customer_set_client_cert('acme', " CERT ", " KEY ")");
    tl_exec(c, "SELECT pgpace.customer_set_client_cert('acme', NULL, NULL)");
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE client_cert "
                                     "IS NULL AND client_key IS NULL"),
                     1);

    /* pgpace_producer may neither read the columns nor call the function. */
    char role[64], conninfo[700];
    snprintf(role, sizeof role, "producer_m_%d", (int)getpid());
    tl_exec(c, "DROP ROLE IF EXISTS %s", role);
    tl_exec(c, "CREATE ROLE %s LOGIN IN ROLE pgpace_producer", role);
    snprintf(conninfo, sizeof conninfo, "dbname=%s user=%s", m->f->db->name, role);
    PGconn *pc = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(pc), CONNECTION_OK);
    static const char *const denied[] = {
        "SELECT client_cert, client_key FROM pgpace.customer",
        "SELECT pgpace.customer_set_client_cert('acme', NULL, NULL)",
    };
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
        PGresult *res = PQexec(pc, denied[i]);
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (PQresultStatus(res) != PGRES_FATAL_ERROR || !st || strcmp(st, "42501") != 0)
            fail_msg("pgpace_producer ran %s (%s)", denied[i], st ? st : "no error");
        PQclear(res);
    }
    PQfinish(pc);
    tl_exec(c, "DROP ROLE %s", role);
#undef CERT
#undef KEY
}

/* Requests recorded for `path` so far; asserts every one came with certificate CN `cn`. */
static size_t check_cn(mtls *m, const char *path, const char *cn)
{
    size_t n = tls_server_count(m->srv), seen = 0;
    for (size_t i = 0; i < n; i++) {
        tls_request r;
        assert_int_equal(tls_server_request(m->srv, i, &r), 0);
        if (strcmp(r.path, path) != 0)
            continue;
        seen++;
        if (strcmp(r.cn, cn) != 0)
            fail_msg("request %zu to %s came on connection %u with CN %s (want %s)", i, path,
                     r.conn, r.cn, cn);
    }
    return seen;
}

static void log_has_no_key(mtls *m)
{
    const char *keys[] = {m->ca.client_a_key, m->ca.client_b_key, m->ca.chain_key};
    char *log = fx_log(m->f);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strstr(log, secret_line(keys[i])))
            fail_msg("the service log holds a key (%s)", keys[i]);
    if (strstr(log, "PRIVATE KEY"))
        fail_msg("the service log holds a PEM key");
    free(log);
}

static void certificate_reaches_the_receiver_and_none_is_refused(void **state)
{
    mtls *m = *state;
    testca *ca = &m->ca;
    customer_ok(m, "a", ca->client_a_cert, ca->client_a_key, TL_ARGV("--rate", "600"));
    customer_ok(m, "chain", ca->chain_cert, ca->chain_key, TL_ARGV("--rate", "600"));
    customer_ok(m, "nocert", NULL, NULL, TL_ARGV("--rate", "600", "--max-attempts", "2"));
    fx_run(m->f, m->ini);
    fx_enqueue(m->f, "a", NULL, 3);
    fx_enqueue(m->f, "chain", NULL, 2);
    assert_int_equal(tls_server_wait(m->srv, 5, 15000), 5);
    assert_int_equal(check_cn(m, "/c/a", "client-a"), 3);
    /* The leaf and its intermediate were sent: the server knows only the root. */
    assert_int_equal(check_cn(m, "/c/chain", "client-chain"), 2);
    assert_int_equal(tl_wait_query_at_least(m->f->db->conn, 5, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE outcome = 'success'"),
                     5);

    /* Without a certificate the receiver refuses the handshake: a TLS failure, retried, then
     * dead-lettered (max-attempts 2); nothing reached it, nothing was lost. */
    fx_enqueue(m->f, "nocert", NULL, 2);
    assert_int_equal(tl_wait_query_at_least(
                         m->f->db->conn, 2, 20000,
                         "SELECT count(*) FROM pgpace.dead_letter d JOIN pgpace.customer c ON "
                         "c.id = d.customer_id WHERE c.name = 'nocert'"),
                     2);
    assert_true(tls_server_refused(m->srv) >= 1);
    assert_int_equal(check_cn(m, "/c/nocert", "-"), 0);
    char *classes = tl_query_str(m->f->db->conn,
                                 "SELECT string_agg(a.error_class || ':' || a.outcome, ' ' "
                                 "ORDER BY a.attempt, a.outcome) FROM pgpace.delivery_attempt a "
                                 "JOIN pgpace.customer c ON c.id = a.customer_id WHERE c.name = "
                                 "'nocert'");
    assert_string_equal(classes, "tls:retry tls:retry tls:dead tls:dead");
    free(classes);
    char *why =
        tl_query_str(m->f->db->conn, "SELECT string_agg(DISTINCT d.last_error, ' | ') FROM "
                                     "pgpace.dead_letter d JOIN pgpace.customer c ON c.id = "
                                     "d.customer_id WHERE c.name = 'nocert'");
    tl_assert_contains(why, "alert");
    free(why);
    assert_int_equal(tl_query_int(m->f->db->conn,
                                  "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                  "pgpace.customer c ON c.id = a.customer_id WHERE c.name = "
                                  "'nocert' AND a.outcome = 'retry'"),
                     2);
    /* Certified deliveries still go on the same host afterwards. */
    fx_enqueue(m->f, "a", NULL, 1);
    assert_int_equal(tl_wait_query_at_least(m->f->db->conn, 6, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE outcome = 'success'"),
                     6);
    assert_int_equal(check_cn(m, "/c/a", "client-a"), 4);
    fx_stop_service(m->f, 15000);
    log_has_no_key(m);
}

/* Three customers on one host:port, two certificates and none, sent interleaved and
 * concurrently: every request carries its own customer's certificate. The keep-alive
 * connections are reused (fewer connections than requests), so the test would see a
 * connection handed across customers. */
static void customers_never_share_a_connection(void **state)
{
    mtls *m = *state;
    testca *ca = &m->ca;
    customer_ok(m, "a", ca->client_a_cert, ca->client_a_key,
                TL_ARGV("--rate", "6000", "--mode", "unlimited"));
    customer_ok(m, "b", ca->client_b_cert, ca->client_b_key,
                TL_ARGV("--rate", "6000", "--mode", "unlimited"));
    customer_ok(m, "nocert", NULL, NULL,
                TL_ARGV("--rate", "6000", "--mode", "unlimited", "--max-attempts", "1"));
    /* The failures of "nocert" must not open its breaker: each of its items is tried once. */
    char ini[600];
    snprintf(ini, sizeof ini, "%sdelivery.breaker_failures = 1000\n", m->ini);
    fx_run(m->f, ini);
    const int rounds = 15;
    for (int i = 0; i < rounds; i++) {
        fx_enqueue(m->f, "a", NULL, 2);
        fx_enqueue(m->f, "b", NULL, 2);
        fx_enqueue(m->f, "nocert", NULL, 1);
    }
    assert_int_equal(tls_server_wait(m->srv, 4 * rounds, 30000), 4 * rounds);
    assert_int_equal(check_cn(m, "/c/a", "client-a"), 2 * rounds);
    assert_int_equal(check_cn(m, "/c/b", "client-b"), 2 * rounds);
    assert_int_equal(check_cn(m, "/c/nocert", "-"), 0);
    assert_int_equal(tl_wait_query_at_least(
                         m->f->db->conn, rounds, 20000,
                         "SELECT count(*) FROM pgpace.dead_letter d JOIN pgpace.customer c ON "
                         "c.id = d.customer_id WHERE c.name = 'nocert'"),
                     rounds);
    /* Connections were kept alive and reused (else the check above proves little). */
    unsigned conns = tls_server_connections(m->srv);
    if (conns >= (unsigned)(4 * rounds))
        fail_msg("%u connections for %d requests: no reuse", conns, 4 * rounds);
    /* And each connection served one certificate only. */
    size_t n = tls_server_count(m->srv);
    for (size_t i = 0; i < n; i++) {
        tls_request ri;
        assert_int_equal(tls_server_request(m->srv, i, &ri), 0);
        for (size_t j = i + 1; j < n; j++) {
            tls_request rj;
            assert_int_equal(tls_server_request(m->srv, j, &rj), 0);
            if (ri.conn == rj.conn && strcmp(ri.path, rj.path) != 0)
                fail_msg("connection %u served %s and %s", ri.conn, ri.path, rj.path);
        }
    }
    fx_stop_service(m->f, 15000);
    log_has_no_key(m);
}

/* A certificate the CLI would refuse, written past it (SQL checks only the shape): expired, or
 * armoured garbage. The dispatcher keeps running, logs the customer once (no key) and holds it:
 * no attempt, nothing dead-lettered, its items wait; a good customer on the same host is
 * unaffected; a valid certificate set again releases the items. */
static void unusable_stored_certificate_holds_the_customer(void **state)
{
    mtls *m = *state;
    testca *ca = &m->ca;
    PGconn *c = m->f->db->conn;
    customer_ok(m, "a", ca->client_a_cert, ca->client_a_key, TL_ARGV("--rate", "600"));
    customer_ok(m, "old", NULL, NULL, TL_ARGV("--rate", "600", "--max-attempts", "2"));
    customer_ok(m, "junk", NULL, NULL, TL_ARGV("--rate", "600", "--max-attempts", "2"));
    char *cert = slurp(ca->expired_cert), *key = slurp(ca->expired_key);
    const char *params[] = {cert, key};
    PGresult *res = PQexecParams(c, "SELECT pgpace.customer_set_client_cert('old', $1, $2)", 2,
                                 NULL, params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    PQclear(res);
    free(cert);
    free(key);
    tl_exec(c, "SELECT pgpace.customer_set_client_cert('junk', "
               "E'-----BEGIN CERTIFICATE-----\\nMIIBjunk\\n-----END CERTIFICATE-----\\n', "
               "E'-----BEGIN PRIVATE KEY-----\\nMIGHjunk\\n-----END PRIVATE KEY-----\\n')");
    fx_run(m->f, m->ini);
    assert_true(fx_wait_log(m->f, "event=customer_client_cert_invalid customer=junk", 5000));
    assert_true(fx_wait_log(m->f, "event=customer_client_cert_unusable customer=old", 5000));
    fx_enqueue(m->f, "old", NULL, 2);
    fx_enqueue(m->f, "junk", NULL, 2);
    fx_enqueue(m->f, "a", NULL, 2);
    assert_int_equal(tls_server_wait(m->srv, 2, 10000), 2);
    assert_int_equal(check_cn(m, "/c/a", "client-a"), 2);
    assert_int_equal(check_cn(m, "/c/old", "-"), 0);
    assert_int_equal(check_cn(m, "/c/junk", "-"), 0);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                     "pgpace.customer k ON k.id = a.customer_id WHERE k.name IN "
                                     "('old', 'junk') AND a.outcome <> 'released'"),
                     0);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer k "
                                     "ON k.id = q.customer_id WHERE k.name IN ('old', 'junk')"),
                     4);
    /* A valid one again: the held items go out with it. */
    tl_proc p = set_customer(m, "old", ca->client_b_cert, ca->client_b_key, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tls_server_wait(m->srv, 4, 10000), 4);
    assert_int_equal(check_cn(m, "/c/old", "client-b"), 2);
    fx_stop_service(m->f, 15000);
    char *log = fx_log(m->f);
    if (strstr(log, "MIGHjunk") || strstr(log, secret_line(ca->expired_key)))
        fail_msg("the service log holds a key");
    free(log);
}

/* [delivery] ca_file is checked when the config loads. */
static void ca_file_is_checked_at_load(void **state)
{
    mtls *m = *state;
    char *not_pem = tl_temp_file("not a certificate\n");
    const struct {
        const char *value, *want;
    } cases[] = {
        {"/nonexistent/ca.pem", "[delivery] ca_file: cannot open '/nonexistent/ca.pem'"},
        {not_pem, "holds no PEM certificate"},
        {m->ca.client_a_key, "holds no PEM certificate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ini[512];
        snprintf(ini, sizeof ini, "[delivery]\nallow_cidrs = 127.0.0.0/8\nca_file = %s\n",
                 cases[i].value);
        char *path = tl_temp_file(ini);
        tl_proc p = tl_pgpace(TL_ARGV("--config", path, "run"), NULL, NULL);
        if (p.status == 0 || !strstr(p.err, cases[i].want) || !strstr(p.err, ":3:"))
            fail_msg("ca_file %s: exit %d, stderr: %s", cases[i].value, p.status, p.err);
        tl_proc_free(&p);
        unlink(path);
        free(path);
    }
    unlink(not_pem);
    free(not_pem);
}

/* ---- the sender alone: a pooled handle and the certificate's lifetime ---- */

typedef struct sender_run {
    uv_loop_t loop;
    uv_timer_t deadline;
    bool timed_out, closed;
    size_t done;
    char error_class[32];
    char error[512];
    long status;
} sender_run;

static void sr_deadline(uv_timer_t *t)
{
    sender_run *sr = t->data;
    sr->timed_out = true;
    uv_stop(&sr->loop);
}

static void sr_done(const http_result *r, void *arg)
{
    sender_run *sr = arg;
    sr->done++;
    sr->status = r->status;
    snprintf(sr->error_class, sizeof sr->error_class, "%s", r->error_class ? r->error_class : "");
    snprintf(sr->error, sizeof sr->error, "%s", r->error ? r->error : "");
    uv_stop(&sr->loop);
}

static void sr_closed(void *arg)
{
    sender_run *sr = arg;
    sr->closed = true;
    uv_stop(&sr->loop);
}

static void sr_wait(sender_run *sr, const bool *flag, size_t *count, size_t want)
{
    sr->timed_out = false;
    uv_timer_start(&sr->deadline, sr_deadline, 10000, 0);
    while (!sr->timed_out && (flag ? !*flag : *count < want))
        uv_run(&sr->loop, UV_RUN_ONCE);
    uv_timer_stop(&sr->deadline);
    assert_false(sr->timed_out);
}

static client_cert *load_cert(const char *cert_path, const char *key_path)
{
    char *cert = slurp(cert_path), *key = slurp(key_path);
    client_cert *c = NULL;
    pgp_error err;
    if (client_cert_new(cert, key, &c, &err) != 0)
        fail_msg("client_cert_new: %s", err.msg);
    free(cert);
    free(key);
    return c;
}

/* One POST with the given certificate (or none), which the test releases at once: the request
 * holds its own reference (under ASan a use after free would show). Returns once done. */
static void send_one(sender_run *sr, http_sender *s, const char *url, client_cert *cert)
{
    static const char *const secrets[] = {"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"};
    http_request req = {.url = url,
                        .body = "{}",
                        .body_len = 2,
                        .webhook_id = "msg_1",
                        .timestamp_s = 1700000000,
                        .secrets = secrets,
                        .n_secrets = 1,
                        .connect_timeout_ms = 5000,
                        .total_timeout_ms = 5000,
                        .client_cert = cert};
    size_t before = sr->done;
    assert_int_equal(http_send(s, &req, sr_done, sr), 0);
    client_cert_release(cert);
    sr_wait(sr, NULL, &sr->done, before + 1);
}

static void sender_presents_only_the_requests_certificate(void **state)
{
    mtls *m = *state;
    sender_run sr;
    memset(&sr, 0, sizeof sr);
    assert_int_equal(uv_loop_init(&sr.loop), 0);
    assert_int_equal(uv_timer_init(&sr.loop, &sr.deadline), 0);
    sr.deadline.data = &sr;
    netcheck_allow allow;
    pgp_error err;
    assert_int_equal(netcheck_parse_allow("127.0.0.0/8", &allow, &err), 0);
    /* One request object in the pool: every request below reuses the same easy handle. */
    http_sender_options o = {.max_connections = 1,
                             .max_host_connections = 1,
                             .max_response_bytes = 1024,
                             .excerpt_bytes = 64,
                             .allow = &allow,
                             .ca_file = m->ca.ca_cert};
    http_sender *s = NULL;
    assert_int_equal(http_sender_new(&sr.loop, &o, &s), 0);
    char url[128];
    tls_server_url(m->srv, "/s", url, sizeof url);

    send_one(&sr, s, url, load_cert(m->ca.client_a_cert, m->ca.client_a_key));
    if (sr.status != 200)
        fail_msg("status %ld, %s: %s", sr.status, sr.error_class, sr.error);
    send_one(&sr, s, url, load_cert(m->ca.client_a_cert, m->ca.client_a_key));
    if (sr.status != 200)
        fail_msg("status %ld, %s: %s", sr.status, sr.error_class, sr.error);
    /* The pooled handle forgot the certificate: this one presents none and is refused. */
    send_one(&sr, s, url, NULL);
    assert_string_equal(sr.error_class, "tls");
    assert_int_equal(tls_server_wait_refused(m->srv, 1, 5000), 1);
    send_one(&sr, s, url, load_cert(m->ca.client_b_cert, m->ca.client_b_key));
    if (sr.status != 200)
        fail_msg("status %ld, %s: %s", sr.status, sr.error_class, sr.error);
    send_one(&sr, s, url, load_cert(m->ca.client_a_cert, m->ca.client_a_key));
    if (sr.status != 200)
        fail_msg("status %ld, %s: %s", sr.status, sr.error_class, sr.error);

    assert_int_equal(tls_server_wait(m->srv, 4, 5000), 4);
    tls_request r[4];
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(tls_server_request(m->srv, i, &r[i]), 0);
    assert_string_equal(r[0].cn, "client-a");
    assert_string_equal(r[1].cn, "client-a");
    assert_string_equal(r[2].cn, "client-b");
    assert_string_equal(r[3].cn, "client-a");
    /* The same certificate reused its connection (equal blobs match: reuse is not simply off);
     * another certificate got a connection of its own. */
    assert_int_equal(r[0].conn, r[1].conn);
    assert_true(r[2].conn != r[1].conn);
    assert_true(r[3].conn != r[2].conn);
    /* The last may resume client-a's TLS session (curl's session cache is keyed like its
     * connection cache, certificate blob included): it still is client-a's. */

    http_sender_close(s, sr_closed, &sr);
    sr_wait(&sr, &sr.closed, NULL, 0);
    uv_close((uv_handle_t *)&sr.deadline, NULL);
    while (uv_run(&sr.loop, UV_RUN_NOWAIT) != 0)
        ;
    assert_int_equal(uv_loop_close(&sr.loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(cli_refuses_bad_certificates, setup, teardown),
        cmocka_unit_test_setup_teardown(cli_stores_shows_and_clears, setup, teardown),
        cmocka_unit_test_setup_teardown(sql_refuses_bad_certificates, setup, teardown),
        cmocka_unit_test_setup_teardown(certificate_reaches_the_receiver_and_none_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(customers_never_share_a_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(unusable_stored_certificate_holds_the_customer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(ca_file_is_checked_at_load, setup, teardown),
        cmocka_unit_test_setup_teardown(sender_presents_only_the_requests_certificate, setup,
                                        teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
