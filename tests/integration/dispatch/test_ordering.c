/* test_ordering.c - ordered delivery per key (0020), delivered by a running dispatcher to a real
 * receiver: the scenario, 20 objects with 10 events each enqueued in order for one
 * customer, the receiver failing a fixed pattern of requests (every 7th answered 500) so that
 * heads of keys are retried while later events of the same key wait. Each object's events must
 * reach the receiver in order (the accepted ones: seq 0..9, increasing), never two requests of
 * one key open at once, and every event delivered.
 * Then what an operator sees: keys waiting behind a failing head (retrying) and behind a held
 * dead head, counted with their longest wait on the status page, in /metrics and in
 * `pgpace stats`, while the other keys of the same endpoint are delivered. */
#include "fixture.h"
#include "receiver.h"
#include "status_client.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBJECTS 20
#define EVENTS  10

typedef struct req {
    int obj, seq, status;
    int64_t at, answered;
} req;

static int field(const char *body, const char *name)
{
    char key[32];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(body, key);
    if (!p) {
        snprintf(key, sizeof key, "\"%s\": ", name);
        p = strstr(body, key);
    }
    return p ? atoi(p + strlen(key)) : -1;
}

static void check_order(fx *f, const char *mode)
{
    fx_customer(f, "acme", (const char *const[]){"--mode", mode, "--rate", "6000", NULL});
    /* Every 7th request fails once: heads of keys are retried while their keys' next events
     * are due. */
    receiver_on(f->recv,
                &(receiver_rule){
                    .path_prefix = "/c/acme", .action = RECV_RESPOND, .status = 500, .every = 7});
    for (int s = 0; s < EVENTS; s++)
        for (int k = 0; k < OBJECTS; k++)
            tl_exec(f->db->conn,
                    "SELECT pgpace.enqueue('acme', jsonb_build_object('obj', %d, 'seq', %d), "
                    "order_key => 'obj-%d')",
                    k, s, k);
    fx_run(f, NULL);
    /* Every event accepted once: 200 answers. */
    long long done = tl_wait_query_at_least(
        f->db->conn, OBJECTS * EVENTS, 90000,
        "SELECT count(*) FROM pgpace.delivery_attempt WHERE outcome = 'success'");
    assert_int_equal(done, OBJECTS * EVENTS);

    size_t n = receiver_count(f->recv, "/c/acme");
    req *v = calloc(n, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        receiver_request q;
        assert_int_equal(receiver_get(f->recv, i, &q), 0);
        v[i] = (req){field(q.body, "obj"), field(q.body, "seq"), q.status, q.at_us, q.answered_us};
        free(q.body);
    }
    int out_of_order = 0, overlaps = 0, failed = 0, in_order_objects = 0;
    for (int k = 0; k < OBJECTS; k++) {
        int next = 0;
        bool ok = true;
        int64_t open_until = 0;
        for (size_t i = 0; i < n; i++) {
            if (v[i].obj != k)
                continue;
            /* One at a time: this request came after the previous one of the key was answered. */
            if (open_until && v[i].at < open_until)
                overlaps++;
            open_until = v[i].answered ? v[i].answered : INT64_MAX;
            if (v[i].status != 200) {
                failed++;
                continue;
            }
            if (v[i].seq != next) {
                out_of_order++;
                ok = false;
            }
            next = v[i].seq + 1;
        }
        in_order_objects += ok && next == EVENTS;
    }
    print_message("# %s: %zu requests, %d answered 500 and retried; %d of %d objects in order, "
                  "%d out of order, %d overlapping requests of one key\n",
                  mode, n, failed, in_order_objects, OBJECTS, out_of_order, overlaps);
    assert_true(failed > 0); /* the scenario retried heads */
    assert_int_equal(out_of_order, 0);
    assert_int_equal(overlaps, 0);
    assert_int_equal(in_order_objects, OBJECTS);
    free(v);
    if (strcmp(mode, "spaced") == 0) {
        /* A key's next item goes when its head is done, yet never sooner than the pace: at
         * 6000/min the sends pgpace recorded are 10 ms apart at least (1 ms of slack, as for
         * every spaced customer in test_modes.c). */
        long long gaps = 0, min_gap = tl_min_send_gap_us(f->db->conn, "acme", &gaps);
        print_message("# spaced: %lld gaps between sends, the smallest %.1f ms\n", gaps,
                      (double)min_gap / 1000);
        assert_true(gaps >= OBJECTS * EVENTS - 1);
        assert_true(min_gap >= 9000);
    }
}

static void spaced_keys_stay_in_order(void **state)
{
    check_order(*state, "spaced");
}

static void work_queue_keys_stay_in_order(void **state)
{
    check_order(*state, "unlimited");
}

static bool blocked_counted(const json_t *j, void *arg)
{
    if (!sc_leading_with(j, "held") || !sc_leading_with(j, "retrying"))
        return false;
    json_t *h = sc_customer(j, "held"), *r = sc_customer(j, "retrying");
    if (!sc_counted(h) || !sc_counted(r))
        return false;
    return sc_num(h, "blocked_keys") == 1 && sc_num(r, "blocked_keys") == 1;
}

/* Two customers, each with a key "stuck" behind a head that cannot go and a key "free" that
 * flows: held, whose head is dead-lettered (max_attempts 1) and holds its key
 * (--order-on-dead hold); retrying, whose head is answered 500 every time. */
static void blocked_keys_are_visible(void **state)
{
    fx *f = *state;
    fx_customer(f, "held",
                TL_ARGV("--rate", "600", "--max-attempts", "1", "--order-on-dead", "hold"));
    fx_customer(f, "retrying", TL_ARGV("--rate", "600", "--max-attempts", "1000"));
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/held", .status = 500, .times = 1});
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/retrying", .status = 500});
    /* The heads first, alone, so that they are the ones refused. */
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('held', '{\"seq\": 0, \"key\": \"stuck\"}', "
                         "order_key => 'stuck')");
    fx_run(f, "dispatcher.retry_base_ms = 500\ndispatcher.retry_cap_ms = 2000\n");
    assert_true(tl_wait_query_at_least(f->db->conn, 1, 30000,
                                       "SELECT count(*) FROM pgpace.dead_letter d JOIN "
                                       "pgpace.customer c ON c.id = d.customer_id WHERE c.name "
                                       "= 'held' AND d.order_action = 'held'") >= 1);
    double since = sc_now_s();
    for (int s = 1; s <= 3; s++) {
        tl_exec(f->db->conn,
                "SELECT pgpace.enqueue('held', jsonb_build_object('seq', %d, 'key', 'stuck'), "
                "order_key => 'stuck')",
                s);
        tl_exec(f->db->conn,
                "SELECT pgpace.enqueue('held', jsonb_build_object('seq', %d, 'key', 'free'), "
                "order_key => 'free')",
                s);
    }
    for (int s = 0; s < 3; s++)
        tl_exec(f->db->conn,
                "SELECT pgpace.enqueue('retrying', jsonb_build_object('seq', %d), order_key => "
                "'stuck')",
                s);
    assert_true(tl_wait_query_at_least(f->db->conn, 2, 30000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                       "pgpace.customer c ON c.id = a.customer_id WHERE c.name "
                                       "= 'retrying'") >= 2);
    /* The held customer's free key is delivered beside its stuck one. */
    assert_true(tl_wait_query_at_least(f->db->conn, 3, 30000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                       "pgpace.customer c ON c.id = a.customer_id WHERE c.name "
                                       "= 'held' AND a.outcome = 'success'") >= 3);
    assert_true(receiver_count(f->recv, "/c/held") == 4);

    /* The status page, after the leader's next queue-gauge pass (every 15 s). */
    int port = fx_admin_port(f);
    json_t *j = sc_wait_status(port, NULL, blocked_counted, NULL, 45000, "blocked keys counted");
    double generated = sc_iso_seconds(sc_str(j, "generated_at"));
    for (int i = 0; i < 2; i++) {
        json_t *c = sc_customer(j, i ? "retrying" : "held");
        assert_string_equal(sc_str(c, "blocked_oldest_key"), "stuck");
        /* Behind the stuck head: seq 2 and 3 parked behind seq 1 (held), seq 1 and 2 behind
         * seq 0 (retrying). */
        assert_true(sc_num(c, "waiting") == 2);
        double age = sc_num(c, "blocked_oldest_s");
        if (age < 0 || age > generated - since + 1)
            fail_msg("blocked_oldest_s %.1f: the items waited at most %.1f s", age,
                     generated - since);
    }
    json_decref(j);
    char *m = fx_metrics(f);
    assert_non_null(strstr(m, "pgpace_order_blocked_keys{customer=\"held\"} 1"));
    assert_non_null(strstr(m, "pgpace_order_blocked_keys{customer=\"retrying\"} 1"));
    assert_non_null(strstr(m, "pgpace_order_waiting{customer=\"held\"} 2"));
    assert_non_null(strstr(m, "pgpace_order_blocked_oldest_age_seconds{customer=\"held\"}"));
    free(m);

    /* `pgpace stats` reads the database: both keys, then none once the held head is replayed
     * and the retrying one's receiver answers. */
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "stats"), NULL, NULL);
    assert_int_equal(p.status, 0);
    if (!strstr(p.out, "ordered keys") || !strstr(p.out, "stuck"))
        fail_msg("pgpace stats: %s", p.out);
    tl_proc_free(&p);
    receiver_clear_rules(f->recv);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "dlq", "replay", "--customer", "held"), NULL,
                  NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 10, 60000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE outcome = 'success'"),
                     10);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.queue"), 0);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "stats"), NULL, NULL);
    assert_int_equal(p.status, 0);
    if (strstr(p.out, "ordered keys"))
        fail_msg("pgpace stats, nothing waiting: %s", p.out);
    tl_proc_free(&p);
    /* The held key went in order once replayed: its accepted requests say seq 0, 1, 2, 3. */
    int next = 0;
    for (size_t i = 0, n = receiver_count(f->recv, NULL); i < n; i++) {
        receiver_request q;
        assert_int_equal(receiver_get(f->recv, i, &q), 0);
        if (q.status == 200 && strcmp(q.path, "/c/held") == 0 && strstr(q.body, "\"stuck\"")) {
            if (field(q.body, "seq") != next)
                fail_msg("held, key stuck: seq %d accepted after %d", field(q.body, "seq"),
                         next - 1);
            next++;
        }
        free(q.body);
    }
    assert_int_equal(next, 4);
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(spaced_keys_stay_in_order, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(work_queue_keys_stay_in_order, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(blocked_keys_are_visible, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
