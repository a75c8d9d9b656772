/* test_throttle_sql.c - the SQL of pacing that listens to the receiver, against the real server:
 * run_pace.sql (upsert, clear, customers unknown or deleted meanwhile), run_finalize.sql's
 * 'throttled' outcome (attempt given back, logged, never dead-lettered, compare-and-swap on the
 * token), what run_customers.sql and run_frontier.sql return, pgpace.customer_set_throttle's
 * errors, and the CHECK constraints of migration 0008 for any other writer. */
#include "testlib.h"

#include "sql_embed.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* ---- helpers ---------------------------------------------------------------------------- */

static long long make_customer(PGconn *c, const char *name, int max_attempts)
{
    tl_exec(c,
            "SELECT pgpace.customer_set('%s', rate_per_minute => 60, webhook_url => "
            "'http://127.0.0.1:9/', max_attempts => %d)",
            name, max_attempts);
    return tl_query_int(c, "SELECT id FROM pgpace.customer WHERE name = '%s'", name);
}

/* Enqueues one item for `customer` and claims it as run_claim.sql would: attempt + 1, the
 * token, a lease. Returns the item id. */
static long long claimed_item(PGconn *c, const char *customer, long long token)
{
    long long id = tl_query_int(c, "SELECT pgpace.enqueue('%s', '{}')", customer);
    tl_exec(c,
            "UPDATE pgpace.queue SET attempt = attempt + 1, claim_token = %lld, claimed_by = "
            "'test', claimed_at = now(), next_action_at = now() + interval '60 seconds' WHERE "
            "item_id = %lld",
            token, id);
    return id;
}

/* Claims an item again (as the next claim round would, once it is due). */
static void reclaim(PGconn *c, long long id, long long token)
{
    tl_exec(c,
            "UPDATE pgpace.queue SET attempt = attempt + 1, claim_token = %lld, next_action_at = "
            "now() + interval '60 seconds' WHERE item_id = %lld",
            token, id);
}

/* Runs an embedded statement; expects `status` and, for errors, `sqlstate` (NULL: any). */
static PGresult *exec_stmt(PGconn *c, const char *sql, int n, const char *const *params,
                           ExecStatusType status, const char *sqlstate)
{
    PGresult *res = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != status)
        fail_msg("expected %s, got %s: %s", PQresStatus(status), PQresStatus(PQresultStatus(res)),
                 PQresultErrorMessage(res));
    if (sqlstate) {
        const char *got = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (!got || strcmp(got, sqlstate) != 0)
            fail_msg("expected SQLSTATE %s, got %s: %s", sqlstate, got ? got : "(none)",
                     PQresultErrorMessage(res));
    }
    return res;
}

/* run_pace.sql with array literals, e.g. "{1,2}" and "{30,NULL}"; returns its row count. */
static long long run_pace(PGconn *c, const char *customers, const char *rates)
{
    const char *params[SQL_RUN_PACE_NPARAMS] = {
        [SQL_RUN_PACE_P_CUSTOMER] = customers, [SQL_RUN_PACE_P_EFFECTIVE_RATE] = rates};
    PGresult *res =
        exec_stmt(c, sql_q_run_pace, SQL_RUN_PACE_NPARAMS, params, PGRES_COMMAND_OK, NULL);
    assert_int_equal(PQnfields(res), 0);
    long long n = atoll(PQcmdTuples(res));
    PQclear(res);
    return n;
}

/* One outcome for run_finalize.sql. */
typedef struct outcome {
    long long item, token;
    const char *outcome;
    long long delay_ms;
    int http_status; /* 0: NULL */
    const char *error_class, *error;
} outcome;

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Appends one element of an array literal: a quoted text, or NULL. */
static void add_text(char *buf, size_t cap, const char *v)
{
    size_t len = strlen(buf);
    if (v)
        snprintf(buf + len, cap - len, "%s\"%s\"", len > 1 ? "," : "", v);
    else
        snprintf(buf + len, cap - len, "%sNULL", len > 1 ? "," : "");
}

static void add_num(char *buf, size_t cap, long long v, bool null)
{
    size_t len = strlen(buf);
    if (null)
        snprintf(buf + len, cap - len, "%sNULL", len > 1 ? "," : "");
    else
        snprintf(buf + len, cap - len, "%s%lld", len > 1 ? "," : "", v);
}

/* Runs run_finalize.sql for `n` outcomes; returns the item ids it gave back, as
 * "id,id,..." in ascending order ("" when none), owned by the caller. */
static char *finalize(PGconn *c, const outcome *o, int n)
{
    enum { CAP = 4096 };
    static char a[SQL_RUN_FINALIZE_NPARAMS][CAP];
    for (int p = 0; p < SQL_RUN_FINALIZE_NPARAMS; p++)
        snprintf(a[p], CAP, "{");
    long long started = now_us();
    for (int i = 0; i < n; i++) {
        add_num(a[SQL_RUN_FINALIZE_P_ITEM], CAP, o[i].item, false);
        add_num(a[SQL_RUN_FINALIZE_P_TOKEN], CAP, o[i].token, false);
        add_text(a[SQL_RUN_FINALIZE_P_OUTCOME], CAP, o[i].outcome);
        add_num(a[SQL_RUN_FINALIZE_P_DELAY_MS], CAP, o[i].delay_ms, false);
        add_num(a[SQL_RUN_FINALIZE_P_HTTP_STATUS], CAP, o[i].http_status, o[i].http_status == 0);
        add_text(a[SQL_RUN_FINALIZE_P_ERROR_CLASS], CAP, o[i].error_class);
        add_text(a[SQL_RUN_FINALIZE_P_ERROR], CAP, o[i].error);
        add_num(a[SQL_RUN_FINALIZE_P_STARTED_US], CAP, started, false);
        add_text(a[SQL_RUN_FINALIZE_P_DURATION_MS], CAP, "12.5");
        add_text(a[SQL_RUN_FINALIZE_P_EXCERPT], CAP, "slow down");
    }
    const char *params[SQL_RUN_FINALIZE_NPARAMS];
    for (int p = 0; p < SQL_RUN_FINALIZE_NPARAMS; p++) {
        strncat(a[p], "}", CAP - strlen(a[p]) - 1);
        params[p] = a[p];
    }
    PGresult *res =
        exec_stmt(c, sql_q_run_finalize, SQL_RUN_FINALIZE_NPARAMS, params, PGRES_TUPLES_OK, NULL);
    assert_int_equal(PQnfields(res), SQL_RUN_FINALIZE_NCOLS);
    long long ids[64];
    int rows = PQntuples(res);
    assert_true(rows < 64);
    for (int r = 0; r < rows; r++)
        ids[r] = atoll(PQgetvalue(res, r, SQL_RUN_FINALIZE_C_ITEM_ID));
    PQclear(res);
    for (int i = 1; i < rows; i++)
        for (int j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            long long t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
        }
    char *out = calloc(1, 64 * 24);
    assert_non_null(out);
    for (int r = 0; r < rows; r++)
        snprintf(out + strlen(out), 64 * 24 - strlen(out), "%s%lld", r ? "," : "", ids[r]);
    return out;
}

/* The queue row of an item as "attempt token-or-null last_error" ("gone" when there is none). */
static char *queue_row(PGconn *c, long long id)
{
    return tl_query_str(c,
                        "SELECT coalesce((SELECT attempt || ' ' || coalesce(claim_token::text, "
                        "'null') || ' ' || coalesce(last_error, 'null') FROM pgpace.queue WHERE "
                        "item_id = %lld), 'gone')",
                        id);
}

/* The attempt log of an item: "attempt:outcome:status ..." in order. */
static char *attempts(PGconn *c, long long id)
{
    return tl_query_str(c,
                        "SELECT coalesce(string_agg(attempt || ':' || outcome || ':' || "
                        "coalesce(http_status::text, '-'), ' ' ORDER BY started_at, attempt), '') "
                        "FROM pgpace.delivery_attempt WHERE item_id = %lld",
                        id);
}

#define assert_str(got_expr, want)                                                                 \
    do {                                                                                           \
        char *got_ = (got_expr);                                                                   \
        assert_string_equal(got_, want);                                                           \
        free(got_);                                                                                \
    } while (0)

/* ---- run_pace.sql ----------------------------------------------------------------------- */

static void pace_upserts_clears_and_skips_unknown_customers(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    long long acme = make_customer(c, "acme", 12);
    long long beta = make_customer(c, "beta", 12);
    /* acme already has scheduler state, which a pace update must leave as it is. */
    tl_exec(c,
            "INSERT INTO pgpace.frontier (customer_id, tat, batch_credit, last_tick) VALUES "
            "(%lld, '2030-01-01 00:00:00+00', 0.25, 7)",
            acme);
    static const char state_sql[] = "SELECT coalesce(string_agg(customer_id || ' ' || "
                                    "coalesce(effective_rate::text, 'null') || ' ' || "
                                    "coalesce(tat::text, 'null') || ' ' || batch_credit || ' ' || "
                                    "coalesce(last_tick::text, 'null'), ', ' ORDER BY "
                                    "customer_id), '') FROM pgpace.frontier";
    char want[512];

    /* Two known customers, one that never existed, a NULL id: two rows written, no error. */
    char ids[128];
    snprintf(ids, sizeof ids, "{%lld,%lld,999999,NULL}", acme, beta);
    assert_int_equal(run_pace(c, ids, "{30,12.5,7,5}"), 2);
    snprintf(want, sizeof want, "%lld 30 2030-01-01 00:00:00+00 0.25 7, %lld 12.5 null 0 null",
             acme, beta);
    assert_str(tl_query_str(c, state_sql), want);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.frontier WHERE customer_id = "
                                     "999999"),
                     0);

    /* What a new leader reads back: the rate, NULL where none is set. */
    long long gamma = make_customer(c, "gamma", 12);
    tl_exec(c, "INSERT INTO pgpace.frontier (customer_id, tat) VALUES (%lld, now())", gamma);
    PGresult *res = exec_stmt(c, sql_q_run_frontier, 0, NULL, PGRES_TUPLES_OK, NULL);
    assert_int_equal(PQnfields(res), SQL_RUN_FRONTIER_NCOLS);
    assert_int_equal(PQntuples(res), 3);
    for (int r = 0; r < PQntuples(res); r++) {
        long long id = atoll(PQgetvalue(res, r, SQL_RUN_FRONTIER_C_CUSTOMER_ID));
        const char *rate = PQgetvalue(res, r, SQL_RUN_FRONTIER_C_EFFECTIVE_RATE);
        bool null = PQgetisnull(res, r, SQL_RUN_FRONTIER_C_EFFECTIVE_RATE);
        if (id == acme)
            assert_string_equal(rate, "30");
        else if (id == beta)
            assert_string_equal(rate, "12.5");
        else
            assert_true(id == gamma && null);
        if (id == acme)
            assert_string_equal(PQgetvalue(res, r, SQL_RUN_FRONTIER_C_LAST_TICK), "7");
    }
    PQclear(res);

    /* A NULL rate goes back to the configured one; the rest of the row stays. */
    snprintf(ids, sizeof ids, "{%lld}", acme);
    assert_int_equal(run_pace(c, ids, "{NULL}"), 1);
    snprintf(want, sizeof want, "%lld null 2030-01-01 00:00:00+00 0.25 7", acme);
    assert_str(tl_query_str(c,
                            "SELECT customer_id || ' ' || coalesce(effective_rate::text, "
                            "'null') || ' ' || tat || ' ' || batch_credit || ' ' || last_tick "
                            "FROM pgpace.frontier WHERE customer_id = %lld",
                            acme),
               want);
    /* Unchanged values are not rewritten (no new row version in the UNLOGGED table). */
    assert_int_equal(run_pace(c, ids, "{NULL}"), 0);

    /* A customer listed twice takes its last rate (a plain upsert would fail: "cannot affect
     * row a second time"). */
    snprintf(ids, sizeof ids, "{%lld,%lld,%lld}", acme, beta, acme);
    assert_int_equal(run_pace(c, ids, "{10,11,20}"), 2);
    assert_int_equal(tl_query_int(c,
                                  "SELECT effective_rate::int FROM pgpace.frontier WHERE "
                                  "customer_id = %lld",
                                  acme),
                     20);

    /* Empty arrays: nothing to do. */
    assert_int_equal(run_pace(c, "{}", "{}"), 0);

    /* A rate the frontier cannot hold is the caller's bug: the CHECK refuses it, naming the
     * constraint, and nothing changes. */
    static const char *const bad[] = {"{0}", "{-1}", "{NaN}", "{Infinity}"};
    snprintf(ids, sizeof ids, "{%lld}", acme);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *params[] = {ids, bad[i]};
        res = exec_stmt(c, sql_q_run_pace, 2, params, PGRES_FATAL_ERROR, "23514");
        tl_assert_contains(PQresultErrorMessage(res), "frontier_effective_rate_valid");
        PQclear(res);
    }
    assert_int_equal(tl_query_int(c,
                                  "SELECT effective_rate::int FROM pgpace.frontier WHERE "
                                  "customer_id = %lld",
                                  acme),
                     20);

    /* A deleted customer's row goes with it (ON DELETE CASCADE). */
    tl_exec(c, "SELECT pgpace.customer_delete('beta')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.frontier WHERE customer_id = "
                                  "%lld",
                                  beta),
                     0);
}

/* A customer deleted while the statement runs: it waits for the delete and then skips the
 * customer, instead of failing on the foreign key (which the leader could not do anything
 * about, and which would fail the other customers' updates with it). */
static void pace_skips_a_customer_deleted_meanwhile(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    long long acme = make_customer(c, "acme", 12);
    long long beta = make_customer(c, "beta", 12);
    PGconn *other = PQconnectdb(db->conninfo);
    assert_int_equal(PQstatus(other), CONNECTION_OK);
    tl_exec(other, "BEGIN");
    tl_exec(other, "SELECT pgpace.customer_delete('beta')");

    char ids[64];
    snprintf(ids, sizeof ids, "{%lld,%lld}", acme, beta);
    const char *params[] = {ids, "{30,40}"};
    assert_int_equal(PQsendQueryParams(c, sql_q_run_pace, 2, NULL, params, NULL, NULL, 0), 1);
    /* It waits for the deleting transaction (a lock wait, seen from the server). */
    int waited = 0;
    for (int i = 0; i < 250 && !waited; i++) {
        waited = (int)tl_query_int(other,
                                   "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND "
                                   "wait_event_type = 'Lock'",
                                   PQbackendPID(c));
        if (!waited)
            usleep(20000);
    }
    assert_true(waited);
    tl_exec(other, "COMMIT");
    PQfinish(other);

    PGresult *res = PQgetResult(c);
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        fail_msg("run_pace failed after the delete: %s", PQresultErrorMessage(res));
    assert_string_equal(PQcmdTuples(res), "1");
    PQclear(res);
    assert_null(PQgetResult(c));
    char want[64];
    snprintf(want, sizeof want, "%lld 30", acme);
    assert_str(tl_query_str(c, "SELECT string_agg(customer_id || ' ' || effective_rate, ', ') "
                               "FROM pgpace.frontier"),
               want);
}

/* ---- run_finalize.sql: throttled ------------------------------------------------------- */

static void throttled_gives_the_attempt_back_and_logs_it(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    make_customer(c, "acme", 3);
    long long a = claimed_item(c, "acme", 101);

    outcome o = {a, 101, "throttled", 5000, 429, "http_429", "HTTP 429 Too Many Requests"};
    assert_str(finalize(c, &o, 1), "");
    /* Back to attempt 0, the lease voided, due after the delay, the error kept. */
    assert_str(queue_row(c, a), "0 null HTTP 429 Too Many Requests");
    assert_int_equal(tl_query_int(c,
                                  "SELECT (next_action_at BETWEEN now() + interval '4.5 s' AND "
                                  "now() + interval '5.5 s')::int FROM pgpace.queue WHERE "
                                  "item_id = %lld",
                                  a),
                     1);
    /* Logged with the attempt number it used, its own outcome, status and excerpt. */
    assert_str(attempts(c, a), "1:throttled:429");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.delivery_attempt WHERE item_id = "
                                  "%lld AND error_class = 'http_429' AND response_excerpt = "
                                  "'slow down' AND duration_ms = 12.5",
                                  a),
                     1);

    /* Without an error text the class is kept as the error, as for retry (a 503 with
     * Retry-After). */
    reclaim(c, a, 102);
    outcome o2 = {a, 102, "throttled", 0, 503, "http_503", NULL};
    assert_str(finalize(c, &o2, 1), "");
    assert_str(queue_row(c, a), "0 null http_503");
    assert_str(attempts(c, a), "1:throttled:429 1:throttled:503");
    assert_int_equal(tl_query_int(c,
                                  "SELECT (next_action_at <= now())::int FROM pgpace.queue "
                                  "WHERE item_id = %lld",
                                  a),
                     1);
}

/* However often an item is throttled, even claimed on its last attempt, it stays queued; the
 * same item answered with 'retry' on its last attempt is dead-lettered (the test can tell). */
static void throttled_is_never_dead_lettered(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    make_customer(c, "acme", 3);
    long long a = claimed_item(c, "acme", 1);
    /* Two retries: attempt 1 and 2 used. */
    for (long long t = 1; t <= 2; t++) {
        outcome o = {a, t, "retry", 0, 500, "http_5xx", "HTTP 500"};
        assert_str(finalize(c, &o, 1), "");
        reclaim(c, a, t + 1);
    }
    /* Now claimed for attempt 3 = max_attempts, and throttled ten times over. */
    assert_str(queue_row(c, a), "3 3 HTTP 500");
    for (long long t = 3; t < 13; t++) {
        outcome o = {a, t, "throttled", 0, 429, "http_429", "HTTP 429"};
        assert_str(finalize(c, &o, 1), "");
        assert_str(queue_row(c, a), "2 null HTTP 429");
        reclaim(c, a, t + 1);
    }
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                  "item_id = %lld AND outcome = 'throttled' AND attempt = 3",
                                  a),
                     10);
    /* Even with attempt above max_attempts (a customer's max_attempts lowered meanwhile). */
    tl_exec(c, "UPDATE pgpace.queue SET attempt = 7 WHERE item_id = %lld", a);
    outcome o = {a, 13, "throttled", 0, 429, "http_429", "HTTP 429"};
    assert_str(finalize(c, &o, 1), "");
    assert_str(queue_row(c, a), "6 null HTTP 429");
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter"), 0);

    /* The control: 'retry' on the last attempt dead-letters. */
    tl_exec(c, "UPDATE pgpace.queue SET attempt = 2 WHERE item_id = %lld", a);
    reclaim(c, a, 14);
    outcome r = {a, 14, "retry", 0, 429, "http_429", "HTTP 429"};
    assert_str(finalize(c, &r, 1), "");
    assert_str(queue_row(c, a), "gone");
    assert_int_equal(tl_query_int(c,
                                  "SELECT attempts FROM pgpace.dead_letter WHERE item_id = "
                                  "%lld",
                                  a),
                     3);
}

/* The compare-and-swap: a throttled outcome with a token the item no longer has changes nothing
 * and comes back, alone or among other outcomes of the same batch. */
static void throttled_with_a_stale_token_is_returned(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    make_customer(c, "acme", 5);
    long long a = claimed_item(c, "acme", 20);
    long long b = claimed_item(c, "acme", 21);
    long long d = claimed_item(c, "acme", 22);
    long long e = claimed_item(c, "acme", 23);
    char *before = queue_row(c, a);

    outcome o = {a, 999, "throttled", 1000, 429, "http_429", "HTTP 429"};
    char want[64];
    snprintf(want, sizeof want, "%lld", a);
    assert_str(finalize(c, &o, 1), want);
    assert_str(queue_row(c, a), before);
    assert_str(attempts(c, a), "");
    free(before);

    /* A batch: success, throttled, retry (all owned) and a stale throttled: only the stale one
     * comes back, the others take effect. */
    outcome batch[] = {
        {b, 21, "success", 0, 200, NULL, NULL},
        {d, 22, "throttled", 2000, 503, "http_503", "HTTP 503"},
        {e, 23, "retry", 2000, 500, "http_5xx", "HTTP 500"},
        {a, 19, "throttled", 2000, 429, "http_429", "HTTP 429"},
    };
    assert_str(finalize(c, batch, 4), want);
    assert_str(queue_row(c, b), "gone");
    assert_str(queue_row(c, d), "0 null HTTP 503");
    assert_str(queue_row(c, e), "1 null HTTP 500");
    assert_str(attempts(c, b), "1:success:200");
    assert_str(attempts(c, d), "1:throttled:503");
    assert_str(attempts(c, e), "1:retry:500");
    assert_str(attempts(c, a), "");
    assert_str(queue_row(c, a), "1 20 null");

    /* An item that is gone altogether comes back too. */
    outcome gone = {b, 21, "throttled", 0, 429, "http_429", "HTTP 429"};
    snprintf(want, sizeof want, "%lld", b);
    assert_str(finalize(c, &gone, 1), want);
}

/* ---- the dispatcher's view of the overrides -------------------------------------------- */

static void customers_query_returns_the_overrides(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    long long acme = make_customer(c, "acme", 12);
    make_customer(c, "beta", 12);
    tl_exec(c, "SELECT pgpace.customer_set_throttle('acme', 0.5, 0.01, 0.2)");
    const char *params[] = {NULL, "0", "100"}; /* all: the first page */
    PGresult *res = exec_stmt(c, sql_q_run_customers, 3, params, PGRES_TUPLES_OK, NULL);
    assert_int_equal(PQnfields(res), SQL_RUN_CUSTOMERS_NCOLS);
    assert_int_equal(PQntuples(res), 2);
    for (int r = 0; r < 2; r++) {
        bool is_acme = atoll(PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_ID)) == acme;
        /* 0: none set, the configured default applies. */
        assert_string_equal(PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_THROTTLE_DECREASE),
                            is_acme ? "0.5" : "0");
        assert_string_equal(PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_THROTTLE_INCREASE),
                            is_acme ? "0.01" : "0");
        assert_string_equal(PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_THROTTLE_FLOOR),
                            is_acme ? "0.2" : "0");
    }
    PQclear(res);
}

/* ---- pgpace.customer_set_throttle and the constraints ---------------------------------- */

static void set_throttle_refuses_out_of_range_values(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    make_customer(c, "acme", 12);
    tl_exec(c, "SELECT pgpace.customer_set_throttle('acme', 0.8, 0.5, 0.1)");
    char *before = tl_query_str(c, "SELECT c::text FROM pgpace.customer c");
    static const struct {
        const char *args, *message;
    } bad[] = {
        {"1, NULL, NULL", "throttle_decrease must be greater than 0 and less than 1, got 1"},
        {"'NaN', NULL, NULL", "throttle_decrease must be greater than 0 and less than 1, got NaN"},
        {"-0.5, NULL, NULL", "throttle_decrease must be greater than 0 and less than 1, got -0.5"},
        {"'Infinity', NULL, NULL", "throttle_decrease must be greater than 0 and less than 1, got "
                                   "Infinity"},
        {"NULL, 1.5, NULL", "throttle_increase must be greater than 0 and at most 1, got 1.5"},
        {"NULL, '-Infinity', NULL", "throttle_increase must be greater than 0 and at most 1, got "
                                    "-Infinity"},
        {"NULL, 'NaN', NULL", "throttle_increase must be greater than 0 and at most 1, got NaN"},
        {"NULL, NULL, 1e308", "throttle_floor must be greater than 0 and at most 1, got 1e+308"},
        {"NULL, NULL, -1e-300", "throttle_floor must be greater than 0 and at most 1, got -1e-300"},
        /* The first bad one is named, and nothing of the call is applied. */
        {"0.5, 0.5, 2", "throttle_floor must be greater than 0 and at most 1, got 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT pgpace.customer_set_throttle('acme', %s)", bad[i].args);
        PGresult *res = exec_stmt(c, sql, 0, NULL, PGRES_FATAL_ERROR, "22023");
        tl_assert_contains(PQresultErrorMessage(res), bad[i].message);
        tl_assert_contains(PQresultErrorField(res, PG_DIAG_MESSAGE_HINT),
                           "0 resets it to the configured default");
        PQclear(res);
        assert_str(tl_query_str(c, "SELECT c::text FROM pgpace.customer c"), before);
    }
    free(before);

    /* An unknown customer is named (when there is something to set). */
    PGresult *res = exec_stmt(c, "SELECT pgpace.customer_set_throttle('ghost', 0.5, NULL, NULL)", 0,
                              NULL, PGRES_FATAL_ERROR, "P0002");
    tl_assert_contains(PQresultErrorMessage(res), "unknown customer 'ghost'");
    PQclear(res);
    tl_exec(c, "SELECT pgpace.customer_set_throttle('ghost', NULL, NULL, NULL)");

    /* NULL keeps, 0 resets, the bounds that are allowed are. */
    tl_exec(c, "SELECT pgpace.customer_set_throttle('acme', NULL, 0, 1)");
    assert_str(tl_query_str(c, "SELECT throttle_decrease || ' ' || coalesce(throttle_increase::"
                               "text, 'null') || ' ' || throttle_floor FROM pgpace.customer"),
               "0.8 null 1");
    tl_exec(c, "SELECT pgpace.customer_set_throttle('acme', 0, 1, 0)");
    assert_str(tl_query_str(c, "SELECT coalesce(throttle_decrease::text, 'null') || ' ' || "
                               "throttle_increase || ' ' || coalesce(throttle_floor::text, "
                               "'null') FROM pgpace.customer"),
               "null 1 null");

    /* Any other writer meets the CHECK constraints, NaN and infinity included. */
    static const struct {
        const char *set, *constraint;
    } checks[] = {
        {"throttle_decrease = 1", "customer_throttle_decrease_valid"},
        {"throttle_decrease = 0", "customer_throttle_decrease_valid"},
        {"throttle_decrease = 'NaN'", "customer_throttle_decrease_valid"},
        {"throttle_increase = 'Infinity'", "customer_throttle_increase_valid"},
        {"throttle_increase = 'NaN'", "customer_throttle_increase_valid"},
        {"throttle_increase = -0.1", "customer_throttle_increase_valid"},
        {"throttle_floor = 'NaN'", "customer_throttle_floor_valid"},
        {"throttle_floor = 1.0000001", "customer_throttle_floor_valid"},
        {"throttle_floor = 0", "customer_throttle_floor_valid"},
    };
    for (size_t i = 0; i < sizeof checks / sizeof *checks; i++) {
        char sql[160];
        snprintf(sql, sizeof sql, "UPDATE pgpace.customer SET %s", checks[i].set);
        res = exec_stmt(c, sql, 0, NULL, PGRES_FATAL_ERROR, "23514");
        tl_assert_contains(PQresultErrorMessage(res), checks[i].constraint);
        PQclear(res);
    }
}

/* Migration 0008's attempt outcome set: 'throttled' is accepted (in the daily partitions and the
 * default one too), anything unknown still refused. */
static void attempt_log_accepts_throttled_only(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
               "duration_ms, outcome) VALUES (1, 1, 1, now(), 1, 'throttled'), (2, 1, 1, "
               "'1990-01-01', 1, 'throttled')");
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.delivery_attempt_default"), 1);
    static const char *const when[] = {"now()", "'1990-01-01'"};
    for (size_t i = 0; i < 2; i++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
                 "duration_ms, outcome) VALUES (3, 1, 1, %s, 1, 'throttle')",
                 when[i]);
        PGresult *res = exec_stmt(c, sql, 0, NULL, PGRES_FATAL_ERROR, "23514");
        tl_assert_contains(PQresultErrorMessage(res), "delivery_attempt_outcome_valid");
        PQclear(res);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(pace_upserts_clears_and_skips_unknown_customers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(pace_skips_a_customer_deleted_meanwhile, setup, teardown),
        cmocka_unit_test_setup_teardown(throttled_gives_the_attempt_back_and_logs_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(throttled_is_never_dead_lettered, setup, teardown),
        cmocka_unit_test_setup_teardown(throttled_with_a_stale_token_is_returned, setup, teardown),
        cmocka_unit_test_setup_teardown(customers_query_returns_the_overrides, setup, teardown),
        cmocka_unit_test_setup_teardown(set_throttle_refuses_out_of_range_values, setup, teardown),
        cmocka_unit_test_setup_teardown(attempt_log_accepts_throttled_only, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
