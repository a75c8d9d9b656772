/* test_delivery.c - webhook delivery through the running dispatcher: Standard Webhooks headers
 * and signatures (checked by an independent verifier), secret rotation, the circuit breaker,
 * bad receivers not disturbing other customers, SSRF refusals, and logs without payloads or
 * secrets. */
#include "fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int teardown(void **state)
{
    fx_finish(*state);
    return 0;
}

static int setup(void **state)
{
    *state = fx_start();
    return 0;
}

static void signed_webhooks_with_rotation(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    fx_run(f, NULL);
    long long id = fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 10000), 1);

    /* Rotate: the new secret signs first, the old one still signs until retired. */
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--rotate-secret"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_true(fx_wait_log(f, "event=customer_updated", 5000));
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 2, 10000), 2);

    char *newest = tl_query_str(f->db->conn,
                                "SELECT signing_secrets[1] FROM pgpace.customer WHERE name='acme'");
    char *oldest = tl_query_str(f->db->conn,
                                "SELECT signing_secrets[2] FROM pgpace.customer WHERE name='acme'");
    receiver_request rq;
    assert_int_equal(receiver_get(f->recv, 0, &rq), 0);
    char expected_id[40];
    snprintf(expected_id, sizeof expected_id, "msg_%lld", id);
    assert_string_equal(rq.webhook_id, expected_id);
    assert_string_equal(rq.content_type, "application/json");
    tl_assert_contains(rq.user_agent, "pgpace/");
    assert_true(tl_verify_signature(oldest, rq.webhook_id, rq.webhook_timestamp, rq.body,
                                    rq.webhook_signature));
    assert_false(tl_verify_signature(newest, rq.webhook_id, rq.webhook_timestamp, rq.body,
                                     rq.webhook_signature));
    /* Timestamp within a minute of now. */
    long long ts = atoll(rq.webhook_timestamp);
    assert_true(llabs(ts - (long long)time(NULL)) < 60);
    free(rq.body);

    assert_int_equal(receiver_get(f->recv, 1, &rq), 0);
    assert_non_null(strchr(rq.webhook_signature, ' ')); /* two signatures */
    assert_true(tl_verify_signature(newest, rq.webhook_id, rq.webhook_timestamp, rq.body,
                                    rq.webhook_signature));
    assert_true(tl_verify_signature(oldest, rq.webhook_id, rq.webhook_timestamp, rq.body,
                                    rq.webhook_signature));
    /* A tampered body does not verify. */
    assert_false(tl_verify_signature(newest, rq.webhook_id, rq.webhook_timestamp, "{\"n\": 9}",
                                     rq.webhook_signature));
    free(rq.body);
    free(newest);
    free(oldest);
    fx_stop_service(f, 15000);
}

static void webhook_id_is_stable_across_retries(void **state)
{
    fx *f = *state;
    fx_customer(f, "flaky", TL_ARGV("--rate", "600"));
    receiver_rule fail_twice = {
        .path_prefix = "/c/flaky", .action = RECV_RESPOND, .status = 503, .times = 2};
    receiver_on(f->recv, &fail_twice);
    fx_run(f, NULL);
    fx_enqueue(f, "flaky", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/flaky", 3, 15000), 3);
    receiver_request a, b, c;
    assert_int_equal(receiver_get(f->recv, 0, &a), 0);
    assert_int_equal(receiver_get(f->recv, 1, &b), 0);
    assert_int_equal(receiver_get(f->recv, 2, &c), 0);
    assert_string_equal(a.webhook_id, b.webhook_id);
    assert_string_equal(a.webhook_id, c.webhook_id);
    free(a.body);
    free(b.body);
    free(c.body);
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 5000, "SELECT -count(*) FROM pgpace.queue"), 0);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt "
                                               "WHERE outcome = 'retry' AND http_status = 503"),
                     2);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt "
                                               "WHERE outcome = 'success'"),
                     1);
    fx_stop_service(f, 15000);
}

static void breaker_opens_probes_and_closes(void **state)
{
    fx *f = *state;
    fx_customer(f, "down", TL_ARGV("--rate", "6000", "--max-attempts", "50"));
    /* Four failures: three open the breaker, the fourth is the half-open probe, which fails
     * and reopens it with the cooldown doubled; the fifth (second probe) succeeds. */
    receiver_rule fail = {
        .path_prefix = "/c/down", .action = RECV_RESPOND, .status = 500, .times = 4};
    receiver_on(f->recv, &fail);
    fx_run(f, "delivery.breaker_failures = 3\ndelivery.breaker_cooldown_ms = 1000\n"
              "delivery.breaker_cooldown_max_ms = 8000\ndispatcher.retry_base_ms = 20\n"
              "dispatcher.retry_cap_ms = 50\n");
    fx_enqueue(f, "down", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/down", 3, 10000), 3);
    assert_true(fx_wait_log(f, "event=breaker_opened", 5000));
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 5000,
                                            "SELECT count(*) FROM pgpace.breaker WHERE state = "
                                            "'open'"),
                     1);
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "stats"), NULL, NULL);
    tl_assert_contains(p.out, "open until");
    tl_proc_free(&p);

    assert_int_equal(receiver_wait(f->recv, "/c/down", 5, 20000), 5);
    receiver_request r[5];
    for (int i = 0; i < 5; i++)
        assert_int_equal(receiver_get(f->recv, (size_t)i, &r[i]), 0);
    long long gap_probe = (r[3].at_us - r[2].at_us) / 1000;
    long long gap_second = (r[4].at_us - r[3].at_us) / 1000;
    print_message("# breaker: first cooldown %lld ms (configured 1000), second %lld ms (2000)\n",
                  gap_probe, gap_second);
    assert_true(gap_probe >= 950);
    assert_true(gap_second >= 1950);
    for (int i = 0; i < 5; i++)
        free(r[i].body);
    assert_true(fx_wait_log(f, "event=breaker_closed", 5000));
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 5000,
                                            "SELECT count(*) FROM pgpace.breaker WHERE state = "
                                            "'closed'"),
                     1);
    char *log = fx_log(f);
    tl_assert_contains(log, "event=breaker_half_open");
    /* Opened twice: at the third failure and when the first probe failed. */
    assert_non_null(strstr(strstr(log, "event=breaker_opened") + 1, "event=breaker_opened"));
    free(log);
    fx_stop_service(f, 15000);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* |gap - period| over consecutive arrivals under `prefix`, sorted ascending into a new array
 * (*n_gaps entries; the caller frees it). *count is the number of arrivals. */
static int64_t *gap_errors_us(receiver *recv, const char *prefix, int64_t period_us, size_t *count,
                              size_t *n_gaps)
{
    size_t total = receiver_count(recv, NULL);
    int64_t *err = calloc(total + 1, sizeof *err);
    assert_non_null(err);
    int64_t prev = 0;
    *count = 0;
    *n_gaps = 0;
    for (size_t i = 0; i < total; i++) {
        receiver_request rq;
        if (receiver_get(recv, i, &rq) != 0)
            break;
        if (strncmp(rq.path, prefix, strlen(prefix)) == 0) {
            if (prev)
                err[(*n_gaps)++] = llabs(rq.at_us - prev - period_us);
            prev = rq.at_us;
            (*count)++;
        }
        free(rq.body);
    }
    qsort(err, *n_gaps, sizeof *err, cmp_i64);
    return err;
}

static void bad_receivers_do_not_disturb_others(void **state)
{
    fx *f = *state;
    fx_customer(f, "good", TL_ARGV("--rate", "600"));
    /* The bad receivers live on another host:port, as separate tenants' endpoints would: curl
     * limits connections per host, and this test is about the event loop, not a shared host. */
    receiver *badhost = receiver_start();
    assert_non_null(badhost);
    const char *bad[] = {"hang", "reset", "garbage", "trickle", "refused"};
    receiver_action actions[] = {RECV_HANG, RECV_RESET, RECV_GARBAGE, RECV_TRICKLE_HUGE};
    for (size_t i = 0; i < 4; i++) {
        char prefix[32], url[128];
        snprintf(prefix, sizeof prefix, "/c/%s", bad[i]);
        receiver_rule rule = {.path_prefix = prefix, .action = actions[i]};
        receiver_on(badhost, &rule);
        receiver_url(badhost, prefix, url, sizeof url);
        tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", bad[i], "--url",
                                      url, "--mode", "unlimited", "--rate", "1", "--max-attempts",
                                      "2", "--request-timeout-ms", "1000"),
                              NULL, NULL);
        assert_int_equal(p.status, 0);
        tl_proc_free(&p);
    }
    /* A port nothing listens on: connection refused. */
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "refused", "--mode",
                                  "unlimited", "--rate", "1", "--max-attempts", "2", "--url",
                                  "http://127.0.0.1:1/c/refused"),
                          NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    fx_enqueue(f, "good", NULL, 60);
    for (size_t i = 0; i < 5; i++)
        fx_enqueue(f, bad[i], NULL, 20);
    fx_run(f, "delivery.breaker_failures = 1000\ndelivery.max_response_bytes = 65536\n");

    assert_int_equal(receiver_wait(f->recv, "/c/good", 50, 20000), 50);
    size_t n = 0, n_gaps = 0;
    int64_t *err = gap_errors_us(f->recv, "/c/good", 100000, &n, &n_gaps);
    assert_true(n_gaps > 10);
    int64_t p50 = err[n_gaps / 2], p90 = err[n_gaps * 9 / 10], worst = err[n_gaps - 1];
    free(err);
    print_message("# good customer beside 5 bad receivers: %zu webhooks, |gap - 100 ms| p50 "
                  "%.1f ms p90 %.1f ms worst %.1f ms\n",
                  n, (double)p50 / 1000.0, (double)p90 / 1000.0, (double)worst / 1000.0);
    /* The loop stayed responsive. A loop blocked by a bad peer shows as a gap off by that
     * peer's request timeout (1 s); arrivals also carry the receiver thread's wake-up, which
     * a loaded 2-core machine can delay by tens of ms, sometimes more, so each bound sits at
     * most halfway to that second (quiet machine: worst ~2-5 ms). */
    assert_true(p50 < 50000);
    assert_true(p90 < 250000);
    assert_true(worst < 500000);

    /* Each bad receiver's items ended the right way, with a clear error class. */
    struct {
        const char *customer, *error_class;
    } want[] = {
        {"hang", "timeout"}, {"reset", "reset"}, {"garbage", "protocol"}, {"refused", "connect"}};
    for (size_t i = 0; i < 4; i++) {
        long long got = tl_wait_query_at_least(
            f->db->conn, 1, 15000,
            "SELECT count(*) FROM pgpace.delivery_attempt a JOIN pgpace.customer c ON c.id = "
            "a.customer_id WHERE c.name = '%s' AND a.error_class = '%s'",
            want[i].customer, want[i].error_class);
        if (got < 1)
            fail_msg("no attempt of %s ended with error class %s", want[i].customer,
                     want[i].error_class);
    }
    /* A huge trickled body is read up to the cap: the 200 status counts, no timeout. */
    assert_true(tl_wait_query_at_least(f->db->conn, 1, 15000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                       "pgpace.customer c ON c.id = a.customer_id WHERE c.name = "
                                       "'trickle' AND a.outcome = 'success'") >= 1);
    fx_stop_service(f, 20000);
    receiver_stop(badhost);
}

static void refused_destinations_are_permanent(void **state)
{
    fx *f = *state;
    fx_customer(f, "inside", TL_ARGV("--rate", "600"));
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "byname", "--rate",
                                  "600", "--url", "http://localhost:9/hook"),
                          NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    fx_enqueue(f, "inside", NULL, 1);
    fx_enqueue(f, "byname", NULL, 1);
    /* No allow-list: loopback is refused, by literal address and by a name resolving to it. */
    fx_run(f, "delivery.allow_cidrs =\n");
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 2, 10000, "SELECT count(*) FROM pgpace.dead_letter"),
        2);
    assert_int_equal(receiver_count(f->recv, NULL), 0);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt "
                                               "WHERE error_class = 'ssrf' AND outcome = 'dead'"),
                     2);
    char *reason = tl_query_str(f->db->conn, "SELECT string_agg(last_error, ' | ') FROM "
                                             "pgpace.dead_letter");
    tl_assert_contains(reason, "loopback");
    free(reason);
    fx_stop_service(f, 15000);
}

static void logs_hold_no_payload_or_secret(void **state)
{
    fx *f = *state;
    fx_customer(f, "secretive", TL_ARGV("--rate", "6000"));
    receiver_rule fail_once = {.path_prefix = "/c/secretive",
                               .action = RECV_RESPOND,
                               .status = 500,
                               .body = "receiver says no",
                               .times = 1};
    receiver_on(f->recv, &fail_once);
    fx_run(f, NULL);
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('secretive', "
                         "'{\"card\": \"PAYLOAD-MARKER-4111111111111111\"}')");
    assert_int_equal(receiver_wait(f->recv, "/c/secretive", 2, 10000), 2);
    fx_stop_service(f, 15000);
    char *secret = tl_query_str(f->db->conn, "SELECT signing_secrets[1] FROM pgpace.customer "
                                             "WHERE name = 'secretive'");
    char *log = fx_log(f);
    assert_null(strstr(log, "PAYLOAD-MARKER"));
    assert_null(strstr(log, "4111111111111111"));
    assert_null(strstr(log, secret));
    assert_null(strstr(log, secret + 6));             /* the base64 part alone */
    tl_assert_contains(log, "event=delivery_failed"); /* the log did record the events */
    free(secret);
    free(log);
}

typedef struct all_served {
    receiver *recv;
    int customers;
} all_served;

static int all_have_arrivals(void *arg)
{
    all_served *a = arg;
    for (int i = 0; i < a->customers; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "/c/b%d", i);
        if (receiver_count(a->recv, prefix) == 0)
            return 0;
    }
    return 1;
}

/* When max_in_flight cannot hold every batch allowance of a tick, every customer is still
 * served, not the same ones (in hash order) every tick while the rest get nothing. */
static void batch_ticks_share_a_full_dispatcher(void **state)
{
    fx *f = *state;
    receiver_rule slow = {
        .path_prefix = "/c/b", .action = RECV_RESPOND, .status = 200, .delay_ms = 400};
    receiver_on(f->recv, &slow);
    enum { CUSTOMERS = 10 };
    for (int i = 0; i < CUSTOMERS; i++) {
        char name[16];
        snprintf(name, sizeof name, "b%d", i);
        fx_customer(f, name, TL_ARGV("--mode", "batch", "--rate", "5"));
        fx_enqueue(f, name, NULL, 10);
    }
    fx_run(f, "dispatcher.max_in_flight = 12\ndispatcher.batch_tick_ms = 500\n");
    all_served a = {f->recv, CUSTOMERS};
    int ok = tl_wait_until(all_have_arrivals, &a, 15000);
    for (int i = 0; i < CUSTOMERS; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "/c/b%d", i);
        print_message("# batch customer b%d: %zu webhooks\n", i, receiver_count(f->recv, prefix));
    }
    assert_true(ok);
    fx_stop_service(f, 15000);
}

typedef struct all_done {
    receiver *recv;
    int customers;
    size_t each;
} all_done;

static int all_delivered(void *arg)
{
    all_done *a = arg;
    for (int i = 0; i < a->customers; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "/c/h%d", i);
        if (receiver_count(a->recv, prefix) < a->each)
            return 0;
    }
    return 1;
}

/* Batch customers sharing one receiver host, or one capped carrier, get at the tick only what
 * the host's free connections (or the carrier's cap) allow; the rest of their allowance is owed
 * and claimed as room frees, within the same tick (never more than one allowance per customer
 * per tick), so that none of them starves. `carrier` NULL: the host is the limit (2 connections);
 * else the carrier's max_in_flight of 2 is. */
static void batch_ticks_share_a_bottleneck(fx *f, const char *carrier)
{
    receiver_rule slow = {
        .path_prefix = "/c/h", .action = RECV_RESPOND, .status = 200, .delay_ms = 20};
    receiver_on(f->recv, &slow);
    enum { CUSTOMERS = 6, RATE = 10, EACH = 20 };
    if (carrier)
        tl_exec(f->db->conn, "INSERT INTO pgpace.carrier (name, max_in_flight) VALUES ('%s', 2)",
                carrier);
    for (int i = 0; i < CUSTOMERS; i++) {
        char name[16];
        snprintf(name, sizeof name, "h%d", i);
        fx_customer(f, name, TL_ARGV("--mode", "batch", "--rate", "10"));
        fx_enqueue(f, name, carrier, EACH);
    }
    /* About 100 deliveries a second through the bottleneck for 60 allowed per tick, so each
     * customer's 20 items take its allowance of two ticks. Were the unsent allowance dropped with
     * the tick, they would trickle out over about ten ticks. */
    int64_t start = tl_now_ms();
    fx_run(f, carrier ? "dispatcher.batch_tick_ms = 1000\n"
                      : "dispatcher.batch_tick_ms = 1000\ndelivery.max_host_connections = 2\n");
    all_done a = {f->recv, CUSTOMERS, EACH};
    int ok = tl_wait_until(all_delivered, &a, 30000);
    int64_t took = tl_now_ms() - start;
    for (int i = 0; i < CUSTOMERS; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "/c/h%d", i);
        print_message("# batch customer h%d behind %s: %zu webhooks\n", i,
                      carrier ? "a carrier capped at 2" : "a 2-connection host",
                      receiver_count(f->recv, prefix));
    }
    print_message("# all %d items delivered after %lld ms\n", CUSTOMERS * EACH, (long long)took);
    assert_true(ok);
    long long ticks =
        tl_query_int(f->db->conn, "SELECT max(n) FROM (SELECT customer_id, count(DISTINCT "
                                  "floor(extract(epoch FROM started_at))) AS n "
                                  "FROM pgpace.delivery_attempt GROUP BY 1) x");
    print_message("# most ticks one customer's items were spread over: %lld (allowance: %d)\n",
                  ticks, EACH / RATE);
    assert_true(ticks <= EACH / RATE + 2); /* + a boundary slip and a tick not yet begun */
    /* At most one allowance per customer per tick (by attempt start; the 2 items a claim at
     * the end of a tick can start just after its boundary are the slack). A bug that added
     * the owed items to the next tick's allowance shows up as up to 20 in one second. */
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM (SELECT a.customer_id, "
                                  "floor(extract(epoch FROM a.started_at)) AS tick, "
                                  "count(*) AS n FROM pgpace.delivery_attempt a "
                                  "GROUP BY 1, 2 HAVING count(*) > %d) x",
                                  RATE + 2),
                     0);
    fx_stop_service(f, 15000);
}

static void batch_ticks_share_a_full_host(void **state)
{
    batch_ticks_share_a_bottleneck(*state, NULL);
}

static void batch_ticks_share_a_capped_carrier(void **state)
{
    batch_ticks_share_a_bottleneck(*state, "narrow");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(signed_webhooks_with_rotation, setup, teardown),
        cmocka_unit_test_setup_teardown(webhook_id_is_stable_across_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(breaker_opens_probes_and_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_receivers_do_not_disturb_others, setup, teardown),
        cmocka_unit_test_setup_teardown(refused_destinations_are_permanent, setup, teardown),
        cmocka_unit_test_setup_teardown(logs_hold_no_payload_or_secret, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_ticks_share_a_full_dispatcher, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_ticks_share_a_full_host, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_ticks_share_a_capped_carrier, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
