/* test_estimate.c - pgpace.estimate_send_time against what a running dispatcher really does,
 * the batch arithmetic, paused customers, the published batch tick, backlog_s, limit windows
 * (a receiver's, its host's, its customer's), and bad input. */
#include "fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The arrival time (receiver clock, us) of the request with webhook-id msg_<id>, or 0. */
static int64_t arrival_of(fx *f, long long id)
{
    char want[64];
    snprintf(want, sizeof want, "msg_%lld", id);
    size_t n = receiver_count(f->recv, NULL);
    int64_t at = 0;
    for (size_t i = 0; i < n && !at; i++) {
        receiver_request rq;
        if (receiver_get(f->recv, i, &rq) != 0)
            break;
        if (strcmp(rq.webhook_id, want) == 0)
            at = rq.at_us;
        free(rq.body);
    }
    return at;
}

typedef struct arrival_wait {
    fx *f;
    long long id;
} arrival_wait;

static int arrived(void *arg)
{
    arrival_wait *w = arg;
    return arrival_of(w->f, w->id) != 0;
}

/* A spaced customer at 120/min with a backlog of 40 and the dispatcher sending: the estimate
 * for a new item is within 10 % of when the receiver got it, both measured from the enqueue. */
static void spaced_estimate_matches_the_send_time(void **state)
{
    fx *f = *state;
    fx_customer(f, "sp", TL_ARGV("--mode", "spaced", "--rate", "120"));
    fx_run(f, NULL);
    /* The leader publishes its batch tick (the fixture's 1000 ms) when it takes the lead. */
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1000, 10000,
                                            "SELECT coalesce(max(batch_tick_ms), 0) FROM "
                                            "pgpace.leader_config"),
                     1000);
    fx_enqueue_many(f, "sp", 41);
    assert_true(receiver_wait(f->recv, "/c/sp", 2, 10000) >= 2); /* it is sending */
    int64_t enq_us = fx_now_us();
    long long est_us = tl_query_int(f->db->conn, "SELECT (extract(epoch FROM "
                                                 "pgpace.estimate_send_time('sp')) * 1e6)::bigint");
    long long id = tl_query_int(f->db->conn, "SELECT pgpace.enqueue('sp', '{\"new\": true}')");
    arrival_wait w = {f, id};
    assert_true(tl_wait_until(arrived, &w, 60000));
    int64_t got_us = arrival_of(f, id);
    double predicted = (double)(est_us - enq_us) / 1e6, actual = (double)(got_us - enq_us) / 1e6;
    print_message("# spaced 120/min, 39 ahead: estimated %.3f s after enqueue, sent after %.3f s "
                  "(%.1f %% off)\n",
                  predicted, actual, 100.0 * fabs(predicted - actual) / actual);
    assert_true(actual > 10.0); /* it did wait for the backlog */
    /* Pacing never sends before its slot, so the send is never more than 10 % earlier than
     * estimated; it may be later on a busy machine (each slot a little late adds up), so the
     * late side holds only what a wrong model would miss (the backlog: 100 %). The accuracy
     * itself is printed above (quiet machine: within a few %), not asserted. */
    assert_true(actual >= 0.9 * predicted);
    assert_true(actual <= 1.5 * predicted);
    /* The HTTP path's own view of it: stats' backlog in seconds, due / rate. */
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT (abs(backlog_seconds - due / 2.0) < 1e-9)::int FROM "
                                  "pgpace.customer_stats WHERE customer = 'sp'"),
                     1);
}

/* Batch: ticks of the published batch_tick_ms, the allowance per tick, the carried fraction and
 * the priority order, computed without a dispatcher (the queue and the frontier as it left
 * them), so the arithmetic is checked exactly. */
static void batch_estimate_counts_ticks(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    fx_customer(f, "bt", TL_ARGV("--mode", "batch", "--rate", "5"));
    tl_exec(c, "INSERT INTO pgpace.leader_config (batch_tick_ms, instance) VALUES (60000, 't')");
    tl_exec(c, "SELECT count(pgpace.enqueue('bt', '{}', run_at => now() - interval '1 minute')) "
               "FROM generate_series(1, 12)");
    /* 12 ahead at 5 per tick: the new item is the 13th, in the third tick from the next
     * minute boundary (ticks are aligned multiples of batch_tick_ms). */
    /* Whole ticks between the estimate and the next minute boundary, for priority `prio`. */
#define TICKS_AFTER_NEXT(prio)                                                                     \
    "SELECT round(extract(epoch FROM pgpace.estimate_send_time('bt', " prio ") - "                 \
    "date_trunc('minute', now()) - interval '1 minute') / 60)::int"
    assert_int_equal(tl_query_int(c, TICKS_AFTER_NEXT("0")), 2);
    assert_int_equal(tl_query_int(c, "SELECT (extract(second FROM "
                                     "pgpace.estimate_send_time('bt')) = 0)::int"),
                     1);
    /* A carried fraction of 0.8 and 3.4 per tick: 13 - 0.8 needs 4 ticks. */
    tl_exec(c, "UPDATE pgpace.customer SET rate_per_minute = 3.4 WHERE name = 'bt'");
    tl_exec(c, "INSERT INTO pgpace.frontier (customer_id, batch_credit) SELECT id, 0.8 FROM "
               "pgpace.customer WHERE name = 'bt'");
    assert_int_equal(tl_query_int(c, TICKS_AFTER_NEXT("0")), 3);
    /* A higher priority has nothing ahead of it: the next tick. */
    assert_int_equal(tl_query_int(c, TICKS_AFTER_NEXT("1")), 0);
    /* The effective rate, when the receiver throttled: 1.7 per tick, 12.2 / 1.7 -> 8 ticks. */
    tl_exec(c, "UPDATE pgpace.frontier SET effective_rate = 1.7");
    assert_int_equal(tl_query_int(c, TICKS_AFTER_NEXT("0")), 7);
    /* backlog_s: 12 due at 1.7 per 60 s tick. */
    assert_int_equal(tl_query_int(c, "SELECT round(backlog_seconds)::int FROM "
                                     "pgpace.customer_stats WHERE customer = 'bt'"),
                     424);
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", f->db->conninfo, "stats", "--customer", "bt"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "backlog_s");
    tl_assert_contains(p.out, "423.5");
    tl_proc_free(&p);
}

/* Paused: NULL (it sends nothing until resumed). An open breaker: not before it closes.
 * Unlimited and idle: now. Spaced and idle with a burst: now, not a period later. */
static void schedule_and_modes(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    fx_customer(f, "ps", TL_ARGV("--mode", "spaced", "--rate", "60"));
    fx_customer(f, "un", TL_ARGV("--mode", "unlimited", "--rate", "1"));
    fx_customer(f, "br", TL_ARGV("--mode", "spaced", "--rate", "60", "--burst", "3"));
    assert_int_equal(tl_query_int(c, "SELECT (pgpace.estimate_send_time('ps') = now())::int"), 1);
    tl_exec(c, "UPDATE pgpace.customer SET paused = true WHERE name = 'ps'");
    assert_int_equal(tl_query_int(c, "SELECT (pgpace.estimate_send_time('ps') IS NULL)::int"), 1);
    assert_int_equal(tl_query_int(c, "SELECT (pgpace.estimate_send_time('un') = now())::int"), 1);
    /* Burst 3, idle: the first three go at once, the fourth a period after. */
    tl_exec(c, "SELECT pgpace.enqueue('br', '{}', run_at => now() - interval '1 s') FROM "
               "generate_series(1, 3)");
    assert_int_equal(tl_query_int(c, "SELECT round(extract(epoch FROM "
                                     "pgpace.estimate_send_time('br') - now()))::int"),
                     1);
    tl_exec(c, "INSERT INTO pgpace.breaker (customer_id, state, open_until) SELECT id, 'open', "
               "now() + interval '30 s' FROM pgpace.customer WHERE name = 'br'");
    assert_int_equal(tl_query_int(c, "SELECT round(extract(epoch FROM "
                                     "pgpace.estimate_send_time('br') - now()))::int"),
                     31);
}

/* A customer with endpoints (0018): an endpoint's estimate counts its own limit and the
 * customer's over all of its endpoints; without an endpoint, the latest of them. */
static void endpoints_count_both_limits(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    char url[256];
    receiver_url(f->recv, "/c/acme/e", url, sizeof url);
    tl_exec(c, "SELECT pgpace.customer_set('acme', rate_per_minute => 60)");
    for (int i = 1; i <= 3; i++)
        tl_exec(c, "SELECT pgpace.endpoint_add('acme', 'e%d', '%s%d', 60)", i, url, i);
    /* 20 events: 20 deliveries queued for each endpoint, 60 for the customer's limit. */
    for (int i = 0; i < 20; i++)
        tl_exec(c, "SELECT pgpace.enqueue('acme', '{}', run_at => now() - interval '1 s')");
    /* e1 alone would send its 21st item in 20 s; the customer's 60/min over the 60 deliveries
     * ahead makes it 60 s. */
    long long one = tl_query_int(c, "SELECT round(extract(epoch FROM "
                                    "pgpace.estimate_send_time('acme', 0, 'e1') - now()))::int");
    /* A new event's three deliveries: the last of them 62 s away. */
    long long all = tl_query_int(c, "SELECT round(extract(epoch FROM "
                                    "pgpace.estimate_send_time('acme') - now()))::int");
    print_message("# 60/min customer, three 60/min endpoints, 20 events queued: one endpoint "
                  "%lld s, a new event at all endpoints %lld s\n",
                  one, all);
    assert_int_equal(one, 60);
    assert_int_equal(all, 62);
    /* A looser customer limit leaves the endpoint's own: 20 s. */
    tl_exec(c, "SELECT pgpace.customer_set('acme', rate_per_minute => 6000)");
    assert_int_equal(tl_query_int(c, "SELECT round(extract(epoch FROM "
                                     "pgpace.estimate_send_time('acme', 0, 'e2') - now()))::int"),
                     20);
    /* A held endpoint has no send time; an unknown one is an error. */
    tl_exec(c, "UPDATE pgpace.customer SET paused = true WHERE name = 'acme/e3'");
    assert_int_equal(
        tl_query_int(c, "SELECT (pgpace.estimate_send_time('acme', 0, 'e3') IS NULL)::int"), 1);
    tl_expect_sql_error(c, "SELECT pgpace.estimate_send_time('acme', 0, 'nope')", "P0002",
                        "customer 'acme' has no endpoint 'nope'", NULL);
}

/* A send `ago` seconds before now of `who` (a customer or an endpoint's full name), as the
 * dispatcher records it; outcome 'released' is a claim given back, never a send. */
static void sent(PGconn *c, const char *who, double ago, const char *outcome)
{
    tl_exec(c,
            "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
            "duration_ms, outcome) SELECT 1, id, 1, now() - %.3f * interval '1 second', 5, '%s' "
            "FROM pgpace.customer WHERE name = '%s'",
            ago, outcome, who);
}

/* Seconds from now to the estimate (rounded) of `call` (e.g. "'w'" or "'tn', 0, 'e1'"). */
static long long estimate_s(PGconn *c, const char *call)
{
    return tl_query_int(c,
                        "SELECT round(extract(epoch FROM pgpace.estimate_send_time(%s) - now()))"
                        "::bigint",
                        call);
}

/* Limit windows (0019): with U sends in a window's last period and k items ahead, the estimate
 * is no earlier than the window allows (pgpace.limits_earliest's rule), exactly, without a
 * dispatcher. A spaced customer at 10/s with a quota of 5 an hour: */
static void windows_hold_the_estimate(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    fx_customer(f, "w", TL_ARGV("--mode", "spaced", "--limit", "10/s,5/h"));
    assert_int_equal(tl_query_int(c, "SELECT (rate_per_minute IS NULL)::int FROM "
                                     "pgpace.customer WHERE name = 'w'"),
                     1);
    sent(c, "w", 3000, "success"); /* 50 min ago */
    sent(c, "w", 2400, "retry");   /* 40 min ago */
    sent(c, "w", 1800, "dead");    /* 30 min ago */
    sent(c, "w", 600, "released"); /* given back: not a send */
    sent(c, "w", 4000, "success"); /* out of the hour */
    /* 3 sends in the hour and nothing ahead: the 4th fits. */
    assert_int_equal(estimate_s(c, "'w'"), 0);
    /* 2 ahead: the new item is the 6th of the hour, so the oldest must leave: 50 min ago + 1 h. */
    tl_exec(c, "SELECT pgpace.enqueue('w', '{}', run_at => now() - interval '1 s') FROM "
               "generate_series(1, 2)");
    assert_int_equal(estimate_s(c, "'w'"), 600);
    /* 8 ahead: the 12th; two rounds back reach the second oldest: 40 min ago + 2 h. */
    tl_exec(c, "SELECT pgpace.enqueue('w', '{}', run_at => now() - interval '1 s') FROM "
               "generate_series(1, 6)");
    assert_int_equal(estimate_s(c, "'w'"), 4800);
    /* 20 ahead: the 24th; five rounds reach before the sends made: four whole hours from now
     * (sends 4 and 5 go now, each later group of 5 an hour after the one before). */
    tl_exec(c, "SELECT pgpace.enqueue('w', '{}', run_at => now() - interval '1 s') FROM "
               "generate_series(1, 12)");
    assert_int_equal(estimate_s(c, "'w'"), 4 * 3600);
    /* The pace alone is the 10/s window's: 20 ahead are 2 s; without the quota that is all. */
    tl_exec(c, "SELECT pgpace.customer_set('w', limits => '{10/s}')");
    assert_int_equal(estimate_s(c, "'w'"), 2);
    /* With a rate too, the slower of the two paces: 60/min, 20 ahead are 20 s. */
    tl_exec(c, "SELECT pgpace.customer_set('w', rate_per_minute => 60)");
    assert_int_equal(estimate_s(c, "'w'"), 20);
}

/* A host's windows (pgpace.host) count every receiver whose URL is on the host; the host's row
 * going takes them away. A customer's windows count over all of its endpoints. */
static void host_and_customer_windows_hold_the_estimate(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    fx_customer(f, "h1", TL_ARGV("--rate", "6000"));
    fx_customer(f, "h2", TL_ARGV("--rate", "6000"));
    char *host = tl_query_str(c, "SELECT substring(webhook_url FROM '://([^/]+)') FROM "
                                 "pgpace.customer WHERE name = 'h1'");
    tl_exec(c, "SELECT pgpace.host_set('%s', '{2/min}')", host);
    sent(c, "h2", 30, "success");
    assert_int_equal(estimate_s(c, "'h1'"), 0); /* one send of two in the minute */
    sent(c, "h2", 20, "success");
    /* h2's two sends fill the host's minute: h1 waits for the older to leave. */
    assert_int_equal(estimate_s(c, "'h1'"), 30);
    tl_exec(c, "SELECT pgpace.host_delete('%s')", host);
    assert_int_equal(estimate_s(c, "'h1'"), 0);
    free(host);

    /* A customer with only windows (2 a minute over both of its endpoints) and two fast
     * endpoints, each of which sent once. */
    char url[256];
    receiver_url(f->recv, "/c/tn/e", url, sizeof url);
    tl_exec(c, "SELECT pgpace.customer_set('tn', limits => '{2/min}')");
    tl_exec(c, "SELECT pgpace.endpoint_add('tn', 'e1', '%s1', 6000)", url);
    tl_exec(c, "SELECT pgpace.endpoint_add('tn', 'e2', '%s2', 6000)", url);
    sent(c, "tn/e1", 50, "success");
    sent(c, "tn/e2", 40, "success");
    /* e1's delivery: its own limit lets it go now; the customer's minute is full until the
     * send of 50 s ago leaves it. */
    assert_int_equal(estimate_s(c, "'tn', 0, 'e1'"), 10);
    /* A new event's two deliveries: the second waits for the send of 40 s ago to leave (20 s),
     * and the customer's pace of 2 a minute spaces the two by 30 s: 30 s. */
    assert_int_equal(estimate_s(c, "'tn'"), 30);
}

/* Bad input: a SQLSTATE naming the field; producers may ask (it reveals no payload). */
static void bad_input_and_producers(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    static const struct {
        const char *call, *state, *msg;
    } cases[] = {
        {"pgpace.estimate_send_time(NULL)", "22004", "customer must not be null"},
        {"pgpace.estimate_send_time('ghost')", "23503", "unknown customer 'ghost'"},
        {"pgpace.estimate_send_time('acme', 40000)", "22023",
         "priority must be between -32768 and 32767, got 40000"},
        {"pgpace.estimate_send_time('acme', NULL)", "22023", "priority must be between"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char q[256];
        snprintf(q, sizeof q, "SELECT %s", cases[i].call);
        PGresult *res = PQexec(f->db->conn, q);
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (PQresultStatus(res) != PGRES_FATAL_ERROR || !st || strcmp(st, cases[i].state) != 0 ||
            !strstr(PQresultErrorMessage(res), cases[i].msg))
            fail_msg("%s: expected %s %s, got %s %s", cases[i].call, cases[i].state, cases[i].msg,
                     st ? st : "-", PQresultErrorMessage(res));
        PQclear(res);
    }
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT has_function_privilege('pgpace_producer', "
                                  "'pgpace.estimate_send_time(text, integer)', 'EXECUTE')::int"),
                     1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(spaced_estimate_matches_the_send_time, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(batch_estimate_counts_ticks, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(schedule_and_modes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(bad_input_and_producers, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(endpoints_count_both_limits, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(windows_hold_the_estimate, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(host_and_customer_windows_hold_the_estimate, fx_setup,
                                        fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
