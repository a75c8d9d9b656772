/* test_headers.c - per-customer extra headers and Basic/Bearer receiver authentication: what
 * pgpace.customer_set_headers/customer_set_auth and `customer set` refuse (header injection,
 * reserved and malformed names, oversized values, bad credentials), that the headers and the
 * Authorization reach a real receiver (and follow a change), and that the values stay secret:
 * not in the service log, not in `customer get` without --show-secrets, not readable by
 * pgpace_producer. */
#include "fixture.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API_KEY  "k3y-V4lue-not-in-logs"
#define PASSWORD "pa55-w0rd-not-in-logs"
#define TOKEN    "t0ken.not-in_logs~42=="
#define TP       "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

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

static void sql_refuses_bad_headers_and_credentials(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    PGconn *c = f->db->conn;
    /* Header injection: a CR/LF in the value would start a header (or a request) of its own. */
    tl_expect_sql_error(c,
                        "SELECT pgpace.customer_set_headers('acme', ARRAY[E'X-Api-Key: "
                        "s3cret\\r\\nX-Evil: 1'])",
                        "22023", "headers[1]", "s3cret");
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_headers('acme', ARRAY[E'X-A: s3cret\\nB'])",
                        "22023", "headers[1]", "s3cret");
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_headers('acme', ARRAY[E'X-A: s3\\tcret'])",
                        "22023", "control character", "s3");
    /* C1 controls (U+0080 to U+009F) too, whatever the database's locale says of them. */
    tl_expect_sql_error(c,
                        "SELECT pgpace.customer_set_headers('acme', ARRAY[E'X-A: s3cret\\u0085'])",
                        "22023", "control character", "s3cret");
    tl_expect_sql_error(c,
                        "SELECT pgpace.customer_set_auth('acme', 'bearer', NULL, E's3cret\\u009f')",
                        "22023", "auth.token", "s3cret");
    /* A CR/LF or a space in the name, a name that is not a token, too long a name. */
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_headers('acme', ARRAY[E'X\\r\\nA: v'])",
                        "22023", "headers[1]", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_headers('acme', ARRAY['X A: v'])", "22023",
                        "HTTP token", NULL);
    tl_expect_sql_error(
        c, "SELECT pgpace.customer_set_headers('acme', ARRAY[repeat('x', 65) || ': v'])", "22023",
        "headers[1]", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_headers('acme', ARRAY['no colon s3cret'])",
                        "22023", "Name: value", "s3cret");
    /* Reserved names, any case. */
    static const char *const reserved[] = {"webhook-id",   "Webhook-Signature", "WEBHOOK-X",
                                           "Content-Type", "content-length",    "Host",
                                           "User-Agent",   "Authorization",     "Transfer-Encoding",
                                           "connection",   "traceparent",       "TraceState"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT pgpace.customer_set_headers('acme', ARRAY['X-Ok: 1', '%s: v'])",
                 reserved[i]);
        tl_expect_sql_error(c, sql, "22023", "reserved", NULL);
    }
    /* Oversized, empty, duplicate, too many. */
    tl_expect_sql_error(c,
                        "SELECT pgpace.customer_set_headers('acme', ARRAY['X-Big: ' || "
                        "repeat('v', 4097)])",
                        "22023", "4096", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_headers('acme', ARRAY['X-Empty:   '])",
                        "22023", "empty", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_headers('acme', ARRAY['X-A: 1', 'x-a: 2'])",
                        "22023", "twice", NULL);
    tl_expect_sql_error(
        c,
        "SELECT pgpace.customer_set_headers('acme', ARRAY(SELECT 'X-' || g || ': v' "
        "FROM generate_series(1, 21) g))",
        "22023", "at most 20", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_headers('ghost', ARRAY['X-A: 1'])", "P0002",
                        "ghost", NULL);
    /* Credentials. */
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_auth('acme', 'digest', 'u', 'p')", "22023",
                        "auth", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_auth('acme', 'basic', 'u:x', 's3cret')",
                        "22023", "auth.username", "s3cret");
    tl_expect_sql_error(
        c, "SELECT pgpace.customer_set_auth('acme', 'basic', 'u', E's3cret\\r\\nX: 1')", "22023",
        "auth.password", "s3cret");
    tl_expect_sql_error(c,
                        "SELECT pgpace.customer_set_auth('acme', 'basic', 'u', repeat('p', 1025))",
                        "22023", "auth.password", NULL);
    tl_expect_sql_error(c,
                        "SELECT pgpace.customer_set_auth('acme', 'bearer', NULL, E's3cret\\nX: 1')",
                        "22023", "auth.token", "s3cret");
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_auth('acme', 'bearer', NULL, 's3 cret')",
                        "22023", "auth.token", "s3");
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_auth('acme', 'bearer', 'u', 'tok')", "22023",
                        "auth.username", NULL);
    /* The table's constraints hold for a direct writer too. */
    tl_expect_sql_error(c,
                        "UPDATE pgpace.customer SET extra_headers = ARRAY[E'X-A: 1\\r\\nX-B: 2'] "
                        "WHERE name = 'acme'",
                        "23514", "customer_extra_headers_valid", NULL);
    /* Nothing was changed; a good set is stored canonically ("Name: value", trimmed). */
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE "
                                     "extra_headers = '{}' AND auth_scheme IS NULL"),
                     1);
    tl_exec(c, "SELECT pgpace.customer_set_headers('acme', ARRAY['X-Api-Key:  v1 ', 'X-T:\tv2'])");
    char *stored =
        tl_query_str(c, "SELECT array_to_string(extra_headers, '|') FROM pgpace.customer");
    assert_string_equal(stored, "X-Api-Key: v1|X-T: v2");
    free(stored);
}

static void cli_refuses_bad_headers_and_credentials(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    static const struct {
        const char *flag, *value, *want;
    } cases[] = {
        {"--header", "X-Api-Key: s3cret\r\nX-Evil: 1", "control character"},
        {"--header", "X-Api-Key: s3cret\n", "control character"},
        {"--header", "X\r\nA: v", "HTTP token"},
        {"--header", "no colon s3cret", "Name: value"},
        {"--header", "webhook-id: x", "reserved"},
        {"--header", "CONTENT-TYPE: text/plain", "reserved"},
        {"--header", "Authorization: Basic eA==", "use --auth"},
        {"--header", "traceparent: 00-x", "reserved"},
        {"--header", "X-Empty: ", "empty"},
        {"--header", "X-Api-Key: s3cret\xc2\x85", "control character"}, /* U+0085, C1 */
        {"--auth", "bearer:s3cret\xc2\x9f", "token"},
        {"--auth",
         "basic:us\xc2\x80"
         "er:s3cret",
         "USER"},
        {"--auth", "basic:us:er", NULL}, /* valid: the password may hold a colon */
        {"--auth", "basic::s3cret", "USER"},
        {"--auth", "basic:user", "basic:USER:PASSWORD"},
        {"--auth", "bearer:s3 cret", "token"},
        {"--auth", "bearer:", "token"},
        {"--auth", "digest:x", "basic:USER:PASSWORD, bearer:TOKEN or none"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!cases[i].want) {
            tl_proc ok = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme",
                                           cases[i].flag, cases[i].value),
                                   NULL, NULL);
            if (ok.status != 0)
                fail_msg("%s '%s' refused: %s", cases[i].flag, cases[i].value, ok.err);
            tl_proc_free(&ok);
            continue;
        }
        tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme",
                                      cases[i].flag, cases[i].value),
                              NULL, NULL);
        if (p.status != 2 || !strstr(p.err, cases[i].flag) || !strstr(p.err, cases[i].want) ||
            strstr(p.err, "s3cret"))
            fail_msg("%s '%s': exit %d, stderr: %s", cases[i].flag, cases[i].value, p.status,
                     p.err);
        tl_proc_free(&p);
    }
    /* The valid case above was stored: the first colon ends the user. */
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                               "auth_username = 'us' AND auth_secret = 'er'"),
                     1);
    tl_proc none = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--auth", "none"), NULL, NULL);
    assert_int_equal(none.status, 0);
    tl_proc_free(&none);
    /* Oversized value, too many, a duplicate, --header with --clear-headers. */
    char big[4200] = "X-Big: ";
    memset(big + 7, 'v', 4097);
    big[7 + 4097] = '\0';
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--header", big), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--header #1: the value of X-Big is longer than 4096 bytes");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--header", "A: 1",
                          "--header", "a: 2"),
                  NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--header #2: a is given twice");
    tl_proc_free(&p);
    const char *many[64] = {"--db", f->db->conninfo, "customer", "set", "acme"};
    char names[21][16];
    size_t n = 5;
    for (int i = 0; i < 21; i++) {
        snprintf(names[i], sizeof names[i], "X-%d: v", i);
        many[n++] = "--header";
        many[n++] = names[i];
    }
    many[n] = NULL;
    p = tl_pgpace(many, NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--header: at most 20");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--header", "A: 1",
                          "--clear-headers"),
                  NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--clear-headers");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                               "extra_headers = '{}' AND auth_scheme IS NULL"),
                     1);
}

/* The n-th request's header `name`, asserting it came exactly once (into a static buffer). */
static const char *header_of(fx *f, size_t i, const char *name)
{
    static char buf[512];
    int times = receiver_header(f->recv, i, name, buf, sizeof buf);
    if (times != 1)
        fail_msg("request %zu: header %s came %d times", i, name, times);
    return buf;
}

static void headers_and_authorization_reach_the_receiver(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme",
                TL_ARGV("--rate", "600", "--header", "X-Api-Key: " API_KEY, "--header",
                        "X-Tenant:  t-42 ", "--auth", "basic:alice:" PASSWORD));
    fx_run(f, NULL);
    /* With and without a trace context: the optional trace headers sit between the fixed ones
     * and the customer's, and whichever came last must link to them. */
    fx_enqueue(f, "acme", NULL, 2);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 2, 10000), 2);
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('acme', '{}', traceparent => '%s')", TP);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 3, 10000), 3);
    tl_exec(f->db->conn,
            "SELECT pgpace.enqueue('acme', '{}', traceparent => '%s', tracestate => 'a=b')", TP);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 4, 10000), 4);
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 5, 10000), 5);
    assert_string_equal(header_of(f, 2, "traceparent"), TP);
    assert_int_equal(receiver_header(f->recv, 2, "tracestate", NULL, 0), 0);
    assert_string_equal(header_of(f, 3, "tracestate"), "a=b");
    assert_int_equal(receiver_header(f->recv, 4, "traceparent", NULL, 0), 0);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(header_of(f, i, "x-api-key"), API_KEY);
        assert_string_equal(header_of(f, i, "X-Tenant"), "t-42");
        /* base64("alice:pa55-w0rd-not-in-logs"), computed independently. */
        assert_string_equal(header_of(f, i, "Authorization"),
                            "Basic YWxpY2U6cGE1NS13MHJkLW5vdC1pbi1sb2dz");
        /* The request's own headers are still there, once. */
        assert_string_equal(header_of(f, i, "content-type"), "application/json");
        (void)header_of(f, i, "webhook-signature");
    }

    /* Bearer instead, and the headers cleared: the reload takes effect for the next webhook. */
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--auth",
                                  "bearer:" TOKEN, "--clear-headers"),
                          NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_true(fx_wait_log(f, "event=customer_updated", 5000));
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 6, 10000), 6);
    assert_string_equal(header_of(f, 5, "Authorization"), "Bearer " TOKEN);
    assert_int_equal(receiver_header(f->recv, 5, "X-Api-Key", NULL, 0), 0);

    /* None: no Authorization at all. */
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--auth", "none"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_true(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                          "auth_scheme IS NULL AND auth_secret IS NULL") == 1);
    /* Two updates: wait for the second reload by its effect. */
    long long sent = 6;
    for (int tries = 0; tries < 50; tries++) {
        fx_enqueue(f, "acme", NULL, 1);
        sent++;
        assert_int_equal(receiver_wait(f->recv, "/c/acme", (size_t)sent, 10000), sent);
        if (receiver_header(f->recv, (size_t)sent - 1, "Authorization", NULL, 0) == 0)
            break;
    }
    assert_int_equal(receiver_header(f->recv, (size_t)sent - 1, "Authorization", NULL, 0), 0);
    fx_stop_service(f, 15000);
}

/* A line past the table's CHECK (a direct UPDATE) that the functions would refuse: it would
 * change the request's framing. The dispatcher holds the customer instead of sending without
 * its headers, and sends again once they are set right. */
static void stored_headers_that_fail_hold_the_customer(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "600", "--header", "X-Api-Key: " API_KEY));
    fx_customer(f, "beta", TL_ARGV("--rate", "600"));
    fx_run(f, NULL);
    tl_exec(f->db->conn, "UPDATE pgpace.customer SET extra_headers = '{\"Content-Length: 0\"}' "
                         "WHERE name = 'acme'");
    assert_true(fx_wait_log(f, "event=customer_headers_invalid customer=acme", 10000));
    fx_enqueue(f, "acme", NULL, 1);
    fx_enqueue(f, "beta", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/beta", 1, 10000), 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 0), 0);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.queue q JOIN "
                                               "pgpace.customer c ON c.id = q.customer_id "
                                               "WHERE c.name = 'acme'"),
                     1);
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--header",
                                  "X-Api-Key: " API_KEY),
                          NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 10000), 1);
    size_t n = receiver_count(f->recv, NULL);
    for (size_t i = 0; i < n; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        if (strcmp(rq.path, "/c/acme") == 0)
            assert_string_equal(header_of(f, i, "X-Api-Key"), API_KEY);
        free(rq.body);
    }
    fx_stop_service(f, 15000);
}

static void values_stay_secret(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme",
                TL_ARGV("--rate", "600", "--header", "X-Api-Key: " API_KEY, "--auth",
                        "basic:alice:" PASSWORD));
    fx_customer(f, "beta", TL_ARGV("--rate", "600", "--auth", "bearer:" TOKEN));
    /* A receiver that refuses (401) makes the dispatcher log failures too. */
    receiver_on(f->recv,
                &(receiver_rule){.path_prefix = "/c/beta", .status = 401, .body = "unauthorized"});
    fx_run(f, "log.level = debug\n");
    fx_enqueue(f, "acme", NULL, 2);
    fx_enqueue(f, "beta", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 2, 10000), 2);
    assert_true(receiver_wait(f->recv, "/c/beta", 1, 10000) >= 1);
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--header",
                                  "X-Api-Key: " API_KEY "-2"),
                          NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_true(fx_wait_log(f, "event=customer_updated customer=acme", 5000));
    fx_stop_service(f, 15000);
    char *log = fx_log(f);
    static const char *const secrets[] = {API_KEY, PASSWORD, TOKEN,
                                          "YWxpY2U6cGE1NS13MHJkLW5vdC1pbi1sb2dz"};
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
        if (strstr(log, secrets[i]))
            fail_msg("the service log holds a secret (%s):\n%s", secrets[i], log);
    free(log);

    /* customer get: names, (hidden); the values only with --show-secrets. */
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "X-Api-Key: (hidden)");
    tl_assert_contains(p.out, "auth               basic");
    tl_assert_contains(p.out, "auth_credentials   (hidden)");
    if (strstr(p.out, API_KEY) || strstr(p.out, PASSWORD) || strstr(p.out, "alice"))
        fail_msg("customer get shows a secret without --show-secrets:\n%s", p.out);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme", "--show-secrets"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "X-Api-Key: " API_KEY "-2");
    tl_assert_contains(p.out, "alice:" PASSWORD);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "beta"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "headers            none");
    tl_assert_contains(p.out, "auth               bearer");
    if (strstr(p.out, TOKEN))
        fail_msg("customer get shows the token without --show-secrets:\n%s", p.out);
    tl_proc_free(&p);

    /* pgpace_producer may not read them (nor anything of pgpace.customer). */
    char role[64], conninfo[700];
    snprintf(role, sizeof role, "producer_h_%d", (int)getpid());
    tl_exec(f->db->conn, "DROP ROLE IF EXISTS %s", role);
    tl_exec(f->db->conn, "CREATE ROLE %s LOGIN IN ROLE pgpace_producer", role);
    snprintf(conninfo, sizeof conninfo, "dbname=%s user=%s", f->db->name, role);
    PGconn *pc = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(pc), CONNECTION_OK);
    static const char *const reads[] = {
        "SELECT extra_headers FROM pgpace.customer",
        "SELECT auth_username, auth_secret FROM pgpace.customer",
        "SELECT * FROM pgpace.customer",
    };
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        PGresult *res = PQexec(pc, reads[i]);
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (PQresultStatus(res) != PGRES_FATAL_ERROR || !st || strcmp(st, "42501") != 0)
            fail_msg("pgpace_producer ran %s (%s)", reads[i], st ? st : "no error");
        PQclear(res);
    }
    PQfinish(pc);
    tl_exec(f->db->conn, "DROP ROLE %s", role);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(sql_refuses_bad_headers_and_credentials, setup, teardown),
        cmocka_unit_test_setup_teardown(cli_refuses_bad_headers_and_credentials, setup, teardown),
        cmocka_unit_test_setup_teardown(headers_and_authorization_reach_the_receiver, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stored_headers_that_fail_hold_the_customer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(values_stay_secret, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
