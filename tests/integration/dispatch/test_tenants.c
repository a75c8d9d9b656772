/* test_tenants.c - many customers on one dispatcher (the figures at 10,000 to 1,000,000 are in
 * bench/RESULTS.md, "Many tenants"; these are the properties, at sizes a test can afford):
 * - more customers due at once than a claim round takes (ROUND_MAX_CUSTOMERS), on hosts with
 *   room: every one is delivered, and none waits more than a bounded number of scheduled rounds
 *   for the round that takes it (pgpace_claim_wait_rounds), the backstop scan finding them in
 *   several slices;
 * - customers waiting for a full host are served in turn: the order in which a one-connection-
 *   short host's customers are sent is the order they became due, within a few places (when a
 *   freed connection woke every customer waiting, any of them could take it);
 * - a change to many customers at once (one UPDATE, a NOTIFY each) is read back in batches, a
 *   deleted one removed, and the new settings apply;
 * - with more customers than [http] metrics_customers, the per-customer gauges of the rest are
 *   summed into customer="_other" exactly, from a queue-gauge pass in several slices.
 * Rows are inserted by SQL (what `pgpace customer set` would do one by one), before the
 * dispatcher starts unless a case says otherwise. */
#include "fixture.h"
#include "receiver.h"
#include "testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw']"

/* n spaced customers t1..tn (rate per minute), their webhooks split over the receivers given
 * (customer i to recv[i % n_recv], path /c/t<i>), paused or not; with one due item each when
 * items is set. */
static void make_customers(fx *f, int n, double rate, receiver **recv, int n_recv, bool paused,
                           bool items)
{
    char base[8][128];
    for (int r = 0; r < n_recv; r++)
        receiver_url(recv[r], "/c/t", base[r], sizeof base[r]);
    char urls[1200] = "ARRAY[";
    for (int r = 0; r < n_recv; r++)
        snprintf(urls + strlen(urls), sizeof urls - strlen(urls), "%s'%s'", r ? "," : "", base[r]);
    strcat(urls, "]");
    tl_exec(
        f->db->conn,
        "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, signing_secrets,"
        " paused) SELECT 't' || g, 'spaced', %g, (%s)[1 + g %% %d] || g, " SECRET ", %s"
        "  FROM generate_series(1, %d) g ORDER BY g",
        rate, urls, n_recv, paused ? "true" : "false", n);
    if (items)
        tl_exec(
            f->db->conn,
            "WITH i AS (INSERT INTO pgpace.item (customer_id, payload)"
            "           SELECT id, '{\"n\": 1}' FROM pgpace.customer ORDER BY id"
            "           RETURNING id, customer_id, run_at)"
            " INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,"
            "                           max_attempts)"
            " SELECT id, customer_id, '', 0, run_at, 12 FROM i");
}

/* 8,000 customers due at once, more than the 4,096 a round takes, spread over eight hosts so
 * that no host's connection limit can bind (1,000 customers a host, each holding at most one
 * delivery and one claim: 2,000 of 4,096): every one is delivered, and the rounds take them in
 * the order they became due, so none waits more than the rounds that take those due before it
 * (one: at most 7,999 are ahead of it, a round takes 4,096), plus one round built before it was
 * due and sent after, plus one for the slices the backstop finds them in. This is a guarantee of
 * the scheduler, whatever the machine's speed. A customer that finds its host full waits for a
 * request to that host to end instead, and how many rounds other hosts' customers make
 * meanwhile depends on how fast the receiver answers: that is measured (bench/ "Many tenants"),
 * not asserted here; the order of such waits is (the next case). */
static void more_due_than_a_round_takes(void **state)
{
    fx *f = *state;
    enum { N = 8000, HOSTS = 8 };
    receiver *recv[HOSTS] = {f->recv};
    for (int r = 1; r < HOSTS; r++)
        recv[r] = receiver_start();
    make_customers(f, N, 60, recv, HOSTS, false, true);
    fx_run(f, "delivery.max_host_connections = 4096\ndelivery.max_connections = 64\n"
              "dispatcher.max_in_flight = 20000\n");
    int64_t deadline = fx_now_us() + 120 * 1000000LL;
    size_t got = 0;
    while (fx_now_us() < deadline) {
        got = 0;
        for (int r = 0; r < HOSTS; r++)
            got += receiver_count(recv[r], "/c/t");
        if (got >= N)
            break;
        receiver_wait(f->recv, "/c/none", 1, 200);
    }
    if (got < N)
        fail_msg("%zu of %d customers delivered in 120 s", got, N);
    /* The scan that found them read more pairs than one slice holds. */
    char *log = fx_log(f);
    const char *pass = strstr(log, "event=backstop_pass ");
    assert_non_null(pass);
    long pairs = atol(strstr(pass, "pairs=") + 6), slices = atol(strstr(pass, "slices=") + 7);
    print_message("# backstop: %ld pairs in %ld slices\n", pairs, slices);
    assert_true(pairs >= N);
    assert_true(slices >= 2);
    free(log);
    /* So did the first queue-gauge pass (customers per slice adapt from 2,000). Its slices are
     * paced by their own duration (nine times it between two), so on a busy machine the pass
     * takes many times its database time: the deadline is generous, the assertion is on what
     * it read. */
    assert_true(fx_wait_log(f, "event=queue_gauges ", 120000));
    log = fx_log(f);
    pass = strstr(log, "event=queue_gauges ");
    long counted = atol(strstr(pass, "customers=") + 10);
    slices = atol(strstr(pass, "slices=") + 7);
    print_message("# queue gauges: %ld customers in %ld slices\n", counted, slices);
    assert_true(counted >= N);
    assert_true(slices >= 2);
    free(log);
    /* Each customer was claimed twice (its item; then a claim that found nothing more), each
     * time observed. */
    char *m = fx_metrics(f);
    double count = fx_metric(m, "pgpace_claim_wait_rounds_count");
    double within = fx_metric(m, "pgpace_claim_wait_rounds_bucket{le=\"3\"}");
    double rounds = fx_metric(m, "pgpace_claim_rounds_total{round=\"scheduled\"}");
    print_message(
        "# %.0f claims of customers in %.0f scheduled rounds; %.0f waited at most 3 rounds"
        " (0: %.0f, 1: %.0f, 2: %.0f)\n",
        count, rounds, within, fx_metric(m, "pgpace_claim_wait_rounds_bucket{le=\"0\"}"),
        fx_metric(m, "pgpace_claim_wait_rounds_bucket{le=\"1\"}"),
        fx_metric(m, "pgpace_claim_wait_rounds_bucket{le=\"2\"}"));
    assert_true(count >= N);
    assert_true(within == count);
    free(m);
    for (int r = 1; r < HOSTS; r++)
        receiver_stop(recv[r]);
}

/* 300 customers due at once on a host of two connections: they wait for it, and it serves them
 * in the order they became due (customer id: the backstop notes them all at once, and ties go to
 * the lower id), none later than a few places behind its turn. The order is the one the
 * dispatcher sent them in (each customer's first delivery_attempt.started_at): the order they
 * reach the receiver also depends on how long each request takes on its connection, and on a
 * busy machine one slow request lets the other connection serve several customers meanwhile
 * (10 places, seen once in three runs beside stress-ng), which says nothing of the turns. */
static void a_full_host_serves_its_waiting_customers_in_turn(void **state)
{
    fx *f = *state;
    enum { N = 300 };
    receiver *recv[] = {f->recv};
    make_customers(f, N, 60, recv, 1, false, true);
    fx_run(f, "delivery.max_host_connections = 2\nlog.level = info\n");
    size_t got = receiver_wait(f->recv, "/c/t", N, 120000);
    if (got < N)
        fail_msg("%zu of %d customers delivered in 120 s", got, N);
    /* Their attempts are recorded once their answers are read. */
    assert_int_equal(tl_wait_query_at_least(f->db->conn, N, 60000,
                                            "SELECT count(DISTINCT customer_id) FROM "
                                            "pgpace.delivery_attempt"),
                     N);
    char *order =
        tl_query_str(f->db->conn, "SELECT string_agg(substr(c.name, 2), ',' ORDER BY a.first, c.id)"
                                  "  FROM (SELECT customer_id, min(started_at) AS first"
                                  "          FROM pgpace.delivery_attempt GROUP BY customer_id) a"
                                  "  JOIN pgpace.customer c ON c.id = a.customer_id");
    /* The rank each customer was sent at, against its own (its id order). */
    int late_max = 0, early_max = 0, worst = 0, rank = 0;
    for (const char *p = order; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        int id = atoi(p);
        rank++;
        int late = rank - id; /* sent after this many that became due after it */
        if (late > late_max) {
            late_max = late;
            worst = id;
        }
        if (-late > early_max)
            early_max = -late;
    }
    free(order);
    print_message("# %d sent, at most %d places late (customer t%d), at most %d early\n", rank,
                  late_max, worst, early_max);
    assert_int_equal(rank, N);
    /* A few places: claims are pipelined two rounds deep (measured under load: at most 6).
     * Waking every waiting customer at each freed connection, the failure this guards, puts
     * customers tens to hundreds of places out of turn. */
    assert_true(late_max <= 20);
}

/* One UPDATE changes 1,500 customers (a NOTIFY each) and one is deleted: they are read back in
 * batches (at most RELOAD_BATCH per statement, one log line for a batch of more than 100), the
 * deleted one is removed, and the new rate applies. */
static void a_change_to_many_customers_is_read_in_batches(void **state)
{
    fx *f = *state;
    enum { N = 1500 };
    receiver *recv[] = {f->recv};
    make_customers(f, N, 60, recv, 1, true, false);
    fx_run(f, "http.metrics_customers = 10000\n");
    assert_true(fx_wait_log(f, "event=customers_loaded customers=1500", 20000));
    assert_true(fx_wait_log(f, "event=leader_elected", 20000));
    tl_exec(f->db->conn, "UPDATE pgpace.customer SET rate_per_minute = 120 WHERE name LIKE 't%%'");
    tl_exec(f->db->conn, "DELETE FROM pgpace.customer WHERE name = 't7'");
    assert_true(fx_wait_log(f, "event=customer_removed customer=t7", 20000));
    /* 1,500 reloads (t7's may find it deleted) in batches: a line for each batch of more than
     * 100 customers (at least one), one per customer of a smaller batch (the first reload goes
     * alone, the rest wait for it). */
    int64_t deadline = fx_now_us() + 20 * 1000000LL;
    long total = 0, lines = 0;
    while (fx_now_us() < deadline) {
        char *log = fx_log(f);
        total = lines = 0;
        for (const char *p = log; (p = strstr(p, "event=customers_updated customers=")) != NULL;
             p++) {
            total += atol(p + strlen("event=customers_updated customers="));
            lines++;
        }
        for (const char *p = log; (p = strstr(p, "event=customer_updated ")) != NULL; p++)
            total++;
        free(log);
        if (total >= N - 1)
            break;
        receiver_wait(f->recv, "/c/none", 1, 100);
    }
    print_message("# %ld customers read back, %ld batch lines\n", total, lines);
    assert_true(total >= N - 1);
    assert_true(lines >= 1);
    /* The new rate is the one paced at (the effective-rate gauge, customers kept in /metrics). */
    char *m = fx_metrics(f);
    assert_true(fx_metric(m, "pgpace_customer_effective_rate{customer=\"t1500\"}") == 120);
    free(m);
}

/* 60 paused customers with 1..60 due items each (customer i has i) and metrics_customers = 5:
 * the five first seen keep their series, and _other of the queue gauge is the sum of the other
 * 55 exactly (60 x 61 / 2 - 15 = 1,815); their effective rates are summed too (55 x 30/min). */
static void other_customers_are_summed_exactly(void **state)
{
    fx *f = *state;
    enum { N = 60 };
    receiver *recv[] = {f->recv};
    make_customers(f, N, 30, recv, 1, true, false);
    tl_exec(f->db->conn, "WITH i AS (INSERT INTO pgpace.item (customer_id, payload)"
                         "           SELECT c.id, '{\"n\": 1}' FROM pgpace.customer c,"
                         "                  generate_series(1, c.id::int) ORDER BY c.id"
                         "           RETURNING id, customer_id, run_at)"
                         " INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority,"
                         "                           next_action_at, max_attempts)"
                         " SELECT id, customer_id, '', 0, run_at, 12 FROM i");
    long long first = tl_query_int(f->db->conn, "SELECT min(id) FROM pgpace.customer");
    assert_int_equal(first, 1); /* customer ti has id i: what the sums below assume */
    fx_run(f, "http.metrics_customers = 5\n");
    assert_true(fx_wait_log(f, "event=queue_gauges customers=60", 20000));
    char *m = fx_metrics(f);
    print_message("# _other due %.0f, effective rate %.0f\n",
                  fx_metric(m, "pgpace_queue_due{customer=\"_other\"}"),
                  fx_metric(m, "pgpace_customer_effective_rate{customer=\"_other\"}"));
    assert_true(fx_metric(m, "pgpace_queue_due{customer=\"t1\"}") == 1);
    assert_true(fx_metric(m, "pgpace_queue_due{customer=\"t5\"}") == 5);
    assert_true(fx_metric(m, "pgpace_queue_due{customer=\"t6\"}") < 0); /* folded */
    assert_true(fx_metric(m, "pgpace_queue_due{customer=\"_other\"}") == 60 * 61 / 2 - 15);
    assert_true(fx_metric(m, "pgpace_queue_in_flight{customer=\"_other\"}") == 0);
    assert_true(fx_metric(m, "pgpace_customer_effective_rate{customer=\"_other\"}") == 55 * 30);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(more_due_than_a_round_takes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(a_full_host_serves_its_waiting_customers_in_turn, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(a_change_to_many_customers_is_read_in_batches, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(other_customers_are_summed_exactly, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
