/* test_order_keys.c - ordered delivery per key (issue 32, 0020_order_keys.sql) at SQL level:
 * the claim statements, run_finalize.sql, the dead letters and the enqueue paths, on a real
 * PostgreSQL.
 * - Both claim statements give out only the head of each key (whatever its priority); a head
 *   that is retrying, in flight, or whose lease ran out blocks its key only: other keys and
 *   items without a key go on.
 * - A dead head: 'skip' (the default) lets the key's next item go and its dead letter says
 *   'skipped'; 'hold' stops the key ('held') until `pgpace dlq replay` puts the head back at the
 *   head of its key, or `pgpace dlq purge` discards it. A replayed item waits for an item of
 *   its key already in flight, then goes before the key's later items.
 * - A supersede key on a keyed item: order wins (only the key's last queued item is replaced).
 * - Empty, over-long and control-character keys are refused naming the field, on every path.
 * - Fan-out: each delivery carries the event's key.
 * - Two connections claiming at once never hold two items of one key, and each key's items are
 *   claimed in enqueue order.
 * - Parking: an item behind its key's head is out of the claim index until the head is gone;
 *   under REPEATABLE READ it is left unparked (and still waits); when the key's lock is taken
 *   as its head is deleted, the leader's recheck unparks the next item once the lock is free. */
#include "testlib.h"

#include "sql_embed.h"

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

static long long add_customer(PGconn *conn, const char *name, const char *on_dead)
{
    tl_exec(conn,
            "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, "
            "signing_secrets, order_on_dead) VALUES ('%s', 'unlimited', 60, "
            "'http://127.0.0.1:9/x', ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], '%s')",
            name, on_dead);
    return tl_query_int(conn, "SELECT id FROM pgpace.customer WHERE name = '%s'", name);
}

/* Enqueues {"n": n} for `customer` with order key `key` (NULL: none) and `priority`. */
static void put(PGconn *conn, const char *customer, const char *n, const char *key, int priority)
{
    if (key)
        tl_exec(conn,
                "SELECT pgpace.enqueue('%s', jsonb_build_object('n', '%s'), priority => %d, "
                "order_key => '%s')",
                customer, n, priority, key);
    else
        tl_exec(conn, "SELECT pgpace.enqueue('%s', jsonb_build_object('n', '%s'), priority => %d)",
                customer, n, priority);
}

/* One claim round for customer `cust` (up to 10 items) with run_claim.sql (full) or
 * run_claim_unlimited.sql, under `token`; returns the claimed items' names in claim order,
 * comma-separated (owned). */
static char *claim(PGconn *conn, bool full, long long cust, long long token)
{
    char ids[32], tok[32];
    snprintf(ids, sizeof ids, "{%lld}", cust);
    snprintf(tok, sizeof tok, "%lld", token);
    PGresult *res;
    if (full) {
        const char *p[SQL_RUN_CLAIM_NPARAMS] = {
            [SQL_RUN_CLAIM_P_PAIR_CUSTOMER] = ids,
            [SQL_RUN_CLAIM_P_PAIR_CARRIER] = "{\"\"}",
            [SQL_RUN_CLAIM_P_PAIR_LIMIT] = "{10}",
            [SQL_RUN_CLAIM_P_PAIR_IN_FLIGHT] = "{0}",
            [SQL_RUN_CLAIM_P_CUSTOMER] = ids,
            [SQL_RUN_CLAIM_P_CUSTOMER_LIMIT] = "{10}",
            [SQL_RUN_CLAIM_P_CARRIER] = "{}",
            [SQL_RUN_CLAIM_P_CARRIER_BUDGET] = "{}",
            [SQL_RUN_CLAIM_P_DEFAULT_CARRIER_BUDGET] = "100",
            [SQL_RUN_CLAIM_P_LEASE_S] = "60",
            [SQL_RUN_CLAIM_P_TOKEN] = tok,
            [SQL_RUN_CLAIM_P_CLAIMED_BY] = "test",
            [SQL_RUN_CLAIM_P_FR_CUSTOMER] = "{}",
            [SQL_RUN_CLAIM_P_FR_BASE] = "{}",
            [SQL_RUN_CLAIM_P_FR_PERIOD] = "{}",
            [SQL_RUN_CLAIM_P_FR_CREDIT] = "{}",
        };
        res = PQexecParams(conn, sql_q_run_claim, SQL_RUN_CLAIM_NPARAMS, NULL, p, NULL, NULL, 0);
    } else {
        const char *p[SQL_RUN_CLAIM_UNLIMITED_NPARAMS] = {
            [SQL_RUN_CLAIM_UNLIMITED_P_PAIR_CUSTOMER] = ids,
            [SQL_RUN_CLAIM_UNLIMITED_P_PAIR_LIMIT] = "{10}",
            [SQL_RUN_CLAIM_UNLIMITED_P_LEASE_S] = "60",
            [SQL_RUN_CLAIM_UNLIMITED_P_TOKEN] = tok,
            [SQL_RUN_CLAIM_UNLIMITED_P_CLAIMED_BY] = "test",
        };
        res = PQexecParams(conn, sql_q_run_claim_unlimited, SQL_RUN_CLAIM_UNLIMITED_NPARAMS, NULL,
                           p, NULL, NULL, 0);
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("claim failed: %s", PQresultErrorMessage(res));
    char *out = calloc(1, 4096);
    size_t len = 0;
    int kind = PQfnumber(res, "kind"), payload = PQfnumber(res, "payload");
    for (int r = 0; r < PQntuples(res); r++) {
        if (strcmp(PQgetvalue(res, r, kind), "i") != 0)
            continue;
        /* The payload is {"n": "x1"}: its name is between the third and fourth quote. */
        const char *p = PQgetvalue(res, r, payload);
        const char *q = strchr(p, ':');
        assert_non_null(q);
        q = strchr(q, '"');
        assert_non_null(q);
        const char *e = strchr(q + 1, '"');
        assert_non_null(e);
        len += (size_t)snprintf(out + len, 4096 - len, "%s%.*s", len ? "," : "", (int)(e - q - 1),
                                q + 1);
        assert_true(len < 4096);
    }
    PQclear(res);
    return out;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Asserts the names claimed, in any order (the claim returns them by due time); `want` is
 * sorted. */
static void expect_claim(PGconn *conn, bool full, long long cust, long long token, const char *want)
{
    char *names = claim(conn, full, cust, token);
    char *parts[64], *save = NULL;
    size_t n = 0;
    for (char *t = strtok_r(names, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save))
        parts[n++] = t;
    qsort(parts, n, sizeof parts[0], cmp_str);
    char *got = calloc(1, 4096);
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(got + len, 4096 - len, "%s%s", i ? "," : "", parts[i]);
    free(names);
    if (strcmp(got, want) != 0)
        fail_msg("claim %lld (%s): got '%s', want '%s'", token, full ? "run_claim" : "unlimited",
                 got, want);
    free(got);
}

/* Finalizes item `n` (as claimed under its current token) with `outcome` (delay 0: a retry is
 * due again at once). */
static void finalize(PGconn *conn, const char *n, const char *outcome)
{
    char *id = tl_query_str(conn,
                            "SELECT '{' || q.item_id || '}' FROM pgpace.queue q JOIN "
                            "pgpace.item i ON i.id = q.item_id WHERE i.payload ->> 'n' = '%s'",
                            n);
    char *tok = tl_query_str(conn,
                             "SELECT '{' || q.claim_token || '}' FROM pgpace.queue q JOIN "
                             "pgpace.item i ON i.id = q.item_id WHERE i.payload ->> 'n' = '%s'",
                             n);
    assert_true(strlen(id) > 2 && strlen(tok) > 2);
    char oc[32];
    snprintf(oc, sizeof oc, "{%s}", outcome);
    const char *p[SQL_RUN_FINALIZE_NPARAMS] = {
        [SQL_RUN_FINALIZE_P_ITEM] = id,
        [SQL_RUN_FINALIZE_P_TOKEN] = tok,
        [SQL_RUN_FINALIZE_P_OUTCOME] = oc,
        [SQL_RUN_FINALIZE_P_DELAY_MS] = "{0}",
        [SQL_RUN_FINALIZE_P_HTTP_STATUS] = "{500}",
        [SQL_RUN_FINALIZE_P_ERROR_CLASS] = "{http}",
        [SQL_RUN_FINALIZE_P_ERROR] = "{\"HTTP 500\"}",
        [SQL_RUN_FINALIZE_P_STARTED_US] = "{0}",
        [SQL_RUN_FINALIZE_P_DURATION_MS] = "{1}",
        [SQL_RUN_FINALIZE_P_EXCERPT] = "{NULL}",
    };
    PGresult *res =
        PQexecParams(conn, sql_q_run_finalize, SQL_RUN_FINALIZE_NPARAMS, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("finalize failed: %s", PQresultErrorMessage(res));
    assert_int_equal(PQntuples(res), 0); /* it owned the item */
    PQclear(res);
    free(id);
    free(tok);
}

/* The same story with either claim statement. */
static void heads_only_and_a_retrying_head_blocks_its_key_only(PGconn *conn, bool full,
                                                               const char *name)
{
    long long c = add_customer(conn, name, "skip");
    /* Key A: a2 has the highest priority, yet order wins. Key B, and two items without a key
     * (n2 of a lower priority than the keyed heads). */
    put(conn, name, "a1", "A", 0);
    put(conn, name, "a2", "A", 100);
    put(conn, name, "a3", "A", 0);
    put(conn, name, "b1", "B", 0);
    put(conn, name, "b2", "B", 0);
    put(conn, name, "n1", NULL, 0);
    put(conn, name, "n2", NULL, -1);
    expect_claim(conn, full, c, 1, "a1,b1,n1,n2");
    expect_claim(conn, full, c, 2, ""); /* heads in flight: their keys wait */

    /* a1 fails and is due again at once: it is claimed again, a2 still waits. b1 is delivered:
     * b2 goes. */
    finalize(conn, "a1", "retry");
    finalize(conn, "b1", "success");
    expect_claim(conn, full, c, 3, "a1,b2");

    /* a1's lease runs out (a dispatcher died): it is claimed again (stale), a2 still waits. */
    tl_exec(conn, "UPDATE pgpace.queue q SET next_action_at = now() - interval '1 second' FROM "
                  "pgpace.item i WHERE i.id = q.item_id AND i.payload ->> 'n' = 'a1'");
    expect_claim(conn, full, c, 4, "a1");
    finalize(conn, "a1", "success");
    expect_claim(conn, full, c, 5, "a2");
    finalize(conn, "a2", "success");
    expect_claim(conn, full, c, 6, "a3");
    assert_int_equal(tl_query_int(conn,
                                  "SELECT count(*) FROM pgpace.queue WHERE customer_id = %lld "
                                  "AND order_key IS NOT NULL AND claim_token IS NULL",
                                  c),
                     0);
}

static void claim_order_per_key(void **state)
{
    tl_db *db = *state;
    heads_only_and_a_retrying_head_blocks_its_key_only(db->conn, false, "lean");
    heads_only_and_a_retrying_head_blocks_its_key_only(db->conn, true, "full");
}

static tl_proc dlq(tl_db *db, const char *verb, const char *customer, const char *error)
{
    if (strcmp(verb, "replay") == 0)
        return tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", verb, "--customer", customer,
                                 "--error", error, "--rate", "600000"),
                         NULL, NULL);
    return tl_pgpace(
        TL_ARGV("--db", db->conninfo, "dlq", verb, "--customer", customer, "--error", error), NULL,
        NULL);
}

static void skip_and_hold(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    long long s = add_customer(conn, "s", "skip");
    long long h = add_customer(conn, "h", "skip");
    /* Set as an operator does; a bad value is refused naming the option. */
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "set", "h", "--order-on-dead", "stop"),
                  NULL, NULL);
    assert_int_not_equal(p.status, 0);
    tl_assert_contains(p.err, "--order-on-dead: expected skip or hold");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "set", "h", "--order-on-dead", "hold"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "get", "h"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "hold");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.customer WHERE name = 'h' AND "
                                        "order_on_dead = 'hold'"),
                     1);

    /* skip: the dead head's key goes on, and its dead letter says it was skipped. */
    put(conn, "s", "x1", "K", 0);
    put(conn, "s", "x2", "K", 0);
    expect_claim(conn, false, s, 1, "x1");
    finalize(conn, "x1", "dead");
    char *row = tl_query_str(conn,
                             "SELECT order_key || ' ' || order_action FROM pgpace.dead_letter "
                             "WHERE customer_id = %lld",
                             s);
    assert_string_equal(row, "K skipped");
    free(row);
    expect_claim(conn, false, s, 2, "x2");

    /* hold: the key stops, other keys do not. */
    put(conn, "h", "x1h", "K", 0);
    put(conn, "h", "x2h", "K", 0);
    put(conn, "h", "x3h", "K", 0);
    put(conn, "h", "z1", "Z", 0);
    put(conn, "h", "z2", "Z", 0);
    put(conn, "h", "y1", "L", 0);
    expect_claim(conn, false, h, 3, "x1h,y1,z1");
    finalize(conn, "x1h", "dead");
    row = tl_query_str(conn,
                       "SELECT string_agg(order_key || ' ' || order_action, ',') FROM "
                       "pgpace.dead_letter WHERE customer_id = %lld",
                       h);
    assert_string_equal(row, "K held");
    free(row);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "list", "--customer", "h"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "held K");
    tl_proc_free(&p);
    put(conn, "h", "y2", "L", 0);
    finalize(conn, "y1", "success");
    expect_claim(conn, true, h, 4, "y2"); /* not x2h */
    expect_claim(conn, false, h, 5, "");

    /* Replayed: back at the head of its key (its own id, before x2h). */
    tl_exec(conn, "UPDATE pgpace.dead_letter SET last_error = 'xfail' WHERE customer_id = %lld", h);
    p = dlq(db, "replay", "h", "xfail");
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.order_hold"), 0);
    expect_claim(conn, false, h, 6, "x1h");
    finalize(conn, "x1h", "success");
    expect_claim(conn, false, h, 7, "x2h");

    /* Purged (discarded): the key goes on without it. */
    finalize(conn, "z1", "dead");
    expect_claim(conn, false, h, 8, "");
    tl_exec(conn,
            "UPDATE pgpace.dead_letter SET last_error = 'zfail' WHERE customer_id = %lld AND "
            "order_key = 'Z'",
            h);
    p = dlq(db, "purge", "h", "zfail");
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    expect_claim(conn, true, h, 9, "z2");
}

static void replay_waits_for_the_key_in_flight_then_goes_first(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    long long s = add_customer(conn, "s", "skip");
    put(conn, "s", "x1", "K", 0);
    put(conn, "s", "x2", "K", 0);
    put(conn, "s", "x3", "K", 0);
    expect_claim(conn, false, s, 1, "x1");
    finalize(conn, "x1", "dead");
    expect_claim(conn, false, s, 2, "x2");
    /* x1 comes back while x2 is in flight: it waits for x2, and then goes before x3. */
    tl_proc p = dlq(db, "replay", "s", "HTTP 500");
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON "
                                        "i.id = q.item_id WHERE i.payload ->> 'n' = 'x1' AND "
                                        "q.order_key = 'K'"),
                     1);
    expect_claim(conn, true, s, 3, "");
    finalize(conn, "x2", "success");
    expect_claim(conn, true, s, 4, "x1");
    finalize(conn, "x1", "success");
    expect_claim(conn, false, s, 5, "x3");
}

static void supersede_with_order_key_order_wins(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    long long c = add_customer(conn, "c", "skip");
    /* The key's tail with the supersede key is replaced in place. */
    long long e1 = tl_query_int(conn, "SELECT pgpace.enqueue('c', '{\"n\": \"v1\"}', order_key => "
                                      "'K', supersede_key => 'S')");
    long long e2 = tl_query_int(conn, "SELECT pgpace.enqueue('c', '{\"n\": \"v2\"}', order_key => "
                                      "'K', supersede_key => 'S')");
    assert_int_equal(e2, e1);
    /* Not once a later item of the key is queued behind it: the new one goes to the end of the
     * key and takes the supersede key over; the old one keeps v2 and its place. */
    put(conn, "c", "f1", "K", 0);
    long long e3 = tl_query_int(conn, "SELECT pgpace.enqueue('c', '{\"n\": \"v3\"}', order_key => "
                                      "'K', supersede_key => 'S')");
    assert_true(e3 > e1);
    /* Nor an item of another order key (or none). */
    long long e4 = tl_query_int(conn, "SELECT pgpace.enqueue('c', '{\"n\": \"v4\"}', order_key => "
                                      "'K2', supersede_key => 'S')");
    assert_true(e4 > e3);
    long long e5 = tl_query_int(conn, "SELECT pgpace.enqueue('c', '{\"n\": \"v5\"}', order_key => "
                                      "'K2', supersede_key => 'S')");
    assert_int_equal(e5, e4); /* the tail of K2 */
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue WHERE supersede_key = "
                                        "'S'"),
                     1);
    expect_claim(conn, false, c, 1, "v2,v5");
    finalize(conn, "v2", "success");
    expect_claim(conn, false, c, 2, "f1");
    finalize(conn, "f1", "success");
    expect_claim(conn, false, c, 3, "v3");
}

static void bad_keys_refused_naming_the_field(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    add_customer(conn, "c", "skip");
    tl_expect_sql_error(conn, "SELECT pgpace.enqueue('c', '{}', order_key => '')", "22023",
                        "order_key must not be empty", NULL);
    tl_expect_sql_error(conn, "SELECT pgpace.enqueue('c', '{}', order_key => repeat('k', 256))",
                        "22023", "order_key must be at most 255 characters, got 256", NULL);
    tl_expect_sql_error(conn, "SELECT pgpace.enqueue('c', '{}', order_key => E'a\\nb')", "22023",
                        "order_key must not contain control characters", NULL);
    /* 255 characters (not bytes) is fine. */
    tl_exec(conn, "SELECT pgpace.enqueue('c', '{}', order_key => repeat('é', 255))");
    tl_expect_sql_error(conn,
                        "SELECT * FROM pgpace.enqueue_json('{\"customer\": \"c\", "
                        "\"payload\": 1, \"order_key\": \"\"}')",
                        "22023", "field order_key: must not be empty", NULL);
    tl_expect_sql_error(conn,
                        "SELECT * FROM pgpace.enqueue_json('{\"customer\": \"c\", "
                        "\"payload\": 1, \"order_key\": 7}')",
                        "22023", "field order_key: must be a string", NULL);

    /* The CLI, one item and a file. */
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "c", "{}", "--order-key", ""),
                          NULL, NULL);
    assert_int_not_equal(p.status, 0);
    tl_assert_contains(p.err, "--order-key");
    tl_proc_free(&p);
    char big[300];
    memset(big, 'k', 256);
    big[256] = '\0';
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "c", "{}", "--order-key", big), NULL,
                  NULL);
    assert_int_not_equal(p.status, 0);
    tl_assert_contains(p.err, "order_key must be at most 255 characters");
    tl_proc_free(&p);
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "enqueue", "c", "{\"n\": \"cli\"}", "--order-key", "K"), NULL,
        NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", "-"),
                  "{\"customer\": \"c\", \"payload\": 1, \"order_key\": \"K\"}\n"
                  "{\"customer\": \"c\", \"payload\": 2, \"order_key\": \"\"}\n",
                  NULL);
    assert_int_not_equal(p.status, 0);
    tl_assert_contains(p.err, "line 2: field order_key: must not be empty");
    tl_proc_free(&p);
    /* Nothing of the refused file, the item of the good command. */
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue WHERE order_key = 'K'"),
                     1);
    /* A good file: keyed lines keep line order within their key, others load set-wise. */
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", "-"),
                  "{\"customer\": \"c\", \"payload\": {\"n\": \"f1\"}, \"order_key\": \"F\"}\n"
                  "{\"customer\": \"c\", \"payload\": {\"n\": \"plain\"}}\n"
                  "{\"customer\": \"c\", \"payload\": {\"n\": \"f2\"}, \"order_key\": \"F\"}\n",
                  NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    char *order = tl_query_str(conn, "SELECT string_agg(i.payload ->> 'n', ',' ORDER BY q.item_id) "
                                     "FROM pgpace.queue q JOIN pgpace.item i ON i.id = q.item_id "
                                     "WHERE q.order_key = 'F'");
    assert_string_equal(order, "f1,f2");
    free(order);
}

static void fanout_deliveries_carry_the_key(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    add_customer(conn, "t", "skip");
    tl_exec(conn, "INSERT INTO pgpace.customer (name, parent_id, endpoint_name, mode, "
                  "rate_per_minute, webhook_url, signing_secrets, order_on_dead) SELECT 't/' || e, "
                  "c.id, e, 'unlimited', 60, 'http://127.0.0.1:9/' || e, "
                  "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], 'skip' FROM pgpace.customer c, "
                  "unnest(ARRAY['e1', 'e2']) e WHERE c.name = 't'");
    long long ev = tl_query_int(conn, "SELECT pgpace.enqueue('t', '{\"n\": \"ev\"}', order_key => "
                                      "'K')");
    /* The customer's own receiver and both endpoints: three deliveries, each with the key. */
    assert_int_equal(tl_query_int(conn,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON "
                                  "i.id = q.item_id WHERE i.event_id = %lld AND q.order_key = 'K' "
                                  "AND i.order_key = 'K'",
                                  ev),
                     3);
    /* With a supersede key too (the per-endpoint path). */
    tl_exec(conn, "SELECT pgpace.enqueue('t', '{\"n\": \"ev2\"}', order_key => 'K', "
                  "supersede_key => 'S')");
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue WHERE order_key = 'K' "
                                        "AND supersede_key = 'S'"),
                     3);
    long long e1 = tl_query_int(conn, "SELECT id FROM pgpace.customer WHERE name = 't/e1'");
    expect_claim(conn, false, e1, 1, "ev");
}

/* Two connections claim the same customer at once, round after round, the first one's
 * transaction still open while the second claims; what they got is then delivered, or given
 * back for a retry (some heads, on their first attempt). Never two items of one key claimed at
 * once, and each key's items in enqueue order: the item claimed is always the key's next
 * undelivered one. */
static void concurrent_claims_never_share_a_key(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    long long c = add_customer(conn, "c", "skip");
    enum { KEYS = 12, PER_KEY = 5 };
    /* Interleaved: k0.0, k1.0, ..., k0.1, ...; the name is "k<key>.<seq>". */
    tl_exec(conn,
            "SELECT pgpace.enqueue('c', jsonb_build_object('n', 'k' || (g %% %d) || '.' || "
            "(g / %d)), order_key => 'k' || (g %% %d)) FROM generate_series(0, %d) g",
            KEYS, KEYS, KEYS, KEYS * PER_KEY - 1);
    PGconn *other = PQconnectdb(db->conninfo);
    assert_int_equal(PQstatus(other), CONNECTION_OK);
    int done[KEYS] = {0}, delivered = 0, retried = 0;
    for (int round = 0; round < 100 && delivered < KEYS * PER_KEY; round++) {
        tl_exec(conn, "BEGIN");
        char *a = claim(conn, round % 2 == 0, c, 1000 + round);
        char *b = claim(other, round % 2 == 1, c, 2000 + round);
        tl_exec(conn, "COMMIT");
        assert_int_equal(tl_query_int(conn, "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n "
                                            "FROM pgpace.queue WHERE claim_token IS NOT NULL "
                                            "GROUP BY order_key) x"),
                         *a || *b ? 1 : 0);
        char both[8192];
        snprintf(both, sizeof both, "%s%s%s", a, *a && *b ? "," : "", b);
        free(a);
        free(b);
        bool seen[KEYS] = {false};
        char *save = NULL;
        for (char *tok = strtok_r(both, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            int k, seq;
            assert_int_equal(sscanf(tok, "k%d.%d", &k, &seq), 2);
            assert_true(k >= 0 && k < KEYS);
            if (seen[k])
                fail_msg("round %d: two items of key k%d claimed at once", round, k);
            seen[k] = true;
            if (seq != done[k])
                fail_msg("round %d: key k%d: item %d claimed, %d delivered before", round, k, seq,
                         done[k]);
            if ((seq + round) % 4 == 0 &&
                tl_query_int(conn,
                             "SELECT q.attempt FROM pgpace.queue q JOIN pgpace.item i ON i.id = "
                             "q.item_id WHERE i.payload ->> 'n' = '%s'",
                             tok) == 1) {
                finalize(conn, tok, "retry");
                retried++;
            } else {
                finalize(conn, tok, "success");
                done[k]++;
                delivered++;
            }
        }
    }
    assert_int_equal(delivered, KEYS * PER_KEY);
    assert_true(retried > 0);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue"), 0);
    PQfinish(other);
}

static long long parked(PGconn *conn, const char *n)
{
    return tl_query_int(conn,
                        "SELECT (q.next_action_at IS NULL)::int FROM pgpace.queue q JOIN "
                        "pgpace.item i ON i.id = q.item_id WHERE i.payload ->> 'n' = '%s'",
                        n);
}

static void parked_behind_the_head_and_unparked_after_it(void **state)
{
    tl_db *db = *state;
    PGconn *conn = db->conn;
    long long c = add_customer(conn, "c", "skip");
    put(conn, "c", "a1", "a", 0);
    put(conn, "c", "a2", "a", 0);
    tl_exec(conn, "BEGIN");
    put(conn, "c", "a3", "a", 5); /* parked as it is inserted */
    assert_int_equal(parked(conn, "a3"), 1);
    tl_exec(conn, "COMMIT");
    put(conn, "c", "x", NULL, 0);
    assert_int_equal(parked(conn, "a1"), 0);
    assert_int_equal(parked(conn, "a2"), 1);
    assert_int_equal(parked(conn, "a3"), 1);
    assert_int_equal(parked(conn, "x"), 0);
    /* A producer under REPEATABLE READ does not park (its snapshot may predate the head's
     * delete); its item waits all the same. */
    tl_exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    put(conn, "c", "a4", "a", 0);
    tl_exec(conn, "COMMIT");
    assert_int_equal(parked(conn, "a4"), 0);
    expect_claim(conn, true, c, 1, "a1,x");
    finalize(conn, "x", "success");
    /* The head retries: the next stays parked. Then delivered: the next is unparked. */
    finalize(conn, "a1", "retry");
    assert_int_equal(parked(conn, "a2"), 1);
    expect_claim(conn, false, c, 2, "a1");
    finalize(conn, "a1", "success");
    assert_int_equal(parked(conn, "a2"), 0);
    assert_int_equal(parked(conn, "a3"), 1);
    expect_claim(conn, true, c, 3, "a2");

    /* The key's lock taken (as by a producer's commit parking an item of it) while its head is
     * deleted: the next item stays parked, the key is noted, and the leader's recheck unparks
     * it once the lock is free, returning the pair to claim. */
    PGconn *other = PQconnectdb(db->conninfo);
    assert_int_equal(PQstatus(other), CONNECTION_OK);
    tl_exec(other, "BEGIN");
    assert_int_equal(tl_query_int(other, "SELECT pgpace.order_try_lock(%lld, 'a')::int", c), 1);
    finalize(conn, "a2", "success");
    assert_int_equal(parked(conn, "a3"), 1);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.order_recheck"), 1);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.order_recheck_run(10)"), 0);
    expect_claim(conn, true, c, 4, "");
    tl_exec(other, "COMMIT");
    PQfinish(other);
    other = NULL;
    assert_int_equal(tl_query_int(conn,
                                  "SELECT count(*) FROM pgpace.order_recheck_run(10) r "
                                  "WHERE r.customer_id = %lld AND r.carrier = ''",
                                  c),
                     1);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.order_recheck"), 0);
    assert_int_equal(parked(conn, "a3"), 0);
    expect_claim(conn, true, c, 5, "a3");
    finalize(conn, "a3", "success");
    expect_claim(conn, false, c, 6, "a4");
    finalize(conn, "a4", "success");
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue"), 0);

    /* A producer parks b2 behind b1 while b1 is delivered and gone before the producer
     * commits (its delete could not see b2): the producer's commit unparks b2. */
    put(conn, "c", "b1", "b", 0);
    other = PQconnectdb(db->conninfo);
    assert_int_equal(PQstatus(other), CONNECTION_OK);
    tl_exec(other, "BEGIN");
    put(other, "c", "b2", "b", 0);
    assert_int_equal(parked(other, "b2"), 1);
    expect_claim(conn, true, c, 7, "b1");
    finalize(conn, "b1", "success");
    tl_exec(other, "COMMIT");
    assert_int_equal(parked(conn, "b2"), 0);
    /* The same with the key's lock taken at that commit: the key is noted, and the recheck
     * unparks it. */
    expect_claim(conn, true, c, 8, "b2");
    put(conn, "c", "b3", "b", 0);
    PGconn *third = PQconnectdb(db->conninfo);
    assert_int_equal(PQstatus(third), CONNECTION_OK);
    tl_exec(other, "BEGIN");
    put(other, "c", "b4", "b", 0);
    finalize(conn, "b2", "success"); /* b3 unparked; b4 (uncommitted) behind it */
    assert_int_equal(parked(conn, "b3"), 0);
    expect_claim(conn, true, c, 9, "b3");
    finalize(conn, "b3", "success");
    tl_exec(third, "BEGIN");
    assert_int_equal(tl_query_int(third, "SELECT pgpace.order_try_lock(%lld, 'b')::int", c), 1);
    tl_exec(other, "COMMIT");
    assert_int_equal(parked(conn, "b4"), 1);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.order_recheck"), 1);
    tl_exec(third, "COMMIT");
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.order_recheck_run(10)"), 1);
    assert_int_equal(parked(conn, "b4"), 0);
    expect_claim(conn, false, c, 10, "b4");
    finalize(conn, "b4", "success");
    PQfinish(other);
    PQfinish(third);
    assert_int_equal(tl_query_int(conn, "SELECT count(*) FROM pgpace.queue"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(claim_order_per_key, setup, teardown),
        cmocka_unit_test_setup_teardown(skip_and_hold, setup, teardown),
        cmocka_unit_test_setup_teardown(replay_waits_for_the_key_in_flight_then_goes_first, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(supersede_with_order_key_order_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_keys_refused_naming_the_field, setup, teardown),
        cmocka_unit_test_setup_teardown(fanout_deliveries_carry_the_key, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_claims_never_share_a_key, setup, teardown),
        cmocka_unit_test_setup_teardown(parked_behind_the_head_and_unparked_after_it, setup,
                                        teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
