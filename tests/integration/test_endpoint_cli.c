/* test_endpoint_cli.c - `pgpace endpoint add|set|get|list|pause|resume|enable|disable|delete`
 * and the customer commands around endpoints, end to end against a real database: every
 * receiver option of `customer set` on an endpoint, subscriptions and filters, the state
 * commands and the events they record, delete with and without --drop-queued, every refused
 * input (each naming its field, nothing changed), the SQL functions behind them and who may call
 * them, the settings table against the schema, and a running dispatcher delivering to endpoints
 * added by the CLI (subscription, headers, an operator disable that holds and an enable that
 * releases). */
#include "fixture.h"
#include "testca.h"
#include "testlib.h"

#include "receiver_settings.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

#define URL  "https://crm.example.com/hooks"
#define URL2 "https://wh.example.com/in"

/* Runs pgpace against db with up to 40 arguments; config (may be NULL) is given as --config. */
static tl_proc run_cfg(const tl_db *db, const char *config, const char *const *args)
{
    const char *argv[48] = {"--db", db->conninfo};
    size_t n = 2;
    if (config) {
        argv[n++] = "--config";
        argv[n++] = config;
    }
    for (; *args && n < 47; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    return tl_pgpace(argv, NULL, NULL);
}

#define RUN(db, ...) run_cfg(db, NULL, TL_ARGV(__VA_ARGS__))

static tl_proc run_ok(const tl_db *db, const char *const *args)
{
    tl_proc p = run_cfg(db, NULL, args);
    if (p.status != 0)
        fail_msg("pgpace %s %s exited %d:\n%s%s", args[0], args[1] ? args[1] : "", p.status, p.out,
                 p.err);
    return p;
}

#define RUN_OK(db, ...) run_ok(db, TL_ARGV(__VA_ARGS__))

/* Everything an endpoint command could change, as one string: any change shows. */
static char *snapshot(tl_db *db)
{
    return tl_query_str(
        db->conn,
        "SELECT coalesce((SELECT md5(string_agg(c::text, ',' ORDER BY c.id)) FROM "
        "pgpace.customer c), '-') || ' ' || (SELECT count(*) FROM pgpace.queue) || ' ' || "
        "(SELECT count(*) FROM pgpace.dead_letter) || ' ' || (SELECT count(*) FROM pgpace.item) "
        "|| ' ' || (SELECT count(*) FROM pgpace.event)");
}

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

static void make_customer(tl_db *db, const char *name, bool with_url)
{
    tl_proc p = with_url ? RUN_OK(db, "customer", "set", name, "--rate", "600", "--url",
                                  "https://own.example.com/"
                                  "hook")
                         : RUN_OK(db, "customer", "set", name, "--rate", "600");
    tl_proc_free(&p);
}

/* ---- help ---- */

static void help_for_every_endpoint_command(void **state)
{
    (void)state;
    static const char *const subs[] = {"add",    "set",    "get",     "list",  "pause",
                                       "resume", "enable", "disable", "delete"};
    tl_proc p = tl_pgpace(TL_ARGV("endpoint", "--help"), NULL, NULL);
    assert_int_equal(p.status, 0);
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char want[32];
        snprintf(want, sizeof want, "  %s CUSTOMER", subs[i]);
        tl_assert_contains(p.out, want);
    }
    tl_proc_free(&p);
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        p = tl_pgpace(TL_ARGV("endpoint", subs[i], "--help"), NULL, NULL);
        if (p.status != 0 || !strstr(p.out, "usage: pgpace endpoint "))
            fail_msg("endpoint %s --help: exit %d\n%s%s", subs[i], p.status, p.out, p.err);
        tl_proc_free(&p);
    }
    /* add and set list every receiver option of the table, and the routing ones. */
    for (int k = 0; k < 3; k++) {
        const char *sub = k == 0 ? "add" : "set";
        p = k == 2 ? tl_pgpace(TL_ARGV("customer", "set", "--help"), NULL, NULL)
                   : tl_pgpace(TL_ARGV("endpoint", sub, "--help"), NULL, NULL);
        unsigned scope = k == 0 ? RS_ENDPOINT_ADD : k == 1 ? RS_ENDPOINT_SET : RS_CUSTOMER;
        for (size_t i = 0; i < receiver_settings_count; i++) {
            char opt[64];
            snprintf(opt, sizeof opt, "\n  --%s", receiver_settings[i].name);
            /* Its own line, or beside the option it is explained with. */
            bool listed = strstr(p.out, opt) != NULL || strstr(p.out, opt + 3) != NULL;
            if (!(receiver_settings[i].scope & scope))
                listed = strstr(p.out, opt) != NULL;
            if (listed != ((receiver_settings[i].scope & scope) != 0))
                fail_msg("help %d: %s %s", k, opt, listed ? "listed, not taken" : "not listed");
        }
        tl_proc_free(&p);
    }
    p = tl_pgpace(TL_ARGV("endpoint"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "usage: pgpace endpoint");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("endpoint", "frob"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "unknown subcommand 'frob'");
    tl_proc_free(&p);
    /* An option only endpoints take is not one of customer set's. */
    p = tl_pgpace(TL_ARGV("customer", "set", "acme", "--events", "a"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "unknown or incomplete option '--events'");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--help"), NULL, NULL);
    tl_assert_contains(p.out, "endpoint add|set|get|list|pause|resume|enable|disable|delete");
    tl_proc_free(&p);
}

/* ---- customers around endpoints ---- */

/* `customer set --rate` alone makes a customer without a receiver of its own; `customer list`
 * shows customers only, with their endpoint counts; `customer get` lists the endpoints. */
static void customer_without_receiver_list_and_get(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "customer", "set", "acme", "--rate", "600");
    tl_assert_contains(p.out, "created customer acme");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.customer WHERE name = "
                                  "'acme' AND rate_per_minute = 600 AND webhook_url IS "
                                  "NULL AND signing_secrets IS NULL AND parent_id IS NULL"),
                     1);
    /* Neither a secret to rotate nor one to set without a URL. */
    p = RUN(db, "customer", "set", "acme", "--rotate-secret");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "customer 'acme' has no webhook URL of its own");
    tl_proc_free(&p);
    p = RUN(db, "customer", "set", "acme", "--secret",
            "whsec_"
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "customer 'acme' has no webhook URL of its own: no secrets to set");
    tl_proc_free(&p);
    make_customer(db, "beta", true);

    p = RUN_OK(db, "endpoint", "add", "acme", "crm", "--url", URL, "--rate", "60");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "add", "acme", "wh", "--url", URL2, "--rate", "30");
    tl_proc_free(&p);
    p = RUN_OK(db, "customer", "list");
    char line[512], *f[16];
    assert_int_equal(row_of(p.out, "name", line, sizeof line, f, 16), 12);
    assert_string_equal(f[3], "limits");
    assert_string_equal(f[10], "endpoints");
    assert_int_equal(row_of(p.out, "acme", line, sizeof line, f, 16), 12);
    assert_string_equal(f[2], "600");
    assert_string_equal(f[3], "-");
    assert_string_equal(f[10], "2");
    assert_string_equal(f[11], "-");
    assert_int_equal(row_of(p.out, "beta", line, sizeof line, f, 16), 12);
    assert_string_equal(f[10], "1"); /* its own receiver, 'default' */
    if (strstr(p.out, "acme/crm") || strstr(p.out, URL))
        fail_msg("customer list shows endpoints:\n%s", p.out);
    tl_proc_free(&p);

    p = RUN_OK(db, "customer", "get", "acme");
    char buf[256];
    assert_string_equal(field_of(p.out, "endpoints", buf, sizeof buf), "2");
    assert_true(row_of(p.out, "crm", line, sizeof line, f, 16) >= 3);
    assert_string_equal(f[1], URL);
    assert_true(row_of(p.out, "wh", line, sizeof line, f, 16) >= 3);
    tl_proc_free(&p);
    /* A customer whose only endpoint is its own receiver: no list. */
    p = RUN_OK(db, "customer", "get", "beta");
    assert_string_equal(field_of(p.out, "endpoints", buf, sizeof buf), "1");
    if (strstr(p.out, "queued"))
        fail_msg("customer get beta lists endpoints:\n%s", p.out);
    tl_proc_free(&p);
}

/* ---- add and get ---- */

/* Every kind of receiver option on `endpoint add` reaches the endpoint's row, in the one
 * transaction; get shows them (secrets hidden), list shows the endpoint. */
static void endpoint_add_with_every_receiver_option(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme", false);
    testca ca;
    assert_int_equal(testca_make(&ca), 0);
    char *oauth_secret = tl_temp_file("s3cr3t-client\n");
    tl_proc p =
        RUN_OK(db, "endpoint", "add", "acme", "crm", "--url", URL, "--rate", "120", "--mode",
               "batch", "--burst", "3", "--events", "order.*, invoice.paid", "--filter",
               "{\"region\":\"eu\"}", "--max-attempts", "5", "--max-in-flight", "4", "--header",
               "X-Api-Key: k1", "--header", "X-Tenant: t-42", "--connect-timeout-ms", "2000",
               "--request-timeout-ms", "9000", "--throttle-floor", "0.5", "--throttle-decrease",
               "0.25", "--max-age", "2h", "--proxy", "direct", "--key-type", "ed25519", "--paused",
               "--client-cert", ca.client_a_cert, "--client-key", ca.client_a_key);
    tl_assert_contains(p.out, "added endpoint acme/crm");
    tl_assert_contains(p.out, "public key whpk_");
    tl_proc_free(&p);
    assert_int_equal(
        tl_query_int(db->conn,
                     "SELECT count(*) FROM pgpace.customer e JOIN pgpace.customer c ON c.id = "
                     "e.parent_id WHERE c.name = 'acme' AND e.name = 'acme/crm' AND "
                     "e.endpoint_name = 'crm' AND e.webhook_url = '" URL "' AND "
                     "e.rate_per_minute = 120 AND e.mode = 'batch' AND e.burst = 3 AND "
                     "e.event_types = '{order.*,invoice.paid}' AND e.payload_filter = "
                     "'{\"region\":\"eu\"}' AND e.max_attempts = 5 AND e.max_in_flight = 4 AND "
                     "e.extra_headers = '{\"X-Api-Key: k1\",\"X-Tenant: t-42\"}' AND "
                     "e.connect_timeout_ms = 2000 AND e.request_timeout_ms = 9000 AND "
                     "e.throttle_floor = 0.5 AND e.throttle_decrease = 0.25 AND "
                     "e.throttle_increase IS NULL AND e.max_age = '2 hours' AND e.proxy = "
                     "'direct' AND e.paused AND cardinality(e.signing_secrets) = 1 AND "
                     "e.signing_secrets[1] LIKE 'whsk\\_%%' AND e.client_cert LIKE "
                     "'-----BEGIN CERTIFICATE-----%%' AND e.client_key IS NOT NULL"),
        1);
    /* The customer's own row is untouched: still no receiver. */
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme' AND webhook_url IS NULL AND rate_per_minute "
                                            "= 600 AND NOT paused"),
                     1);

    /* Auth on a second endpoint: OAuth2 with its secret from a file, then bearer. */
    p = RUN_OK(db, "endpoint", "add", "acme", "wh", "--url", URL2, "--rate", "30", "--auth",
               "oauth2", "--oauth-token-url", "https://auth.example.com/token", "--oauth-client-id",
               "pgpace", "--oauth-client-secret-file", oauth_secret, "--oauth-scope",
               "hooks.write");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme/wh' AND auth_scheme = 'oauth2' AND "
                                            "auth_username = 'pgpace' AND auth_secret = "
                                            "'s3cr3t-client' AND oauth_scope = 'hooks.write' AND "
                                            "event_types IS NULL AND payload_filter IS NULL AND "
                                            "signing_secrets[1] LIKE 'whsec\\_%%'"),
                     1);

    char buf[512];
    p = RUN_OK(db, "endpoint", "get", "acme", "crm");
    assert_string_equal(field_of(p.out, "name", buf, sizeof buf), "acme/crm");
    assert_string_equal(field_of(p.out, "customer", buf, sizeof buf), "acme");
    assert_string_equal(field_of(p.out, "endpoint", buf, sizeof buf), "crm");
    assert_string_equal(field_of(p.out, "events", buf, sizeof buf), "order.*,invoice.paid");
    assert_string_equal(field_of(p.out, "filter", buf, sizeof buf), "{\"region\": \"eu\"}");
    assert_string_equal(field_of(p.out, "state", buf, sizeof buf), "paused");
    assert_string_equal(field_of(p.out, "queued", buf, sizeof buf), "0");
    assert_string_equal(field_of(p.out, "mode", buf, sizeof buf), "batch");
    assert_string_equal(field_of(p.out, "max_age", buf, sizeof buf), "02:00:00");
    tl_assert_contains(field_of(p.out, "client_cert", buf, sizeof buf), "CN=client-a");
    tl_assert_contains(p.out, "X-Api-Key: (hidden)");
    if (strstr(p.out, "whsk_") || strstr(p.out, "k1") || strstr(p.out, "PRIVATE KEY"))
        fail_msg("endpoint get printed a secret without --show-secrets:\n%s", p.out);
    tl_proc_free(&p);
    char *secret = tl_query_str(db->conn, "SELECT signing_secrets[1] FROM pgpace.customer WHERE "
                                          "name = 'acme/crm'");
    p = RUN_OK(db, "endpoint", "get", "acme", "crm", "--show-secrets");
    tl_assert_contains(p.out, secret);
    tl_assert_contains(p.out, "X-Api-Key: k1");
    tl_proc_free(&p);
    free(secret);
    p = RUN_OK(db, "endpoint", "get", "acme", "wh");
    assert_string_equal(field_of(p.out, "events", buf, sizeof buf), "*");
    assert_string_equal(field_of(p.out, "filter", buf, sizeof buf), "-");
    assert_string_equal(field_of(p.out, "auth", buf, sizeof buf), "oauth2");
    if (strstr(p.out, "s3cr3t"))
        fail_msg("endpoint get printed the client secret:\n%s", p.out);
    tl_proc_free(&p);

    p = RUN_OK(db, "endpoint", "list", "acme");
    char line[512], *f[16];
    assert_int_equal(row_of(p.out, "endpoint", line, sizeof line, f, 16), 9);
    const char *const header[] = {"endpoint", "url",   "mode",   "rate",  "events",
                                  "filter",   "state", "queued", "limits"};
    for (int i = 0; i < 9; i++)
        assert_string_equal(f[i], header[i]);
    assert_true(row_of(p.out, "crm", line, sizeof line, f, 16) >= 9);
    assert_string_equal(f[1], URL);
    assert_string_equal(f[2], "batch");
    assert_string_equal(f[3], "120");
    assert_string_equal(f[4], "order.*,invoice.paid");
    assert_int_equal(row_of(p.out, "wh", line, sizeof line, f, 16), 9);
    assert_string_equal(f[4], "*");
    assert_string_equal(f[5], "-");
    assert_string_equal(f[6], "active");
    assert_string_equal(f[7], "0");
    assert_int_equal(row_of(p.out, "default", line, sizeof line, f, 16), 0);
    tl_proc_free(&p);

    unlink(oauth_secret);
    free(oauth_secret);
    testca_remove(&ca);
}

/* ---- set ---- */

/* `endpoint set` changes the given settings and nothing else; the routing options; secrets
 * rotated and retired; NAME 'default' is the customer's own row. */
static void endpoint_set_changes_only_given_settings(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme", true);
    tl_proc p = RUN_OK(db, "endpoint", "add", "acme", "crm", "--url", URL, "--rate", "120",
                       "--events", "order.*", "--filter", "{\"region\":\"eu\"}", "--header",
                       "X-A: 1", "--auth", "basic:alice:pw");
    tl_proc_free(&p);
    static const char row[] = "SELECT (to_jsonb(c) - '{updated_at,rate_per_minute,"
                              "max_age}'::text[])::text FROM pgpace.customer c WHERE name = "
                              "'acme/crm'";
    char *before = tl_query_str(db->conn, row);
    char *own = tl_query_str(db->conn, "SELECT c::text FROM pgpace.customer c WHERE name = 'acme'");
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--rate", "30", "--max-age", "15m");
    tl_assert_contains(p.out, "updated endpoint acme/crm");
    tl_proc_free(&p);
    char *after = tl_query_str(db->conn, row);
    assert_string_equal(before, after);
    free(before);
    free(after);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme/crm' AND rate_per_minute = 30 AND max_age = "
                                            "'15 minutes'"),
                     1);
    char *own_after =
        tl_query_str(db->conn, "SELECT c::text FROM pgpace.customer c WHERE name = 'acme'");
    assert_string_equal(own, own_after);
    free(own_after);

    /* Routing: every kind, a new filter, then none. */
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--events", "");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme/crm' AND event_types IS NULL AND "
                                            "payload_filter = '{\"region\":\"eu\"}'"),
                     1);
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--events", "invoice.paid,order.created",
               "--filter", "{\"tier\": [\"gold\"]}");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme/crm' AND event_types = "
                                            "'{invoice.paid,order.created}' AND payload_filter = "
                                            "'{\"tier\": [\"gold\"]}'"),
                     1);
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--no-filter", "--clear-headers", "--auth",
               "none");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme/crm' AND payload_filter IS NULL AND "
                                            "extra_headers = '{}' AND auth_scheme IS NULL AND "
                                            "event_types = '{invoice.paid,order.created}'"),
                     1);

    /* Secrets: rotate (of the newest one's kind), retire. */
    char *old = tl_query_str(
        db->conn, "SELECT signing_secrets[1] FROM pgpace.customer WHERE name = 'acme/crm'");
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--rotate-secret");
    tl_assert_contains(p.out, "new signing secret added");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.customer WHERE name = "
                                  "'acme/crm' AND cardinality(signing_secrets) = 2 AND "
                                  "signing_secrets[2] = '%s' AND signing_secrets[1] "
                                  "LIKE 'whsec\\_%%'",
                                  old),
                     1);
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--rotate-secret", "--key-type", "ed25519");
    tl_assert_contains(p.out, "public key whpk_");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "set", "acme", "crm", "--retire-old-secrets");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme/crm' AND cardinality(signing_secrets) = 1 AND "
                                            "signing_secrets[1] LIKE 'whsk\\_%%'"),
                     1);
    free(old);
    p = RUN(db, "endpoint", "set", "acme", "crm", "--key-type", "hmac");
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--key-type: endpoint 'acme/crm' exists");
    tl_proc_free(&p);

    /* 'default': the customer's own receiver, its rate the customer's. */
    p = RUN_OK(db, "endpoint", "set", "acme", "default", "--rate", "300", "--header", "X-Own: 1");
    tl_assert_contains(p.out, "updated endpoint acme/default");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme' AND rate_per_minute = 300 AND extra_headers = "
                                            "'{\"X-Own: 1\"}'"),
                     1);
    assert_int_equal(tl_query_int(db->conn, "SELECT rate_per_minute FROM pgpace.customer WHERE "
                                            "name = 'acme/crm'"),
                     30);
    free(own);
}

/* ---- list, state and delete ---- */

static void endpoint_pause_disable_enable_and_their_events(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme", true);
    tl_proc p = RUN_OK(db, "endpoint", "add", "acme", "crm", "--url", URL, "--rate", "60");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "add", "acme", "wh", "--url", URL2, "--rate", "60", "--events",
               "invoice.*");
    tl_proc_free(&p);
    /* Three events: every one to default and crm, the invoice to wh too. */
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": 1}', kind => 'order.created')");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": 2}', kind => 'invoice.paid')");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": 3}', kind => 'order.paid')");

    p = RUN_OK(db, "endpoint", "pause", "acme", "crm");
    tl_assert_contains(p.out, "paused endpoint acme/crm");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "pause", "acme", "crm");
    tl_assert_contains(p.out, "endpoint acme/crm was already paused; nothing changed");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "disable", "acme", "wh");
    tl_assert_contains(p.out, "disabled endpoint acme/wh");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "disable", "acme", "wh");
    tl_assert_contains(p.out, "was already disabled; nothing changed");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme/wh' AND disabled_at IS NOT NULL AND "
                                            "disabled_reason = 'operator' AND NOT paused"),
                     1);
    p = RUN_OK(db, "endpoint", "list", "acme");
    char line[512], *f[16];
    assert_int_equal(row_of(p.out, "default", line, sizeof line, f, 16), 9);
    assert_string_equal(f[6], "active");
    assert_string_equal(f[7], "3");
    assert_int_equal(row_of(p.out, "crm", line, sizeof line, f, 16), 9);
    assert_string_equal(f[6], "paused");
    assert_string_equal(f[7], "3");
    assert_int_equal(row_of(p.out, "wh", line, sizeof line, f, 16), 9);
    assert_string_equal(f[4], "invoice.*");
    assert_string_equal(f[6], "disabled");
    assert_string_equal(f[7], "1");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "pause", "acme", "wh");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "list", "acme");
    assert_int_equal(row_of(p.out, "wh", line, sizeof line, f, 16), 9);
    assert_string_equal(f[6], "paused,disabled");
    tl_proc_free(&p);

    /* The events, each with its reason: as the health path and the trigger record them. */
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.event WHERE customer = "
                                            "'acme/crm' AND kind = 'paused' AND detail->>'reason' "
                                            "= 'operator'"),
                     1);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.event WHERE customer = "
                                            "'acme/wh' AND kind = 'disabled' AND "
                                            "detail->>'reason' = 'operator'"),
                     1);

    p = RUN_OK(db, "endpoint", "enable", "acme", "wh");
    tl_assert_contains(p.out, "enabled endpoint acme/wh");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "enable", "acme", "wh");
    tl_assert_contains(p.out, "endpoint acme/wh was not disabled; nothing changed");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "resume", "acme", "crm");
    tl_assert_contains(p.out, "resumed endpoint acme/crm");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "resume", "acme", "crm");
    tl_assert_contains(p.out, "was not paused; nothing changed");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.event WHERE customer = "
                                            "'acme/wh' AND kind = 'enabled'"),
                     1);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.event WHERE customer = "
                                            "'acme/crm' AND kind = 'resumed'"),
                     1);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                            "name = 'acme/wh' AND disabled_at IS NULL AND "
                                            "disabled_reason IS NULL AND paused"),
                     1);

    /* enable also clears a health disable, with the breaker and the streak afresh. */
    tl_exec(db->conn, "UPDATE pgpace.customer SET disabled_at = now(), disabled_reason = "
                      "'every delivery failed since ...' WHERE name = 'acme/crm'");
    tl_exec(db->conn, "SELECT pgpace.breaker_record(id, 'open', 5, 2, now() + interval '1 "
                      "minute', 'http:503') FROM pgpace.customer WHERE name = 'acme/crm'");
    tl_exec(db->conn, "SELECT pgpace.health_note(id, true, now(), 5, 'http:503') FROM "
                      "pgpace.customer WHERE name = 'acme/crm'");
    p = RUN_OK(db, "endpoint", "enable", "acme", "crm");
    tl_assert_contains(p.out, "enabled endpoint acme/crm");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.customer c JOIN pgpace.breaker b "
                                  "ON b.customer_id = c.id WHERE c.name = 'acme/crm' AND "
                                  "c.disabled_at IS NULL AND b.state = 'closed' AND NOT EXISTS "
                                  "(SELECT 1 FROM pgpace.customer_health h WHERE h.customer_id "
                                  "= c.id)"),
                     1);

    /* 'default' is the customer's own row. */
    p = RUN_OK(db, "endpoint", "pause", "acme", "default");
    tl_proc_free(&p);
    assert_int_equal(
        tl_query_int(db->conn,
                     "SELECT count(*) FROM pgpace.customer WHERE name = 'acme' AND paused"),
        1);
}

static void endpoint_delete_refuses_queued_deliveries_unless_dropped(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme", false);
    tl_proc p = RUN_OK(db, "endpoint", "add", "acme", "crm", "--url", URL, "--rate", "60");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "add", "acme", "empty", "--url", URL2, "--rate", "60", "--events",
               "never.*");
    tl_proc_free(&p);
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": 1}', kind => 'order.created')");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": 2}', kind => 'order.created')");
    char *before = snapshot(db);
    p = RUN(db, "endpoint", "delete", "acme", "crm");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "endpoint acme/crm has 2 delivery(ies) queued; nothing was deleted");
    tl_assert_contains(p.err, "--drop-queued");
    tl_proc_free(&p);
    char *after = snapshot(db);
    assert_string_equal(before, after);
    free(before);
    free(after);

    p = RUN_OK(db, "endpoint", "delete", "acme", "empty");
    assert_string_equal(p.out, "deleted endpoint acme/empty\n");
    tl_proc_free(&p);
    p = RUN_OK(db, "endpoint", "delete", "acme", "crm", "--drop-queued");
    tl_assert_contains(p.out, "deleted endpoint acme/crm (2 queued delivery(ies) made dead "
                              "letters: endpoint_deleted)");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE parent_id "
                                            "IS NOT NULL"),
                     0);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.dead_letter d JOIN "
                                            "pgpace.customer c ON c.id = d.customer_id WHERE "
                                            "c.name = 'acme' AND d.last_error = "
                                            "'endpoint_deleted'"),
                     2);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.queue"), 0);

    /* 'default': the customer's own receiver goes, the customer stays. */
    make_customer(db, "beta", true);
    p = RUN_OK(db, "endpoint", "delete", "beta", "default");
    tl_assert_contains(p.out, "removed the own receiver (default) of customer beta");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'beta' AND webhook_url IS NULL"),
                     1);
}

/* ---- refused input ---- */

/* Each refused: the exit status, a message naming the field, and nothing changed. */
static void bad_input_is_refused_naming_the_field(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme", false);
    tl_proc p = RUN_OK(db, "endpoint", "add", "acme", "crm", "--url", URL, "--rate", "60");
    tl_proc_free(&p);
    char *config = tl_temp_file("[delivery]\nallow_cidrs = 127.0.0.0/8\n");
    char *empty_config = tl_temp_file("[delivery]\n");
    /* Run with a configuration whose allow-list is empty: the default SSRF rules. */
    const struct {
        const char *const *argv;
        int status;
        const char *says;
    } cases[] = {
        /* Unknown customer, unknown endpoint: every command. */
        {TL_ARGV("endpoint", "add", "ghost", "x", "--url", URL, "--rate", "1"), 1,
         "unknown customer 'ghost'"},
        {TL_ARGV("endpoint", "set", "ghost", "crm", "--rate", "1"), 1, "unknown customer 'ghost'"},
        {TL_ARGV("endpoint", "get", "ghost", "crm"), 1, "unknown customer 'ghost'"},
        {TL_ARGV("endpoint", "list", "ghost"), 1, "unknown customer 'ghost'"},
        {TL_ARGV("endpoint", "pause", "ghost", "crm"), 1, "unknown customer 'ghost'"},
        {TL_ARGV("endpoint", "delete", "ghost", "crm"), 1, "unknown customer 'ghost'"},
        {TL_ARGV("endpoint", "set", "acme", "nope", "--rate", "1"), 1,
         "customer 'acme' has no endpoint 'nope'"},
        {TL_ARGV("endpoint", "get", "acme", "nope"), 1, "customer 'acme' has no endpoint 'nope'"},
        {TL_ARGV("endpoint", "pause", "acme", "nope"), 1, "customer 'acme' has no endpoint 'nope'"},
        {TL_ARGV("endpoint", "resume", "acme", "nope"), 1,
         "customer 'acme' has no endpoint 'nope'"},
        {TL_ARGV("endpoint", "disable", "acme", "nope"), 1,
         "customer 'acme' has no endpoint 'nope'"},
        {TL_ARGV("endpoint", "enable", "acme", "nope"), 1,
         "customer 'acme' has no endpoint 'nope'"},
        {TL_ARGV("endpoint", "delete", "acme", "nope"), 1,
         "customer 'acme' has no endpoint 'nope'"},
        /* acme has no receiver of its own: no 'default'. */
        {TL_ARGV("endpoint", "set", "acme", "default", "--rate", "5"), 1,
         "customer 'acme' has no endpoint 'default'"},
        /* Duplicate name. */
        {TL_ARGV("endpoint", "add", "acme", "crm", "--url", URL2, "--rate", "1"), 1,
         "endpoint: customer 'acme' already has an endpoint 'crm'"},
        /* Patterns. */
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", URL, "--rate", "1", "--events", "or*der"),
         2, "--events: pattern 1 ('or*der'): a wildcard * may only end a pattern"},
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", URL, "--rate", "1", "--events",
                 "invoice.paid,*.created"),
         2, "--events: pattern 2 ('*.created'): a wildcard * may only end a pattern"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--events", "order.**"), 2,
         "--events: pattern 1 ('order.**'): a wildcard * may only end a pattern"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--events", "a,,b"), 2,
         "--events: pattern 2 (''): is empty"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--events", "a,"), 2,
         "--events: pattern 2 is empty"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--events", "order created"), 2,
         "contains whitespace"},
        /* Filters. */
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", URL, "--rate", "1", "--filter",
                 "{region"),
         2, "--filter: not JSON"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--filter", "[\"eu\"]"), 2,
         "--filter: must be a JSON object such as {\"region\":\"eu\"}"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--filter", "\"eu\""), 2, "got a string"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--filter", "5"), 2, "got a number"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--filter", "{}", "--no-filter"), 2,
         "use --filter or --no-filter, not both"},
        /* SSRF: literal addresses and localhost, on add and on set. */
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", "http://10.1.2.3/hook", "--rate", "1"), 2,
         "--url: the SSRF rules refuse its address (private address (RFC 1918))"},
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", "http://169.254.169.254/latest", "--rate",
                 "1"),
         2, "--url: the SSRF rules refuse its address (cloud metadata address"},
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", "http://127.0.0.1:8080/", "--rate", "1"),
         2, "--url: the SSRF rules refuse its address (loopback address)"},
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", "http://[::ffff:127.0.0.1]:8080/",
                 "--rate", "1"),
         2, "(loopback address)"},
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", "http://[::1]:8080/", "--rate", "1"), 2,
         "(loopback address)"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--url", "http://localhost/x"), 2,
         "--url: the SSRF rules refuse its address (loopback address)"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--url", "http://0x7f.0.0.1/x"), 2,
         "--url: host '0x7f.0.0.1' is a number in hex or short form"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--url", "http://sub.localhost:8080/x"), 2,
         "(loopback address)"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--url", "http://[fd00::1]/x"), 2,
         "unique local address"},
        /* The URL's shape, as for customer set. */
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", "ftp://x", "--rate", "1"), 2,
         "--url: scheme must be http or https"},
        /* Names and the options add needs. */
        {TL_ARGV("endpoint", "add", "acme", "default", "--url", URL, "--rate", "1"), 2,
         "endpoint name: 'default' is the customer's own receiver"},
        {TL_ARGV("endpoint", "add", "acme", "bad name", "--url", URL, "--rate", "1"), 2,
         "endpoint name: character ' ' at position 4 is not allowed"},
        {TL_ARGV("endpoint", "add", "acme/x", "y", "--url", URL, "--rate", "1"), 2,
         "customer name: character '/'"},
        {TL_ARGV("endpoint", "add", "acme", "x", "--rate", "1"), 2, "--url is required"},
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", URL), 2, "--rate is required"},
        {TL_ARGV("endpoint", "add", "acme"), 2, "missing endpoint NAME"},
        {TL_ARGV("endpoint", "list"), 2, "missing CUSTOMER"},
        {TL_ARGV("endpoint", "get", "acme", "crm", "extra"), 2, "unexpected argument 'extra'"},
        /* Receiver options refused as customer set refuses them. */
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", URL, "--rate", "0"), 2,
         "--rate: must be greater than 0"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--burst", "0"), 2,
         "--burst: expected an integer from 1 to 1000000"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--throttle-floor", "2"), 2,
         "--throttle-floor: expected a number greater than 0 and at most 1, got '2' (or "
         "'default')"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--header", "Host: x"), 2,
         "--header #1: Host is reserved"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--secret", "nope"), 2,
         "--secret: expected whsec_"},
        {TL_ARGV("endpoint", "set", "acme", "crm", "--client-cert", "/nonexistent"), 2,
         "--client-cert needs --client-key"},
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", URL, "--rate", "1", "--rotate-secret"), 2,
         "unknown or incomplete option '--rotate-secret'"},
        /* A bad second setting rolls the add back whole (the proxy is written after the row). */
        {TL_ARGV("endpoint", "add", "acme", "x", "--url", URL, "--rate", "1", "--client-cert",
                 "/nonexistent/c.pem", "--client-key", "/nonexistent/k.pem"),
         2, "--client-cert /nonexistent/c.pem: cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *before = snapshot(db);
        tl_proc r = run_cfg(db, empty_config, cases[i].argv);
        if (r.status != cases[i].status || !strstr(r.err, cases[i].says))
            fail_msg("case %zu (%s %s %s): exit %d (want %d), stderr:\n%s", i, cases[i].argv[1],
                     cases[i].argv[2], cases[i].argv[3] ? cases[i].argv[3] : "", r.status,
                     cases[i].status, r.err);
        tl_proc_free(&r);
        char *after = snapshot(db);
        if (strcmp(before, after) != 0)
            fail_msg("case %zu (%s %s) changed something", i, cases[i].argv[1], cases[i].argv[2]);
        free(before);
        free(after);
    }

    /* The allow-list opens what it covers, and only that; a host name is left to the
     * dispatcher. */
    char *before = snapshot(db);
    p = run_cfg(db, config,
                TL_ARGV("endpoint", "set", "acme", "crm", "--url", "http://10.0.0.1/x"));
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "webhooks may reach it only when [delivery] allow_cidrs covers it");
    tl_proc_free(&p);
    char *after = snapshot(db);
    assert_string_equal(before, after);
    free(before);
    free(after);
    p = run_cfg(db, config,
                TL_ARGV("endpoint", "add", "acme", "local", "--url", "http://127.0.0.1:9/x",
                        "--rate", "1"));
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    p = run_cfg(db, empty_config,
                TL_ARGV("endpoint", "add", "acme", "named", "--url", "http://10.example.net/x",
                        "--rate", "1"));
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);

    /* More than max_endpoints_per_customer (now 3: crm, local, named). */
    p = RUN_OK(db, "setting", "set", "max_endpoints_per_customer", "3");
    tl_proc_free(&p);
    before = snapshot(db);
    p = RUN(db, "endpoint", "add", "acme", "fourth", "--url", URL, "--rate", "1");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "endpoint: customer 'acme' has 3 endpoints, the most allowed");
    tl_assert_contains(p.err, "max_endpoints_per_customer");
    tl_proc_free(&p);
    after = snapshot(db);
    assert_string_equal(before, after);
    free(before);
    free(after);

    unlink(config);
    free(config);
    unlink(empty_config);
    free(empty_config);
}

/* ---- the SQL behind it ---- */

/* The functions of 17_endpoint_admin.sql from SQL: their errors, and that only the owner may
 * call them (pgpace_producer only enqueues). */
static void sql_functions_and_who_may_call_them(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme", true);
    tl_exec(db->conn, "SELECT pgpace.endpoint_add('acme', 'crm', '" URL "', 60)");
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.endpoint_list('acme')"),
                     2);
    assert_int_equal(tl_query_int(db->conn, "SELECT pgpace.endpoint_pause('acme', 'crm')::int"), 1);
    assert_int_equal(tl_query_int(db->conn, "SELECT pgpace.endpoint_pause('acme', 'crm')::int"), 0);
    assert_int_equal(tl_query_int(db->conn, "SELECT pgpace.endpoint_disable('acme', 'crm')::int"),
                     1);
    assert_int_equal(tl_query_int(db->conn, "SELECT pgpace.endpoint_enable('acme', 'crm')::int"),
                     1);
    tl_expect_sql_error(db->conn, "SELECT * FROM pgpace.endpoint_list('ghost')", "P0002",
                        "unknown customer 'ghost'", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.endpoint_pause('acme', 'nope')", "P0002",
                        "customer 'acme' has no endpoint 'nope'", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.endpoint_disable('acme', 'nope')", "P0002",
                        "customer 'acme' has no endpoint 'nope'", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.endpoint_enable('ghost', 'crm')", "P0002",
                        "unknown customer 'ghost'", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.endpoint_pause('acme', 'crm', NULL)", "22004",
                        "paused", NULL);
    static const char *const fns[] = {
        "pgpace.endpoint_list(text)",
        "pgpace.endpoint_pause(text, text, boolean)",
        "pgpace.endpoint_disable(text, text)",
        "pgpace.endpoint_enable(text, text)",
        "pgpace.endpoint_add(text, text, text, double precision, text, integer, text[], text[], "
        "jsonb, integer, text[], boolean)",
        "pgpace.endpoint_set_routing(text, text, text[], jsonb, boolean)",
        "pgpace.endpoint_delete(text, text, boolean)"};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (tl_query_int(db->conn,
                         "SELECT has_function_privilege('pgpace_producer', '%s', 'EXECUTE')::int",
                         fns[i]) != 0)
            fail_msg("pgpace_producer may execute %s", fns[i]);
    assert_int_equal(tl_query_int(db->conn, "SELECT has_function_privilege('pgpace_producer', "
                                            "'pgpace.enqueue(text, jsonb, text, text, timestamptz, "
                                            "text, integer, timestamptz, text, text, text, text)', "
                                            "'EXECUTE')::int"),
                     1);
}

/* The settings table against the schema: every column it names is a column of pgpace.customer,
 * every SQL call it names a function. */
static void settings_table_names_real_columns_and_calls(void **state)
{
    tl_db *db = *state;
    for (size_t i = 0; i < receiver_settings_count; i++) {
        const receiver_setting *s = &receiver_settings[i];
        for (const char *list = s->column; *list;) {
            size_t len = strcspn(list, ", ");
            if (tl_query_int(db->conn,
                             "SELECT count(*) FROM information_schema.columns WHERE "
                             "table_schema = 'pgpace' AND table_name = 'customer' AND "
                             "column_name = '%.*s'",
                             (int)len, list) != 1)
                fail_msg("--%s: pgpace.customer has no column '%.*s'", s->name, (int)len, list);
            list += len;
            list += strspn(list, ", ");
        }
        for (const char *list = s->call; *list;) {
            size_t len = strcspn(list, ", ");
            if (tl_query_int(db->conn,
                             "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = "
                             "p.pronamespace WHERE n.nspname = 'pgpace' AND p.proname = '%.*s'",
                             (int)len, list) < 1)
                fail_msg("--%s: no function pgpace.%.*s", s->name, (int)len, list);
            list += len;
            list += strspn(list, ", ");
        }
    }
}

/* ---- with the dispatcher ---- */

/* `pgpace endpoint add|disable|enable` with the fixture's configuration (it allows the loopback
 * receiver). */
static void endpoint_cmd(fx *f, const char *const *args)
{
    const char *argv[40] = {"--config", f->config_path};
    size_t n = 2;
    for (; *args && n < 39; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    if (p.status != 0)
        fail_msg("endpoint %s %s: exit %d: %s", args[-1], args[0] ? args[0] : "", p.status, p.err);
    tl_proc_free(&p);
}

/* Whether a line of the service's log holds both a and b. */
typedef struct log_pair {
    fx *f;
    const char *a, *b;
} log_pair;

static int log_has_pair(void *arg)
{
    const log_pair *w = arg;
    char *log = fx_log(w->f);
    int found = 0;
    for (const char *p = log; p && *p && !found;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *a = memmem(p, len, w->a, strlen(w->a));
        found = a && memmem(p, len, w->b, strlen(w->b)) != NULL;
        p = eol ? eol + 1 : NULL;
    }
    free(log);
    return found;
}

/* Endpoints added by the CLI get the events they subscribe to, with their headers; one
 * disabled by an operator is held (its delivery waits while the other endpoint's later one goes
 * out) and sends once enabled. */
static void dispatcher_serves_endpoints_the_cli_made(void **state)
{
    fx *f = *state;
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--rate", "6000"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    fx_endpoint(f, "acme", "crm",
                TL_ARGV("--rate", "6000", "--events", "order.*", "--header", "X-Crm-Key: k1"));
    fx_endpoint(
        f, "acme", "wh",
        TL_ARGV("--rate", "6000", "--events", "invoice.paid", "--filter", "{\"region\":\"eu\"}"));
    fx_run(f, NULL);
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": 1}', kind => 'order.created')");
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('acme', '{\"region\": \"us\"}', kind => "
                         "'invoice.paid')");
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('acme', '{\"region\": \"eu\"}', kind => "
                         "'invoice.paid')");
    assert_int_equal(receiver_wait(f->recv, "/e/acme/crm", 1, 10000), 1);
    assert_int_equal(receiver_wait(f->recv, "/e/acme/wh", 1, 10000), 1);
    /* Only the eu invoice passed wh's filter; the order went to crm alone. */
    char key[64];
    size_t crm_first = 0, n_requests = receiver_count(f->recv, "");
    assert_int_equal(n_requests, 2);
    for (size_t i = 0; i < n_requests; i++) {
        receiver_request r;
        assert_int_equal(receiver_get(f->recv, i, &r), 0);
        bool crm = strcmp(r.path, "/e/acme/crm") == 0;
        if (crm)
            crm_first = i;
        tl_assert_contains(r.body, crm ? "\"n\": 1" : "\"region\": \"eu\"");
        free(r.body);
    }
    assert_int_equal(receiver_header(f->recv, crm_first, "X-Crm-Key", key, sizeof key), 1);
    assert_string_equal(key, "k1");

    /* Disabled by the operator: held like a health-disabled endpoint. */
    endpoint_cmd(f, TL_ARGV("endpoint", "disable", "acme", "crm"));
    log_pair held = {f, "event=customer_updated customer=acme/crm", "paused=1"};
    assert_true(tl_wait_until(log_has_pair, &held, 10000));
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('acme', '{\"n\": 2}', kind => 'order.created')");
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('acme', '{\"region\": \"eu\"}', kind => "
                         "'invoice.paid')");
    assert_int_equal(receiver_wait(f->recv, "/e/acme/wh", 2, 10000), 2);
    assert_int_equal(receiver_count(f->recv, "/e/acme/crm"), 1);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.queue q JOIN "
                                               "pgpace.customer c ON c.id = q.customer_id WHERE "
                                               "c.name = 'acme/crm'"),
                     1);
    endpoint_cmd(f, TL_ARGV("endpoint", "enable", "acme", "crm"));
    assert_int_equal(receiver_wait(f->recv, "/e/acme/crm", 2, 10000), 2);
    assert_int_equal(receiver_count(f->recv, "/e/acme/wh"), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(help_for_every_endpoint_command),
        cmocka_unit_test_setup_teardown(customer_without_receiver_list_and_get, setup, teardown),
        cmocka_unit_test_setup_teardown(endpoint_add_with_every_receiver_option, setup, teardown),
        cmocka_unit_test_setup_teardown(endpoint_set_changes_only_given_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(endpoint_pause_disable_enable_and_their_events, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(endpoint_delete_refuses_queued_deliveries_unless_dropped,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(bad_input_is_refused_naming_the_field, setup, teardown),
        cmocka_unit_test_setup_teardown(sql_functions_and_who_may_call_them, setup, teardown),
        cmocka_unit_test_setup_teardown(settings_table_names_real_columns_and_calls, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(dispatcher_serves_endpoints_the_cli_made, fx_setup,
                                        fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
