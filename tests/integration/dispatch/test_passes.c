/* test_passes.c - the leader's read-only passes (the queue gauges and the backstop scan,
 * src/dispatch/housekeeping.c) run on a read connection of their own, so claims never wait
 * behind them (issue 34: a 100-250 ms gauge slice held up every claim round sent behind it):
 * - a queue-gauge slice that cannot finish (it waits on a lock the test holds) does not hold up
 *   claims: a customer's items are claimed and delivered while it waits, and the gauges come
 *   back once it is released;
 * - when the read connection is lost while leading, the leader goes on claiming, the passes go
 *   on (on the claim connection until the read connection is back), and it reconnects.
 * Real PostgreSQL, real loopback receiver; waits are conditions with deadlines. */
#include "fixture.h"
#include "receiver.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The stall: pgpace.limits_rate, which the gauge statement (run_metrics.sql) calls for every
 * customer with limit windows and no claim, finalize or sweep statement calls, replaced by a copy
 * that first waits for a shared advisory lock the test holds exclusively. Replaced once the
 * dispatcher leads (its start-up load of customers calls the function too). */
#define STALL_LOCK "20260, 34"
#define STALL_FUNCTION                                                                             \
    "CREATE OR REPLACE FUNCTION pgpace.limits_rate(windows text[]) RETURNS double precision "      \
    "LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$ BEGIN "                 \
    "PERFORM pg_advisory_xact_lock_shared(" STALL_LOCK "); "                                       \
    "RETURN (SELECT x.count * 60.0 / x.period_s FROM unnest(windows) AS u(w) "                     \
    "CROSS JOIN LATERAL pgpace.limit_window_parts(u.w) AS x ORDER BY x.period_s LIMIT 1); "        \
    "END $$"

/* Gauge statements waiting on the stall lock (pg_stat_activity shows the start of a statement's
 * text: run_metrics.sql's opening comment). */
#define GAUGES_STALLED                                                                             \
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "                    \
    "AND wait_event_type = 'Lock' AND wait_event = 'advisory' "                                    \
    "AND query LIKE '-- Queue gauges for /metrics%%'"

static void claims_go_on_while_a_gauge_slice_is_stalled(void **state)
{
    fx *f = *state;
    fx_customer(f, "fast", TL_ARGV("--mode", "unlimited", "--rate", "60"));
    /* With a limit window: the gauge statement calls pgpace.limits_rate only for those. */
    fx_customer(f, "held", TL_ARGV("--rate", "600", "--limit", "10/s", "--paused"));
    fx_enqueue(f, "fast", NULL, 1);
    /* No statement_timeout: the stalled slice waits for as long as the test holds the lock. */
    fx_run(f, "database.statement_timeout_ms = 0\n");
    assert_int_equal(receiver_wait(f->recv, "/c/fast", 1, 20000), 1); /* leading */

    tl_exec(f->db->conn, STALL_FUNCTION);
    tl_exec(f->db->conn, "SELECT pg_advisory_lock(" STALL_LOCK ")");
    /* The next gauge pass (every 15 s) stalls on its first slice. */
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 40000, GAUGES_STALLED), 1);

    long long t0 = tl_now_ms();
    fx_enqueue_many(f, "fast", 200);
    fx_enqueue_many(f, "held", 7);
    size_t got = receiver_wait(f->recv, "/c/fast", 201, 30000);
    long long stalled = tl_query_int(f->db->conn, GAUGES_STALLED);
    print_message("# 200 items delivered in %lld ms while a gauge slice waited (%lld waiting)\n",
                  tl_now_ms() - t0, stalled);
    assert_int_equal(got, 201);
    assert_int_equal(stalled, 1); /* still waiting: every claim went past it */
    /* It waits on the read connection, not the claim connection. */
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pg_stat_activity WHERE "
                                  "datname = current_database() AND wait_event = 'advisory' "
                                  "AND query LIKE '-- Queue gauges for /metrics%%' AND "
                                  "application_name LIKE 'pgpace-read:%%'"),
                     1);

    /* Released, the pass finishes and the next one reads what was enqueued meanwhile. */
    tl_exec(f->db->conn, "SELECT pg_advisory_unlock(" STALL_LOCK ")");
    assert_true(fx_wait_metric(f, "pgpace_queue_due{customer=\"held\"}", 7, 40000));
    assert_int_equal(tl_query_int(f->db->conn, GAUGES_STALLED), 0);
    /* Nothing waited long enough for the watchdog to reset the claim connection (before the
     * read connection, that is how the claims got past a stalled slice). */
    char *log = fx_log(f);
    assert_null(strstr(log, "db_statement_stalled"));
    assert_null(strstr(log, "leadership_lost"));
    free(log);
    fx_stop_service(f, 8000);
}

#define READ_SESSIONS                                                                              \
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "                \
    "application_name LIKE 'pgpace-read:%%'"

static void leader_goes_on_when_the_read_connection_is_lost(void **state)
{
    fx *f = *state;
    fx_customer(f, "fast", TL_ARGV("--mode", "unlimited", "--rate", "60"));
    /* With a limit window: the gauge statement calls pgpace.limits_rate only for those. */
    fx_customer(f, "held", TL_ARGV("--rate", "600", "--limit", "10/s", "--paused"));
    fx_enqueue(f, "fast", NULL, 1);
    fx_run(f, NULL);
    assert_int_equal(receiver_wait(f->recv, "/c/fast", 1, 20000), 1);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000, READ_SESSIONS), 1);

    /* Its session ends (as in a failover of the path, or an operator's kill). */
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE datname = current_database() AND "
                                  "application_name LIKE 'pgpace-read:%%'"),
                     1);
    fx_enqueue_many(f, "fast", 100);
    fx_enqueue_many(f, "held", 5);
    assert_int_equal(receiver_wait(f->recv, "/c/fast", 101, 30000), 101);
    /* The gauges go on: a pass after the loss counts what was enqueued after it. */
    assert_true(fx_wait_metric(f, "pgpace_queue_due{customer=\"held\"}", 5, 40000));
    /* The read connection is back, and the leader never lost the lead. */
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 20000, READ_SESSIONS), 1);
    char *log = fx_log(f);
    assert_null(strstr(log, "leadership_lost"));
    free(log);
    fx_stop_service(f, 8000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(claims_go_on_while_a_gauge_slice_is_stalled, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(leader_goes_on_when_the_read_connection_is_lost, fx_setup,
                                        fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
