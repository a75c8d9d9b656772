/* test_status_access.c - who gets GET / and GET /v1/status, and what a page says when this
 * instance does not lead, against running dispatchers and a real database (the answers read
 * with tests/lib/status_client; the page's data itself: test_status.c):
 * - [http] status_token: without it (or with a wrong one) 401, GET / challenging for Basic (a
 *   browser asks once, then sends it with the page's polls) and GET /v1/status for Bearer only
 *   (a poll answered with a Basic challenge would wait for a login prompt); Bearer and Basic
 *   (any user, the token as password) accepted; /metrics, /healthz, /readyz still open; a reload
 *   without the token opens both; the token never logged;
 * - a standby's answer: live false, named as pgpace.instance names it (host:pid without
 *   instance_name), the leader named; what only the leader has (queue counts and counts_at,
 *   in flight, requests per minute, gaps, ticks, the totals' counts) null; the effective rate
 *   from the database (a slowed customer's, which the standby never paced itself), and
 *   last_error only when the customer's latest attempt failed, where the leader keeps a failure
 *   after later successes; a customer with endpoints (0018) and no receiver of its own listed
 *   with its endpoint's figures from the database and its failure naming the endpoint;
 * - the database cut off (a proxy that resets): 200, "database":"unreachable", the counts null,
 *   the customers listed from memory; "ok" again once the database is back, with counts from a
 *   refresh made after it came back; the leader without instance_name named host:pid, as
 *   pgpace.instance shows it.
 * The poll loops wait on conditions with deadlines (tl_wait_until). */
#include "fixture.h"
#include "common.h"
#include "status_client.h"
#include "tcpproxy.h"

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static long long dead_of(fx *f, const char *customer)
{
    return tl_query_int(f->db->conn,
                        "SELECT count(*) FROM pgpace.dead_letter d JOIN pgpace.customer c "
                        "ON c.id = d.customer_id WHERE c.name = '%s'",
                        customer);
}

/* An instance without dispatcher.instance_name is host:pid, as far as its application_name
 * carries it (pgpace.instance shows that): `shown` must be that name, for process `pid`. */
static void assert_unnamed(const char *shown, int pid)
{
    char host[256] = "", full[320];
    assert_int_equal(gethostname(host, sizeof host - 1), 0);
    snprintf(full, sizeof full, "%s:%d", host, pid);
    /* A long host name is cut (application_name is 63 bytes at most, "pgpace:" included). */
    size_t n = strlen(shown);
    if (n == 0 || strncmp(shown, full, n) != 0 || (strlen(full) <= 40 && n != strlen(full)))
        fail_msg("the instance is named '%s'; without instance_name it is '%s'", shown, full);
}

/* ---- 1. the status token ------------------------------------------------------------------- */

#define STATUS_TOKEN "st-T0ken_not.in.logs"

static void status_token(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    fx_run(f, "http.status_token = " STATUS_TOKEN "\n");
    int port = fx_admin_port(f);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));

    char value[256];
    static const struct {
        const char *path, *challenge;
    } guarded[] = {
        /* The polls: a challenge no browser prompts for. */
        {"/v1/status", "Bearer realm=\"pgpace status\""},
        /* The page: the browser asks for the token once. */
        {"/", "Basic realm=\"pgpace status\", charset=\"UTF-8\""},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(guarded); i++) {
        const char *path = guarded[i].path;
        sc_answer a = sc_http_get(port, path, NULL, NULL);
        assert_int_equal(a.status, 401);
        const char *www = sc_header(&a, "WWW-Authenticate", value, sizeof value);
        if (strcmp(www, guarded[i].challenge) != 0)
            fail_msg("%s: WWW-Authenticate is '%s', expected '%s'", path, www,
                     guarded[i].challenge);
        /* One challenge only: the polls' answer must not ask for Basic as well. */
        const char *first = strcasestr(a.head, "WWW-Authenticate:");
        assert_non_null(first);
        if (strcasestr(first + 1, "WWW-Authenticate:"))
            fail_msg("%s: more than one challenge:\n%s", path, a.head);
        json_t *e = json_loads(a.body, 0, NULL);
        sc_str(e, "error");
        json_decref(e);
        sc_answer_free(&a);
        /* Wrong tokens, whichever way they come. */
        a = sc_http_get(port, path, "Bearer not-the-token", NULL);
        assert_int_equal(a.status, 401);
        sc_answer_free(&a);
        a = sc_http_get(port, path, NULL, "any:not-the-token");
        assert_int_equal(a.status, 401);
        sc_answer_free(&a);
        a = sc_http_get(port, path, "Bearer " STATUS_TOKEN "x", NULL);
        assert_int_equal(a.status, 401);
        sc_answer_free(&a);
        a = sc_http_get(port, path, NULL, STATUS_TOKEN ":nothing"); /* the token as user name */
        assert_int_equal(a.status, 401);
        sc_answer_free(&a);
        /* The token as Bearer, or as Basic's password with any user name. */
        a = sc_http_get(port, path, "Bearer " STATUS_TOKEN, NULL);
        assert_int_equal(a.status, 200);
        sc_answer_free(&a);
        a = sc_http_get(port, path, NULL, "any:" STATUS_TOKEN);
        assert_int_equal(a.status, 200);
        sc_answer_free(&a);
        a = sc_http_get(port, path, NULL, "someone-else:" STATUS_TOKEN);
        assert_int_equal(a.status, 200);
        tl_assert_contains(sc_header(&a, "Content-Type", value, sizeof value),
                           i == 0 ? "application/json" : "text/html");
        if (i == 0)
            tl_assert_contains(a.body, "\"acme\"");
        sc_answer_free(&a);
    }
    /* The other routes stay open. */
    static const char *const open_paths[] = {"/metrics", "/healthz", "/readyz"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(open_paths); i++) {
        sc_answer a = sc_http_get(port, open_paths[i], NULL, NULL);
        assert_int_equal(a.status, 200);
        sc_answer_free(&a);
    }

    /* A reload without the token opens them. */
    fx_write_config(f, NULL);
    tl_service_signal(&f->svc, SIGHUP, 0, 0);
    assert_true(fx_wait_log(f, "event=config_reloaded", 5000));
    sc_answer a = sc_http_get(port, "/v1/status", NULL, NULL);
    assert_int_equal(a.status, 200);
    tl_assert_contains(a.body, "\"acme\"");
    sc_answer_free(&a);
    a = sc_http_get(port, "/", NULL, NULL);
    assert_int_equal(a.status, 200);
    tl_assert_contains(sc_header(&a, "Content-Type", value, sizeof value), "text/html");
    sc_answer_free(&a);

    /* And the token never reached the log. */
    fx_stop_service(f, 15000);
    char *log = fx_log(f);
    assert_null(strstr(log, STATUS_TOKEN));
    free(log);
}

/* ---- 2. a standby's answer ----------------------------------------------------------------- */

/* A second instance: stopped by the teardown if the test fails. */
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
    return strcmp(sc_str(j, "role"), "standby") == 0 && sc_find(j, "customers", "name", "sp") &&
           json_array_size(sc_arr(j, "instances")) == 2;
}

/* The outcome of a customer's latest attempt ("" when none; owned). */
static char *latest_outcome(fx *f, const char *customer)
{
    return tl_query_str(f->db->conn,
                        "SELECT da.outcome FROM pgpace.delivery_attempt da JOIN pgpace.customer c "
                        "ON c.id = da.customer_id WHERE c.name = '%s' "
                        "ORDER BY da.started_at DESC LIMIT 1",
                        customer);
}

/* sp failed once and then succeeded (its latest attempt a success); bad's only attempt failed
 * and dead-lettered its item. */
static int attempts_settled(void *arg)
{
    fx *f = arg;
    char *sp = latest_outcome(f, "sp"), *bad = latest_outcome(f, "bad"),
         *e1 = latest_outcome(f, "grp/e1");
    bool settled =
        strcmp(sp, "success") == 0 && strcmp(bad, "dead") == 0 && dead_of(f, "bad") == 1 &&
        strcmp(e1, "dead") == 0 &&
        tl_query_int(f->db->conn,
                     "SELECT count(*) FROM pgpace.delivery_attempt da JOIN pgpace.customer c "
                     "ON c.id = da.customer_id WHERE c.name = 'sp' AND da.outcome <> 'success'") >
            0;
    free(sp);
    free(bad);
    free(e1);
    return settled;
}

/* The effective rate the database has for a customer: what the leader last wrote, never above
 * the rate. */
static double stored_effective(fx *f, const char *customer)
{
    char *s = tl_query_str(f->db->conn,
                           "SELECT least(coalesce(fr.effective_rate, c.rate_per_minute), "
                           "c.rate_per_minute) FROM pgpace.customer c LEFT JOIN pgpace.frontier fr "
                           "ON fr.customer_id = c.id WHERE c.name = '%s'",
                           customer);
    double v = strtod(s, NULL);
    free(s);
    return v;
}

static void assert_http_500(const json_t *c)
{
    json_t *err = sc_get(c, "last_error");
    if (!json_is_object(err))
        fail_msg("%s: no last_error: %s", sc_str(c, "name"), sc_dump(c));
    assert_string_equal(sc_str(err, "class"), "http");
    assert_true(sc_num(err, "status") == 500);
    assert_true(sc_num(err, "age_s") >= 0);
}

static void standby_answer(void **state)
{
    fx *f = *state;
    fx_customer(f, "sp", TL_ARGV("--mode", "spaced", "--rate", "60"));
    fx_customer(f, "bt", TL_ARGV("--mode", "batch", "--rate", "2"));
    /* Slowed by a throttling receiver before (the leader resumes the rate it wrote); it has
     * nothing to send, so the rate stays. */
    fx_customer(f, "slowed", TL_ARGV("--mode", "spaced", "--rate", "60"));
    tl_exec(f->db->conn, "INSERT INTO pgpace.frontier (customer_id, effective_rate) "
                         "SELECT id, 24 FROM pgpace.customer WHERE name = 'slowed'");
    /* And its failing streak recorded a minute ago (health_note's row). */
    tl_exec(f->db->conn, "INSERT INTO pgpace.customer_health (customer_id, failing_since) "
                         "SELECT id, now() - interval '1 minute' FROM pgpace.customer "
                         "WHERE name = 'slowed'");
    /* Refused once (its later items go through), and refused for good (one attempt). */
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/sp", .status = 500, .times = 1});
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/bad", .status = 500});
    fx_customer(f, "bad", TL_ARGV("--mode", "spaced", "--rate", "60"));
    tl_exec(f->db->conn, "SELECT pgpace.customer_set(name => 'bad', max_attempts => 1)");
    fx_enqueue_many(f, "sp", 30);
    fx_enqueue_many(f, "bt", 20);
    fx_enqueue_many(f, "bad", 1);
    /* grp: no receiver of its own, one endpoint that refuses its one delivery for good. */
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/grp-e1", .status = 500});
    char url[160];
    receiver_url(f->recv, "/c/grp-e1", url, sizeof url);
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('grp', rate_per_minute => 120)");
    tl_exec(f->db->conn, "SELECT pgpace.endpoint_add('grp', 'e1', '%s', 600, max_attempts => 1)",
            url);
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('grp', '{}')");
    fx_run(f, "dispatcher.instance_name = alpha\n");
    int port = fx_admin_port(f);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));

    /* bravo: no instance_name. */
    fx other = *f;
    other.config_path[0] = '\0';
    fx_write_config(&other, NULL);
    snprintf(second_config, sizeof second_config, "%s", other.config_path);
    second = tl_service_start(TL_ARGV("--config", second_config, "run"), NULL);
    listening l = {&second, 0};
    assert_true(tl_wait_until(standby_listening, &l, 10000));
    assert_int_not_equal(l.port, port);
    assert_true(tl_wait_until(attempts_settled, f, 15000));

    double slowed_rate = stored_effective(f, "slowed");
    json_t *j = sc_wait_status(l.port, NULL, both_instances, NULL, 10000, "two instances");
    assert_true(stored_effective(f, "slowed") == slowed_rate);
    /* bravo: no instance_name, so host:pid, as pgpace.instance has it. */
    char *bravo = tl_query_str(f->db->conn, "SELECT instance FROM pgpace.instance "
                                            "WHERE instance <> 'alpha'");
    assert_unnamed(bravo, second.pid);
    assert_string_equal(sc_str(j, "instance"), bravo);
    assert_string_equal(sc_str(j, "role"), "standby");
    assert_false(sc_bool(j, "live"));
    assert_string_equal(sc_str(j, "leader"), "alpha");
    assert_string_equal(sc_str(j, "database"), "ok");
    json_t *a = sc_find(j, "instances", "instance", "alpha");
    json_t *b = sc_find(j, "instances", "instance", bravo);
    if (!a || !b)
        fail_msg("alpha and %s are not both listed: %s", bravo, sc_dump(j));
    assert_string_equal(sc_str(a, "role"), "leader");
    assert_string_equal(sc_str(b, "role"), "standby");
    assert_string_equal(sc_str(json_array_get(sc_arr(j, "instances"), 0), "instance"), "alpha");
    json_t *totals = sc_get(j, "totals");
    assert_true(sc_num(totals, "customers") == 5 && sc_num(totals, "matched") == 5);
    assert_true(sc_num(totals, "endpoints") == 5);
    static const char *const leaders_totals[] = {"in_flight", "due",       "dead_letters",
                                                 "totals_at", "throttled", "failing"};
    for (size_t k = 0; k < PGP_ARRAY_LEN(leaders_totals); k++)
        sc_null(totals, leaders_totals[k]);
    /* What only the leader knows is null; the rates are the database's. */
    static const char *const leaders[] = {"observed_per_minute",
                                          "observed_count",
                                          "observed_window_s",
                                          "observed_partial",
                                          "gaps_ms",
                                          "tick_counts",
                                          "in_flight",
                                          "due",
                                          "delayed",
                                          "dead",
                                          "oldest_due_s",
                                          "counts_at"};
    json_t *c;
    size_t i;
    json_array_foreach(sc_arr(j, "customers"), i, c)
    {
        for (size_t k = 0; k < PGP_ARRAY_LEN(leaders); k++)
            sc_null(c, leaders[k]);
        /* Health from the database: slowed's recorded streak, no other (bad failed once); the
         * count, the estimate and recovery are the leader's. */
        const char *name = sc_str(c, "name");
        json_t *h = sc_get(c, "health");
        if (strcmp(name, "slowed") == 0) {
            assert_string_equal(sc_str(h, "state"), "failing");
            char *since = tl_query_str(f->db->conn, "SELECT extract(epoch FROM failing_since) FROM "
                                                    "pgpace.customer_health");
            if (fabs(sc_iso_seconds(sc_str(h, "failing_since")) - strtod(since, NULL)) > 0.0015)
                fail_msg("slowed: failing_since %s, the database's %s", sc_str(h, "failing_since"),
                         since);
            free(since);
        } else {
            assert_string_equal(sc_str(h, "state"), "ok");
            sc_null(h, "failing_since");
        }
        sc_null(h, "failures_in_a_row");
        sc_null(h, "expected_disable_at");
        sc_null(h, "recovered_at");
        if (strcmp(name, "grp") == 0) {
            /* Its endpoint's figures are the database's, as a customer's; its own failure is
             * the endpoint's, named. */
            json_t *e1 = json_array_get(sc_arr(c, "endpoints"), 0);
            assert_string_equal(sc_str(e1, "name"), "grp/e1");
            assert_true(sc_num(e1, "effective_rate") == 600);
            assert_http_500(e1);
            for (size_t k = 0; k < PGP_ARRAY_LEN(leaders); k++)
                sc_null(e1, leaders[k]);
            assert_true(sc_num(c, "rate") == 120);
            sc_null(c, "effective_rate");
            assert_http_500(c);
            assert_string_equal(sc_str(sc_get(c, "last_error"), "endpoint"), "e1");
            continue;
        }
        if (strcmp(name, "slowed") != 0) {
            assert_true(sc_num(c, "effective_rate") == sc_num(c, "rate"));
            assert_true(sc_num(c, "effective_rate") == stored_effective(f, name));
            assert_false(sc_bool(c, "throttled"));
        }
    }
    json_t *slowed = sc_customer(j, "slowed");
    if (sc_num(slowed, "effective_rate") != slowed_rate)
        fail_msg("slowed: effective_rate %.2f, the database's %.2f: %s",
                 sc_num(slowed, "effective_rate"), slowed_rate, sc_dump(slowed));
    assert_true(slowed_rate < sc_num(slowed, "rate"));
    assert_true(sc_bool(slowed, "throttled"));
    assert_true(fabs(sc_num(slowed, "period_ms") - 60000 / slowed_rate) < 0.001);
    json_t *sp = sc_customer(j, "sp");
    assert_string_equal(sc_str(sp, "mode"), "spaced");
    assert_true(sc_num(sp, "period_ms") == 1000);
    assert_true(sc_num(sc_customer(j, "bt"), "allowance") == 2);
    /* The latest attempt's failure only: sp's latest succeeded, bad's failed (when it started,
     * as the database has it). */
    sc_null(sp, "last_error");
    sc_null(sc_customer(j, "bt"), "last_error");
    json_t *bad = sc_customer(j, "bad");
    assert_http_500(bad);
    char *started =
        tl_query_str(f->db->conn, "SELECT extract(epoch FROM da.started_at) FROM "
                                  "pgpace.delivery_attempt da JOIN pgpace.customer c ON c.id = "
                                  "da.customer_id WHERE c.name = 'bad'");
    double bad_at = sc_iso_seconds(sc_str(sc_get(bad, "last_error"), "at"));
    if (fabs(bad_at - strtod(started, NULL)) > 1)
        fail_msg("bad: last_error at %.3f, its attempt started at %s", bad_at, started);
    free(started);
    json_decref(j);

    /* The leader names both, has the live figures the standby has not, and keeps sp's failure
     * after its successes. */
    j = sc_status_get(port, NULL);
    assert_string_equal(sc_str(j, "role"), "leader");
    assert_true(sc_bool(j, "live"));
    assert_string_equal(sc_str(j, "instance"), "alpha");
    assert_string_equal(sc_str(j, "leader"), "alpha");
    b = sc_find(j, "instances", "instance", bravo);
    if (!b)
        fail_msg("%s is not listed: %s", bravo, sc_dump(j));
    assert_string_equal(sc_str(b, "role"), "standby");
    assert_string_equal(sc_str(sc_find(j, "instances", "instance", "alpha"), "role"), "leader");
    assert_true(sc_num(sc_get(j, "totals"), "in_flight") >= 0);
    assert_true(sc_num(sc_get(j, "totals"), "due") >= 0);
    json_array_foreach(sc_arr(j, "customers"), i, c)
    {
        assert_true(sc_counted(c));
        assert_true(sc_num(c, "in_flight") >= 0 && sc_num(c, "observed_per_minute") >= 0);
    }
    slowed = sc_customer(j, "slowed");
    assert_true(sc_num(slowed, "effective_rate") == slowed_rate && sc_bool(slowed, "throttled"));
    char *sp_latest = latest_outcome(f, "sp");
    assert_string_equal(sp_latest, "success");
    free(sp_latest);
    assert_http_500(sc_customer(j, "sp"));
    assert_http_500(sc_customer(j, "bad"));
    json_decref(j);
    free(bravo);

    assert_int_equal(tl_service_signal(&second, SIGTERM, 1, 15000), 0);
    tl_service_stop(&second);
    memset(&second, 0, sizeof second);
    fx_stop_service(f, 15000);
}

/* ---- 3. the database unreachable ----------------------------------------------------------- */

static bool database_is(const json_t *j, void *arg)
{
    return strcmp(sc_str(j, "database"), arg) == 0;
}

/* Leading with "one" counted by a refresh after *since (epoch s; 0: any). */
static bool leading_counted(const json_t *j, void *since)
{
    if (strcmp(sc_str(j, "database"), "ok") != 0 || !sc_leading_with(j, "one"))
        return false;
    json_t *c = sc_customer(j, "one");
    return sc_counted(c) && sc_iso_seconds(sc_str(c, "counts_at")) > *(double *)since;
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
    fx_run(f, extra); /* no instance_name */
    int port = fx_admin_port(f);
    double any = 0;
    json_t *j = sc_wait_status(port, NULL, leading_counted, &any, 10000, "leading");
    /* Named as pgpace.instance names it: host:pid. */
    char *name = tl_query_str(f->db->conn, "SELECT instance FROM pgpace.instance");
    assert_unnamed(name, f->svc.pid);
    assert_string_equal(sc_str(j, "instance"), name);
    assert_string_equal(sc_str(j, "leader"), name);
    assert_int_equal(json_array_size(sc_arr(j, "instances")), 1);
    assert_string_equal(sc_str(json_array_get(sc_arr(j, "instances"), 0), "instance"), name);
    json_decref(j);

    assert_int_equal(tcpproxy_set_mode(proxy, TCPPROXY_DROP), 0);
    j = sc_wait_status(port, NULL, database_is, "unreachable", 10000, "database unreachable");
    print_message("# without the database: role %s, live %s, leader %s\n", sc_str(j, "role"),
                  sc_bool(j, "live") ? "true" : "false",
                  json_is_string(sc_get(j, "leader")) ? json_string_value(sc_get(j, "leader"))
                                                      : "null");
    assert_string_equal(sc_str(j, "instance"), name);
    assert_int_equal(json_array_size(sc_arr(j, "instances")), 0);
    assert_true(sc_num(sc_get(j, "totals"), "customers") == 2);
    static const char *const counts[] = {"due", "dead_letters", "totals_at"};
    for (size_t k = 0; k < PGP_ARRAY_LEN(counts); k++)
        sc_null(sc_get(j, "totals"), counts[k]);
    char *names = sc_names(j);
    assert_string_equal(names, "one\ntwo\n");
    free(names);
    static const char *const db_fields[] = {"due", "delayed", "dead", "oldest_due_s", "counts_at"};
    json_t *c;
    size_t i;
    json_array_foreach(sc_arr(j, "customers"), i, c)
    {
        for (size_t k = 0; k < PGP_ARRAY_LEN(db_fields); k++)
            sc_null(c, db_fields[k]);
        assert_true(sc_num(c, "rate") > 0);
    }
    assert_string_equal(sc_str(sc_customer(j, "one"), "mode"), "spaced");
    assert_string_equal(sc_str(sc_customer(j, "two"), "mode"), "batch");
    json_decref(j);

    /* Back: leading again, counted by the refresh made on taking the lead. */
    double back = sc_now_s();
    assert_int_equal(tcpproxy_set_mode(proxy, TCPPROXY_PASS), 0);
    j = sc_wait_status(port, NULL, leading_counted, &back, 20000, "leading again, counted");
    print_message("# back at %.3f; counted at %s\n", back,
                  sc_str(sc_customer(j, "one"), "counts_at"));
    json_decref(j);
    free(name);
    fx_stop_service(f, 15000);
    tcpproxy_stop(proxy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(status_token, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(standby_answer, fx_setup, second_teardown),
        cmocka_unit_test_setup_teardown(database_unreachable, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
