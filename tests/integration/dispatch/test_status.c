/* test_status.c - GET /v1/status, the live status page's data, against a running dispatcher, a
 * real database and the loopback receiver; every answer parsed as JSON (tests/lib/status_client):
 * - the answer's shape and numbers: instance, role, leader, instances; each customer's mode,
 *   rate, burst as configured; the gaps between a spaced customer's requests never shorter than
 *   its period; a batch customer's requests per tick never above its allowance and reaching it;
 *   requests per minute over the window observed (partial in the first minute, the rate the
 *   count over it, bounded by the spacing) matching what the receiver got; the carriers with their
 * caps (never exceeded) and no "" carrier; the queue counts as of the leader's queue-gauge refresh:
 * every customer's counts_at is the totals' totals_at and the totals are their sums, a draining
 *   backlog's due count falls at a later refresh (never between two), and a refresh after a
 *   customer's queue emptied counts nothing for it;
 * - paging, sorting and filtering over 120 customers: pages cover each customer once, in order;
 *   descending name; case-insensitive filter; rate with ties by name; problems first for state
 *   (disabled, held, failing with its breaker open, paused); a disabled customer's health says
 *   since when; a held customer is not paused; the exact counts of
 *   customers that send nothing, the dead letter of the broken one as the database had it at
 *   counts_at, and oldest_due_s from the items' due time; bad parameters refused with 400 naming
 *   the parameter;
 * - a customer throttled by its receiver (429 without Retry-After): effective rate below the
 *   configured one, throttled, last_error http/429;
 * - a customer whose receiver answers 404 to everything: health failing (since when, as the
 *   database recorded it; failures in a row; when it may be disabled, not before
 *   disable_after), first by state though its breaker stays closed; ok again, recovered, once
 *   the receiver answers;
 * - no secret in the answer: signing secret, header value, Basic password, payload, URL and the
 *   receiver's error body all reached the dispatcher, none reaches the page; the leader keeps
 *   the customer's failure (last_error) after later successes;
 * - a deep backlog (10,001 items) counted exactly once counts_at is set, the totals as well;
 * - endpoints (0018): a customer with endpoints is one entry whose `endpoints` hold each
 *   endpoint's figures and health (its own receiver first, as "default"), its own figures their
 *   sums and worst (one failing endpoint makes it failing, counted in `problems`, first by
 *   state, its last error naming the endpoint); a customer without a receiver is listed by its
 *   endpoints, with its limit and the dead letter its deleted endpoint left; a customer alone
 *   is as before with "endpoints": []; the filter finds a customer by an endpoint's name; and
 *   /metrics names the endpoints' series customer="shop",endpoint="crm" (its own receiver's
 *   endpoint="default" once it has endpoints), a customer alone's as before, and gives a
 *   customer without a receiver no queue series of its own.
 * The status token, a standby's answer and the database cut off: test_status_access.c.
 * The poll loops wait on conditions with deadlines (tl_wait_until). */
#include "fixture.h"
#include "common.h"
#include "status_client.h"
#include "strbuf.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *take(strbuf *sb)
{
    char *s = strdup(strbuf_str(sb) ? strbuf_str(sb) : "");
    assert_non_null(s);
    strbuf_free(sb);
    return s;
}

/* Items of a customer in the queue that the queue gauges count (next_action_at set): due,
 * delayed and claimed ones. */
static long long queued(fx *f, const char *customer)
{
    return tl_query_int(f->db->conn,
                        "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer c "
                        "ON c.id = q.customer_id WHERE c.name = '%s' AND q.next_action_at IS "
                        "NOT NULL",
                        customer);
}

static long long dead_of(fx *f, const char *customer)
{
    return tl_query_int(f->db->conn,
                        "SELECT count(*) FROM pgpace.dead_letter d JOIN pgpace.customer c "
                        "ON c.id = d.customer_id WHERE c.name = '%s'",
                        customer);
}

/* When a customer's oldest due item became due, in epoch seconds (its next_action_at; items
 * enqueued by one statement share it); fails when it has none. */
static double due_since(fx *f, const char *customer)
{
    char *s = tl_query_str(f->db->conn,
                           "SELECT extract(epoch FROM min(q.next_action_at)) FROM pgpace.queue q "
                           "JOIN pgpace.customer c ON c.id = q.customer_id "
                           "WHERE c.name = '%s' AND q.next_action_at <= now()",
                           customer);
    double v = strtod(s, NULL);
    free(s);
    if (!(v > 0))
        fail_msg("%s has nothing due", customer);
    return v;
}

/* A customer's oldest_due_s in answer j: the age at generated_at of its items due since
 * `since` (epoch s): within 0.5 s (the answer's tenths, and the refresh's own clock reading). */
static void assert_oldest_due(const json_t *j, const char *name, double since)
{
    double age = sc_num(sc_customer(j, name), "oldest_due_s");
    double want = sc_iso_seconds(sc_str(j, "generated_at")) - since;
    if (fabs(age - want) > 0.5)
        fail_msg("%s: oldest_due_s %.1f, but its items have been due %.2f s", name, age, want);
}

/* What every answer's counts hold: each listed customer's come from the refresh the totals come
 * from (counts_at is totals_at, after `started` and not after generated_at), none negative, an
 * oldest due age exactly when something is due; and when the page lists every customer, the
 * totals are their sums. */
static void check_refresh(const json_t *j, double started)
{
    json_t *totals = sc_get(j, "totals");
    const char *at = sc_str(totals, "totals_at");
    double at_s = sc_iso_seconds(at);
    if (at_s < started || at_s > sc_iso_seconds(sc_str(j, "generated_at")))
        fail_msg("totals_at %s is not between the start and the answer: %s", at, sc_dump(j));
    double due = 0, dead = 0;
    json_t *customers = sc_arr(j, "customers"), *c;
    size_t i;
    json_array_foreach(customers, i, c)
    {
        if (strcmp(sc_str(c, "counts_at"), at) != 0)
            fail_msg("%s: counts_at %s, the totals' %s", sc_str(c, "name"), sc_str(c, "counts_at"),
                     at);
        assert_true(sc_num(c, "due") >= 0 && sc_num(c, "delayed") >= 0 && sc_num(c, "dead") >= 0);
        if (sc_num(c, "due") > 0)
            assert_true(sc_num(c, "oldest_due_s") >= 0);
        else
            sc_null(c, "oldest_due_s");
        due += sc_num(c, "due");
        dead += sc_num(c, "dead");
    }
    if (sc_num(totals, "matched") == sc_num(totals, "customers") &&
        json_array_size(customers) == sc_num(totals, "customers")) {
        if (sc_num(totals, "due") != due || sc_num(totals, "dead_letters") != dead)
            fail_msg("totals due %.0f, dead_letters %.0f; the customers' sums %.0f, %.0f",
                     sc_num(totals, "due"), sc_num(totals, "dead_letters"), due, dead);
    }
}

static void pgpace_ok(fx *f, const char *const *args)
{
    const char *argv[24] = {"--db", f->db->conninfo};
    size_t n = 2;
    for (; *args && n < 23; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    if (p.status != 0)
        fail_msg("pgpace %s %s failed (%d): %s", argv[2], argv[3], p.status, p.err);
    tl_proc_free(&p);
}

/* ---- 1. the answer's shape and numbers ----------------------------------------------------- */

/* The customers of the first case: spaced at two rates, batch, and unlimited with a carrier. */
#define FAST_RATE    600 /* spaced: a request every 100 ms */
#define SLOW_RATE    120 /* spaced: every 500 ms */
#define BATCH_RATE   5   /* per tick */
#define FREE_MAX_IF  3   /* the unlimited customer's max_in_flight */
#define NOISY_ROUND  3   /* its carrier's caps */
#define NOISY_IF     2
#define GAP_SLACK_MS 3 /* gaps are whole ms of another clock than the one spacing reads */
#define FAST_ITEMS   300
#define FREE_ITEMS   30

/* Invariants of every answer in the first case; true once enough has been seen. */
static bool shape_ready(const json_t *j, void *arg)
{
    fx *f = arg;
    if (!sc_leading_with(j, "fast") || !sc_leading_with(j, "slow") ||
        !sc_leading_with(j, "batch") || !sc_leading_with(j, "free"))
        return false;
    bool ready = true;
    static const struct {
        const char *name;
        int rate;
        size_t want_gaps;
    } spaced[] = {{"fast", FAST_RATE, 20}, {"slow", SLOW_RATE, 4}};
    for (size_t s = 0; s < PGP_ARRAY_LEN(spaced); s++) {
        json_t *c = sc_customer(j, spaced[s].name);
        double period = 60000.0 / spaced[s].rate;
        assert_true(fabs(sc_num(c, "period_ms") - period) < 0.001);
        json_t *gaps = sc_arr(c, "gaps_ms"), *g;
        size_t i;
        assert_true(json_array_size(gaps) <= 30);
        json_array_foreach(gaps, i, g)
        {
            if (json_number_value(g) < period - GAP_SLACK_MS)
                fail_msg("%s: gap %zu of %.0f ms is shorter than its period %.0f ms: %s",
                         spaced[s].name, i, json_number_value(g), period, sc_dump(gaps));
        }
        ready = ready && json_array_size(gaps) >= spaced[s].want_gaps;
    }
    json_t *b = sc_customer(j, "batch");
    assert_true(sc_num(b, "allowance") == BATCH_RATE);
    json_t *ticks = sc_arr(b, "tick_counts"), *t;
    size_t i;
    bool full = false;
    assert_true(json_array_size(ticks) <= 30);
    json_array_foreach(ticks, i, t)
    {
        if (json_number_value(t) > BATCH_RATE)
            fail_msg("batch: %.0f requests in one tick, above its allowance %d: %s",
                     json_number_value(t), BATCH_RATE, sc_dump(ticks));
        full = full || json_number_value(t) == BATCH_RATE;
    }
    json_t *free_c = sc_customer(j, "free");
    assert_true(sc_num(free_c, "in_flight") >= 0 && sc_num(free_c, "in_flight") <= FREE_MAX_IF);
    json_t *noisy = sc_find(j, "carriers", "name", "noisy");
    if (!noisy)
        fail_msg("carrier noisy is not listed: %s", sc_dump(j));
    assert_true(sc_num(noisy, "in_flight") >= 0 && sc_num(noisy, "in_flight") <= NOISY_IF);
    /* The first queue-gauge refresh runs when the dispatcher becomes leader. */
    return ready && full && receiver_count(f->recv, "/c/free") >= FREE_ITEMS &&
           sc_counted(sc_customer(j, "fast"));
}

static int free_gone(void *arg)
{
    return queued(arg, "free") == 0;
}

/* One refresh's counts of a customer, and the answers that showed them. */
typedef struct same_counts {
    const char *name;
    char *at; /* its counts_at */
    double due, delayed;
    double after; /* epoch s: the refresh awaited is later */
    int alike;
} same_counts;

/* Every answer with the same counts_at has the same counts (none is counted per poll); true
 * once the counts come from a refresh later than w->after. */
static bool refreshed_after(const json_t *j, void *arg)
{
    same_counts *w = arg;
    json_t *c = sc_customer(j, w->name);
    const char *at = sc_str(c, "counts_at");
    if (strcmp(at, w->at) == 0) {
        if (sc_num(c, "due") != w->due || sc_num(c, "delayed") != w->delayed)
            fail_msg("%s: due %.0f, delayed %.0f at %s; %.0f, %.0f before at the same counts_at",
                     w->name, sc_num(c, "due"), sc_num(c, "delayed"), at, w->due, w->delayed);
        w->alike++;
    }
    return sc_iso_seconds(at) > w->after;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Observed requests per minute: the requests of the last minute over the part of it the
 * dispatcher observed (it began leading after `started`, epoch s), as the answer itself gives
 * them: the rate is the count times 60 over the window (the rate's tenths, the window's
 * milliseconds), the window no longer than the time since the start, and, while that is under
 * 55 s, partial and holding every request sent (the receiver's, and those in flight). The
 * spacing bounds the count: at most a burst and one per period in the window (+ 1 for the
 * clocks). Nothing is asserted against the clock's idea of the rate: on a busy machine the
 * dispatcher may send late, never early. */
static void check_observed(fx *f, int port, const char *name, double started)
{
    char path[64];
    snprintf(path, sizeof path, "/c/%s", name);
    size_t before = receiver_count(f->recv, path);
    json_t *j = sc_status_get(port, NULL);
    size_t after = receiver_count(f->recv, path);
    json_t *c = sc_customer(j, name);
    double observed = sc_num(c, "observed_per_minute");
    double count = sc_num(c, "observed_count"), window = sc_num(c, "observed_window_s");
    double in_flight = sc_num(c, "in_flight");
    double since_start = sc_iso_seconds(sc_str(j, "generated_at")) - started;
    print_message("# %s: observed %.1f/min, %.0f requests in %.3f s (partial: %d, %.1f s after "
                  "the start); the receiver had %zu then %zu requests\n",
                  name, observed, count, window, sc_bool(c, "observed_partial"), since_start,
                  before, after);
    if (fabs(observed - count * 60 / window) > 0.05 + 1e-9)
        fail_msg("%s: observed_per_minute %.1f is not %.0f requests over %.3f s", name, observed,
                 count, window);
    if (window <= 0 || window > 60 || window > since_start + 1)
        fail_msg("%s: a window of %.3f s, %.1f s after the start", name, window, since_start);
    if (since_start < 55) {
        assert_true(sc_bool(c, "observed_partial"));
        if (count < (double)before || count > (double)after + in_flight + 1)
            fail_msg("%s: %.0f requests counted; the receiver had %zu then %zu, %.0f in flight",
                     name, count, before, after, in_flight);
    }
    double period_s = sc_num(c, "period_ms") / 1000;
    if (count > sc_num(c, "burst") + floor(window / period_s) + 1)
        fail_msg("%s: %.0f requests in %.3f s, more than a burst of %.0f and one per %.3f s", name,
                 count, window, sc_num(c, "burst"), period_s);
    /* The gaps are those of the latest requests: as many as were sent, up to 30; spacing keeps
     * each at least the period (shape_ready), and a dispatcher keeping up keeps them near it. */
    json_t *gaps = sc_arr(c, "gaps_ms");
    size_t n_gaps = json_array_size(gaps);
    assert_true(n_gaps == 30 || n_gaps + 1 >= before);
    assert_true(n_gaps > 0);
    double v[30];
    for (size_t i = 0; i < n_gaps && i < 30; i++)
        v[i] = json_number_value(json_array_get(gaps, i));
    qsort(v, n_gaps, sizeof *v, cmp_double);
    double period = sc_num(c, "period_ms"), median = v[n_gaps / 2];
    char *shown = sc_dump(gaps);
    print_message("# %s: gaps %s (period %.0f ms)\n", name, shown, period);
    free(shown);
    if (median > 1.5 * period + 20)
        fail_msg("%s: the median gap %.0f ms is far above the period %.0f ms", name, median,
                 period);
    json_decref(j);
}

/* A batch customer's tick counts: every request since the start (the case lasts less than 30
 * ticks), so their sum is what the receiver got. */
static void check_ticks(fx *f, int port)
{
    size_t before = receiver_count(f->recv, "/c/batch");
    json_t *j = sc_status_get(port, NULL);
    size_t after = receiver_count(f->recv, "/c/batch");
    json_t *ticks = sc_arr(sc_customer(j, "batch"), "tick_counts"), *t;
    size_t i;
    double sum = 0;
    json_array_foreach(ticks, i, t)
    {
        sum += json_number_value(t);
    }
    char *shown = sc_dump(ticks);
    print_message("# batch: %.0f requests in the ticks %s; the receiver had %zu then %zu\n", sum,
                  shown, before, after);
    if (sum < (double)before || sum > (double)(after + BATCH_RATE))
        fail_msg("batch: %.0f requests in its ticks, the receiver had %zu then %zu", sum, before,
                 after);
    free(shown);
    json_decref(j);
}

static void answer_shape_and_numbers(void **state)
{
    fx *f = *state;
    fx_customer(f, "fast", TL_ARGV("--mode", "spaced", "--rate", "600", "--burst", "1"));
    fx_customer(f, "slow", TL_ARGV("--mode", "spaced", "--rate", "120"));
    fx_customer(f, "batch", TL_ARGV("--mode", "batch", "--rate", "5"));
    fx_customer(f, "free", TL_ARGV("--mode", "unlimited", "--rate", "1", "--max-in-flight", "3"));
    pgpace_ok(f,
              TL_ARGV("carrier", "set", "noisy", "--max-per-round", "3", "--max-in-flight", "2"));
    fx_enqueue_many(f, "fast", FAST_ITEMS);
    fx_enqueue_many(f, "slow", 40);
    fx_enqueue_many(f, "batch", 60);
    fx_enqueue(f, "free", "noisy", FREE_ITEMS);
    double fast_due_since = due_since(f, "fast");
    double started = sc_now_s();
    fx_run(f, "dispatcher.instance_name = alpha\ndispatcher.batch_tick_ms = 1000\n");
    int port = fx_admin_port(f);

    json_t *j = sc_wait_status(port, NULL, shape_ready, f, 20000,
                               "20 gaps of fast, 4 of slow, a full batch tick, free delivered, "
                               "the queue counted");

    /* The instance and its role. */
    tl_proc v = tl_pgpace(TL_ARGV("version"), NULL, NULL);
    assert_int_equal(v.status, 0);
    tl_assert_contains(v.out, sc_str(j, "version"));
    tl_proc_free(&v);
    assert_true(fabs(sc_iso_seconds(sc_str(j, "generated_at")) - sc_now_s()) < 5);
    assert_string_equal(sc_str(j, "instance"), "alpha");
    assert_string_equal(sc_str(j, "role"), "leader");
    assert_string_equal(sc_str(j, "leader"), "alpha");
    assert_string_equal(sc_str(j, "database"), "ok");
    assert_true(sc_bool(j, "live"));
    assert_true(sc_num(j, "poll_ms") > 0);
    assert_true(sc_num(j, "batch_tick_ms") == 1000);
    json_t *instances = sc_arr(j, "instances");
    assert_int_equal(json_array_size(instances), 1);
    json_t *me = json_array_get(instances, 0);
    assert_string_equal(sc_str(me, "instance"), "alpha");
    assert_string_equal(sc_str(me, "role"), "leader");
    assert_true(sc_num(me, "pid") > 0);
    assert_true(strlen(sc_str(me, "client")) > 0);
    assert_true(sc_iso_seconds(sc_str(me, "since")) <= sc_now_s() + 1);

    /* Totals and the page. */
    json_t *totals = sc_get(j, "totals");
    assert_true(sc_num(totals, "customers") ==
                tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.customer"));
    assert_true(sc_num(totals, "matched") == 4);
    static const char *const zero[] = {"paused", "disabled", "held", "breaker_open", "throttled"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(zero); i++)
        assert_true(sc_num(totals, zero[i]) == 0);
    /* Nobody failed: no dead letters in the database, none counted. */
    assert_true(sc_num(totals, "dead_letters") ==
                tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter"));
    check_refresh(j, started);
    json_t *page = sc_get(j, "page");
    assert_true(sc_num(page, "offset") == 0 && sc_num(page, "limit") == 50);
    assert_string_equal(sc_str(page, "sort"), "name");
    assert_string_equal(sc_str(page, "filter"), "");
    char *names = sc_names(j);
    assert_string_equal(names, "batch\nfast\nfree\nslow\n");
    free(names);

    /* Each customer as configured (the database's row), and its state. */
    double in_flight_sum = 0;
    json_t *c;
    size_t i;
    json_array_foreach(sc_arr(j, "customers"), i, c)
    {
        const char *name = sc_str(c, "name");
        char *mode =
            tl_query_str(f->db->conn, "SELECT mode FROM pgpace.customer WHERE name = '%s'", name);
        assert_string_equal(sc_str(c, "mode"), mode);
        free(mode);
        assert_true(sc_num(c, "rate") ==
                    tl_query_int(f->db->conn,
                                 "SELECT rate_per_minute FROM pgpace.customer WHERE name = '%s'",
                                 name));
        assert_true(
            sc_num(c, "burst") ==
            tl_query_int(f->db->conn, "SELECT burst FROM pgpace.customer WHERE name = '%s'", name));
        assert_true(sc_num(c, "effective_rate") == sc_num(c, "rate"));
        assert_false(sc_bool(c, "throttled"));
        assert_true(sc_num(c, "observed_per_minute") > 0);
        assert_true(sc_num(c, "in_flight") >= 0);
        assert_true(sc_num(c, "dead") == dead_of(f, name));
        assert_string_equal(sc_str(c, "breaker"), "closed");
        sc_null(c, "breaker_open_until");
        assert_false(sc_bool(c, "paused"));
        assert_false(sc_bool(c, "disabled"));
        sc_null(c, "held");
        sc_null(c, "last_error");
        in_flight_sum += sc_num(c, "in_flight");
    }
    assert_true(sc_num(totals, "in_flight") >= in_flight_sum);
    assert_true(sc_num(sc_customer(j, "fast"), "burst") == 1);
    assert_true(sc_num(sc_customer(j, "free"), "max_in_flight") == FREE_MAX_IF);
    assert_true(sc_num(sc_customer(j, "fast"), "max_in_flight") == 0);
    /* Mode-specific fields. */
    json_t *fast = sc_customer(j, "fast"), *batch = sc_customer(j, "batch"),
           *free_c = sc_customer(j, "free");
    sc_null(fast, "allowance");
    sc_null(fast, "tick_counts");
    sc_null(batch, "period_ms");
    sc_null(batch, "gaps_ms");
    assert_true(sc_num(batch, "allowance") == sc_num(batch, "rate"));
    sc_null(free_c, "period_ms");
    sc_null(free_c, "allowance");
    sc_null(free_c, "tick_counts");
    sc_arr(free_c, "gaps_ms");
    /* Only the carrier an operator set, with its caps; not the items without one (""). */
    assert_true(sc_num(j, "carriers_total") ==
                tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.carrier"));
    assert_int_equal(json_array_size(sc_arr(j, "carriers")), 1);
    assert_null(sc_find(j, "carriers", "name", ""));
    json_t *noisy = sc_find(j, "carriers", "name", "noisy");
    assert_non_null(noisy);
    assert_true(sc_num(noisy, "max_per_round") == NOISY_ROUND);
    assert_true(sc_num(noisy, "max_in_flight") == NOISY_IF);
    json_decref(j);

    /* Requests per minute as the receiver counted them. */
    check_observed(f, port, "fast", started);
    check_observed(f, port, "slow", started);
    check_ticks(f, port);

    /* The queue counts are the refresh's: while counts_at stays, so do they, though fast's
     * backlog drains meanwhile; a later refresh has fewer of fast's items due, at most what the
     * queue held before it, the age of those enqueued first, and nothing of free once its queue
     * is empty. */
    assert_true(tl_wait_until(free_gone, f, 10000));
    double emptied = sc_now_s();
    long long fast_left = queued(f, "fast");
    j = sc_status_get(port, NULL);
    check_refresh(j, started);
    fast = sc_customer(j, "fast");
    same_counts seen = {.name = "fast",
                        .at = strdup(sc_str(fast, "counts_at")),
                        .due = sc_num(fast, "due"),
                        .delayed = sc_num(fast, "delayed")};
    assert_non_null(seen.at);
    assert_true(seen.due > 0 && seen.due + seen.delayed <= FAST_ITEMS);
    assert_oldest_due(j, "fast", fast_due_since);
    json_decref(j);
    /* A later refresh, whose snapshot came after the check. */
    seen.after = fmax(emptied + 1, sc_iso_seconds(seen.at));
    j = sc_wait_status(port, NULL, refreshed_after, &seen, 20000,
                       "a queue-gauge refresh after free's queue emptied");
    check_refresh(j, started);
    fast = sc_customer(j, "fast");
    double due2 = sc_num(fast, "due");
    print_message("# fast: due %.0f at %s (%d answers alike), then %.0f at %s\n", seen.due, seen.at,
                  seen.alike, due2, sc_str(fast, "counts_at"));
    if (!(due2 < seen.due))
        fail_msg("fast: due %.0f, then %.0f at a later refresh", seen.due, due2);
    assert_true(due2 + sc_num(fast, "delayed") <= (double)fast_left);
    if (due2 > 0)
        assert_oldest_due(j, "fast", fast_due_since);
    json_t *free_c2 = sc_customer(j, "free");
    assert_true(sc_num(free_c2, "due") == 0 && sc_num(free_c2, "delayed") == 0 &&
                sc_num(free_c2, "dead") == 0);
    sc_null(free_c2, "oldest_due_s");
    json_decref(j);
    free(seen.at);
    fx_stop_service(f, 15000);
}

/* ---- 2. paging, sorting, filtering --------------------------------------------------------- */

#define N_MANY 120

typedef struct many_c {
    char name[32];
    int rate;
    int severity; /* the order of sort=state: higher first */
} many_c;

static many_c many[N_MANY];

static int by_name(const void *a, const void *b)
{
    return strcmp(many[*(const int *)a].name, many[*(const int *)b].name);
}

static int by_rate(const void *a, const void *b)
{
    const many_c *x = &many[*(const int *)a], *y = &many[*(const int *)b];
    return x->rate != y->rate ? (x->rate < y->rate ? -1 : 1) : strcmp(x->name, y->name);
}

static int by_rate_desc(const void *a, const void *b)
{
    const many_c *x = &many[*(const int *)a], *y = &many[*(const int *)b];
    return x->rate != y->rate ? (x->rate > y->rate ? -1 : 1) : strcmp(x->name, y->name);
}

static int by_state(const void *a, const void *b)
{
    const many_c *x = &many[*(const int *)a], *y = &many[*(const int *)b];
    return x->severity != y->severity ? (x->severity > y->severity ? -1 : 1)
                                      : strcmp(x->name, y->name);
}

static int by_state_desc(const void *a, const void *b)
{
    const many_c *x = &many[*(const int *)a], *y = &many[*(const int *)b];
    return x->severity != y->severity ? (x->severity < y->severity ? -1 : 1)
                                      : strcmp(x->name, y->name);
}

/* The names, sorted by cmp, of the customers whose name contains filter ignoring ASCII case,
 * from position `from` on, at most `limit` of them; one per line (owned). */
static char *expected(int (*cmp)(const void *, const void *), bool reverse, const char *filter,
                      int from, int limit)
{
    int idx[N_MANY], m = 0;
    for (int i = 0; i < N_MANY; i++) {
        char lower[32], want[256];
        size_t k;
        for (k = 0; many[i].name[k]; k++)
            lower[k] = (char)(many[i].name[k] |
                              (many[i].name[k] >= 'A' && many[i].name[k] <= 'Z' ? 0x20 : 0));
        lower[k] = '\0';
        for (k = 0; filter[k] && k < sizeof want - 1; k++)
            want[k] = (char)(filter[k] >= 'A' && filter[k] <= 'Z' ? filter[k] | 0x20 : filter[k]);
        want[k] = '\0';
        if (strstr(lower, want))
            idx[m++] = i;
    }
    qsort(idx, (size_t)m, sizeof *idx, cmp);
    strbuf sb = {0};
    for (int i = from; i < m && i < from + limit; i++) {
        strbuf_puts(&sb, many[idx[reverse ? m - 1 - i : i]].name);
        strbuf_puts(&sb, "\n");
    }
    return take(&sb);
}

/* Names of the answer to query (one per line, owned); checks its totals. */
static char *page_names(int port, const char *query, double want_matched)
{
    json_t *j = sc_status_get(port, query);
    json_t *totals = sc_get(j, "totals");
    assert_true(sc_num(totals, "customers") == N_MANY);
    if (sc_num(totals, "matched") != want_matched)
        fail_msg("%s: matched %.0f, expected %.0f", query, sc_num(totals, "matched"), want_matched);
    char *names = sc_names(j);
    json_decref(j);
    return names;
}

static void assert_page(int port, const char *query, int (*cmp)(const void *, const void *),
                        bool reverse, const char *filter, int from, int limit)
{
    char *want = expected(cmp, reverse, filter, 0, N_MANY);
    int matched = 0;
    for (const char *p = want; *p; p++)
        matched += *p == '\n';
    free(want);
    want = expected(cmp, reverse, filter, from, limit);
    char *got = page_names(port, query, matched);
    if (strcmp(got, want) != 0)
        fail_msg("%s:\n got:\n%s\n expected:\n%s", query, got, want);
    free(got);
    free(want);
}

/* Every page of `limit` of the answer sorted by sort: together, the whole expected order. */
static void assert_paging(int port, const char *sort, int limit,
                          int (*cmp)(const void *, const void *), bool reverse)
{
    strbuf all = {0};
    for (int offset = 0; offset < N_MANY; offset += limit) {
        char query[128];
        snprintf(query, sizeof query, "offset=%d&limit=%d&sort=%s", offset, limit, sort);
        json_t *j = sc_status_get(port, query);
        json_t *page = sc_get(j, "page");
        assert_true(sc_num(page, "offset") == offset && sc_num(page, "limit") == limit);
        assert_string_equal(sc_str(page, "sort"), sort);
        size_t n = json_array_size(sc_arr(j, "customers"));
        assert_int_equal(n, (size_t)(N_MANY - offset < limit ? N_MANY - offset : limit));
        char *names = sc_names(j);
        strbuf_puts(&all, names);
        free(names);
        json_decref(j);
    }
    char *got = take(&all), *want = expected(cmp, reverse, "", 0, N_MANY);
    if (strcmp(got, want) != 0)
        fail_msg("pages of %d by %s:\n got:\n%s\n expected:\n%s", limit, sort, got, want);
    free(got);
    free(want);
}

static bool breaker_open(const json_t *j, void *name)
{
    if (!sc_leading_with(j, name))
        return false;
    json_t *c = sc_customer(j, name);
    return strcmp(sc_str(c, "breaker"), "open") == 0 && sc_counted(c);
}

/* The dead letters of `customer` a queue-gauge refresh answered at `at` (epoch s) may have
 * counted: at least those written a second before it (long committed when its statement ran),
 * at most those whose transaction began by then (failed_at is that start; the statement's
 * snapshot is older than its answer). */
static void dead_around(fx *f, const char *customer, double at, long long *lo, long long *hi)
{
    static const char sql[] = "SELECT count(*) FROM pgpace.dead_letter d JOIN pgpace.customer c "
                              "ON c.id = d.customer_id WHERE c.name = '%s' "
                              "AND d.failed_at %s to_timestamp(%.6f)";
    *lo = tl_query_int(f->db->conn, sql, customer, "<", at - 1);
    *hi = tl_query_int(f->db->conn, sql, customer, "<=", at + 0.001);
}

static void paging_sorting_filtering(void **state)
{
    fx *f = *state;
    static const char *const prefixes[] = {"Alpha", "beta", "GAMMA", "delta", "Epsilon", "zeta"};
    for (int i = 0; i < N_MANY; i++) {
        /* Creation order is not name order; rates tie often. */
        snprintf(many[i].name, sizeof many[i].name, "%s-%03d", prefixes[i % 6], (i * 37) % N_MANY);
        many[i].rate = 10 * (1 + (i * 7) % 5);
        many[i].severity = 0;
        char url[256], path[64];
        snprintf(path, sizeof path, "/c/%.31s", many[i].name);
        receiver_url(f->recv, path, url, sizeof url);
        tl_exec(f->db->conn,
                "SELECT pgpace.customer_set(name => '%s', rate_per_minute => %d, "
                "webhook_url => '%s')",
                many[i].name, many[i].rate, url);
    }
    /* Problems: paused (7 items due, 3 later), disabled (health's column, 2 items kept),
     * breaker open (500s: two failures open it, and its one item is dead-lettered), held (a
     * signing secret the table's CHECK lets through but the dispatcher cannot decode: 4 items
     * kept, and it is not paused: nobody paused it). */
    const char *paused = many[1].name, *disabled = many[2].name, *broken = many[3].name,
               *held = many[4].name;
    many[1].severity = 3;
    many[2].severity = 6;
    many[3].severity = 4;
    many[4].severity = 5;
    pgpace_ok(f, TL_ARGV("customer", "pause", paused));
    tl_exec(f->db->conn,
            "UPDATE pgpace.customer SET disabled_at = now(), disabled_reason = 'set by the test' "
            "WHERE name = '%s'",
            disabled);
    tl_exec(f->db->conn, "SELECT pgpace.customer_set(name => '%s', max_attempts => 2)", broken);
    char path[64];
    snprintf(path, sizeof path, "/c/%s", broken);
    receiver_on(f->recv, &(receiver_rule){.path_prefix = path, .status = 500, .body = "down"});
    tl_exec(f->db->conn,
            "UPDATE pgpace.customer SET signing_secrets = ARRAY['whsec_' || repeat('A', 33)] "
            "WHERE name = '%s'",
            held);
    fx_enqueue_many(f, paused, 7);
    double paused_due_since = due_since(f, paused);
    tl_exec(f->db->conn,
            "SELECT count(pgpace.enqueue('%s', '{}', run_at => now() + interval '1 hour')) "
            "FROM generate_series(1, 3)",
            paused);
    fx_enqueue_many(f, disabled, 2);
    fx_enqueue(f, broken, NULL, 1);
    fx_enqueue_many(f, held, 4);
    double started = sc_now_s();
    fx_run(f, "delivery.breaker_failures = 2\ndelivery.breaker_cooldown_ms = 600000\n"
              "delivery.breaker_cooldown_max_ms = 600000\n");
    int port = fx_admin_port(f);
    char query[512];
    snprintf(query, sizeof query, "filter=%s", broken);
    json_decref(sc_wait_status(port, query, breaker_open, (void *)(uintptr_t)broken, 15000,
                               "breaker open"));

    /* Pages of 50, 7 and 500 by name; descending; past the end. */
    assert_paging(port, "name", 50, by_name, false);
    assert_paging(port, "name", 7, by_name, false);
    assert_page(port, "limit=500", by_name, false, "", 0, 500);
    assert_paging(port, "-name", 50, by_name, true);
    assert_page(port, "sort=-name&offset=50&limit=50", by_name, true, "", 50, 50);
    assert_page(port, "offset=120", by_name, false, "", 120, 50);
    assert_page(port, "offset=1000000000&limit=500", by_name, false, "", 1000000000, 500);

    /* Filters: case-insensitive substrings, percent-encoded, with sorting and paging. */
    assert_page(port, "filter=aLpHa&limit=500", by_name, false, "alpha", 0, 500);
    assert_page(port, "filter=ALP%48a&limit=500", by_name, false, "alpha", 0, 500);
    assert_page(port, "filter=-07&limit=500", by_name, false, "-07", 0, 500);
    assert_page(port, "filter=E&sort=-rate&offset=10&limit=7", by_rate_desc, false, "e", 10, 7);
    assert_page(port, "filter=nobody-has-this&limit=500", by_name, false, "nobody-has-this", 0,
                500);
    json_t *j = sc_status_get(port, "filter=gamma&limit=3");
    assert_string_equal(sc_str(sc_get(j, "page"), "filter"), "gamma");
    json_decref(j);

    /* Rate ascending and descending, ties by name; each customer's rate as set. */
    assert_paging(port, "rate", 50, by_rate, false);
    assert_paging(port, "-rate", 50, by_rate_desc, false);
    j = sc_status_get(port, "limit=500");
    for (int i = 0; i < N_MANY; i++)
        assert_true(sc_num(sc_customer(j, many[i].name), "rate") == many[i].rate);
    json_decref(j);
    /* No receiver throttles: the effective rate is the rate, and sorts alike. */
    assert_paging(port, "effective", 50, by_rate, false);

    /* State: disabled, held, breaker open, paused, then the healthy ones by name; reversed. */
    assert_paging(port, "state", 50, by_state, false);
    assert_paging(port, "-state", 50, by_state_desc, false);
    j = sc_status_get(port, "sort=state&limit=4");
    json_t *totals = sc_get(j, "totals");
    assert_true(sc_num(totals, "paused") == 1 && sc_num(totals, "disabled") == 1 &&
                sc_num(totals, "breaker_open") == 1 && sc_num(totals, "held") == 1);
    assert_true(sc_num(totals, "throttled") == 0);
    /* The counts of those that send nothing are what was enqueued (before the start, so the
     * first refresh has them) and what the queue holds. */
    json_t *c = sc_customer(j, disabled);
    assert_true(sc_bool(c, "disabled"));
    assert_false(sc_bool(c, "paused"));
    /* Its health: disabled since the column's time, and no estimate (it is disabled). */
    json_t *h = sc_get(c, "health");
    assert_string_equal(sc_str(h, "state"), "disabled");
    char *at = tl_query_str(f->db->conn,
                            "SELECT extract(epoch FROM disabled_at) FROM pgpace.customer "
                            "WHERE name = '%s'",
                            disabled);
    if (fabs(sc_iso_seconds(sc_str(h, "disabled_at")) - strtod(at, NULL)) > 0.0015)
        fail_msg("%s: disabled_at %s, the column %s", disabled, sc_str(h, "disabled_at"), at);
    free(at);
    sc_null(h, "expected_disable_at");
    sc_null(c, "held");
    assert_true(sc_num(c, "due") == 2 && sc_num(c, "delayed") == 0 && sc_num(c, "in_flight") == 0);
    assert_true(sc_num(c, "due") == (double)queued(f, disabled));
    c = sc_customer(j, held);
    assert_string_equal(sc_str(c, "held"), "secrets");
    assert_false(sc_bool(c, "paused"));
    assert_false(sc_bool(c, "disabled"));
    assert_true(sc_num(c, "due") == 4 && sc_num(c, "delayed") == 0 && sc_num(c, "in_flight") == 0);
    assert_true(sc_num(c, "due") == (double)queued(f, held));
    sc_null(c, "last_error");
    c = sc_customer(j, broken);
    assert_string_equal(sc_str(c, "breaker"), "open");
    /* Its two failures are also a failing streak (breaker_failures 2): recorded with the
     * breaker's opening. */
    assert_string_equal(sc_str(sc_get(c, "health"), "state"), "failing");
    assert_true(sc_iso_seconds(sc_str(c, "breaker_open_until")) > sc_now_s() + 60);
    json_t *err = sc_get(c, "last_error");
    assert_string_equal(sc_str(err, "class"), "http");
    assert_true(sc_num(err, "status") == 500);
    assert_true(sc_num(err, "age_s") >= 0 && sc_num(err, "age_s") < 60);
    assert_true(fabs(sc_iso_seconds(sc_str(err, "at")) - (sc_now_s() - sc_num(err, "age_s"))) < 5);
    /* Its dead letter, as the database had it at counts_at. */
    long long lo, hi;
    dead_around(f, broken, sc_iso_seconds(sc_str(c, "counts_at")), &lo, &hi);
    if (sc_num(c, "dead") < (double)lo || sc_num(c, "dead") > (double)hi)
        fail_msg("%s: dead %.0f at %s; the database had %lld to %lld then (%lld now)", broken,
                 sc_num(c, "dead"), sc_str(c, "counts_at"), lo, hi, dead_of(f, broken));
    assert_false(sc_bool(c, "paused"));
    c = sc_customer(j, paused);
    assert_true(sc_bool(c, "paused"));
    assert_false(sc_bool(c, "disabled"));
    assert_string_equal(sc_str(sc_get(c, "health"), "state"), "ok");
    assert_true(sc_num(c, "due") == 7 && sc_num(c, "delayed") == 3 && sc_num(c, "in_flight") == 0 &&
                sc_num(c, "dead") == 0);
    assert_true(sc_num(c, "due") + sc_num(c, "delayed") == (double)queued(f, paused));
    assert_oldest_due(j, paused, paused_due_since);
    assert_string_equal(sc_str(c, "breaker"), "closed");
    json_decref(j);
    /* All of them from one refresh, the totals their sums; the others have nothing queued. */
    j = sc_status_get(port, "limit=500");
    check_refresh(j, started);
    for (int i = 5; i < N_MANY; i++) {
        c = sc_customer(j, many[i].name);
        assert_true(sc_num(c, "due") == 0 && sc_num(c, "delayed") == 0 && sc_num(c, "dead") == 0);
    }
    json_decref(j);

    /* The other sorts are accepted and echoed; observed puts the one that sent first. */
    j = sc_status_get(port, "sort=-observed&limit=1");
    assert_string_equal(sc_str(sc_get(j, "page"), "sort"), "-observed");
    assert_string_equal(sc_str(json_array_get(sc_arr(j, "customers"), 0), "name"), broken);
    json_decref(j);
    assert_paging(port, "in_flight", 50, by_name, false); /* nothing in flight: by name */

    /* Ignored and repeated parameters; the limits' bounds. */
    assert_page(port, "_=12345&limit=4", by_name, false, "", 0, 4);
    assert_page(port, "limit=1&limit=3", by_name, false, "", 0, 3);
    assert_page(port, "limit=1", by_name, false, "", 0, 1);
    char filter[256];
    memset(filter, 'a', 200);
    filter[200] = '\0';
    snprintf(query, sizeof query, "filter=%s", filter);
    assert_page(port, query, by_name, false, filter, 0, 50);

    /* Bad parameters: 400, JSON, the parameter named first. */
    static const struct {
        const char *query, *param;
    } bad[] = {
        {"limit=0", "limit"},
        {"limit=501", "limit"},
        {"limit=-1", "limit"},
        {"limit=ten", "limit"},
        {"limit=", "limit"},
        {"offset=-1", "offset"},
        {"offset=1000000001", "offset"},
        {"offset=1e3", "offset"},
        {"sort=x", "sort"},
        {"sort=-", "sort"},
        {"sort=--name", "sort"},
        {"filter=%00", "filter"},
        {"filter=a%0Ab", "filter"},
        {"filter=%zz", "filter"},
        {"limit=10&sort=bogus", "sort"},
        {NULL, "filter"}, /* 201 bytes */
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        if (bad[i].query) {
            snprintf(query, sizeof query, "/v1/status?%s", bad[i].query);
        } else {
            snprintf(query, sizeof query, "/v1/status?filter=%sa", filter);
        }
        sc_answer a = sc_http_get(port, query, NULL, NULL);
        if (a.status != 400)
            fail_msg("%s: %ld %s (expected 400)", query, a.status, a.body);
        char ctype[128];
        tl_assert_contains(sc_header(&a, "Content-Type", ctype, sizeof ctype), "application/json");
        json_t *e = json_loads(a.body, 0, NULL);
        const char *msg = sc_str(e, "error");
        if (strncmp(msg, bad[i].param, strlen(bad[i].param)) != 0 ||
            msg[strlen(bad[i].param)] != ':')
            fail_msg("%s: the error does not name %s first: %s", query, bad[i].param, msg);
        json_decref(e);
        sc_answer_free(&a);
    }
    fx_stop_service(f, 15000);
}

/* ---- 3. a throttled customer, and one whose receiver is gone -------------------------------- */

static bool shows_throttled(const json_t *j, void *arg)
{
    if (!sc_leading_with(j, "thr") || !sc_bool(sc_customer(j, "gone"), "paused"))
        return false;
    json_t *c = sc_customer(j, "thr");
    json_t *err = sc_get(c, "last_error");
    /* Lowered twice at least (a first 429 may land between the page's choice and its answer,
     * so that the totals, counted at the choice, do not have it yet). */
    return sc_num(c, "effective_rate") < 0.7 * sc_num(c, "rate") && sc_bool(c, "throttled") &&
           json_is_object(err) && strcmp(sc_str(err, "class"), "http") == 0 &&
           sc_num(err, "status") == 429;
}

static void throttled_customer(void **state)
{
    fx *f = *state;
    /* A token bucket of 30/min in front of thr's receiver, 429 without Retry-After. */
    assert_int_equal(
        receiver_throttle_on(f->recv, &(receiver_throttle){.path_prefix = "/c/thr",
                                                           .kind = RECV_TOKEN_BUCKET,
                                                           .rate_per_minute = 30,
                                                           .burst = 1,
                                                           .retry_after = RECV_RA_NONE}),
        0);
    fx_customer(f, "thr", TL_ARGV("--mode", "spaced", "--rate", "240"));
    fx_customer(f, "calm", TL_ARGV("--mode", "spaced", "--rate", "300"));
    /* 410 Gone: the dispatcher pauses the customer (as the operator would). */
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/gone", .status = 410});
    fx_customer(f, "gone", TL_ARGV("--mode", "spaced", "--rate", "300"));
    fx_enqueue_many(f, "thr", 100);
    fx_enqueue_many(f, "calm", 150);
    fx_enqueue_many(f, "gone", 3);
    fx_run(f, "delivery.breaker_failures = 3\n");
    int port = fx_admin_port(f);
    json_t *j = sc_wait_status(port, NULL, shows_throttled, NULL, 20000,
                               "thr throttled, below its rate, last error http 429; gone paused");
    assert_true(receiver_count_status(f->recv, "/c/thr", 429) > 0);
    json_t *thr = sc_customer(j, "thr");
    double eff = sc_num(thr, "effective_rate");
    print_message("# thr: effective %.2f/min of %.0f; period %.1f ms\n", eff, sc_num(thr, "rate"),
                  sc_num(thr, "period_ms"));
    assert_true(eff > 0);
    assert_true(fabs(sc_num(thr, "period_ms") - 60000 / eff) < 0.01);
    assert_true(sc_num(sc_get(thr, "last_error"), "age_s") >= 0);
    json_t *calm = sc_customer(j, "calm");
    assert_false(sc_bool(calm, "throttled"));
    assert_true(sc_num(calm, "effective_rate") == sc_num(calm, "rate"));
    sc_null(calm, "last_error");
    /* The totals count the throttled customers listed. */
    double throttled = 0;
    json_t *c;
    size_t i;
    json_array_foreach(sc_arr(j, "customers"), i, c)
    {
        throttled += sc_bool(c, "throttled");
    }
    assert_true(sc_num(sc_get(j, "totals"), "throttled") == throttled);
    /* gone: paused by its 410, as stored, with that answer as its latest failure. */
    json_t *gone = sc_customer(j, "gone");
    assert_int_equal(receiver_count_status(f->recv, "/c/gone", 410), 1);
    assert_true(tl_query_int(f->db->conn, "SELECT paused::int FROM pgpace.customer "
                                          "WHERE name = 'gone'") == 1);
    assert_false(sc_bool(gone, "disabled") || sc_bool(gone, "throttled"));
    sc_null(gone, "held");
    assert_true(sc_num(sc_get(gone, "last_error"), "status") == 410);
    assert_true(sc_num(sc_get(j, "totals"), "paused") == 1);
    assert_false(sc_bool(thr, "paused") || sc_bool(calm, "paused"));
    json_decref(j);
    /* By state: paused, then throttled, then ok; by effective rate, thr (below 240) before the
     * others (300). */
    j = sc_status_get(port, "sort=state");
    char *names = sc_names(j);
    if (strcmp(names, "gone\nthr\ncalm\n") != 0)
        fail_msg("by state: %s", sc_dump(j));
    free(names);
    json_decref(j);
    j = sc_status_get(port, "sort=effective&limit=1");
    assert_string_equal(sc_str(json_array_get(sc_arr(j, "customers"), 0), "name"), "thr");
    json_decref(j);
    fx_stop_service(f, 15000);
}

/* ---- 3b. a failing customer's health ------------------------------------------------------ */

static const char *health_state(const json_t *j, const char *name)
{
    return sc_str(sc_get(sc_customer(j, name), "health"), "state");
}

/* The totals are counted before the page's database round trip and the rows written after it,
 * so an answer in the middle of a change may have the one without the other: the conditions
 * wait for both. */
static bool removed_failing(const json_t *j, void *arg)
{
    return sc_leading_with(j, "removed") && strcmp(health_state(j, "removed"), "failing") == 0 &&
           sc_num(sc_get(j, "totals"), "failing") == 1;
}

static bool removed_recovered(const json_t *j, void *arg)
{
    return strcmp(health_state(j, "removed"), "ok") == 0 &&
           sc_num(sc_get(j, "totals"), "failing") == 0;
}

/* The recorded streak's start as the database has it (epoch s), or 0 when none. */
static double stored_failing_since(fx *f, const char *name)
{
    char *s = tl_query_str(f->db->conn,
                           "SELECT coalesce(extract(epoch FROM h.failing_since), 0) FROM "
                           "pgpace.customer c LEFT JOIN pgpace.customer_health h ON "
                           "h.customer_id = c.id WHERE c.name = '%s'",
                           name);
    double v = strtod(s, NULL);
    free(s);
    return v;
}

/* The case: an endpoint that answers 404 to everything. Its items dead-letter at once
 * and its breaker stays closed (a 404 is not the receiver failing), yet every delivery fails:
 * the page says failing, since when (the streak pgpace.customer_health and `pgpace events`
 * have), how many in a row, and when the health check may disable it (never before
 * disable_after), and sorts it first by state. Once the receiver answers again, it reads ok,
 * recovered. */
static void failing_customer_health(void **state)
{
    fx *f = *state;
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/removed", .status = 404});
    fx_customer(f, "removed", TL_ARGV("--rate", "600"));
    fx_customer(f, "fine", TL_ARGV("--rate", "600"));
    fx_enqueue_many(f, "removed", 20);
    fx_enqueue_many(f, "fine", 5);
    double started = sc_now_s();
    fx_run(f, "health.disable_after = 10m\nhealth.disable_min_attempts = 1000\n");
    int port = fx_admin_port(f);

    json_t *j = sc_wait_status(port, NULL, removed_failing, NULL, 30000, "removed failing");
    json_t *rules = sc_get(j, "health_rules");
    assert_true(sc_num(rules, "disable_after_s") == 600);
    assert_true(sc_num(rules, "disable_min_attempts") == 1000);
    assert_true(sc_num(rules, "check_interval_s") > 0);
    json_t *c = sc_customer(j, "removed"), *h = sc_get(c, "health");
    double since = sc_iso_seconds(sc_str(h, "failing_since"));
    double generated = sc_iso_seconds(sc_str(j, "generated_at"));
    char *shown = sc_dump(h);
    print_message("# removed: %s\n", shown);
    free(shown);
    if (since < started - 1 || since > generated)
        fail_msg("removed: failing since %.3f, the case started at %.3f, answered at %.3f", since,
                 started, generated);
    /* The streak the database recorded (the `failing` event's), to the millisecond shown. */
    double stored = stored_failing_since(f, "removed");
    if (fabs(stored - since) > 0.0015)
        fail_msg("removed: failing_since %.3f, pgpace.customer_health has %.6f", since, stored);
    assert_true(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.event WHERE kind = "
                                          "'failing' AND customer = 'removed'") == 1);
    /* breaker_failures (5) in a row at least, and no more than the receiver refused. */
    double failures = sc_num(h, "failures_in_a_row");
    assert_true(failures >= 5 &&
                failures <= (double)receiver_count_status(f->recv, "/c/removed", 404));
    double expected = sc_iso_seconds(sc_str(h, "expected_disable_at"));
    if (expected < since + 600 - 0.001)
        fail_msg("removed: expected to be disabled at %.3f, before disable_after since %.3f",
                 expected, since);
    sc_null(h, "disabled_at");
    sc_null(h, "recovered_at");
    assert_string_equal(sc_str(c, "breaker"), "closed");
    assert_false(sc_bool(c, "paused") || sc_bool(c, "disabled"));
    assert_true(sc_num(sc_get(j, "totals"), "failing") == 1);
    json_t *fine = sc_get(sc_customer(j, "fine"), "health");
    assert_string_equal(sc_str(fine, "state"), "ok");
    sc_null(fine, "failing_since");
    sc_null(fine, "expected_disable_at");
    json_decref(j);
    /* Problems first: the failing one before the healthy one, and last reversed. */
    j = sc_status_get(port, "sort=state");
    char *names = sc_names(j);
    if (strcmp(names, "removed\nfine\n") != 0)
        fail_msg("by state: %s", names);
    free(names);
    json_decref(j);
    j = sc_status_get(port, "sort=-state");
    names = sc_names(j);
    assert_string_equal(names, "fine\nremoved\n");
    free(names);
    json_decref(j);

    /* The receiver answers again: the next delivery ends the streak. */
    receiver_clear_rules(f->recv);
    fx_enqueue_many(f, "removed", 2);
    j = sc_wait_status(port, NULL, removed_recovered, NULL, 30000, "removed ok again");
    h = sc_get(sc_customer(j, "removed"), "health");
    shown = sc_dump(h);
    print_message("# removed: %s\n", shown);
    free(shown);
    sc_null(h, "failing_since");
    sc_null(h, "expected_disable_at");
    sc_null(h, "disabled_at");
    assert_true(sc_num(h, "failures_in_a_row") == 0);
    double recovered = sc_iso_seconds(sc_str(h, "recovered_at"));
    assert_true(recovered >= since && recovered <= sc_iso_seconds(sc_str(j, "generated_at")));
    assert_true(sc_num(sc_get(j, "totals"), "failing") == 0);
    json_decref(j);
    assert_true(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                       "SELECT count(*) FROM pgpace.event WHERE kind = "
                                       "'recovered' AND customer = 'removed'") == 1);
    assert_true(stored_failing_since(f, "removed") == 0);
    fx_stop_service(f, 15000);
}

/* ---- 4. no secrets ------------------------------------------------------------------------- */

#define SECRET      "whsec_U0VDUkVUTUFSS0VSLWRvLW5vdC1sZWFrLTAxMjM0NTY3ODk="
#define SECRET_B64  "U0VDUkVUTUFSS0VSLWRvLW5vdC1sZWFrLTAxMjM0NTY3ODk"
#define HDR_VALUE   "HDRMARKER-7731"
#define AUTH_USER   "usermarker"
#define AUTH_PASS   "PASSMARKER-5521"
#define URL_MARKER  "URLMARKER-9913"
#define PAYLOAD_MK  "PAYLOADMARKER-4410"
#define RESP_MARKER "RESPMARKER-8812"

/* Fails when s contains anything secret (or any URL). */
static void no_secret_in(const char *what, const char *s, const char *url)
{
    static const char *const markers[] = {SECRET,     SECRET_B64, "whsec_",    HDR_VALUE, AUTH_PASS,
                                          URL_MARKER, PAYLOAD_MK, RESP_MARKER, "://"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(markers); i++)
        if (strstr(s, markers[i]))
            fail_msg("%s shows %s: %s", what, markers[i], s);
    if (strstr(s, url))
        fail_msg("%s shows the webhook URL: %s", what, s);
    /* Basic credentials, as sent ("usermarker:PASSMARKER-5521" in base64). */
    if (strstr(s, "dXNlcm1hcmtlcjpQQVNTTUFSS0VSLTU1MjE"))
        fail_msg("%s shows the Basic credentials: %s", what, s);
}

typedef struct secrets_wait {
    fx *f;
    const char *url;
} secrets_wait;

/* Every answer checked; done once the failure and three successes went out. */
static bool secrets_seen(const json_t *j, void *arg)
{
    secrets_wait *w = arg;
    char *s = sc_dump(j);
    no_secret_in("GET /v1/status", s, w->url);
    free(s);
    return sc_leading_with(j, "sec") && receiver_count_status(w->f->recv, "/c/sec", 200) >= 3 &&
           sc_num(sc_customer(j, "sec"), "in_flight") == 0;
}

static void no_secrets(void **state)
{
    fx *f = *state;
    char url[256];
    receiver_url(f->recv, "/c/sec/" URL_MARKER, url, sizeof url);
    pgpace_ok(f, TL_ARGV("customer", "set", "sec", "--url", url, "--rate", "600", "--secret",
                         SECRET, "--header", "X-Api-Key: " HDR_VALUE, "--auth",
                         "basic:" AUTH_USER ":" AUTH_PASS));
    /* Its first request fails with a body the receiver made (an excerpt is kept for the
     * attempt log); the retry succeeds. */
    receiver_on(
        f->recv,
        &(receiver_rule){.path_prefix = "/c/sec", .status = 500, .body = RESP_MARKER, .times = 1});
    for (int i = 0; i < 4; i++)
        tl_exec(f->db->conn, "SELECT pgpace.enqueue('sec', '{\"m\": \"%s\", \"i\": %d}')",
                PAYLOAD_MK, i);
    fx_run(f, NULL);
    int port = fx_admin_port(f);
    secrets_wait w = {f, url};
    json_decref(sc_wait_status(port, NULL, secrets_seen, &w, 15000, "sec's requests"));

    /* They all reached the dispatcher and the receiver: the secret signed, the header, the
     * Basic credentials and the payload were sent. */
    receiver_request rq;
    assert_int_equal(receiver_get(f->recv, receiver_count(f->recv, NULL) - 1, &rq), 0);
    tl_assert_contains(rq.path, URL_MARKER);
    tl_assert_contains(rq.body, PAYLOAD_MK);
    assert_true(tl_verify_signature(SECRET, rq.webhook_id, rq.webhook_timestamp, rq.body,
                                    rq.webhook_signature));
    free(rq.body);
    char value[256];
    assert_true(receiver_header(f->recv, 0, "X-Api-Key", value, sizeof value) == 1);
    assert_string_equal(value, HDR_VALUE);
    assert_true(receiver_header(f->recv, 0, "Authorization", value, sizeof value) == 1);
    tl_assert_contains(value, "dXNlcm1hcmtlcjpQQVNTTUFSS0VSLTU1MjE");

    /* The leader keeps sec's failure after the successes that followed it (its latest failure
     * of the last hour), when it happened: class and status only, no body. */
    assert_true(tl_wait_query_at_least(f->db->conn, 3, 10000,
                                       "SELECT count(*) FROM pgpace.delivery_attempt "
                                       "WHERE outcome = 'success'") >= 3);
    char *latest = tl_query_str(f->db->conn, "SELECT outcome FROM pgpace.delivery_attempt "
                                             "ORDER BY started_at DESC LIMIT 1");
    assert_string_equal(latest, "success");
    free(latest);
    char *failed = tl_query_str(f->db->conn, "SELECT extract(epoch FROM started_at) "
                                             "FROM pgpace.delivery_attempt WHERE outcome <> "
                                             "'success' ORDER BY started_at DESC LIMIT 1");
    double failed_at = strtod(failed, NULL);
    free(failed);
    assert_true(failed_at > 0);
    json_t *j = sc_status_get(port, NULL);
    json_t *err = sc_get(sc_customer(j, "sec"), "last_error");
    if (!json_is_object(err))
        fail_msg("sec: the failure before its successes is not shown: %s", sc_dump(j));
    assert_string_equal(sc_str(err, "class"), "http");
    assert_true(sc_num(err, "status") == 500);
    if (fabs(sc_iso_seconds(sc_str(err, "at")) - failed_at) > 1)
        fail_msg("sec: last_error at %s, the failed attempt started at %.3f", sc_str(err, "at"),
                 failed_at);
    assert_true(fabs(sc_num(err, "age_s") - (sc_iso_seconds(sc_str(j, "generated_at")) -
                                             sc_iso_seconds(sc_str(err, "at")))) < 0.2);
    json_decref(j);

    /* Raw answers with other pages and sorts, and the page itself. */
    static const char *const paths[] = {"/v1/status", "/v1/status?filter=sec&sort=state",
                                        "/v1/status?sort=-observed&limit=500", "/"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(paths); i++) {
        sc_answer a = sc_http_get(port, paths[i], NULL, NULL);
        assert_int_equal(a.status, 200);
        tl_assert_contains(a.body, i < 3 ? "\"sec\"" : "<");
        no_secret_in(paths[i], a.body, url);
        sc_answer_free(&a);
    }
    fx_stop_service(f, 15000);
}

/* ---- 5. a deep backlog ------------------------------------------------------------------- */

#define DEEP_ITEMS 10001

static bool deep_counted(const json_t *j, void *arg)
{
    return sc_leading_with(j, "deep") && sc_counted(sc_customer(j, "deep"));
}

/* The queue gauges count a deep backlog exactly, paused customers' too, from the first refresh
 * (the items were there before the start); the totals are the sums. */
static void deep_backlog_counted(void **state)
{
    fx *f = *state;
    fx_customer(f, "deep", TL_ARGV("--rate", "60", "--paused"));
    fx_customer(f, "shallow", TL_ARGV("--rate", "60", "--paused"));
    fx_enqueue_many(f, "deep", DEEP_ITEMS);
    fx_enqueue_many(f, "shallow", 3);
    double deep_due_since = due_since(f, "deep");
    double started = sc_now_s();
    fx_run(f, NULL);
    int port = fx_admin_port(f);
    json_t *j = sc_wait_status(port, NULL, deep_counted, NULL, 10000, "deep counted");
    check_refresh(j, started);
    json_t *deep = sc_customer(j, "deep"), *shallow = sc_customer(j, "shallow");
    print_message("# deep: due %.0f at %s\n", sc_num(deep, "due"), sc_str(deep, "counts_at"));
    assert_true(sc_num(deep, "due") == DEEP_ITEMS);
    assert_true(sc_num(deep, "due") == (double)queued(f, "deep"));
    assert_true(sc_num(deep, "delayed") == 0 && sc_num(deep, "dead") == 0);
    assert_oldest_due(j, "deep", deep_due_since);
    assert_true(sc_num(shallow, "due") == 3 &&
                sc_num(shallow, "due") == (double)queued(f, "shallow"));
    json_t *totals = sc_get(j, "totals");
    assert_true(sc_num(totals, "due") == DEEP_ITEMS + 3);
    assert_true(sc_num(totals, "dead_letters") == 0);
    assert_true(sc_num(totals, "paused") == 2);
    assert_true(sc_bool(deep, "paused") && sc_bool(shallow, "paused"));
    json_decref(j);
    fx_stop_service(f, 15000);
}

/* ---- 6. endpoints ------------------------------------------------------------------------ */

/* An endpoint of `customer` receiving at /e/<customer>-<name> (600/min), subscribed to events
 * (a SQL array literal, or NULL: every kind). */
static void add_endpoint(fx *f, const char *customer, const char *name, const char *events)
{
    char path[96], url[192];
    snprintf(path, sizeof path, "/e/%s-%s", customer, name);
    receiver_url(f->recv, path, url, sizeof url);
    tl_exec(f->db->conn, "SELECT pgpace.endpoint_add('%s', '%s', '%s', 600, event_types => %s%s%s)",
            customer, name, url, events ? "'" : "", events ? events : "NULL", events ? "'" : "");
}

static bool endpoints_settled(const json_t *j, void *arg)
{
    fx *f = arg;
    if (!sc_leading_with(j, "shop") || !sc_leading_with(j, "acme"))
        return false;
    json_t *shop = sc_customer(j, "shop"), *acme = sc_customer(j, "acme");
    /* bill failing, every other delivery made, and counted after that. */
    return strcmp(sc_str(sc_get(shop, "health"), "state"), "failing") == 0 && sc_counted(shop) &&
           sc_counted(acme) && sc_num(shop, "due") == 0 && sc_num(acme, "due") == 0 &&
           sc_num(shop, "dead") == 5 && queued(f, "shop") == 0;
}

/* The JSON array of an entry's endpoints' `field` values, as "a,b,c". */
static void endpoint_fields(const json_t *c, const char *field, char *out, size_t cap)
{
    json_t *eps = sc_arr(c, "endpoints"), *e;
    size_t i, used = 0;
    out[0] = '\0';
    json_array_foreach(eps, i, e)
    {
        used += (size_t)snprintf(out + used, cap - used, "%s%s", i ? "," : "", sc_str(e, field));
        if (used >= cap)
            break;
    }
}

static void customers_with_endpoints(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/e/shop-bill", .status = 404});
    fx_customer(f, "solo", TL_ARGV("--rate", "600"));
    fx_customer(f, "shop", TL_ARGV("--rate", "600"));
    add_endpoint(f, "shop", "crm", NULL);
    add_endpoint(f, "shop", "bill", "{invoice.*}");
    tl_exec(c, "SELECT pgpace.customer_set('acme', rate_per_minute => 300)");
    add_endpoint(f, "acme", "a1", NULL);
    add_endpoint(f, "acme", "a2", NULL);
    add_endpoint(f, "acme", "gone", NULL);
    fx_enqueue_many(f, "solo", 5);
    tl_exec(c, "SELECT count(pgpace.enqueue('shop', '{}', kind => 'invoice.paid')) FROM "
               "generate_series(1, 5)");
    tl_exec(c,
            "SELECT count(pgpace.enqueue('acme', '{}', kind => 'x')) FROM generate_series(1, 3)");
    /* gone goes with a queued delivery: a dead letter on acme's own row (endpoint_deleted). */
    assert_int_equal(tl_query_int(c, "SELECT pgpace.endpoint_delete('acme', 'gone', true)"), 3);
    fx_run(f, "health.disable_after = 10m\nhealth.disable_min_attempts = 1000\n");
    int port = fx_admin_port(f);
    json_t *j = sc_wait_status(port, NULL, endpoints_settled, f, 30000, "endpoints settled");
    char *names = sc_names(j);
    assert_string_equal(names, "acme\nshop\nsolo\n");
    free(names);
    json_t *totals = sc_get(j, "totals");
    assert_true(sc_num(totals, "customers") == 3);
    assert_true(sc_num(totals, "endpoints") == 6); /* solo, shop and its 2, acme's 2 */
    /* The dead letters: bill's 5, and the 3 gone left on acme's row. */
    assert_true(sc_num(totals, "dead_letters") == 8);

    /* solo: as before, no endpoints. */
    json_t *solo = sc_customer(j, "solo");
    assert_int_equal(json_array_size(sc_arr(solo, "endpoints")), 0);
    assert_null(json_object_get(solo, "problems"));
    assert_true(sc_num(solo, "rate") == 600);

    /* shop: its own receiver first, then by name; bill failing makes it failing. */
    json_t *shop = sc_customer(j, "shop");
    char list[256];
    endpoint_fields(shop, "endpoint", list, sizeof list);
    assert_string_equal(list, "default,bill,crm");
    endpoint_fields(shop, "name", list, sizeof list);
    assert_string_equal(list, "shop,shop/bill,shop/crm");
    assert_true(sc_num(shop, "endpoints_total") == 3);
    assert_string_equal(sc_str(shop, "mode"), "spaced");
    assert_true(sc_num(shop, "rate") == 600);
    sc_null(shop, "effective_rate");
    assert_true(sc_num(sc_get(shop, "problems"), "failing") == 1);
    assert_true(sc_num(sc_get(shop, "problems"), "disabled") == 0);
    json_t *bill = sc_find(shop, "endpoints", "endpoint", "bill");
    assert_non_null(bill);
    assert_string_equal(sc_str(sc_get(bill, "health"), "state"), "failing");
    assert_true(sc_num(bill, "dead") == 5);
    assert_true(sc_num(bill, "rate") == 600);
    json_t *err = sc_get(shop, "last_error");
    assert_string_equal(sc_str(err, "endpoint"), "bill");
    assert_true(sc_num(err, "status") == 404);
    json_t *own = sc_find(shop, "endpoints", "endpoint", "default");
    assert_string_equal(sc_str(sc_get(own, "health"), "state"), "ok");
    assert_true(sc_num(shop, "dead") ==
                sc_num(own, "dead") + sc_num(bill, "dead") +
                    sc_num(sc_find(shop, "endpoints", "endpoint", "crm"), "dead"));
    assert_string_equal(sc_str(shop, "counts_at"), sc_str(totals, "totals_at"));

    /* acme: no receiver of its own; listed by its endpoints, with its limit and mode. */
    json_t *acme = sc_customer(j, "acme");
    endpoint_fields(acme, "name", list, sizeof list);
    assert_string_equal(list, "acme/a1,acme/a2");
    assert_true(sc_num(acme, "rate") == 300);
    assert_string_equal(sc_str(acme, "mode"), "spaced");
    sc_null(acme, "burst");
    assert_true(sc_num(acme, "dead") == 3);
    assert_string_equal(sc_str(sc_get(acme, "health"), "state"), "ok");
    json_decref(j);

    /* Filter by an endpoint's name; the failing one first by state. */
    j = sc_status_get(port, "filter=A2");
    names = sc_names(j);
    assert_string_equal(names, "acme\n");
    free(names);
    assert_true(sc_num(sc_get(j, "totals"), "matched") == 1);
    json_decref(j);
    j = sc_status_get(port, "sort=state");
    names = sc_names(j);
    assert_string_equal(names, "shop\nacme\nsolo\n");
    free(names);
    json_decref(j);

    /* /metrics: the endpoints' series name customer and endpoint; solo's as before; acme has
     * no queue series of its own, its endpoints do. */
    char *m = fx_metrics(f);
    tl_assert_contains(m, "pgpace_deliveries_total{customer=\"shop\",endpoint=\"crm\","
                          "outcome=\"success\"} 5\n");
    tl_assert_contains(m, "pgpace_deliveries_total{customer=\"shop\",endpoint=\"default\","
                          "outcome=\"success\"} 5\n");
    tl_assert_contains(m, "pgpace_deliveries_total{customer=\"shop\",endpoint=\"bill\","
                          "outcome=\"dead\"} 5\n");
    tl_assert_contains(m, "pgpace_deliveries_total{customer=\"solo\",outcome=\"success\"} 5\n");
    tl_assert_contains(m, "pgpace_deliveries_total{customer=\"acme\",endpoint=\"a1\","
                          "outcome=\"success\"} 3\n");
    tl_assert_contains(m, "pgpace_queue_due{customer=\"acme\",endpoint=\"a2\"} 0\n");
    tl_assert_contains(m, "pgpace_queue_due{customer=\"solo\"} 0\n");
    assert_null(strstr(m, "pgpace_queue_due{customer=\"acme\"}"));
    assert_null(strstr(m, "customer=\"shop\",outcome")); /* its own carries endpoint="default" */
    free(m);
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(answer_shape_and_numbers, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(paging_sorting_filtering, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(throttled_customer, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(failing_customer_health, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(no_secrets, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(deep_backlog_counted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(customers_with_endpoints, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
