/* test_endpoint_ops.c - what operators see of endpoints (0018) outside `pgpace endpoint`, against
 * a real server: `pgpace stats` (a customer's line, then its endpoints' indented; events apart
 * from deliveries, and those that matched no endpoint) and its --watch statement, the
 * customer_stats view's new columns, and `pgpace events` (which customer and endpoint; the
 * --endpoint filter) with the operator webhook's body naming both. */
#include "testlib.h"

#include "sql_embed.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int setup(void **state)
{
    *state = tl_fresh_db(1);
    return 0;
}

static int teardown(void **state)
{
    tl_drop_db(*state);
    return 0;
}

static tl_proc run_ok(const tl_db *db, const char *const *args)
{
    const char *argv[16] = {"--db", db->conninfo};
    size_t n = 2;
    for (; args[n - 2] && n < 15; n++)
        argv[n] = args[n - 2];
    argv[n] = NULL;
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    if (p.status != 0)
        fail_msg("pgpace %s exited %d:\n%s%s", args[0], p.status, p.out, p.err);
    return p;
}

#define RUN_OK(db, ...) run_ok(db, TL_ARGV(__VA_ARGS__))

/* A table row of `out`: the line whose text starts with `start` exactly (indentation included),
 * split into whitespace-separated fields (pointers into `line`). Returns the field count, 0 when
 * no line starts so. */
static int row(const char *out, const char *start, char *line, size_t cap, char **f, int max)
{
    for (const char *p = out; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len < cap && strncmp(p, start, strlen(start)) == 0) {
            memcpy(line, p, len);
            line[len] = '\0';
            int n = 0;
            char *save = NULL;
            for (char *t = strtok_r(line, " \t", &save); t && n < max;
                 t = strtok_r(NULL, " \t", &save))
                f[n++] = t;
            return n;
        }
        p = eol ? eol + 1 : NULL;
    }
    return 0;
}

/* The first column of every line of out up to the first empty line, joined with '|' (the
 * indentation kept): the order and grouping of a table's rows. */
static void first_column(const char *out, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t used = 0;
    for (const char *p = out; p && *p && *p != '\n';) {
        const char *eol = strchr(p, '\n');
        size_t lead = strspn(p, " ");
        size_t word = strcspn(p + lead, " \n");
        used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", used ? "|" : "",
                                 (int)(lead + word), p);
        if (used >= cap)
            return;
        p = eol ? eol + 1 : NULL;
    }
}

static void endpoint_add(PGconn *c, const char *customer, const char *name, const char *events)
{
    tl_exec(c,
            "SELECT pgpace.endpoint_add('%s', '%s', 'https://example.com/%s', 30, event_types => "
            "%s%s%s)",
            customer, name, name, events ? "'" : "", events ? events : "NULL", events ? "'" : "");
}

/* solo: a customer alone, 1 item. own: its own receiver (100/min) and endpoint crm, 1 event.
 * acme (no receiver, limit 120/min): endpoints crm (order.*), bill (invoice.*), and tmp, deleted
 * with its queued delivery (a dead letter endpoint_deleted on acme's row); events: 2 orders, 1
 * invoice, 1 ping (matched none), 1 tmp.x (tmp's only). crm's first order dead-lettered, its
 * breaker open. */
static void scene(tl_db *db)
{
    PGconn *c = db->conn;
    tl_exec(c, "SELECT pgpace.customer_set('solo', rate_per_minute => 60, webhook_url => "
               "'https://example.com/solo')");
    tl_exec(c, "SELECT pgpace.customer_set('own', rate_per_minute => 100, webhook_url => "
               "'https://example.com/own')");
    endpoint_add(c, "own", "crm", NULL);
    tl_exec(c, "SELECT pgpace.customer_set('acme', rate_per_minute => 120)");
    endpoint_add(c, "acme", "crm", "{order.*}");
    endpoint_add(c, "acme", "bill", "{invoice.*}");
    endpoint_add(c, "acme", "tmp", "{tmp.*}");
    tl_exec(c, "SELECT pgpace.enqueue('solo', '{}')");
    tl_exec(c, "SELECT pgpace.enqueue('own', '{}')");
    long long o1 = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', kind => 'order.a')");
    tl_exec(c, "SELECT pgpace.enqueue('acme', '{}', kind => 'order.b')");
    tl_exec(c, "SELECT pgpace.enqueue('acme', '{}', kind => 'invoice.paid')");
    tl_exec(c, "SELECT pgpace.enqueue('acme', '{}', kind => 'ping')");
    tl_exec(c, "SELECT pgpace.enqueue('acme', '{}', kind => 'tmp.x')");
    assert_int_equal(tl_query_int(c, "SELECT pgpace.endpoint_delete('acme', 'tmp', true)"), 1);
    tl_exec(c,
            "WITH d AS (DELETE FROM pgpace.queue q USING pgpace.item i WHERE i.id = q.item_id AND "
            "i.event_id = %lld RETURNING q.*) INSERT INTO pgpace.dead_letter (item_id, "
            "customer_id, attempts, last_error) SELECT d.item_id, d.customer_id, 1, 'HTTP 500' "
            "FROM d",
            o1);
    tl_exec(c, "INSERT INTO pgpace.breaker (customer_id, state, open_until) SELECT id, 'open', "
               "now() + interval '1 hour' FROM pgpace.customer WHERE name = 'acme/crm'");
}

/* `pgpace stats`: each customer with endpoints is its line then its endpoints' (its own receiver
 * first, as "default"), a customer alone one line as before; the customer's line sums its
 * endpoints' counts (and the dead letter a deleted endpoint left), has its own limit as rate,
 * and the worst breaker; the events table counts acme's 5 events (the one that matched no
 * endpoint apart) and own's 1, solo none: an event is not a due item anywhere. */
static void stats_groups_endpoints_under_their_customer(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    scene(db);
    /* As `pgpace stats` does (stats_session.sql): compiling the view's statements took seconds. */
    tl_exec(c, "SET jit = off");
    tl_proc p = RUN_OK(db, "stats");
    char cols[512];
    first_column(p.out, cols, sizeof cols);
    assert_string_equal(cols, "customer|acme|  bill|  crm|own|  default|  crm|solo");
    char line[512], *f[20];
    /* customer mode rate eff_rate paused due in_flight delayed dead oldest_due_s backlog_s
     * last_error breaker */
    assert_int_equal(row(p.out, "acme ", line, sizeof line, f, 20), 16);
    assert_string_equal(f[1], "spaced");
    assert_string_equal(f[2], "120"); /* its limit over all of its endpoints */
    assert_string_equal(f[3], "-");
    assert_string_equal(f[5], "2"); /* bill's invoice, crm's second order */
    assert_string_equal(f[8], "2"); /* crm's, and tmp's endpoint_deleted on acme's row */
    assert_string_equal(f[11], "-");
    /* "open (1 of 2)": crm's breaker, not bill's */
    assert_string_equal(f[12], "open");
    assert_string_equal(f[13], "(1");
    assert_string_equal(f[15], "2)");
    assert_int_equal(row(p.out, "  crm ", line, sizeof line, f, 20), 15); /* open until T */
    assert_string_equal(f[2], "30");
    assert_string_equal(f[5], "1");
    assert_string_equal(f[8], "1");
    assert_int_equal(row(p.out, "  bill ", line, sizeof line, f, 20), 13);
    assert_string_equal(f[5], "1");
    assert_string_equal(f[12], "closed");
    /* own: its line over both, then its own receiver's and crm's. */
    assert_int_equal(row(p.out, "own ", line, sizeof line, f, 20), 13);
    assert_string_equal(f[2], "100");
    assert_string_equal(f[5], "2");
    assert_string_equal(f[12], "closed");
    assert_int_equal(row(p.out, "  default ", line, sizeof line, f, 20), 13);
    assert_string_equal(f[2], "100");
    assert_string_equal(f[3], "100");
    assert_string_equal(f[5], "1");
    /* solo as it always was. */
    assert_int_equal(row(p.out, "solo ", line, sizeof line, f, 20), 13);
    assert_string_equal(f[2], "60");
    assert_string_equal(f[5], "1");
    /* Events apart: acme 5 (ping matched no endpoint; tmp.x had its delivery), own 1. */
    const char *ev = strstr(p.out, "\n\nevents of the last 24 hours");
    assert_non_null(ev);
    first_column(ev + 2 + strcspn(ev + 2, "\n") + 1, cols, sizeof cols);
    assert_string_equal(cols, "customer|acme|own");
    assert_int_equal(row(ev, "acme ", line, sizeof line, f, 20), 3);
    assert_string_equal(f[1], "5");
    assert_string_equal(f[2], "1");
    assert_int_equal(row(ev, "own ", line, sizeof line, f, 20), 3);
    assert_string_equal(f[1], "1");
    assert_string_equal(f[2], "0");
    tl_proc_free(&p);

    /* One customer, and one endpoint of it. */
    p = RUN_OK(db, "stats", "--customer", "acme");
    first_column(p.out, cols, sizeof cols);
    assert_string_equal(cols, "customer|acme|  bill|  crm");
    tl_assert_contains(p.out, "events of the last 24 hours");
    tl_proc_free(&p);
    p = RUN_OK(db, "stats", "--customer", "acme/crm");
    first_column(p.out, cols, sizeof cols);
    assert_string_equal(cols, "customer|  crm");
    tl_proc_free(&p);
    p = RUN_OK(db, "stats", "--customer", "solo");
    first_column(p.out, cols, sizeof cols);
    assert_string_equal(cols, "customer|solo");
    assert_null(strstr(p.out, "events of the last")); /* solo does not fan out */
    tl_proc_free(&p);

    /* The view: acme's own row holds no queued item (its events are not deliveries); the new
     * columns name each row's customer and endpoint. */
    assert_int_equal(tl_query_int(c, "SELECT due + in_flight + delayed FROM pgpace.customer_stats "
                                     "WHERE customer = 'acme'"),
                     0);
    char *names = tl_query_str(c, "SELECT string_agg(customer || ':' || coalesce(parent_customer, "
                                  "'-') || ':' || coalesce(endpoint, '-'), ' ' ORDER BY customer) "
                                  "FROM pgpace.customer_stats");
    assert_string_equal(names, "acme:-:- acme/bill:acme:bill acme/crm:acme:crm own:-:default "
                               "own/crm:own:crm solo:-:default");
    free(names);

    /* --watch's statement groups the same way. */
    const char *params[] = {"acme"};
    PGresult *res = PQexecParams(c, sql_q_stats_watch, 1, NULL, params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 3);
    assert_string_equal(PQgetvalue(res, 0, SQL_STATS_WATCH_C_CUSTOMER), "acme");
    assert_string_equal(PQgetvalue(res, 0, SQL_STATS_WATCH_C_RATE), "120");
    assert_string_equal(PQgetvalue(res, 0, SQL_STATS_WATCH_C_QUEUED), "2");
    assert_string_equal(PQgetvalue(res, 0, SQL_STATS_WATCH_C_DEAD), "2");
    assert_string_equal(PQgetvalue(res, 0, SQL_STATS_WATCH_C_STATE), "open");
    assert_string_equal(PQgetvalue(res, 1, SQL_STATS_WATCH_C_CUSTOMER), "  bill");
    assert_string_equal(PQgetvalue(res, 2, SQL_STATS_WATCH_C_CUSTOMER), "  crm");
    assert_string_equal(PQgetvalue(res, 2, SQL_STATS_WATCH_C_STATE), "open");
    PQclear(res);

    /* --unmatched lists acme's one event that matched no endpoint (kind ping), by its id. */
    long long ping =
        tl_query_int(c, "SELECT id FROM pgpace.item WHERE kind = 'ping' AND fanout = 0");
    char want[64];
    snprintf(want, sizeof want, "%lld", ping);
    tl_proc u = RUN_OK(db, "stats", "--unmatched", "--customer", "acme");
    first_column(u.out, cols, sizeof cols);
    char expect[96];
    snprintf(expect, sizeof expect, "event_id|%s", want);
    assert_string_equal(cols, expect);
    tl_assert_contains(u.out, "ping");
    tl_proc_free(&u);
    u = RUN_OK(db, "stats", "--unmatched", "--customer", "solo");
    first_column(u.out, cols, sizeof cols);
    assert_string_equal(cols, "event_id");
    tl_proc_free(&u);
}

/* `pgpace events` names the customer and the endpoint of each (an endpoint's recorded under its
 * row's name), and --endpoint narrows a customer's to one of them ('default' its own); the
 * operator webhook's body names both the same way. */
static void events_name_customer_and_endpoint(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "SELECT pgpace.customer_set('acme', rate_per_minute => 60, webhook_url => "
               "'https://example.com/acme')");
    tl_exec(c, "SELECT pgpace.customer_set('beta', rate_per_minute => 60, webhook_url => "
               "'https://example.com/beta')");
    endpoint_add(c, "acme", "crm", NULL);
    tl_exec(c, "SELECT pgpace.customer_set('acme/crm', paused => true)");
    tl_exec(c, "SELECT pgpace.customer_set('acme', paused => true)");
    tl_exec(c, "SELECT pgpace.customer_set('beta', paused => true)");

    tl_proc p = RUN_OK(db, "events");
    tl_assert_contains(p.out, "  kind    customer  endpoint  detail");
    tl_assert_contains(p.out, "  paused  acme      crm       {");
    tl_assert_contains(p.out, "  paused  acme      default   {");
    tl_assert_contains(p.out, "  paused  beta      default   {");
    tl_proc_free(&p);
    p = RUN_OK(db, "events", "--customer", "acme");
    assert_non_null(strstr(p.out, " crm "));
    assert_non_null(strstr(p.out, " default "));
    assert_null(strstr(p.out, "beta"));
    tl_proc_free(&p);
    p = RUN_OK(db, "events", "--customer", "acme", "--endpoint", "crm");
    assert_non_null(strstr(p.out, " crm "));
    assert_null(strstr(p.out, " default "));
    tl_proc_free(&p);
    p = RUN_OK(db, "events", "--customer", "acme", "--endpoint", "default");
    assert_null(strstr(p.out, " crm "));
    assert_non_null(strstr(p.out, " default "));
    tl_proc_free(&p);
    p = RUN_OK(db, "events", "--customer", "acme", "--endpoint", "nope");
    tl_assert_contains(p.out, "no events match");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "events", "--endpoint", "crm"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "pgpace events: --endpoint needs --customer");
    tl_proc_free(&p);

    /* The operator webhook's body (what the leader posts). */
    const char *params[] = {"10"};
    PGresult *res = PQexecParams(c, sql_q_run_events, 1, NULL, params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 3);
    tl_assert_contains(PQgetvalue(res, 0, SQL_RUN_EVENTS_C_BODY),
                       "\"customer\": \"acme\", \"endpoint\": \"crm\"");
    tl_assert_contains(PQgetvalue(res, 1, SQL_RUN_EVENTS_C_BODY),
                       "\"customer\": \"acme\", \"endpoint\": \"default\"");
    tl_assert_contains(PQgetvalue(res, 2, SQL_RUN_EVENTS_C_BODY),
                       "\"customer\": \"beta\", \"endpoint\": \"default\"");
    PQclear(res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(stats_groups_endpoints_under_their_customer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(events_name_customer_and_endpoint, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
