/* test_enqueue.c - the enqueue paths against a real server: pgpace.enqueue through libpq
 * (transactionality, NOTIFY on commit, idempotency, validation, the producer role) and
 * `pgpace enqueue --file` (bulk JSON lines, all-or-nothing, line-numbered errors); also the
 * schema's check on a customer's rate when pgpace.customer_set is called directly. */
#include "testlib.h"

#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Customers created for every test: acme (max_attempts 7) and beta (default 12). */
static int setup(void **state)
{
    tl_db *db = tl_fresh_db(1);
    tl_exec(db->conn, "SELECT pgpace.customer_set('acme', rate_per_minute => 60, webhook_url => "
                      "'https://example.com/acme', max_attempts => 7)");
    tl_exec(db->conn, "SELECT pgpace.customer_set('beta', rate_per_minute => 30, webhook_url => "
                      "'https://example.com/beta')");
    *state = db;
    return 0;
}

static int teardown(void **state)
{
    tl_drop_db(*state);
    return 0;
}

/* ---- helpers ---- */

static long long count_rows(PGconn *conn, const char *table)
{
    return tl_query_int(conn, "SELECT count(*) FROM %s", table);
}

static void assert_nothing_enqueued(PGconn *conn)
{
    assert_int_equal(count_rows(conn, "pgpace.item"), 0);
    assert_int_equal(count_rows(conn, "pgpace.queue"), 0);
}

static PGconn *connect_to(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("cannot connect with '%s': %s", conninfo, PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

/* Runs `sql`, which must fail with an error whose message contains `needle`. */
static void expect_sql_error(PGconn *conn, const char *sql, const char *needle)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        PQclear(res);
        fail_msg("expected an error containing \"%s\" from: %s", needle, sql);
    }
    tl_assert_contains(PQresultErrorMessage(res), needle);
    PQclear(res);
}

static long long ms_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Waits up to `timeout_ms` for a notification on `conn` by polling its socket. Returns it (the
 * caller PQfreemem's it) or NULL when none arrived in time. */
static PGnotify *wait_notify(PGconn *conn, int timeout_ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        assert_int_equal(PQconsumeInput(conn), 1);
        PGnotify *n = PQnotifies(conn);
        if (n)
            return n;
        long long left = timeout_ms - ms_since(&t0);
        if (left <= 0)
            return NULL;
        struct pollfd pfd = {PQsocket(conn), POLLIN, 0};
        assert_true(poll(&pfd, 1, (int)left) >= 0);
    }
}

/* A round trip on the listener so anything the server already sent has been read. */
static void assert_no_pending_notify(PGconn *listener)
{
    PQclear(PQexec(listener, "SELECT 1"));
    assert_int_equal(PQconsumeInput(listener), 1);
    PGnotify *n = PQnotifies(listener);
    if (n) {
        print_error("unexpected notification on %s: %s\n", n->relname, n->extra);
        PQfreemem(n);
        fail();
    }
}

/* Runs `pgpace enqueue --file path` against the test database. */
static tl_proc run_bulk(const tl_db *db, const char *path, const char *input)
{
    return tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", path), input, NULL);
}

/* ---- pgpace.enqueue ---- */

static void enqueue_writes_item_and_queue_row(void **state)
{
    tl_db *db = *state;
    long long id = tl_query_int(db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": 1}')");
    assert_true(id > 0);
    long long acme = tl_query_int(db->conn, "SELECT id FROM pgpace.customer WHERE name='acme'");

    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.item WHERE id = %lld AND "
                                  "customer_id = %lld AND payload = '{\"n\": 1}' AND carrier IS "
                                  "NULL AND kind IS NULL AND idempotency_key IS NULL",
                                  id, acme),
                     1);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld AND "
                                  "customer_id = %lld AND attempt = 0 AND max_attempts = 7 AND "
                                  "priority = 0 AND claim_token IS NULL AND next_action_at "
                                  "BETWEEN now() - interval '1 minute' AND now()",
                                  id, acme),
                     1);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 1);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 1);

    /* max_attempts follows the customer: beta has the default 12. */
    long long beta_item = tl_query_int(db->conn, "SELECT pgpace.enqueue('beta', '[]')");
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT max_attempts FROM pgpace.queue WHERE item_id = %lld",
                                  beta_item),
                     12);
}

static void enqueue_stores_priority_carrier_kind_and_run_at(void **state)
{
    tl_db *db = *state;
    long long id = tl_query_int(db->conn, "SELECT pgpace.enqueue('acme', '{}', carrier => 'c-1', "
                                          "kind => 'order.created', priority => -5, run_at => "
                                          "'2100-01-02T03:04:05Z')");
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld AND "
                                  "priority = -5 AND carrier = 'c-1' AND next_action_at = "
                                  "'2100-01-02T03:04:05Z'::timestamptz",
                                  id),
                     1);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.item WHERE id = %lld AND carrier = "
                                  "'c-1' AND kind = 'order.created'",
                                  id),
                     1);
    long long high =
        tl_query_int(db->conn, "SELECT pgpace.enqueue('acme', '{}', priority => 32767)");
    assert_int_equal(
        tl_query_int(db->conn, "SELECT priority FROM pgpace.queue WHERE item_id = %lld", high),
        32767);
}

static void enqueue_rolled_back_leaves_nothing(void **state)
{
    tl_db *db = *state;
    tl_exec(db->conn, "BEGIN");
    long long id = tl_query_int(db->conn, "SELECT pgpace.enqueue('acme', '{\"x\": true}')");
    assert_true(id > 0);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 1); /* visible inside */
    tl_exec(db->conn, "ROLLBACK");
    assert_nothing_enqueued(db->conn);
}

static void enqueue_notifies_on_commit_only(void **state)
{
    tl_db *db = *state;
    PGconn *listener = connect_to(db->conninfo);
    tl_exec(listener, "LISTEN pgpace_enqueue");
    char *acme = tl_query_str(db->conn, "SELECT id FROM pgpace.customer WHERE name = 'acme'");

    tl_exec(db->conn, "BEGIN");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}')");
    assert_no_pending_notify(listener);
    tl_exec(db->conn, "COMMIT");

    PGnotify *n = wait_notify(listener, 5000);
    if (!n)
        fail_msg("no pgpace_enqueue notification within 5 s of the commit");
    assert_string_equal(n->relname, "pgpace_enqueue");
    /* Payload: "<customer id> <carrier>", carrier empty when the item names none. */
    char expected[64];
    snprintf(expected, sizeof expected, "%s ", acme);
    assert_string_equal(n->extra, expected);
    PQfreemem(n);
    free(acme);
    PQfinish(listener);
}

static void enqueue_rolled_back_does_not_notify(void **state)
{
    tl_db *db = *state;
    PGconn *listener = connect_to(db->conninfo);
    tl_exec(listener, "LISTEN pgpace_enqueue");

    tl_exec(db->conn, "BEGIN");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}')");
    tl_exec(db->conn, "ROLLBACK");
    assert_no_pending_notify(listener);
    /* Absence is asserted: a short deadline on the socket is enough after the round trip. */
    PGnotify *n = wait_notify(listener, 500);
    if (n) {
        print_error("unexpected notification: %s %s\n", n->relname, n->extra);
        PQfreemem(n);
        fail();
    }
    /* The listener works: a committed enqueue is seen. */
    tl_exec(db->conn, "SELECT pgpace.enqueue('beta', '{}')");
    n = wait_notify(listener, 5000);
    assert_non_null(n);
    PQfreemem(n);
    PQfinish(listener);
}

static void idempotency_key_returns_the_first_item(void **state)
{
    tl_db *db = *state;
    long long first = tl_query_int(
        db->conn, "SELECT pgpace.enqueue('acme', '{\"v\": 1}', idempotency_key => 'k1')");
    long long again = tl_query_int(
        db->conn, "SELECT pgpace.enqueue('acme', '{\"v\": 2}', idempotency_key => 'k1')");
    assert_int_equal(first, again);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 1);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 1);
    /* The first payload is kept. */
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT (payload->>'v')::int FROM pgpace.item WHERE id = %lld",
                                  first),
                     1);

    /* Keys are per customer. */
    long long other =
        tl_query_int(db->conn, "SELECT pgpace.enqueue('beta', '{}', idempotency_key => 'k1')");
    assert_true(other != first);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 2);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 2);
}

static void idempotency_key_concurrent_waits_for_the_first(void **state)
{
    tl_db *db = *state;
    PGconn *a = connect_to(db->conninfo);
    PGconn *b = connect_to(db->conninfo);
    const char *sql = "SELECT pgpace.enqueue('acme', '{}', idempotency_key => 'race')";

    tl_exec(a, "BEGIN");
    long long id_a = tl_query_int(a, "%s", sql);
    assert_int_equal(PQsendQuery(b, sql), 1);

    /* b must block on a's uncommitted key: it returns nothing, and the server shows it waiting
     * on a lock. Poll b's socket while looking (a result arriving early fails the test). */
    int b_pid = PQbackendPID(b);
    bool waiting = false;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!waiting && ms_since(&t0) < 5000) {
        struct pollfd pfd = {PQsocket(b), POLLIN, 0};
        assert_true(poll(&pfd, 1, 50) >= 0);
        assert_int_equal(PQconsumeInput(b), 1);
        assert_int_equal(PQisBusy(b), 1);
        waiting = tl_query_int(db->conn,
                               "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND "
                               "wait_event_type = 'Lock'",
                               b_pid) == 1;
    }
    assert_true(waiting);
    assert_int_equal(PQisBusy(b), 1);

    tl_exec(a, "COMMIT");
    PGresult *res = PQgetResult(b);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("second enqueue failed: %s", PQresultErrorMessage(res));
    assert_int_equal(atoll(PQgetvalue(res, 0, 0)), id_a);
    PQclear(res);
    assert_null(PQgetResult(b));
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 1);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 1);
    PQfinish(a);
    PQfinish(b);
}

static void enqueue_rejects_bad_input(void **state)
{
    tl_db *db = *state;
    static const struct {
        const char *sql;
        const char *message;
    } cases[] = {
        {"SELECT pgpace.enqueue('nobody', '{}')", "unknown customer 'nobody'"},
        {"SELECT pgpace.enqueue(NULL, '{}')", "customer must not be null"},
        {"SELECT pgpace.enqueue('acme', NULL)", "payload must not be null"},
        {"SELECT pgpace.enqueue('acme', '{}', carrier => 'bad carrier!')", "invalid carrier"},
        {"SELECT pgpace.enqueue('acme', '{}', carrier => '')", "invalid carrier"},
        {"SELECT pgpace.enqueue('acme', '{}', priority => 40000)",
         "priority must be between -32768 and 32767"},
        {"SELECT pgpace.enqueue('acme', '{}', priority => -32769)",
         "priority must be between -32768 and 32767"},
        {"SELECT pgpace.enqueue('acme', '{}', priority => NULL)", "priority must be between"},
        {"SELECT pgpace.enqueue('acme', '{}', idempotency_key => repeat('k', 300))",
         "idempotency_key must be 1 to 255 characters"},
        {"SELECT pgpace.enqueue('acme', '{}', idempotency_key => '')",
         "idempotency_key must be 1 to 255 characters"},
        {"SELECT pgpace.enqueue('acme', '{}', kind => repeat('x', 200))",
         "kind must be 1 to 128 characters"},
        {"SELECT pgpace.enqueue('acme', 'not json')", "invalid input syntax for type json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_sql_error(db->conn, cases[i].sql, cases[i].message);
        assert_nothing_enqueued(db->conn);
    }
}

static void enqueue_rejects_payload_over_the_limit(void **state)
{
    tl_db *db = *state;
    tl_exec(db->conn, "UPDATE pgpace.setting SET value = '100' WHERE name = 'max_payload_bytes'");
    /* {"p": "xxx..."}: 9 bytes of JSON around 191 characters = 200 bytes. */
    expect_sql_error(db->conn,
                     "SELECT pgpace.enqueue('acme', jsonb_build_object('p', repeat('x', 191)))",
                     "payload is 200 bytes, above the limit of 100 bytes");
    assert_nothing_enqueued(db->conn);
    /* At the limit is fine. */
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', jsonb_build_object('p', repeat('x', 91)))");
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 1);
}

/* ---- the schema's own checks, bypassing the CLI's validation ---- */

/* `SELECT pgpace.customer_set('NAME', rate_per_minute => 'RATE' ...)` must fail on the
 * customer_rate_valid check constraint (23514). */
static void expect_rate_refused(PGconn *conn, const char *name, const char *rate, const char *more)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT pgpace.customer_set('%s', rate_per_minute => '%s'%s)", name,
             rate, more);
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_FATAL_ERROR) {
        PQclear(res);
        fail_msg("accepted: %s", sql);
    }
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *constraint = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
    assert_string_equal(state ? state : "<none>", "23514");
    assert_string_equal(primary ? primary : "<none>",
                        "new row for relation \"customer\" violates check constraint "
                        "\"customer_rate_valid\"");
    assert_string_equal(constraint ? constraint : "<none>", "customer_rate_valid");
    PQclear(res);
}

static void customer_set_sql_rejects_a_bad_rate(void **state)
{
    tl_db *db = *state;
    char *before = tl_query_str(db->conn, "SELECT c::text FROM pgpace.customer c WHERE name = "
                                          "'acme'");
    static const char *const rates[] = {"NaN", "Infinity", "-Infinity", "0", "-1"};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        /* Creating a customer, and updating one. */
        expect_rate_refused(db->conn, "x", rates[i], ", webhook_url => 'https://example.com/x'");
        expect_rate_refused(db->conn, "acme", rates[i], "");
    }
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'x'"),
                     0);
    char *after = tl_query_str(db->conn, "SELECT c::text FROM pgpace.customer c WHERE name = "
                                         "'acme'");
    assert_string_equal(after, before);
    free(before);
    free(after);
    assert_int_equal(count_rows(db->conn, "pgpace.customer"), 2);
}

/* ---- the producer role ---- */

typedef struct producer_state {
    tl_db *db;
    char role[64];
    PGconn *conn;
} producer_state;

static int producer_setup(void **state)
{
    producer_state *ps = calloc(1, sizeof *ps);
    assert_non_null(ps);
    void *db_state = NULL;
    setup(&db_state);
    ps->db = db_state;
    snprintf(ps->role, sizeof ps->role, "producer_t_%d", (int)getpid());
    tl_exec(ps->db->conn, "DROP ROLE IF EXISTS %s", ps->role);
    tl_exec(ps->db->conn, "CREATE ROLE %s LOGIN IN ROLE pgpace_producer", ps->role);
    char conninfo[600];
    snprintf(conninfo, sizeof conninfo, "dbname=%s user=%s", ps->db->name, ps->role);
    ps->conn = connect_to(conninfo);
    *state = ps;
    return 0;
}

static int producer_teardown(void **state)
{
    producer_state *ps = *state;
    PQfinish(ps->conn);
    tl_exec(ps->db->conn, "DROP ROLE IF EXISTS %s", ps->role);
    tl_drop_db(ps->db);
    free(ps);
    return 0;
}

static void producer_role_can_enqueue_only(void **state)
{
    producer_state *ps = *state;
    PGconn *db_conn = ps->db->conn;
    long long id =
        tl_query_int(ps->conn, "SELECT pgpace.enqueue('acme', '{\"from\": \"producer\"}')");
    assert_true(id > 0);
    assert_int_equal(count_rows(db_conn, "pgpace.item"), 1);
    assert_int_equal(count_rows(db_conn, "pgpace.queue"), 1);

    expect_sql_error(ps->conn, "SELECT count(*) FROM pgpace.item", "permission denied");
    expect_sql_error(
        ps->conn, "INSERT INTO pgpace.queue (item_id, customer_id, max_attempts) VALUES (1, 1, 1)",
        "permission denied");
    expect_sql_error(ps->conn, "UPDATE pgpace.customer SET paused = true", "permission denied");
    expect_sql_error(ps->conn, "SELECT pgpace.customer_set('acme', rate_per_minute => 1000000)",
                     "permission denied");
    /* Nothing changed. */
    assert_int_equal(count_rows(db_conn, "pgpace.item"), 1);
    assert_int_equal(count_rows(db_conn, "pgpace.queue"), 1);
    assert_int_equal(tl_query_int(db_conn, "SELECT count(*) FROM pgpace.customer WHERE paused OR "
                                           "rate_per_minute = 1000000"),
                     0);
}

/* The schema promises "producers get exactly pgpace.enqueue and nothing else" (and
 * pgpace.estimate_send_time, which reveals no payload): no EXECUTE on any other pgpace function
 * (not only a table-level denial further in). */
static void producer_role_cannot_execute_other_functions(void **state)
{
    producer_state *ps = *state;
    char *granted = tl_query_str(
        ps->db->conn,
        "SELECT coalesce(string_agg(p.proname, ',' ORDER BY p.proname), '') FROM "
        "pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = "
        "'pgpace' AND p.proname NOT IN ('enqueue', 'enqueue_json', 'estimate_send_time') AND "
        "has_function_privilege('%s', "
        "p.oid, 'EXECUTE')",
        ps->role);
    char listed[512];
    snprintf(listed, sizeof listed, "%s", granted);
    free(granted);
    if (listed[0])
        fail_msg("role %s (member of pgpace_producer) may execute: %s", ps->role, listed);
    expect_sql_error(ps->conn, "SELECT pgpace.customer_set('acme', rate_per_minute => 1)",
                     "permission denied for function customer_set");
    expect_sql_error(ps->conn, "SELECT pgpace.customer_delete('acme', true)",
                     "permission denied for function customer_delete");
    assert_int_equal(count_rows(ps->db->conn, "pgpace.customer"), 2);
}

/* ---- pgpace enqueue --file ---- */

/* 1000 lines alternating acme (even lines) and beta (odd). Keyed: lines 0-99 with key-<i>,
 * lines 100/101 with "shared" (one per customer: both insert), and lines 998/999 repeating
 * key-0 (acme) and key-1 (beta): 104 keyed lines, 102 distinct (customer, key) pairs, 896
 * lines without a key. Line 5 sets every optional field. */
static char *thousand_lines(void)
{
    size_t cap = 1000 * 200, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (int i = 0; i < 1000; i++) {
        const char *cust = i % 2 ? "beta" : "acme";
        char key[64] = "";
        if (i < 100)
            snprintf(key, sizeof key, ",\"idempotency_key\":\"key-%d\"", i);
        else if (i == 100 || i == 101)
            snprintf(key, sizeof key, ",\"idempotency_key\":\"shared\"");
        else if (i >= 998)
            snprintf(key, sizeof key, ",\"idempotency_key\":\"key-%d\"", i - 998);
        const char *extra = i == 5 ? ",\"carrier\":\"c1\",\"kind\":\"k\",\"priority\":3,"
                                     "\"run_at\":\"2100-01-01T00:00:00Z\""
                                   : "";
        len += (size_t)snprintf(buf + len, cap - len,
                                "{\"customer\":\"%s\",\"payload\":{\"line\":%d}%s%s}\n", cust,
                                i + 1, key, extra);
        assert_true(len < cap);
    }
    return buf;
}

static void bulk_file_enqueues_and_dedupes(void **state)
{
    tl_db *db = *state;
    char *content = thousand_lines();
    char *path = tl_temp_file(content);
    free(content);

    tl_proc p = run_bulk(db, path, NULL);
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "enqueued 998 item(s)");
    tl_assert_contains(p.out, "(2 duplicate idempotency key(s) skipped)");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 998);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 998);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.item i JOIN "
                                            "pgpace.customer c ON c.id = i.customer_id WHERE "
                                            "c.name = 'acme'"),
                     499);
    /* Every item has its queue row, with the customer's max_attempts. */
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                  "q.item_id = i.id AND q.customer_id = i.customer_id JOIN "
                                  "pgpace.customer c ON c.id = i.customer_id AND c.max_attempts "
                                  "= q.max_attempts"),
                     998);
    /* The first occurrence of a key wins. */
    assert_int_equal(tl_query_int(db->conn, "SELECT (payload->>'line')::int FROM pgpace.item "
                                            "WHERE idempotency_key = 'key-0'"),
                     1);
    assert_int_equal(
        tl_query_int(db->conn, "SELECT count(*) FROM pgpace.item WHERE idempotency_key='shared'"),
        2);
    /* Optional fields land where they belong. */
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                  "q.item_id = i.id WHERE i.payload = '{\"line\": 6}' AND "
                                  "i.carrier = 'c1' AND q.carrier = 'c1' AND i.kind = 'k' AND "
                                  "q.priority = 3 AND q.next_action_at = '2100-01-01T00:00:00Z'"),
                     1);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.queue WHERE priority = 0 "
                                            "AND next_action_at <= now()"),
                     997);

    /* Again: every keyed line is a duplicate, the 896 lines without a key insert again. */
    p = run_bulk(db, path, NULL);
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "enqueued 896 item(s)");
    tl_assert_contains(p.out, "(104 duplicate idempotency key(s) skipped)");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 998 + 896);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 998 + 896);
    unlink(path);
    free(path);
}

static void bulk_file_skips_blank_lines_and_accepts_crlf(void **state)
{
    tl_db *db = *state;
    char *path = tl_temp_file("{\"customer\":\"acme\",\"payload\":{\"a\":\"x\\ty\"}}\r\n"
                              "\r\n"
                              "   \t \r\n"
                              "\n"
                              "{\"customer\":\"beta\",\"payload\":[1,2],\"kind\":\"k\"}\r\n");
    tl_proc p = run_bulk(db, path, NULL);
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "enqueued 2 item(s)");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 2);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 2);
    /* No stray carriage return made it into the data. */
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.item WHERE payload = "
                                            "'{\"a\":\"x\\ty\"}' OR (kind = 'k' AND payload = "
                                            "'[1,2]')"),
                     2);
    unlink(path);
    free(path);
}

static void bulk_file_reads_stdin(void **state)
{
    tl_db *db = *state;
    tl_proc p = run_bulk(db, "-",
                         "{\"customer\":\"acme\",\"payload\":{}}\n"
                         "{\"customer\":\"beta\",\"payload\":{},\"idempotency_key\":\"s1\"}\n"
                         "{\"customer\":\"beta\",\"payload\":{},\"idempotency_key\":\"s1\"}");
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "enqueued 2 item(s) from -");
    tl_assert_contains(p.out, "(1 duplicate");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 2);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 2);
}

static void bulk_file_rejects_bad_lines(void **state)
{
    tl_db *db = *state;
#define GOOD "{\"customer\":\"acme\",\"payload\":{\"ok\":1}}\n"
    static const struct {
        const char *content;
        const char *message;
    } cases[] = {
        {GOOD GOOD "{\"customer\": \"acme\", \"payload\": \n", "line 3: not valid JSON"},
        {GOOD "\n\n{not json}\n" GOOD, "line 4: not valid JSON"},
        {GOOD GOOD "[1, 2]\n", "line 3: expected a JSON object"},
        {GOOD GOOD "42\n", "line 3: expected a JSON object"},
        {GOOD GOOD "\"text\"\n", "line 3: expected a JSON object"},
        {GOOD GOOD "null\n", "line 3: expected a JSON object"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"colour\":\"red\"}\n",
         "line 3: unknown field colour"},
        {GOOD GOOD "{\"payload\":{}}\n", "line 3: field customer: required"},
        {GOOD GOOD "{\"customer\":7,\"payload\":{}}\n", "line 3: field customer: required"},
        {GOOD GOOD "{\"customer\":\"nobody\",\"payload\":{}}\n",
         "line 3: field customer: unknown customer 'nobody'"},
        {GOOD GOOD "{\"customer\":\"acme\"}\n", "line 3: field payload: required"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":null}\n", "line 3: field payload: required"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"priority\":\"high\"}\n",
         "line 3: field priority: must be an integer"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"priority\":1.5}\n",
         "line 3: field priority: must be an integer"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"priority\":40000}\n",
         "line 3: field priority: must be an integer between -32768 and 32767"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"run_at\":\"soon-ish\"}\n",
         "line 3: field run_at"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"run_at\":12}\n",
         "line 3: field run_at: must be a string"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"carrier\":5}\n",
         "line 3: field carrier: must be a string"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"carrier\":\"bad carrier\"}\n",
         "line 3: field carrier: must be 1-128 characters"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"kind\":\"\"}\n",
         "line 3: field kind: must be 1 to 128 characters"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"idempotency_key\":\"\"}\n",
         "line 3: field idempotency_key: must be 1 to 255 characters"},
    };
#undef GOOD
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = tl_temp_file(cases[i].content);
        tl_proc p = run_bulk(db, path, NULL);
        if (p.status != 1)
            fail_msg("case %zu: expected exit 1, got %d: %s%s", i, p.status, p.out, p.err);
        tl_assert_contains(p.err, cases[i].message);
        tl_assert_contains(p.err, "nothing was enqueued");
        tl_assert_contains(p.err, path);
        tl_proc_free(&p);
        assert_nothing_enqueued(db->conn);
        unlink(path);
        free(path);
    }
}

/* Every JSON error names its line, including the ones PostgreSQL reports with a SQLSTATE other
 * than invalid_text_representation (22P02): \u0000 in a string (22P05) and a number beyond
 * numeric's range (22003). */
static void bulk_file_names_the_line_of_any_json_error(void **state)
{
    tl_db *db = *state;
    static const char *const bad[] = {
        "{\"customer\":\"acme\",\"payload\":{\"a\":\"\\u0000\"}}\n",
        "{\"customer\":\"acme\",\"payload\":{\"a\":1e1000000}}\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char content[256];
        snprintf(content, sizeof content, "{\"customer\":\"acme\",\"payload\":{}}\n%s", bad[i]);
        char *path = tl_temp_file(content);
        tl_proc p = run_bulk(db, path, NULL);
        unlink(path);
        free(path);
        char err[1024];
        snprintf(err, sizeof err, "%s", p.err);
        int status = p.status;
        tl_proc_free(&p);
        assert_int_equal(status, 1);
        tl_assert_contains(err, "nothing was enqueued");
        assert_nothing_enqueued(db->conn);
        tl_assert_contains(err, "line 2:");
    }
}

static void bulk_file_rejects_payload_over_the_limit(void **state)
{
    tl_db *db = *state;
    tl_exec(db->conn, "UPDATE pgpace.setting SET value = '100' WHERE name = 'max_payload_bytes'");
    char content[1024];
    char big[192];
    memset(big, 'x', 191);
    big[191] = '\0';
    /* {"p": "xxx..."} as jsonb text: 9 + 191 = 200 bytes. */
    snprintf(content, sizeof content,
             "{\"customer\":\"acme\",\"payload\":{}}\n"
             "{\"customer\":\"acme\",\"payload\":{\"p\":\"%s\"}}\n",
             big);
    char *path = tl_temp_file(content);
    tl_proc p = run_bulk(db, path, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "line 2: field payload: 200 bytes, above the limit of 100 bytes");
    tl_proc_free(&p);
    assert_nothing_enqueued(db->conn);
    unlink(path);
    free(path);
}

static void bulk_file_missing_is_an_error(void **state)
{
    tl_db *db = *state;
    tl_proc p = run_bulk(db, "/nonexistent/pgpace-items.jsonl", NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "cannot open '/nonexistent/pgpace-items.jsonl'");
    tl_proc_free(&p);
    assert_nothing_enqueued(db->conn);
}

static void bulk_file_of_100k_items(void **state)
{
    tl_db *db = *state;
    enum { N = 100000 };
    size_t cap = (size_t)N * 96, len = 0;
    char *content = malloc(cap);
    assert_non_null(content);
    for (int i = 0; i < N; i++) {
        len += (size_t)snprintf(content + len, cap - len,
                                "{\"customer\":\"%s\",\"payload\":{\"n\":%d},\"priority\":%d}\n",
                                i % 3 ? "acme" : "beta", i, i % 7);
        assert_true(len < cap);
    }
    char *path = tl_temp_file(content);
    free(content);

    tl_proc p = run_bulk(db, path, NULL);
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "enqueued 100000 item(s)");
    tl_assert_contains(p.out, " s (0 duplicate");
    print_message("# %s", p.out); /* the CLI's own timing line, for the log only */
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), N);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), N);
    unlink(path);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(enqueue_writes_item_and_queue_row, setup, teardown),
        cmocka_unit_test_setup_teardown(enqueue_stores_priority_carrier_kind_and_run_at, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(enqueue_rolled_back_leaves_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(enqueue_notifies_on_commit_only, setup, teardown),
        cmocka_unit_test_setup_teardown(enqueue_rolled_back_does_not_notify, setup, teardown),
        cmocka_unit_test_setup_teardown(idempotency_key_returns_the_first_item, setup, teardown),
        cmocka_unit_test_setup_teardown(idempotency_key_concurrent_waits_for_the_first, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(enqueue_rejects_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(enqueue_rejects_payload_over_the_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(customer_set_sql_rejects_a_bad_rate, setup, teardown),
        cmocka_unit_test_setup_teardown(producer_role_can_enqueue_only, producer_setup,
                                        producer_teardown),
        cmocka_unit_test_setup_teardown(producer_role_cannot_execute_other_functions,
                                        producer_setup, producer_teardown),
        cmocka_unit_test_setup_teardown(bulk_file_enqueues_and_dedupes, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_skips_blank_lines_and_accepts_crlf, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(bulk_file_reads_stdin, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_rejects_bad_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_names_the_line_of_any_json_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(bulk_file_rejects_payload_over_the_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_missing_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_of_100k_items, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
