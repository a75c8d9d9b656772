/* test_window.c - the claim-ahead window (issue: a host's throughput was bound by claim round
 * trips because claims took only its free connections):
 * - work-queue items are claimed beyond the host's free connections (rounds of more items than
 *   the host has connections, up to two claims in flight), and never more at once on the wire
 *   than its connections;
 * - batch ticks still run while claims are pipelined back to back;
 * - on SIGTERM the items waiting in the window are given back at once (due again, the attempt
 *   not counted), while the requests on the wire finish: nothing is left leased at exit;
 * - when the dispatcher loses its database session (and so its leadership) the window is given
 *   back as soon as the connection is back, so every item is delivered long before the leases
 *   of the window's items would have run out;
 * - an item that waited in the window longer than claim_ahead_ms is given back without an
 *   attempt;
 * - a carrier's first item is not held behind the window's worth of another carrier of the same
 *   customer (a replay): it is claimed although the window is full, and the customer's carriers
 *   take turns in the window (issue 34: a live carrier beside a replay).
 * Real PostgreSQL, real loopback receiver; waits are conditions with deadlines. */
#include "fixture.h"
#include "receiver.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Two connections to the host, a lease long enough that a leaked window item would visibly
 * wait for it (60 s), and a window that may hold a host's requests for 15 s. */
#define SLOW_HOST_INI                                                                              \
    "delivery.max_host_connections = 2\n"                                                          \
    "delivery.request_timeout_ms = 10000\n"                                                        \
    "dispatcher.lease_seconds = 60\n"                                                              \
    "dispatcher.claim_ahead_ms = 15000\n"

static void answer_after(receiver *r, const char *prefix, int ms)
{
    receiver_on(r,
                &(receiver_rule){
                    .path_prefix = prefix, .action = RECV_RESPOND, .status = 200, .delay_ms = ms});
}

static long long q_int(fx *f, const char *sql)
{
    return tl_query_int(f->db->conn, "%s", sql);
}

#define CLAIMED "SELECT count(*) FROM pgpace.queue WHERE claim_token IS NOT NULL"

static void claims_run_ahead_of_free_connections(void **state)
{
    fx *f = *state;
    fx_customer(f, "flood", TL_ARGV("--mode", "unlimited", "--rate", "60"));
    fx_enqueue_many(f, "flood", 6000);
    fx_run(f, "delivery.max_host_connections = 4\n");
    assert_int_equal(receiver_wait(f->recv, "/c/flood", 6000, 60000), 6000);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 6000, 10000,
                                            "SELECT 6000 - count(*) FROM pgpace.queue"),
                     6000);
    char *m = fx_metrics(f);
    double items = fx_metric(m, "pgpace_items_claimed_total{mode=\"unlimited\"}");
    double rounds = fx_metric(m, "pgpace_claim_rounds_total{round=\"scheduled\"}");
    double pipelined = fx_metric(m, "pgpace_claims_pipelined_total");
    free(m);
    print_message("# 6000 items, 4 connections: %.0f claim rounds (%.1f items each), %.0f sent "
                  "while another was in flight; at most %zu requests at once\n",
                  rounds, items / rounds, pipelined, receiver_max_concurrent(f->recv, "/c/flood"));
    assert_true(items >= 6000 && rounds > 0);
    /* Not one round trip per 4 connections' worth: the window takes far more per claim. */
    assert_true(items / rounds > 4 * 4);
    assert_true(pipelined >= 1);
    assert_true(receiver_max_concurrent(f->recv, "/c/flood") <= 4);
    fx_stop_service(f, 8000);
}

/* Claims pipelined without pause (a flood claimed 5 at a time) do not crowd out batch ticks: a
 * tick waits for the claims in flight, then runs. A batch rate is items per tick: one here. */
static void batch_ticks_run_beside_pipelined_claims(void **state)
{
    fx *f = *state;
    fx_customer(f, "flood", TL_ARGV("--mode", "unlimited", "--rate", "60"));
    fx_enqueue_many(f, "flood", 100000);
    fx_customer(f, "b", TL_ARGV("--mode", "batch", "--rate", "1"));
    fx_enqueue_many(f, "b", 40);
    /* No window, room for all: every completion makes the flood due again, so some claim is
     * always in flight. */
    fx_run(f, "dispatcher.batch_tick_ms = 500\ndispatcher.claim_batch_max = 5\n"
              "dispatcher.claim_ahead = 0\ndelivery.max_host_connections = 1000\n"
              "delivery.max_connections = 1000\n");
    /* From the first tick's items on (a first tick may carry more), one item every tick: 8
     * more within 6 s (4 s of ticks). */
    assert_true(receiver_wait(f->recv, "/c/b", 1, 10000) >= 1);
    assert_true(receiver_wait(f->recv, "/c/flood", 200, 10000) >= 200);
    size_t n0 = receiver_count(f->recv, "/c/b");
    long long t0 = tl_now_ms();
    size_t got = receiver_wait(f->recv, "/c/b", n0 + 8, 6000) - n0;
    size_t flood = receiver_count(f->recv, "/c/flood");
    print_message("# batch customer beside a flood claimed 5 at a time: %zu more items in %lld ms "
                  "(one per 500 ms tick; %zu before); flood %zu\n",
                  got, tl_now_ms() - t0, n0, flood);
    assert_true(got >= 8);
    assert_true(flood < 100000); /* the flood lasted the whole measurement */
    fx_stop_service(f, 8000);
}

static void window_goes_back_on_sigterm(void **state)
{
    fx *f = *state;
    answer_after(f->recv, "/c/hog", 1000);
    fx_customer(f, "hog", TL_ARGV("--mode", "unlimited", "--rate", "60"));
    fx_enqueue_many(f, "hog", 200);
    fx_run(f, SLOW_HOST_INI "dispatcher.drain_timeout_ms = 10000\n");

    /* Once the host's request time is known (1 s), the window holds about 15 s of them. */
    assert_true(receiver_wait(f->recv, "/c/hog", 4, 10000) >= 4);
    long long claimed = tl_wait_query_at_least(f->db->conn, 6, 10000, CLAIMED);
    print_message("# %lld items claimed with 2 connections\n", claimed);
    assert_true(claimed >= 6);

    long long t0 = tl_now_ms();
    fx_stop_service(f, 8000); /* exit status 0 asserted */
    long long took = tl_now_ms() - t0;
    size_t sent = receiver_count(f->recv, "/c/hog");
    long long done = q_int(f, "SELECT count(*) FROM pgpace.delivery_attempt WHERE outcome = "
                              "'success'");
    print_message("# SIGTERM: exit after %lld ms; %zu requests sent, %lld delivered\n", took, sent,
                  done);
    char *log = fx_log(f);
    tl_assert_contains(log, "window_given_back");
    tl_assert_contains(log, "shutting down");
    assert_null(strstr(log, "unfinalised_at_exit"));
    free(log);
    /* Never more on the wire than the host's connections. */
    assert_true(receiver_max_concurrent(f->recv, "/c/hog") <= 2);
    /* Nothing left leased; everything not delivered is due now with no attempt counted. */
    assert_int_equal(q_int(f, CLAIMED), 0);
    assert_int_equal((long long)sent, done);
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.queue WHERE attempt = 0 AND "
                              "next_action_at <= now()"),
                     200 - done);
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.delivery_attempt"), done);
}

/* The leader lock (sql/functions/11_instance.sql): class 'pgpa', key 2. */
#define LEADER_LOCK "1885827169, 2"

static void window_goes_back_when_leadership_is_lost(void **state)
{
    fx *f = *state;
    answer_after(f->recv, "/c/hog", 400);
    fx_customer(f, "hog", TL_ARGV("--mode", "unlimited", "--rate", "60"));
    fx_enqueue_many(f, "hog", 40);
    fx_run(f, SLOW_HOST_INI);

    assert_true(receiver_wait(f->recv, "/c/hog", 4, 10000) >= 4);
    assert_true(tl_wait_query_at_least(f->db->conn, 6, 10000, CLAIMED) >= 6);
    /* The dispatcher's session ends and, before it is back, the leader lock is taken (as by
     * another instance): it comes back as a standby. */
    long long killed =
        tl_query_int(f->db->conn, "SELECT count(pg_terminate_backend(pid)) FROM "
                                  "pg_stat_activity WHERE datname = current_database() AND "
                                  "application_name LIKE 'pgpace:%%'");
    assert_true(killed >= 1);
    long long t0 = tl_now_ms();
    tl_exec(f->db->conn, "SET lock_timeout = '5s'");
    tl_exec(f->db->conn, "SELECT pg_advisory_lock(" LEADER_LOCK ")");
    assert_true(fx_wait_log(f, "leadership_lost", 10000));
    /* Its requests on the wire end within 0.4 s; its window is given back as soon as it is
     * connected again, not when the window would expire (15 s) or the leases (60 s). */
    long long claimed = tl_wait_query_at_least(f->db->conn, 0, 12000,
                                               "SELECT -count(*) FROM pgpace.queue WHERE "
                                               "claim_token IS NOT NULL");
    long long took = tl_now_ms() - t0;
    print_message("# session terminated, lock taken: nothing claimed %lld ms later (window 15 s, "
                  "lease 60 s)\n",
                  took);
    assert_int_equal(claimed, 0);
    assert_true(took < 12000);
    char *log = fx_log(f);
    tl_assert_contains(log, "window_given_back");
    tl_assert_contains(log, "leadership lost");
    free(log);
    /* Leading again once the lock is free: everything is delivered. */
    tl_exec(f->db->conn, "SELECT pg_advisory_unlock(" LEADER_LOCK ")");
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 40, 30000, "SELECT 40 - count(*) FROM pgpace.queue"),
        40);
    fx_stop_service(f, 8000);
}

static void window_item_waiting_too_long_goes_back(void **state)
{
    fx *f = *state;
    answer_after(f->recv, "/c/hog", 2000);
    fx_customer(f, "hog", TL_ARGV("--mode", "unlimited", "--rate", "60"));
    fx_enqueue_many(f, "hog", 10);
    /* One connection, busy for 2 s per request; window items may wait 300 ms. */
    fx_run(f, "delivery.max_host_connections = 1\n"
              "dispatcher.lease_seconds = 60\n"
              "dispatcher.claim_ahead_ms = 300\n");
    assert_true(fx_wait_log(f, "window_expired", 10000));
    fx_stop_service(f, 8000);
    /* Given back without an attempt: attempts counted are the requests sent. */
    size_t sent = receiver_count(f->recv, "/c/hog");
    assert_int_equal(q_int(f, CLAIMED), 0);
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.delivery_attempt"), (long long)sent);
    assert_int_equal(q_int(f, "SELECT coalesce(sum(attempt), 0) FROM pgpace.queue") +
                         q_int(f, "SELECT count(*) FROM pgpace.delivery_attempt"),
                     (long long)sent);
}

/* The customer's `replay` carrier fills the window (300 items: 2 connections, 50 ms a request,
 * 15 s of window); a `live` item enqueued then used to wait until half the window had drained
 * (150 requests, about 4 s) and then behind every item claimed before it. Counted in requests,
 * not in time: a busy machine slows both sides alike. */
static void live_carrier_is_not_held_behind_a_replay(void **state)
{
    fx *f = *state;
    answer_after(f->recv, "/c/shop", 50);
    fx_customer(f, "shop", TL_ARGV("--mode", "unlimited", "--rate", "60"));
    tl_exec(f->db->conn, "SELECT count(pgpace.enqueue('shop', jsonb_build_object('n', i), "
                         "carrier => 'replay')) FROM generate_series(1, 600) i");
    fx_run(f, SLOW_HOST_INI);
    /* The host's request time is known and the window has filled. */
    assert_true(receiver_wait(f->recv, "/c/shop", 4, 10000) >= 4);
    long long claimed = tl_wait_query_at_least(f->db->conn, 200, 20000, CLAIMED);
    assert_true(claimed >= 200);

    size_t before = receiver_count(f->recv, "/c/shop");
    long long live = fx_enqueue(f, "shop", "live", 1);
    long long done = tl_wait_query_at_least(f->db->conn, 1, 30000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE item_id = %lld",
                                            live);
    assert_int_equal(done, 1);
    size_t replayed = receiver_count(f->recv, "/c/shop") - before - 1;
    long long left = q_int(f, "SELECT count(*) FROM pgpace.queue WHERE carrier = 'replay'");
    print_message("# live item sent after %zu replay requests (%lld claimed when it was "
                  "enqueued; %lld replay items still queued)\n",
                  replayed, claimed, left);
    /* Sent with the first free connections: those on the wire and a claim round's worth. */
    assert_true(replayed < 50);
    assert_true(left > 0); /* the replay was still going */
    assert_true(receiver_max_concurrent(f->recv, "/c/shop") <= 2);
    fx_stop_service(f, 8000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(claims_run_ahead_of_free_connections, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(batch_ticks_run_beside_pipelined_claims, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(window_goes_back_on_sigterm, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(window_goes_back_when_leadership_is_lost, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(window_item_waiting_too_long_goes_back, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(live_carrier_is_not_held_behind_a_replay, fx_setup,
                                        fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
