/* test_enqueue.c - the enqueue paths against a real server: pgpace.enqueue through libpq
 * (transactionality, NOTIFY on commit, idempotency, validation, the producer role) and
 * `pgpace enqueue --file` (bulk JSON lines, all-or-nothing, line-numbered errors); also the
 * schema's check on a customer's rate when pgpace.customer_set is called directly. */
#include "testlib.h"

#include <poll.h>
#include <pthread.h>
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
         "priority must be between -32767 and 32767"},
        {"SELECT pgpace.enqueue('acme', '{}', priority => -32769)",
         "priority must be between -32767 and 32767"},
        {"SELECT pgpace.enqueue('acme', '{}', priority => NULL)", "priority must be between"},
        /* -32768 is the recovery lane's (pgpace recover). */
        {"SELECT pgpace.enqueue('acme', '{}', priority => -32768)",
         "priority must be between -32767 and 32767"},
        {"SELECT pgpace.enqueue('acme', '{}', expires_at => 'infinity')",
         "expires_at must be a finite timestamp"},
        {"SELECT pgpace.enqueue('acme', '{}', expires_at => '-infinity')",
         "expires_at must be a finite timestamp"},
        {"SELECT pgpace.enqueue('acme', '{}', run_at => now() + interval '1 hour', expires_at => "
         "now() + interval '1 minute')",
         "expires_at must be later than run_at"},
        {"SELECT pgpace.enqueue('acme', '{}', supersede_key => '')",
         "supersede_key must be 1 to 255 characters"},
        {"SELECT pgpace.enqueue('acme', '{}', supersede_key => repeat('s', 256))",
         "supersede_key must be 1 to 255 characters"},
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
         "line 3: field priority: must be an integer between -32767 and 32767"},
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
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"priority\":-32768}\n",
         "line 3: field priority: must be an integer between -32767 and 32767"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"expires_at\":\"whenever\"}\n",
         "line 3: field expires_at: invalid input syntax"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"expires_at\":\"infinity\"}\n",
         "line 3: field expires_at: must be a finite timestamp"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"expires_at\":17}\n",
         "line 3: field expires_at: must be a string"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"run_at\":\"2100-01-02T00:00:00Z\","
                   "\"expires_at\":\"2100-01-01T00:00:00Z\"}\n",
         "line 3: field expires_at: must be later than run_at"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"supersede_key\":\"\"}\n",
         "line 3: field supersede_key: must be 1 to 255 characters"},
        {GOOD GOOD "{\"customer\":\"acme\",\"payload\":{},\"supersede_key\":true}\n",
         "line 3: field supersede_key: must be a string"},
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

/* ---- deadlines (expires_at, max_age) and coalescing (supersede_key) ---- */

/* Runs `sql`, which must fail with SQLSTATE `state` and a message containing `needle`. */
static void expect_sqlstate(PGconn *conn, const char *sql, const char *state, const char *needle)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        PQclear(res);
        fail_msg("expected SQLSTATE %s from: %s", state, sql);
    }
    const char *got = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (!got || strcmp(got, state) != 0)
        fail_msg("%s: SQLSTATE %s, expected %s (%s)", sql, got ? got : "(none)", state,
                 PQresultErrorMessage(res));
    tl_assert_contains(PQresultErrorMessage(res), needle);
    PQclear(res);
}

/* ---- nesting: at most 256 levels of arrays and objects, on every path ---- */

/* OPEN x n, MIDDLE, CLOSE x n, optionally between PREFIX and SUFFIX (a heap string). */
static char *nested(const char *prefix, const char *open, const char *middle, const char *close,
                    size_t n, const char *suffix)
{
    size_t len =
        strlen(prefix) + n * (strlen(open) + strlen(close)) + strlen(middle) + strlen(suffix) + 1;
    char *s = malloc(len), *p = s;
    assert_non_null(s);
    p = stpcpy(p, prefix);
    for (size_t i = 0; i < n; i++)
        p = stpcpy(p, open);
    p = stpcpy(p, middle);
    for (size_t i = 0; i < n; i++)
        p = stpcpy(p, close);
    stpcpy(p, suffix);
    return s;
}

/* A payload one level over the limit is 54000 naming it, wherever it comes from (pgpace checks
 * it); one too deep for PostgreSQL's parser at all is its own 54001, before pgpace runs. */
static void payload_nesting_limit_on_every_path(void **state)
{
    tl_db *db = *state;
    static const char too_deep[] = "payload nests arrays and objects more than 256 levels deep";
    /* SQL: arrays and objects. */
    expect_sqlstate(db->conn,
                    "SELECT pgpace.enqueue('acme', (repeat('[', 257) || repeat(']', 257))::jsonb)",
                    "54000", too_deep);
    expect_sqlstate(db->conn,
                    "SELECT pgpace.enqueue('acme', (repeat('{\"a\":', 257) || '1' || "
                    "repeat('}', 257))::jsonb)",
                    "54000", too_deep);
    expect_sqlstate(db->conn,
                    "SELECT * FROM pgpace.enqueue_json(('{\"customer\":\"acme\",\"payload\":' "
                    "|| repeat('[', 257) || repeat(']', 257) || '}')::jsonb)",
                    "54000", "field payload: nests arrays and objects more than 256 levels deep");
    expect_sqlstate(db->conn,
                    "SELECT pgpace.enqueue('acme', (repeat('[', 100000) || repeat(']', "
                    "100000))::jsonb)",
                    "54001", "stack depth limit exceeded");
    assert_nothing_enqueued(db->conn);

    /* Bulk: the line over the limit, and the line too deep to parse, by number. */
    char *over = nested("{\"customer\":\"acme\",\"payload\":{}}\n{\"customer\":\"acme\","
                        "\"payload\":",
                        "[", "", "]", 257, "}\n");
    char *unparsable = nested("{\"customer\":\"acme\",\"payload\":{}}\n{\"customer\":\"acme\","
                              "\"payload\":",
                              "[", "", "]", 100000, "}\n");
    const struct {
        const char *content;
        const char *message;
    } bulk[] = {
        {over, "line 2: field payload: nests arrays and objects more than 256 levels deep"},
        {unparsable, "line 2: nested too deeply to parse (stack depth limit exceeded; a payload "
                     "may nest at most 256 levels)"},
    };
    for (size_t i = 0; i < sizeof bulk / sizeof bulk[0]; i++) {
        char *path = tl_temp_file(bulk[i].content);
        tl_proc p = run_bulk(db, path, NULL);
        if (p.status != 1)
            fail_msg("bulk %zu: expected exit 1, got %d: %s%s", i, p.status, p.out, p.err);
        tl_assert_contains(p.err, bulk[i].message);
        tl_assert_contains(p.err, "nothing was enqueued");
        tl_proc_free(&p);
        unlink(path);
        free(path);
        assert_nothing_enqueued(db->conn);
    }
    free(over);
    free(unparsable);

    /* CLI, one item (the payload on stdin). */
    char *payload = nested("", "[", "", "]", 257, "");
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "acme"), payload, NULL);
    free(payload);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "pgpace enqueue: pgpace.enqueue: payload nests arrays and objects "
                              "more than 256 levels deep");
    tl_proc_free(&p);
    payload = nested("", "[", "", "]", 100000, "");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "acme"), payload, NULL);
    free(payload);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "pgpace enqueue: field payload: stack depth limit exceeded");
    tl_proc_free(&p);
    assert_nothing_enqueued(db->conn);

    /* At the limit, every path takes it whole. */
    tl_exec(db->conn,
            "SELECT pgpace.enqueue('acme', (repeat('[', 256) || repeat(']', 256))::jsonb)");
    tl_exec(db->conn, "SELECT * FROM pgpace.enqueue_json(('{\"customer\":\"acme\",\"payload\":' "
                      "|| repeat('{\"a\":', 256) || '1' || repeat('}', 256) || '}')::jsonb)");
    char *line = nested("{\"customer\":\"acme\",\"payload\":", "[", "", "]", 256, "}\n");
    char *path = tl_temp_file(line);
    free(line);
    p = run_bulk(db, path, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    unlink(path);
    free(path);
    payload = nested("", "[", "", "]", 256, "");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "acme"), payload, NULL);
    free(payload);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.item WHERE jsonb_path_exists("
                                  "payload, 'strict $.**{255} ? (@.type() == \"array\" || "
                                  "@.type() == \"object\")')"),
                     4);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 4);
}

/* A JSON priority is any number with an integral value: 1.0 and 1e2 too (integer's own input
 * refused them: "invalid input syntax for type integer"). */
static void json_priority_takes_integral_numbers(void **state)
{
    tl_db *db = *state;
    tl_exec(db->conn, "SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":1,"
                      "\"priority\":1.0}')");
    tl_exec(db->conn, "SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":2,"
                      "\"priority\":1e2}')");
    tl_exec(db->conn, "SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":3,"
                      "\"priority\":-0.0}')");
    char *got =
        tl_query_str(db->conn, "SELECT string_agg(priority::text, ',' ORDER BY payload::text)"
                               " FROM pgpace.item");
    assert_string_equal(got, "1,100,0");
    free(got);
    expect_sqlstate(db->conn,
                    "SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":1,"
                    "\"priority\":1.5}')",
                    "22023", "field priority: must be an integer between -32767 and 32767");
}

static void deadline_is_fixed_at_enqueue(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    long long own = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', expires_at => now() + "
                                    "interval '1 hour')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON i.id "
                                  "= q.item_id WHERE q.item_id = %lld AND q.expires_at = "
                                  "i.expires_at AND i.expires_at = i.created_at + interval "
                                  "'1 hour'",
                                  own),
                     1);
    /* The earlier signature, positional and named, still works: no deadline. */
    long long old = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', NULL, NULL, NULL, NULL, "
                                    "0)");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld AND "
                                  "expires_at IS NULL AND supersede_key IS NULL",
                                  old),
                     1);

    /* max_age: counted from enqueue, or from run_at when later; the earlier of the two limits. */
    tl_exec(c, "SELECT pgpace.customer_set_max_age('acme', interval '10 minutes')");
    long long aged = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}')");
    long long later = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', run_at => now() + "
                                      "interval '1 hour')");
    long long both = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', expires_at => now() + "
                                     "interval '1 minute')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON i.id "
                                  "= q.item_id WHERE (q.item_id = %lld AND q.expires_at = "
                                  "i.created_at + interval '10 minutes' AND i.expires_at IS NULL) "
                                  "OR (q.item_id = %lld AND q.expires_at = i.run_at + interval "
                                  "'10 minutes') OR (q.item_id = %lld AND q.expires_at = "
                                  "i.created_at + interval '1 minute')",
                                  aged, later, both),
                     3);
    /* Beta has no max_age. */
    long long beta = tl_query_int(c, "SELECT pgpace.enqueue('beta', '{}')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld AND "
                                  "expires_at IS NULL",
                                  beta),
                     1);
    /* 0 removes it, for items enqueued from then on; those before keep their deadline. */
    tl_exec(c, "SELECT pgpace.customer_set_max_age('acme', interval '0')");
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE name = 'acme' "
                                     "AND max_age IS NULL"),
                     1);
    long long none = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue WHERE (item_id = %lld AND "
                                  "expires_at IS NULL) OR (item_id = %lld AND expires_at IS NOT "
                                  "NULL)",
                                  none, aged),
                     2);

    expect_sqlstate(c, "SELECT pgpace.customer_set_max_age('acme', interval '400 days')", "22023",
                    "max_age must be from 1 microsecond to 365 days");
    expect_sqlstate(c, "SELECT pgpace.customer_set_max_age('acme', interval '-1 second')", "22023",
                    "max_age must be");
    expect_sqlstate(c, "SELECT pgpace.customer_set_max_age('nobody', interval '1 hour')", "P0002",
                    "unknown customer 'nobody'");
    expect_sqlstate(c, "UPDATE pgpace.customer SET max_age = interval '0' WHERE name = 'acme'",
                    "23514", "customer_max_age_valid");
}

static void deadline_errors_have_their_sqlstate(void **state)
{
    tl_db *db = *state;
    static const struct {
        const char *sql, *state, *message;
    } cases[] = {
        {"SELECT pgpace.enqueue('acme', '{}', expires_at => 'infinity')", "22007",
         "expires_at must be a finite timestamp"},
        {"SELECT pgpace.enqueue('acme', '{}', run_at => now() + interval '1 hour', expires_at => "
         "now() + interval '1 hour')",
         "22023", "expires_at must be later than run_at"},
        {"SELECT pgpace.enqueue('acme', '{}', priority => -32768)", "22023",
         "priority must be between -32767 and 32767"},
        {"SELECT pgpace.enqueue('acme', '{}', supersede_key => repeat('s', 256))", "22023",
         "supersede_key must be 1 to 255 characters"},
        {"SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":{},"
         "\"expires_at\":\"-infinity\"}')",
         "22007", "field expires_at: must be a finite timestamp"},
        {"SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":{},"
         "\"expires_at\":\"tomorrow-ish\"}')",
         "22007", "field expires_at: invalid input syntax"},
        {"SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":{},"
         "\"run_at\":\"2100-01-02T00:00:00Z\",\"expires_at\":\"2100-01-01T00:00:00Z\"}')",
         "22023", "field expires_at: must be later than run_at"},
        {"SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":{},"
         "\"supersede_key\":\"\"}')",
         "22023", "field supersede_key: must be 1 to 255 characters"},
        {"SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":{},"
         "\"priority\":-32768}')",
         "22023", "field priority: must be an integer between -32767 and 32767"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_sqlstate(db->conn, cases[i].sql, cases[i].state, cases[i].message);
        assert_nothing_enqueued(db->conn);
    }
    /* The edges of the range are accepted. */
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}', priority => -32767), "
                      "pgpace.enqueue('acme', '{}', priority => 32767)");
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 2);
}

/* A deadline already past at enqueue is not an error (the producer's transaction commits): the
 * item goes straight to the dead letters as 'expired', on every path. */
static void past_deadline_is_dead_lettered_at_once(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    long long id = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"late\":1}', expires_at => "
                                   "now() - interval '1 minute')");
    char *json = tl_query_str(c, "SELECT concat_ws(' ', id, created, superseded, expired) FROM "
                                 "pgpace.enqueue_json('{\"customer\":\"beta\",\"payload\":{},"
                                 "\"expires_at\":\"2001-01-01T00:00:00Z\"}')");
    tl_assert_contains(json, " t f t");
    free(json);
    tl_proc p = run_bulk(db, "-",
                         "{\"customer\":\"acme\",\"payload\":{},\"expires_at\":\"2001-01-01T00:00:"
                         "00Z\"}\n{\"customer\":\"acme\",\"payload\":{},\"expires_at\":\"2100-01-"
                         "01T00:00:00Z\"}\n");
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "enqueued 1 item(s)");
    tl_assert_contains(p.out, "; 1 past their deadline, dead-lettered as expired");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "beta", "{}", "--expires-at",
                          "2001-01-01T00:00:00Z"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(count_rows(c, "pgpace.item"), 5);
    assert_int_equal(count_rows(c, "pgpace.queue"), 1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter WHERE last_error = "
                                     "'expired' AND attempts = 0"),
                     4);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.dead_letter d JOIN pgpace.item i "
                                  "ON i.id = d.item_id WHERE d.item_id = %lld AND i.payload = "
                                  "'{\"late\":1}'",
                                  id),
                     1);
}

/* A superseding item's own schedule: not due before its run_at; a deadline before the time the
 * item is due expires it at once; an item already past its deadline replaces nothing. */
static void supersede_respects_the_newer_schedule(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    /* (a) due now, superseded by an item to run in an hour: due in an hour. */
    long long a = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"a\":1}', supersede_key => "
                                  "'ka')");
    assert_int_equal(tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"a\":2}', run_at => "
                                     "now() + interval '1 hour', supersede_key => 'ka')"),
                     a);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld AND "
                                  "next_action_at >= now() + interval '59 minutes'",
                                  a),
                     1);
    /* (b) due in an hour, superseded by an item that must go within 10 minutes: expired now,
     * and the call says so. */
    long long b = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"b\":1}', run_at => now() + "
                                  "interval '1 hour', supersede_key => 'kb')");
    char *r = tl_query_str(c, "SELECT concat_ws(' ', id, created, superseded, expired) FROM "
                              "pgpace.enqueue_json(('{\"customer\":\"acme\",\"payload\":{\"b\":2},"
                              "\"supersede_key\":\"kb\",\"expires_at\":\"' || (now() + "
                              "interval '10 minutes') || '\"}')::jsonb)");
    char want[96];
    snprintf(want, sizeof want, "%lld f t t", b);
    assert_string_equal(r, want);
    free(r);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.dead_letter WHERE item_id = "
                                  "%lld AND last_error = 'expired'",
                                  b),
                     1);
    /* (c) an item already past its deadline leaves the queued one as it was. */
    long long k = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"c\":1}', supersede_key => "
                                  "'kc')");
    long long late = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"c\":2}', expires_at => "
                                     "now() - interval '1 second', supersede_key => 'kc')");
    assert_true(late != k);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                  "q.item_id = i.id WHERE i.id = %lld AND i.payload = "
                                  "'{\"c\":1}' AND q.supersede_key = 'kc'",
                                  k),
                     1);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.dead_letter WHERE item_id = "
                                  "%lld AND last_error = 'expired'",
                                  late),
                     1);
}

static void supersede_replaces_a_queued_item(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    long long a = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"v\":1}', kind => 'k1', "
                                  "priority => 4, supersede_key => 'order-1')");
    char *before = tl_query_str(c,
                                "SELECT concat_ws(' ', next_action_at, priority, carrier) FROM "
                                "pgpace.queue WHERE item_id = %lld",
                                a);
    long long b = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"v\":2}', kind => 'k2', "
                                  "carrier => 'other', expires_at => now() + interval '1 hour', "
                                  "supersede_key => 'order-1')");
    assert_int_equal(b, a);
    /* The payload, kind and deadline are the newer item's; id, carrier, priority and place stay. */
    char *after = tl_query_str(c,
                               "SELECT concat_ws(' ', next_action_at, priority, carrier) FROM "
                               "pgpace.queue WHERE item_id = %lld",
                               a);
    assert_string_equal(after, before);
    free(before);
    free(after);
    assert_int_equal(
        tl_query_int(c,
                     "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON q.item_id "
                     "= i.id WHERE i.id = %lld AND i.payload = '{\"v\":2}' AND i.kind "
                     "= 'k2' AND q.expires_at IS NOT NULL AND i.carrier IS NULL",
                     a),
        1);
    assert_int_equal(count_rows(c, "pgpace.item"), 1);
    /* Keys are per customer. */
    long long other = tl_query_int(c, "SELECT pgpace.enqueue('beta', '{}', supersede_key => "
                                      "'order-1')");
    assert_true(other != a);
    /* Over the JSON path: the same id, and it says it superseded. */
    char *json =
        tl_query_str(c, "SELECT concat_ws(' ', id, created, superseded, expired) FROM "
                        "pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":{\"v\":3},"
                        "\"supersede_key\":\"order-1\"}')");
    char want[96];
    snprintf(want, sizeof want, "%lld f t f", a);
    assert_string_equal(json, want);
    free(json);

    /* Once claimed (as the claim statements do: the key is cleared with the claim), the item is
     * left alone and a newer one queues on its own. */
    tl_exec(c,
            "UPDATE pgpace.queue SET claim_token = 1, attempt = 1, supersede_key = NULL, "
            "next_action_at = now() + interval '1 minute' WHERE item_id = %lld",
            a);
    long long fresh = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"v\":4}', supersede_key "
                                      "=> 'order-1')");
    assert_true(fresh != a);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item WHERE id = %lld AND payload "
                                  "= '{\"v\":3}'",
                                  a),
                     1);

    /* Both keys: the idempotency key is checked first and is recorded for the item it ends up
     * in; its repeat changes nothing, whatever it carries. */
    long long keyed = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"v\":5}', idempotency_key "
                                      "=> 'i-1', supersede_key => 'order-1')");
    assert_int_equal(keyed, fresh);
    long long again = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"v\":6}', idempotency_key "
                                      "=> 'i-1', supersede_key => 'order-1')");
    assert_int_equal(again, fresh);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item i JOIN pgpace.item_key k ON "
                                  "k.item_id = i.id WHERE i.id = %lld AND i.payload = '{\"v\":5}' "
                                  "AND k.idempotency_key = 'i-1'",
                                  fresh),
                     1);
    assert_int_equal(count_rows(c, "pgpace.queue"), 3);
}

/* The bulk loader: lines with a supersede_key go one by one after the others, in line order. */
static void bulk_file_supersedes_and_expires(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    long long queued = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"v\":0}', supersede_key "
                                       "=> 's1')");
    tl_proc p = run_bulk(db, "-",
                         "{\"customer\":\"acme\",\"payload\":{\"v\":1},\"supersede_key\":\"s1\"}\n"
                         "{\"customer\":\"acme\",\"payload\":{\"v\":2},\"supersede_key\":\"s1\"}\n"
                         "{\"customer\":\"acme\",\"payload\":{\"w\":1},\"supersede_key\":\"s2\"}\n"
                         "{\"customer\":\"acme\",\"payload\":{\"w\":2},\"supersede_key\":\"s2\","
                         "\"expires_at\":\"2100-01-01T00:00:00Z\"}\n"
                         "{\"customer\":\"beta\",\"payload\":{},\"expires_at\":\"2100-01-01T00:00:"
                         "00Z\",\"run_at\":\"2099-01-01T00:00:00Z\"}\n");
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "enqueued 2 item(s)");
    tl_assert_contains(p.out, "(0 duplicate idempotency key(s) skipped); 3 superseded");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item WHERE id = %lld AND payload = "
                                  "'{\"v\":2}'",
                                  queued),
                     1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                     "q.item_id = i.id WHERE i.payload = '{\"w\":2}' AND "
                                     "q.expires_at = '2100-01-01T00:00:00Z'"),
                     1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON "
                                     "i.id = q.item_id WHERE i.expires_at = '2100-01-01T00:00:00Z' "
                                     "AND q.expires_at = i.expires_at"),
                     2);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue WHERE next_action_at = "
                                     "'2099-01-01T00:00:00Z'"),
                     1);
    assert_int_equal(count_rows(c, "pgpace.item"), 3);

    /* Both keys on a line: a repeat of its idempotency key later in the file keeps the first
     * line (as two pgpace.enqueue calls would), and its supersede_key stays with that item. */
    p = run_bulk(db, "-",
                 "{\"customer\":\"acme\",\"payload\":{\"m\":1},\"idempotency_key\":\"i1\","
                 "\"supersede_key\":\"s3\"}\n"
                 "{\"customer\":\"acme\",\"payload\":{\"m\":2},\"idempotency_key\":\"i1\"}\n"
                 "{\"customer\":\"acme\",\"payload\":{\"m\":3},\"idempotency_key\":\"i2\"}\n");
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "enqueued 2 item(s)");
    tl_assert_contains(p.out, "(1 duplicate idempotency key(s) skipped)");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                     "q.item_id = i.id WHERE i.payload = '{\"m\":1}' AND "
                                     "q.supersede_key = 's3' AND i.idempotency_key = 'i1'"),
                     1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item WHERE payload = "
                                     "'{\"m\":2}'"),
                     0);
}

/* Many producers superseding the same few keys at once: at most one queued item per key, the
 * last committed payload in it, and every call answered with that item's id. Each transaction
 * takes a number from a sequence after its enqueue: the key's lock (the queue row, or the unique
 * index entry of its first insert) is held until commit, so for one key these numbers follow
 * the commit order. */
#define SUP_THREADS 16
#define SUP_ITEMS   200
#define SUP_KEYS    5

typedef struct sup_call {
    long long id, seq;
} sup_call;

typedef struct sup_thread {
    const char *conninfo;
    int t;
    sup_call calls[SUP_ITEMS];
    int retries;
    char error[256];
} sup_thread;

static void *sup_producer(void *arg)
{
    sup_thread *st = arg;
    PGconn *conn = PQconnectdb(st->conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(st->error, sizeof st->error, "connect: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return NULL;
    }
    for (int i = 0; i < SUP_ITEMS && !st->error[0]; i++) {
        char payload[64], key[16];
        snprintf(payload, sizeof payload, "{\"t\": %d, \"i\": %d}", st->t, i);
        snprintf(key, sizeof key, "k%d", i % SUP_KEYS);
        const char *params[] = {payload, key};
        for (;;) {
            PGresult *r = PQexec(conn, "BEGIN");
            PQclear(r);
            r = PQexecParams(conn, "SELECT pgpace.enqueue('acme', $1::jsonb, supersede_key => $2)",
                             2, NULL, params, NULL, NULL, 0);
            bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
            const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            if (!ok && state && strncmp(state, "40", 2) == 0) {
                PQclear(r);
                PQclear(PQexec(conn, "ROLLBACK"));
                st->retries++;
                continue;
            }
            if (!ok) {
                snprintf(st->error, sizeof st->error, "enqueue: %s", PQresultErrorMessage(r));
                PQclear(r);
                break;
            }
            st->calls[i].id = atoll(PQgetvalue(r, 0, 0));
            PQclear(r);
            r = PQexec(conn, "SELECT nextval('sup_commit_order')");
            st->calls[i].seq = atoll(PQgetvalue(r, 0, 0));
            PQclear(r);
            r = PQexec(conn, "COMMIT");
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                snprintf(st->error, sizeof st->error, "commit: %s", PQresultErrorMessage(r));
            PQclear(r);
            break;
        }
    }
    PQfinish(conn);
    return NULL;
}

static void supersede_under_concurrent_producers(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "CREATE SEQUENCE public.sup_commit_order");
    static sup_thread threads[SUP_THREADS];
    pthread_t tids[SUP_THREADS];
    for (int t = 0; t < SUP_THREADS; t++) {
        threads[t] = (sup_thread){.conninfo = db->conninfo, .t = t};
        assert_int_equal(pthread_create(&tids[t], NULL, sup_producer, &threads[t]), 0);
    }
    int retries = 0;
    for (int t = 0; t < SUP_THREADS; t++) {
        pthread_join(tids[t], NULL);
        if (threads[t].error[0])
            fail_msg("producer %d: %s", t, threads[t].error);
        retries += threads[t].retries;
    }
    print_message("# %d calls, %d retried after a serialization failure\n", SUP_THREADS * SUP_ITEMS,
                  retries);
    /* Under READ COMMITTED a producer never has to retry for a supersede_key. */
    assert_int_equal(retries, 0);
    /* One item per key, queued once. */
    assert_int_equal(count_rows(c, "pgpace.item"), SUP_KEYS);
    assert_int_equal(tl_query_int(c, "SELECT count(DISTINCT supersede_key) FROM pgpace.queue"),
                     SUP_KEYS);
    assert_int_equal(count_rows(c, "pgpace.queue"), SUP_KEYS);
    for (int k = 0; k < SUP_KEYS; k++) {
        long long id = 0, best = -1;
        int bt = -1, bi = -1;
        for (int t = 0; t < SUP_THREADS; t++)
            for (int i = k; i < SUP_ITEMS; i += SUP_KEYS) {
                const sup_call *call = &threads[t].calls[i];
                if (id == 0)
                    id = call->id;
                assert_int_equal(call->id, id); /* every call of the key answered its item */
                if (call->seq > best) {
                    best = call->seq;
                    bt = t;
                    bi = i;
                }
            }
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                      "q.item_id = i.id WHERE i.id = %lld AND q.supersede_key = "
                                      "'k%d' AND i.payload = jsonb_build_object('t', %d, 'i', %d)",
                                      id, k, bt, bi),
                         1);
    }
}

/* The command line: --expires-at, --supersede-key, the reserved priority, --max-age. */
static void cli_deadlines_and_supersede(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "acme", "{\"v\":1}",
                                  "--expires-at", "2100-01-01T00:00:00Z", "--supersede-key", "s"),
                          NULL, NULL);
    assert_int_equal(p.status, 0);
    long long id = atoll(p.out);
    tl_proc_free(&p);
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "enqueue", "acme", "{\"v\":2}", "--supersede-key", "s"), NULL,
        NULL);
    assert_int_equal(p.status, 0);
    assert_int_equal(atoll(p.out), id);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.item WHERE id = %lld AND payload = "
                                  "'{\"v\":2}' AND expires_at IS NULL",
                                  id),
                     1);

    const struct {
        const char *const *argv;
        int status;
        const char *message;
    } bad[] = {
        {TL_ARGV("enqueue", "acme", "{}", "--priority", "-32768"), 2,
         "pgpace enqueue: --priority: expected an integer from -32767 to 32767, got '-32768'"},
        {TL_ARGV("enqueue", "acme", "{}", "--supersede-key", ""), 2,
         "--supersede-key: must be 1 to 255 characters"},
        {TL_ARGV("enqueue", "acme", "{}", "--expires-at", "next week"), 1,
         "field expires_at: invalid input syntax"},
        {TL_ARGV("enqueue", "acme", "{}", "--expires-at", "infinity"), 1,
         "expires_at must be a finite timestamp"},
        {TL_ARGV("enqueue", "acme", "{}", "--run-at", "2100-01-02T00:00:00Z", "--expires-at",
                 "2100-01-01T00:00:00Z"),
         1, "expires_at must be later than run_at"},
        {TL_ARGV("enqueue", "--file", "-", "--expires-at", "2100-01-01T00:00:00Z"), 2,
         "--file takes every field from the file"},
        {TL_ARGV("customer", "set", "acme", "--max-age", "5w"), 2,
         "pgpace customer set: --max-age: expected a duration such as 90s, 15m, 2h or 3d (1s to "
         "365d), or 'none', got '5w'"},
        {TL_ARGV("customer", "set", "acme", "--max-age", "366d"), 2, "--max-age: expected"},
        {TL_ARGV("customer", "set", "acme", "--max-age", "0s"), 2, "--max-age: expected"},
        {TL_ARGV("customer", "set", "acme", "--max-age", "-5m"), 2, "--max-age: expected"},
        {TL_ARGV("customer", "set", "acme", "--max-age", "99999999999999999999s"), 2,
         "--max-age: expected"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[16] = {"--db", db->conninfo};
        size_t n = 2;
        for (const char *const *a = bad[i].argv; *a; a++)
            argv[n++] = *a;
        p = tl_pgpace(argv, NULL, NULL);
        if (p.status != bad[i].status)
            fail_msg("case %zu: exit %d, expected %d: %s", i, p.status, bad[i].status, p.err);
        tl_assert_contains(p.err, bad[i].message);
        tl_proc_free(&p);
    }
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 1);

    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "set", "acme", "--max-age", "90s"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme' AND max_age = interval '90 seconds'"),
                     1);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "get", "acme"), NULL, NULL);
    tl_assert_contains(p.out, "max_age            00:01:30\n");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "set", "acme", "--max-age", "3d"), NULL,
                  NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "list"), NULL, NULL);
    tl_assert_contains(p.out, "max_age");
    tl_assert_contains(p.out, "72:00:00");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "set", "acme", "--max-age", "none"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "get", "acme"), NULL, NULL);
    tl_assert_contains(p.out, "max_age            none\n");
    tl_proc_free(&p);
}

/* One reading of a body: a member named twice in one object is refused by the CLI, one item
 * or a bulk line, naming the member and the line (the HTTP path: test_admin_http.c), and nothing
 * is enqueued. PostgreSQL's jsonb would have kept the last of the two silently. */
static void duplicate_members_refused(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "acme",
                                  "{\"order\":{\"id\":1,\"total\":5,\"id\":2}}"),
                          NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "field payload: duplicate member order.id: an object names it twice");
    tl_proc_free(&p);
    char *path = tl_temp_file("{\"customer\":\"acme\",\"payload\":{}}\n"
                              "{\"customer\":\"acme\",\"payload\":{},\"customer\":\"beta\"}\n");
    p = run_bulk(db, path, NULL);
    if (p.status != 1)
        fail_msg("bulk: expected exit 1, got %d: %s%s", p.status, p.out, p.err);
    tl_assert_contains(p.err, "line 2: duplicate member customer: an object names it twice");
    tl_assert_contains(p.err, "nothing was enqueued");
    tl_proc_free(&p);
    unlink(path);
    free(path);
    assert_nothing_enqueued(db->conn);
    /* The same name in two objects is two members. */
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "enqueue", "acme", "{\"id\":1,\"line\":{\"id\":2}}"), NULL,
        NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.item"), 1);
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
        cmocka_unit_test_setup_teardown(payload_nesting_limit_on_every_path, setup, teardown),
        cmocka_unit_test_setup_teardown(json_priority_takes_integral_numbers, setup, teardown),
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
        cmocka_unit_test_setup_teardown(duplicate_members_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_names_the_line_of_any_json_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(bulk_file_rejects_payload_over_the_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_missing_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_of_100k_items, setup, teardown),
        cmocka_unit_test_setup_teardown(deadline_is_fixed_at_enqueue, setup, teardown),
        cmocka_unit_test_setup_teardown(deadline_errors_have_their_sqlstate, setup, teardown),
        cmocka_unit_test_setup_teardown(past_deadline_is_dead_lettered_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(supersede_replaces_a_queued_item, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_supersedes_and_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(supersede_respects_the_newer_schedule, setup, teardown),
        cmocka_unit_test_setup_teardown(supersede_under_concurrent_producers, setup, teardown),
        cmocka_unit_test_setup_teardown(cli_deadlines_and_supersede, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
