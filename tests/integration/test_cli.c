/* test_cli.c - the `pgpace` binary end to end: help and usage errors, customer / carrier /
 * setting administration (throttle overrides included), stats (with the effective rate),
 * single-item enqueue errors, configuration files (and `pgpace run` refusing a bad one) and
 * version. */
#include "testlib.h"

#include "sql_embed.h"

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

#define URL "https://example.com/hook"

static void make_customer(tl_db *db, const char *name)
{
    tl_exec(db->conn,
            "SELECT pgpace.customer_set('%s', rate_per_minute => 60, webhook_url => '" URL "')",
            name);
}

static long long count_rows(PGconn *conn, const char *table)
{
    return tl_query_int(conn, "SELECT count(*) FROM %s", table);
}

/* The whole row of customer `name` as text ("" when absent): any change shows. */
static char *customer_row(tl_db *db, const char *name)
{
    return tl_query_str(db->conn, "SELECT c::text FROM pgpace.customer c WHERE c.name = '%s'",
                        name);
}

/* Runs pgpace against the test database: --db CONNINFO followed by up to 8 arguments. */
static tl_proc run(const tl_db *db, const char *const *args)
{
    const char *argv[16] = {"--db", db->conninfo};
    size_t n = 2;
    for (; args[n - 2] && n < 15; n++)
        argv[n] = args[n - 2];
    argv[n] = NULL;
    return tl_pgpace(argv, NULL, NULL);
}

#define RUN(db, ...) run(db, TL_ARGV(__VA_ARGS__))

/* Runs and requires exit status 0, printing stderr otherwise. */
static tl_proc run_ok(const tl_db *db, const char *const *args)
{
    tl_proc p = run(db, args);
    if (p.status != 0)
        fail_msg("pgpace %s %s exited %d:\n%s%s", args[0], args[1] ? args[1] : "", p.status, p.out,
                 p.err);
    return p;
}

#define RUN_OK(db, ...) run_ok(db, TL_ARGV(__VA_ARGS__))

/* Splits the line of `out` whose first whitespace-separated field is `first` into `fields`
 * (pointers into `line`, a caller buffer). Returns the field count, 0 when no such line. */
static int table_row(const char *out, const char *first, char *line, size_t cap, char **fields,
                     int max)
{
    const char *p = out;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len < cap) {
            memcpy(line, p, len);
            line[len] = '\0';
            int n = 0;
            char *save = NULL;
            for (char *tok = strtok_r(line, " \t", &save); tok && n < max;
                 tok = strtok_r(NULL, " \t", &save))
                fields[n++] = tok;
            if (n > 0 && strcmp(fields[0], first) == 0)
                return n;
        }
        p = eol ? eol + 1 : NULL;
    }
    return 0;
}

/* ---- help and usage ---- */

static void help_for_every_command(void **state)
{
    (void)state;
    static const char *const cmds[][4] = {
        {"--help"},
        {"-h"},
        {"migrate", "--help"},
        {"customer", "--help"},
        {"customer", "set", "--help"},
        {"customer", "get", "--help"},
        {"customer", "list", "--help"},
        {"customer", "pause", "--help"},
        {"customer", "resume", "--help"},
        {"customer", "delete", "--help"},
        {"carrier", "--help"},
        {"carrier", "set", "--help"},
        {"carrier", "list", "--help"},
        {"host", "--help"},
        {"host", "set", "--help"},
        {"host", "get", "--help"},
        {"host", "list", "--help"},
        {"host", "delete", "--help"},
        {"enqueue", "--help"},
        {"stats", "--help"},
        {"setting", "--help"},
        {"setting", "get", "--help"},
        {"setting", "set", "--help"},
        {"setting", "list", "--help"},
        {"version", "--help"},
        {"run", "--help"},
        {"status", "--help"},
        {"dlq", "--help"},
        {"dlq", "list", "--help"},
        {"dlq", "replay", "--help"},
        {"dlq", "purge", "--help"},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        /* No database is reachable: help must not need one. */
        tl_proc p = tl_pgpace(cmds[i], NULL, TL_ARGV("PGHOST=127.0.0.1", "PGPORT=1"));
        if (p.status != 0)
            fail_msg("pgpace %s %s %s exited %d: %s", cmds[i][0], cmds[i][1] ? cmds[i][1] : "",
                     cmds[i][2] ? cmds[i][2] : "", p.status, p.err);
        tl_assert_contains(p.out, "usage:");
        tl_proc_free(&p);
    }
}

static void unknown_command_and_options(void **state)
{
    (void)state;
    tl_proc p = tl_pgpace(TL_ARGV("frobnicate"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "unknown command 'frobnicate'");
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("--bogus", "version"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "unknown or incomplete option '--bogus'");
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("customer", "list", "--bogus"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "pgpace customer list: unknown or incomplete option '--bogus'");
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("customer", "frob"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "unknown subcommand 'frob'");
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("stats", "--customer"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_proc_free(&p);

    const char *none[] = {NULL};
    p = tl_pgpace(none, NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "usage:");
    tl_proc_free(&p);
}

static void version_prints_both_versions(void **state)
{
    (void)state;
    tl_proc p = tl_pgpace(TL_ARGV("version"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "pgpace ");
    tl_assert_contains(p.out, "schema version");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("version", "extra"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_proc_free(&p);
}

/* ---- customers ---- */

static void customer_set_creates_with_a_generated_secret(void **state)
{
    tl_db *db = *state;
    /* Creating needs a rate (--rate alone makes a customer whose endpoints are its receivers:
     * test_endpoint_cli.c). */
    tl_proc p = RUN(db, "customer", "set", "acme", "--burst", "2");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "creating it needs --rate (or --limit) and --url");
    tl_proc_free(&p);
    p = RUN(db, "customer", "set", "acme", "--url", URL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "creating it needs --rate (or --limit) and --url");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.customer"), 0);

    p = RUN_OK(db, "customer", "set", "acme", "--rate", "60", "--url", URL);
    tl_assert_contains(p.out, "created customer acme");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = "
                                            "'acme' AND rate_per_minute = 60 AND webhook_url = "
                                            "'" URL "' AND mode = 'spaced' AND burst = 1 AND "
                                            "max_attempts = 12 AND NOT paused AND "
                                            "cardinality(signing_secrets) = 1 AND "
                                            "signing_secrets[1] ~ '^whsec_'"),
                     1);

    char *secret =
        tl_query_str(db->conn, "SELECT signing_secrets[1] FROM pgpace.customer WHERE name='acme'");
    assert_true(strlen(secret) > 20);
    p = RUN_OK(db, "customer", "get", "acme");
    tl_assert_contains(p.out, "webhook_url");
    tl_assert_contains(p.out, URL);
    if (strstr(p.out, secret))
        fail_msg("customer get printed the signing secret without --show-secrets:\n%s", p.out);
    if (strstr(p.out, "whsec_"))
        fail_msg("customer get printed a secret without --show-secrets:\n%s", p.out);
    tl_proc_free(&p);
    p = RUN_OK(db, "customer", "get", "acme", "--show-secrets");
    tl_assert_contains(p.out, secret);
    tl_proc_free(&p);
    free(secret);

    p = RUN(db, "customer", "get", "ghost");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "unknown customer 'ghost'");
    tl_proc_free(&p);

    p = RUN_OK(db, "customer", "list");
    tl_assert_contains(p.out, "acme");
    tl_assert_contains(p.out, URL);
    tl_proc_free(&p);
}

static void customer_secret_rotation(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "customer", "set", "acme", "--rate", "60", "--url", URL);
    tl_proc_free(&p);
    char *old =
        tl_query_str(db->conn, "SELECT signing_secrets[1] FROM pgpace.customer WHERE name='acme'");

    p = RUN_OK(db, "customer", "set", "acme", "--rotate-secret");
    tl_assert_contains(p.out, "new signing secret added");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT cardinality(signing_secrets) FROM "
                                            "pgpace.customer WHERE name='acme'"),
                     2);
    char *second =
        tl_query_str(db->conn, "SELECT signing_secrets[2] FROM pgpace.customer WHERE name='acme'");
    char *newest =
        tl_query_str(db->conn, "SELECT signing_secrets[1] FROM pgpace.customer WHERE name='acme'");
    assert_string_equal(second, old);
    assert_string_not_equal(newest, old);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE "
                                            "signing_secrets[1] ~ '^whsec_'"),
                     1);
    p = RUN_OK(db, "customer", "get", "acme", "--show-secrets");
    tl_assert_contains(p.out, newest);
    tl_assert_contains(p.out, old);
    tl_proc_free(&p);

    p = RUN_OK(db, "customer", "set", "acme", "--retire-old-secrets");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT cardinality(signing_secrets) FROM "
                                            "pgpace.customer WHERE name='acme'"),
                     1);
    char *left =
        tl_query_str(db->conn, "SELECT signing_secrets[1] FROM pgpace.customer WHERE name='acme'");
    assert_string_equal(left, newest);
    free(old);
    free(second);
    free(newest);
    free(left);
}

static void customer_update_changes_only_given_fields(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "customer", "set", "acme", "--rate", "0.5", "--url", URL, "--mode",
                       "batch", "--max-attempts", "3");
    tl_proc_free(&p);
    char *secret =
        tl_query_str(db->conn, "SELECT signing_secrets[1] FROM pgpace.customer WHERE name='acme'");

    p = RUN_OK(db, "customer", "set", "acme", "--burst", "5");
    tl_assert_contains(p.out, "updated customer acme");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.customer WHERE name = 'acme' AND "
                                  "burst = 5 AND rate_per_minute = 0.5 AND webhook_url = '" URL
                                  "' AND mode = 'batch' AND max_attempts = 3 AND "
                                  "signing_secrets = ARRAY['%s']",
                                  secret),
                     1);
    free(secret);
    assert_int_equal(count_rows(db->conn, "pgpace.customer"), 1);
}

static void customer_set_rejects_bad_input(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "customer", "set", "acme", "--rate", "60", "--url", URL);
    tl_proc_free(&p);
    char *before = customer_row(db, "acme");

    static const struct {
        const char *opt, *value, *message;
    } cases[] = {
        {"--rate", "0", "--rate: must be greater than 0"},
        {"--rate", "-1", "--rate: must be greater than 0"},
        {"--rate", "nan", "--rate: expected a decimal number"},
        {"--rate", "inf", "--rate: expected a decimal number"},
        {"--rate", "abc", "--rate: expected a decimal number"},
        {"--rate", "", "--rate: expected a number per minute greater than 0"},
        {"--burst", "0", "--burst: expected an integer from 1 to 1000000"},
        {"--mode", "fast", "--mode: must be one of spaced, batch, unlimited"},
        {"--url", "ftp://x", "--url: scheme must be http or https"},
        {"--url", "http://", "--url: missing host"},
        {"--url", "not a url", "--url: contains whitespace"},
        {"--url", "notaurl", "--url: must start with http:// or https://"},
        {"--url", "http://user@host/", "--url: user info (user@host) is not allowed"},
        {"--url", "http://exa mple.com/", "--url: contains whitespace"},
        {"--max-attempts", "0", "--max-attempts: expected an integer from 1 to 1000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* As an update of acme: nothing changes. */
        p = RUN(db, "customer", "set", "acme", cases[i].opt, cases[i].value);
        if (p.status != 2)
            fail_msg("%s '%s': expected exit 2, got %d: %s", cases[i].opt, cases[i].value, p.status,
                     p.err);
        tl_assert_contains(p.err, cases[i].message);
        tl_proc_free(&p);
        char *after = customer_row(db, "acme");
        assert_string_equal(before, after);
        free(after);

        /* As a creation: nothing is created. */
        p = RUN(db, "customer", "set", "newco", "--rate", "60", "--url", URL, cases[i].opt,
                cases[i].value);
        assert_int_equal(p.status, 2);
        tl_assert_contains(p.err, cases[i].message);
        tl_proc_free(&p);
        assert_int_equal(count_rows(db->conn, "pgpace.customer"), 1);
    }

    p = RUN(db, "customer", "set", "bad name", "--rate", "60", "--url", URL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "customer name: character ' ' at position 4 is not allowed");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.customer"), 1);

    p = RUN(db, "customer", "set", "acme", "--secret", "not-a-secret");
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--secret: expected whsec_");
    tl_proc_free(&p);
    char *after = customer_row(db, "acme");
    assert_string_equal(before, after);
    free(after);
    free(before);
}

/* The three throttle overrides: set on creation and update, shown by `customer get`, reset with
 * 'default', untouched by other changes, and refused before the database when out of range. */
static void customer_throttle_overrides(void **state)
{
    tl_db *db = *state;
    tl_proc p =
        RUN_OK(db, "customer", "set", "acme", "--rate", "60", "--url", URL, "--throttle-decrease",
               "0.5", "--throttle-increase", "5e-2", "--throttle-floor", "1");
    tl_assert_contains(p.out, "created customer acme");
    tl_proc_free(&p);
    static const char values[] = "SELECT coalesce(throttle_decrease::text, 'null') || ' ' || "
                                 "coalesce(throttle_increase::text, 'null') || ' ' || "
                                 "coalesce(throttle_floor::text, 'null') FROM pgpace.customer "
                                 "WHERE name = 'acme'";
    char *got = tl_query_str(db->conn, values);
    assert_string_equal(got, "0.5 0.05 1");
    free(got);

    char line[512], *f[4];
    p = RUN_OK(db, "customer", "get", "acme");
    assert_int_equal(table_row(p.out, "throttle_decrease", line, sizeof line, f, 4), 2);
    assert_string_equal(f[1], "0.5");
    assert_int_equal(table_row(p.out, "throttle_increase", line, sizeof line, f, 4), 2);
    assert_string_equal(f[1], "0.05");
    assert_int_equal(table_row(p.out, "throttle_floor", line, sizeof line, f, 4), 2);
    assert_string_equal(f[1], "1");
    tl_proc_free(&p);

    /* One reset, one change; the third stays. Other settings leave them alone. */
    p = RUN_OK(db, "customer", "set", "acme", "--throttle-floor", "default", "--throttle-decrease",
               ".25");
    tl_assert_contains(p.out, "updated customer acme");
    tl_proc_free(&p);
    got = tl_query_str(db->conn, values);
    assert_string_equal(got, "0.25 0.05 null");
    free(got);
    p = RUN_OK(db, "customer", "set", "acme", "--burst", "3", "--connect-timeout-ms", "2000");
    tl_proc_free(&p);
    got = tl_query_str(db->conn, values);
    assert_string_equal(got, "0.25 0.05 null");
    free(got);
    p = RUN_OK(db, "customer", "get", "acme");
    assert_int_equal(table_row(p.out, "throttle_floor", line, sizeof line, f, 4), 2);
    assert_string_equal(f[1], "default");
    tl_proc_free(&p);

    /* The inclusive bound is accepted; everything back to the defaults. */
    p = RUN_OK(db, "customer", "set", "acme", "--throttle-increase", "1", "--throttle-floor",
               "0.999");
    tl_proc_free(&p);
    got = tl_query_str(db->conn, values);
    assert_string_equal(got, "0.25 1 0.999");
    free(got);
    p = RUN_OK(db, "customer", "set", "acme", "--throttle-decrease", "default",
               "--throttle-increase", "default", "--throttle-floor", "default");
    tl_proc_free(&p);
    got = tl_query_str(db->conn, values);
    assert_string_equal(got, "null null null");
    free(got);
    p = RUN_OK(db, "customer", "get", "acme");
    assert_int_equal(table_row(p.out, "throttle_decrease", line, sizeof line, f, 4), 2);
    assert_string_equal(f[1], "default");
    tl_proc_free(&p);

    /* Refused before the database: exit 2, the flag, its range; nothing changes or appears. */
    tl_exec(db->conn, "UPDATE pgpace.customer SET throttle_increase = 0.5 WHERE name = 'acme'");
    char *before = customer_row(db, "acme");
    static const char dec[] = "--throttle-decrease: expected a number greater than 0 and less "
                              "than 1, got '";
    static const char inc[] = "--throttle-increase: expected a number greater than 0 and at most "
                              "1, got '";
    static const char flo[] = "--throttle-floor: expected a number greater than 0 and at most 1, "
                              "got '";
    static const struct {
        const char *opt, *value, *message;
    } cases[] = {
        {"--throttle-decrease", "nan", dec},    {"--throttle-decrease", "inf", dec},
        {"--throttle-decrease", "0", dec},      {"--throttle-decrease", "1", dec},
        {"--throttle-decrease", "-0.5", dec},   {"--throttle-decrease", "abc", dec},
        {"--throttle-decrease", "1e999", dec},  {"--throttle-decrease", "", dec},
        {"--throttle-decrease", "0x0.8", dec},  {"--throttle-decrease", "DEFAULT", dec},
        {"--throttle-increase", "NaN", inc},    {"--throttle-increase", "-inf", inc},
        {"--throttle-increase", "0", inc},      {"--throttle-increase", "1.5", inc},
        {"--throttle-increase", "-1", inc},     {"--throttle-increase", "0.1x", inc},
        {"--throttle-increase", "1e-400", inc}, {"--throttle-floor", "nan", flo},
        {"--throttle-floor", "Infinity", flo},  {"--throttle-floor", "0", flo},
        {"--throttle-floor", "-0", flo},        {"--throttle-floor", "2", flo},
        {"--throttle-floor", "1e308", flo},     {"--throttle-floor", "five", flo},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char want[160];
        snprintf(want, sizeof want, "%s%s' (or 'default')", cases[i].message, cases[i].value);
        p = RUN(db, "customer", "set", "acme", cases[i].opt, cases[i].value);
        if (p.status != 2)
            fail_msg("%s '%s': expected exit 2, got %d: %s", cases[i].opt, cases[i].value, p.status,
                     p.err);
        tl_assert_contains(p.err, want);
        tl_proc_free(&p);
        char *after = customer_row(db, "acme");
        assert_string_equal(before, after);
        free(after);

        p = RUN(db, "customer", "set", "newco", "--rate", "60", "--url", URL, cases[i].opt,
                cases[i].value);
        assert_int_equal(p.status, 2);
        tl_assert_contains(p.err, want);
        tl_proc_free(&p);
        assert_int_equal(count_rows(db->conn, "pgpace.customer"), 1);
    }
    free(before);
}

/* `pgpace stats` shows the effective rate next to the configured one: the leader's (frontier),
 * else the configured rate, never above it. */
static void stats_shows_the_effective_rate(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme");
    make_customer(db, "beta");
    make_customer(db, "slow");
    tl_exec(db->conn, "UPDATE pgpace.customer SET rate_per_minute = 0.5 WHERE name = 'slow'");
    static const struct {
        const char *customer, *effective, *rate, *shown;
    } cases[] = {
        {"acme", "30", "60", "30"},
        /* What the pacing arithmetic leaves: 9 significant digits. */
        {"acme", "48.60000000000001", "60", "48.6"},
        {"acme", "53.99999999999999", "60", "54"},
        {"acme", "0.000123456789012", "60", "0.000123456789"},
        /* The rate was lowered below what the leader last stored. */
        {"acme", "90", "60", "60"},
        {"acme", NULL, "60", "60"},
        {"slow", "0.025", "0.5", "0.025"},
        {"beta", NULL, "60", "60"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tl_exec(db->conn,
                "INSERT INTO pgpace.frontier (customer_id, effective_rate) SELECT id, %s FROM "
                "pgpace.customer WHERE name = '%s' ON CONFLICT (customer_id) DO UPDATE SET "
                "effective_rate = EXCLUDED.effective_rate",
                cases[i].effective ? cases[i].effective : "NULL", cases[i].customer);
        tl_proc p = RUN_OK(db, "stats", "--customer", cases[i].customer);
        char line[512], *f[16];
        assert_int_equal(table_row(p.out, cases[i].customer, line, sizeof line, f, 16), 13);
        if (strcmp(f[2], cases[i].rate) != 0 || strcmp(f[3], cases[i].shown) != 0)
            fail_msg("%s effective %s: expected rate %s eff_rate %s, got:\n%s", cases[i].customer,
                     cases[i].effective ? cases[i].effective : "NULL", cases[i].rate,
                     cases[i].shown, p.out);
        tl_proc_free(&p);

        /* `stats --watch` refreshes until interrupted; its statement shows the same column. */
        const char *params[] = {cases[i].customer};
        PGresult *res = PQexecParams(db->conn, sql_q_stats_watch, 1, NULL, params, NULL, NULL, 0);
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        assert_int_equal(PQntuples(res), 1);
        int rate = PQfnumber(res, "rate"), eff = PQfnumber(res, "eff_rate");
        assert_true(rate >= 0 && eff == rate + 1);
        assert_string_equal(PQgetvalue(res, 0, eff), cases[i].shown);
        PQclear(res);
    }
}

static void customer_pause_and_resume(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme");
    tl_proc p = RUN_OK(db, "customer", "pause", "acme");
    tl_assert_contains(p.out, "paused customer acme");
    tl_proc_free(&p);
    assert_int_equal(
        tl_query_int(db->conn, "SELECT paused::int FROM pgpace.customer WHERE name='acme'"), 1);
    p = RUN_OK(db, "customer", "resume", "acme");
    tl_assert_contains(p.out, "resumed customer acme");
    tl_proc_free(&p);
    assert_int_equal(
        tl_query_int(db->conn, "SELECT paused::int FROM pgpace.customer WHERE name='acme'"), 0);

    p = RUN(db, "customer", "pause", "ghost");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "unknown customer 'ghost'");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.customer"), 1);

    p = RUN(db, "customer", "pause");
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "missing customer NAME");
    tl_proc_free(&p);
}

static void customer_delete_refuses_pending_items_unless_forced(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme");
    make_customer(db, "beta");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}')");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}')");
    tl_exec(db->conn, "SELECT pgpace.enqueue('beta', '{}')");
    tl_exec(db->conn, "INSERT INTO pgpace.dead_letter (item_id, customer_id, attempts, last_error) "
                      "SELECT 999999, id, 3, 'boom' FROM pgpace.customer WHERE name = 'acme'");

    tl_proc p = RUN(db, "customer", "delete", "acme");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "customer 'acme' has 2 pending item(s); nothing was deleted");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.customer"), 2);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 3);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 3);
    assert_int_equal(count_rows(db->conn, "pgpace.dead_letter"), 1);

    p = RUN_OK(db, "customer", "delete", "acme", "--force");
    tl_assert_contains(p.out, "deleted customer acme (2 item(s) removed)");
    tl_proc_free(&p);
    assert_int_equal(
        tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE name = 'acme'"), 0);
    /* Only beta's rows are left. */
    long long beta = tl_query_int(db->conn, "SELECT id FROM pgpace.customer WHERE name='beta'");
    assert_int_equal(
        tl_query_int(db->conn, "SELECT count(*) FROM pgpace.item WHERE customer_id <> %lld", beta),
        0);
    assert_int_equal(
        tl_query_int(db->conn, "SELECT count(*) FROM pgpace.queue WHERE customer_id <> %lld", beta),
        0);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 1);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 1);
    assert_int_equal(count_rows(db->conn, "pgpace.dead_letter"), 0);

    p = RUN(db, "customer", "delete", "acme");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "unknown customer 'acme'");
    tl_proc_free(&p);

    /* Without pending items no --force is needed. */
    make_customer(db, "empty");
    p = RUN_OK(db, "customer", "delete", "empty");
    tl_assert_contains(p.out, "deleted customer empty (0 item(s) removed)");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.customer"), 1);
}

/* ---- carriers ---- */

static void carrier_set_and_list(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "carrier", "set", "c1", "--max-per-round", "5", "--max-in-flight", "3");
    tl_assert_contains(p.out, "created carrier c1");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.carrier WHERE name = "
                                            "'c1' AND max_per_round = 5 AND max_in_flight = 3"),
                     1);

    char line[512], *f[8];
    p = RUN_OK(db, "carrier", "list");
    assert_true(table_row(p.out, "c1", line, sizeof line, f, 8) >= 3);
    assert_string_equal(f[1], "5");
    assert_string_equal(f[2], "3");
    tl_proc_free(&p);

    p = RUN_OK(db, "carrier", "set", "c1", "--max-per-round", "default");
    tl_assert_contains(p.out, "updated carrier c1");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.carrier WHERE name = "
                                            "'c1' AND max_per_round IS NULL AND max_in_flight = 3"),
                     1);
    p = RUN_OK(db, "carrier", "list");
    assert_true(table_row(p.out, "c1", line, sizeof line, f, 8) >= 3);
    assert_string_equal(f[1], "default");
    assert_string_equal(f[2], "3");
    tl_proc_free(&p);

    char *before = tl_query_str(db->conn, "SELECT c::text FROM pgpace.carrier c");
    static const char *const bad[][3] = {
        {"--max-per-round", "0", "--max-per-round: expected an integer from 1 to 1000000"},
        {"--max-per-round", "abc", "--max-per-round: expected an integer"},
        {"--max-in-flight", "-2", "--max-in-flight: expected an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = RUN(db, "carrier", "set", "c1", bad[i][0], bad[i][1]);
        assert_int_equal(p.status, 2);
        tl_assert_contains(p.err, bad[i][2]);
        tl_assert_contains(p.err, "(or 'default')");
        tl_proc_free(&p);
        p = RUN(db, "carrier", "set", "c2", bad[i][0], bad[i][1]);
        assert_int_equal(p.status, 2);
        tl_proc_free(&p);
    }
    p = RUN(db, "carrier", "set", "bad carrier");
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "carrier name:");
    tl_proc_free(&p);
    char *after = tl_query_str(db->conn, "SELECT c::text FROM pgpace.carrier c");
    assert_string_equal(before, after);
    assert_int_equal(count_rows(db->conn, "pgpace.carrier"), 1);
    free(before);
    free(after);
}

/* ---- stats ---- */

/* Observed in `stats --watch`: per minute for a spaced customer; for a batch customer the
 * requests of the last complete tick against its allowance (issue: a 5 s tick's 12 read as
 * 144/min); for a customer younger than a minute, per minute of its time (issue: 120/min read
 * as the count of a partial minute), marked with that time. Attempts are written directly at
 * chosen times around the tick boundaries. */
static void stats_watch_shows_batch_customers_per_tick(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme");
    make_customer(db, "bulk");
    make_customer(db, "young");
    tl_exec(db->conn, "UPDATE pgpace.customer SET mode = 'batch', rate_per_minute = 12 "
                      "WHERE name = 'bulk'");
    /* Older than the minute (their attempts are written before now), but young: 20 s. */
    tl_exec(db->conn, "UPDATE pgpace.customer SET created_at = now() - interval '1 hour'");
    tl_exec(db->conn,
            "INSERT INTO pgpace.leader_config (batch_tick_ms, instance) VALUES (5000, 't')");
    /* The last complete tick as the statement computes it, and its neighbours: 3 sends in it
     * (one of them a retry, one a 410), one released and one expired (neither went out), one
     * in the tick before and two in the current one. Spaced acme: 4 successes in the minute. */
    /* One transaction: now() is the same for the inserts and the read, so no tick boundary
     * can pass between them. */
    tl_exec(db->conn, "BEGIN");
    tl_exec(
        db->conn,
        "WITH t AS (SELECT to_timestamp((floor(extract(epoch FROM now()) * 1000 / 5000)::bigint"
        " * 5000 - 5000) / 1000.0) AS s), b AS (SELECT id FROM pgpace.customer WHERE name = "
        "'bulk') INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at,"
        " duration_ms, http_status, outcome, error_class) SELECT v.n, b.id, 1, t.s + v.at, 1, "
        "v.status, v.outcome, v.class FROM t, b, (VALUES (1, interval '0 ms', 200, 'success', "
        "NULL), (2, interval '4999 ms', 500, 'retry', 'http'), (3, interval '2 s', 410, "
        "'paused', 'http'), (4, interval '1 s', NULL, 'released', NULL), (5, interval '1 s', "
        "NULL, 'dead', 'expired'), (6, interval '-1 ms', 200, 'success', NULL), (7, interval "
        "'5 s', 200, 'success', NULL), (8, interval '5001 ms', 200, 'success', NULL)) AS v(n, "
        "at, status, outcome, class)");
    tl_exec(db->conn,
            "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, "
            "started_at, duration_ms, http_status, outcome) SELECT 100 + g, id, 1, now() - "
            "g * interval '1 s', 1, 200, 'success' FROM pgpace.customer, "
            "generate_series(1, 4) g WHERE name = 'acme'");
    /* young: created 20 s ago, one success every 500 ms since (40), and one before (not its
     * own: a request cannot precede the customer, nor be counted against its time). */
    tl_exec(db->conn, "UPDATE pgpace.customer SET created_at = now() - interval '20 s' "
                      "WHERE name = 'young'");
    tl_exec(db->conn,
            "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, "
            "started_at, duration_ms, http_status, outcome) SELECT 200 + g, id, 1, now() - "
            "g * interval '500 ms', 1, 200, 'success' FROM pgpace.customer, "
            "generate_series(0, 40) g WHERE name = 'young'");
    PGresult *res =
        PQexecParams(db->conn, sql_q_stats_watch, 1, NULL, (const char *[]){NULL}, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 3);
    int observed = PQfnumber(res, "observed");
    assert_true(observed >= 0);
    assert_string_equal(PQgetvalue(res, 0, 0), "acme");
    assert_string_equal(PQgetvalue(res, 0, observed), "4/min");
    assert_string_equal(PQgetvalue(res, 1, 0), "bulk");
    assert_string_equal(PQgetvalue(res, 1, observed), "3 of 12/tick");
    assert_string_equal(PQgetvalue(res, 2, 0), "young");
    assert_string_equal(PQgetvalue(res, 2, observed), "120/min (20 s)");
    PQclear(res);
    tl_exec(db->conn, "COMMIT");
}

static void stats_counts_due_in_flight_delayed_and_dead(void **state)
{
    tl_db *db = *state;
    make_customer(db, "acme");
    make_customer(db, "beta");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}')");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}')");
    long long flying = tl_query_int(db->conn, "SELECT pgpace.enqueue('acme', '{}')");
    tl_exec(db->conn,
            "UPDATE pgpace.queue SET claim_token = 1, next_action_at = now() + interval '1 min' "
            "WHERE item_id = %lld",
            flying);
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}', run_at => now() + interval '1 hour')");
    tl_exec(db->conn, "SELECT pgpace.enqueue('acme', '{}', run_at => now() + interval '2 hour')");
    tl_exec(db->conn, "INSERT INTO pgpace.dead_letter (item_id, customer_id, attempts, last_error) "
                      "SELECT 424242, id, 12, 'gone' FROM pgpace.customer WHERE name = 'acme'");

    tl_proc p = RUN_OK(db, "stats");
    char line[512], *f[16];
    /* customer mode rate eff_rate paused due in_flight delayed dead oldest_due_s backlog_s
     * last_error breaker */
    tl_assert_contains(p.out, "due");
    tl_assert_contains(p.out, "in_flight");
    tl_assert_contains(p.out, "eff_rate");
    tl_assert_contains(p.out, "backlog_s");
    tl_assert_contains(p.out, "last_error");
    assert_int_equal(table_row(p.out, "acme", line, sizeof line, f, 16), 13);
    assert_string_equal(f[11], "-"); /* no attempt yet */
    assert_string_equal(f[12], "closed");
    assert_string_equal(f[10], "2.0"); /* 2 due at 60/min */
    assert_string_equal(f[1], "spaced");
    assert_string_equal(f[2], "60");
    assert_string_equal(f[3], "60"); /* nothing throttled: the configured rate */
    assert_string_equal(f[5], "2");
    assert_string_equal(f[6], "1");
    assert_string_equal(f[7], "2");
    assert_string_equal(f[8], "1");
    assert_string_not_equal(f[9], "-");
    assert_int_equal(table_row(p.out, "beta", line, sizeof line, f, 16), 13);
    assert_string_equal(f[5], "0");
    assert_string_equal(f[6], "0");
    assert_string_equal(f[7], "0");
    assert_string_equal(f[8], "0");
    assert_string_equal(f[9], "-");
    assert_string_equal(f[10], "0.0"); /* nothing due */
    tl_proc_free(&p);

    p = RUN_OK(db, "stats", "--customer", "beta");
    assert_int_equal(table_row(p.out, "acme", line, sizeof line, f, 16), 0);
    assert_int_equal(table_row(p.out, "beta", line, sizeof line, f, 16), 13);
    tl_proc_free(&p);

    p = RUN(db, "stats", "--customer", "ghost");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "unknown customer 'ghost'");
    tl_proc_free(&p);
}

/* ---- settings ---- */

static void setting_get_set_list(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN_OK(db, "setting", "list");
    tl_assert_contains(p.out, "max_payload_bytes = 262144");
    tl_proc_free(&p);
    p = RUN_OK(db, "setting", "get", "max_payload_bytes");
    tl_assert_contains(p.out, "max_payload_bytes = 262144");
    tl_proc_free(&p);

    p = RUN_OK(db, "setting", "set", "max_payload_bytes", "1000");
    tl_assert_contains(p.out, "max_payload_bytes = 1000");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT value::int FROM pgpace.setting WHERE name = "
                                            "'max_payload_bytes'"),
                     1000);
    p = RUN_OK(db, "setting", "get", "max_payload_bytes");
    tl_assert_contains(p.out, "max_payload_bytes = 1000");
    tl_proc_free(&p);

    static const char *const bad[] = {"abc", "0", "", "99999999999", "1e3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = RUN(db, "setting", "set", "max_payload_bytes", bad[i]);
        if (p.status != 1)
            fail_msg("value '%s': expected exit 1, got %d: %s", bad[i], p.status, p.err);
        tl_assert_contains(p.err, "setting_value_valid");
        tl_proc_free(&p);
        assert_int_equal(tl_query_int(db->conn, "SELECT value::int FROM pgpace.setting WHERE "
                                                "name = 'max_payload_bytes'"),
                         1000);
    }

    p = RUN(db, "setting", "get", "nope");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "unknown setting 'nope'");
    tl_proc_free(&p);
    p = RUN(db, "setting", "set", "nope", "1");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "unknown setting 'nope'");
    tl_proc_free(&p);
    /* Nothing added by the refused set: the settings pgpace has, and no other. */
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.setting WHERE name NOT IN "
                                            "('max_payload_bytes', 'max_endpoints_per_customer', "
                                            "'portal_show_payloads')"),
                     0);
    /* The tenant page's payload switch takes on and off only. */
    p = RUN(db, "setting", "set", "portal_show_payloads", "yes");
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "setting_value_valid");
    tl_proc_free(&p);
    p = RUN(db, "setting", "set", "portal_show_payloads", "on");
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    p = RUN(db, "setting", "set", "max_payload_bytes");
    assert_int_equal(p.status, 2);
    tl_proc_free(&p);
}

/* ---- enqueue, one item ---- */

static void enqueue_one_item_rejects_bad_input(void **state)
{
    tl_db *db = *state;
    tl_proc p = RUN(db, "enqueue", "ghost", "{}");
    assert_int_equal(p.status, 1);
    assert_string_equal(p.out, "");
    assert_string_equal(p.err, "pgpace enqueue: pgpace.enqueue: unknown customer 'ghost'; hint: "
                               "create it first: pgpace customer set <name> --rate ... --url "
                               "...\n");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 0);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 0);

    make_customer(db, "acme");
    p = RUN(db, "enqueue", "acme", "not json");
    assert_int_equal(p.status, 1);
    assert_string_equal(p.out, "");
    assert_string_equal(p.err, "pgpace enqueue: field payload: invalid input syntax for type json "
                               "(Token \"not\" is invalid.)\n");
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.item"), 0);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 0);

    /* The same path with good input prints the new item's id and enqueues it. */
    p = RUN_OK(db, "enqueue", "acme", "{\"n\": 1}");
    long long id = tl_query_int(db->conn, "SELECT id FROM pgpace.item");
    char want[32];
    snprintf(want, sizeof want, "%lld\n", id);
    assert_string_equal(p.out, want);
    tl_proc_free(&p);
    assert_int_equal(count_rows(db->conn, "pgpace.queue"), 1);
}

/* ---- configuration ---- */

static void config_unknown_key_and_malformed_line(void **state)
{
    (void)state;
    char *path = tl_temp_file("# pgpace\n[database]\nconninfo = dbname=nowhere\nbogus_key = 1\n");
    tl_proc p = tl_pgpace(TL_ARGV("--config", path, "customer", "list"), NULL, NULL);
    assert_int_equal(p.status, 1);
    char where[128];
    snprintf(where, sizeof where, "%s:4:", path);
    tl_assert_contains(p.err, where);
    tl_assert_contains(p.err, "bogus_key");
    tl_proc_free(&p);
    unlink(path);
    free(path);

    path = tl_temp_file("[database]\nthis line has no equals sign\n");
    p = tl_pgpace(TL_ARGV("--config", path, "customer", "list"), NULL, NULL);
    assert_int_equal(p.status, 1);
    snprintf(where, sizeof where, "%s:2:", path);
    tl_assert_contains(p.err, where);
    tl_assert_contains(p.err, "malformed line");
    tl_proc_free(&p);
    unlink(path);
    free(path);

    p = tl_pgpace(TL_ARGV("--config", "/nonexistent/pgpace.ini", "customer", "list"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "cannot open config file '/nonexistent/pgpace.ini'");
    tl_proc_free(&p);
}

/* Starts `pgpace --config <ini> run` and waits up to timeout_ms for it to exit by itself.
 * Returns the exit status (-1 if still running at the deadline, then killed); *log gets its
 * stderr (owned). */
static int run_refused(const char *ini, int timeout_ms, char **log)
{
    char *path = tl_temp_file(ini);
    tl_service s = tl_service_start(TL_ARGV("--config", path, "run"), NULL);
    int status = tl_service_signal(&s, 0, 1, timeout_ms); /* signal 0: only waits */
    *log = tl_service_log(&s);
    tl_service_stop(&s);
    unlink(path);
    free(path);
    return status;
}

static void run_rejects_a_bad_allow_list(void **state)
{
    tl_db *db = *state;
    char ini[700];
    snprintf(ini, sizeof ini, "[database]\nconninfo = %s\n[delivery]\nallow_cidrs = 10.0.0.0/33\n",
             db->conninfo);
    char *log = NULL;
    int status = run_refused(ini, 10000, &log);
    if (status != 1)
        fail_msg("pgpace run with allow_cidrs 10.0.0.0/33: exit %d, expected 1:\n%s", status, log);
    /* The database is reachable: the allow list alone stops it, with one line as its whole
     * output: the command, the file and line, the key, the entry and the reason, each once. */
    const char *want = ":4: [delivery] allow_cidrs: allow-list entry \"10.0.0.0/33\": prefix "
                       "length 33 out of range 0-32\n";
    const char *tail = log + strlen(log) - (strlen(log) >= strlen(want) ? strlen(want) : 0);
    if (strncmp(log, "pgpace run: /", 13) != 0 || strcmp(tail, want) != 0 ||
        strchr(log, '\n') != log + strlen(log) - 1)
        fail_msg("unexpected output:\n%s", log);
    free(log);
}

static void config_conninfo_is_used_without_db(void **state)
{
    tl_db *db = *state;
    make_customer(db, "from-config");
    char content[600];
    snprintf(content, sizeof content, "[database]\nconninfo = %s\n", db->conninfo);
    char *path = tl_temp_file(content);

    tl_proc p = tl_pgpace(TL_ARGV("--config", path, "customer", "list"), NULL, NULL);
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "from-config");
    tl_proc_free(&p);

    char env[600];
    snprintf(env, sizeof env, "PGPACE_CONFIG=%s", path);
    p = tl_pgpace(TL_ARGV("customer", "list"), NULL, TL_ARGV(env));
    if (p.status != 0)
        fail_msg("exit %d: %s", p.status, p.err);
    tl_assert_contains(p.out, "from-config");
    tl_proc_free(&p);

    /* Writes go there too. */
    p = tl_pgpace(TL_ARGV("customer", "pause", "from-config"), NULL, TL_ARGV(env));
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.customer WHERE paused"),
                     1);

    /* --db wins over the file. */
    p = tl_pgpace(TL_ARGV("--db", "host=127.0.0.1 port=1 connect_timeout=5", "customer", "list"),
                  NULL, TL_ARGV(env));
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "settings from --db");
    tl_proc_free(&p);
    unlink(path);
    free(path);
}

static void config_unreachable_database_names_the_file(void **state)
{
    (void)state;
    char *path = tl_temp_file(
        "[database]\nconninfo = host=127.0.0.1 port=1 dbname=nowhere connect_timeout=5\n");
    char source[600];
    snprintf(source, sizeof source, "[database] conninfo in %s", path);

    tl_proc p = tl_pgpace(TL_ARGV("--config", path, "customer", "list"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "cannot connect to the database at host=127.0.0.1 port=1");
    tl_assert_contains(p.err, source);
    tl_proc_free(&p);

    char env[600];
    snprintf(env, sizeof env, "PGPACE_CONFIG=%s", path);
    p = tl_pgpace(TL_ARGV("stats"), NULL, TL_ARGV(env));
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, source);
    tl_proc_free(&p);
    unlink(path);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(help_for_every_command),
        cmocka_unit_test(unknown_command_and_options),
        cmocka_unit_test(version_prints_both_versions),
        cmocka_unit_test_setup_teardown(customer_set_creates_with_a_generated_secret, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(customer_secret_rotation, setup, teardown),
        cmocka_unit_test_setup_teardown(customer_update_changes_only_given_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(customer_set_rejects_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(customer_throttle_overrides, setup, teardown),
        cmocka_unit_test_setup_teardown(customer_pause_and_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(customer_delete_refuses_pending_items_unless_forced, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(carrier_set_and_list, setup, teardown),
        cmocka_unit_test_setup_teardown(stats_counts_due_in_flight_delayed_and_dead, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stats_shows_the_effective_rate, setup, teardown),
        cmocka_unit_test_setup_teardown(stats_watch_shows_batch_customers_per_tick, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(setting_get_set_list, setup, teardown),
        cmocka_unit_test_setup_teardown(enqueue_one_item_rejects_bad_input, setup, teardown),
        cmocka_unit_test(config_unknown_key_and_malformed_line),
        cmocka_unit_test_setup_teardown(config_conninfo_is_used_without_db, setup, teardown),
        cmocka_unit_test_setup_teardown(run_rejects_a_bad_allow_list, setup, teardown),
        cmocka_unit_test(config_unreachable_database_names_the_file),
    };
    return TL_RUN(tests, NULL, NULL);
}
