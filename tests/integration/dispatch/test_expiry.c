/* test_expiry.c - deadlines and coalescing through the running dispatcher: an item is never sent
 * after its deadline (expires_at or the customer's max_age), whether it waits while its customer
 * is paused, behind a spaced customer's backlog, in the claim-ahead window or for a retry; the
 * expired ones are dead-lettered as 'expired' and do not take the live ones' slots; and a
 * supersede_key under concurrent producers while the dispatcher claims. */
#include "fixture.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The deadline (epoch us) of every item a request of `prefix` carried must be after the request
 * arrived; returns how many requests carried an item with a deadline. */
static int assert_none_arrived_late(fx *f, const char *prefix)
{
    int with_deadline = 0;
    size_t n = receiver_count(f->recv, prefix);
    for (size_t i = 0; i < n; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        if (strncmp(rq.path, prefix, strlen(prefix)) != 0) {
            free(rq.body);
            continue;
        }
        long long item = atoll(rq.webhook_id + 4); /* msg_<id> */
        long long deadline = tl_query_int(f->db->conn,
                                          "SELECT coalesce((extract(epoch FROM least(i.expires_at, "
                                          "i.created_at + c.max_age)) * 1000000)::bigint, 0) FROM "
                                          "pgpace.item i JOIN pgpace.customer c ON c.id = "
                                          "i.customer_id WHERE i.id = %lld",
                                          item);
        if (deadline > 0) {
            with_deadline++;
            if (rq.at_us >= deadline)
                fail_msg("item %lld arrived %lld us after its deadline", item,
                         (long long)(rq.at_us - deadline));
        }
        free(rq.body);
    }
    return with_deadline;
}

/* Paused customers' items are dead-lettered by the leader's sweep once past their deadline,
 * and never sent, not even after the resume. */
static void paused_customer_items_expire_unsent(void **state)
{
    fx *f = *state;
    fx_customer(f, "sleepy", TL_ARGV("--rate", "600", "--paused"));
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('sleepy', '{\"n\":1}', expires_at => now() + "
                         "interval '1 second'), pgpace.enqueue('sleepy', '{\"n\":2}', expires_at "
                         "=> now() + interval '1 hour')");
    fx_run(f, NULL);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT count(*) FROM pgpace.dead_letter WHERE "
                                            "last_error = 'expired'"),
                     1);
    assert_true(fx_wait_log(f, "event=items_expired items=1 customers=1", 5000));
    char *metrics = fx_metrics(f);
    tl_assert_contains(metrics, "pgpace_expired_total{customer=\"sleepy\"} 1");
    free(metrics);
    /* The one with time left is still queued; the sweep wrote no attempt (none was made). */
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.queue"), 1);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt"), 0);

    tl_proc p =
        tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "resume", "sleepy"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(receiver_wait(f->recv, "/c/sleepy", 1, 10000), 1);
    receiver_request rq;
    assert_int_equal(receiver_get(f->recv, 0, &rq), 0);
    assert_string_equal(rq.body, "{\"n\": 2}");
    free(rq.body);
    /* Nothing else comes: the queue is empty once the live one is delivered. */
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 5000, "SELECT -count(*) FROM pgpace.queue"), 0);
    assert_int_equal(receiver_count(f->recv, "/c/sleepy"), 1);
    char *log = fx_log(f);
    assert_null(strstr(log, "\"n\": 1"));
    free(log);
    fx_stop_service(f, 15000);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* A spaced customer with a backlog whose odd items expire early: none is sent after its
 * deadline, and once they expire the live items keep one slot each (the expired ones take no
 * slot). */
static void spaced_backlog_never_sends_late(void **state)
{
    fx *f = *state;
    fx_customer(f, "paced", TL_ARGV("--rate", "300")); /* one every 200 ms */
    fx_run(f, NULL);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));
    /* 24 items in order (run_at 1 ms apart); the odd ones expire 1.1 s after enqueue, so about
     * three of them fit before their deadline and the other nine must never go. */
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('paced', jsonb_build_object('n', g), run_at => "
                         "now() + g * interval '1 millisecond', expires_at => CASE WHEN g %% 2 = 1 "
                         "THEN now() + interval '1100 milliseconds' END) FROM generate_series(0, "
                         "23) g");
    int64_t enqueued_us = fx_now_us();
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 20000, "SELECT -count(*) FROM pgpace.queue"), 0);
    size_t got = receiver_count(f->recv, "/c/paced");
    long long expired = tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter WHERE "
                                                  "last_error = 'expired'");
    print_message("# %zu delivered, %lld expired\n", got, expired);
    assert_int_equal((long long)got + expired, 24);
    assert_true(expired >= 6);
    int with_deadline = assert_none_arrived_late(f, "/c/paced");
    assert_int_equal(with_deadline + 12, (int)got); /* every live item was delivered */

    /* The live items' gaps after the deadline: one period each, not two. */
    long long gaps[24];
    int n_gaps = 0;
    int64_t prev = 0;
    for (size_t i = 0; i < got; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        free(rq.body);
        if (rq.at_us < enqueued_us + 1300000) {
            prev = rq.at_us;
            continue;
        }
        if (prev)
            gaps[n_gaps++] = rq.at_us - prev;
        prev = rq.at_us;
    }
    assert_true(n_gaps >= 4);
    qsort(gaps, (size_t)n_gaps, sizeof gaps[0], cmp_ll);
    print_message("# live gaps after the deadline: median %lld us, max %lld us\n", gaps[n_gaps / 2],
                  gaps[n_gaps - 1]);
    assert_true(gaps[n_gaps / 2] < 300000);
    /* The sweep or the claim's skip: no attempt logged for the expired ones unless claimed. */
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt "
                                               "WHERE outcome NOT IN ('success', 'expired')"),
                     0);
    fx_stop_service(f, 15000);
}

/* max_age on the customer: items not sent within it of their enqueue are dead-lettered, never
 * sent late. */
static void customer_max_age_bounds_the_wait(void **state)
{
    fx *f = *state;
    fx_customer(f, "aged", TL_ARGV("--rate", "60", "--max-age", "2s")); /* one a second */
    fx_run(f, NULL);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('aged', jsonb_build_object('n', g), run_at => "
                         "now() + g * interval '1 millisecond') FROM generate_series(0, 5) g");
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 15000, "SELECT -count(*) FROM pgpace.queue"), 0);
    size_t got = receiver_count(f->recv, "/c/aged");
    long long expired = tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter WHERE "
                                                  "last_error = 'expired'");
    print_message("# %zu delivered, %lld expired\n", got, expired);
    assert_int_equal((long long)got + expired, 6);
    assert_true(got >= 1 && expired >= 2);
    assert_int_equal(assert_none_arrived_late(f, "/c/aged"), (int)got);
    fx_stop_service(f, 15000);
}

/* Items that wait in the claim-ahead window for a connection past their deadline are not sent:
 * the dispatcher finalises them as 'expired' (logged, attempt given back). */
static void window_items_past_their_deadline_are_not_sent(void **state)
{
    fx *f = *state;
    fx_customer(f, "busy", TL_ARGV("--rate", "1", "--mode", "unlimited"));
    receiver_rule slow = {
        .path_prefix = "/c/busy", .action = RECV_RESPOND, .status = 200, .delay_ms = 800};
    receiver_on(f->recv, &slow);
    fx_run(f, "delivery.max_host_connections = 1\n");
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('busy', jsonb_build_object('n', g), run_at => "
                         "now() + g * interval '1 millisecond', expires_at => now() + interval "
                         "'400 milliseconds') FROM generate_series(0, 4) g");
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 10000, "SELECT -count(*) FROM pgpace.queue"), 0);
    assert_int_equal(receiver_count(f->recv, "/c/busy"), 1);
    assert_int_equal(assert_none_arrived_late(f, "/c/busy"), 1);
    /* Claimed into the window (a host not measured yet gets one round of its connections
     * there), never sent: an attempt row with the outcome and class 'expired', the attempt given
     * back in the dead letter. The others were never claimed: the sweep took them. */
    long long in_window = tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt "
                                                    "WHERE outcome = 'expired' AND error_class = "
                                                    "'expired' AND http_status IS NULL");
    print_message("# %lld expired in the window\n", in_window);
    assert_true(in_window >= 1);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter WHERE "
                                               "last_error = 'expired' AND attempts = 0"),
                     4);
    assert_true(fx_wait_log(f, "event=item_expired", 1000));
    char *metrics = fx_metrics(f);
    tl_assert_contains(metrics, "pgpace_expired_total{customer=\"busy\"} 4");
    free(metrics);
    fx_stop_service(f, 15000);
}

/* A failed attempt whose retry would come after the deadline is dead-lettered as expired at
 * once, with the attempt's own status in the log. */
static void retry_past_the_deadline_expires_at_once(void **state)
{
    fx *f = *state;
    fx_customer(f, "down", TL_ARGV("--rate", "600"));
    receiver_rule fail = {.path_prefix = "/c/down", .action = RECV_RESPOND, .status = 500};
    receiver_on(f->recv, &fail);
    /* Backoff of 10-20 s (half the cap plus jitter): any retry comes after the deadline. */
    fx_run(f, "dispatcher.retry_base_ms = 20000\ndispatcher.retry_cap_ms = 20000\n");
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('down', '{}', expires_at => now() + interval "
                         "'3 seconds')");
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 2500,
                                            "SELECT count(*) FROM pgpace.dead_letter WHERE "
                                            "last_error = 'expired' AND attempts = 1 AND "
                                            "last_status = 500"),
                     1);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt "
                                               "WHERE outcome = 'expired' AND http_status = 500 "
                                               "AND error_class = 'http'"),
                     1);
    assert_int_equal(receiver_count(f->recv, "/c/down"), 1);
    fx_stop_service(f, 15000);
}

/* Coalescing while the dispatcher claims: producers supersede 5 keys; items already claimed
 * are left alone and newer ones queue on their own. In the end every key's last committed
 * payload was delivered, and no payload was delivered twice. */
#define CO_THREADS 8
#define CO_ITEMS   100
#define CO_KEYS    5

typedef struct co_thread {
    const char *conninfo;
    int t;
    long long seq[CO_ITEMS];
    char error[256];
} co_thread;

static void *co_producer(void *arg)
{
    co_thread *ct = arg;
    PGconn *conn = PQconnectdb(ct->conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(ct->error, sizeof ct->error, "connect: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return NULL;
    }
    for (int i = 0; i < CO_ITEMS && !ct->error[0]; i++) {
        char payload[64], key[16];
        snprintf(payload, sizeof payload, "{\"t\": %d, \"i\": %d}", ct->t, i);
        snprintf(key, sizeof key, "k%d", i % CO_KEYS);
        const char *params[] = {payload, key};
        PQclear(PQexec(conn, "BEGIN"));
        PGresult *r = PQexecParams(conn,
                                   "SELECT pgpace.enqueue('hot', $1::jsonb, supersede_key => $2), "
                                   "nextval('co_commit_order')",
                                   2, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            snprintf(ct->error, sizeof ct->error, "enqueue: %s", PQresultErrorMessage(r));
        else
            ct->seq[i] = atoll(PQgetvalue(r, 0, 1));
        PQclear(r);
        r = PQexec(conn, "COMMIT");
        if (!ct->error[0] && PQresultStatus(r) != PGRES_COMMAND_OK)
            snprintf(ct->error, sizeof ct->error, "commit: %s", PQresultErrorMessage(r));
        PQclear(r);
    }
    PQfinish(conn);
    return NULL;
}

static void supersede_while_the_dispatcher_claims(void **state)
{
    fx *f = *state;
    fx_customer(f, "hot", TL_ARGV("--rate", "1200")); /* spaced: a backlog forms */
    tl_exec(f->db->conn, "CREATE SEQUENCE public.co_commit_order");
    fx_run(f, NULL);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));
    static co_thread threads[CO_THREADS];
    pthread_t tids[CO_THREADS];
    for (int t = 0; t < CO_THREADS; t++) {
        threads[t] = (co_thread){.conninfo = f->db->conninfo, .t = t};
        assert_int_equal(pthread_create(&tids[t], NULL, co_producer, &threads[t]), 0);
    }
    for (int t = 0; t < CO_THREADS; t++) {
        pthread_join(tids[t], NULL);
        if (threads[t].error[0])
            fail_msg("producer %d: %s", t, threads[t].error);
    }
    /* Never more than one queued, never claimed item per key. */
    assert_true(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.queue WHERE supersede_key "
                                          "IS NOT NULL") <= CO_KEYS);
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 0, 30000, "SELECT -count(*) FROM pgpace.queue"), 0);
    long long items = tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.item");
    size_t got = receiver_count(f->recv, "/c/hot");
    print_message("# %d enqueues, %lld items, %zu deliveries\n", CO_THREADS * CO_ITEMS, items, got);
    /* Every item delivered once (no failures here), with the payload it had when claimed. */
    assert_int_equal((long long)got, items);
    char **bodies = calloc(got, sizeof *bodies);
    for (size_t i = 0; i < got; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        bodies[i] = rq.body;
        for (size_t j = 0; j < i; j++)
            if (strcmp(bodies[j], rq.body) == 0)
                fail_msg("payload %s delivered twice", rq.body);
    }
    for (int k = 0; k < CO_KEYS; k++) {
        long long best = -1;
        int bt = 0, bi = 0;
        for (int t = 0; t < CO_THREADS; t++)
            for (int i = k; i < CO_ITEMS; i += CO_KEYS)
                if (threads[t].seq[i] > best) {
                    best = threads[t].seq[i];
                    bt = t;
                    bi = i;
                }
        char want[64];
        snprintf(want, sizeof want, "{\"i\": %d, \"t\": %d}", bi, bt);
        bool found = false;
        for (size_t i = 0; i < got && !found; i++)
            found = strcmp(bodies[i], want) == 0;
        if (!found)
            fail_msg("the last payload of key k%d, %s, was not delivered", k, want);
    }
    for (size_t i = 0; i < got; i++)
        free(bodies[i]);
    free(bodies);
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(paused_customer_items_expire_unsent, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(spaced_backlog_never_sends_late, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(customer_max_age_bounds_the_wait, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(window_items_past_their_deadline_are_not_sent, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(retry_past_the_deadline_expires_at_once, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(supersede_while_the_dispatcher_claims, fx_setup,
                                        fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
