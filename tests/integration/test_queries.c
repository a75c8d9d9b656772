/* test_queries.c - every query that declares its shape (`-- @params:` / `-- @columns:` in
 * sql/queries/) is what PostgreSQL says it is: prepared on a migrated database and described,
 * it takes the declared number of parameters and returns the declared columns, by name and in
 * order. The C code indexes results by those declarations, so a query edited without its
 * declaration (or the reverse) fails here rather than as a wrong field read at run time. */
#include "testlib.h"

#include "dispatch/internal.h"
#include "sql_embed.h"
#include "strbuf.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void declared_shapes_match_the_server(void **state)
{
    tl_db *db = *state;
    /* The service's statements, and those of migrate that read results, are all declared (their
     * code has no other way to index them). */
    static const char *const must[] = {"run_backstop",
                                       "run_breaker",
                                       "run_carriers",
                                       "run_claim",
                                       "run_customers",
                                       "run_finalize",
                                       "run_finalize_success",
                                       "run_frontier",
                                       "run_key_purge",
                                       "run_metrics",
                                       "run_pace",
                                       "run_partitions",
                                       "run_pause",
                                       "run_retention",
                                       "run_session",
                                       "run_try_lock",
                                       "schema_version",
                                       "http_enqueue",
                                       "migrate_applied",
                                       "migrate_function_applied",
                                       "migrate_function_forget"};
    for (size_t m = 0; m < sizeof must / sizeof *must; m++) {
        bool found = false;
        for (size_t i = 0; i < sql_query_shapes_count; i++)
            found = found || strcmp(sql_query_shapes[i].name, must[m]) == 0;
        if (!found)
            fail_msg("%s.sql declares no shape", must[m]);
    }
    int checked = 0;
    for (size_t i = 0; i < sql_query_shapes_count; i++) {
        const struct sql_query_shape *q = &sql_query_shapes[i];
        char name[80];
        snprintf(name, sizeof name, "shape_%zu", i);
        PGresult *prep = PQprepare(db->conn, name, q->text, 0, NULL);
        if (PQresultStatus(prep) != PGRES_COMMAND_OK)
            fail_msg("%s.sql does not prepare: %s", q->name, PQresultErrorMessage(prep));
        PQclear(prep);
        PGresult *desc = PQdescribePrepared(db->conn, name);
        assert_int_equal(PQresultStatus(desc), PGRES_COMMAND_OK);
        if (q->nparams >= 0 && PQnparams(desc) != q->nparams)
            fail_msg("%s.sql: @params declares %d, the server counts %d", q->name, q->nparams,
                     PQnparams(desc));
        if (q->ncolumns >= 0) {
            if (PQnfields(desc) != q->ncolumns)
                fail_msg("%s.sql: @columns declares %d, the server returns %d", q->name,
                         q->ncolumns, PQnfields(desc));
            for (int c = 0; c < q->ncolumns; c++)
                if (strcmp(PQfname(desc, c), q->columns[c]) != 0)
                    fail_msg("%s.sql: column %d is \"%s\", declared \"%s\"", q->name, c + 1,
                             PQfname(desc, c), q->columns[c]);
        }
        PQclear(desc);
        checked++;
    }
    print_message("# %d declared query shapes checked against the server\n", checked);
    assert_true(checked >= (int)(sizeof must / sizeof *must));
}

/* The plan of one statement for the given parameters (string literals), as EXPLAIN prints it;
 * owned by the caller. */
static char *plan_of(PGconn *conn, const char *sql, const char *params)
{
    PGresult *prep = PQprepare(conn, "planned", sql, 0, NULL);
    if (PQresultStatus(prep) != PGRES_COMMAND_OK)
        fail_msg("prepare: %s", PQresultErrorMessage(prep));
    PQclear(prep);
    char explain[512];
    snprintf(explain, sizeof explain, "EXPLAIN EXECUTE planned(%s)", params);
    PGresult *res = PQexec(conn, explain);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", explain, PQresultErrorMessage(res));
    size_t len = 1;
    for (int r = 0; r < PQntuples(res); r++)
        len += strlen(PQgetvalue(res, r, 0)) + 1;
    char *plan = calloc(1, len);
    assert_non_null(plan);
    for (int r = 0; r < PQntuples(res); r++) {
        strcat(plan, PQgetvalue(res, r, 0));
        strcat(plan, "\n");
    }
    PQclear(res);
    PGresult *dealloc = PQexec(conn, "DEALLOCATE planned");
    assert_int_equal(PQresultStatus(dealloc), PGRES_COMMAND_OK);
    PQclear(dealloc);
    return plan;
}

/* Whether a plan line is a sequential scan of the queue or of a dead-letter partition the
 * planner thinks holds rows (an empty partition is read by a sequential scan of nothing). */
static bool reads_by_seq_scan(const char *line)
{
    if (strstr(line, "Seq Scan on queue"))
        return true;
    const char *rows = strstr(line, "rows=");
    return strstr(line, "Seq Scan on dead_letter") && rows && atol(rows + 5) > 1;
}

/* Fails the test when a plan reads the queue or the dead letters by a sequential scan, quoting
 * the scans of those tables (a whole plan is longer than a failure message). */
static void assert_probes_only(const char *what, char *plan)
{
    bool seq = false;
    char scans[1500] = "";
    for (char *line = strtok(plan, "\n"); line; line = strtok(NULL, "\n")) {
        seq = seq || reads_by_seq_scan(line);
        if ((strstr(line, " on queue") || strstr(line, " on dead_letter")) &&
            strlen(scans) + strlen(line) + 2 < sizeof scans) {
            strcat(scans, line);
            strcat(scans, "\n");
        }
    }
    free(plan);
    if (seq)
        fail_msg("%s reads by a sequential scan where it should probe an index:\n%s", what, scans);
}

/* A few customers holding the whole queue (and the dead letters) while many hold nothing is the
 * common shape (a backlog or two, a receiver that dead-letters everything, among quiet tenants),
 * and it is the one where the statistics mislead: they say every customer has (rows / those
 * few) rows. The per-customer counts and probes must stay index probes then. They did not: at
 * 1,000,000 customers beside four 250,000-item backlogs, a 2,000-customer slice of the queue
 * gauges (run_metrics) was a sequential scan of the queue per customer (104 s instead of 0.19
 * s, every claim waiting behind it until statement_timeout), the backstop's "is this pair due"
 * read the whole queue for a pair with nothing due (89 ms a pair), and `pgpace stats` (the
 * customer_stats view) cost 65-73 ms a customer. At this test's size (4 x 25,000 items, a
 * quarter of them also dead letters) the old forms fail here too: run_metrics once its count
 * cap is well under the rows the statistics give a customer (as 100,000 was under 238,000
 * there), the backstop as it was, and the view on its dead-letter count. */
static void per_customer_probes_stay_index_probes_when_few_customers_hold_the_queue(void **state)
{
    tl_db *db = *state;
    tl_exec(db->conn, "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, "
                      "signing_secrets, paused) SELECT 'whale' || g, 'spaced', 600, "
                      "'http://127.0.0.1:9/w', ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], "
                      "true FROM generate_series(1, 4) g");
    tl_exec(db->conn, "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, "
                      "signing_secrets) SELECT 'shop' || g, 'spaced', 60, 'http://127.0.0.1:9/s', "
                      "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] "
                      "FROM generate_series(1, 2000) g");
    tl_exec(db->conn,
            "WITH i AS (INSERT INTO pgpace.item (customer_id, payload) "
            "SELECT c.id, '{}' FROM generate_series(1, 25000) g, pgpace.customer c "
            "WHERE c.name LIKE 'whale%%' ORDER BY g, c.id RETURNING id, customer_id, run_at) "
            "INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, "
            "max_attempts) SELECT id, customer_id, '', 0, run_at, 12 FROM i");
    tl_exec(db->conn, "INSERT INTO pgpace.dead_letter (item_id, customer_id, attempts, last_error) "
                      "SELECT q.item_id, q.customer_id, 1, 'http:500' FROM pgpace.queue q "
                      "WHERE q.item_id %% 4 = 0");
    tl_exec(db->conn, "ANALYZE pgpace.queue");
    tl_exec(db->conn, "ANALYZE pgpace.dead_letter");
    tl_exec(db->conn, "ANALYZE pgpace.customer");
    tl_exec(db->conn, "SET jit = off"); /* as the dispatcher's session */
    char first[32];
    snprintf(first, sizeof first, "'%lld'", -9223372036854775807LL - 1);
    static const char *const caps[] = {"100000", "1000"};
    for (size_t i = 0; i < sizeof caps / sizeof *caps; i++) {
        char params[128], what[64];
        snprintf(params, sizeof params, "%s, '2000', '%s'", first, caps[i]);
        snprintf(what, sizeof what, "run_metrics (count cap %s)", caps[i]);
        assert_probes_only(what, plan_of(db->conn, sql_q_run_metrics, params));
    }
    char params[128];
    snprintf(params, sizeof params, "%s, '', '5000'", first);
    assert_probes_only("run_backstop", plan_of(db->conn, sql_q_run_backstop, params));
    assert_probes_only("stats (every customer)", plan_of(db->conn, sql_q_stats, "NULL"));
    assert_probes_only("stats (one customer)", plan_of(db->conn, sql_q_stats, "'shop5'"));
    assert_probes_only("stats --watch", plan_of(db->conn, sql_q_stats_watch, "NULL"));
}

/* Whether two parsed customer rows are the same, field by field; the first that differs into
 * `what`. */
static bool same_text(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool same_row(const customer_row *a, const customer_row *b, const char **what)
{
#define SAME(f, eq)                                                                                \
    if (!(eq)) {                                                                                   \
        *what = #f;                                                                                \
        return false;                                                                              \
    }
#define SAME_NUM(f) SAME(f, a->f == b->f)
#define SAME_STR(f) SAME(f, same_text(a->f, b->f))
    SAME_NUM(id);
    SAME_STR(name);
    SAME_STR(mode);
    SAME_STR(url);
    SAME_STR(secrets);
    SAME_STR(headers);
    SAME_STR(oauth_token_url);
    SAME_STR(oauth_client_id);
    SAME_STR(oauth_client_secret);
    SAME_STR(oauth_scope);
    SAME_STR(proxy);
    SAME_STR(client_cert);
    SAME_STR(client_key);
    SAME_NUM(rate);
    SAME_NUM(burst);
    SAME_NUM(max_in_flight);
    SAME_NUM(connect_timeout_ms);
    SAME_NUM(request_timeout_ms);
    SAME_NUM(paused);
    SAME_NUM(disabled);
    SAME_STR(breaker_state);
    SAME_NUM(breaker_failures);
    SAME_NUM(breaker_trips);
    SAME_NUM(breaker_open_until_us);
    SAME_NUM(failing_since_us);
    SAME_NUM(disabled_at_us);
    SAME_NUM(throttle_decrease);
    SAME_NUM(throttle_increase);
    SAME_NUM(throttle_floor);
    SAME_NUM(tenant_id);
    SAME_NUM(tenant_rate);
    SAME_NUM(tenant_burst);
    SAME_NUM(grouped);
    SAME_STR(limit_windows);
    SAME_STR(tenant_limit_windows);
    SAME_NUM(ratelimit_headers);
#undef SAME_STR
#undef SAME_NUM
#undef SAME
    return true;
}

/* The start-up load (leader.c) reads most customers by run_customers_page.sql, from the
 * customer's row alone, and reads whole (run_customers.sql, by id) those run_customers_extra.sql
 * lists and those the page marks. For every other customer the page, as the leader parses it
 * (customer_page_row_parse), is what run_customers.sql gives; every customer whose row needs
 * another table is listed (an open breaker, a failing streak, a parent, its endpoints), and
 * every one with headers, auth, OAuth2, a certificate, a proxy or windows is marked. */
static void startup_page_rows_are_the_full_rows_or_read_whole(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "INSERT INTO pgpace.customer (name, mode, rate_per_minute, burst, webhook_url, "
               "signing_secrets) SELECT n, 'spaced', 60, 2, 'https://' || n || '.example.com/h', "
               "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', "
               "'whsec_c2Vjb25kc2VjcmV0c2Vjb25kc2VjcmV0MTI='] FROM unnest(ARRAY['plain', "
               "'basic', 'bearer', 'oauth', 'hdrs', 'cert', 'proxied', 'limited', 'disabled', "
               "'tuned', 'broken', 'failing', 'parent', 'paused', 'batchy', 'lonely']) n");
    tl_exec(c, "UPDATE pgpace.customer SET auth_scheme = 'basic', auth_username = 'u', "
               "auth_secret = 's3cr:et' WHERE name = 'basic'");
    tl_exec(c, "UPDATE pgpace.customer SET auth_scheme = 'bearer', auth_secret = 'tok' "
               "WHERE name = 'bearer'");
    tl_exec(c, "UPDATE pgpace.customer SET auth_scheme = 'oauth2', auth_username = 'cid', "
               "auth_secret = 'csec', oauth_token_url = 'https://auth.example.com/token', "
               "oauth_scope = 'send' WHERE name = 'oauth'");
    tl_exec(c, "UPDATE pgpace.customer SET extra_headers = ARRAY['X-A: 1', 'X-B: two'], "
               "auth_scheme = 'bearer', auth_secret = 't' WHERE name = 'hdrs'");
    tl_exec(c, "UPDATE pgpace.customer SET client_cert = E'-----BEGIN CERTIFICATE-----\\nMIIB\\n"
               "-----END CERTIFICATE-----\\n', client_key = E'-----BEGIN PRIVATE KEY-----\\n"
               "MIIE\\n-----END PRIVATE KEY-----\\n' WHERE name = 'cert'");
    tl_exec(c, "UPDATE pgpace.customer SET proxy = 'http://proxy.example.com:3128' "
               "WHERE name = 'proxied'");
    tl_exec(c, "UPDATE pgpace.customer SET limits = pgpace.limits_normalize(ARRAY['2/s', "
               "'1000/day']), ratelimit_headers = false WHERE name = 'limited'");
    tl_exec(c, "UPDATE pgpace.customer SET disabled_at = now() - interval '1 hour' "
               "WHERE name = 'disabled'");
    tl_exec(c, "UPDATE pgpace.customer SET connect_timeout_ms = 1500, request_timeout_ms = 9000, "
               "max_in_flight = 3, throttle_decrease = 0.5, throttle_increase = 0.01, "
               "throttle_floor = 0.2 WHERE name = 'tuned'");
    tl_exec(c, "UPDATE pgpace.customer SET paused = true WHERE name = 'paused'");
    tl_exec(c, "UPDATE pgpace.customer SET mode = 'batch' WHERE name = 'batchy'");
    tl_exec(c, "INSERT INTO pgpace.breaker (customer_id, state, consecutive_failures, trips, "
               "open_until, last_error, opened_at) SELECT id, 'open', 5, 9, now() + interval "
               "'1 hour', 'HTTP 500', now() FROM pgpace.customer WHERE name = 'broken'");
    tl_exec(c, "INSERT INTO pgpace.customer_health (customer_id, failing_since, last_error) "
               "SELECT id, now() - interval '2 hours', 'HTTP 500' FROM pgpace.customer "
               "WHERE name = 'failing'");
    tl_exec(c, "SELECT pgpace.endpoint_add('parent', 'e1', 'https://e1.example.com/', 30)");
    tl_exec(c, "SELECT pgpace.endpoint_add('parent', 'e2', 'https://e2.example.com/', 30, "
               "limits => ARRAY['1/s'])");
    /* A customer without a receiver of its own is no row of either. */
    tl_exec(c, "INSERT INTO pgpace.customer (name, mode) VALUES ('hub', 'spaced')");
    tl_exec(c, "SELECT pgpace.endpoint_add('hub', 'only', 'https://only.example.com/', 30)");

    char *listed = tl_query_str(c,
                                "SELECT string_agg(c.name, ',' ORDER BY c.name) FROM "
                                "pgpace.customer c WHERE c.id IN (%s)",
                                "SELECT b.customer_id FROM pgpace.breaker b UNION SELECT "
                                "h.customer_id FROM pgpace.customer_health h UNION SELECT "
                                "e.parent_id FROM pgpace.customer e WHERE e.parent_id IS NOT "
                                "NULL UNION SELECT e.id FROM pgpace.customer e WHERE "
                                "e.parent_id IS NOT NULL");
    PGresult *extra = PQexecParams(c, sql_q_run_customers_extra, 0, NULL, NULL, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(extra), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(extra), 7);
    /* What the statement lists is what the tables hold, in id order. */
    strbuf got = {0};
    for (int r = 0; r < PQntuples(extra); r++) {
        if (r > 0) {
            assert_true(atoll(PQgetvalue(extra, r - 1, 0)) < atoll(PQgetvalue(extra, r, 0)));
            strbuf_puts(&got, ",");
        }
        char *name = tl_query_str(c, "SELECT name FROM pgpace.customer WHERE id = %s",
                                  PQgetvalue(extra, r, 0));
        strbuf_puts(&got, name);
        free(name);
    }
    char *sorted = tl_query_str(c,
                                "SELECT string_agg(n, ',' ORDER BY n) FROM "
                                "unnest(string_to_array('%s', ',')) n",
                                strbuf_str(&got));
    assert_string_equal(sorted, listed);
    assert_string_equal(listed, "broken,failing,hub,hub/only,parent,parent/e1,parent/e2");
    free(sorted);
    free(listed);
    strbuf_free(&got);

    const char *full_params[SQL_RUN_CUSTOMERS_NPARAMS] = {NULL, "-9223372036854775808", "1000"};
    PGresult *full = PQexecParams(c, sql_q_run_customers, SQL_RUN_CUSTOMERS_NPARAMS, NULL,
                                  full_params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(full), PGRES_TUPLES_OK);
    /* Pages of 3: the keyset from the last id of each. */
    PGresult *pages[16];
    int n_pages = 0, rows = 0;
    char after[32] = "-9223372036854775808";
    for (;;) {
        assert_true(n_pages < 16);
        const char *params[SQL_RUN_CUSTOMERS_PAGE_NPARAMS] = {after, "3"};
        PGresult *p = PQexecParams(c, sql_q_run_customers_page, SQL_RUN_CUSTOMERS_PAGE_NPARAMS,
                                   NULL, params, NULL, NULL, 0);
        assert_int_equal(PQresultStatus(p), PGRES_TUPLES_OK);
        pages[n_pages++] = p;
        rows += PQntuples(p);
        if (PQntuples(p) < 3)
            break;
        snprintf(after, sizeof after, "%s", PQgetvalue(p, 2, SQL_RUN_CUSTOMERS_PAGE_C_ID));
    }
    assert_int_equal(rows, PQntuples(full));
    assert_int_equal(rows, 19); /* 16, the parent's 2 endpoints and the hub's one; not hub */
    int complete = 0, marked = 0, listed_n = 0;
    for (int r = 0, pg = 0, pr = 0; r < rows; r++, pr++) {
        if (pr == PQntuples(pages[pg])) {
            pg++;
            pr = 0;
        }
        customer_row whole, page;
        customer_row_parse(full, r, &whole);
        bool is_complete = customer_page_row_parse(pages[pg], pr, &page);
        assert_int_equal(page.id, whole.id);
        bool is_listed = false;
        for (int e = 0; e < PQntuples(extra); e++)
            is_listed = is_listed || atoll(PQgetvalue(extra, e, 0)) == whole.id;
        const char *what = "";
        bool same = same_row(&page, &whole, &what);
        if (is_listed) {
            /* Listed because its page row would be wrong. */
            if (same)
                fail_msg("customer %s is listed but its page row is whole", whole.name);
            listed_n++;
        } else if (is_complete) {
            if (!same)
                fail_msg("customer %s: %s differs between its page row and its whole row",
                         whole.name, what);
            complete++;
        } else {
            if (same)
                fail_msg("customer %s is marked but its page row is whole", whole.name);
            marked++;
        }
    }
    /* plain, disabled, tuned, paused, batchy, lonely; basic, bearer, oauth, hdrs, cert,
     * proxied, limited; broken, failing, parent and the 3 endpoints. */
    assert_int_equal(complete, 6);
    assert_int_equal(marked, 7);
    assert_int_equal(listed_n, 6);
    for (int i = 0; i < n_pages; i++)
        PQclear(pages[i]);
    PQclear(full);
    PQclear(extra);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(declared_shapes_match_the_server, setup, teardown),
        cmocka_unit_test_setup_teardown(
            per_customer_probes_stay_index_probes_when_few_customers_hold_the_queue, setup,
            teardown),
        cmocka_unit_test_setup_teardown(startup_page_rows_are_the_full_rows_or_read_whole, setup,
                                        teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
