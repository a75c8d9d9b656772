/* test_throttle.c - pacing that listens to the receiver, against the test receiver's throttles
 * (a rate-limited API in front of the receiver):
 * - a token bucket at half the configured rate answering 429 with Retry-After: 1: after 20 s
 *   fewer than 10 % of requests are throttled, successes never above the bucket's rate,
 *   nothing is dead-lettered;
 * - a fixed window: no oscillation between double rate and silence (no breaker trips);
 * how close successes come to the receiver's rate depends on the machine's speed and is
 * measured by bench/ (throttle), never asserted here;
 * - Retry-After as a date holds the customer until that date; an absurd one is capped by
 *   retry_after_max_s; one that is not a Retry-After ("soon") counts as none;
 * - without Retry-After the effective rate drops (log, /metrics, the frontier for `pgpace
 *   stats`), throttled attempts are logged as such, give their attempt back and never open the
 *   breaker, however many;
 * - a 503 without Retry-After still slows the customer but is a failure (it ends in a dead
 *   letter), since a receiver that is down answers 503 forever.
 * Measured from the receiver's arrival times and statuses; figures printed as "# ..." lines. */
#include "fixture.h"
#include "receiver.h"
#include "testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The recorded requests of a path prefix (owned, bodies freed); *n gets the count. */
static receiver_request *requests(receiver *r, const char *prefix, size_t *n)
{
    size_t total = receiver_count(r, NULL), k = 0;
    receiver_request *v = calloc(total + 1, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < total; i++) {
        receiver_request q;
        if (receiver_get(r, i, &q) != 0)
            break;
        free(q.body);
        q.body = NULL;
        if (strncmp(q.path, prefix, strlen(prefix)) == 0)
            v[k++] = q;
    }
    *n = k;
    return v;
}

/* Lets the receiver record until `until_us` (the receiver's own wait is the clock). */
static void record_until(fx *f, int64_t until_us)
{
    while (fx_now_us() < until_us)
        receiver_wait(f->recv, "/never/", 1, 200);
}

typedef struct window_counts {
    size_t requests, throttled, ok;
    double max_gap_s;
} window_counts;

static window_counts count_window(const receiver_request *v, size_t n, int64_t from, int64_t to)
{
    window_counts w = {0};
    int64_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].at_us < from || v[i].at_us >= to)
            continue;
        w.requests++;
        w.throttled += v[i].throttled != 0;
        w.ok += v[i].status == 200;
        if (prev && (double)(v[i].at_us - prev) / 1e6 > w.max_gap_s)
            w.max_gap_s = (double)(v[i].at_us - prev) / 1e6;
        prev = v[i].at_us;
    }
    return w;
}

static long long dead_letters(fx *f)
{
    return tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter");
}

/* The case: spaced at 120/min, a token bucket of 60/min with burst 2 answering 429 with
 * Retry-After: 1 beyond it. */
static void token_bucket_at_half_the_rate(void **state)
{
    fx *f = *state;
    assert_int_equal(receiver_throttle_on(f->recv, &(receiver_throttle){.path_prefix = "/c/tb",
                                                                        .kind = RECV_TOKEN_BUCKET,
                                                                        .rate_per_minute = 60,
                                                                        .burst = 2,
                                                                        .retry_after_s = 1}),
                     0);
    fx_customer(f, "tb", TL_ARGV("--mode", "spaced", "--rate", "120"));
    fx_enqueue_many(f, "tb", 300);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/tb", 1, 10000) >= 1);
    size_t n = 0;
    receiver_request *v = requests(f->recv, "/c/tb", &n);
    int64_t t0 = v[0].at_us;
    free(v);
    record_until(f, t0 + 50 * 1000000LL);
    v = requests(f->recv, "/c/tb", &n);
    window_counts first = count_window(v, n, t0, t0 + 20 * 1000000LL);
    window_counts w = count_window(v, n, t0 + 20 * 1000000LL, t0 + 50 * 1000000LL);
    print_message("# first 20 s: %zu requests, %zu throttled; next 30 s: %zu requests, %zu "
                  "throttled (%.1f %%), %zu successes = %.1f/min (bucket 60/min)\n",
                  first.requests, first.throttled, w.requests, w.throttled,
                  w.requests ? 100.0 * (double)w.throttled / (double)w.requests : 0, w.ok,
                  (double)w.ok * 2);
    /* Guaranteed: it sends, it has found the bucket (few 429s), and never gets more through
     * than the bucket lets. How close successes come to the bucket's rate depends on how
     * promptly a busy machine sends at each slot: measured by bench/ (throttle), not here. */
    assert_true(w.ok > 0);
    assert_true((double)w.throttled < 0.10 * (double)w.requests);
    assert_true((double)w.ok <= 1.1 * 30 + 2);
    assert_int_equal(dead_letters(f), 0);
    /* Throttled attempts are logged with their own outcome and gave their attempt back. */
    assert_true(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt "
                                          "WHERE outcome = 'throttled'") > 0);
    assert_true(tl_query_int(f->db->conn, "SELECT coalesce(max(attempt), 0) FROM pgpace.queue") <=
                1);
    free(v);
}

/* A fixed window of 2 requests per 2 s (60/min) with Retry-After until the window ends, fed at
 * 120/min: the customer settles at the window's rate instead of oscillating between double rate
 * and a breaker's silence. */
static void fixed_window_without_oscillation(void **state)
{
    fx *f = *state;
    assert_int_equal(receiver_throttle_on(f->recv, &(receiver_throttle){.path_prefix = "/c/fw",
                                                                        .kind = RECV_FIXED_WINDOW,
                                                                        .limit = 2,
                                                                        .window_ms = 2000}),
                     0);
    fx_customer(f, "fw", TL_ARGV("--mode", "spaced", "--rate", "120"));
    fx_enqueue_many(f, "fw", 200);
    fx_run(f, "delivery.breaker_failures = 3\n");
    assert_true(receiver_wait(f->recv, "/c/fw", 1, 10000) >= 1);
    size_t n = 0;
    receiver_request *v = requests(f->recv, "/c/fw", &n);
    int64_t t0 = v[0].at_us;
    free(v);
    record_until(f, t0 + 40 * 1000000LL);
    v = requests(f->recv, "/c/fw", &n);
    window_counts w = count_window(v, n, t0 + 20 * 1000000LL, t0 + 40 * 1000000LL);
    print_message("# fixed window 2 per 2 s, after 20 s for 20 s: %zu requests, %zu throttled, %zu "
                  "successes (window allows 20), longest gap %.2f s\n",
                  w.requests, w.throttled, w.ok, w.max_gap_s);
    /* No oscillation: never double the rate (40), and no breaker trip (below), whose 30 s
     * cooldown was the silence. The successes' share of the window is a measurement (bench/,
     * throttle). */
    assert_true(w.ok > 0);
    assert_true(w.requests <= 26);
    assert_int_equal(dead_letters(f), 0);
    char *log = fx_log(f);
    assert_null(strstr(log, "breaker_opened"));
    free(log);
    free(v);
}

/* Retry-After as an HTTP date 2 s ahead: nothing goes out before it. */
static void retry_after_date_holds_the_customer(void **state)
{
    fx *f = *state;
    assert_int_equal(receiver_throttle_on(f->recv, &(receiver_throttle){.path_prefix = "/c/rd",
                                                                        .kind = RECV_TOKEN_BUCKET,
                                                                        .rate_per_minute = 6,
                                                                        .burst = 1,
                                                                        .retry_after = RECV_RA_DATE,
                                                                        .retry_after_s = 2}),
                     0);
    fx_customer(f, "rd", TL_ARGV("--mode", "spaced", "--rate", "600"));
    fx_enqueue_many(f, "rd", 50);
    fx_run(f, NULL);
    assert_true(receiver_wait(f->recv, "/c/rd", 6, 20000) >= 6);
    size_t n = 0;
    receiver_request *v = requests(f->recv, "/c/rd", &n);
    size_t held = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (!v[i].throttled)
            continue;
        double gap = (double)(v[i + 1].at_us - v[i].at_us) / 1e6;
        print_message("# throttled at +%.3f s, next request %.3f s later\n",
                      (double)(v[i].at_us - v[0].at_us) / 1e6, gap);
        assert_true(gap >= 1.9); /* the date is at least 2 s ahead, to the second */
        held++;
    }
    assert_true(held >= 2);
    assert_int_equal(dead_letters(f), 0);
    free(v);
}

/* Retry-After "99999999999" is capped by retry_after_max_s (2 s here): the customer resumes
 * after 2 s, not in 3,000 years. */
static void absurd_retry_after_is_capped(void **state)
{
    fx *f = *state;
    assert_int_equal(
        receiver_throttle_on(f->recv, &(receiver_throttle){.path_prefix = "/c/ab",
                                                           .kind = RECV_TOKEN_BUCKET,
                                                           .rate_per_minute = 6,
                                                           .burst = 1,
                                                           .retry_after = RECV_RA_LITERAL,
                                                           .retry_after_literal = "99999999999"}),
        0);
    fx_customer(f, "ab", TL_ARGV("--mode", "spaced", "--rate", "600"));
    fx_enqueue_many(f, "ab", 50);
    fx_run(f, "delivery.retry_after_max_s = 2\n");
    assert_true(receiver_wait(f->recv, "/c/ab", 5, 20000) >= 5);
    size_t n = 0;
    receiver_request *v = requests(f->recv, "/c/ab", &n);
    size_t held = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (!v[i].throttled)
            continue;
        double gap = (double)(v[i + 1].at_us - v[i].at_us) / 1e6;
        print_message("# throttled, next request %.3f s later (cap 2 s)\n", gap);
        assert_true(gap >= 1.9 && gap < 5.0);
        held++;
    }
    assert_true(held >= 2);
    free(v);
}

typedef struct effective_wait {
    fx *f;
    double below;
} effective_wait;

static int effective_rate_recorded(void *arg)
{
    effective_wait *w = arg;
    return tl_query_int(w->f->db->conn,
                        "SELECT count(*) FROM pgpace.frontier f JOIN pgpace.customer c "
                        "ON c.id = f.customer_id WHERE c.name = 'na' AND f.effective_rate < %g",
                        w->below) > 0;
}

/* 429 without Retry-After, and "soon" (not a Retry-After): the effective rate drops and is
 * shown; throttled attempts give their attempt back, so with max_attempts 2 and breaker_failures
 * 3 many throttles neither dead-letter an item nor open the breaker. */
static void no_retry_after_lowers_the_rate(void **state)
{
    fx *f = *state;
    assert_int_equal(
        receiver_throttle_on(f->recv, &(receiver_throttle){.path_prefix = "/c/na",
                                                           .kind = RECV_TOKEN_BUCKET,
                                                           .rate_per_minute = 30,
                                                           .burst = 1,
                                                           .retry_after = RECV_RA_LITERAL,
                                                           .retry_after_literal = "soon"}),
        0);
    fx_customer(f, "na", TL_ARGV("--mode", "spaced", "--rate", "240", "--max-attempts", "2"));
    fx_enqueue_many(f, "na", 100);
    fx_run(f, "delivery.breaker_failures = 3\n");
    assert_true(fx_wait_log(f, "event=pace_lowered", 15000));
    effective_wait w = {f, 240};
    assert_true(tl_wait_until(effective_rate_recorded, &w, 10000));
    /* Enough throttles for the breaker (3) and the attempts (2) many times over. */
    assert_true(tl_wait_query_at_least(f->db->conn, 10, 30000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt "
                                       "WHERE outcome = 'throttled'") >= 10);
    assert_int_equal(dead_letters(f), 0);
    char *log = fx_log(f);
    assert_null(strstr(log, "breaker_opened"));
    free(log);
    char *m = fx_metrics(f);
    const char *g = strstr(m, "pgpace_customer_effective_rate{customer=\"na\"} ");
    assert_non_null(g);
    double rate = atof(strchr(g, '}') + 2);
    print_message("# effective rate %.2f/min (configured 240, bucket 30/min)\n", rate);
    assert_true(rate < 240);
    free(m);
    /* `pgpace stats` shows it. */
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", f->db->conninfo, "stats", "--customer", "na"), NULL, NULL);
    assert_int_equal(p.status, 0);
    assert_non_null(strstr(p.out, "eff_rate"));
    /* The effective rate shown is the recorded one, below the configured 240. */
    char *shown = tl_query_str(f->db->conn, "SELECT effective_rate_per_minute FROM "
                                            "pgpace.customer_stats WHERE customer = 'na'");
    assert_true(atof(shown) > 0 && atof(shown) < 240);
    free(shown);
    tl_proc_free(&p);
}

/* A 503 without Retry-After: the customer slows, and the attempts count (max_attempts 2: the
 * item is dead-lettered). */
static void unavailable_without_retry_after_is_a_failure(void **state)
{
    fx *f = *state;
    assert_int_equal(
        receiver_throttle_on(f->recv, &(receiver_throttle){.path_prefix = "/c/un",
                                                           .kind = RECV_FIXED_WINDOW,
                                                           .limit = 0,
                                                           .window_ms = 60000,
                                                           .status = 503,
                                                           .retry_after = RECV_RA_NONE}),
        0);
    fx_customer(f, "un", TL_ARGV("--mode", "spaced", "--rate", "600", "--max-attempts", "2"));
    fx_enqueue(f, "un", NULL, 1);
    fx_run(f, NULL);
    assert_true(tl_wait_query_at_least(f->db->conn, 1, 20000,
                                       "SELECT count(*) FROM pgpace.dead_letter") >= 1);
    assert_true(fx_wait_log(f, "event=pace_lowered", 5000));
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.delivery_attempt "
                                               "WHERE outcome = 'throttled'"),
                     0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(token_bucket_at_half_the_rate, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(fixed_window_without_oscillation, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(retry_after_date_holds_the_customer, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(absurd_retry_after_is_capped, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(no_retry_after_lowers_the_rate, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(unavailable_without_retry_after_is_a_failure, fx_setup,
                                        fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
