/* test_recover.c - `pgpace recover` and pgpace.recover against a real server, a running
 * dispatcher and a real receiver: which items of a window are sent again, with which
 * webhook-id, at which pace, behind live traffic; dry runs; days no longer kept; bad input;
 * endpoints (0018): an endpoint's deliveries recovered and the events it has none of
 * back-filled (`--endpoint`), events and what deleted endpoints left never sent again. */
#include "fixture.h"

#include <stdlib.h>
#include <string.h>

/* The window used throughout: [2 hours ago, now). Items "old" are from 3 hours ago. */
#define SINCE_SQL "now() - interval '2 hours'"

/* One item of `customer` created `ago` before now (an id of today, as enqueue gives), in the
 * state `state`: 'delivered' (no queue row), 'dead' (a dead letter), 'queued' (due in an hour).
 * Returns its id. */
static long long item(fx *f, const char *customer, const char *ago, const char *state)
{
    long long id = tl_query_int(f->db->conn,
                                "INSERT INTO pgpace.item (customer_id, payload, created_at) "
                                "SELECT c.id, jsonb_build_object('state', '%s'), now() - "
                                "interval '%s' FROM pgpace.customer c WHERE c.name = '%s' "
                                "RETURNING id",
                                state, ago, customer);
    if (strcmp(state, "dead") == 0)
        tl_exec(f->db->conn,
                "INSERT INTO pgpace.dead_letter (item_id, customer_id, attempts, last_status, "
                "last_error, failed_at) SELECT %lld, c.id, 12, 500, 'HTTP 500', now() - "
                "interval '1 minute' FROM pgpace.customer c WHERE c.name = '%s'",
                id, customer);
    else if (strcmp(state, "queued") == 0)
        tl_exec(f->db->conn,
                "INSERT INTO pgpace.queue (item_id, customer_id, next_action_at, max_attempts) "
                "SELECT %lld, c.id, now() + interval '1 hour', 12 FROM pgpace.customer c WHERE "
                "c.name = '%s'",
                id, customer);
    return id;
}

/* acme: in the window 3 delivered, 2 dead-lettered, 1 queued; before it 2 delivered and 1 dead.
 * beta: 1 dead letter in the window. ids[] gets acme's window items: delivered 0-2, dead 3-4. */
typedef struct scene {
    long long delivered[3], dead[2], queued, old_dead, beta_dead;
    char since[64];
} scene;

/* The item partition of yesterday (UTC), as a database in service has it: a test's database
 * is cloned from a template made when the suite started, with partitions from that day on, so
 * a window reaching back over midnight would otherwise find yesterday "no longer kept". */
static void keep_yesterday(fx *f)
{
    tl_query_int(f->db->conn, "SELECT pgpace.create_item_partition((now() AT TIME ZONE 'UTC')::date"
                              " - 1)::int");
}

static void make_scene(fx *f, scene *s, const char *rate)
{
    keep_yesterday(f);
    fx_customer(f, "acme", TL_ARGV("--mode", "spaced", "--rate", rate));
    fx_customer(f, "beta", TL_ARGV("--mode", "spaced", "--rate", rate));
    item(f, "acme", "3 hours", "delivered");
    item(f, "acme", "3 hours", "delivered");
    s->old_dead = item(f, "acme", "3 hours", "dead");
    for (int i = 0; i < 3; i++)
        s->delivered[i] = item(f, "acme", i == 0 ? "90 minutes" : "30 minutes", "delivered");
    s->dead[0] = item(f, "acme", "80 minutes", "dead");
    s->dead[1] = item(f, "acme", "20 minutes", "dead");
    s->queued = item(f, "acme", "10 minutes", "queued");
    s->beta_dead = item(f, "beta", "20 minutes", "dead");
    char *since = tl_query_str(f->db->conn, "SELECT (" SINCE_SQL ")::text");
    snprintf(s->since, sizeof s->since, "%s", since);
    free(since);
}

static tl_proc recover(fx *f, const char *const *args)
{
    const char *argv[24] = {"--db", f->db->conninfo, "recover"};
    size_t n = 3;
    for (; *args && n < 23; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    return tl_pgpace(argv, NULL, NULL);
}

/* The webhook ids the receiver got for a customer, in arrival order; returns how many. */
static size_t ids_received(fx *f, const char *customer, long long *ids, size_t max)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "/c/%s", customer);
    size_t n = 0, total = receiver_count(f->recv, NULL);
    for (size_t i = 0; i < total && n < max; i++) {
        receiver_request rq;
        if (receiver_get(f->recv, i, &rq) != 0)
            break;
        free(rq.body);
        if (strncmp(rq.path, prefix, strlen(prefix)) != 0)
            continue;
        assert_int_equal(strncmp(rq.webhook_id, "msg_", 4), 0);
        ids[n++] = atoll(rq.webhook_id + 4);
    }
    return n;
}

static int contains(const long long *v, size_t n, long long x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

/* A dry run counts and changes nothing; --failed sends exactly the window's dead letters again,
 * with their original webhook-id, one every 60/R seconds with --rate R. */
static void failed_resends_the_windows_dead_letters(void **state)
{
    fx *f = *state;
    scene s;
    make_scene(f, &s, "600");
    const char *count_all = "SELECT (SELECT count(*) FROM pgpace.dead_letter) * 1000 + "
                            "(SELECT count(*) FROM pgpace.queue)";
    long long before = tl_query_int(f->db->conn, "%s", count_all);
    assert_int_equal(before, 4 * 1000 + 1);

    tl_proc p = recover(f, TL_ARGV("--customer", "acme", "--since", s.since, "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 2 dead-lettered item(s) to send; nothing was changed");
    tl_assert_contains(p.out, "still queued (skipped, they are sent anyway): 1");
    tl_proc_free(&p);
    p = recover(f, TL_ARGV("--customer", "acme", "--since", s.since, "--all", "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 5 item(s) to send");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(f->db->conn, "%s", count_all), before);

    fx_run(f, NULL);
    char *started = tl_query_str(f->db->conn, "SELECT now()::text");
    p = recover(f, TL_ARGV("--customer", "acme", "--since", s.since, "--failed", "--rate", "60"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "recovered 2 dead-lettered item(s), one becoming due every 1 s");
    tl_proc_free(&p);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 2, 15000), 2);
    long long got[8];
    assert_int_equal(ids_received(f, "acme", got, 8), 2);
    assert_int_equal(got[0], s.dead[0]); /* oldest first */
    assert_int_equal(got[1], s.dead[1]);
    /* Their dead letters are gone; the old one and beta's stay. */
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter"), 2);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.dead_letter WHERE item_id IN "
                                  "(%lld, %lld)",
                                  s.old_dead, s.beta_dead),
                     2);
    /* Delivered once each, attempt 1 again; the second made due a --rate period after the
     * first (pgpace's own send times: never sent before due; the first may go later than its
     * due time, by the wake-up, so the gap between the two sends is not the measure). */
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 2, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                            "outcome = 'success' AND attempt = 1"),
                     2);
    long long gap_ms = tl_query_int(f->db->conn, "SELECT (extract(epoch FROM max(started_at) - "
                                                 "min(started_at)) * 1000)::bigint FROM "
                                                 "pgpace.delivery_attempt");
    long long second_ms = tl_query_int(f->db->conn,
                                       "SELECT (extract(epoch FROM max(started_at) - '%s') * "
                                       "1000)::bigint FROM pgpace.delivery_attempt",
                                       started);
    free(started);
    print_message("# --rate 60: the two recovered items went %lld ms apart, the second %lld ms "
                  "after the recovery started\n",
                  gap_ms, second_ms);
    assert_true(second_ms >= 1000);
    assert_int_equal(receiver_count(f->recv, "/c/beta"), 0);
    /* Nothing of the window is dead-lettered any more. */
    p = recover(f, TL_ARGV("--customer", "acme", "--since", s.since, "--dry-run"));
    tl_assert_contains(p.out, "dry run: 0 dead-lettered item(s) to send");
    tl_proc_free(&p);
}

/* A recovered item keeps its own deadline; one already past it is skipped and reported, and
 * its dead letter stays. Days after today are not reported as dropped. */
static void deadlines_are_kept(void **state)
{
    fx *f = *state;
    scene s;
    make_scene(f, &s, "600");
    tl_exec(f->db->conn,
            "UPDATE pgpace.item SET expires_at = now() - interval '1 minute' WHERE id = %lld",
            s.dead[0]);
    tl_exec(f->db->conn,
            "UPDATE pgpace.item SET expires_at = now() + interval '1 hour' WHERE id = %lld",
            s.dead[1]);
    char *until = tl_query_str(f->db->conn, "SELECT (now() + interval '30 days')::text");
    tl_proc p = recover(
        f, TL_ARGV("--customer", "acme", "--since", s.since, "--until", until, "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 1 dead-lettered item(s) to send");
    tl_assert_contains(p.out, "past their own deadline (expires_at; skipped, never sent late): 1");
    assert_null(strstr(p.out, "no longer kept"));
    tl_proc_free(&p);
    free(until);
    p = recover(f, TL_ARGV("--customer", "acme", "--since", s.since));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "recovered 1 dead-lettered item(s)");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON "
                                  "i.id = q.item_id WHERE q.item_id = %lld AND q.expires_at = "
                                  "i.expires_at AND q.priority = -32768",
                                  s.dead[1]),
                     1);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.dead_letter WHERE item_id = %lld",
                                  s.dead[0]),
                     1);
}

/* --all sends every item of the window that is not queued (delivered and dead-lettered), at the
 * customer's rate, and a live item enqueued after the recovery started goes before the
 * recovered ones still waiting. */
static void all_resends_the_window_behind_live_traffic(void **state)
{
    fx *f = *state;
    scene s;
    make_scene(f, &s, "120"); /* one every 500 ms */
    /* Five more delivered items in the window, so the recovery lasts a few seconds. */
    long long more[5];
    for (int i = 0; i < 5; i++)
        more[i] = item(f, "acme", "15 minutes", "delivered");
    fx_run(f, NULL);
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 1, 10000, "SELECT count(*) FROM pgpace.leader_config"),
        1);
    tl_proc p = recover(f, TL_ARGV("--customer", "acme", "--since", s.since, "--all"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "recovered 10 item(s)\nsent: at the customer's own rate, behind "
                              "its live traffic\n");
    tl_assert_contains(p.out, "still queued (skipped, they are sent anyway): 1");
    tl_proc_free(&p);
    /* The recovered lane's priority: every recovered item still queued has it (the dispatcher
     * runs, so the first ones may already be delivered and gone), and the queued item of the
     * window kept its own. */
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer c ON "
                                  "c.id = q.customer_id WHERE c.name = 'acme' AND q.item_id <> "
                                  "%lld AND q.priority <> -32768",
                                  s.queued),
                     0);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld AND "
                                  "priority = 0",
                                  s.queued),
                     1);
    /* Once the first recovered item arrived, a live one: it is next or, if the following
     * recovered item was already claimed for its slot, the one after. */
    assert_true(receiver_wait(f->recv, "/c/acme", 1, 10000) >= 1);
    size_t at_enqueue = receiver_count(f->recv, "/c/acme");
    long long live = fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 11, 20000), 11);
    long long got[16];
    size_t n = ids_received(f, "acme", got, 16);
    assert_int_equal(n, 11);
    size_t live_at = n;
    for (size_t i = 0; i < n; i++)
        if (got[i] == live)
            live_at = i;
    print_message(
        "# live item enqueued after %zu recovered ones arrived; it arrived %zu-th of 11\n",
        at_enqueue, live_at + 1);
    assert_true(live_at < n);
    assert_true(live_at <= at_enqueue + 1);
    assert_true(live_at < 10); /* before the last recovered one at the very least */
    /* Every recovered id is one of the window's items, with its original webhook-id. */
    long long want[10] = {s.delivered[0], s.delivered[1], s.delivered[2], s.dead[0], s.dead[1],
                          more[0],        more[1],        more[2],        more[3],   more[4]};
    for (size_t i = 0; i < 10; i++)
        assert_true(contains(got, n, want[i]));
    assert_false(contains(got, n, s.queued));
    assert_false(contains(got, n, s.old_dead));
    /* The window's dead letters went with them; the one before the window stays. */
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.dead_letter d JOIN "
                                  "pgpace.customer c ON c.id = d.customer_id WHERE c.name = "
                                  "'acme'"),
                     1);
}

/* The recovered items of ids[] that the receiver got so far. */
typedef struct recovered_seen {
    fx *f;
    const long long *ids;
    size_t n_ids, want;
} recovered_seen;

static size_t count_recovered(fx *f, const long long *ids, size_t n_ids)
{
    long long got[64];
    size_t n = ids_received(f, "acme", got, sizeof got / sizeof got[0]), k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)contains(ids, n_ids, got[i]);
    return k;
}

static int recovered_reached(void *arg)
{
    recovered_seen *w = arg;
    return count_recovered(w->f, w->ids, w->n_ids) >= w->want;
}

/* "{id,id,...}" of n ids, for = ANY($array) in SQL. */
static void id_array(char *out, size_t cap, const long long *ids, size_t n)
{
    size_t len = (size_t)snprintf(out, cap, "{");
    for (size_t i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", i ? "," : "", ids[i]);
    if (len < cap)
        snprintf(out + len, cap - len, "}");
}

#define N_LIVE 8

/* --rate R limits the recovered items' sends, not only their due times: beside live items
 * enqueued while the recovery runs, of a customer whose own rate is higher (600/min: its live
 * items go 100 ms apart), no two recovered items go out less than 60/R s (500 ms) apart, by
 * pgpace's own send times; every live item is delivered, and none waits behind recovered ones:
 * a recovered item claimed after a live item was enqueued goes after it, so between a live
 * item's enqueue and its send only those claimed before it may go (a couple at most).
 * Five live items at once hold the recovered ones back by about a period: when only due times
 * were spaced, the next recovered item, already due, then went 100 ms after the held one. */
static void rate_limits_recovered_sends_beside_live_traffic(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--mode", "spaced", "--rate", "600", "--burst", "1"));
    long long dead[10];
    for (int i = 0; i < 10; i++) {
        char ago[32];
        snprintf(ago, sizeof ago, "%d minutes", 60 - i);
        dead[i] = item(f, "acme", ago, "dead");
    }
    char *since = tl_query_str(f->db->conn, "SELECT (" SINCE_SQL ")::text");
    fx_run(f, NULL);
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 1, 10000, "SELECT count(*) FROM pgpace.leader_config"),
        1);
    tl_proc p = recover(f, TL_ARGV("--customer", "acme", "--since", since, "--rate", "120"));
    free(since);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "recovered 10 dead-lettered item(s)");
    char *out = strdup(p.out);
    tl_proc_free(&p);

    /* Live items: five at once once two recovered ones arrived, then one each after the
     * fifth, sixth and seventh. */
    long long live[N_LIVE];
    static const size_t after[N_LIVE] = {2, 2, 2, 2, 2, 5, 6, 7};
    for (size_t i = 0; i < N_LIVE; i++) {
        recovered_seen w = {.f = f, .ids = dead, .n_ids = 10, .want = after[i]};
        assert_true(tl_wait_until(recovered_reached, &w, 30000));
        live[i] = fx_enqueue(f, "acme", NULL, 1);
    }
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 10 + N_LIVE, 60000), 10 + N_LIVE);
    long long got[32];
    size_t n = ids_received(f, "acme", got, sizeof got / sizeof got[0]);
    assert_int_equal(n, 10 + N_LIVE);
    for (size_t i = 0; i < 10; i++)
        assert_true(contains(got, n, dead[i]));
    for (size_t i = 0; i < N_LIVE; i++)
        assert_true(contains(got, n, live[i]));
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 10 + N_LIVE, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                            "outcome = 'success'"),
                     10 + N_LIVE);

    /* The bound: pgpace's recorded send times of the recovered items (the clock reading that
     * released each request), never less than 500 ms apart (490: clock granularity). */
    char dead_ids[512], live_ids[512];
    id_array(dead_ids, sizeof dead_ids, dead, 10);
    id_array(live_ids, sizeof live_ids, live, N_LIVE);
    long long min_gap_us = tl_query_int(
        f->db->conn,
        "SELECT (extract(epoch FROM min(g)) * 1000000)::bigint FROM (SELECT started_at - "
        "lag(started_at) OVER (ORDER BY started_at) AS g FROM pgpace.delivery_attempt WHERE "
        "item_id = ANY ('%s'::bigint[]) AND outcome = 'success') x",
        dead_ids);
    /* The receiver's arrival gaps, for the record (its own scheduling adds jitter both ways). */
    long long prev_us = 0, min_arrival_us = -1;
    for (size_t i = 0, total = receiver_count(f->recv, NULL); i < total; i++) {
        receiver_request rq;
        if (receiver_get(f->recv, i, &rq) != 0)
            break;
        free(rq.body);
        if (strncmp(rq.webhook_id, "msg_", 4) != 0 || !contains(dead, 10, atoll(rq.webhook_id + 4)))
            continue;
        if (prev_us && (min_arrival_us < 0 || rq.at_us - prev_us < min_arrival_us))
            min_arrival_us = rq.at_us - prev_us;
        prev_us = rq.at_us;
    }
    /* The customer's own pace holds too: all its sends at least 100 ms apart (a millisecond of
     * timer resolution). */
    long long min_any_us = tl_min_send_gap_us(f->db->conn, "acme", NULL);
    /* Live first: recovered items sent between a live item's enqueue and its own send. */
    long long most_ahead = tl_query_int(
        f->db->conn,
        "SELECT max((SELECT count(*) FROM pgpace.delivery_attempt r WHERE r.item_id = ANY "
        "('%s'::bigint[]) AND r.started_at > i.created_at AND r.started_at < a.started_at)) FROM "
        "pgpace.item i JOIN pgpace.delivery_attempt a ON a.item_id = i.id WHERE i.id = ANY "
        "('%s'::bigint[])",
        dead_ids, live_ids);
    print_message("# --rate 120 beside 8 live items (customer at 600/min): recovered sends at "
                  "least %lld us apart (receiver arrivals %lld us), all sends %lld us; at most "
                  "%lld recovered sent between a live item's enqueue and its send\n",
                  min_gap_us, min_arrival_us, min_any_us, most_ahead);
    assert_true(min_gap_us >= 490000);
    assert_true(min_any_us >= 99000);
    assert_true(most_ahead <= 3);
    /* What the run said it would hold them to. */
    tl_assert_contains(out, "sent: never faster than 120/min (at least 0.500 s between two "
                            "recovered sends), nor faster than the customer's own rate, behind "
                            "its live traffic\n");
    free(out);
}

/* A day of the window whose partition retention dropped is reported with the item ids the
 * attempt log still knows, not skipped silently; a day that still has its partition is not. */
static void dropped_days_are_reported(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    PGconn *c = f->db->conn;
    /* Three delivered items of the UTC day 10 days back, in that day's partition, two of them in
     * the attempt log; then retention (items kept 7 days) drops the day. */
    assert_int_equal(tl_query_int(c, "SELECT pgpace.create_item_partition((now() AT TIME ZONE "
                                     "'UTC')::date - 10)::int"),
                     1);
    long long first = tl_query_int(c, "SELECT pgpace.item_day_first_id((now() AT TIME ZONE "
                                      "'UTC')::date - 10)");
    tl_exec(c,
            "INSERT INTO pgpace.item (id, customer_id, payload, created_at) SELECT %lld + g, c.id, "
            "'{}', ((now() AT TIME ZONE 'UTC')::date - 10)::timestamp AT TIME ZONE 'UTC' + "
            "interval '12 hours' FROM pgpace.customer c, generate_series(1, 3) g WHERE c.name = "
            "'acme'",
            first);
    tl_exec(c,
            "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
            "duration_ms, http_status, outcome) SELECT i.id, i.customer_id, 1, i.created_at, 5, "
            "200, 'success' FROM pgpace.item i WHERE i.id IN (%lld, %lld)",
            first + 1, first + 2);
    assert_true(tl_query_int(c, "SELECT pgpace.drop_item_partitions(interval '7 days')") >= 1);

    /* The window: from 11 days back (UTC midnight) to 9 days back: three days, none kept. */
    char *since = tl_query_str(c, "SELECT (((now() AT TIME ZONE 'UTC')::date - 11)::timestamp AT "
                                  "TIME ZONE 'UTC')::text");
    char *until = tl_query_str(c, "SELECT (((now() AT TIME ZONE 'UTC')::date - 8)::timestamp AT "
                                  "TIME ZONE 'UTC')::text");
    char *day = tl_query_str(c, "SELECT ((now() AT TIME ZONE 'UTC')::date - 10)::text");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.recover('acme', '%s', '%s', false, "
                                  "NULL, true) WHERE category = 'day_not_kept'",
                                  since, until),
                     3);
    assert_int_equal(tl_query_int(c,
                                  "SELECT items FROM pgpace.recover('acme', '%s', '%s', false, "
                                  "NULL, true) WHERE day = '%s'",
                                  since, until, day),
                     2);
    tl_proc p = recover(
        f, TL_ARGV("--customer", "acme", "--since", since, "--until", until, "--all", "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 0 item(s) to send");
    tl_assert_contains(p.out, "days no longer kept (dropped by retention; their items cannot be "
                              "sent): 3");
    char want[96];
    snprintf(want, sizeof want, "  %s: 2 item id(s) known from the attempt log or dead letters",
             day);
    tl_assert_contains(p.out, want);
    tl_proc_free(&p);
    /* A window of the last hour: its days are kept, nothing to report. */
    keep_yesterday(f);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.recover('acme', now() - "
                                     "interval '1 hour', NULL, false, NULL, true) WHERE category "
                                     "= 'day_not_kept'"),
                     0);
    free(since);
    free(until);
    free(day);
}

/* An endpoint (0018) of customer `customer`, receiving at /e/<endpoint>; `events` is its
 * subscription (SQL array literal, or NULL), `filter` its payload filter (JSON, or NULL). */
static void endpoint(fx *f, const char *customer, const char *name, const char *events,
                     const char *filter)
{
    char path[64], url[160];
    snprintf(path, sizeof path, "/e/%s", name);
    receiver_url(f->recv, path, url, sizeof url);
    tl_exec(f->db->conn,
            "SELECT pgpace.endpoint_add('%s', '%s', '%s', 600, event_types => %s%s%s, "
            "payload_filter => %s%s%s)",
            customer, name, url, events ? "'" : "", events ? events : "NULL", events ? "'" : "",
            filter ? "'" : "", filter ? filter : "NULL", filter ? "'" : "");
}

/* Enqueues one event of `kind` to `customer` (payload JSON); returns its id (the event's). */
static long long event(fx *f, const char *customer, const char *kind, const char *payload)
{
    return tl_query_int(f->db->conn, "SELECT pgpace.enqueue('%s', '%s', kind => '%s')", customer,
                        payload, kind);
}

/* The delivery of event `ev` made for row `row` (a customer's or an endpoint's full name). */
static long long delivery_of(fx *f, long long ev, const char *row)
{
    return tl_query_int(f->db->conn,
                        "SELECT i.id FROM pgpace.item i JOIN pgpace.customer c ON c.id = "
                        "i.customer_id WHERE i.event_id = %lld AND c.name = '%s'",
                        ev, row);
}

/* What became of a queued delivery before the dispatcher ran: 'delivered' (an attempt that
 * succeeded under its row, no queue row) or 'dead' (an attempt that failed, a dead letter). */
static void settle(fx *f, long long item, const char *state)
{
    bool dead = strcmp(state, "dead") == 0;
    tl_exec(f->db->conn,
            "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
            "duration_ms, http_status, outcome) SELECT q.item_id, q.customer_id, 1, now(), 5, %d, "
            "'%s' FROM pgpace.queue q WHERE q.item_id = %lld",
            dead ? 500 : 200, dead ? "dead" : "success", item);
    if (dead)
        tl_exec(f->db->conn,
                "INSERT INTO pgpace.dead_letter (item_id, customer_id, attempts, last_status, "
                "last_error) SELECT q.item_id, q.customer_id, 1, 500, 'HTTP 500' FROM "
                "pgpace.queue q WHERE q.item_id = %lld",
                item);
    tl_exec(f->db->conn, "DELETE FROM pgpace.queue WHERE item_id = %lld", item);
}

/* The webhook-ids a receiver path got, in arrival order; returns how many. */
static size_t ids_at(fx *f, const char *prefix, long long *ids, size_t max)
{
    size_t n = 0, total = receiver_count(f->recv, NULL);
    for (size_t i = 0; i < total && n < max; i++) {
        receiver_request rq;
        if (receiver_get(f->recv, i, &rq) != 0)
            break;
        free(rq.body);
        if (strncmp(rq.path, prefix, strlen(prefix)) == 0)
            ids[n++] = atoll(rq.webhook_id + 4);
    }
    return n;
}

/* `recover --endpoint`: a customer without a receiver of its own has nothing to recover by
 * itself; its endpoint crm gets its dead-lettered delivery again; bill, added after two invoice
 * events that matched no endpoint then, is back-filled with the one its filter matches (not the
 * other region's, not an order, not one past its deadline), once: a second run finds nothing,
 * and the event counts its new delivery. */
static void endpoint_is_recovered_and_backfilled(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    keep_yesterday(f);
    tl_exec(c, "SELECT pgpace.customer_set('shop', rate_per_minute => 600)");
    endpoint(f, "shop", "crm", "{order.*}", NULL);
    long long o1 = event(f, "shop", "order.created", "{\"n\": 1}");
    long long o2 = event(f, "shop", "order.paid", "{\"n\": 2}");
    long long eu = event(f, "shop", "invoice.paid", "{\"region\": \"eu\", \"n\": 3}");
    long long us = event(f, "shop", "invoice.paid", "{\"region\": \"us\", \"n\": 4}");
    long long late = event(f, "shop", "invoice.paid", "{\"region\": \"eu\", \"n\": 5}");
    tl_exec(c, "UPDATE pgpace.item SET expires_at = now() - interval '1 minute' WHERE id = %lld",
            late);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item WHERE id IN (%lld, %lld, "
                                  "%lld) AND fanout = 0",
                                  eu, us, late),
                     3);
    settle(f, delivery_of(f, o1, "shop/crm"), "delivered");
    long long dead = delivery_of(f, o2, "shop/crm");
    settle(f, dead, "dead");
    endpoint(f, "shop", "bill", "{invoice.*}", "{\"region\": \"eu\"}");
    char *since = tl_query_str(c, "SELECT (" SINCE_SQL ")::text");

    /* The customer's own row has no receiver: nothing of it is sent again. */
    tl_proc p = recover(f, TL_ARGV("--customer", "shop", "--since", since, "--all"));
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "pgpace recover: customer 'shop' has no receiver of its own (no "
                              "webhook URL): recover one of its endpoints");
    tl_assert_contains(p.err, "--endpoint NAME");
    tl_proc_free(&p);
    /* Dry runs count and change nothing. */
    const char *state_sql = "SELECT (SELECT count(*) FROM pgpace.item) * 100 + (SELECT count(*) "
                            "FROM pgpace.queue) * 10 + (SELECT count(*) FROM pgpace.dead_letter)";
    long long before = tl_query_int(c, "%s", state_sql);
    p = recover(f,
                TL_ARGV("--customer", "shop", "--endpoint", "bill", "--since", since, "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 0 dead-lettered item(s) to send; nothing was changed\n"
                              "dry run: 1 event(s) to back-fill (no delivery for endpoint bill "
                              "yet)\n");
    tl_assert_contains(p.out, "past their own deadline (expires_at; skipped, never sent late): 1");
    tl_proc_free(&p);
    p = recover(f, TL_ARGV("--customer", "shop", "--endpoint", "crm", "--since", since, "--all",
                           "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 2 item(s) to send; nothing was changed\n"
                              "dry run: 0 event(s) to back-fill");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "%s", state_sql), before);

    fx_run(f, NULL);
    p = recover(f, TL_ARGV("--customer", "shop", "--endpoint", "bill", "--since", since));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "recovered 0 dead-lettered item(s)\n"
                              "back-filled 1 event(s) that had no delivery for endpoint bill\n"
                              "sent: at the endpoint's own rate, behind its live traffic\n");
    tl_proc_free(&p);
    assert_int_equal(receiver_wait(f->recv, "/e/bill", 1, 15000), 1);
    receiver_request rq;
    assert_int_equal(receiver_get(f->recv, 0, &rq), 0);
    char want_id[40];
    snprintf(want_id, sizeof want_id, "msg_%lld", eu);
    assert_string_equal(rq.path, "/e/bill");
    assert_string_equal(rq.webhook_id, want_id); /* the event's, as every delivery of it */
    tl_assert_contains(rq.body, "\"region\": \"eu\"");
    free(rq.body);
    /* Dated as its event, in its event's day; counted in the event's fanout. */
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item d JOIN pgpace.item e ON e.id = "
                                  "d.event_id WHERE e.id = %lld AND d.payload IS NULL AND "
                                  "d.created_at = e.created_at AND pgpace.item_id_day(d.id) = "
                                  "pgpace.item_id_day(e.id) AND e.fanout = 1",
                                  eu),
                     1);
    assert_int_equal(tl_query_int(c, "SELECT fanout FROM pgpace.item WHERE id = %lld", us), 0);
    /* Once: the next run finds the delivery. */
    p = recover(f, TL_ARGV("--customer", "shop", "--endpoint", "bill", "--since", since));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "recovered 0 dead-lettered item(s)\nback-filled 0 event(s)");
    tl_proc_free(&p);

    /* crm: its dead-lettered delivery again, with its event's webhook-id; nothing to back-fill
     * (both orders have a delivery for it). */
    p = recover(f, TL_ARGV("--customer", "shop", "--endpoint", "crm", "--since", since));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "recovered 1 dead-lettered item(s)\n"
                              "back-filled 0 event(s) that had no delivery for endpoint crm\n");
    tl_proc_free(&p);
    assert_int_equal(receiver_wait(f->recv, "/e/crm", 1, 15000), 1);
    long long got[8];
    assert_int_equal(ids_at(f, "/e/crm", got, 8), 1);
    assert_int_equal(got[0], o2);
    assert_int_equal(
        tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter WHERE item_id = %lld", dead), 0);
    /* Nothing else went anywhere: bill got its one, the events were never sent themselves. */
    assert_int_equal(receiver_wait(f->recv, "/e/bill", 2, 1000), 1);
    free(since);
}

/* A customer with its own receiver and an endpoint: `recover --customer` (its own receiver)
 * never sends an event itself, nor a delivery its deleted endpoint left on its row (dead letter
 * endpoint_deleted, or one the endpoint had attempted); `--endpoint default` back-fills its own
 * receiver like any endpoint. */
static void events_and_leftovers_are_not_recovered(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    keep_yesterday(f);
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    endpoint(f, "acme", "crm", NULL, NULL);
    endpoint(f, "acme", "gone", NULL, NULL);
    long long e1 = event(f, "acme", "a", "{\"n\": 1}");
    long long e2 = event(f, "acme", "b", "{\"n\": 2}");
    /* acme's own delivery of e1 delivered, of e2 dead; crm's delivered; gone's of e1 failed
     * (attempted under gone's row, dead-lettered), of e2 still queued. */
    settle(f, delivery_of(f, e1, "acme"), "delivered");
    long long own_dead = delivery_of(f, e2, "acme");
    settle(f, own_dead, "dead");
    settle(f, delivery_of(f, e1, "acme/crm"), "delivered");
    settle(f, delivery_of(f, e2, "acme/crm"), "delivered");
    settle(f, delivery_of(f, e1, "acme/gone"), "dead");
    assert_int_equal(tl_query_int(c, "SELECT pgpace.endpoint_delete('acme', 'gone', true)"), 1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter d JOIN "
                                     "pgpace.customer c ON c.id = d.customer_id WHERE c.name = "
                                     "'acme'"),
                     3);
    char *since = tl_query_str(c, "SELECT (" SINCE_SQL ")::text");
    /* --failed: its own dead letter only; --all: its own two deliveries, not the events, not
     * what `gone` left. */
    tl_proc p = recover(f, TL_ARGV("--customer", "acme", "--since", since, "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 1 dead-lettered item(s) to send");
    tl_proc_free(&p);
    p = recover(f, TL_ARGV("--customer", "acme", "--since", since, "--all", "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 2 item(s) to send");
    tl_proc_free(&p);
    /* Its own receiver as an endpoint: the same two, and no event lacks a delivery for it. */
    p = recover(f, TL_ARGV("--customer", "acme", "--endpoint", "default", "--since", since, "--all",
                           "--dry-run"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "dry run: 2 item(s) to send; nothing was changed\n"
                              "dry run: 0 event(s) to back-fill");
    tl_proc_free(&p);
    p = recover(f, TL_ARGV("--customer", "acme", "--since", since, "--all"));
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "recovered 2 item(s)");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON "
                                  "i.id = q.item_id WHERE i.fanout IS NOT NULL OR i.id IN (SELECT "
                                  "d.item_id FROM pgpace.dead_letter d)"),
                     0);
    /* The two dead letters `gone` left stay for the operator. */
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter"), 2);
    /* Bad input about endpoints names the flag. */
    p = recover(f, TL_ARGV("--customer", "acme", "--endpoint", "gone", "--since", since));
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "pgpace recover: --endpoint: customer 'acme' has no endpoint "
                              "'gone'");
    tl_proc_free(&p);
    p = recover(f, TL_ARGV("--endpoint", "crm", "--since", since));
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--endpoint needs --customer");
    tl_proc_free(&p);
    p = recover(f, TL_ARGV("--customer", "ghost", "--endpoint", "crm", "--since", since));
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "pgpace recover: --customer: unknown customer 'ghost'");
    tl_proc_free(&p);
    tl_expect_sql_error(c, "SELECT * FROM pgpace.recover_endpoint('acme', NULL, now())", "22004",
                        "endpoint must not be null", NULL);
    free(since);
}

/* Every bad input: exit 2 naming the flag on the CLI, a SQLSTATE naming the field in SQL. */
static void bad_input_names_the_flag(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    static const struct {
        const char *args[8];
        const char *err;
    } cases[] = {
        {{"--since", "2026-01-01T00:00:00Z"}, "pgpace recover: --customer is required"},
        {{"--customer", "acme"}, "pgpace recover: --since is required"},
        {{"--customer", "acme", "--since", "2026-01-01", "--failed", "--all"},
         "pgpace recover: --failed and --all exclude each other"},
        {{"--customer", "acme", "--since", "2026-01-01", "--rate", "0"},
         "pgpace recover: --rate: must be greater than 0 per minute, got '0'"},
        {{"--customer", "acme", "--since", "2026-01-01", "--rate", "nan"},
         "pgpace recover: --rate: "},
        {{"--customer", "acme", "--since", "2026-01-01", "--rate", "1e-12"},
         "pgpace recover: --rate: expected at least 0.0001 per minute (one item a week), got "
         "'1e-12'"},
        {{"--customer", "bad name", "--since", "2026-01-01"}, "--customer: "},
        {{"--customer", "ghost", "--since", "2026-01-01"},
         "pgpace recover: --customer: unknown customer 'ghost'"},
        {{"--customer", "acme", "--since", "yesterday-ish"},
         "pgpace recover: --since: invalid input syntax for type timestamp with time zone"},
        {{"--customer", "acme", "--since", "2026-01-01", "--until", "soon"},
         "pgpace recover: --until: invalid input syntax"},
        {{"--customer", "acme", "--since", "2999-01-01T00:00:00Z"},
         "pgpace recover: --since: since (2999-01-01 "},
        {{"--customer", "acme", "--since", "2026-01-02T00:00:00Z", "--until",
          "2026-01-01T00:00:00Z"},
         "pgpace recover: --since: since (2026-01-0"},
        {{"--customer", "acme", "--since", "2026-01-01", "--until", "infinity"},
         "pgpace recover: --until: until must be a finite timestamp"},
        {{"--customer", "acme", "--since", "2026-01-01", "--bogus"},
         "unknown or incomplete option '--bogus'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[12];
        size_t n = 0;
        for (; n < 8 && cases[i].args[n]; n++)
            argv[n] = cases[i].args[n];
        argv[n] = NULL;
        tl_proc p = recover(f, argv);
        if (p.status != 2 || !strstr(p.err, cases[i].err))
            fail_msg("case %zu: exit %d, stderr: %s (expected %s)", i, p.status, p.err,
                     cases[i].err);
        tl_proc_free(&p);
    }
    /* The same rules in SQL, each with its SQLSTATE and field. */
    static const struct {
        const char *call, *state, *msg;
    } sql[] = {
        {"pgpace.recover(NULL, now())", "22004", "customer must not be null"},
        {"pgpace.recover('acme', NULL)", "22004", "since must not be null"},
        {"pgpace.recover('ghost', now() - interval '1 day')", "23503", "unknown customer 'ghost'"},
        {"pgpace.recover('acme', now() + interval '1 day')", "22023", "is in the future"},
        {"pgpace.recover('acme', now() - interval '1 day', now() - interval '2 days')", "22023",
         "must be before until"},
        {"pgpace.recover('acme', '-infinity')", "22023", "since must be a finite timestamp"},
        {"pgpace.recover('acme', now() - interval '1 day', rate_per_minute => 'NaN')", "22023",
         "rate_per_minute must be a number of at least 0.0001 (one item a week)"},
        {"pgpace.recover('acme', now() - interval '1 day', rate_per_minute => -1)", "22023",
         "rate_per_minute must be a number of at least 0.0001"},
        {"pgpace.recover('acme', now() - interval '1 day', rate_per_minute => 1e-12)", "22023",
         "rate_per_minute must be a number of at least 0.0001"},
    };
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        char q[256];
        snprintf(q, sizeof q, "SELECT * FROM %s", sql[i].call);
        PGresult *res = PQexec(f->db->conn, q);
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (PQresultStatus(res) != PGRES_FATAL_ERROR || !st || strcmp(st, sql[i].state) != 0 ||
            !strstr(PQresultErrorMessage(res), sql[i].msg))
            fail_msg("%s: expected %s %s, got %s %s", sql[i].call, sql[i].state, sql[i].msg,
                     st ? st : "-", PQresultErrorMessage(res));
        PQclear(res);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(failed_resends_the_windows_dead_letters, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(all_resends_the_window_behind_live_traffic, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(rate_limits_recovered_sends_beside_live_traffic, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(dropped_days_are_reported, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(deadlines_are_kept, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(bad_input_names_the_flag, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(endpoint_is_recovered_and_backfilled, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(events_and_leftovers_are_not_recovered, fx_setup,
                                        fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
