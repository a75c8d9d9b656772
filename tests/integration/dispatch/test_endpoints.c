/* test_endpoints.c - a customer with several endpoints (migration 0018), delivered by a running
 * dispatcher to real receivers:
 * - one event reaches every endpoint whose subscription and payload filter match, with the same
 *   webhook-id and body on each, signed with each endpoint's own secret;
 * - the customer's rate is a limit over all of its endpoints: 60/min over three endpoints of
 *   60/min each sends 60/min in all (never 180), every gap between two of the customer's sends at
 *   least its period, and the endpoints take turns at it;
 * - an endpoint's own rate (the receiver's) holds beneath a looser customer limit;
 * - one failing endpoint does not hold back the customer's other endpoints;
 * - a customer with 50 endpoints on a shared host gets a customer's share of it beside a
 *   customer with one, not 50 shares.
 * Limits are judged on the dispatcher's own send record (delivery_attempt.started_at), which is
 * what a limit bounds; deliveries are judged at the receivers. Speeds are loose floors: a busy
 * machine sends late, never early. */
#include "fixture.h"
#include "receiver.h"
#include "testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET_A "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define SECRET_B "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"

/* Adds endpoint `name` of `customer` with its receiver path /c/<customer>/<name>. `extra` is SQL
 * for further named arguments of pgpace.endpoint_add (", mode => 'unlimited'") or "". */
static void endpoint(fx *f, receiver *r, const char *customer, const char *name, double rate,
                     const char *extra)
{
    char url[256], path[160];
    snprintf(path, sizeof path, "/c/%s/%s", customer, name);
    receiver_url(r, path, url, sizeof url);
    tl_exec(f->db->conn, "SELECT pgpace.endpoint_add('%s', '%s', '%s', %g%s)", customer, name, url,
            rate, extra);
}

/* The customer's sends (all of its endpoints), in order: started_at in epoch microseconds. */
static int64_t *customer_sends(fx *f, const char *customer, size_t *n)
{
    PGresult *res = PQexecParams(
        f->db->conn,
        "SELECT (extract(epoch FROM a.started_at) * 1e6)::bigint FROM pgpace.delivery_attempt a"
        "  JOIN pgpace.customer c ON c.id = a.customer_id"
        " WHERE c.name = $1 OR c.parent_id = (SELECT id FROM pgpace.customer WHERE name = $1)"
        " ORDER BY a.started_at",
        1, NULL, (const char *const[]){customer}, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    *n = (size_t)PQntuples(res);
    int64_t *v = calloc(*n + 1, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < *n; i++)
        v[i] = atoll(PQgetvalue(res, (int)i, 0));
    PQclear(res);
    return v;
}

/* The most sends of the list within any window of `window_us`. */
static size_t most_in_window(const int64_t *v, size_t n, int64_t window_us)
{
    size_t best = 0, lo = 0;
    for (size_t hi = 0; hi < n; hi++) {
        while (v[hi] - v[lo] >= window_us)
            lo++;
        if (hi - lo + 1 > best)
            best = hi - lo + 1;
    }
    return best;
}

static void one_event_reaches_every_matching_endpoint(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('shop', rate_per_minute => 6000)");
    endpoint(f, f->recv, "shop", "crm", 6000,
             ", signing_secrets => ARRAY['" SECRET_A "'], event_types => ARRAY['order.*']");
    endpoint(f, f->recv, "shop", "billing", 6000,
             ", signing_secrets => ARRAY['" SECRET_B "'], event_types => ARRAY['invoice.paid',"
             " 'order.created']");
    endpoint(f, f->recv, "shop", "eu", 6000, ", payload_filter => '{\"region\": \"eu\"}'");
    endpoint(f, f->recv, "shop", "all", 6000, "");

    /* order.created reaches crm, billing and all; eu only with region eu. */
    long long ev1 = tl_query_int(f->db->conn, "SELECT pgpace.enqueue('shop', '{\"n\": 1, "
                                              "\"region\": \"eu\"}', kind => 'order.created')");
    long long ev2 = tl_query_int(f->db->conn, "SELECT pgpace.enqueue('shop', '{\"n\": 2, "
                                              "\"region\": \"us\"}', kind => 'invoice.paid')");
    long long ev3 = tl_query_int(f->db->conn,
                                 "SELECT pgpace.enqueue('shop', '{\"n\": 3}', kind => 'user.new')");
    /* The payload is stored once, on the event; its deliveries point at it. */
    assert_int_equal(
        tl_query_int(f->db->conn, "SELECT fanout FROM pgpace.item WHERE id = %lld", ev1), 4);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.item WHERE event_id = %lld "
                                  "AND payload IS NULL",
                                  ev1),
                     4);
    assert_int_equal(
        tl_query_int(f->db->conn, "SELECT fanout FROM pgpace.item WHERE id = %lld", ev2), 2);
    assert_int_equal(
        tl_query_int(f->db->conn, "SELECT fanout FROM pgpace.item WHERE id = %lld", ev3), 1);

    fx_run(f, NULL);
    assert_int_equal(receiver_wait(f->recv, "/c/shop/", 7, 20000), 7);
    /* Nothing more comes. */
    assert_int_equal(receiver_wait(f->recv, "/c/shop/", 8, 1000), 7);
    assert_int_equal(receiver_count(f->recv, "/c/shop/crm"), 1);
    assert_int_equal(receiver_count(f->recv, "/c/shop/billing"), 2);
    assert_int_equal(receiver_count(f->recv, "/c/shop/eu"), 1);
    assert_int_equal(receiver_count(f->recv, "/c/shop/all"), 3);

    /* Every delivery of event 1: the same webhook-id and body, each endpoint's own signature. */
    char want_id[40];
    snprintf(want_id, sizeof want_id, "msg_%lld", ev1);
    size_t total = receiver_count(f->recv, NULL), same = 0;
    for (size_t i = 0; i < total; i++) {
        receiver_request q;
        assert_int_equal(receiver_get(f->recv, i, &q), 0);
        if (strcmp(q.webhook_id, want_id) == 0) {
            same++;
            assert_non_null(strstr(q.body, "\"n\": 1"));
            if (strncmp(q.path, "/c/shop/crm", 11) == 0)
                assert_int_equal(tl_verify_signature(SECRET_A, q.webhook_id, q.webhook_timestamp,
                                                     q.body, q.webhook_signature),
                                 1);
            if (strncmp(q.path, "/c/shop/billing", 15) == 0)
                assert_int_equal(tl_verify_signature(SECRET_B, q.webhook_id, q.webhook_timestamp,
                                                     q.body, q.webhook_signature),
                                 1);
        }
        free(q.body);
    }
    assert_int_equal(same, 4);
}

/* The case: a customer of 60/min with three endpoints of 60/min each. */
static void customer_limit_is_shared_by_its_endpoints(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('acme', rate_per_minute => 60)");
    const char *names[] = {"e1", "e2", "e3"};
    for (int i = 0; i < 3; i++)
        endpoint(f, f->recv, "acme", names[i], 60, "");
    for (int i = 0; i < 20; i++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": %d}')", i);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.queue"), 60);

    fx_run(f, NULL);
    /* At 60/min in all, 12 sends take 11 s; at the endpoints' 180/min they would take under 4. */
    assert_int_equal(receiver_wait(f->recv, "/c/acme/", 12, 30000), 12);
    /* Attempts are written in batches after their answers. */
    assert_true(tl_wait_query_at_least(f->db->conn, 12, 10000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt") >= 12);
    size_t n = 0;
    int64_t *sends = customer_sends(f, "acme", &n);
    assert_true(n >= 12);
    int64_t min_gap = INT64_MAX;
    for (size_t i = 1; i < n; i++)
        if (sends[i] - sends[i - 1] < min_gap)
            min_gap = sends[i] - sends[i - 1];
    size_t per_minute = most_in_window(sends, n, 60000000);
    size_t per_10s = most_in_window(sends, n, 10000000);
    print_message("# %zu sends; shortest gap between two of the customer's sends %.3f s (period "
                  "1 s); most in any 10 s: %zu; e1 %zu e2 %zu e3 %zu\n",
                  n, (double)min_gap / 1e6, per_10s, receiver_count(f->recv, "/c/acme/e1"),
                  receiver_count(f->recv, "/c/acme/e2"), receiver_count(f->recv, "/c/acme/e3"));
    /* The guarantee: no two of the customer's sends closer than its period (burst 1), so never
     * more than 10 in 10 s nor 60 in a minute, whatever the endpoints' own limits allow. */
    assert_true(min_gap >= 1000000 - 1);
    assert_true(per_10s <= 10);
    assert_true(per_minute <= 60);
    /* The endpoints take turns at the shared limit: each of them got sends. */
    for (int i = 0; i < 3; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "/c/acme/%s", names[i]);
        assert_true(receiver_count(f->recv, prefix) >= 2);
    }
    free(sends);
}

/* The customer's limit binds endpoints of every mode: a batch endpoint whose tick would send 50
 * at once and an unlimited one, under a customer of 120/min, send 120/min between them, every
 * gap at least half a second. */
static void customer_limit_binds_batch_and_unlimited_endpoints(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('mix', rate_per_minute => 120)");
    endpoint(f, f->recv, "mix", "bulk", 3000, ", mode => 'batch'");
    endpoint(f, f->recv, "mix", "queue", 60, ", mode => 'unlimited'");
    for (int i = 0; i < 20; i++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('mix', '{\"n\": %d}')", i);
    fx_run(f, NULL);
    assert_int_equal(receiver_wait(f->recv, "/c/mix/", 12, 30000), 12);
    assert_true(tl_wait_query_at_least(f->db->conn, 12, 10000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt") >= 12);
    size_t n = 0;
    int64_t *sends = customer_sends(f, "mix", &n);
    int64_t min_gap = INT64_MAX;
    for (size_t i = 1; i < n; i++)
        if (sends[i] - sends[i - 1] < min_gap)
            min_gap = sends[i] - sends[i - 1];
    print_message("# batch and unlimited endpoints under 120/min: %zu sends, shortest gap %.3f s, "
                  "most in any 5 s: %zu; batch %zu, unlimited %zu\n",
                  n, (double)min_gap / 1e6, most_in_window(sends, n, 5000000),
                  receiver_count(f->recv, "/c/mix/bulk"), receiver_count(f->recv, "/c/mix/queue"));
    assert_true(min_gap >= 500000 - 1);
    assert_true(most_in_window(sends, n, 5000000) <= 10);
    assert_true(receiver_count(f->recv, "/c/mix/bulk") >= 2);
    assert_true(receiver_count(f->recv, "/c/mix/queue") >= 2);
    free(sends);
}

/* A customer made before endpoints (its own receiver, "default") that gains an endpoint: both
 * get every event, and its rate is now the limit over the two. */
static void own_receiver_shares_the_limit_with_a_new_endpoint(void **state)
{
    fx *f = *state;
    fx_customer(f, "old", TL_ARGV("--rate", "120"));
    long long before = tl_query_int(f->db->conn, "SELECT pgpace.enqueue('old', '{\"n\": 0}')");
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.item WHERE id = %lld AND payload "
                                  "IS NOT NULL AND event_id IS NULL",
                                  before),
                     1);
    endpoint(f, f->recv, "old", "new", 6000, "");
    for (int i = 1; i <= 5; i++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('old', '{\"n\": %d}')", i);
    fx_run(f, NULL);
    /* The item from before plus five events to each of the two. */
    assert_int_equal(receiver_wait(f->recv, "/c/old", 11, 30000), 11);
    assert_int_equal(receiver_count(f->recv, "/c/old/new"), 5);
    assert_true(tl_wait_query_at_least(f->db->conn, 11, 10000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt") >= 11);
    size_t n = 0;
    int64_t *sends = customer_sends(f, "old", &n);
    int64_t min_gap = INT64_MAX;
    for (size_t i = 1; i < n; i++)
        if (sends[i] - sends[i - 1] < min_gap)
            min_gap = sends[i] - sends[i - 1];
    print_message("# own receiver and a new endpoint under 120/min: %zu sends, shortest gap %.3f "
                  "s\n",
                  n, (double)min_gap / 1e6);
    assert_int_equal(n, 11);
    assert_true(min_gap >= 500000 - 1);
    free(sends);
}

/* A looser customer limit leaves each endpoint at its own (the receiver's) limit. */
static void endpoint_limit_holds_beneath_the_customer_limit(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('wide', rate_per_minute => 6000)");
    endpoint(f, f->recv, "wide", "slow", 120, "");
    endpoint(f, f->recv, "wide", "fast", 6000, ", mode => 'unlimited'");
    for (int i = 0; i < 12; i++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('wide', '{\"n\": %d}')", i);
    fx_run(f, NULL);
    assert_int_equal(receiver_wait(f->recv, "/c/wide/fast", 12, 20000), 12);
    assert_int_equal(receiver_wait(f->recv, "/c/wide/slow", 8, 20000), 8);
    assert_true(tl_wait_query_at_least(f->db->conn, 20, 10000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt") >= 20);
    long long gaps = 0;
    long long min_gap = tl_min_send_gap_us(f->db->conn, "wide/slow", &gaps);
    print_message("# slow endpoint (120/min): shortest gap %.3f s over %lld gaps\n",
                  (double)min_gap / 1e6, gaps);
    assert_true(gaps >= 7);
    /* Its own spaced slots, sent as every spaced customer's are: to the millisecond (the
     * slot timer's resolution; the customer's shared limit below is kept to the microsecond). */
    assert_true(min_gap >= 500000 - 1000);
    /* The customer's limit (6000/min: 10 ms) held across both. */
    size_t n = 0;
    int64_t *sends = customer_sends(f, "wide", &n);
    for (size_t i = 1; i < n; i++)
        assert_true(sends[i] - sends[i - 1] >= 10000 - 1);
    free(sends);
}

/* One endpoint failing every request beside two healthy ones of the same customer. */
static void failing_endpoint_does_not_hold_back_the_others(void **state)
{
    fx *f = *state;
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/mixed/down",
                                          .action = RECV_RESPOND,
                                          .status = 500,
                                          .body = "down"});
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('mixed', rate_per_minute => 1200)");
    endpoint(f, f->recv, "mixed", "down", 600, "");
    endpoint(f, f->recv, "mixed", "up1", 600, "");
    endpoint(f, f->recv, "mixed", "up2", 600, "");
    for (int i = 0; i < 15; i++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('mixed', '{\"n\": %d}')", i);
    fx_run(f, "delivery.breaker_failures = 3\n");
    /* 30 healthy deliveries at the customer's 1,200/min take 1.5 s; the failing endpoint's
     * retries back off and its breaker opens, and neither keeps the others waiting. */
    assert_int_equal(receiver_wait(f->recv, "/c/mixed/up1", 15, 20000), 15);
    assert_int_equal(receiver_wait(f->recv, "/c/mixed/up2", 15, 20000), 15);
    assert_true(receiver_count(f->recv, "/c/mixed/down") >= 1);
    assert_int_equal(receiver_count_status(f->recv, "/c/mixed/up", 200), 30);
    /* The healthy ones' deliveries are done (their outcomes are written in batches after the
     * answers), the failing one's still queued (retrying). */
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT (count(*) = 0)::int FROM pgpace.queue q JOIN "
                                            "pgpace.customer c ON c.id = q.customer_id WHERE "
                                            "c.name LIKE 'mixed/up%%'"),
                     1);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer c "
                                  "ON c.id = q.customer_id WHERE c.name = 'mixed/down'"),
                     15);
}

/* Customer "many" has 50 work-queue endpoints on one slow host, customer "one" a single one on
 * the same host; the host's connections are what they share. */
static void many_endpoints_get_a_customers_share_of_a_host(void **state)
{
    fx *f = *state;
    receiver_on(f->recv,
                &(receiver_rule){
                    .path_prefix = "/c/", .action = RECV_RESPOND, .status = 200, .delay_ms = 50});
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('many')");
    for (int i = 0; i < 50; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%02d", i);
        endpoint(f, f->recv, "many", name, 60, ", mode => 'unlimited'");
    }
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('one')");
    endpoint(f, f->recv, "one", "only", 60, ", mode => 'unlimited'");
    /* 60 events of "many" are 3,000 deliveries; 1,500 of "one". */
    tl_exec(f->db->conn, "SELECT count(pgpace.enqueue('many', jsonb_build_object('n', g))) "
                         "FROM generate_series(1, 60) g");
    tl_exec(f->db->conn, "SELECT count(pgpace.enqueue('one', jsonb_build_object('n', g))) "
                         "FROM generate_series(1, 1500) g");
    fx_run(f, "delivery.max_host_connections = 8\n");
    /* Both busy for a while: then count who got what. */
    assert_true(receiver_wait(f->recv, "/c/", 400, 60000) >= 400);
    int64_t from = fx_now_us();
    size_t one0 = receiver_count(f->recv, "/c/one/"), many0 = receiver_count(f->recv, "/c/many/");
    assert_true(receiver_wait(f->recv, "/c/", one0 + many0 + 600, 60000) >= one0 + many0 + 600);
    size_t one = receiver_count(f->recv, "/c/one/") - one0;
    size_t many = receiver_count(f->recv, "/c/many/") - many0;
    double share = (double)one / (double)(one + many);
    print_message("# over %.1f s: customer with one endpoint %zu requests, customer with 50 "
                  "endpoints %zu (share of the one: %.2f; 50 shares against 1 would be 0.02)\n",
                  (double)(fx_now_us() - from) / 1e6, one, many, share);
    /* A customer's share is a half here; 50 endpoints counted as 50 customers would leave the
     * single one 1/51. */
    assert_true(share >= 0.3);
    assert_true(many > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(one_event_reaches_every_matching_endpoint, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(customer_limit_is_shared_by_its_endpoints, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(customer_limit_binds_batch_and_unlimited_endpoints,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(own_receiver_shares_the_limit_with_a_new_endpoint, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(endpoint_limit_holds_beneath_the_customer_limit, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(failing_endpoint_does_not_hold_back_the_others, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(many_endpoints_get_a_customers_share_of_a_host, fx_setup,
                                        fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
