/* test_limits_cli.c - limit windows and receiver hosts' own limits (migration 0019) from the
 * command line and SQL, end to end against a real database: windows normalised and shown by
 * `get` and `list` as they were meant, every refused window (each message naming the field and
 * the window, nothing changed), `--ratelimit-headers`, a spaced or batch receiver paced by its
 * windows alone (and refused without a rate or windows), the dispatcher's view of that pace
 * (run_customers.sql), `pgpace host set|get|list|delete` with the host's name normalised or
 * refused, and the NOTIFY a host change sends. */
#include "testlib.h"

#include "sql_embed.h"

#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- helpers ---- */

#define URL  "https://hooks.example.com/a"
#define URL2 "https://hooks.example.com/b"

static tl_proc run_args(const tl_db *db, const char *const *args)
{
    const char *argv[48] = {"--db", db->conninfo};
    size_t n = 2;
    for (; *args && n < 47; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    return tl_pgpace(argv, NULL, NULL);
}

#define RUN(db, ...) run_args(db, TL_ARGV(__VA_ARGS__))

static tl_proc run_ok(const tl_db *db, const char *const *args)
{
    tl_proc p = run_args(db, args);
    if (p.status != 0)
        fail_msg("pgpace %s %s exited %d:\n%s%s", args[0], args[1] ? args[1] : "", p.status, p.out,
                 p.err);
    return p;
}

#define RUN_OK(db, ...) run_ok(db, TL_ARGV(__VA_ARGS__))

/* Runs a command that must fail with `status`, its error holding `want`, changing nothing. */
static void refused(tl_db *db, int status, const char *want, const char *const *args)
{
    char *before =
        tl_query_str(db->conn, "SELECT coalesce(md5(string_agg(c::text, ',' ORDER BY c.id)), '-') "
                               "|| coalesce((SELECT md5(string_agg(h::text, ',' ORDER BY h.host)) "
                               "FROM pgpace.host h), '-') FROM pgpace.customer c");
    tl_proc p = run_args(db, args);
    if (p.status != status || !strstr(p.err, want))
        fail_msg("pgpace %s %s: expected exit %d and '%s', got exit %d:\n%s", args[0], args[1],
                 status, want, p.status, p.err);
    tl_proc_free(&p);
    char *after =
        tl_query_str(db->conn, "SELECT coalesce(md5(string_agg(c::text, ',' ORDER BY c.id)), '-') "
                               "|| coalesce((SELECT md5(string_agg(h::text, ',' ORDER BY h.host)) "
                               "FROM pgpace.host h), '-') FROM pgpace.customer c");
    assert_string_equal(after, before);
    free(before);
    free(after);
}

#define REFUSED(db, status, want, ...) refused(db, status, want, TL_ARGV(__VA_ARGS__))

/* The value of line `field` of a `get` output ("field   value"), into buf. */
static const char *field_of(const char *out, const char *field, char *buf, size_t cap)
{
    size_t flen = strlen(field);
    for (const char *p = out; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > flen && strncmp(p, field, flen) == 0 && p[flen] == ' ') {
            const char *v = p + flen;
            while (*v == ' ')
                v++;
            snprintf(buf, cap, "%.*s", (int)(len - (size_t)(v - p)), v);
            return buf;
        }
        p = eol ? eol + 1 : NULL;
    }
    fail_msg("no line '%s' in:\n%s", field, out);
    return NULL;
}

/* The whitespace-separated fields of the line of `out` starting with `first`; 0 when none. */
static int row_of(const char *out, const char *first, char *line, size_t cap, char **f, int max)
{
    for (const char *p = out; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len < cap) {
            memcpy(line, p, len);
            line[len] = '\0';
            int n = 0;
            char *save = NULL;
            for (char *t = strtok_r(line, " ", &save); t && n < max; t = strtok_r(NULL, " ", &save))
                f[n++] = t;
            if (n > 0 && strcmp(f[0], first) == 0)
                return n;
        }
        p = eol ? eol + 1 : NULL;
    }
    return 0;
}

/* `get` of a customer (or "customer/endpoint" through endpoint get), field `field`. */
static void assert_get(tl_db *db, const char *const *args, const char *field, const char *want)
{
    tl_proc p = run_ok(db, args);
    char buf[256];
    assert_string_equal(field_of(p.out, field, buf, sizeof buf), want);
    tl_proc_free(&p);
}

/* ---- windows on customers and endpoints ---- */

/* Windows are stored canonical (shortest period first, each period in the largest unit that
 * divides it) whatever way they were written, in one --limit or several, and `get`, `list`
 * and `endpoint list` show them so. */
static void windows_are_normalised_and_shown(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "customer", "set", "acme", "--url", URL, "--limit",
                       " 50000/DAY , 600/minutes", "--limit", "10 / sec");
    tl_assert_contains(p.out, "created customer acme");
    tl_proc_free(&p);
    char *stored =
        tl_query_str(db->conn, "SELECT limits::text FROM pgpace.customer WHERE name = 'acme'");
    assert_string_equal(stored, "{10/s,600/min,50000/day}");
    free(stored);
    assert_get(db, TL_ARGV("customer", "get", "acme"), "limits", "10/s, 600/min, 50000/day");
    assert_get(db, TL_ARGV("customer", "get", "acme"), "rate_per_minute", "-");
    assert_get(db, TL_ARGV("customer", "get", "acme"), "ratelimit_headers", "on");
    /* Multiples keep their unit when none larger divides them. */
    p = RUN_OK(db, "customer", "set", "acme", "--limit", "100/10s,3600/60min,120/2min,7/1w");
    tl_proc_free(&p);
    assert_get(db, TL_ARGV("customer", "get", "acme"), "limits",
               "100/10s, 120/2min, 3600/h, 7/7day");
    p = RUN_OK(db, "customer", "list");
    char line[512], *f[16];
    assert_int_equal(row_of(p.out, "name", line, sizeof line, f, 16), 12);
    assert_string_equal(f[3], "limits");
    assert_int_equal(row_of(p.out, "acme", line, sizeof line, f, 16), 12);
    assert_string_equal(f[2], "-");
    assert_string_equal(f[3], "100/10s,120/2min,3600/h,7/7day");
    tl_proc_free(&p);

    /* An endpoint: added with windows (and no rate), changed with endpoint set. */
    p = RUN_OK(db, "endpoint", "add", "acme", "crm", "--url", URL2, "--limit", "5/s", "--limit",
               "100/h", "--ratelimit-headers", "off");
    tl_proc_free(&p);
    assert_get(db, TL_ARGV("endpoint", "get", "acme", "crm"), "limits", "5/s, 100/h");
    assert_get(db, TL_ARGV("endpoint", "get", "acme", "crm"), "ratelimit_headers", "off");
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--limit", "3/s", "--ratelimit-headers", "on");
    tl_proc_free(&p);
    assert_get(db, TL_ARGV("endpoint", "get", "acme", "crm"), "limits", "3/s");
    assert_get(db, TL_ARGV("endpoint", "get", "acme", "crm"), "ratelimit_headers", "on");
    p = RUN_OK(db, "endpoint", "list", "acme");
    assert_int_equal(row_of(p.out, "crm", line, sizeof line, f, 16), 9);
    assert_string_equal(f[3], "-"); /* no rate: its windows pace it */
    assert_string_equal(f[8], "3/s");
    assert_int_equal(row_of(p.out, "default", line, sizeof line, f, 16), 9);
    assert_string_equal(f[8], "100/10s,120/2min,3600/h,7/7day");
    tl_proc_free(&p);

    /* --ratelimit-headers off, then --no-limits with a rate: the windows go. */
    p = RUN_OK(db, "customer", "set", "acme", "--rate", "60", "--no-limits", "--ratelimit-headers",
               "off");
    tl_proc_free(&p);
    assert_get(db, TL_ARGV("customer", "get", "acme"), "limits", "none");
    assert_get(db, TL_ARGV("customer", "get", "acme"), "ratelimit_headers", "off");
    assert_get(db, TL_ARGV("customer", "get", "acme"), "rate_per_minute", "60");
    assert_int_equal(tl_query_int(db->conn, "SELECT (NOT ratelimit_headers AND limits = '{}')::int "
                                            "FROM pgpace.customer WHERE name = 'acme'"),
                     1);
    /* Given nothing about limits, a change keeps them (NULL: unchanged). */
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--burst", "2");
    tl_proc_free(&p);
    assert_get(db, TL_ARGV("endpoint", "get", "acme", "crm"), "limits", "3/s");

    /* pgpace stats shows the windows where it shows the rate. */
    p = RUN_OK(db, "stats", "--customer", "acme");
    assert_true(row_of(p.out, "crm", line, sizeof line, f, 16) >= 3);
    assert_string_equal(f[2], "3/s");
    tl_proc_free(&p);
}

/* Every kind of bad window is refused, naming the field and the window, and nothing changes:
 * an unknown unit, a count of 0, a period over 7 days, two windows of one period, 9 windows;
 * --limit with --no-limits, an empty --limit, a bad --ratelimit-headers. */
static void bad_windows_are_refused(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "customer", "set", "acme", "--url", URL, "--rate", "60");
    tl_proc_free(&p);
    REFUSED(db, 1, "limits: limit window '10/fortnight': unknown unit 'fortnight'", "customer",
            "set", "acme", "--limit", "10/fortnight");
    REFUSED(db, 1, "limits: limit window '0/s': the count must be 1 to 1000000000", "customer",
            "set", "acme", "--limit", "0/s");
    REFUSED(db, 1, "limits: limit window '1/8day': the period must be 1 second to 7 days",
            "customer", "set", "acme", "--limit", "1/8day");
    REFUSED(db, 1, "limits: limit windows 10/min, 600/60s: two windows of 1/min", "customer", "set",
            "acme", "--limit", "10/min", "--limit", "600/60s");
    REFUSED(db, 1, "limits: limit window 'ten per second' is not COUNT/PERIOD", "customer", "set",
            "acme", "--limit", "ten per second");
    REFUSED(db, 2, "--limit: a limit has at most 8 windows, got 9", "customer", "set", "acme",
            "--limit", "1/s,2/2s,3/3s,4/4s,5/5s,6/6s,7/7s,8/8s", "--limit", "9/9s");
    REFUSED(db, 2, "use --limit or --no-limits, not both", "customer", "set", "acme", "--limit",
            "1/s", "--no-limits");
    REFUSED(db, 2, "--limit: expected COUNT/PERIOD", "customer", "set", "acme", "--limit", " , ");
    REFUSED(db, 2, "--ratelimit-headers: expected on or off, got 'yes'", "customer", "set", "acme",
            "--ratelimit-headers", "yes");
    /* The same checks on an endpoint. */
    REFUSED(db, 1, "limits: limit window '5/fortnight': unknown unit", "endpoint", "add", "acme",
            "crm", "--url", URL2, "--limit", "5/fortnight");
    /* And from SQL: the same message, SQLSTATE 22023; 9 windows counted there too. */
    tl_expect_sql_error(db->conn, "SELECT pgpace.customer_set('acme', limits => '{1/s, 2/1s}')",
                        "22023", "limits: limit windows 1/s, 2/1s: two windows of 1/s", NULL);
    tl_expect_sql_error(db->conn,
                        "SELECT pgpace.customer_set('acme', limits => "
                        "'{1/s,2/2s,3/3s,4/4s,5/5s,6/6s,7/7s,8/8s,9/9s}')",
                        "22023", "limits: a limit has at most 8 windows, got 9", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.host_set('a.example', '{1/0s}')", "22023",
                        "limits: limit window '1/0s'", NULL);
}

/* A spaced or batch receiver may have windows instead of a rate (its pace is its shortest
 * window's); without either, or unlimited with windows only, it is refused naming the field,
 * and its windows cannot be cleared while it has no rate. */
static void windows_stand_for_the_rate(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "customer", "set", "sp", "--url", URL, "--limit", "10/s");
    tl_proc_free(&p);
    p = RUN_OK(db, "customer", "set", "bt", "--url", URL, "--mode", "batch", "--limit", "600/min");
    tl_proc_free(&p);
    p = RUN_OK(db, "customer", "set", "tn", "--limit", "100/min"); /* its endpoints' limit */
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "add", "tn", "e1", "--url", URL2, "--limit", "5/s");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "add", "tn", "e2", "--url", URL2, "--rate", "30");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                            "rate_per_minute IS NULL AND webhook_url IS NOT NULL"),
                     3);

    REFUSED(db, 1, "creating it needs --rate (or --limit)", "customer", "set", "none", "--url",
            URL);
    REFUSED(db, 2, "--rate is required", "endpoint", "add", "tn", "e3", "--url", URL2);
    REFUSED(db, 1, "rate: 'un' in mode unlimited needs a rate", "customer", "set", "un", "--url",
            URL, "--mode", "unlimited", "--limit", "10/s");
    REFUSED(db, 1, "limits: 'sp' would have neither a rate nor limit windows", "customer", "set",
            "sp", "--no-limits");
    REFUSED(db, 1, "rate: 'sp' in mode unlimited needs a rate", "customer", "set", "sp", "--mode",
            "unlimited");
    tl_expect_sql_error(db->conn,
                        "SELECT pgpace.endpoint_add('tn', 'e4', 'https://x.example.com/', NULL)",
                        "22004", "rate: an endpoint needs a rate", NULL);
    /* The table holds the rule for any other writer. */
    tl_expect_sql_error(db->conn, "UPDATE pgpace.customer SET limits = '{}' WHERE name = 'sp'",
                        "23514", "customer_receiver_complete", NULL);
    /* With a rate, the windows may go. */
    p = RUN_OK(db, "customer", "set", "sp", "--rate", "60", "--no-limits");
    tl_proc_free(&p);

    /* The dispatcher's view (run_customers.sql): the pace is the lesser of the rate and the
     * shortest window's rate; a customer with windows only still shares a limit. */
    p = RUN_OK(db, "customer", "set", "sp", "--limit", "2/s,1000/day");
    tl_proc_free(&p);
    const char *params[SQL_RUN_CUSTOMERS_NPARAMS] = {NULL, "0", "1000"};
    PGresult *res = PQexecParams(db->conn, sql_q_run_customers, SQL_RUN_CUSTOMERS_NPARAMS, NULL,
                                 params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    int seen = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        const char *name = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_NAME);
        double rate = atof(PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_RATE_PER_MINUTE));
        const char *tenant_rate = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_TENANT_RATE);
        const char *windows = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_LIMIT_WINDOWS);
        if (strcmp(name, "sp") == 0) { /* 60/min beside 2/s (120/min) and a day quota */
            assert_true(rate == 60.0);
            assert_string_equal(windows, "2/1 1000/86400");
            seen++;
        } else if (strcmp(name, "bt") == 0) {
            assert_true(rate == 600.0);
            seen++;
        } else if (strcmp(name, "tn/e1") == 0) {
            assert_true(rate == 300.0);
            assert_true(atof(tenant_rate) == 100.0);
            assert_string_equal(PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_TENANT_LIMIT_WINDOWS),
                                "100/60");
            seen++;
        } else if (strcmp(name, "tn/e2") == 0) {
            assert_true(rate == 30.0);
            assert_true(atof(tenant_rate) == 100.0);
            seen++;
        }
    }
    PQclear(res);
    assert_int_equal(seen, 4);
}

/* ---- hosts ---- */

/* Waits up to timeout_ms for a notification on conn; NULL when none came (caller frees). */
static PGnotify *wait_notify(PGconn *conn, int timeout_ms)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        assert_int_equal(PQconsumeInput(conn), 1);
        PGnotify *n = PQnotifies(conn);
        if (n)
            return n;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left =
            timeout_ms - ((now.tv_sec - t0.tv_sec) * 1000LL + (now.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0)
            return NULL;
        struct pollfd pfd = {PQsocket(conn), POLLIN, 0};
        assert_true(poll(&pfd, 1, (int)left) >= 0);
    }
}

static void assert_notified(PGconn *listener, const char *payload)
{
    PGnotify *n = wait_notify(listener, 10000);
    if (!n)
        fail_msg("no NOTIFY pgpace_host '%s' within 10 s", payload);
    assert_string_equal(n->relname, "pgpace_host");
    assert_string_equal(n->extra, payload);
    PQfreemem(n);
}

/* host set (create, change, clear), get, list and delete, each through the normalised name,
 * and a NOTIFY on pgpace_host with the host for each change. */
static void host_set_get_list_delete(void **state)
{
    tl_db *db = *state;
    PGconn *listener = PQconnectdb(db->conninfo);
    assert_int_equal(PQstatus(listener), CONNECTION_OK);
    tl_exec(listener, "LISTEN pgpace_host");
    tl_proc p = RUN_OK(db, "host", "set", "API.Example.COM.:08443", "--limit", "100/s", "--limit",
                       "5000/min", "--max-connections", "4");
    tl_assert_contains(p.out, "created host api.example.com:8443");
    tl_proc_free(&p);
    assert_notified(listener, "api.example.com:8443");
    p = RUN_OK(db, "host", "get", "api.example.COM:8443");
    char buf[256];
    assert_string_equal(field_of(p.out, "host", buf, sizeof buf), "api.example.com:8443");
    assert_string_equal(field_of(p.out, "limits", buf, sizeof buf), "100/s,5000/min");
    assert_string_equal(field_of(p.out, "max_connections", buf, sizeof buf), "4");
    assert_string_equal(field_of(p.out, "receivers", buf, sizeof buf), "0");
    tl_proc_free(&p);

    /* A URL on that host and port counts against it; one on its default port does not. */
    p = RUN_OK(db, "customer", "set", "acme", "--url", "https://api.example.com:8443/h", "--rate",
               "60");
    tl_proc_free(&p);
    p = RUN_OK(db, "customer", "set", "beta", "--url", "https://api.example.com/h", "--rate", "60");
    tl_proc_free(&p);
    p = RUN_OK(db, "host", "set", "[2001:DB8:0::1]", "--max-connections", "2");
    tl_assert_contains(p.out, "created host [2001:db8::1]");
    tl_proc_free(&p);
    assert_notified(listener, "[2001:db8::1]");
    p = RUN_OK(db, "host", "set", "hooks.example.com", "--limit", "10/s");
    tl_proc_free(&p);
    assert_notified(listener, "hooks.example.com");
    p = RUN_OK(db, "host", "list");
    char line[512], *f[16];
    assert_int_equal(row_of(p.out, "host", line, sizeof line, f, 16), 5);
    assert_int_equal(row_of(p.out, "api.example.com:8443", line, sizeof line, f, 16), 6);
    assert_string_equal(f[1], "100/s,5000/min");
    assert_string_equal(f[2], "4");
    assert_string_equal(f[3], "1"); /* acme's URL */
    assert_int_equal(row_of(p.out, "[2001:db8::1]", line, sizeof line, f, 16), 6);
    assert_string_equal(f[1], "-");
    assert_string_equal(f[2], "2");
    assert_true(row_of(p.out, "hooks.example.com", line, sizeof line, f, 16) > 0);
    tl_proc_free(&p);
    char *matched = tl_query_str(db->conn, "SELECT pgpace.host_for_url('https://API.example"
                                           ".com:8443/x') || ' ' || coalesce(pgpace."
                                           "host_for_url('https://api.example.com/x'), '-')");
    assert_string_equal(matched, "api.example.com:8443 -");
    free(matched);

    /* Changing: windows kept when not given, replaced, cleared; the cap back to the default. */
    p = RUN_OK(db, "host", "set", "api.example.com:8443", "--no-max-connections");
    tl_assert_contains(p.out, "updated host api.example.com:8443");
    tl_proc_free(&p);
    assert_notified(listener, "api.example.com:8443");
    p = RUN_OK(db, "host", "get", "api.example.com:8443");
    assert_string_equal(field_of(p.out, "limits", buf, sizeof buf), "100/s,5000/min");
    assert_string_equal(field_of(p.out, "max_connections", buf, sizeof buf), "default");
    tl_proc_free(&p);
    p = RUN_OK(db, "host", "set", "api.example.com:8443", "--no-limits");
    tl_proc_free(&p);
    assert_notified(listener, "api.example.com:8443");
    assert_int_equal(tl_query_int(db->conn, "SELECT cardinality(limits) FROM pgpace.host WHERE "
                                            "host = 'api.example.com:8443'"),
                     0);

    /* Delete, by any spelling of the name; then it is unknown. */
    p = RUN_OK(db, "host", "delete", "API.example.com:8443");
    tl_assert_contains(p.out, "deleted host api.example.com:8443");
    tl_proc_free(&p);
    assert_notified(listener, "api.example.com:8443");
    REFUSED(db, 1, "unknown host 'api.example.com:8443'", "host", "delete", "api.example.com:8443");
    REFUSED(db, 1, "unknown host 'api.example.com:8443'", "host", "get", "api.example.com:8443");
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.host"), 2);
    PQfinish(listener);
}

/* Host names that are refused, each naming the field (host) and saying what to write. */
static void bad_hosts_are_refused(void **state)
{
    tl_db *db = *state;
    REFUSED(db, 1,
            "host: 'https://hooks.example.com/in' is a URL, not a host; hint: give its "
            "host, with :PORT when the limit is for that port only (hooks.example.com)",
            "host", "set", "https://hooks.example.com/in", "--limit", "10/s");
    REFUSED(db, 1, "host: '2001:db8::1' looks like an IPv6 address: write it in brackets", "host",
            "set", "2001:db8::1");
    REFUSED(db, 1, "host: the port of 'hooks.example.com:70000' must be 1 to 65535", "host", "set",
            "hooks.example.com:70000");
    REFUSED(db, 1, "host: the port of 'hooks.example.com:0' must be 1 to 65535", "host", "set",
            "hooks.example.com:0");
    REFUSED(db, 1, "host: 'bad host' is not a host name or address", "host", "set", "bad host");
    REFUSED(db, 1, "host: '[::zz]' is not [IPv6]", "host", "set", "[::zz]");
    REFUSED(db, 1, "host: must not be empty", "host", "set", "");
    REFUSED(db, 2, "--max-connections", "host", "set", "hooks.example.com", "--max-connections",
            "0");
    REFUSED(db, 2, "use --max-connections or --no-max-connections, not both", "host", "set",
            "hooks.example.com", "--max-connections", "3", "--no-max-connections");
    REFUSED(db, 2, "missing HOST", "host", "set");
    REFUSED(db, 2, "unknown subcommand 'rm'", "host", "rm", "x");
    tl_expect_sql_error(db->conn, "SELECT pgpace.host_set('h.example', max_connections => 20000)",
                        "22023", "max_connections: must be 1 to 10000, got 20000", NULL);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.host"), 0);
    /* Only the owner may change hosts: producers only enqueue. */
    static const char *const fns[] = {"pgpace.host_set(text, text[], integer, boolean)",
                                      "pgpace.host_delete(text)", "pgpace.host_list(text)"};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (tl_query_int(db->conn,
                         "SELECT has_function_privilege('pgpace_producer', '%s', 'EXECUTE')::int",
                         fns[i]) != 0)
            fail_msg("pgpace_producer may execute %s", fns[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(windows_are_normalised_and_shown, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_windows_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(windows_stand_for_the_rate, setup, teardown),
        cmocka_unit_test_setup_teardown(host_set_get_list_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_hosts_are_refused, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
