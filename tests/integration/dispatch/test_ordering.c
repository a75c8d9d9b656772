/* test_ordering.c - ordered delivery per key (0020), delivered by a running dispatcher to a real
 * receiver: the scenario, 20 objects with 10 events each enqueued in order for one
 * customer, the receiver failing a fixed pattern of requests (every 7th answered 500) so that
 * heads of keys are retried while later events of the same key wait. Each object's events must
 * reach the receiver in order (the accepted ones: seq 0..9, increasing), never two requests of
 * one key open at once, and every event delivered. */
#include "fixture.h"
#include "receiver.h"
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
}

static void spaced_keys_stay_in_order(void **state)
{
    check_order(*state, "spaced");
}

static void work_queue_keys_stay_in_order(void **state)
{
    check_order(*state, "unlimited");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(spaced_keys_stay_in_order, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(work_queue_keys_stay_in_order, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
