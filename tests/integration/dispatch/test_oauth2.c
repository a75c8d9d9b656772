/* test_oauth2.c - OAuth2 client credentials (RFC 6749 4.4) as receiver authentication, against
 * the loopback receiver playing both the token endpoint (a rule that answers JSON only to the
 * right Basic client credentials and form) and the receiver (a rule that answers 401 to any
 * other Bearer token): what pgpace.customer_set_oauth2 and `customer set --auth oauth2` refuse;
 * one token request serving many deliveries; a short-lived token fetched again; a rotated token
 * (401) fetched again once with the delivery sent again at once; token endpoint failures
 * classified in the attempt log and the metric, nothing lost, delivered once fixed; a token URL
 * outside allow_cidrs refused as ssrf; no secret nor token in the debug log. */
#include "connect_proxy.h"
#include "fixture.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLIENT_ID "client-1"
/* Has characters RFC 6749 2.3.1 form-urlencodes before Basic (":", "+", "/"). */
#define CLIENT_SECRET "s3cr3t:not+in/logs"
/* base64("client-1:s3cr3t%3Anot%2Bin%2Flogs"), computed independently (Python's
 * urllib.parse.quote_plus and base64). */
#define CLIENT_BASIC "Basic Y2xpZW50LTE6czNjcjN0JTNBbm90JTJCaW4lMkZsb2dz"
#define TOKEN1       "tok1.Not-In_Logs~A"
#define TOKEN2       "tok2.Not-In_Logs~B"
#define FORM_SCOPE   "grant_type=client_credentials&scope=hooks%3Awrite+read"

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

/* `customer set NAME --auth oauth2 ...` with the secret on stdin; returns the exit status. */
static int set_oauth(fx *f, const char *name, const char *token_path, const char *scope)
{
    char url[256];
    receiver_url(f->recv, token_path, url, sizeof url);
    tl_proc p =
        scope
            ? tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", name, "--auth",
                                "oauth2", "--oauth-token-url", url, "--oauth-client-id", CLIENT_ID,
                                "--oauth-client-secret-file", "-", "--oauth-scope", scope),
                        CLIENT_SECRET "\n", NULL)
            : tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", name, "--auth",
                                "oauth2", "--oauth-token-url", url, "--oauth-client-id", CLIENT_ID,
                                "--oauth-client-secret-file", "-"),
                        CLIENT_SECRET "\n", NULL);
    int status = p.status;
    if (status != 0)
        print_error("customer set --auth oauth2: exit %d: %s\n", status, p.err);
    tl_proc_free(&p);
    return status;
}

/* The token endpoint: answers `body` (status) to the right client credentials and form only. */
static void token_endpoint(fx *f, const char *path, int status, const char *body, const char *form)
{
    receiver_on(f->recv, &(receiver_rule){.path_prefix = path,
                                          .status = status,
                                          .body = body,
                                          .require_authorization = CLIENT_BASIC,
                                          .require_body = form});
}

/* The receiver: 200 to "Bearer token", 401 to anything else. */
static void webhook_wants(fx *f, const char *path, const char *token)
{
    char want[128];
    snprintf(want, sizeof want, "Bearer %s", token);
    receiver_on(f->recv, &(receiver_rule){.path_prefix = path,
                                          .status = 200,
                                          .body = "ok",
                                          .require_authorization = want});
}

static char *token_json(const char *token, const char *type, int expires_in)
{
    static char buf[256];
    if (expires_in > 0)
        snprintf(buf, sizeof buf,
                 "{\"access_token\":\"%s\",\"token_type\":\"%s\",\"expires_in\":%d}", token, type,
                 expires_in);
    else
        snprintf(buf, sizeof buf, "{\"access_token\":\"%s\",\"token_type\":\"%s\"}", token, type);
    return buf;
}

static void sql_refuses_bad_oauth2_settings(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    PGconn *c = f->db->conn;
#define SET(args) "SELECT pgpace.customer_set_oauth2('acme', " args ")"
    tl_expect_sql_error(c, SET("'ftp://h/t', 'id', 's3cret', NULL"), "22023", "auth.token_url",
                        "s3cret");
    tl_expect_sql_error(c, SET("E'https://h/t\\r\\nX: 1', 'id', 's3cret', NULL"), "22023",
                        "auth.token_url", "s3cret");
    tl_expect_sql_error(c, SET("'https://u:p@h/t', 'id', 's3cret', NULL"), "22023",
                        "auth.token_url", NULL);
    tl_expect_sql_error(c, SET("'https://h/' || repeat('t', 2048), 'id', 's3cret', NULL"), "22023",
                        "auth.token_url", NULL);
    tl_expect_sql_error(c, SET("'https://h/t', E'id\\r\\nX: 1', 's3cret', NULL"), "22023",
                        "auth.client_id", "s3cret");
    tl_expect_sql_error(c, SET("'https://h/t', '', 's3cret', NULL"), "22023", "auth.client_id",
                        NULL);
    tl_expect_sql_error(c, SET("'https://h/t', repeat('i', 257), 's3cret', NULL"), "22023",
                        "auth.client_id", NULL);
    tl_expect_sql_error(c, SET("'https://h/t', 'id', E's3cret\\nX: 1', NULL"), "22023",
                        "auth.client_secret", "s3cret");
    tl_expect_sql_error(c, SET("'https://h/t', 'id', NULL, NULL"), "22023", "auth.client_secret",
                        NULL);
    tl_expect_sql_error(c, SET("'https://h/t', 'id', repeat('s', 1025), NULL"), "22023",
                        "auth.client_secret", NULL);
    tl_expect_sql_error(c, SET("'https://h/t', 'id', 's3cret', E'read\\r\\nX: 1'"), "22023",
                        "auth.scope", "s3cret");
    tl_expect_sql_error(c, SET("'https://h/t', 'id', 's3cret', 'read  write'"), "22023",
                        "auth.scope", NULL);
    tl_expect_sql_error(c, SET("'https://h/t', 'id', 's3cret', 'a\"b'"), "22023", "auth.scope",
                        NULL);
    tl_expect_sql_error(c, SET("'https://h/t', 'id', 's3cret', repeat('s', 1025)"), "22023",
                        "auth.scope", NULL);
    tl_expect_sql_error(c, SET("NULL, 'id', 's3cret', NULL"), "22023", "auth.token_url", "s3cret");
    tl_expect_sql_error(c, "SELECT pgpace.customer_set_auth('acme', 'oauth2', 'id', 's3cret')",
                        "22023", "auth", "s3cret");
    tl_expect_sql_error(
        c, "SELECT pgpace.customer_set_oauth2('ghost', 'https://h/t', 'id', 's', NULL)", "P0002",
        "ghost", NULL);
    /* The table's constraints hold for a direct writer. */
    tl_expect_sql_error(c,
                        "UPDATE pgpace.customer SET auth_scheme = 'oauth2', auth_username = 'id', "
                        "auth_secret = 's' WHERE name = 'acme'",
                        "23514", "customer_auth_complete", NULL);
    tl_expect_sql_error(c,
                        "UPDATE pgpace.customer SET oauth_token_url = 'https://h/t' "
                        "WHERE name = 'acme'",
                        "23514", "customer_auth_complete", NULL);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE auth_scheme IS "
                                     "NULL AND oauth_token_url IS NULL"),
                     1);
    /* A good one, then Bearer clears the OAuth2 columns. */
    tl_exec(c, SET("'https://h/t', 'id', 's3cret', 'read write'"));
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE auth_scheme = "
                                     "'oauth2' AND auth_username = 'id' AND oauth_scope = 'read "
                                     "write'"),
                     1);
    tl_expect_sql_error(c,
                        "UPDATE pgpace.customer SET oauth_token_url = E'https://h/t\\nX' "
                        "WHERE name = 'acme'",
                        "23514", "customer_oauth_token_url_valid", NULL);
    tl_exec(c, "SELECT pgpace.customer_set_auth('acme', 'bearer', NULL, 'tok')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.customer WHERE auth_scheme = "
                                  "'bearer' AND oauth_token_url IS NULL AND oauth_scope IS NULL"),
                     1);
#undef SET

    /* pgpace_producer reads none of it. */
    char role[64], conninfo[700];
    snprintf(role, sizeof role, "producer_o_%d", (int)getpid());
    tl_exec(c, "DROP ROLE IF EXISTS %s", role);
    tl_exec(c, "CREATE ROLE %s LOGIN IN ROLE pgpace_producer", role);
    snprintf(conninfo, sizeof conninfo, "dbname=%s user=%s", f->db->name, role);
    PGconn *pc = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(pc), CONNECTION_OK);
    static const char *const reads[] = {
        "SELECT auth_secret FROM pgpace.customer",
        "SELECT oauth_token_url, oauth_scope FROM pgpace.customer",
    };
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        PGresult *res = PQexec(pc, reads[i]);
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (PQresultStatus(res) != PGRES_FATAL_ERROR || !st || strcmp(st, "42501") != 0)
            fail_msg("pgpace_producer ran %s (%s)", reads[i], st ? st : "no error");
        PQclear(res);
    }
    PGresult *res = PQexec(pc, "SELECT pgpace.customer_set_oauth2('acme', 'https://h/t', 'id', "
                               "'s', NULL)");
    const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (!st || strcmp(st, "42501") != 0)
        fail_msg("pgpace_producer may call customer_set_oauth2 (%s)", st ? st : "no error");
    PQclear(res);
    PQfinish(pc);
    tl_exec(c, "DROP ROLE %s", role);
}

static void cli_refuses_bad_oauth2_settings(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    char *crlf = tl_temp_file("s3cret\r\nX-Evil: 1\n");
    char *empty = tl_temp_file("\n");
    char big[1100];
    memset(big, 's', 1025);
    big[1025] = '\0';
    char *large = tl_temp_file(big);
    const char *const url = "https://tokens.example/oauth/token";
    const struct {
        const char *a[8];
        const char *flag, *want;
    } cases[] = {
        {{"--auth", "oauth2", "--oauth-client-id", "id", "--oauth-client-secret-file", "-"},
         "--oauth-token-url",
         "required"},
        {{"--auth", "oauth2", "--oauth-token-url", url, "--oauth-client-secret-file", "-"},
         "--oauth-client-id",
         "required"},
        {{"--auth", "oauth2", "--oauth-token-url", url, "--oauth-client-id", "id"},
         "--oauth-client-secret-file",
         "never taken from the command line"},
        {{"--oauth-token-url", url}, "--auth oauth2", "go with"},
        {{"--auth", "oauth2", "--oauth-token-url", "ftp://h/t"}, "--oauth-token-url", "http"},
        {{"--auth", "oauth2", "--oauth-token-url", "https://h/t\r\nX: 1"}, "--oauth-token-url", ""},
        {{"--auth", "oauth2", "--oauth-client-id", "id\r\nX: 1"},
         "--oauth-client-id",
         "control character"},
        {{"--auth", "oauth2", "--oauth-scope", "read\r\nX: 1"}, "--oauth-scope", "single spaces"},
        {{"--auth", "oauth2", "--oauth-scope", "read  write"}, "--oauth-scope", "single spaces"},
        {{"--auth", "oauth2", "--oauth-token-url", url, "--oauth-client-id", "id",
          "--oauth-client-secret-file", "/nonexistent/secret"},
         "--oauth-client-secret-file",
         "cannot open"},
        {{"--auth", "oauth2", "--oauth-token-url", url, "--oauth-client-id", "id",
          "--oauth-client-secret-file", crlf},
         "--oauth-client-secret-file",
         "control character"},
        {{"--auth", "oauth2", "--oauth-token-url", url, "--oauth-client-id", "id",
          "--oauth-client-secret-file", empty},
         "--oauth-client-secret-file",
         "1 to 1024 bytes"},
        {{"--auth", "oauth2", "--oauth-token-url", url, "--oauth-client-id", "id",
          "--oauth-client-secret-file", large},
         "--oauth-client-secret-file",
         "longer than 1024"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[20] = {"--db", f->db->conninfo, "customer", "set", "acme"};
        size_t n = 5;
        for (size_t k = 0; k < 8 && cases[i].a[k]; k++)
            argv[n++] = cases[i].a[k];
        argv[n] = NULL;
        tl_proc p = tl_pgpace(argv, "", NULL);
        if (p.status != 2 || !strstr(p.err, cases[i].flag) || !strstr(p.err, cases[i].want) ||
            strstr(p.err, "s3cret"))
            fail_msg("case %zu (%s): exit %d, stderr: %s", i, cases[i].flag, p.status, p.err);
        tl_proc_free(&p);
    }
    unlink(crlf);
    unlink(empty);
    unlink(large);
    free(crlf);
    free(empty);
    free(large);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                               "auth_scheme IS NULL"),
                     1);

    /* A good one: the secret from stdin (its newline dropped), shown only with --show-secrets. */
    assert_int_equal(set_oauth(f, "acme", "/token/acme", "hooks:write read"), 0);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.customer WHERE auth_scheme = "
                                  "'oauth2' AND auth_username = '" CLIENT_ID
                                  "' AND auth_secret = '" CLIENT_SECRET
                                  "' AND oauth_scope = 'hooks:write read'"),
                     1);
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "auth               oauth2");
    tl_assert_contains(p.out, "auth_credentials   (hidden)");
    tl_assert_contains(p.out, "/token/acme");
    tl_assert_contains(p.out, "oauth_scope        hooks:write read");
    if (strstr(p.out, "s3cr3t"))
        fail_msg("customer get shows the client secret without --show-secrets:\n%s", p.out);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme", "--show-secrets"),
                  NULL, NULL);
    tl_assert_contains(p.out, CLIENT_ID ":" CLIENT_SECRET);
    tl_proc_free(&p);
}

/* The metric line's value, or -1 when absent. */
static long long metric_value(fx *f, const char *series)
{
    char *m = fx_metrics(f);
    const char *at = m ? strstr(m, series) : NULL;
    long long v = at ? atoll(at + strlen(series) + 1) : -1;
    free(m);
    return v;
}

static void one_token_serves_many_deliveries(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "6000", "--mode", "unlimited"));
    assert_int_equal(set_oauth(f, "acme", "/token/acme", "hooks:write read"), 0);
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN1, "Bearer", 3600), FORM_SCOPE);
    webhook_wants(f, "/c/acme", TOKEN1);
    fx_run(f, NULL);
    fx_enqueue(f, "acme", NULL, 30);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 30, 15000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE outcome = 'success'"),
                     30);
    assert_int_equal(receiver_count(f->recv, "/token/"), 1);
    assert_int_equal(receiver_count_status(f->recv, "/token/", 200), 1);
    assert_int_equal(receiver_count_status(f->recv, "/c/acme", 200), 30);
    assert_int_equal(receiver_count_status(f->recv, "/c/acme", 401), 0);
    /* The token request: a form with the Basic client credentials, JSON wanted, no webhook
     * headers. */
    size_t n = receiver_count(f->recv, NULL);
    for (size_t i = 0; i < n; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        if (strncmp(rq.path, "/token/", 7) == 0) {
            char v[256];
            assert_string_equal(rq.content_type, "application/x-www-form-urlencoded");
            assert_int_equal(receiver_header(f->recv, i, "accept", v, sizeof v), 1);
            assert_string_equal(v, "application/json");
            assert_int_equal(receiver_header(f->recv, i, "webhook-signature", NULL, 0), 0);
            assert_int_equal(receiver_header(f->recv, i, "webhook-id", NULL, 0), 0);
        }
        free(rq.body);
    }
    assert_int_equal(
        metric_value(f, "pgpace_oauth_token_requests_total{customer=\"acme\",result=\"ok\"}"), 1);
    fx_stop_service(f, 15000);
}

static long long delivered(fx *f)
{
    return tl_query_int(f->db->conn,
                        "SELECT count(*) FROM pgpace.delivery_attempt WHERE outcome = 'success'");
}

static void short_lived_token_is_fetched_again(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "6000", "--mode", "unlimited"));
    assert_int_equal(set_oauth(f, "acme", "/token/acme", NULL), 0);
    /* expires_in 1: refreshed 100 ms (10 %) before it expires. */
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN1, "bearer", 1),
                   "grant_type=client_credentials");
    webhook_wants(f, "/c/acme", TOKEN1);
    fx_run(f, NULL);
    /* One item at a time until a second token was fetched. */
    long long sent = 0;
    for (int tries = 0; tries < 400 && receiver_count(f->recv, "/token/") < 2; tries++) {
        fx_enqueue(f, "acme", NULL, 1);
        sent++;
        assert_int_equal(tl_wait_query_at_least(f->db->conn, sent, 10000,
                                                "SELECT count(*) FROM pgpace.delivery_attempt "
                                                "WHERE outcome = 'success'"),
                         sent);
    }
    assert_int_equal(receiver_count(f->recv, "/token/"), 2);
    assert_int_equal(receiver_count_status(f->recv, "/c/acme", 401), 0);
    /* Several deliveries used the first token before it was fetched again, and not before
     * most of its second had passed. */
    assert_true(sent >= 2);
    receiver_request a, b;
    size_t n = receiver_count(f->recv, NULL);
    size_t first = n, second = n;
    for (size_t i = 0; i < n; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        free(rq.body);
        if (strncmp(rq.path, "/token/", 7) == 0) {
            if (first == n)
                first = i;
            else
                second = i;
        }
    }
    assert_int_equal(receiver_get(f->recv, first, &a), 0);
    assert_int_equal(receiver_get(f->recv, second, &b), 0);
    assert_true(b.at_us - a.at_us >= 800000);
    free(a.body);
    free(b.body);
    assert_int_equal(delivered(f), sent);
    fx_stop_service(f, 15000);
}

static void rotated_token_is_fetched_again_once_on_401(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "6000", "--mode", "unlimited"));
    assert_int_equal(set_oauth(f, "acme", "/token/acme", NULL), 0);
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN1, "Bearer", 3600),
                   "grant_type=client_credentials");
    webhook_wants(f, "/c/acme", TOKEN1);
    fx_run(f, NULL);
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE outcome = 'success'"),
                     1);
    /* The receiver rotates: only TOKEN2 is good now, and the endpoint hands it out. */
    receiver_clear_rules(f->recv);
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN2, "Bearer", 3600),
                   "grant_type=client_credentials");
    webhook_wants(f, "/c/acme", TOKEN2);
    long long item = fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 2, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE outcome = 'success'"),
                     2);
    assert_int_equal(receiver_count(f->recv, "/token/"), 2);
    assert_int_equal(receiver_count_status(f->recv, "/c/acme", 401), 1);
    assert_int_equal(receiver_count_status(f->recv, "/c/acme", 200), 2);
    /* The fresh token went out right away: one attempt, a success, for the item. */
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.delivery_attempt WHERE item_id = "
                                  "%lld AND attempt = 1 AND outcome = 'success' AND http_status = "
                                  "200",
                                  item),
                     1);
    assert_int_equal(
        tl_query_int(f->db->conn,
                     "SELECT count(*) FROM pgpace.delivery_attempt WHERE item_id = %lld", item),
        1);

    /* A receiver that refuses every token: one fresh token for the attempt, then it fails with
     * the 401 like any other (dead-lettered: dead_letter_on_4xx is on by default). */
    receiver_clear_rules(f->recv);
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN1, "Bearer", 3600),
                   "grant_type=client_credentials");
    webhook_wants(f, "/c/acme", "never-this-one");
    item = fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                            "item_id = %lld AND http_status = 401 AND "
                                            "outcome = 'dead'",
                                            item),
                     1);
    assert_int_equal(receiver_count(f->recv, "/token/"), 3);
    assert_int_equal(receiver_count_status(f->recv, "/c/acme", 401), 3);
    fx_stop_service(f, 15000);
}

static void token_endpoint_failures_are_classified_and_retried(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme",
                TL_ARGV("--rate", "6000", "--mode", "unlimited", "--max-attempts", "200"));
    assert_int_equal(set_oauth(f, "acme", "/token/acme", NULL), 0);
    webhook_wants(f, "/c/acme", TOKEN1);
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/token/acme",
                                          .status = 500,
                                          .body = "{\"error\":\"server_error\"}"});
    fx_run(f, "delivery.breaker_failures = 1000\n");
    long long item = fx_enqueue(f, "acme", NULL, 3);
    static const struct {
        const char *body, *cls;
        int status;
    } phases[] = {
        {NULL, "oauth_http", 500},
        {"this is not json", "oauth_response", 200},
        {"{\"access_token\":\"" TOKEN1 "\",\"token_type\":\"mac\"}", "oauth_response", 200},
        {"{\"token_type\":\"Bearer\"}", "oauth_response", 200},
        {"{\"access_token\":\"has space\",\"token_type\":\"Bearer\"}", "oauth_response", 200},
        {"{\"access_token\":\"" TOKEN1 "\",\"token_type\":\"Bearer\",\"expires_in\":-5}",
         "oauth_response", 200},
    };
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        if (phases[i].body) {
            receiver_clear_rules(f->recv);
            webhook_wants(f, "/c/acme", TOKEN1);
            token_endpoint(f, "/token/acme", phases[i].status, phases[i].body,
                           "grant_type=client_credentials");
        }
        long long before = tl_query_int(f->db->conn,
                                        "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                        "error_class = '%s'",
                                        phases[i].cls);
        size_t tokens = receiver_count(f->recv, "/token/");
        /* A new request to the endpoint, and attempts failed with its class after it. */
        assert_true(receiver_wait(f->recv, "/token/", tokens + 1, 10000) > tokens);
        assert_true(tl_wait_query_at_least(f->db->conn, before + 1, 10000,
                                           "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                           "error_class = '%s' AND outcome = 'retry'",
                                           phases[i].cls) > before);
    }
    assert_true(
        metric_value(
            f, "pgpace_oauth_token_requests_total{customer=\"acme\",result=\"oauth_http\"}") >= 1);
    assert_true(metric_value(f, "pgpace_oauth_token_requests_total{customer=\"acme\",result="
                                "\"oauth_response\"}") >= 5);
    /* `pgpace stats` names the failure of the latest attempt. */
    tl_proc st =
        tl_pgpace(TL_ARGV("--db", f->db->conninfo, "stats", "--customer", "acme"), NULL, NULL);
    assert_int_equal(st.status, 0);
    tl_assert_contains(st.out, "last_error");
    tl_assert_contains(st.out, " oauth_response ");
    tl_proc_free(&st);
    /* No webhook went out without a token. */
    assert_int_equal(receiver_count(f->recv, "/c/acme"), 0);
    /* Fixed: every item is delivered, none dead-lettered. */
    receiver_clear_rules(f->recv);
    webhook_wants(f, "/c/acme", TOKEN1);
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN1, "Bearer", 3600),
                   "grant_type=client_credentials");
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 3, 15000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                            "outcome = 'success' AND item_id >= %lld",
                                            item),
                     3);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    assert_int_equal(receiver_count_status(f->recv, "/c/acme", 200), 3);
    fx_stop_service(f, 15000);
}

static void token_url_outside_allow_cidrs_is_ssrf(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "6000", "--mode", "unlimited"));
    /* 127.0.0.2 is loopback too, but only 127.0.0.1 is allowed below. */
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.2:%d/token/acme", receiver_port(f->recv));
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--auth",
                                  "oauth2", "--oauth-token-url", url, "--oauth-client-id",
                                  CLIENT_ID, "--oauth-client-secret-file", "-"),
                          CLIENT_SECRET, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN1, "Bearer", 3600),
                   "grant_type=client_credentials");
    fx_run(f, "delivery.allow_cidrs = 127.0.0.1/32\n");
    long long item = fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                            "item_id = %lld AND error_class = 'ssrf'",
                                            item),
                     1);
    /* Refused before connecting: nothing reached the receiver, the webhook was never sent. */
    assert_int_equal(receiver_count(f->recv, NULL), 0);
    assert_true(
        metric_value(f, "pgpace_oauth_token_requests_total{customer=\"acme\",result=\"ssrf\"}") >=
        1);
    fx_stop_service(f, 15000);
}

/* The token request takes the customer's egress proxy, as its webhooks do: refused by the
 * proxy, it fails with class "proxy" and never reaches the endpoint; let through, it does. */
static void token_request_takes_the_customer_proxy(void **state)
{
    fx *f = *state;
    connect_proxy *proxy = connect_proxy_start();
    assert_non_null(proxy);
    char proxy_url[64], target[64];
    snprintf(proxy_url, sizeof proxy_url, "http://127.0.0.1:%d", connect_proxy_port(proxy));
    snprintf(target, sizeof target, "CONNECT 127.0.0.1:%d", receiver_port(f->recv));
    fx_customer(f, "acme",
                TL_ARGV("--rate", "6000", "--mode", "unlimited", "--max-attempts", "100", "--proxy",
                        proxy_url));
    assert_int_equal(set_oauth(f, "acme", "/token/acme", NULL), 0);
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN1, "Bearer", 3600),
                   "grant_type=client_credentials");
    webhook_wants(f, "/c/acme", TOKEN1);
    connect_proxy_refuse(proxy, 403);
    fx_run(f, "delivery.breaker_failures = 1000\n");
    long long item = fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                            "item_id = %lld AND error_class = 'proxy'",
                                            item),
                     1);
    assert_int_equal(receiver_count(f->recv, NULL), 0);
    assert_true(connect_proxy_count_line(proxy, target) >= 1);
    connect_proxy_refuse(proxy, 0);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                            "item_id = %lld AND outcome = 'success'",
                                            item),
                     1);
    assert_int_equal(receiver_count_status(f->recv, "/token/", 200), 1);
    assert_true(connect_proxy_relayed(proxy) >= 1);
    fx_stop_service(f, 15000);
    connect_proxy_stop(proxy);
}

static void no_secret_or_token_in_the_log(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "6000", "--mode", "unlimited"));
    assert_int_equal(set_oauth(f, "acme", "/token/acme", NULL), 0);
    token_endpoint(f, "/token/acme", 200, token_json(TOKEN1, "Bearer", 3600),
                   "grant_type=client_credentials");
    webhook_wants(f, "/c/acme", TOKEN2); /* 401: the refused token is handled too */
    fx_run(f, "log.level = debug\ndelivery.breaker_failures = 1000\n"
              "delivery.dead_letter_on_4xx = false\n");
    fx_enqueue(f, "acme", NULL, 2);
    assert_true(receiver_wait(f->recv, "/c/acme", 4, 10000) >= 4);
    /* Then a token endpoint failure and a bad answer, which are logged. */
    receiver_clear_rules(f->recv);
    webhook_wants(f, "/c/acme", TOKEN2);
    token_endpoint(f, "/token/acme", 200,
                   "{\"access_token\":\"" TOKEN2 "\",\"token_type\":\"mac\"}",
                   "grant_type=client_credentials");
    assert_true(fx_wait_log(f, "event=oauth_token_failed", 10000));
    fx_stop_service(f, 15000);
    char *log = fx_log(f);
    tl_assert_contains(log, "event=oauth_token_fetched");
    static const char *const secrets[] = {CLIENT_SECRET, "s3cr3t%3Anot", CLIENT_BASIC + 6, TOKEN1,
                                          TOKEN2};
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
        if (strstr(log, secrets[i]))
            fail_msg("the service log holds a secret (%s):\n%s", secrets[i], log);
    free(log);
}

/* While a slow token request is in flight: a customer whose auth changes meanwhile sends with
 * what it has now (not the old set's token, which its receiver would refuse), and an item whose
 * deadline passes meanwhile is dead-lettered as expired, never sent late. */
static void auth_change_and_deadline_during_a_token_wait(void **state)
{
    fx *f = *state;
    fx_customer(f, "sw", TL_ARGV("--rate", "600"));
    fx_customer(f, "late", TL_ARGV("--rate", "600"));
    assert_int_equal(set_oauth(f, "sw", "/token/sw", NULL), 0);
    assert_int_equal(set_oauth(f, "late", "/token/late", NULL), 0);
    webhook_wants(f, "/c/sw", "static-token");
    webhook_wants(f, "/c/late", TOKEN1);
    static const char json[] = "{\"access_token\":\"" TOKEN1 "\",\"token_type\":\"Bearer\"}";
    receiver_on(
        f->recv,
        &(receiver_rule){.path_prefix = "/token/", .status = 200, .body = json, .delay_ms = 1500});
    fx_run(f, "log.level = debug\n");
    fx_enqueue(f, "sw", NULL, 1);
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('late', '{}', expires_at => now() + "
                         "interval '400 milliseconds')");
    assert_true(fx_wait_log(f, "event=oauth_token_request customer=sw", 10000));
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "customer", "set", "sw", "--auth", "bearer:static-token"),
        NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(receiver_wait(f->recv, "/c/sw", 1, 10000), 1);
    assert_int_equal(receiver_count_status(f->recv, "/c/sw", 200), 1);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT count(*) FROM pgpace.dead_letter d JOIN "
                                            "pgpace.customer c ON c.id = d.customer_id WHERE "
                                            "c.name = 'late' AND d.last_error = 'expired'"),
                     1);
    assert_int_equal(receiver_count(f->recv, "/c/late"), 0);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter d JOIN "
                                               "pgpace.customer c ON c.id = d.customer_id WHERE "
                                               "c.name = 'sw'"),
                     0);
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(sql_refuses_bad_oauth2_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(cli_refuses_bad_oauth2_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(one_token_serves_many_deliveries, setup, teardown),
        cmocka_unit_test_setup_teardown(short_lived_token_is_fetched_again, setup, teardown),
        cmocka_unit_test_setup_teardown(rotated_token_is_fetched_again_once_on_401, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(token_endpoint_failures_are_classified_and_retried, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(token_url_outside_allow_cidrs_is_ssrf, setup, teardown),
        cmocka_unit_test_setup_teardown(token_request_takes_the_customer_proxy, setup, teardown),
        cmocka_unit_test_setup_teardown(no_secret_or_token_in_the_log, setup, teardown),
        cmocka_unit_test_setup_teardown(auth_change_and_deadline_during_a_token_wait, setup,
                                        teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
