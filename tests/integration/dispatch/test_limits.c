/* test_limits.c - limits as receivers state them, delivered by a running dispatcher to a real
 * receiver:
 * - several COUNT/PERIOD windows: none is ever exceeded (in the dispatcher's own send record and
 *   at the receiver), the pace is the shortest window's, and a longer window that runs out holds
 *   the customer until its first sends leave it, with no burst when it frees;
 * - the windows survive a restart: a new leader resumes them from the attempt log;
 * - a receiver host's own limit holds over all of its customers, and its rate is divided among
 *   them by weighted max-min fairness (a slow customer keeps its rate, the others share the
 *   rest evenly).
 * Limits are judged on the dispatcher's own send record (delivery_attempt.started_at), which is
 * what a limit bounds, and on arrival times at the receiver. Progress is judged with loose floors
 * only: a busy machine sends late, never early. */
#include "fixture.h"
#include "receiver.h"
#include "testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC 1000000LL

/* Sets a customer's windows through SQL (a text[] literal, e.g. "{4/s,10/5s}"). */
static void set_limits(fx *f, const char *customer, const char *windows)
{
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('%s', limits => '%s')", customer, windows);
}

/* Waits until the attempt log holds at least n sends of the customers matching `like` (it is
 * written in batches after the answers). */
static void wait_sends(fx *f, const char *like, long long n, int timeout_ms)
{
    long long got = tl_wait_query_at_least(f->db->conn, n, timeout_ms,
                                           "SELECT count(*) FROM pgpace.delivery_attempt a JOIN"
                                           " pgpace.customer c ON c.id = a.customer_id"
                                           " WHERE c.name LIKE '%s'",
                                           like);
    assert_true(got >= n);
}

/* The sends of customers whose name matches the LIKE pattern, in order (epoch microseconds). */
static int64_t *sends_of(fx *f, const char *like, size_t *n)
{
    PGresult *res = PQexecParams(
        f->db->conn,
        "SELECT (extract(epoch FROM a.started_at) * 1e6)::bigint FROM pgpace.delivery_attempt a"
        "  JOIN pgpace.customer c ON c.id = a.customer_id"
        " WHERE c.name LIKE $1 ORDER BY a.started_at",
        1, NULL, (const char *const[]){like}, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    *n = (size_t)PQntuples(res);
    int64_t *v = calloc(*n + 1, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < *n; i++)
        v[i] = atoll(PQgetvalue(res, (int)i, 0));
    PQclear(res);
    return v;
}

/* Arrival times at the receiver of the requests whose path starts with prefix, in order. */
static int64_t *arrivals_of(fx *f, const char *prefix, size_t *n)
{
    size_t total = receiver_count(f->recv, NULL), k = 0;
    int64_t *v = calloc(total + 1, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < total; i++) {
        receiver_request q;
        assert_int_equal(receiver_get(f->recv, i, &q), 0);
        if (strncmp(q.path, prefix, strlen(prefix)) == 0)
            v[k++] = q.at_us;
        free(q.body);
    }
    *n = k;
    return v;
}

/* The most of the (sorted) times within any half-open window (t - period, t]. */
static size_t most_in_window(const int64_t *v, size_t n, int64_t period)
{
    size_t best = 0, lo = 0;
    for (size_t hi = 0; hi < n; hi++) {
        while (v[lo] <= v[hi] - period)
            lo++;
        if (hi - lo + 1 > best)
            best = hi - lo + 1;
    }
    return best;
}

static int64_t min_gap(const int64_t *v, size_t n)
{
    int64_t best = INT64_MAX;
    for (size_t i = 1; i < n; i++)
        if (v[i] - v[i - 1] < best)
            best = v[i] - v[i - 1];
    return best;
}

/* 4/s and 10/5s: sends 250 ms apart (the shortest window's pace) until ten in five seconds,
 * then nothing until the first of them is five seconds old, then one as each leaves. */
static void windows_are_never_exceeded(void **state)
{
    fx *f = *state;
    /* The receiver enforces the same windows on arrivals (50 ms shorter: the scheduling jitter
     * of two threads on a busy machine) and answers 429 beyond them. */
    receiver_throttle t = {.path_prefix = "/c/acme",
                           .kind = RECV_SLIDING_WINDOW,
                           .sliding_limit = {4, 10},
                           .sliding_window_ms = {950, 4950}};
    assert_int_equal(receiver_throttle_on(f->recv, &t), 0);
    /* As a user states it: windows, no rate (its pace is the shortest window's). */
    fx_customer(f, "acme", (const char *const[]){"--limit", "4/s", "--limit", "10/5s", NULL});
    fx_enqueue_many(f, "acme", 40);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/acme", 22, 60000) >= 22);
    wait_sends(f, "acme", 22, 20000);

    size_t n, na;
    int64_t *s = sends_of(f, "acme", &n);
    int64_t *a = arrivals_of(f, "/c/acme", &na);
    assert_true(n >= 22);
    size_t one = most_in_window(s, n, SEC), five = most_in_window(s, n, 5 * SEC);
    /* At the receiver, arrival times carry the jitter of two threads' scheduling: judged over
     * windows 50 ms shorter (the dispatcher keeps each send 2 % of its window longer, 20 ms
     * and 100 ms here, so that a strict receiver sees no more than the limit). */
    size_t a_one = most_in_window(a, na, SEC - 50000),
           a_five = most_in_window(a, na, 5 * SEC - 50000);
    print_message(
        "# %zu sends: most in any 1 s %zu (arrivals, 0.95 s: %zu), in any 5 s %zu "
        "(arrivals, 4.95 s: %zu); shortest gap %.1f ms; 11th send %.3f s after the first\n",
        n, one, a_one, five, a_five, (double)min_gap(s, n) / 1000.0, (double)(s[10] - s[0]) / 1e6);
    assert_true(one <= 4);
    assert_true(five <= 10);
    assert_true(a_one <= 4);
    assert_true(a_five <= 10);
    assert_int_equal(receiver_count_status(f->recv, "/c/acme", 429), 0);
    /* Paced at the shortest window's rate (4 per 1.02 s): never two sends closer than 250 ms. */
    assert_true(min_gap(s, n) >= 250000);
    /* The five-second window ran out and held: the 11th send is at least five seconds after
     * the first, and the 21st ten seconds. */
    assert_true(s[10] - s[0] >= 5 * SEC);
    assert_true(s[20] - s[0] >= 10 * SEC);
    free(s);
    free(a);
}

/* A customer's windows bound all of its endpoints together: 3/s and 8/4s over three endpoints
 * of 600/min each (their own receivers would take 30/s). */
static void customer_windows_bind_all_its_endpoints(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('shop', rate_per_minute => 6000)");
    set_limits(f, "shop", "{3/s,8/4s}");
    const char *names[] = {"e1", "e2", "e3"};
    for (int i = 0; i < 3; i++) {
        char url[256], path[64];
        snprintf(path, sizeof path, "/c/shop/%s", names[i]);
        receiver_url(f->recv, path, url, sizeof url);
        tl_exec(f->db->conn, "SELECT pgpace.endpoint_add('shop', '%s', '%s', 600)", names[i], url);
    }
    for (int i = 0; i < 12; i++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('shop', '{\"n\": %d}')", i);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/shop/", 17, 60000) >= 17);
    wait_sends(f, "shop/%", 17, 20000);
    size_t n;
    int64_t *s = sends_of(f, "shop/%", &n);
    print_message("# %zu sends of three endpoints: most in any 1 s %zu, in any 4 s %zu; 9th send "
                  "%.3f s after the first; e1 %zu e2 %zu e3 %zu\n",
                  n, most_in_window(s, n, SEC), most_in_window(s, n, 4 * SEC),
                  (double)(s[8] - s[0]) / 1e6, receiver_count(f->recv, "/c/shop/e1"),
                  receiver_count(f->recv, "/c/shop/e2"), receiver_count(f->recv, "/c/shop/e3"));
    assert_true(most_in_window(s, n, SEC) <= 3);
    assert_true(most_in_window(s, n, 4 * SEC) <= 8);
    assert_true(s[8] - s[0] >= 4 * SEC);
    assert_true(s[16] - s[0] >= 8 * SEC);
    free(s);
}

/* Windows bind every mode: a work queue (unlimited) and a batch customer at 600/min (10 a tick)
 * with 4/s and 6/2s each never exceed them. */
static void windows_bind_work_queues_and_batches(void **state)
{
    fx *f = *state;
    fx_customer(f, "wq",
                (const char *const[]){"--mode", "unlimited", "--rate", "1", "--limit", "4/s",
                                      "--limit", "6/2s", NULL});
    fx_customer(f, "bt",
                (const char *const[]){"--mode", "batch", "--rate", "600", "--limit", "4/s",
                                      "--limit", "6/2s", NULL});
    fx_enqueue_many(f, "wq", 40);
    fx_enqueue_many(f, "bt", 40);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/wq", 13, 60000) >= 13);
    assert_true(receiver_wait(f->recv, "/c/bt", 13, 60000) >= 13);
    wait_sends(f, "wq", 13, 20000);
    wait_sends(f, "bt", 13, 20000);
    const char *names[] = {"wq", "bt"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        int64_t *s = sends_of(f, names[i], &n);
        print_message("# %s: %zu sends, most in any 1 s %zu, in any 2 s %zu; 13th send %.3f s "
                      "after the first\n",
                      names[i], n, most_in_window(s, n, SEC), most_in_window(s, n, 2 * SEC),
                      (double)(s[12] - s[0]) / 1e6);
        assert_true(most_in_window(s, n, SEC) <= 4);
        assert_true(most_in_window(s, n, 2 * SEC) <= 6);
        assert_true(s[12] - s[0] >= 4 * SEC);
        free(s);
    }
}

/* A restart (a new leader) resumes the windows from the attempt log: 6/10s used up before the
 * stop holds after the start until the first send is ten seconds old. */
static void windows_survive_a_restart(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", (const char *const[]){"--rate", "6000", NULL});
    set_limits(f, "acme", "{5/s,6/10s}");
    fx_enqueue_many(f, "acme", 12);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/acme", 6, 30000) >= 6);
    fx_stop_service(f, 20000);
    size_t before = receiver_count(f->recv, "/c/acme");
    assert_int_equal(before, 6); /* the window allowed no more */
    fx_run(f, NULL);
    assert_true(fx_wait_log(f, "limit_windows_resumed", 30000));
    assert_true(receiver_wait(f->recv, "/c/acme", 8, 40000) >= 8);
    wait_sends(f, "acme", 8, 20000);
    size_t n;
    int64_t *s = sends_of(f, "acme", &n);
    assert_true(n >= 8);
    print_message("# 7th send %.3f s after the first (window 10 s), most in any 10 s: %zu\n",
                  (double)(s[6] - s[0]) / 1e6, most_in_window(s, n, 10 * SEC));
    assert_true(s[6] - s[0] >= 10 * SEC);
    assert_true(most_in_window(s, n, 10 * SEC) <= 6);
    free(s);
}

/* A host limit of 10/s over three customers of the receiver: two at 600/min and one at 120/min.
 * The host's sends never exceed 10 in any second; the slow one keeps its 2/s and the two others
 * share the rest evenly. */
static void host_limit_is_divided_fairly(void **state)
{
    fx *f = *state;
    receiver_throttle t = {.path_prefix = NULL, /* the whole host */
                           .kind = RECV_SLIDING_WINDOW,
                           .sliding_limit = {10},
                           .sliding_window_ms = {950}};
    assert_int_equal(receiver_throttle_on(f->recv, &t), 0);
    const char *argv[] = {"--db",      f->db->conninfo, "host", "set",
                          "127.0.0.1", "--limit",       "10/s", NULL};
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    fx_customer(f, "big1", (const char *const[]){"--rate", "600", NULL});
    fx_customer(f, "big2", (const char *const[]){"--rate", "600", NULL});
    fx_customer(f, "slow", (const char *const[]){"--rate", "120", NULL});
    fx_enqueue_many(f, "big1", 200);
    fx_enqueue_many(f, "big2", 200);
    fx_enqueue_many(f, "slow", 200);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/", 80, 60000) >= 80);
    fx_stop_service(f, 20000);

    size_t n, na, n1, n2, n3;
    int64_t *s = sends_of(f, "%", &n);
    int64_t *a = arrivals_of(f, "/c/", &na);
    int64_t *s1 = sends_of(f, "big1", &n1);
    int64_t *s2 = sends_of(f, "big2", &n2);
    int64_t *s3 = sends_of(f, "slow", &n3);
    double secs = (double)(s[n - 1] - s[0]) / 1e6;
    print_message("# host 10/s over %.1f s: %zu sends (big1 %zu, big2 %zu, slow %zu); most in "
                  "any 1 s %zu (arrivals, 0.95 s: %zu); 429s: %zu\n",
                  secs, n, n1, n2, n3, most_in_window(s, n, SEC),
                  most_in_window(a, na, SEC - 50000), receiver_count_status(f->recv, "/c/", 429));
    assert_true(most_in_window(s, n, SEC) <= 10);
    assert_true(most_in_window(a, na, SEC - 50000) <= 10);
    assert_int_equal(receiver_count_status(f->recv, "/c/", 429), 0);
    /* The slow customer is within its own rate (and not starved), the two others get about the
     * same: neither less than two thirds of the other. */
    assert_true(most_in_window(s3, n3, SEC) <= 2);
    assert_true(n3 >= 4);
    assert_true(n1 * 3 >= n2 * 2 && n2 * 3 >= n1 * 2);
    /* Each big one got more than the slow one: the unused share flowed to them. */
    assert_true(n1 > n3 && n2 > n3);
    free(s);
    free(a);
    free(s1);
    free(s2);
    free(s3);
}

/* A receiver that announces its token bucket (2/s, burst 4) in the form `form` and throttles
 * beyond it; the customer is configured at 240/min. After the first answer the dispatcher paces
 * at the announced rate: no 429, and no gap under 0.9 x the announced interval (500 ms). */
static void check_announced(fx *f, receiver_announce form, receiver_throttle_kind kind)
{
    receiver_throttle t = {.path_prefix = "/c/acme", .kind = kind, .announce = form};
    if (kind == RECV_TOKEN_BUCKET) {
        t.rate_per_minute = 120;
        t.burst = 4;
    } else {
        t.limit = 4;
        t.window_ms = 2000;
    }
    assert_int_equal(receiver_throttle_on(f->recv, &t), 0);
    fx_customer(f, "acme", (const char *const[]){"--rate", "240", NULL});
    fx_enqueue_many(f, "acme", 40);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/acme", 12, 60000) >= 12);
    size_t n;
    int64_t *a = arrivals_of(f, "/c/acme", &n);
    int64_t gap = min_gap(a, n);
    size_t throttled = receiver_count_status(f->recv, "/c/acme", 429);
    print_message("# announced %d (%s): %zu requests, %zu answered 429, shortest gap %.1f ms\n",
                  (int)form, kind == RECV_TOKEN_BUCKET ? "token bucket" : "fixed window", n,
                  throttled, (double)gap / 1000.0);
    assert_int_equal(throttled, 0);
    if (kind == RECV_TOKEN_BUCKET)
        assert_true(gap >= 450000);
    free(a);
}

static void announced_ietf_policy_paces_before_the_429(void **state)
{
    check_announced(*state, RECV_ANNOUNCE_IETF, RECV_TOKEN_BUCKET);
}

static void announced_early_ietf_fields_pace_before_the_429(void **state)
{
    check_announced(*state, RECV_ANNOUNCE_IETF_EARLY, RECV_TOKEN_BUCKET);
}

/* X-RateLimit-* state no window: what remains is spread until the reset, and none remaining
 * holds the customer until then (a fixed window of 4 per 2 s, epoch and seconds resets). */
static void announced_x_ratelimit_paces_before_the_429(void **state)
{
    check_announced(*state, RECV_ANNOUNCE_X, RECV_FIXED_WINDOW);
}

static void announced_x_ratelimit_epoch_paces_before_the_429(void **state)
{
    check_announced(*state, RECV_ANNOUNCE_X_EPOCH, RECV_FIXED_WINDOW);
}

/* An announcement above the configured rate is not followed above it: a receiver announcing
 * 10/s to a customer at 120/min still gets one request every 500 ms. */
static void announced_limit_never_raises_the_pace(void **state)
{
    fx *f = *state;
    receiver_throttle t = {.path_prefix = "/c/acme",
                           .kind = RECV_TOKEN_BUCKET,
                           .rate_per_minute = 600,
                           .burst = 10,
                           .announce = RECV_ANNOUNCE_IETF};
    assert_int_equal(receiver_throttle_on(f->recv, &t), 0);
    fx_customer(f, "acme", (const char *const[]){"--rate", "120", NULL});
    fx_enqueue_many(f, "acme", 20);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/acme", 8, 60000) >= 8);
    size_t n;
    int64_t *a = arrivals_of(f, "/c/acme", &n);
    print_message("# announced 600/min to a customer at 120/min: shortest gap %.1f ms\n",
                  (double)min_gap(a, n) / 1000.0);
    /* 500 ms apart, less the arrival jitter of a busy machine. */
    assert_true(min_gap(a, n) >= 450000);
    free(a);
}

/* Turned off for the customer, the announcement is not followed: the receiver's 429s find the
 * limit instead (some are answered). */
static void announced_limit_can_be_turned_off(void **state)
{
    fx *f = *state;
    receiver_throttle t = {.path_prefix = "/c/acme",
                           .kind = RECV_TOKEN_BUCKET,
                           .rate_per_minute = 120,
                           .burst = 4,
                           .announce = RECV_ANNOUNCE_IETF};
    assert_int_equal(receiver_throttle_on(f->recv, &t), 0);
    fx_customer(f, "acme",
                (const char *const[]){"--rate", "600", "--ratelimit-headers", "off", NULL});
    fx_enqueue_many(f, "acme", 40);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/acme", 8, 60000) >= 8);
    assert_true(receiver_count_status(f->recv, "/c/acme", 429) > 0);
}

/* A host answering 429 to several of its customers at once is about the host: its effective
 * rate is lowered (the host_throttled event, and the host's rate gauge below its limit). */
static void host_wide_throttle_lowers_the_host(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "INSERT INTO pgpace.host (host, limits) VALUES ('127.0.0.1', '{20/s}')");
    receiver_throttle t = {.path_prefix = NULL,
                           .kind = RECV_TOKEN_BUCKET,
                           .rate_per_minute = 240,
                           .burst = 2,
                           .retry_after = RECV_RA_NONE};
    assert_int_equal(receiver_throttle_on(f->recv, &t), 0);
    const char *names[] = {"h1", "h2", "h3"};
    for (int i = 0; i < 3; i++) {
        fx_customer(f, names[i], (const char *const[]){"--rate", "600", NULL});
        fx_enqueue_many(f, names[i], 100);
    }
    fx_run(f, NULL);
    assert_true(fx_wait_log(f, "host_throttled", 30000));
    /* The event states the rate the host was lowered to. */
    char *log = fx_log(f);
    const char *ev = strstr(log, "host_throttled");
    assert_non_null(ev);
    const char *key = strstr(ev, "effective_rate_per_minute");
    assert_non_null(key);
    key += strlen("effective_rate_per_minute");
    while (*key == '"' || *key == ':' || *key == '=')
        key++;
    double rate = strtod(key, NULL);
    print_message("# host limit 20/s, receiver 4/s for all: host rate lowered to %.1f/min\n", rate);
    assert_true(rate < 1200);
    free(log);
    char *m = fx_metrics(f);
    assert_non_null(strstr(m, "pgpace_host_limit_rate{host=\"127.0.0.1\"}"));
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(windows_are_never_exceeded, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(windows_bind_work_queues_and_batches, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(windows_survive_a_restart, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(customer_windows_bind_all_its_endpoints, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(host_limit_is_divided_fairly, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(announced_ietf_policy_paces_before_the_429, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(announced_early_ietf_fields_pace_before_the_429, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(announced_x_ratelimit_paces_before_the_429, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(announced_x_ratelimit_epoch_paces_before_the_429, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(announced_limit_never_raises_the_pace, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(announced_limit_can_be_turned_off, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(host_wide_throttle_lowers_the_host, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
