/* test_wake.c - wake-ups without NOTIFY while the leader is hot (0024_wake.sql, 24_wake.sql,
 * src/dispatch/wake.c), through the running dispatcher. The backstop scan is set to an hour, so
 * every item delivered here was found by a NOTIFY or a poll, none by the scan:
 * - sustained wake-ups turn the leader hot, producers then leave rows instead of notifying,
 *   every item is delivered, and the leader turns cold again once they stop;
 * - a producer that read "hot" and commits after the leader tried to turn cold still has its
 *   item delivered (the barrier failed: the leader cools, its lease ended, new producers
 *   notify, and it polls on for the open one);
 * - a REPEATABLE READ producer notifies even while hot;
 * - a leader stopped while hot leaves rows that the next one reads;
 * - a transaction that wakes many pairs writes its row a few times and notifies the rest;
 * - entries dropped before a poll read them (a gap) start a backstop pass. */
#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Turns hot at 50 wake-ups/s (5 in a 100 ms window); the scan never runs during a test. */
#define WAKE_INI "dispatcher.wake_hot_per_s = 50\ndispatcher.backstop_scan_ms = 3600000\n"

static PGconn *connect_or_fail(fx *f)
{
    PGconn *c = PQconnectdb(f->db->conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("cannot connect: %s", PQerrorMessage(c));
    return c;
}

/* Enqueues single items (one transaction each) until the leader is hot as producers see it
 * (its lease written) and as it says itself; fails after 60 s. Returns how many were enqueued. */
static int enqueue_until_hot(fx *f, const char *customer)
{
    int n = 0;
    long long deadline = tl_now_ms() + 60000;
    while (tl_now_ms() < deadline) {
        for (int i = 0; i < 20; i++, n++)
            tl_exec(f->db->conn, "SELECT pgpace.enqueue('%s', '{\"warm\": %d}')", customer, n);
        if (tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.wake_state WHERE hot_until > "
                                      "clock_timestamp()") == 1 &&
            fx_wait_metric(f, "pgpace_wake_hot", 1, 0))
            return n;
    }
    fail_msg("the leader did not turn hot after %d wake-ups", n);
    return n;
}

/* A customer "u" (unlimited), the leader running and hot: returns how many items it took. */
static int start_hot(fx *f)
{
    fx_customer(f, "u", TL_ARGV("--rate", "60000", "--mode", "unlimited"));
    fx_run(f, WAKE_INI);
    return enqueue_until_hot(f, "u");
}

/* A new session that enqueues `payload` for "u" in a transaction it leaves open, with
 * `isolation` ("" for READ COMMITTED); asserts how many rows of pgpace.wake its backend has. */
static PGconn *open_producer(fx *f, const char *isolation, const char *payload, long long rows)
{
    PGconn *c = connect_or_fail(f);
    tl_exec(c, "BEGIN %s", isolation);
    tl_exec(c, "SELECT pgpace.enqueue('u', '%s')", payload);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.wake WHERE backend = "
                                     "pg_backend_pid()"),
                     rows);
    return c;
}

/* Sustained wake-ups: hot, rows instead of NOTIFYs, every item delivered, cold again. */
static void hot_spell_delivers_everything_and_ends(void **state)
{
    fx *f = *state;
    fx_customer(f, "u", TL_ARGV("--rate", "60000", "--mode", "unlimited"));
    fx_run(f, WAKE_INI);
    int n = enqueue_until_hot(f, "u");
    /* While hot, a producer leaves a row and notifies nobody: its row is there in its own
     * transaction, with the pair. */
    tl_exec(f->db->conn, "BEGIN");
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('u', '{\"hot\": 1}')");
    long long rows =
        tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.wake w, pgpace.customer c "
                                  "WHERE w.backend = pg_backend_pid() AND c.name = 'u' "
                                  "AND w.pairs[cardinality(w.pairs)] = c.id::text || ' '");
    tl_exec(f->db->conn, "COMMIT");
    assert_int_equal(rows, 1);
    n++;
    for (int i = 0; i < 200; i++, n++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('u', '{\"more\": %d}')", i);
    assert_int_equal(receiver_wait(f->recv, "/c/u", (size_t)n, 60000), n);
    char *m = fx_metrics(f);
    tl_assert_contains(m, "pgpace_wakeups_total{via=\"poll\"}");
    tl_assert_contains(m, "pgpace_wakeups_total{via=\"notify\"}");
    free(m);
    /* Quiet: cold again, the lease ended, the rows gone. */
    assert_true(fx_wait_metric(f, "pgpace_wake_hot", 0, 20000));
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 10000, "SELECT -count(*) FROM pgpace.wake"), 0);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.wake_state WHERE "
                                               "hot_until > now()"),
                     0);
    /* Cold: a producer notifies again and leaves no row. */
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('u', '{\"cold\": 1}')");
    n++;
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.wake"), 0);
    assert_int_equal(receiver_wait(f->recv, "/c/u", (size_t)n, 30000), n);
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 10000, "SELECT -count(*) FROM pgpace.queue"), 0);
}

/* A producer reads "hot" and holds its transaction open while the leader tries to turn cold:
 * the barrier fails and the leader cools (its lease ended: a new producer notifies and writes
 * no row) and polls on; the item is delivered once the producer commits. */
static void late_producer_is_read_while_cooling(void **state)
{
    fx *f = *state;
    int n = start_hot(f);
    PGconn *late = open_producer(f, "", "{\"late\": 1}", 1);
    /* No more wake-ups: the leader tries to turn cold, and cannot while this one is open. */
    assert_true(fx_wait_log(f, "event=wake_cold_deferred", 20000));
    assert_true(fx_wait_metric(f, "pgpace_wake_hot", 1, 0));
    tl_exec(f->db->conn, "BEGIN");
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('u', '{\"new\": 1}')");
    assert_int_equal(tl_query_int(f->db->conn, "SELECT coalesce(nullif(current_setting("
                                               "'pgpace.wake_writes', true), ''), '0')::int"),
                     0);
    tl_exec(f->db->conn, "COMMIT");
    n++;
    tl_exec(late, "COMMIT");
    PQfinish(late);
    n++;
    assert_int_equal(receiver_wait(f->recv, "/c/u", (size_t)n, 30000), n);
    bool found = false;
    size_t count = receiver_count(f->recv, "/c/u");
    for (size_t i = 0; i < count && !found; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        found = strcmp(rq.body, "{\"late\": 1}") == 0;
        free(rq.body);
    }
    assert_true(found);
    assert_true(fx_wait_metric(f, "pgpace_wake_hot", 0, 20000));
}

/* REPEATABLE READ producers notify while hot (what they read of the lease may be stale). */
static void repeatable_read_producers_notify(void **state)
{
    fx *f = *state;
    int n = start_hot(f);
    PGconn *rr = open_producer(f, "ISOLATION LEVEL REPEATABLE READ", "{\"rr\": 1}", 0);
    tl_exec(rr, "COMMIT");
    PQfinish(rr);
    n++;
    assert_int_equal(receiver_wait(f->recv, "/c/u", (size_t)n, 30000), n);
}

/* A leader stopped while hot: a producer that read its lease commits afterwards, and the next
 * leader reads its row at the start (the scan is an hour away). */
static void next_leader_reads_what_a_hot_one_left(void **state)
{
    fx *f = *state;
    int n = start_hot(f);
    PGconn *late = open_producer(f, "", "{\"left\": 1}", 1);
    assert_int_equal(receiver_wait(f->recv, "/c/u", (size_t)n, 30000), n);
    fx_stop_service(f, 10000);
    tl_exec(late, "COMMIT");
    PQfinish(late);
    n++;
    fx_run(f, WAKE_INI);
    assert_int_equal(receiver_wait(f->recv, "/c/u", (size_t)n, 30000), n);
    assert_true(fx_wait_metric(f, "pgpace_wake_hot", 0, 20000));
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 10000, "SELECT -count(*) FROM pgpace.wake"), 0);
}

/* A transaction that wakes many pairs while hot writes its row a few times and notifies the
 * rest (a row updated many times in one transaction is a chain each update walks): every item
 * of 40 customers enqueued in one transaction is delivered. */
static void many_pairs_in_one_transaction(void **state)
{
    fx *f = *state;
    fx_customer(f, "u", TL_ARGV("--rate", "60000", "--mode", "unlimited"));
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%02d", i);
        fx_customer(f, name, TL_ARGV("--rate", "60000", "--mode", "unlimited"));
    }
    fx_run(f, WAKE_INI);
    int n = enqueue_until_hot(f, "u");
    tl_exec(f->db->conn, "BEGIN");
    for (int i = 0; i < 40; i++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('m%02d', '{\"m\": %d}')", i, i);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT current_setting('pgpace.wake_writes')::int"),
                     8);
    tl_exec(f->db->conn, "COMMIT");
    assert_int_equal(receiver_wait(f->recv, "/c/u", (size_t)n, 30000), n);
    assert_int_equal(receiver_wait(f->recv, "/c/m", 40, 30000), 40);
}

/* Entries a backend wrote faster than the polls read (a row keeps its last 64) are found by a
 * backstop pass the gap starts: here the row is made to have dropped the only entry of an item,
 * and the periodic scan is an hour away. */
static void a_gap_is_found_by_a_scan(void **state)
{
    fx *f = *state;
    fx_customer(f, "u", TL_ARGV("--rate", "60000", "--mode", "unlimited"));
    fx_customer(f, "g", TL_ARGV("--rate", "60000", "--mode", "unlimited"));
    fx_run(f, WAKE_INI);
    int n = enqueue_until_hot(f, "u");
    /* A backend the leader has not read before: a gap must show without what it has seen. */
    PGconn *c = connect_or_fail(f);
    tl_exec(c, "BEGIN");
    tl_exec(c, "SELECT pgpace.enqueue('g', '{\"gap\": 1}')");
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.wake WHERE backend = "
                                     "pg_backend_pid()"),
                     1);
    tl_exec(c,
            "UPDATE pgpace.wake SET seq = seq + 1000, pairs = array_fill((SELECT id::text || ' zz' "
            "FROM pgpace.customer WHERE name = 'u'), ARRAY[64]) WHERE backend = pg_backend_pid()");
    tl_exec(c, "COMMIT");
    PQfinish(c);
    assert_int_equal(receiver_wait(f->recv, "/c/g", 1, 30000), 1);
    assert_true(fx_wait_log(f, "event=wake_gap", 5000));
    assert_int_equal(receiver_wait(f->recv, "/c/u", (size_t)n, 30000), n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(hot_spell_delivers_everything_and_ends, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(late_producer_is_read_while_cooling, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(repeatable_read_producers_notify, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(next_leader_reads_what_a_hot_one_left, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(many_pairs_in_one_transaction, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(a_gap_is_found_by_a_scan, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
