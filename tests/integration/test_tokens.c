/* test_tokens.c - the admin API's tokens at SQL level (migration 0021, 20_tokens.sql): created
 * from a hash with the scopes given (repeats dropped), each bad argument refused naming its
 * field, names never reused, revoked once (its row kept), listed without hashes, every change
 * NOTIFYing pgpace_token, and none of it open to the producer role. */
#include "fixture.h"
#include "status_client.h"
#include "testlib.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int setup(void **state)
{
    *state = tl_fresh_db(1);
    return 0;
}

static int teardown(void **state)
{
    tl_drop_db(*state);
    return 0;
}

#define HASH_A                                                                                     \
    "'\\x"                                                                                         \
    "0011223344556677889900112233445566778899001122334455667788990011'::bytea"
#define HASH_B                                                                                     \
    "'\\x"                                                                                         \
    "ff11223344556677889900112233445566778899001122334455667788990011'::bytea"

static void create_list_revoke(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "LISTEN pgpace_token");
    assert_true(
        tl_query_int(c, "SELECT pgpace.token_create('ci', ARRAY['read','write','read'], " HASH_A
                        ")") > 0);
    /* The change was announced. */
    PQconsumeInput(c);
    PGnotify *n = PQnotifies(c);
    assert_non_null(n);
    assert_string_equal(n->relname, "pgpace_token");
    PQfreemem(n);
    char *row = tl_query_str(c, "SELECT name || ' ' || scopes || ' ' || (revoked_at IS NULL) "
                                "FROM pgpace.token_list()");
    assert_string_equal(row, "ci read,write true");
    free(row);
    /* The list has no column with the hash. */
    char *cols = tl_query_str(c, "SELECT string_agg(a, ',') FROM unnest((SELECT proargnames "
                                 "FROM pg_proc WHERE proname = 'token_list')) a");
    assert_null(strstr(cols, "hash"));
    free(cols);
    char *at = tl_query_str(c, "SELECT pgpace.token_revoke('ci')::text");
    char *again = tl_query_str(c, "SELECT pgpace.token_revoke('ci')::text");
    assert_string_equal(at, again); /* revoked once */
    free(at);
    free(again);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.api_token WHERE name = 'ci' "
                                     "AND revoked_at IS NOT NULL"),
                     1);
    /* Names are not reused, revoked ones included; nor are hashes. */
    tl_expect_sql_error(c, "SELECT pgpace.token_create('ci', ARRAY['read'], " HASH_B ")", "23505",
                        "name: token 'ci' exists", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.token_create('other', ARRAY['read'], " HASH_A ")",
                        "23505", "", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.token_revoke('nobody')", "P0002", "unknown token", NULL);
}

static void bad_arguments_name_their_field(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_expect_sql_error(c, "SELECT pgpace.token_create('has space', ARRAY['read'], " HASH_A ")",
                        "22023", "name: must be", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.token_create('t', ARRAY[]::text[], " HASH_A ")", "22023",
                        "scopes: give at least one", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.token_create('t', ARRAY['read','admin'], " HASH_A ")",
                        "22023", "scopes: unknown scope 'admin'", NULL);
    tl_expect_sql_error(c, "SELECT pgpace.token_create('t', ARRAY['read'], '\\x00'::bytea)",
                        "22023", "token_hash: must be the 32 bytes", NULL);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.api_token"), 0);
}

static void producers_cannot_manage_tokens(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "CREATE ROLE tok_producer LOGIN IN ROLE pgpace_producer");
    tl_exec(c, "SET ROLE tok_producer");
    tl_expect_sql_error(c, "SELECT pgpace.token_create('t', ARRAY['read'], " HASH_A ")", "42501",
                        "permission denied", NULL);
    tl_expect_sql_error(c, "SELECT * FROM pgpace.token_list()", "42501", "permission denied", NULL);
    tl_expect_sql_error(c, "SELECT * FROM pgpace.api_token", "42501", "permission denied", NULL);
    tl_exec(c, "RESET ROLE");
    tl_exec(c, "DROP ROLE tok_producer");
}

/* `pgpace token create|list|revoke`: the token is printed once, its SHA-256 alone stored; the
 * list shows neither; scopes given twice or with spaces are one list; errors name the field. */
static void cli_create_list_revoke(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "token", "create", "ci", "--scope", "read",
                                  "--scope", "write, read"),
                          NULL, NULL);
    if (p.status != 0)
        fail_msg("token create: exit %d: %s", p.status, p.err);
    char token[80] = "";
    assert_int_equal(sscanf(p.out, "%79s", token), 1);
    assert_int_equal(strlen(token), 4 + 43);
    assert_int_equal(strncmp(token, "pgp_", 4), 0);
    assert_int_equal(strspn(token + 4,
                            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                            "-_"),
                     43);
    tl_assert_contains(p.err, "shown this once");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.api_token WHERE name = 'ci' AND "
                                  "token_hash = sha256(convert_to('%s', 'UTF8')) AND scopes = "
                                  "ARRAY['read','write']",
                                  token),
                     1);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "token", "list"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "read,write");
    assert_null(strstr(p.out, token + 4));
    tl_proc_free(&p);
    /* A second token is another secret. */
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "token", "create", "ci2", "--scope", "status"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    assert_null(strstr(p.out, token));
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "token", "create", "bad", "--scope", "admin"), NULL,
                  NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "scopes: unknown scope 'admin'");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "token", "create", "none"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "missing --scope");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "token", "revoke", "ci"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "revoked token ci at ");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "token", "revoke", "nope"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "unknown token 'nope'");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.api_token WHERE "
                                            "revoked_at IS NULL"),
                     1);
}

/* ---- a running service: tokens reach its admin listener on NOTIFY ---------------------------- */

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* POST /v1/items {"customer":"acme","payload":{}} with `token` (NULL: none); the status. */
static long post_item(int port, const char *token)
{
    CURL *h = curl_easy_init();
    assert_non_null(h);
    char url[96], auth[160];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/items", port);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hdrs = curl_slist_append(hdrs, auth);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, "{\"customer\":\"acme\",\"payload\":{}}");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return status;
}

/* Polls post_item until it answers `want` (a change reaches the listener on NOTIFY). */
static void wait_post(int port, const char *token, long want, const char *what)
{
    long got = 0;
    for (long long end = tl_now_ms() + 15000; tl_now_ms() < end;) {
        if ((got = post_item(port, token)) == want)
            return;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("%s: POST /v1/items answered %ld, want %ld", what, got, want);
}

static char *token_create(fx *f, const char *name, const char *scope)
{
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "token", "create", name, "--scope", scope), NULL, NULL);
    if (p.status != 0)
        fail_msg("token create %s: %s", name, p.err);
    char *tok = calloc(1, 80);
    assert_non_null(tok);
    assert_int_equal(sscanf(p.out, "%79s", tok), 1);
    tl_proc_free(&p);
    return tok;
}

static void service_takes_tokens_on_notify(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    fx_run(f, NULL);
    int port = fx_admin_port(f);
    /* No enqueue_token configured and no API token: the endpoint is off. */
    assert_int_equal(post_item(port, "anything"), 503);
    char *bot = token_create(f, "bot", "enqueue");
    char *bot2 = token_create(f, "bot2", "enqueue");
    char *reader = token_create(f, "reader", "read");
    wait_post(port, bot, 201, "a new enqueue token");
    assert_int_equal(post_item(port, bot2), 201);
    wait_post(port, reader, 403, "a token without the enqueue scope");
    assert_int_equal(post_item(port, "pgp_unknown"), 401);
    assert_int_equal(post_item(port, NULL), 401);
    /* Revoked: refused from the next reload on; the other token still enqueues. */
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "token", "revoke", "bot"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    wait_post(port, bot, 401, "a revoked token");
    assert_int_equal(post_item(port, bot2), 201);
    /* Only the accepted requests enqueued: bot's first, bot2's two, and the polls that were
     * answered 201 before the revocation reached the listener. */
    long long items = tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.item");
    assert_true(items >= 3);
    sc_answer a = sc_http_get(port, "/v1/status", NULL, NULL);
    assert_int_equal(a.status, 200); /* no status scope anywhere: open as before */
    sc_answer_free(&a);
    char *viewer = token_create(f, "viewer", "status");
    char bearer[128];
    snprintf(bearer, sizeof bearer, "Bearer %s", viewer);
    long got = 0;
    for (long long end = tl_now_ms() + 15000; tl_now_ms() < end && got != 401;) {
        a = sc_http_get(port, "/v1/status", NULL, NULL);
        got = a.status;
        sc_answer_free(&a);
    }
    assert_int_equal(got, 401);
    a = sc_http_get(port, "/v1/status", bearer, NULL);
    assert_int_equal(a.status, 200);
    sc_answer_free(&a);
    char *log = fx_log(f);
    /* Tokens never reach the log. */
    assert_null(strstr(log, bot + 4));
    assert_null(strstr(log, viewer + 4));
    free(log);
    free(bot);
    free(bot2);
    free(reader);
    free(viewer);
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(create_list_revoke, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_arguments_name_their_field, setup, teardown),
        cmocka_unit_test_setup_teardown(producers_cannot_manage_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(cli_create_list_revoke, setup, teardown),
        cmocka_unit_test_setup_teardown(service_takes_tokens_on_notify, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
