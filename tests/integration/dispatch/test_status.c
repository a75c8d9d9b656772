/* test_status.c - GET /v1/status, the live status page's data, against a running dispatcher, a
 * real database and the loopback receiver; every answer parsed as JSON (jansson):
 * - the answer's shape and numbers: instance, role, leader, instances; each customer's mode,
 *   rate, burst as configured; the gaps between a spaced customer's requests never shorter than
 *   its period; a batch customer's requests per tick never above its allowance and reaching it;
 *   requests per minute matching what the receiver got; due counts falling while a backlog
 *   drains; the carriers with their caps (never exceeded) and no "" carrier;
 * - paging, sorting and filtering over 120 customers: pages cover each customer once, in order;
 *   descending name; case-insensitive filter; rate with ties by name; problems first for state
 *   (disabled, breaker open, paused); exact due/delayed/dead counts of held customers; bad
 *   parameters refused with 400 naming the parameter;
 * - a customer throttled by its receiver (429 without Retry-After): effective rate below the
 *   configured one, throttled, last_error http/429;
 * - no secret in the answer: signing secret, header value, Basic password, payload, URL and the
 *   receiver's error body all reached the dispatcher, none reaches the page;
 * - a standby's answer: live false, what only the leader knows null, the leader named, the
 *   database's counts present;
 * - [http] status_token: 401 with WWW-Authenticate: Basic, Bearer and Basic (any user) accepted,
 *   /metrics still open, and a reload without the token opens it;
 * - the database cut off (a proxy that resets): 200, "database":"unreachable", the counts null,
 *   the customers listed from memory; "ok" again once the database is back;
 * - a deep backlog: a customer's counts stop at 10,000 rows (counts_capped), the totals exact.
 * The poll loops wait on conditions with deadlines (tl_wait_until). */
#include "fixture.h"
#include "common.h"
#include "strbuf.h"
#include "tcpproxy.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ---- HTTP ---------------------------------------------------------------------------------- */

typedef struct answer {
    long status;
    char *body;
    char *head; /* the answer's header lines */
} answer;

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    strbuf_append(arg, data, size * n);
    return size * n;
}

static char *take(strbuf *sb)
{
    char *s = strdup(strbuf_str(sb) ? strbuf_str(sb) : "");
    assert_non_null(s);
    strbuf_free(sb);
    return s;
}

/* GET path from the admin listener. authorization: an Authorization header value (NULL: none);
 * userpwd: "user:password" that libcurl sends as HTTP Basic (NULL: none). */
static answer http_get(int port, const char *path, const char *authorization, const char *userpwd)
{
    char url[1024];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    strbuf body = {0}, head = {0};
    struct curl_slist *h = NULL;
    char auth[512];
    if (authorization) {
        snprintf(auth, sizeof auth, "Authorization: %s", authorization);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (userpwd) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERPWD, userpwd);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &head);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    answer a = {0};
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    a.body = take(&body);
    a.head = take(&head);
    if (rc != CURLE_OK)
        fail_msg("GET %s: %s", path, curl_easy_strerror(rc));
    return a;
}

static void answer_free(answer *a)
{
    free(a->body);
    free(a->head);
}

/* The value of header `name` in the answer's head ("" when absent), into buf. */
static const char *header_of(const answer *a, const char *name, char *buf, size_t len)
{
    buf[0] = '\0';
    size_t n = strlen(name);
    for (const char *line = a->head; line && *line;) {
        const char *end = strstr(line, "\r\n");
        size_t l = end ? (size_t)(end - line) : strlen(line);
        if (l > n && strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            snprintf(buf, len, "%.*s", (int)(l - (size_t)(v - line)), v);
            return buf;
        }
        line = end ? end + 2 : line + l;
    }
    return buf;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static char *dump(const json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    return s ? s : strdup("(none)");
}

static json_t *jget(const json_t *o, const char *key)
{
    json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    if (!v)
        fail_msg("no field \"%s\" in %s", key, dump(o));
    return v;
}

static double jnum(const json_t *o, const char *key)
{
    json_t *v = jget(o, key);
    if (!json_is_number(v))
        fail_msg("\"%s\" is not a number in %s", key, dump(o));
    return json_number_value(v);
}

static const char *jstr(const json_t *o, const char *key)
{
    json_t *v = jget(o, key);
    if (!json_is_string(v))
        fail_msg("\"%s\" is not a string in %s", key, dump(o));
    return json_string_value(v);
}

static bool jbool(const json_t *o, const char *key)
{
    json_t *v = jget(o, key);
    if (!json_is_boolean(v))
        fail_msg("\"%s\" is not a boolean in %s", key, dump(o));
    return json_is_true(v);
}

static void jnull(const json_t *o, const char *key)
{
    if (!json_is_null(jget(o, key)))
        fail_msg("\"%s\" is not null in %s", key, dump(o));
}

static json_t *jarr(const json_t *o, const char *key)
{
    json_t *v = jget(o, key);
    if (!json_is_array(v))
        fail_msg("\"%s\" is not an array in %s", key, dump(o));
    return v;
}

/* The element of array `key` whose field `field` is `value`, or NULL. */
static json_t *jfind(const json_t *o, const char *key, const char *field, const char *value)
{
    json_t *arr = jarr(o, key), *e;
    size_t i;
    json_array_foreach(arr, i, e)
    {
        json_t *v = json_object_get(e, field);
        if (json_is_string(v) && strcmp(json_string_value(v), value) == 0)
            return e;
    }
    return NULL;
}

/* The listed customer `name`; fails when it is not on the page. */
static json_t *cust(const json_t *j, const char *name)
{
    json_t *c = jfind(j, "customers", "name", name);
    if (!c)
        fail_msg("customer %s is not listed: %s", name, dump(j));
    return c;
}

/* Whether the answer comes from a leader that has loaded `name` (polls start before that). */
static bool leading_with(const json_t *j, const char *name)
{
    return strcmp(jstr(j, "role"), "leader") == 0 && jbool(j, "live") &&
           jfind(j, "customers", "name", name) != NULL;
}

/* GET /v1/status?query: must be 200 with a JSON object (owned). */
static json_t *status_get(int port, const char *query)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/status%s%s", query && *query ? "?" : "", query ? query : "");
    answer a = http_get(port, path, NULL, NULL);
    if (a.status != 200)
        fail_msg("GET %s: %ld %s", path, a.status, a.body);
    json_error_t e;
    json_t *j = json_loads(a.body, 0, &e);
    if (!json_is_object(j))
        fail_msg("GET %s: not a JSON object (%s): %s", path, e.text, a.body);
    answer_free(&a);
    return j;
}

typedef bool (*status_pred)(const json_t *j, void *arg);

typedef struct status_wait {
    int port;
    const char *query;
    status_pred pred;
    void *arg;
    json_t *last;
} status_wait;

static int status_wait_cond(void *p)
{
    status_wait *w = p;
    json_decref(w->last);
    w->last = status_get(w->port, w->query);
    return w->pred(w->last, w->arg);
}

/* Polls GET /v1/status?query until pred holds (it may also assert invariants of every answer);
 * returns that answer (owned), or fails with the last one after timeout_ms. */
static json_t *wait_status(int port, const char *query, status_pred pred, void *arg, int timeout_ms,
                           const char *what)
{
    status_wait w = {port, query, pred, arg, NULL};
    if (!tl_wait_until(status_wait_cond, &w, timeout_ms))
        fail_msg("%s: not within %d ms; the last answer: %s", what, timeout_ms, dump(w.last));
    return w.last;
}

/* The names of the listed customers in order, one per line (owned). */
static char *names_of(const json_t *j)
{
    strbuf sb = {0};
    json_t *arr = jarr(j, "customers"), *e;
    size_t i;
    json_array_foreach(arr, i, e)
    {
        strbuf_puts(&sb, jstr(e, "name"));
        strbuf_puts(&sb, "\n");
    }
    return take(&sb);
}

/* Seconds since the epoch of "2026-11-24T12:00:00.123Z" (the fraction optional). */
static double iso_seconds(const char *s)
{
    struct tm tm = {0};
    const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest)
        fail_msg("not an ISO time: %s", s);
    double frac = 0;
    if (*rest == '.') {
        char *end;
        frac = strtod(rest, &end);
        rest = end;
    }
    if (strcmp(rest, "Z") != 0)
        fail_msg("not a UTC ISO time: %s", s);
    return (double)timegm(&tm) + frac;
}

static double now_s(void)
{
    return (double)fx_now_us() / 1e6;
}

/* Items of a customer in the queue that status_customers.sql counts (next_action_at set). */
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
    if (!leading_with(j, "fast") || !leading_with(j, "slow") || !leading_with(j, "batch") ||
        !leading_with(j, "free"))
        return false;
    bool ready = true;
    static const struct {
        const char *name;
        int rate;
        size_t want_gaps;
    } spaced[] = {{"fast", FAST_RATE, 20}, {"slow", SLOW_RATE, 4}};
    for (size_t s = 0; s < PGP_ARRAY_LEN(spaced); s++) {
        json_t *c = cust(j, spaced[s].name);
        double period = 60000.0 / spaced[s].rate;
        assert_true(fabs(jnum(c, "period_ms") - period) < 0.001);
        json_t *gaps = jarr(c, "gaps_ms"), *g;
        size_t i;
        assert_true(json_array_size(gaps) <= 30);
        json_array_foreach(gaps, i, g)
        {
            if (json_number_value(g) < period - GAP_SLACK_MS)
                fail_msg("%s: gap %zu of %.0f ms is shorter than its period %.0f ms: %s",
                         spaced[s].name, i, json_number_value(g), period, dump(gaps));
        }
        ready = ready && json_array_size(gaps) >= spaced[s].want_gaps;
    }
    json_t *b = cust(j, "batch");
    assert_true(jnum(b, "allowance") == BATCH_RATE);
    json_t *ticks = jarr(b, "tick_counts"), *t;
    size_t i;
    bool full = false;
    assert_true(json_array_size(ticks) <= 30);
    json_array_foreach(ticks, i, t)
    {
        if (json_number_value(t) > BATCH_RATE)
            fail_msg("batch: %.0f requests in one tick, above its allowance %d: %s",
                     json_number_value(t), BATCH_RATE, dump(ticks));
        full = full || json_number_value(t) == BATCH_RATE;
    }
    json_t *free_c = cust(j, "free");
    assert_true(jnum(free_c, "in_flight") >= 0 && jnum(free_c, "in_flight") <= FREE_MAX_IF);
    json_t *noisy = jfind(j, "carriers", "name", "noisy");
    if (!noisy)
        fail_msg("carrier noisy is not listed: %s", dump(j));
    assert_true(jnum(noisy, "in_flight") >= 0 && jnum(noisy, "in_flight") <= NOISY_IF);
    return ready && full && receiver_count(f->recv, "/c/free") >= FREE_ITEMS;
}

static bool free_drained(const json_t *j, void *arg)
{
    json_t *c = cust(j, "free");
    return jnum(c, "due") == 0 && jnum(c, "in_flight") == 0 && jnum(c, "delayed") == 0;
}

static bool fast_due_below(const json_t *j, void *arg)
{
    return jnum(cust(j, "fast"), "due") < *(double *)arg;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Observed requests per minute: those of the last 55 to 60 s (all since the start here, as
 * the case lasts less than that) times 60 over the time covered. */
static void check_observed(fx *f, int port, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/c/%s", name);
    size_t before = receiver_count(f->recv, path);
    json_t *j = status_get(port, NULL);
    size_t after = receiver_count(f->recv, path);
    json_t *c = cust(j, name);
    double observed = jnum(c, "observed_per_minute");
    double in_flight = jnum(c, "in_flight");
    double low = (double)before - 0.05, high = ((double)after + in_flight + 1) * 60 / 55 + 0.05;
    print_message("# %s: observed %.1f/min; the receiver had %zu then %zu requests\n", name,
                  observed, before, after);
    if (observed < low || observed > high)
        fail_msg("%s: observed_per_minute %.1f outside [%.1f, %.1f]", name, observed, low, high);
    /* The gaps are those of the latest requests: as many as were sent, up to 30; spacing keeps
     * each at least the period (shape_ready), and a dispatcher keeping up keeps them near it. */
    json_t *gaps = jarr(c, "gaps_ms");
    size_t n_gaps = json_array_size(gaps);
    assert_true(n_gaps == 30 || n_gaps + 1 >= before);
    assert_true(n_gaps > 0);
    double v[30];
    for (size_t i = 0; i < n_gaps && i < 30; i++)
        v[i] = json_number_value(json_array_get(gaps, i));
    qsort(v, n_gaps, sizeof *v, cmp_double);
    double period = jnum(c, "period_ms"), median = v[n_gaps / 2];
    char *shown = dump(gaps);
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
    json_t *j = status_get(port, NULL);
    size_t after = receiver_count(f->recv, "/c/batch");
    json_t *ticks = jarr(cust(j, "batch"), "tick_counts"), *t;
    size_t i;
    double sum = 0;
    json_array_foreach(ticks, i, t)
    {
        sum += json_number_value(t);
    }
    char *shown = dump(ticks);
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
    fx_run(f, "dispatcher.instance_name = alpha\ndispatcher.batch_tick_ms = 1000\n");
    int port = fx_admin_port(f);

    json_t *j = wait_status(port, NULL, shape_ready, f, 20000,
                            "20 gaps of fast, 4 of slow, a full batch tick, free delivered");

    /* The instance and its role. */
    tl_proc v = tl_pgpace(TL_ARGV("version"), NULL, NULL);
    assert_int_equal(v.status, 0);
    tl_assert_contains(v.out, jstr(j, "version"));
    tl_proc_free(&v);
    assert_true(fabs(iso_seconds(jstr(j, "generated_at")) - now_s()) < 5);
    assert_string_equal(jstr(j, "instance"), "alpha");
    assert_string_equal(jstr(j, "role"), "leader");
    assert_string_equal(jstr(j, "leader"), "alpha");
    assert_string_equal(jstr(j, "database"), "ok");
    assert_true(jbool(j, "live"));
    assert_true(jnum(j, "poll_ms") > 0);
    assert_true(jnum(j, "batch_tick_ms") == 1000);
    json_t *instances = jarr(j, "instances");
    assert_int_equal(json_array_size(instances), 1);
    json_t *me = json_array_get(instances, 0);
    assert_string_equal(jstr(me, "instance"), "alpha");
    assert_string_equal(jstr(me, "role"), "leader");
    assert_true(jnum(me, "pid") > 0);
    assert_true(strlen(jstr(me, "client")) > 0);
    assert_true(iso_seconds(jstr(me, "since")) <= now_s() + 1);

    /* Totals and the page. */
    json_t *totals = jget(j, "totals");
    assert_true(jnum(totals, "customers") ==
                tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.customer"));
    assert_true(jnum(totals, "matched") == 4);
    static const char *const zero[] = {"paused", "disabled", "held", "breaker_open", "throttled"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(zero); i++)
        assert_true(jnum(totals, zero[i]) == 0);
    assert_true(jnum(totals, "due") >= 0);
    assert_true(jnum(totals, "dead_letters") ==
                tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter"));
    assert_true(iso_seconds(jstr(totals, "totals_at")) <= now_s() + 1);
    json_t *page = jget(j, "page");
    assert_true(jnum(page, "offset") == 0 && jnum(page, "limit") == 50);
    assert_string_equal(jstr(page, "sort"), "name");
    assert_string_equal(jstr(page, "filter"), "");
    char *names = names_of(j);
    assert_string_equal(names, "batch\nfast\nfree\nslow\n");
    free(names);

    /* Each customer as configured (the database's row), and its state. */
    double in_flight_sum = 0;
    json_t *c;
    size_t i;
    json_array_foreach(jarr(j, "customers"), i, c)
    {
        const char *name = jstr(c, "name");
        char *mode =
            tl_query_str(f->db->conn, "SELECT mode FROM pgpace.customer WHERE name = '%s'", name);
        assert_string_equal(jstr(c, "mode"), mode);
        free(mode);
        assert_true(jnum(c, "rate") ==
                    tl_query_int(f->db->conn,
                                 "SELECT rate_per_minute FROM pgpace.customer WHERE name = '%s'",
                                 name));
        assert_true(
            jnum(c, "burst") ==
            tl_query_int(f->db->conn, "SELECT burst FROM pgpace.customer WHERE name = '%s'", name));
        assert_true(jnum(c, "effective_rate") == jnum(c, "rate"));
        assert_false(jbool(c, "throttled"));
        assert_true(jnum(c, "observed_per_minute") > 0);
        static const char *const counts[] = {"in_flight", "due", "delayed", "dead"};
        for (size_t k = 0; k < PGP_ARRAY_LEN(counts); k++)
            assert_true(jnum(c, counts[k]) >= 0);
        assert_true(jnum(c, "dead") == dead_of(f, name));
        assert_false(jbool(c, "counts_capped"));
        assert_string_equal(jstr(c, "breaker"), "closed");
        jnull(c, "breaker_open_until");
        assert_false(jbool(c, "paused"));
        assert_false(jbool(c, "disabled"));
        jnull(c, "held");
        jnull(c, "last_error");
        in_flight_sum += jnum(c, "in_flight");
    }
    assert_true(jnum(totals, "in_flight") >= in_flight_sum);
    assert_true(jnum(cust(j, "fast"), "burst") == 1);
    assert_true(jnum(cust(j, "free"), "max_in_flight") == FREE_MAX_IF);
    assert_true(jnum(cust(j, "fast"), "max_in_flight") == 0);
    /* Mode-specific fields. */
    json_t *fast = cust(j, "fast"), *batch = cust(j, "batch"), *free_c = cust(j, "free");
    jnull(fast, "allowance");
    jnull(fast, "tick_counts");
    jnull(batch, "period_ms");
    jnull(batch, "gaps_ms");
    assert_true(jnum(batch, "allowance") == jnum(batch, "rate"));
    jnull(free_c, "period_ms");
    jnull(free_c, "allowance");
    jnull(free_c, "tick_counts");
    jarr(free_c, "gaps_ms");
    /* Only the carrier an operator set, with its caps; not the items without one (""). */
    assert_true(jnum(j, "carriers_total") ==
                tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.carrier"));
    assert_int_equal(json_array_size(jarr(j, "carriers")), 1);
    assert_null(jfind(j, "carriers", "name", ""));
    json_t *noisy = jfind(j, "carriers", "name", "noisy");
    assert_non_null(noisy);
    assert_true(jnum(noisy, "max_per_round") == NOISY_ROUND);
    assert_true(jnum(noisy, "max_in_flight") == NOISY_IF);
    json_decref(j);

    /* Requests per minute as the receiver counted them. */
    check_observed(f, port, "fast");
    check_observed(f, port, "slow");
    check_ticks(f, port);

    /* A drained customer: nothing due, so no oldest due age. */
    j = wait_status(port, NULL, free_drained, NULL, 10000, "free drained");
    jnull(cust(j, "free"), "oldest_due_s");
    json_decref(j);

    /* fast's backlog drains: its due count falls between two answers, and due and delayed
     * (the database's) never exceed what the queue held before the answer. */
    long long q_before = queued(f, "fast");
    j = status_get(port, NULL);
    fast = cust(j, "fast");
    double due1 = jnum(fast, "due");
    assert_true(due1 > 0);
    assert_true(due1 + jnum(fast, "delayed") <= (double)q_before);
    assert_true(jnum(fast, "oldest_due_s") >= 0);
    json_decref(j);
    j = wait_status(port, NULL, fast_due_below, &due1, 5000, "fast's due count falls");
    print_message("# fast: due %.0f, then %.0f\n", due1, jnum(cust(j, "fast"), "due"));
    json_decref(j);
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
    json_t *j = status_get(port, query);
    json_t *totals = jget(j, "totals");
    assert_true(jnum(totals, "customers") == N_MANY);
    if (jnum(totals, "matched") != want_matched)
        fail_msg("%s: matched %.0f, expected %.0f", query, jnum(totals, "matched"), want_matched);
    char *names = names_of(j);
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
        json_t *j = status_get(port, query);
        json_t *page = jget(j, "page");
        assert_true(jnum(page, "offset") == offset && jnum(page, "limit") == limit);
        assert_string_equal(jstr(page, "sort"), sort);
        size_t n = json_array_size(jarr(j, "customers"));
        assert_int_equal(n, (size_t)(N_MANY - offset < limit ? N_MANY - offset : limit));
        char *names = names_of(j);
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
    if (!leading_with(j, name))
        return false;
    json_t *c = cust(j, name);
    return strcmp(jstr(c, "breaker"), "open") == 0 && jnum(c, "dead") == 1;
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
    /* Problems: paused (7 items due, 3 later), disabled (health's column, 2 items held),
     * breaker open (500s: two failures open it, and its one item is dead-lettered). */
    const char *paused = many[1].name, *disabled = many[2].name, *broken = many[3].name;
    many[1].severity = 3;
    many[2].severity = 6;
    many[3].severity = 4;
    pgpace_ok(f, TL_ARGV("customer", "pause", paused));
    tl_exec(f->db->conn,
            "UPDATE pgpace.customer SET disabled_at = now(), disabled_reason = 'set by the test' "
            "WHERE name = '%s'",
            disabled);
    tl_exec(f->db->conn, "SELECT pgpace.customer_set(name => '%s', max_attempts => 2)", broken);
    char path[64];
    snprintf(path, sizeof path, "/c/%s", broken);
    receiver_on(f->recv, &(receiver_rule){.path_prefix = path, .status = 500, .body = "down"});
    double enqueued_at = now_s();
    fx_enqueue_many(f, paused, 7);
    tl_exec(f->db->conn,
            "SELECT count(pgpace.enqueue('%s', '{}', run_at => now() + interval '1 hour')) "
            "FROM generate_series(1, 3)",
            paused);
    fx_enqueue_many(f, disabled, 2);
    fx_enqueue(f, broken, NULL, 1);
    fx_run(f, "delivery.breaker_failures = 2\ndelivery.breaker_cooldown_ms = 600000\n"
              "delivery.breaker_cooldown_max_ms = 600000\n");
    int port = fx_admin_port(f);
    char query[512];
    snprintf(query, sizeof query, "filter=%s", broken);
    json_decref(
        wait_status(port, query, breaker_open, (void *)(uintptr_t)broken, 15000, "breaker open"));

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
    json_t *j = status_get(port, "filter=gamma&limit=3");
    assert_string_equal(jstr(jget(j, "page"), "filter"), "gamma");
    json_decref(j);

    /* Rate ascending and descending, ties by name; each customer's rate as set. */
    assert_paging(port, "rate", 50, by_rate, false);
    assert_paging(port, "-rate", 50, by_rate_desc, false);
    j = status_get(port, "limit=500");
    for (int i = 0; i < N_MANY; i++)
        assert_true(jnum(cust(j, many[i].name), "rate") == many[i].rate);
    json_decref(j);
    /* No receiver throttles: the effective rate is the rate, and sorts alike. */
    assert_paging(port, "effective", 50, by_rate, false);

    /* State: disabled, breaker open, paused, then the healthy ones by name; reversed. */
    assert_paging(port, "state", 50, by_state, false);
    assert_paging(port, "-state", 50, by_state_desc, false);
    j = status_get(port, "sort=state&limit=3");
    json_t *totals = jget(j, "totals");
    assert_true(jnum(totals, "paused") == 1 && jnum(totals, "disabled") == 1 &&
                jnum(totals, "breaker_open") == 1);
    assert_true(jnum(totals, "held") == 0 && jnum(totals, "throttled") == 0);
    json_t *c = cust(j, disabled);
    assert_true(jbool(c, "disabled"));
    assert_false(jbool(c, "paused"));
    assert_true(jnum(c, "due") == 2 && jnum(c, "in_flight") == 0);
    c = cust(j, broken);
    assert_string_equal(jstr(c, "breaker"), "open");
    assert_true(iso_seconds(jstr(c, "breaker_open_until")) > now_s() + 60);
    json_t *err = jget(c, "last_error");
    assert_string_equal(jstr(err, "class"), "http");
    assert_true(jnum(err, "status") == 500);
    assert_true(jnum(err, "age_s") >= 0 && jnum(err, "age_s") < 60);
    assert_true(fabs(iso_seconds(jstr(err, "at")) - (now_s() - jnum(err, "age_s"))) < 5);
    assert_true(jnum(c, "dead") == dead_of(f, broken));
    assert_false(jbool(c, "paused"));
    c = cust(j, paused);
    assert_true(jbool(c, "paused"));
    assert_false(jbool(c, "disabled"));
    assert_true(jnum(c, "due") == 7 && jnum(c, "delayed") == 3 && jnum(c, "in_flight") == 0 &&
                jnum(c, "dead") == 0);
    assert_true(jnum(c, "oldest_due_s") >= 0 &&
                jnum(c, "oldest_due_s") <= now_s() - enqueued_at + 1);
    assert_string_equal(jstr(c, "breaker"), "closed");
    json_decref(j);

    /* The other sorts are accepted and echoed; observed puts the one that sent first. */
    j = status_get(port, "sort=-observed&limit=1");
    assert_string_equal(jstr(jget(j, "page"), "sort"), "-observed");
    assert_string_equal(jstr(json_array_get(jarr(j, "customers"), 0), "name"), broken);
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
        answer a = http_get(port, query, NULL, NULL);
        if (a.status != 400)
            fail_msg("%s: %ld %s (expected 400)", query, a.status, a.body);
        char ctype[128];
        tl_assert_contains(header_of(&a, "Content-Type", ctype, sizeof ctype), "application/json");
        json_t *e = json_loads(a.body, 0, NULL);
        const char *msg = jstr(e, "error");
        if (strncmp(msg, bad[i].param, strlen(bad[i].param)) != 0 ||
            msg[strlen(bad[i].param)] != ':')
            fail_msg("%s: the error does not name %s first: %s", query, bad[i].param, msg);
        json_decref(e);
        answer_free(&a);
    }
    fx_stop_service(f, 15000);
}

/* ---- 3. a throttled customer --------------------------------------------------------------- */

static bool shows_throttled(const json_t *j, void *arg)
{
    if (!leading_with(j, "thr"))
        return false;
    json_t *c = cust(j, "thr");
    json_t *err = jget(c, "last_error");
    /* Lowered twice at least (a first 429 may land between the page's choice and its answer,
     * so that the totals, counted at the choice, do not have it yet). */
    return jnum(c, "effective_rate") < 0.7 * jnum(c, "rate") && jbool(c, "throttled") &&
           json_is_object(err) && strcmp(jstr(err, "class"), "http") == 0 &&
           jnum(err, "status") == 429;
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
    fx_enqueue_many(f, "thr", 100);
    fx_enqueue_many(f, "calm", 150);
    fx_run(f, "delivery.breaker_failures = 3\n");
    int port = fx_admin_port(f);
    json_t *j = wait_status(port, NULL, shows_throttled, NULL, 20000,
                            "thr throttled, below its rate, last error http 429");
    assert_true(receiver_count_status(f->recv, "/c/thr", 429) > 0);
    json_t *thr = cust(j, "thr");
    double eff = jnum(thr, "effective_rate");
    print_message("# thr: effective %.2f/min of %.0f; period %.1f ms\n", eff, jnum(thr, "rate"),
                  jnum(thr, "period_ms"));
    assert_true(eff > 0);
    assert_true(fabs(jnum(thr, "period_ms") - 60000 / eff) < 0.01);
    assert_true(jnum(jget(thr, "last_error"), "age_s") >= 0);
    json_t *calm = cust(j, "calm");
    assert_false(jbool(calm, "throttled"));
    assert_true(jnum(calm, "effective_rate") == jnum(calm, "rate"));
    jnull(calm, "last_error");
    /* The totals count the throttled customers listed. */
    double throttled = 0;
    json_t *c;
    size_t i;
    json_array_foreach(jarr(j, "customers"), i, c)
    {
        throttled += jbool(c, "throttled");
    }
    assert_true(jnum(jget(j, "totals"), "throttled") == throttled);
    json_decref(j);
    /* Throttled sorts before ok by state; by effective rate, thr (below 240) before calm (300). */
    j = status_get(port, "sort=state");
    if (strcmp(jstr(json_array_get(jarr(j, "customers"), 0), "name"), "thr") != 0)
        fail_msg("thr is not first by state: %s", dump(j));
    json_decref(j);
    j = status_get(port, "sort=effective&limit=1");
    assert_string_equal(jstr(json_array_get(jarr(j, "customers"), 0), "name"), "thr");
    json_decref(j);
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
    char *s = dump(j);
    no_secret_in("GET /v1/status", s, w->url);
    free(s);
    return leading_with(j, "sec") && receiver_count_status(w->f->recv, "/c/sec", 200) >= 3 &&
           jnum(cust(j, "sec"), "in_flight") == 0;
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
    json_decref(wait_status(port, NULL, secrets_seen, &w, 15000, "sec's requests"));

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

    /* Raw answers with other pages and sorts, and the page itself. */
    static const char *const paths[] = {"/v1/status", "/v1/status?filter=sec&sort=state",
                                        "/v1/status?sort=-observed&limit=500", "/"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(paths); i++) {
        answer a = http_get(port, paths[i], NULL, NULL);
        assert_int_equal(a.status, 200);
        tl_assert_contains(a.body, i < 3 ? "\"sec\"" : "<");
        no_secret_in(paths[i], a.body, url);
        answer_free(&a);
    }
    fx_stop_service(f, 15000);
}

/* ---- 5. a standby's answer ----------------------------------------------------------------- */

/* A second instance (cases 5): stopped by the teardown if the test fails. */
static tl_service second;
static char second_config[64];

static int second_teardown(void **state)
{
    if (second.pid > 0)
        tl_service_stop(&second);
    memset(&second, 0, sizeof second);
    if (second_config[0])
        unlink(second_config);
    second_config[0] = '\0';
    return fx_teardown(state);
}

typedef struct listening {
    tl_service *svc;
    int port;
} listening;

static int standby_listening(void *arg)
{
    listening *l = arg;
    char *log = tl_service_log(l->svc);
    const char *at = strstr(log, "event=http_listening");
    if (at && strstr(log, "event=standby") && (at = strstr(at, " port=")))
        l->port = atoi(at + 6);
    free(log);
    return l->port > 0;
}

static bool both_instances(const json_t *j, void *arg)
{
    return strcmp(jstr(j, "role"), "standby") == 0 && jfind(j, "customers", "name", "sp") &&
           json_array_size(jarr(j, "instances")) == 2;
}

static void standby_answer(void **state)
{
    fx *f = *state;
    fx_customer(f, "sp", TL_ARGV("--mode", "spaced", "--rate", "60"));
    fx_customer(f, "bt", TL_ARGV("--mode", "batch", "--rate", "2"));
    fx_enqueue_many(f, "sp", 30);
    fx_enqueue_many(f, "bt", 20);
    fx_run(f, "dispatcher.instance_name = alpha\n");
    int port = fx_admin_port(f);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));

    fx other = *f;
    other.config_path[0] = '\0';
    fx_write_config(&other, "dispatcher.instance_name = bravo\n");
    snprintf(second_config, sizeof second_config, "%s", other.config_path);
    second = tl_service_start(TL_ARGV("--config", second_config, "run"), NULL);
    listening l = {&second, 0};
    assert_true(tl_wait_until(standby_listening, &l, 10000));
    assert_int_not_equal(l.port, port);
    assert_true(receiver_wait(f->recv, "/c/sp", 2, 10000) >= 2);

    long long q_before = queued(f, "sp");
    json_t *j = wait_status(l.port, NULL, both_instances, NULL, 10000, "two instances");
    long long q_after = queued(f, "sp");
    assert_string_equal(jstr(j, "instance"), "bravo");
    assert_string_equal(jstr(j, "role"), "standby");
    assert_false(jbool(j, "live"));
    assert_string_equal(jstr(j, "leader"), "alpha");
    assert_string_equal(jstr(j, "database"), "ok");
    json_t *a = jfind(j, "instances", "instance", "alpha");
    json_t *b = jfind(j, "instances", "instance", "bravo");
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(jstr(a, "role"), "leader");
    assert_string_equal(jstr(b, "role"), "standby");
    assert_string_equal(jstr(json_array_get(jarr(j, "instances"), 0), "instance"), "alpha");
    json_t *totals = jget(j, "totals");
    assert_true(jnum(totals, "customers") == 2 && jnum(totals, "matched") == 2);
    jnull(totals, "in_flight");
    /* What only the leader knows is null; the database's counts are there. */
    json_t *c;
    size_t i;
    json_array_foreach(jarr(j, "customers"), i, c)
    {
        jnull(c, "observed_per_minute");
        jnull(c, "gaps_ms");
        jnull(c, "tick_counts");
        assert_true(jnum(c, "due") >= 0 && jnum(c, "delayed") >= 0);
        assert_true(jnum(c, "dead") == dead_of(f, jstr(c, "name")));
        assert_false(jbool(c, "counts_capped"));
        assert_true(jnum(c, "effective_rate") == jnum(c, "rate"));
        assert_false(jbool(c, "throttled"));
        json_t *inf = jget(c, "in_flight");
        assert_true(json_is_null(inf) || json_number_value(inf) >= 0);
    }
    json_t *sp = cust(j, "sp");
    assert_string_equal(jstr(sp, "mode"), "spaced");
    assert_true(jnum(sp, "period_ms") == 1000);
    /* The database's counts of sp's items, between what the queue held before and after. */
    json_t *inf = jget(sp, "in_flight");
    double sp_count = jnum(sp, "due") + jnum(sp, "delayed") + json_number_value(inf);
    assert_true(sp_count <= (double)q_before);
    assert_true(json_is_null(inf) || sp_count >= (double)q_after);
    assert_true(jnum(sp, "due") > 0);
    json_t *bt = cust(j, "bt");
    assert_true(jnum(bt, "allowance") == 2);
    assert_true(jnum(bt, "due") + jnum(bt, "delayed") > 0);
    json_decref(j);

    /* The leader's answer names both as well. */
    j = status_get(port, NULL);
    assert_string_equal(jstr(j, "role"), "leader");
    assert_true(jbool(j, "live"));
    assert_string_equal(jstr(jfind(j, "instances", "instance", "bravo"), "role"), "standby");
    assert_string_equal(jstr(jfind(j, "instances", "instance", "alpha"), "role"), "leader");
    json_decref(j);

    assert_int_equal(tl_service_signal(&second, SIGTERM, 1, 15000), 0);
    tl_service_stop(&second);
    memset(&second, 0, sizeof second);
    fx_stop_service(f, 15000);
}

/* ---- 6. the status token ------------------------------------------------------------------- */

#define STATUS_TOKEN "st-T0ken_not.in.logs"

static void status_token(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    fx_run(f, "http.status_token = " STATUS_TOKEN "\n");
    int port = fx_admin_port(f);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));

    char value[256];
    static const char *const guarded[] = {"/v1/status", "/"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(guarded); i++) {
        answer a = http_get(port, guarded[i], NULL, NULL);
        assert_int_equal(a.status, 401);
        const char *www = header_of(&a, "WWW-Authenticate", value, sizeof value);
        if (strncmp(www, "Basic ", 6) != 0)
            fail_msg("%s: WWW-Authenticate is '%s'", guarded[i], www);
        tl_assert_contains(www, "realm=\"pgpace status\"");
        json_t *e = json_loads(a.body, 0, NULL);
        jstr(e, "error");
        json_decref(e);
        answer_free(&a);
        /* Wrong tokens. */
        a = http_get(port, guarded[i], "Bearer not-the-token", NULL);
        assert_int_equal(a.status, 401);
        answer_free(&a);
        a = http_get(port, guarded[i], NULL, "any:not-the-token");
        assert_int_equal(a.status, 401);
        answer_free(&a);
        a = http_get(port, guarded[i], "Bearer " STATUS_TOKEN "x", NULL);
        assert_int_equal(a.status, 401);
        answer_free(&a);
        /* The token as Bearer, or as Basic's password with any user name. */
        a = http_get(port, guarded[i], "Bearer " STATUS_TOKEN, NULL);
        assert_int_equal(a.status, 200);
        answer_free(&a);
        a = http_get(port, guarded[i], NULL, "any:" STATUS_TOKEN);
        assert_int_equal(a.status, 200);
        answer_free(&a);
        a = http_get(port, guarded[i], NULL, "someone-else:" STATUS_TOKEN);
        assert_int_equal(a.status, 200);
        if (i == 0)
            tl_assert_contains(a.body, "\"acme\"");
        answer_free(&a);
    }
    /* The other routes stay open. */
    static const char *const open_paths[] = {"/metrics", "/healthz", "/readyz"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(open_paths); i++) {
        answer a = http_get(port, open_paths[i], NULL, NULL);
        assert_int_equal(a.status, 200);
        answer_free(&a);
    }

    /* A reload without the token opens them. */
    fx_write_config(f, NULL);
    tl_service_signal(&f->svc, SIGHUP, 0, 0);
    assert_true(fx_wait_log(f, "event=config_reloaded", 5000));
    answer a = http_get(port, "/v1/status", NULL, NULL);
    assert_int_equal(a.status, 200);
    tl_assert_contains(a.body, "\"acme\"");
    answer_free(&a);
    a = http_get(port, "/", NULL, NULL);
    assert_int_equal(a.status, 200);
    tl_assert_contains(header_of(&a, "Content-Type", value, sizeof value), "text/html");
    answer_free(&a);

    /* And the token never reached the log. */
    fx_stop_service(f, 15000);
    char *log = fx_log(f);
    assert_null(strstr(log, STATUS_TOKEN));
    free(log);
}

/* ---- 7. the database unreachable ----------------------------------------------------------- */

static bool database_is(const json_t *j, void *arg)
{
    return strcmp(jstr(j, "database"), arg) == 0;
}

static bool leading_again(const json_t *j, void *arg)
{
    return strcmp(jstr(j, "database"), "ok") == 0 && leading_with(j, "one") &&
           json_is_number(jget(cust(j, "one"), "due"));
}

static void database_unreachable(void **state)
{
    fx *f = *state;
    tcpproxy *proxy = tcpproxy_start("127.0.0.1", atoi(getenv("PGPORT")));
    assert_non_null(proxy);
    fx_customer(f, "one", TL_ARGV("--mode", "spaced", "--rate", "60"));
    fx_customer(f, "two", TL_ARGV("--mode", "batch", "--rate", "3"));
    fx_enqueue_many(f, "one", 20);
    fx_enqueue_many(f, "two", 20);
    char extra[256];
    snprintf(extra, sizeof extra,
             "database.conninfo = host=127.0.0.1 port=%d dbname=%s\n"
             "dispatcher.keepalive_idle_s = 1\ndispatcher.reconnect_max_ms = 200\n",
             tcpproxy_port(proxy), f->db->name);
    fx_run(f, extra);
    int port = fx_admin_port(f);
    json_decref(wait_status(port, NULL, leading_again, NULL, 10000, "leading"));

    assert_int_equal(tcpproxy_set_mode(proxy, TCPPROXY_DROP), 0);
    json_t *j = wait_status(port, NULL, database_is, "unreachable", 10000, "database unreachable");
    print_message("# without the database: role %s, live %s, leader %s\n", jstr(j, "role"),
                  jbool(j, "live") ? "true" : "false",
                  json_is_string(jget(j, "leader")) ? json_string_value(jget(j, "leader"))
                                                    : "null");
    assert_int_equal(json_array_size(jarr(j, "instances")), 0);
    assert_true(jnum(jget(j, "totals"), "customers") == 2);
    char *names = names_of(j);
    assert_string_equal(names, "one\ntwo\n");
    free(names);
    static const char *const db_fields[] = {"due", "delayed", "dead", "counts_capped",
                                            "oldest_due_s"};
    json_t *c;
    size_t i;
    json_array_foreach(jarr(j, "customers"), i, c)
    {
        for (size_t k = 0; k < PGP_ARRAY_LEN(db_fields); k++)
            jnull(c, db_fields[k]);
        assert_true(jnum(c, "rate") > 0);
    }
    assert_string_equal(jstr(cust(j, "one"), "mode"), "spaced");
    assert_string_equal(jstr(cust(j, "two"), "mode"), "batch");
    json_decref(j);

    /* Back: the counts return. */
    assert_int_equal(tcpproxy_set_mode(proxy, TCPPROXY_PASS), 0);
    json_decref(wait_status(port, NULL, leading_again, NULL, 20000, "leading again"));
    fx_stop_service(f, 15000);
    tcpproxy_stop(proxy);
}

/* ---- 8. a deep backlog ------------------------------------------------------------------- */

#define DEEP_ITEMS 10001 /* one more than status_customers.sql counts */

static bool deep_loaded(const json_t *j, void *arg)
{
    return leading_with(j, "deep") && json_is_number(jget(jget(j, "totals"), "due"));
}

/* A customer's counts stop at 10,000 rows (counts_capped, the counts a lower bound); the
 * totals, from the queue gauges, are exact. */
static void deep_backlog_counts_capped(void **state)
{
    fx *f = *state;
    fx_customer(f, "deep", TL_ARGV("--rate", "60", "--paused"));
    fx_customer(f, "shallow", TL_ARGV("--rate", "60", "--paused"));
    fx_enqueue_many(f, "deep", DEEP_ITEMS);
    fx_enqueue_many(f, "shallow", 3);
    fx_run(f, NULL);
    int port = fx_admin_port(f);
    json_t *j = wait_status(port, NULL, deep_loaded, NULL, 10000, "deep loaded, totals");
    json_t *deep = cust(j, "deep"), *shallow = cust(j, "shallow");
    assert_true(jbool(deep, "counts_capped"));
    assert_true(jnum(deep, "due") >= 10000 && jnum(deep, "due") <= DEEP_ITEMS);
    assert_true(jnum(deep, "oldest_due_s") >= 0);
    assert_false(jbool(shallow, "counts_capped"));
    assert_true(jnum(shallow, "due") == 3);
    json_t *totals = jget(j, "totals");
    assert_true(jnum(totals, "due") == DEEP_ITEMS + 3);
    assert_false(jbool(totals, "due_capped"));
    assert_true(jnum(totals, "paused") == 2);
    json_decref(j);
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(answer_shape_and_numbers, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(paging_sorting_filtering, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(throttled_customer, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(no_secrets, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(standby_answer, fx_setup, second_teardown),
        cmocka_unit_test_setup_teardown(status_token, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(database_unreachable, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(deep_backlog_counts_capped, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
