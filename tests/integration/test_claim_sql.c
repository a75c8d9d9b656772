/* test_claim_sql.c - the claim + ack statements at SQL level.
 * - claim_statement() sends the lean run_claim_unlimited.sql only for rounds it covers (no
 *   tick, no spaced customer, no carrier, one pair per customer), and for such a round it
 *   returns the same rows as run_claim.sql and leaves the queue the same: leases, token,
 *   claimed_by, attempts, the stale flag, the order, and the next future item of a pair that
 *   came back short.
 * - both claim statements skip rows past their deadline, return each claimed item's deadline
 *   and clear its supersede_key.
 * - a customer's recovery pace (pgpace.recovery_pace): run_claim.sql takes its recovered items
 *   after its live ones and only as the pace's cell allows, which it advances; the lean
 *   statement takes none of them and says when they are held back.
 * - run_finalize_success.sql deletes the items still held under their token, logs one attempt
 *   each with its own fields, and reports (and leaves alone) the others. */
#include "testlib.h"

#include "dispatch/internal.h"

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

/* A round of three unlimited customers with the limits `limits`, as send_claim builds it. */
static void plain_round(const char *ids, const char *limits, const char *carriers,
                        const char *params[SQL_RUN_CLAIM_NPARAMS])
{
    const char *p[SQL_RUN_CLAIM_NPARAMS] = {
        [SQL_RUN_CLAIM_P_PAIR_CUSTOMER] = ids,
        [SQL_RUN_CLAIM_P_PAIR_CARRIER] = carriers,
        [SQL_RUN_CLAIM_P_PAIR_LIMIT] = limits,
        [SQL_RUN_CLAIM_P_PAIR_IN_FLIGHT] = "{0,0,0}",
        [SQL_RUN_CLAIM_P_CUSTOMER] = ids,
        [SQL_RUN_CLAIM_P_CUSTOMER_LIMIT] = limits,
        [SQL_RUN_CLAIM_P_CARRIER] = "{}",
        [SQL_RUN_CLAIM_P_CARRIER_BUDGET] = "{}",
        [SQL_RUN_CLAIM_P_DEFAULT_CARRIER_BUDGET] = "100",
        [SQL_RUN_CLAIM_P_LEASE_S] = "60",
        [SQL_RUN_CLAIM_P_TOKEN] = "4242",
        [SQL_RUN_CLAIM_P_CLAIMED_BY] = "test",
        [SQL_RUN_CLAIM_P_FR_CUSTOMER] = "{}",
        [SQL_RUN_CLAIM_P_FR_BASE] = "{}",
        [SQL_RUN_CLAIM_P_FR_PERIOD] = "{}",
        [SQL_RUN_CLAIM_P_FR_CREDIT] = "{}",
        [SQL_RUN_CLAIM_P_TICK] = NULL,
    };
    memcpy(params, p, sizeof p);
}

static void lean_statement_only_for_plain_rounds(void **state)
{
    (void)state;
    const char *p[SQL_RUN_CLAIM_NPARAMS];
    claim_stmt st;

    plain_round("{1,2,3}", "{3,5,2}", "{\"\",\"\",\"\"}", p);
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim_unlimited);
    assert_int_equal(st.nparams, SQL_RUN_CLAIM_UNLIMITED_NPARAMS);
    assert_string_equal(st.params[SQL_RUN_CLAIM_UNLIMITED_P_PAIR_CUSTOMER], "{1,2,3}");
    assert_string_equal(st.params[SQL_RUN_CLAIM_UNLIMITED_P_PAIR_LIMIT], "{3,5,2}");
    assert_string_equal(st.params[SQL_RUN_CLAIM_UNLIMITED_P_LEASE_S], "60");
    assert_string_equal(st.params[SQL_RUN_CLAIM_UNLIMITED_P_TOKEN], "4242");
    assert_string_equal(st.params[SQL_RUN_CLAIM_UNLIMITED_P_CLAIMED_BY], "test");

    /* Each of these uses a part of run_claim.sql the lean statement does not have. */
    plain_round("{1,2,3}", "{3,5,2}", "{\"\",\"\",\"\"}", p);
    p[SQL_RUN_CLAIM_P_TICK] = "17"; /* a batch tick */
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim);
    assert_int_equal(st.nparams, SQL_RUN_CLAIM_NPARAMS);
    assert_ptr_equal(st.params, p);

    plain_round("{1,2,3}", "{3,5,2}", "{\"\",\"\",\"\"}", p);
    p[SQL_RUN_CLAIM_P_FR_CUSTOMER] = "{2}"; /* a spaced customer */
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim);

    plain_round("{1,2,3}", "{3,5,2}", "{\"\",\"\",\"\"}", p);
    p[SQL_RUN_CLAIM_P_CARRIER] = "{\"sms\"}"; /* a carrier's budget */
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim);

    plain_round("{1,2,3}", "{3,5,2}", "{\"\",\"sms\",\"\"}", p); /* a pair names a carrier */
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim);

    plain_round("{1,2,3}", "{3,5,2}", "{\"\",\"\",\"\"}", p);
    p[SQL_RUN_CLAIM_P_PAIR_LIMIT] = "{3,4,2}"; /* a pair below its customer's limit */
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim);

    plain_round("{1,2,3}", "{3,5,2}", "{\"\",\"\",\"\"}", p);
    p[SQL_RUN_CLAIM_P_PAIR_CUSTOMER] = "{1,1,3}"; /* two pairs of one customer */
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim);

    plain_round("{1,2,3}", "{3,5,2}", "{\"\",\"\",\"\"}", p);
    claim_statement(p, true, &st); /* a customer with a recovery pace */
    assert_ptr_equal(st.sql, sql_q_run_claim);
}

/* Runs a claim statement; returns its rows as "kind:item:rec_at:rec_period" lines. */
static char *claim_rec_rows(PGconn *conn, const char *sql, int n, const char *const *params)
{
    PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("claim failed: %s", PQresultErrorMessage(res));
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = '\0';
    for (int r = 0; r < PQntuples(res); r++) {
        const int cols[] = {SQL_RUN_CLAIM_C_KIND, SQL_RUN_CLAIM_C_ITEM_ID, SQL_RUN_CLAIM_C_REC_AT,
                            SQL_RUN_CLAIM_C_REC_PERIOD_US};
        for (size_t c = 0; c < PGP_ARRAY_LEN(cols); c++)
            len +=
                (size_t)snprintf(out + len, cap - len, "%s%s", c ? ":" : "",
                                 PQgetisnull(res, r, cols[c]) ? "-" : PQgetvalue(res, r, cols[c]));
        len += (size_t)snprintf(out + len, cap - len, "\n");
        assert_true(len < cap);
    }
    PQclear(res);
    return out;
}

static void recovery_pace_limits_recovered_claims(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    tl_exec(conn, "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, "
                  "signing_secrets) VALUES ('a', 'unlimited', 1, 'http://127.0.0.1:9/a', "
                  "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'])");
    /* Two live items and three recovered ones (the lane, -32768), all due; the recovered ones
     * older. A recovery pace of 120/min that has sent nothing yet. */
    tl_exec(conn, "SELECT pgpace.enqueue('a', jsonb_build_object('g', g), run_at => now() - "
                  "interval '1 hour' + g * interval '1 second') FROM generate_series(1, 5) g");
    tl_exec(conn, "UPDATE pgpace.queue q SET priority = -32768 FROM pgpace.item i WHERE i.id = "
                  "q.item_id AND (i.payload ->> 'g')::int <= 3");
    tl_exec(conn, "INSERT INTO pgpace.recovery_pace (customer_id, rate_per_minute) SELECT id, 120 "
                  "FROM pgpace.customer WHERE name = 'a'");
    long long a = tl_query_int(conn, "SELECT id FROM pgpace.customer WHERE name = 'a'");
    long long rec1 = tl_query_int(conn, "SELECT id FROM pgpace.item WHERE payload ->> 'g' = '1'");
    char ids[32];
    snprintf(ids, sizeof ids, "{%lld}", a);
    const char *p[SQL_RUN_CLAIM_NPARAMS];
    plain_round(ids, "{5}", "{\"\"}", p);
    p[SQL_RUN_CLAIM_P_PAIR_IN_FLIGHT] = "{0}";

    /* run_claim.sql: both live items, then the oldest recovered one at the cell's slot (now:
     * none sent yet); the cell moves a period on. Again at the same instant: nothing, and the
     * pair says when its held-back recovered items may go. */
    tl_exec(conn, "BEGIN");
    long long now = tl_query_int(conn, "SELECT (extract(epoch FROM now()) * 1000000)::bigint");
    char *rows = claim_rec_rows(conn, sql_q_run_claim, SQL_RUN_CLAIM_NPARAMS, p);
    char want[256];
    snprintf(want, sizeof want, "i:%lld:%lld:500000\n", rec1, now);
    tl_assert_contains(rows, want);
    size_t before = 0; /* rows before it: the two live items */
    for (const char *c = rows; c < strstr(rows, want); c++)
        before += *c == '\n';
    assert_int_equal(before, 2);
    assert_null(strstr(rows, "d:"));
    free(rows);
    assert_int_equal(tl_query_int(conn, "SELECT (extract(epoch FROM tat) * 1000000)::bigint FROM "
                                        "pgpace.recovery_pace"),
                     now + 500000);
    rows = claim_rec_rows(conn, sql_q_run_claim, SQL_RUN_CLAIM_NPARAMS, p);
    snprintf(want, sizeof want, "d:-:%lld:500000\n", now + 500000);
    assert_string_equal(rows, want);
    free(rows);
    tl_exec(conn, "ROLLBACK");

    /* The lean statement: the live items only, and the pair held back (at once: run_claim.sql
     * then takes the customer, its rows having named the pace). */
    claim_stmt st;
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim_unlimited);
    tl_exec(conn, "BEGIN");
    now = tl_query_int(conn, "SELECT (extract(epoch FROM now()) * 1000000)::bigint");
    rows = claim_rec_rows(conn, st.sql, st.nparams, st.params);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue WHERE claim_token = "
                                        "4242 AND priority = -32768"),
                     0);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue WHERE claim_token = "
                                        "4242"),
                     2);
    snprintf(want, sizeof want, "d:-:%lld:500000\n", now);
    tl_assert_contains(rows, want);
    free(rows);
    tl_exec(conn, "ROLLBACK");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs one claim statement in a transaction that is rolled back; returns its rows ('i' rows in
 * result order, then the 'd' rows sorted: they tie in the ORDER BY) and the queue it leaves,
 * as one line. Counts the 'i' rows in *items. */
static char *claim_outcome(PGconn *conn, const char *sql, int n, const char *const *params,
                           int *items)
{
    tl_exec(conn, "BEGIN");
    PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("claim failed: %s", PQresultErrorMessage(res));
    assert_int_equal(PQnfields(res), SQL_RUN_CLAIM_NCOLS);
    size_t cap = 65536, len = 0, nd = 0;
    char *out = malloc(cap), *drained[16];
    assert_non_null(out);
    out[0] = '\0';
    *items = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        char row[1024];
        size_t rl = 0;
        for (int c = 0; c < PQnfields(res); c++)
            rl += (size_t)snprintf(row + rl, sizeof row - rl, "%s|",
                                   PQgetisnull(res, r, c) ? "NULL" : PQgetvalue(res, r, c));
        assert_true(rl < sizeof row);
        if (PQgetvalue(res, r, SQL_RUN_CLAIM_C_KIND)[0] == 'd') {
            assert_true(nd < PGP_ARRAY_LEN(drained));
            drained[nd++] = strdup(row);
            continue;
        }
        (*items)++;
        len += (size_t)snprintf(out + len, cap - len, "%s ; ", row);
        assert_true(len < cap);
    }
    PQclear(res);
    qsort(drained, nd, sizeof *drained, cmp_str);
    for (size_t i = 0; i < nd; i++) {
        len += (size_t)snprintf(out + len, cap - len, "%s ; ", drained[i]);
        assert_true(len < cap);
        free(drained[i]);
    }
    /* Claimed rows by their lease (now() is the transaction's), the others as they were. */
    char *queue = tl_query_str(
        conn, "SELECT string_agg(item_id || ':' || attempt || ':' || coalesce(claim_token::text, "
              "'-') || ':' || coalesce(claimed_by, '-') || ':' || CASE WHEN claim_token = 4242 "
              "THEN (next_action_at - now())::text || ':' || (claimed_at = now())::text ELSE "
              "next_action_at::text END, ' ' ORDER BY item_id) FROM pgpace.queue");
    tl_exec(conn, "ROLLBACK");
    len += (size_t)snprintf(out + len, cap - len, "queue %s", queue);
    assert_true(len < cap);
    free(queue);
    return out;
}

static void lean_statement_claims_as_run_claim(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    tl_exec(conn, "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, "
                  "signing_secrets) SELECT n, 'unlimited', 1, 'http://127.0.0.1:9/' || n, "
                  "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] "
                  "FROM unnest(ARRAY['a', 'b', 'c', 'other']) n");
    /* a: 5 due (one of priority 5, one stale: an expired lease of another claimer) and one
     * later; b: 2 due and one later, asked for 5; c: nothing, asked for 2; other: due, not in
     * the round. No two due at the same time: the order is then the same in both. */
    tl_exec(conn, "SELECT pgpace.enqueue(n, jsonb_build_object('n', n, 'g', g), "
                  "run_at => now() - interval '1 hour' + g * interval '1 second' + ascii(n) * "
                  "interval '1 ms') "
                  "FROM unnest(ARRAY['a', 'b', 'other']) n, generate_series(1, 5) g "
                  "WHERE n <> 'b' OR g <= 2");
    tl_exec(conn, "SELECT pgpace.enqueue(n, '{\"later\": true}', run_at => now() + "
                  "interval '1 hour' + g * interval '1 minute') "
                  "FROM unnest(ARRAY['a', 'b']) WITH ORDINALITY AS x(n, g)");
    tl_exec(conn, "UPDATE pgpace.queue q SET priority = 5 FROM pgpace.item i "
                  "WHERE i.id = q.item_id AND i.payload = '{\"n\": \"a\", \"g\": 4}'");
    tl_exec(conn, "UPDATE pgpace.queue q SET claim_token = 99, claimed_by = 'ghost', "
                  "claimed_at = now() - interval '2 min', attempt = 1 FROM pgpace.item i "
                  "WHERE i.id = q.item_id AND i.payload = '{\"n\": \"a\", \"g\": 2}'");
    long long a = tl_query_int(conn, "SELECT id FROM pgpace.customer WHERE name = 'a'");
    long long b = tl_query_int(conn, "SELECT id FROM pgpace.customer WHERE name = 'b'");
    long long c = tl_query_int(conn, "SELECT id FROM pgpace.customer WHERE name = 'c'");
    char ids[96];
    snprintf(ids, sizeof ids, "{%lld,%lld,%lld}", a, b, c);
    const char *p[SQL_RUN_CLAIM_NPARAMS];
    plain_round(ids, "{3,5,2}", "{\"\",\"\",\"\"}", p);
    claim_stmt st;
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim_unlimited);

    int full_items, lean_items;
    char *full = claim_outcome(conn, sql_q_run_claim, SQL_RUN_CLAIM_NPARAMS, p, &full_items);
    char *lean = claim_outcome(conn, st.sql, st.nparams, st.params, &lean_items);
    assert_string_equal(lean, full);

    /* And what they agree on is right: a's 3 most urgent (its priority-5 item first) and b's 2;
     * a's stale item is reported and counts its second attempt; b and c come back short, b
     * with the time of its later item, c with none. */
    assert_int_equal(full_items, 5);
    char first[1024];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(full, ";"), full);
    tl_assert_contains(first, "|{\"g\": 4, \"n\": \"a\"}|");
    char *stale = tl_query_str(conn, "SELECT 'i|' || q.item_id || '|' || q.customer_id || '||2|' "
                                     "|| q.max_attempts || '|t|' FROM pgpace.queue q "
                                     "WHERE q.claim_token = 99");
    tl_assert_contains(full, stale);
    free(stale);
    char *b_next = tl_query_str(conn,
                                "SELECT 'd|NULL|%lld||NULL|NULL|NULL|NULL|NULL|' || "
                                "(extract(epoch FROM min(next_action_at)) * 1000000)::bigint || "
                                "'|' FROM pgpace.queue WHERE customer_id = %lld "
                                "AND next_action_at > now()",
                                b, b);
    tl_assert_contains(full, b_next);
    free(b_next);
    char c_none[96];
    snprintf(c_none, sizeof c_none, "d|NULL|%lld||NULL|NULL|NULL|NULL|NULL|NULL|", c);
    tl_assert_contains(full, c_none);
    free(full);
    free(lean);
}

/* Both claim statements skip rows past their deadline (the sweep dead-letters them), return
 * each claimed item's deadline, and clear its supersede_key: once claimed, an item is never
 * superseded. */
static void claims_skip_expired_and_clear_supersede_keys(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    tl_exec(conn, "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, "
                  "signing_secrets) VALUES ('a', 'unlimited', 1, 'http://127.0.0.1:9/a', "
                  "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'])");
    long long live = tl_query_int(conn, "SELECT pgpace.enqueue('a', '{\"x\":1}', run_at => now() - "
                                        "interval '3 s', expires_at => now() + interval '1 hour', "
                                        "supersede_key => 's1')");
    long long dead = tl_query_int(conn, "SELECT pgpace.enqueue('a', '{\"x\":2}', run_at => now() - "
                                        "interval '2 s', expires_at => now() + interval '1 hour')");
    tl_exec(conn,
            "UPDATE pgpace.queue SET expires_at = now() - interval '1 s' WHERE item_id = %lld",
            dead);
    long long plain = tl_query_int(conn, "SELECT pgpace.enqueue('a', '{\"x\":3}', run_at => now() "
                                         "- interval '1 s')");
    long long a = tl_query_int(conn, "SELECT id FROM pgpace.customer WHERE name = 'a'");
    char ids[32];
    snprintf(ids, sizeof ids, "{%lld}", a);
    const char *p[SQL_RUN_CLAIM_NPARAMS];
    plain_round(ids, "{10}", "{\"\"}", p);
    p[SQL_RUN_CLAIM_P_PAIR_IN_FLIGHT] = "{0}";
    claim_stmt st;
    claim_statement(p, false, &st);
    assert_ptr_equal(st.sql, sql_q_run_claim_unlimited);
    const struct {
        const char *sql;
        int n;
        const char *const *params;
    } both[] = {{sql_q_run_claim, SQL_RUN_CLAIM_NPARAMS, p}, {st.sql, st.nparams, st.params}};
    for (size_t k = 0; k < PGP_ARRAY_LEN(both); k++) {
        tl_exec(conn, "BEGIN");
        PGresult *res =
            PQexecParams(conn, both[k].sql, both[k].n, NULL, both[k].params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
            fail_msg("claim failed: %s", PQresultErrorMessage(res));
        int items = 0;
        for (int r = 0; r < PQntuples(res); r++) {
            claim_row row;
            claim_row_parse(res, r, &row);
            if (!row.is_item)
                continue;
            items++;
            assert_true(row.item_id == live || row.item_id == plain);
            /* The time left from the statement's start (the transaction's now()), which the
             * dispatcher counts on its own clock. */
            long long want = row.item_id == live
                                 ? tl_query_int(conn,
                                                "SELECT (extract(epoch FROM expires_at - now()) * "
                                                "1000000)::bigint FROM pgpace.queue WHERE item_id "
                                                "= %lld",
                                                live)
                                 : 0;
            assert_int_equal(row.expires_in_us, want);
        }
        PQclear(res);
        assert_int_equal(items, 2);
        assert_int_equal(tl_query_int(conn,
                                      "SELECT count(*) FROM pgpace.queue WHERE supersede_key IS "
                                      "NULL AND claim_token = 4242 AND item_id IN (%lld, %lld)",
                                      live, plain),
                         2);
        assert_int_equal(tl_query_int(conn,
                                      "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld AND "
                                      "claim_token IS NULL",
                                      dead),
                         1);
        tl_exec(conn, "ROLLBACK");
    }
}

/* Runs run_finalize_success.sql; returns the ids it reports, comma-separated. */
static char *finalize_success(PGconn *conn, const char *const params[6])
{
    PGresult *res = PQexecParams(conn, sql_q_run_finalize_success, SQL_RUN_FINALIZE_SUCCESS_NPARAMS,
                                 NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("run_finalize_success.sql failed: %s", PQresultErrorMessage(res));
    char out[256] = "";
    size_t n = 0;
    for (int r = 0; r < PQntuples(res) && n < sizeof out - 24; r++)
        n += (size_t)snprintf(out + n, sizeof out - n, "%s%s", r ? "," : "",
                              PQgetvalue(res, r, SQL_RUN_FINALIZE_SUCCESS_C_ITEM_ID));
    PQclear(res);
    char *s = strdup(out);
    assert_non_null(s);
    return s;
}

static void success_deletes_what_it_owns_and_reports_the_rest(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    tl_exec(conn, "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, "
                  "signing_secrets) VALUES ('x', 'unlimited', 1, 'http://127.0.0.1:9/x', "
                  "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'])");
    tl_exec(conn, "SELECT pgpace.enqueue('x', jsonb_build_object('g', g)) "
                  "FROM generate_series(1, 4) g");
    /* Items 1-3 held under token 7 (item 2 on its second attempt), item 4 by another claimer. */
    tl_exec(conn, "UPDATE pgpace.queue SET claim_token = CASE WHEN item_id = (SELECT max(item_id) "
                  "FROM pgpace.queue) THEN 8 ELSE 7 END, claimed_by = 'test', "
                  "claimed_at = now(), next_action_at = now() + interval '1 min', attempt = 1");
    char *ids = tl_query_str(conn, "SELECT array_agg(item_id ORDER BY item_id)::text FROM "
                                   "pgpace.queue");
    long long i1 = tl_query_int(conn, "SELECT min(item_id) FROM pgpace.queue");
    long long i4 = tl_query_int(conn, "SELECT max(item_id) FROM pgpace.queue");
    tl_exec(conn, "UPDATE pgpace.queue SET attempt = 2 WHERE item_id = %lld + 1", i1);
    char *before4 = tl_query_str(
        conn, "SELECT row_to_json(q)::text FROM pgpace.queue q WHERE item_id = %lld", i4);

    const char *p[SQL_RUN_FINALIZE_SUCCESS_NPARAMS] = {
        [SQL_RUN_FINALIZE_SUCCESS_P_ITEM] = ids,
        [SQL_RUN_FINALIZE_SUCCESS_P_TOKEN] = "{7,7,7,7}",
        [SQL_RUN_FINALIZE_SUCCESS_P_HTTP_STATUS] = "{200,201,204,200}",
        [SQL_RUN_FINALIZE_SUCCESS_P_STARTED_US] =
            "{1764000000000001,1764000000000002,1764000000000003,1764000000000004}",
        [SQL_RUN_FINALIZE_SUCCESS_P_DURATION_MS] = "{1.5,2.5,3.5,4.5}",
        [SQL_RUN_FINALIZE_SUCCESS_P_EXCERPT] = "{NULL,ok,NULL,NULL}",
    };
    char *lost = finalize_success(conn, p);
    char want[32];
    snprintf(want, sizeof want, "%lld", i4);
    assert_string_equal(lost, want);
    free(lost);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue"), 1);
    char *after4 = tl_query_str(
        conn, "SELECT row_to_json(q)::text FROM pgpace.queue q WHERE item_id = %lld", i4);
    assert_string_equal(after4, before4);
    char *log = tl_query_str(
        conn,
        "SELECT string_agg(concat_ws(':', item_id - %lld, attempt, http_status, "
        "(extract(epoch FROM started_at) * 1000000)::bigint - 1764000000000000, "
        "duration_ms, outcome, coalesce(response_excerpt, '-')), ' ' ORDER BY item_id) "
        "FROM pgpace.delivery_attempt",
        i1);
    assert_string_equal(log, "0:1:200:1:1.5:success:- 1:2:201:2:2.5:success:ok "
                             "2:1:204:3:3.5:success:-");
    free(log);

    /* Again with item 4's own token: all owned, nothing reported. */
    char one[32];
    snprintf(one, sizeof one, "{%lld}", i4);
    const char *q[SQL_RUN_FINALIZE_SUCCESS_NPARAMS] = {one, "{8}", "{200}", "{1}", "{1}", "{NULL}"};
    lost = finalize_success(conn, q);
    assert_string_equal(lost, "");
    free(lost);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue"), 0);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.delivery_attempt"), 4);
    free(after4);
    free(before4);
    free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lean_statement_only_for_plain_rounds),
        cmocka_unit_test_setup_teardown(lean_statement_claims_as_run_claim, setup, teardown),
        cmocka_unit_test_setup_teardown(recovery_pace_limits_recovered_claims, setup, teardown),
        cmocka_unit_test_setup_teardown(claims_skip_expired_and_clear_supersede_keys, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(success_deletes_what_it_owns_and_reports_the_rest, setup,
                                        teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
