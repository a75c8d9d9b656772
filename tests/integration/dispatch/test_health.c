/* test_health.c - a customer's health lifecycle through the running dispatcher: failing,
 * breaker open too long, disabled after disable_after (items wait, nothing is sent), enabled
 * again by one command; recovered after a success; paused by 410 Gone and resumed. Every change
 * is an event: a pgpace.event row, a NOTIFY, a log line, a metric, `pgpace events`, and a
 * signed operator webhook (checked by an independent verifier, retried until accepted). */
#include "fixture.h"

#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 24 random bytes, base64: a valid whsec_ secret for the operator webhook. */
#define OPS_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

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

/* The health settings of these tests: a breaker that opens after 2 failures and cools down in
 * 100-200 ms, a disable after 1.5 s of failures and 4 attempts, checked every 200 ms, and the
 * operator webhook on the test receiver's /ops. */
static void run_with_health(fx *f, const char *more)
{
    char url[256], ini[2048];
    receiver_url(f->recv, "/ops", url, sizeof url);
    snprintf(ini, sizeof ini,
             "delivery.breaker_failures = 2\ndelivery.breaker_cooldown_ms = 100\n"
             "delivery.breaker_cooldown_max_ms = 200\ndispatcher.retry_base_ms = 20\n"
             "dispatcher.retry_cap_ms = 50\nhealth.check_interval = 200ms\n"
             "health.disable_min_attempts = 4\nhealth.operator_webhook_url = %s\n"
             "health.operator_webhook_secret = " OPS_SECRET "\n%s",
             url, more ? more : "");
    fx_run(f, ini);
}

static long long events_of(fx *f, const char *customer, const char *kind)
{
    return tl_query_int(f->db->conn,
                        "SELECT count(*) FROM pgpace.event WHERE customer = '%s' AND kind = '%s'",
                        customer, kind);
}

static long long wait_event(fx *f, const char *customer, const char *kind, int timeout_ms)
{
    return tl_wait_query_at_least(
        f->db->conn, 1, timeout_ms,
        "SELECT count(*) FROM pgpace.event WHERE customer = '%s' AND kind = '%s'", customer, kind);
}

/* The operator webhooks received so far whose body is of `type`, each checked: signed with the
 * operator secret, webhook-id evt_<event id>. */
static int ops_posts(fx *f, const char *type)
{
    char needle[96];
    snprintf(needle, sizeof needle, "\"type\": \"%s\"", type);
    int found = 0;
    size_t n = receiver_count(f->recv, NULL);
    for (size_t i = 0; i < n; i++) {
        receiver_request rq;
        if (receiver_get(f->recv, i, &rq) != 0)
            continue;
        if (strncmp(rq.path, "/ops", 4) == 0 && rq.status == 200 && strstr(rq.body, needle)) {
            assert_true(tl_verify_signature(OPS_SECRET, rq.webhook_id, rq.webhook_timestamp,
                                            rq.body, rq.webhook_signature));
            assert_int_equal(strncmp(rq.webhook_id, "evt_", 4), 0);
            found++;
        }
        free(rq.body);
    }
    return found;
}

typedef struct ops_wait {
    fx *f;
    const char *type;
} ops_wait;

static int ops_arrived(void *arg)
{
    ops_wait *w = arg;
    return ops_posts(w->f, w->type) > 0;
}

/* A session LISTENing on pgpace_event, as an operator's tool would. */
static PGconn *listen_events(fx *f)
{
    PGconn *c = PQconnectdb(f->db->conninfo);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, "LISTEN pgpace_event");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    return c;
}

/* Event ids announced on the listener within timeout_ms (at least `want`). */
static int notified(PGconn *c, int want, int timeout_ms)
{
    int got = 0;
    long long deadline = tl_now_ms() + timeout_ms;
    while (got < want && tl_now_ms() < deadline) {
        struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
        if (poll(&p, 1, 100) > 0)
            assert_int_equal(PQconsumeInput(c), 1);
        PGnotify *n;
        while ((n = PQnotifies(c)) != NULL) {
            assert_string_equal(n->relname, "pgpace_event");
            assert_true(atoll(n->extra) > 0);
            got++;
            PQfreemem(n);
        }
    }
    return got;
}

static int breaker_gauge_closed(void *arg)
{
    char *metrics = fx_metrics(arg);
    int closed = strstr(metrics, "pgpace_breaker_state{customer=\"sick\"} 0\n") != NULL;
    free(metrics);
    return closed;
}

static void failing_customer_is_disabled_and_enabled_again(void **state)
{
    fx *f = *state;
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/sick", .status = 500});
    fx_customer(f, "sick", TL_ARGV("--rate", "600", "--max-attempts", "1000"));
    fx_customer(f, "well", TL_ARGV("--rate", "600"));
    PGconn *listener = listen_events(f);
    run_with_health(f, "health.disable_after = 1500ms\nhealth.breaker_event_after = 500ms\n");
    fx_enqueue(f, "sick", NULL, 3);
    fx_enqueue(f, "well", NULL, 2);

    /* Failing (the breaker opened), open too long, then disabled. */
    assert_true(wait_event(f, "sick", "failing", 10000) >= 1);
    assert_true(wait_event(f, "sick", "breaker_open", 10000) >= 1);
    assert_true(tl_wait_query_at_least(
                    f->db->conn, 1, 15000,
                    "SELECT count(*) FROM pgpace.customer WHERE name = 'sick' AND disabled_at IS "
                    "NOT NULL") == 1);
    assert_int_equal(events_of(f, "sick", "disabled"), 1);
    char *reason =
        tl_query_str(f->db->conn, "SELECT disabled_reason FROM pgpace.customer WHERE name='sick'");
    tl_assert_contains(reason, "every delivery failed since");
    free(reason);
    /* Not before disable_after: the disable came at least 1.5 s after the first failure. */
    assert_true(tl_query_int(f->db->conn,
                             "SELECT count(*) FROM pgpace.event d, pgpace.event s "
                             "WHERE d.kind = 'disabled' AND s.kind = 'failing' AND d.customer = "
                             "'sick' AND s.customer = 'sick' AND d.at >= "
                             "(s.detail->>'failing_since')::timestamptz + interval '1500 ms'") ==
                1);
    /* The healthy customer is untouched. */
    assert_int_equal(receiver_wait(f->recv, "/c/well", 2, 10000), 2);
    assert_int_equal(events_of(f, "well", "failing"), 0);

    /* Each event: announced, logged, counted, posted to the operator (signed). */
    assert_true(notified(listener, 3, 5000) >= 3);
    PQfinish(listener);
    assert_true(fx_wait_log(f, "kind=disabled", 5000));
    ops_wait w = {f, "customer.disabled"};
    assert_true(tl_wait_until(ops_arrived, &w, 10000));
    assert_int_equal(ops_posts(f, "customer.failing"), 1);
    assert_int_equal(ops_posts(f, "customer.breaker_open"), 1);
    assert_true(tl_wait_query_at_least(
                    f->db->conn, 3, 5000,
                    "SELECT count(*) FROM pgpace.event WHERE handled_at IS NOT NULL") >= 3);
    char *metrics = fx_metrics(f);
    tl_assert_contains(metrics, "pgpace_events_total{kind=\"disabled\"} 1");
    tl_assert_contains(metrics, "pgpace_events_total{kind=\"failing\"} 1");
    free(metrics);

    /* Disabled: its items wait, nothing more is sent to it. */
    size_t sent = receiver_count(f->recv, "/c/sick");
    assert_int_equal(receiver_wait(f->recv, "/c/sick", sent + 1, 1500), sent);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.queue q JOIN "
                                               "pgpace.customer c ON c.id = q.customer_id "
                                               "WHERE c.name = 'sick'"),
                     3);

    /* `pgpace events` lists the lifecycle, oldest first. */
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", f->db->conninfo, "events", "--customer", "sick"), NULL, NULL);
    assert_int_equal(p.status, 0);
    const char *failing = strstr(p.out, "failing"), *disabled = strstr(p.out, "disabled");
    assert_non_null(failing);
    assert_non_null(disabled);
    assert_true(failing < disabled);
    tl_proc_free(&p);

    /* One command re-enables it; the receiver is fixed meanwhile: everything is delivered. */
    receiver_clear_rules(f->recv);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "enable", "sick"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "enabled customer sick");
    tl_proc_free(&p);
    assert_true(wait_event(f, "sick", "enabled", 5000) >= 1);
    /* Its breaker starts closed, and the gauge says so (alerts on it stop). */
    assert_true(tl_wait_until(breaker_gauge_closed, f, 5000));
    assert_true(tl_wait_query_at_least(f->db->conn, 3, 10000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                       "pgpace.customer c ON c.id = a.customer_id "
                                       "WHERE c.name = 'sick' AND a.outcome = 'success'") == 3);
    ops_wait we = {f, "customer.enabled"};
    assert_true(tl_wait_until(ops_arrived, &we, 10000));
    /* Enabling again is harmless and says so. */
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "enable", "sick"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "was not disabled");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "enable", "nobody"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "unknown customer 'nobody'");
    tl_proc_free(&p);
    fx_stop_service(f, 10000);
}

static void recovery_and_410_pause_are_events(void **state)
{
    fx *f = *state;
    /* Two failures open the breaker (failing); the probe succeeds (recovered). */
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/flaky", .status = 503, .times = 2});
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/gone", .status = 410, .times = 1});
    /* An endpoint that was removed: 404s dead-letter at once, and count as failures too. */
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/removed", .status = 404});
    /* The operator endpoint is down for its first two posts: they are posted again. */
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/ops", .status = 500, .times = 2});
    fx_customer(f, "flaky", TL_ARGV("--rate", "600"));
    fx_customer(f, "gone", TL_ARGV("--rate", "600"));
    fx_customer(f, "removed", TL_ARGV("--rate", "600"));
    run_with_health(f, NULL);
    fx_enqueue(f, "flaky", NULL, 3);
    fx_enqueue(f, "gone", NULL, 1);
    fx_enqueue(f, "removed", NULL, 2);

    assert_true(wait_event(f, "flaky", "failing", 10000) >= 1);
    assert_true(wait_event(f, "flaky", "recovered", 10000) >= 1);
    char *secs = tl_query_str(f->db->conn, "SELECT detail->>'failing_seconds' FROM pgpace.event "
                                           "WHERE customer = 'flaky' AND kind = 'recovered'");
    assert_true(strtod(secs, NULL) > 0);
    free(secs);
    assert_int_equal(events_of(f, "flaky", "breaker_open"), 0); /* 15 min by default */
    assert_true(wait_event(f, "removed", "failing", 10000) >= 1);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter d JOIN "
                                               "pgpace.customer c ON c.id = d.customer_id WHERE "
                                               "c.name = 'removed'"),
                     2);

    assert_true(wait_event(f, "gone", "paused", 10000) >= 1);
    char *why = tl_query_str(f->db->conn, "SELECT detail->>'reason' FROM pgpace.event "
                                          "WHERE customer = 'gone' AND kind = 'paused'");
    assert_string_equal(why, "receiver answered 410 Gone");
    free(why);
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "resume", "gone"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_true(wait_event(f, "gone", "resumed", 5000) >= 1);
    why = tl_query_str(f->db->conn, "SELECT detail->>'reason' FROM pgpace.event "
                                    "WHERE customer = 'gone' AND kind = 'resumed'");
    assert_string_equal(why, "operator");
    free(why);
    /* Resumed: its item is delivered (the receiver answers 200 now). */
    assert_true(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                       "pgpace.customer c ON c.id = a.customer_id "
                                       "WHERE c.name = 'gone' AND a.outcome = 'success'") == 1);

    /* Every event reaches the operator, after the two refused posts, and each is logged once. */
    long long total = tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.event");
    assert_true(total >= 4);
    /* (The refused post is tried again after its 10 s backoff.) */
    assert_true(tl_wait_query_at_least(f->db->conn, total, 30000,
                                       "SELECT count(*) FROM pgpace.event WHERE handled_at IS "
                                       "NOT NULL") == total);
    print_message("# events %lld, operator posts refused %zu, accepted %zu\n", total,
                  receiver_count_status(f->recv, "/ops", 500),
                  receiver_count_status(f->recv, "/ops", 200));
    assert_true(receiver_count_status(f->recv, "/ops", 500) == 2);
    assert_true(receiver_count_status(f->recv, "/ops", 200) >= (size_t)total);
    char *log = fx_log(f);
    for (long long id = 1; id <= total; id++) {
        char needle[64];
        snprintf(needle, sizeof needle, "event=customer_event id=%lld ", id);
        const char *at = strstr(log, needle);
        assert_non_null(at);
        assert_null(strstr(at + 1, needle));
    }
    free(log);
    fx_stop_service(f, 10000);
}

/* pgpace.health_check's rules without a dispatcher: disable only after disable_after AND
 * min_attempts, never a paused or already disabled customer, NULL turns it off; breaker_open
 * once per open spell. And the CLI's refusals. */
static void health_check_rules_and_cli_errors(void **state)
{
    fx *f = *state;
    const char *names[] = {"young", "few", "paused", "due", "off", "stale"};
    for (size_t i = 0; i < 6; i++)
        fx_customer(f, names[i], TL_ARGV("--rate", "60"));
    tl_exec(f->db->conn, "UPDATE pgpace.customer SET paused = true WHERE name = 'paused'");
    /* Streaks: young's began 1 h ago, the others' 2 days ago. The attempt log: 50 failed attempts
     * each since (few: 3), and stale also a success since (its `recovered` write was lost). */
    tl_exec(f->db->conn,
            "INSERT INTO pgpace.customer_health (customer_id, failing_since, last_error) "
            "SELECT c.id, now() - CASE c.name WHEN 'young' THEN interval '1 hour' "
            "ELSE interval '2 days' END, 'HTTP 500' FROM pgpace.customer c");
    tl_exec(f->db->conn,
            "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
            "duration_ms, outcome) SELECT g, c.id, 1, now() - interval '30 minutes', 1, "
            "CASE WHEN c.name = 'stale' AND g = 7 THEN 'success' "
            "WHEN g %% 2 = 0 THEN 'dead' ELSE 'retry' END "
            "FROM pgpace.customer c, generate_series(1, 50) g "
            "WHERE g <= CASE c.name WHEN 'few' THEN 3 ELSE 50 END");
    tl_exec(f->db->conn, "INSERT INTO pgpace.breaker (customer_id, state, consecutive_failures, "
                         "trips, open_until, last_error, opened_at) SELECT c.id, 'open', 5, 9, "
                         "now(), 'HTTP 500', now() - interval '1 day' FROM pgpace.customer c");
    char *r = tl_query_str(f->db->conn,
                           "SELECT disabled || ' ' || breaker_events FROM pgpace.health_check("
                           "interval '1 day', 20, interval '1 hour')");
    assert_string_equal(r, "2 6");
    free(r);
    r = tl_query_str(f->db->conn, "SELECT string_agg(name, ',' ORDER BY name) FROM "
                                  "pgpace.customer WHERE disabled_at IS NOT NULL");
    assert_string_equal(r, "due,off");
    free(r);
    r = tl_query_str(f->db->conn, "SELECT detail->>'reason' FROM pgpace.event WHERE kind = "
                                  "'disabled' AND customer = 'due'");
    tl_assert_contains(r, "every delivery failed since");
    tl_assert_contains(r, "(at least 20 attempts, for longer than 1 day); last error: HTTP 500");
    free(r);
    /* The log shows stale succeeded since: its streak is closed, with a `recovered` event. */
    assert_int_equal(events_of(f, "stale", "recovered"), 1);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.customer_health h "
                                               "JOIN pgpace.customer c ON c.id = h.customer_id "
                                               "WHERE c.name = 'stale'"),
                     0);
    /* Nothing twice: disabled ones stay, breaker events are once per spell; NULL: off. */
    tl_exec(f->db->conn, "UPDATE pgpace.customer SET disabled_at = NULL WHERE name = 'off'");
    r = tl_query_str(f->db->conn, "SELECT disabled || ' ' || breaker_events FROM "
                                  "pgpace.health_check(NULL, 20, NULL)");
    assert_string_equal(r, "0 0");
    free(r);
    r = tl_query_str(f->db->conn, "SELECT disabled || ' ' || breaker_events FROM "
                                  "pgpace.health_check(interval '1 day', 20, interval '1 hour')");
    assert_string_equal(r, "1 0");
    free(r);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.event WHERE kind = "
                                               "'disabled' AND customer = 'off'"),
                     2); /* disabled, enabled by hand (an `enabled` event), disabled again */
    assert_int_equal(events_of(f, "off", "enabled"), 1);
    PGresult *res = PQexec(f->db->conn, "SELECT pgpace.health_check(NULL, 0, NULL)");
    assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22023");
    PQclear(res);
    /* A producer may not write events, notes or breakers, nor run the check. */
    assert_int_equal(
        tl_query_int(f->db->conn,
                     "SELECT count(*) FROM (VALUES ('pgpace.record_event(text,bigint,jsonb)'), "
                     "('pgpace.customer_lifecycle_event()'), ('pgpace.pause_by_receiver(bigint)'), "
                     "('pgpace.health_note(bigint,boolean,timestamptz,integer,text)'), "
                     "('pgpace.breaker_record(bigint,text,integer,integer,timestamptz,text)'), "
                     "('pgpace.health_check(interval,integer,interval)'), "
                     "('pgpace.customer_enable(text)'), ('pgpace.events_posted(bigint[],bigint[])')"
                     ") v(f) WHERE has_function_privilege('pgpace_producer', f, 'EXECUTE')"),
        0);

    tl_proc p =
        tl_pgpace(TL_ARGV("--db", f->db->conninfo, "events", "--kind", "exploded"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "pgpace events: --kind: expected failing, recovered, breaker_open, "
                              "disabled, enabled, paused, resumed or api_write, got 'exploded'");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "events", "--limit", "0"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--limit");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "events", "--since", "yesterdayish"), NULL,
                  NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "yesterdayish");
    tl_proc_free(&p);
    p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "events", "--kind", "breaker_open", "--limit", "2"), NULL,
        NULL);
    assert_int_equal(p.status, 0);
    int rows = 0;
    for (const char *at = p.out; (at = strstr(at, "breaker_open")) != NULL; at++)
        rows++;
    assert_int_equal(rows, 2);
    tl_proc_free(&p);
}

typedef struct sent_to {
    fx *f;
    const char *prefix;
} sent_to;

static int has_sent(void *arg)
{
    sent_to *s = arg;
    return receiver_count(s->f->recv, s->prefix) > 0;
}

/* A new leader resumes the breaker the last one left open (the start-up load reads such a
 * customer whole, by id, rather than from its page: leader.c): its item waits for the breaker's
 * open_until, while the customer beside it, with nothing stored, is sent to at once. */
static void a_new_leader_resumes_a_stored_open_breaker(void **state)
{
    fx *f = *state;
    fx_customer(f, "held", TL_ARGV("--rate", "600"));
    fx_customer(f, "free", TL_ARGV("--rate", "600"));
    tl_exec(f->db->conn,
            "INSERT INTO pgpace.breaker (customer_id, state, consecutive_failures, trips, "
            "open_until, last_error, opened_at) SELECT id, 'open', 5, 3, now() + interval "
            "'1 hour', 'HTTP 500', now() FROM pgpace.customer WHERE name = 'held'");
    tl_exec(f->db->conn,
            "INSERT INTO pgpace.customer_health (customer_id, failing_since, last_error) "
            "SELECT id, now() - interval '1 minute', 'HTTP 500' FROM pgpace.customer "
            "WHERE name = 'held'");
    fx_enqueue(f, "held", NULL, 1);
    fx_enqueue(f, "free", NULL, 1);
    run_with_health(f, NULL);
    assert_true(fx_wait_log(f, "event=customers_loaded customers=2 read_whole=1", 10000));
    sent_to free = {f, "/c/free"}, held = {f, "/c/held"};
    assert_true(tl_wait_until(has_sent, &free, 10000));
    /* Had it been loaded closed, it would have been sent in the same round as free's. */
    assert_false(tl_wait_until(has_sent, &held, 1500));
    fx_stop_service(f, 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(failing_customer_is_disabled_and_enabled_again, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(recovery_and_410_pause_are_events, setup, teardown),
        cmocka_unit_test_setup_teardown(health_check_rules_and_cli_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(a_new_leader_resumes_a_stored_open_breaker, setup,
                                        teardown),
    };
    TL_RUN(tests, NULL, NULL);
}
