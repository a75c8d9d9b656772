/* test_migrate.c - `pgpace migrate` against a real server: apply, re-run, concurrency,
 * checksum mismatch and comment-only revisions, unreachable database, the upgrade from every
 * earlier schema version compared with a fresh install, the function files (re-applied when
 * changed, rolled back together), the upgrade to day-partitioned items, retention by whole
 * partitions, and the upgrade to the throttle settings (0008). */
#include "fixture.h"
#include "testlib.h"

#include "migrate.h"
#include "sql_embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void assert_schema_version(PGconn *c, int version, const char *digest);

static int setup(void **state)
{
    *state = tl_fresh_db(0);
    return 0;
}

static int setup_migrated(void **state)
{
    *state = tl_fresh_db(1);
    return 0;
}

static int teardown(void **state)
{
    tl_drop_db(*state);
    return 0;
}

static void migrate_creates_schema_and_records_it(void **state)
{
    tl_db *db = *state;
    /* A database pgpace never saw answers version 0, no functions (no pgpace schema yet). */
    assert_schema_version(db->conn, 0, NULL);
    char expected[160];
    snprintf(expected, sizeof expected,
             "database schema version 0; this binary expects %d; functions not recorded (run: "
             "pgpace migrate)",
             migrate_latest_version());
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate", "--status"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, expected);
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "applied 0001_schema");
    tl_assert_contains(p.out, "applied function file 01_names\n");
    tl_proc_free(&p);
    assert_schema_version(db->conn, migrate_latest_version(), migrate_functions_digest());
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.schema_function"),
                     (long long)sql_functions_count);

    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.schema_migration"),
                     migrate_latest_version());
    assert_int_equal(tl_query_int(db->conn, "SELECT min(length(checksum)) FROM "
                                            "pgpace.schema_migration"),
                     64);
    /* The queue's storage settings, the UNLOGGED frontier, the attempt log by day. */
    char *opts = tl_query_str(db->conn, "SELECT array_to_string(reloptions, ',') FROM pg_class "
                                        "WHERE oid = 'pgpace.queue'::regclass");
    tl_assert_contains(opts, "fillfactor=80");
    tl_assert_contains(opts, "autovacuum_vacuum_scale_factor=0.01");
    free(opts);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_class WHERE oid = "
                                            "'pgpace.frontier'::regclass AND relpersistence='u'"),
                     1);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_partitioned_table WHERE "
                                            "partrelid = 'pgpace.delivery_attempt'::regclass"),
                     1);
    assert_true(tl_query_int(db->conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = "
                                       "'pgpace.delivery_attempt'::regclass") >= 8);
    /* Besides its primary key, queue has six partial indexes: the claim's, the expiry sweep's,
     * the one that keeps a supersede_key unique among never claimed items, the order-key
     * gate's two and the parked items' (0020). */
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_index WHERE indrelid = "
                                            "'pgpace.queue'::regclass AND NOT indisprimary"),
                     6);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_index WHERE indrelid = "
                                            "'pgpace.queue'::regclass AND NOT indisprimary AND "
                                            "indpred IS NOT NULL"),
                     6);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_index WHERE indexrelid = "
                                            "'pgpace.queue_claim'::regclass AND indpred IS NOT "
                                            "NULL"),
                     1);
}

static void migrate_twice_is_a_noop(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    char *before = tl_query_str(db->conn, "SELECT string_agg(applied_at::text, ',') FROM "
                                          "pgpace.schema_migration");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "up to date");
    tl_proc_free(&p);
    char *after = tl_query_str(db->conn, "SELECT string_agg(applied_at::text, ',') FROM "
                                         "pgpace.schema_migration");
    assert_string_equal(before, after);
    free(before);
    free(after);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate", "--status"), NULL, NULL);
    assert_int_equal(p.status, 0);
    char expected[96];
    snprintf(expected, sizeof expected, "database schema version %d; this binary expects %d",
             migrate_latest_version(), migrate_latest_version());
    tl_assert_contains(p.out, expected);
    tl_proc_free(&p);
}

static void concurrent_migrations_are_safe(void **state)
{
    tl_db *db = *state;
    /* Four migrate processes at once: the advisory lock serialises them; all succeed and the
     * migrations and the function files are applied exactly once. Each child exits with 10 +
     * 2 * (it applied 0001) + (it applied the first function file), or 1 when it failed. */
    enum { N = 4 };
    pid_t kids[N];
    char first_function[128];
    snprintf(first_function, sizeof first_function, "applied function file %s\n",
             sql_functions[0].name);
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
            if (p.status != 0)
                _exit(1);
            _exit(10 + 2 * (strstr(p.out, "applied 0001_schema\n") != NULL) +
                  (strstr(p.out, first_function) != NULL));
        }
    }
    int schema_applied = 0, functions_applied = 0;
    for (int i = 0; i < N; i++) {
        int st;
        assert_int_equal(waitpid(kids[i], &st, 0), kids[i]);
        assert_true(WIFEXITED(st));
        assert_in_range(WEXITSTATUS(st), 10, 13);
        schema_applied += (WEXITSTATUS(st) - 10) / 2;
        functions_applied += (WEXITSTATUS(st) - 10) % 2;
    }
    assert_int_equal(schema_applied, 1);
    assert_int_equal(functions_applied, 1);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.schema_migration"),
                     migrate_latest_version());
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.schema_function"),
                     (long long)sql_functions_count);
}

static void checksum_mismatch_is_an_error(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    tl_exec(db->conn, "UPDATE pgpace.schema_migration SET checksum = repeat('0', 64) "
                      "WHERE version = 1");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "migration 0001_schema was changed after it was applied");
    tl_proc_free(&p);
}

/* The checksums pgpace recorded for migrations whose comments were revised later, as released
 * (sha256sum of each file before its comment-only revision). An older pgpace left these in
 * schema_migration. */
static const char *released_checksum(int version)
{
    switch (version) {
    case 1:
        return "38f38044022879d6da2a1fb332048d91b14121c2846ebe242b979393a0d84ac8";
    case 5:
        return "1c3ccc79337427c34f7837e5a846cb4d3acb3c7f77b3840e3bdd2ceb122f4439";
    case 6:
        return "f728927b1d19a9a926fdf738c6f4a30b378bee7b98aaa589d53d001f5e2502ce";
    case 7:
        return "5c6f9dab233f11c4b107339a57903b65da3af75ca68e2ccde8826646ff7068ab";
    default:
        return NULL;
    }
}

/* The number of schema_migration rows whose checksum is the SHA-256 of the embedded text. */
static long long current_checksums(PGconn *c)
{
    long long n = 0;
    for (size_t i = 0; i < sql_migrations_count; i++) {
        char version[16];
        snprintf(version, sizeof version, "%d", sql_migrations[i].version);
        PGresult *res =
            PQexecParams(c,
                         "SELECT count(*) FROM pgpace.schema_migration WHERE version = $1 AND "
                         "checksum = encode(sha256(convert_to($2, 'UTF8')), 'hex')",
                         2, NULL, TL_ARGV(version, sql_migrations[i].text), NULL, NULL, 0);
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        n += atoll(PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    return n;
}

static void released_checksum_of_a_revised_migration_is_accepted(void **state)
{
    tl_db *db = *state;
    tl_exec(db->conn, "UPDATE pgpace.schema_migration SET checksum = '%s' WHERE version = 1",
            released_checksum(1));
    assert_int_equal(current_checksums(db->conn), migrate_latest_version() - 1);
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "updated the checksum of 0001_schema (its comments were revised)");
    tl_assert_contains(p.out, "schema is up to date");
    tl_proc_free(&p);
    assert_int_equal(current_checksums(db->conn), migrate_latest_version());
    /* Once: the record now holds the current checksum. */
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    assert_null(strstr(p.out, "updated the checksum"));
    tl_proc_free(&p);

    /* A released checksum counts for its own migration only; any other is still refused, and
     * nothing is updated then. */
    tl_exec(db->conn, "UPDATE pgpace.schema_migration SET checksum = '%s' WHERE version = 1",
            released_checksum(1));
    tl_exec(db->conn, "UPDATE pgpace.schema_migration SET checksum = '%s' WHERE version = 5",
            released_checksum(7));
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "migration 0005_dead_letter_partitions was changed after it was "
                              "applied");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn,
                                  "SELECT count(*) FROM pgpace.schema_migration WHERE version = 1 "
                                  "AND checksum = '%s'",
                                  released_checksum(1)),
                     1);
    tl_exec(db->conn,
            "UPDATE pgpace.schema_migration SET checksum = "
            "'9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08' WHERE version = 5");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "migration 0005_dead_letter_partitions was changed after it was "
                              "applied: checksum in the database 9f86d081884c...");
    tl_proc_free(&p);
}

static void newer_schema_is_reported(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    tl_exec(db->conn, "INSERT INTO pgpace.schema_migration VALUES (%d, 'future', 'x')",
            migrate_latest_version() + 1);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "newer than this binary");
    tl_proc_free(&p);
}

/* ---- upgrades from every earlier version, and the function files ------------------------- */

/* Leaves the database as `pgpace migrate` of an older pgpace at schema version k left it (k = 0:
 * never migrated): that binary's bootstrap (schema_migration only: it had no function files),
 * then migrations 1..k, each in its own transaction and recorded with the checksum that binary
 * computed, i.e. the released one for migrations whose comments were revised since. */
static void migrate_like_an_older_pgpace(PGconn *c, int k)
{
    if (k == 0)
        return;
    tl_exec(c, "CREATE SCHEMA IF NOT EXISTS pgpace; CREATE TABLE IF NOT EXISTS "
               "pgpace.schema_migration (version integer PRIMARY KEY, name text NOT NULL, "
               "checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())");
    for (int i = 0; i < k; i++) {
        char version[8];
        snprintf(version, sizeof version, "%d", sql_migrations[i].version);
        const char *released = released_checksum(sql_migrations[i].version);
        tl_exec(c, "BEGIN");
        PGresult *res = PQexec(c, sql_migrations[i].text);
        if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
            fail_msg("%s: %s", sql_migrations[i].name, PQresultErrorMessage(res));
        PQclear(res);
        res = PQexecParams(c,
                           "INSERT INTO pgpace.schema_migration (version, name, checksum) VALUES "
                           "($1, $2, coalesce($4, encode(sha256(convert_to($3, 'UTF8')), "
                           "'hex')))",
                           4, NULL,
                           (const char *const[]){version, sql_migrations[i].name,
                                                 sql_migrations[i].text, released},
                           NULL, NULL, 0);
        assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
        PQclear(res);
        tl_exec(c, "COMMIT");
    }
}

/* Asserts what sql/queries/schema_version.sql (the dispatcher's check) answers: the version,
 * and the functions' digest (NULL: none recorded). */
static void assert_schema_version(PGconn *c, int version, const char *digest)
{
    PGresult *res = PQexec(c, sql_q_schema_version);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) != 2)
        fail_msg("schema_version.sql: %s", PQresultErrorMessage(res));
    assert_int_equal(atoi(PQgetvalue(res, 0, 0)), version);
    if (digest)
        assert_string_equal(PQgetvalue(res, 0, 1), digest);
    else
        assert_true(PQgetisnull(res, 0, 1));
    PQclear(res);
}

/* The catalog of schema pgpace as sorted lines (tests/integration/catalog_dump.sql). */
typedef struct catalog {
    char **lines;
    int n;
} catalog;

static catalog catalog_dump(PGconn *c)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/integration/catalog_dump.sql",
             getenv("PGPACE_SOURCE_ROOT"));
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s (run the tests through meson test)", path);
    char *sql = calloc(1, 65536);
    assert_non_null(sql);
    size_t len = fread(sql, 1, 65535, f);
    fclose(f);
    assert_true(len > 0 && len < 65535);
    PGresult *res = PQexec(c, sql);
    free(sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("catalog_dump.sql: %s", PQresultErrorMessage(res));
    catalog cat = {calloc((size_t)PQntuples(res) + 1, sizeof(char *)), PQntuples(res)};
    assert_non_null(cat.lines);
    for (int i = 0; i < cat.n; i++) {
        cat.lines[i] = strdup(PQgetvalue(res, i, 0));
        assert_non_null(cat.lines[i]);
    }
    PQclear(res);
    return cat;
}

static void catalog_free(catalog *cat)
{
    for (int i = 0; i < cat->n; i++)
        free(cat->lines[i]);
    free(cat->lines);
}

/* Fails with the first line (of the sorted dumps) where `got` differs from `want`, and the
 * character where the two lines part, with some context before it. */
static void assert_same_catalog(const catalog *want, const catalog *got, const char *what)
{
    int i = 0;
    while (i < want->n && i < got->n && strcmp(want->lines[i], got->lines[i]) == 0)
        i++;
    if (i == want->n && i == got->n)
        return;
    const char *a = i < want->n ? want->lines[i] : "(the dump ends here)";
    const char *b = i < got->n ? got->lines[i] : "(the dump ends here)";
    size_t at = 0;
    while (a[at] && a[at] == b[at])
        at++;
    size_t from = at > 160 ? at - 160 : 0;
    fail_msg("%s: the catalog differs from a fresh install's at line %d (of %d, %d here), "
             "character %zu\n  fresh install: %.200s\n  %s: %.200s\n  where they part, fresh "
             "install: ...%.320s\n  where they part, %s: ...%.320s",
             what, i + 1, want->n, got->n, at, a, what, b, a + from, what, b + from);
}

/* For every k, a database left at schema version k by an older pgpace (without function files,
 * with the released checksums) migrated by this one has exactly a fresh install's catalog. */
static void upgrade_from_every_version_matches_a_fresh_install(void **state)
{
    (void)state;
    tl_db *fresh = tl_fresh_db(1);
    catalog want = catalog_dump(fresh->conn);
    tl_drop_db(fresh);
    /* The dump sees the schema: every function and view, the bookkeeping tables. */
    assert_true(want.n > 250);
    int functions = 0, views = 0;
    for (int i = 0; i < want.n; i++) {
        functions += strncmp(want.lines[i], "function pgpace.", 16) == 0;
        views += strncmp(want.lines[i], "view ", 5) == 0;
    }
    /* Functions, and what added them lately: +1 check_signing_secrets (ed25519),
     * customer_set_client_cert (mtls), customer_set_proxy, customer_set_oauth2, shard_of,
     * recovery_lane_busy; +12 endpoints (16_endpoints.sql, new_signing_secret, estimate_receiver
     * and the estimate_send_time of one endpoint); +4 endpoint_list, endpoint_pause,
     * endpoint_disable, endpoint_enable (17_endpoint_admin); +3 endpoint_gone,
     * backfill_candidates, recover_endpoint (recover); +8 limits (0019: limit_window_parts,
     * limit_window_error, limit_period_text, limits_error, limits_normalize, limits_machine,
     * limits_rate, notify_host_change); +10 customer_limits_arg, check_receiver_pace,
     * estimate_pace, host_normalize, host_for_url, host_set, host_delete, host_list, rate_text,
     * limits_earliest (18_limits); +3 order keys (0020: dead_letter_order; order_key_error in
     * 05_enqueue; customer_set_order_on_dead); +7 parking (0020: order_try_lock, order_unpark,
     * order_settle, queue_order_park, queue_order_parked, queue_order_unpark, order_recheck_run);
     * +1 order_blocked (19_order); +4 tokens (0021: notify_token_change; token_create,
     * token_revoke, token_list in 20_tokens); +4 dlq_rows, dlq_replay, dlq_purge, carrier_set
     * (21_admin); +49 the management API's api_* (22_api); +8 hmac_sha256, base64url,
     * base64url_decode, portal_customer_id, portal_token, portal_revoke, portal_check,
     * portal_show_payloads (23_portal); +2 wake_leader, wake_cold (24_wake) */
    assert_int_equal(functions, 158);
    assert_int_equal(views, 3);

    for (int k = 0; k <= migrate_latest_version(); k++) {
        tl_db *db = tl_fresh_db(0);
        migrate_like_an_older_pgpace(db->conn, k);
        assert_schema_version(db->conn, k, NULL);
        tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
        if (p.status != 0)
            fail_msg("migrate from version %d: exit %d: %s", k, p.status, p.err);
        char line[160];
        if (k < migrate_latest_version()) {
            snprintf(line, sizeof line, "applied %s\n", sql_migrations[k].name);
            tl_assert_contains(p.out, line);
        }
        if (k >= 1)
            tl_assert_contains(p.out, "updated the checksum of 0001_schema (its comments were "
                                      "revised)");
        snprintf(line, sizeof line, "applied %d migration(s) and %d function file(s)",
                 migrate_latest_version() - k, (int)sql_functions_count);
        tl_assert_contains(p.out, line);
        tl_proc_free(&p);
        assert_schema_version(db->conn, migrate_latest_version(), migrate_functions_digest());
        assert_int_equal(current_checksums(db->conn), migrate_latest_version());

        catalog got = catalog_dump(db->conn);
        char what[64];
        snprintf(what, sizeof what, "upgraded from version %d", k);
        assert_same_catalog(&want, &got, what);
        catalog_free(&got);
        tl_drop_db(db);
    }
    catalog_free(&want);
}

static void assert_no_function_applied(const tl_proc *p)
{
    if (strstr(p->out, "applied function file"))
        fail_msg("expected no function file to be applied, got:\n%s", p->out);
}

/* A function file whose recorded checksum differs (as after an edit) is re-applied, alone; what
 * the database had changed in its functions is replaced and privileges stay as they were. A
 * second run is a no-op, and rows of files the binary does not have are forgotten. */
static void changed_function_file_is_reapplied(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    /* An operator's grant on a function of 08_customer, which re-applying must keep. */
    char role[80];
    snprintf(role, sizeof role, "%s_ops", db->name);
    tl_exec(c, "CREATE ROLE %s", role);
    tl_exec(c,
            "GRANT EXECUTE ON FUNCTION pgpace.customer_set_timeouts(text, integer, integer) "
            "TO %s",
            role);
    catalog want = catalog_dump(c);

    /* Up to date: nothing is applied, no function row changes. */
    static const char procs[] = "SELECT string_agg(xmin::text, ',' ORDER BY oid) FROM pg_proc "
                                "WHERE pronamespace = 'pgpace'::regnamespace";
    static const char rows[] = "SELECT string_agg(name || ' ' || checksum || ' ' || applied_at, "
                               "',' ORDER BY name) FROM pgpace.schema_function";
    char *procs_before = tl_query_str(c, procs), *rows_before = tl_query_str(c, rows);
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "schema is up to date");
    assert_no_function_applied(&p);
    tl_proc_free(&p);
    char *procs_after = tl_query_str(c, procs), *rows_after = tl_query_str(c, rows);
    assert_string_equal(procs_after, procs_before);
    assert_string_equal(rows_after, rows_before);
    free(procs_after);
    free(rows_after);
    free(procs_before);
    free(rows_before);

    /* As if 05_enqueue and 08_customer had been edited: their rows carry other checksums and the
     * digest is another binary's. The database's enqueue and customer_set_timeouts differ from
     * the files (a setting of their own). */
    tl_exec(c, "UPDATE pgpace.schema_function SET checksum = repeat('0', 64) WHERE name IN "
               "('05_enqueue', '08_customer')");
    tl_exec(c, "UPDATE pgpace.schema_function_digest SET digest = repeat('1', 64)");
    tl_exec(c, "ALTER FUNCTION pgpace.enqueue(text, jsonb, text, text, timestamptz, text, "
               "integer, timestamptz, text, text, text, text) SET work_mem = '1MB'");
    tl_exec(c, "ALTER FUNCTION pgpace.customer_set_timeouts(text, integer, integer) SET work_mem "
               "= '1MB'");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate", "--status"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "functions differ from this binary's (run: pgpace migrate)");
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "applied function file 05_enqueue\n");
    tl_assert_contains(p.out, "applied function file 08_customer\n");
    tl_assert_contains(p.out, "applied 0 migration(s) and 2 function file(s)");
    assert_null(strstr(p.out, "applied function file 06_enqueue_json"));
    tl_proc_free(&p);
    catalog got = catalog_dump(c);
    assert_same_catalog(&want, &got, "after re-applying 05_enqueue and 08_customer");
    catalog_free(&got);
    assert_schema_version(c, migrate_latest_version(), migrate_functions_digest());
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.schema_function WHERE checksum "
                                     "= repeat('0', 64)"),
                     0);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate", "--status"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "; functions up to date\n");
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "schema is up to date");
    assert_no_function_applied(&p);
    tl_proc_free(&p);

    /* A file the binary no longer has (its function dropped by a migration). */
    tl_exec(c, "INSERT INTO pgpace.schema_function (name, checksum) VALUES ('99_gone', "
               "repeat('2', 64))");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "forgot function file 99_gone (not in this binary)");
    assert_no_function_applied(&p);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.schema_function"),
                     (long long)sql_functions_count);

    catalog_free(&want);
    tl_exec(c,
            "REVOKE ALL ON FUNCTION pgpace.customer_set_timeouts(text, integer, integer) FROM "
            "%s",
            role);
    tl_exec(c, "DROP ROLE %s", role);
}

/* A function file that fails rolls back every file of the run, and the error names it. Once the
 * cause is gone, the next run applies them and re-creates what was missing. */
static void failing_function_file_rolls_back(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    catalog want = catalog_dump(c);
    /* 05_enqueue and 11_instance changed, the database's enqueue differs from its file, and
     * pgpace.instance has become a view with other columns, which CREATE OR REPLACE VIEW cannot
     * change. */
    tl_exec(c, "UPDATE pgpace.schema_function SET checksum = repeat('0', 64) WHERE name IN "
               "('05_enqueue', '11_instance')");
    tl_exec(c, "ALTER FUNCTION pgpace.enqueue(text, jsonb, text, text, timestamptz, text, "
               "integer, timestamptz, text, text, text, text) SET work_mem = '1MB'");
    tl_exec(c, "DROP VIEW pgpace.leader; DROP VIEW pgpace.instance; CREATE VIEW pgpace.instance "
               "AS SELECT 1 AS pid");
    static const char odd_enqueue[] =
        "SELECT count(*) FROM pg_proc WHERE oid = 'pgpace.enqueue(text, jsonb, text, text, "
        "timestamptz, text, integer, timestamptz, text, text, text, text)'::regprocedure AND "
        "proconfig @> "
        "'{work_mem=1MB}'";

    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "function file 11_instance failed; no function file was applied "
                              "(rolled back)");
    tl_assert_contains(p.err, "cannot change name of view column");
    assert_no_function_applied(&p);
    tl_proc_free(&p);
    /* 05_enqueue ran before 11_instance failed, and was rolled back with it. */
    assert_int_equal(tl_query_int(c, odd_enqueue), 1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.schema_function WHERE checksum "
                                     "= repeat('0', 64)"),
                     2);
    assert_int_equal(tl_query_int(c, "SELECT (to_regclass('pgpace.leader') IS NULL)::int"), 1);

    tl_exec(c, "DROP VIEW pgpace.instance");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "applied function file 05_enqueue\n");
    tl_assert_contains(p.out, "applied function file 11_instance\n");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, odd_enqueue), 0);
    catalog got = catalog_dump(c);
    assert_same_catalog(&want, &got, "after the failed run and the next one");
    catalog_free(&got);
    catalog_free(&want);
}

/* The function files join the last migration's transaction: a file that fails rolls the
 * migration back too, so the database is never at a new version without its functions. */
static void failing_function_file_rolls_back_the_migration(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    int before = (int)sql_migrations_count - 1;
    migrate_like_an_older_pgpace(c, before);
    tl_exec(c, "DROP VIEW pgpace.leader; DROP VIEW pgpace.instance; CREATE VIEW pgpace.instance "
               "AS SELECT 1 AS pid");
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "function file 11_instance failed");
    tl_assert_contains(p.err, "was rolled back with them");
    assert_null(strstr(p.out, sql_migrations[before].name));
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT max(version) FROM pgpace.schema_migration"), before);

    tl_exec(c, "DROP VIEW pgpace.instance");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, sql_migrations[before].name);
    tl_assert_contains(p.out, "applied function file 11_instance\n");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT max(version) FROM pgpace.schema_migration"),
                     (long long)sql_migrations_count);
    assert_int_equal(tl_query_int(c, "SELECT (to_regclass('pgpace.leader') IS NOT NULL)::int"), 1);
}

static void unreachable_database_says_where(void **state)
{
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=5", "migrate"), NULL,
        NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "cannot connect to the database at host=127.0.0.1 port=1");
    tl_assert_contains(p.err, "settings from --db");
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("migrate"), NULL,
                  TL_ARGV("PGHOST=127.0.0.1", "PGPORT=1", "PGCONNECT_TIMEOUT=5"));
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "port=1");
    tl_assert_contains(p.err, "libpq environment");
    tl_proc_free(&p);

    p = tl_pgpace(TL_ARGV("--db", "host='unterminated", "migrate"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "invalid connection string (from --db)");
    tl_proc_free(&p);
}

static void attempt_partitions_ahead_and_retention(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    /* Today plus 7 days ahead exist; asking again creates nothing new. */
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = "
                                            "'pgpace.delivery_attempt'::regclass AND "
                                            "inhrelid::regclass::text ~ '_p[0-9]{8}$'"),
                     8);
    assert_int_equal(tl_query_int(db->conn, "SELECT pgpace.ensure_partitions("
                                            "'pgpace.delivery_attempt', 7)"),
                     0);
    assert_int_equal(tl_query_int(db->conn, "SELECT pgpace.ensure_partitions("
                                            "'pgpace.delivery_attempt', 9)"),
                     2);
    /* Two old days with rows in them, as a leader running for weeks would have. */
    for (int days = 8; days <= 9; days++) {
        char *name = tl_query_str(db->conn,
                                  "SELECT 'delivery_attempt_p' || to_char((now() AT TIME ZONE "
                                  "'UTC')::date - %d, 'YYYYMMDD')",
                                  days);
        tl_exec(db->conn,
                "CREATE TABLE pgpace.%s PARTITION OF pgpace.delivery_attempt FOR VALUES FROM "
                "(((now() AT TIME ZONE 'UTC')::date - %d)::timestamp AT TIME ZONE 'UTC') TO "
                "(((now() AT TIME ZONE 'UTC')::date - %d)::timestamp AT TIME ZONE 'UTC')",
                name, days, days - 1);
        tl_exec(db->conn,
                "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
                "duration_ms, outcome) SELECT g, 1, 1, ((now() AT TIME ZONE 'UTC')::date - %d) "
                "::timestamp AT TIME ZONE 'UTC' + interval '1 hour', 1, 'success' FROM "
                "generate_series(1, 1000) g",
                days);
        free(name);
    }
    tl_exec(db->conn, "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, "
                      "started_at, duration_ms, outcome) VALUES (1, 1, 1, now(), 1, 'success')");
    /* Operator events are kept as long as the attempt log: today and 7 days ahead exist, and an
     * old day goes with the attempts'. */
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = "
                                            "'pgpace.event'::regclass AND "
                                            "inhrelid::regclass::text ~ '_p[0-9]{8}$'"),
                     8);
    char *old_events = tl_query_str(db->conn, "SELECT 'event_p' || to_char((now() AT TIME ZONE "
                                              "'UTC')::date - 9, 'YYYYMMDD')");
    tl_exec(db->conn,
            "CREATE TABLE pgpace.%s PARTITION OF pgpace.event FOR VALUES FROM "
            "(((now() AT TIME ZONE 'UTC')::date - 9)::timestamp AT TIME ZONE 'UTC') TO "
            "(((now() AT TIME ZONE 'UTC')::date - 8)::timestamp AT TIME ZONE 'UTC')",
            old_events);
    free(old_events);
    tl_exec(db->conn, "INSERT INTO pgpace.event (at, kind, customer) VALUES (now() - interval "
                      "'9 days', 'paused', 'x'), (now(), 'paused', 'y')");
    /* The leader's retention statement: whole days older than 7 days go, nothing else. */
    char *sql = NULL;
    {
        char path[512];
        snprintf(path, sizeof path, "%s/sql/queries/run_retention.sql",
                 getenv("PGPACE_SOURCE_ROOT"));
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        sql = calloc(1, 4096);
        assert_non_null(sql);
        assert_true(fread(sql, 1, 4095, f) > 0);
        fclose(f);
    }
    const char *params[] = {"7", "30", "7"};
    PGresult *res = PQexecParams(db->conn, sql, 3, NULL, params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(res, 0, 0), "3");
    PQclear(res);
    free(sql);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.delivery_attempt"), 1);
    char *left = tl_query_str(db->conn, "SELECT string_agg(customer, ',') FROM pgpace.event");
    assert_string_equal(left, "y");
    free(left);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = "
                                            "'pgpace.delivery_attempt'::regclass AND "
                                            "inhrelid::regclass::text ~ '_p[0-9]{8}$'"),
                     10);
}

/* ---- items by day (0007) ------------------------------------------------------------------ */

/* Runs one of the embedded statements (the exact SQL the dispatcher sends) and returns its one
 * value. */
static long long run_stmt(PGconn *c, const char *sql, int n, const char *const *params)
{
    PGresult *res = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        fail_msg("statement failed: %s", PQresultErrorMessage(res));
    long long v = atoll(PQgetvalue(res, 0, 0));
    PQclear(res);
    return v;
}

/* The leader's retention statement with the default retentions (attempts 7, dead letters 30,
 * items 7 days); returns the partitions it dropped. */
static long long run_retention(PGconn *c)
{
    return run_stmt(c, sql_q_run_retention, 3, TL_ARGV("7", "30", "7"));
}

static long long run_key_purge(PGconn *c, const char *batch)
{
    return run_stmt(c, sql_q_run_key_purge, 1, TL_ARGV(batch));
}

/* Whether the item partition of the UTC day `ago` days back exists. */
static long long day_exists(PGconn *c, int ago)
{
    return tl_query_int(c,
                        "SELECT (to_regclass('pgpace.item_p' || to_char((now() AT TIME ZONE "
                        "'UTC')::date - %d, 'YYYYMMDD')) IS NOT NULL)::int",
                        ago);
}

/* n delivered items of the UTC day `ago` days back, in that day's own partition (created as the
 * leader's ensure run would have on the day): ids of that day, keys "<tag>-1".."<tag>-n", created
 * at noon that day. Returns the day's first id (item i is first + i). */
static long long old_day(PGconn *c, int ago, const char *tag, int n)
{
    assert_int_equal(tl_query_int(c,
                                  "SELECT pgpace.create_item_partition((now() AT TIME ZONE "
                                  "'UTC')::date - %d)::int",
                                  ago),
                     1);
    long long first = tl_query_int(c,
                                   "SELECT pgpace.item_day_first_id((now() AT TIME ZONE "
                                   "'UTC')::date - %d)",
                                   ago);
    tl_exec(c,
            "INSERT INTO pgpace.item (id, customer_id, payload, idempotency_key, run_at, "
            "created_at) SELECT %lld + g, c.id, jsonb_build_object('n', g), '%s-' || g, t, t "
            "FROM pgpace.customer c, generate_series(1, %d) g, LATERAL (SELECT ((now() AT TIME "
            "ZONE 'UTC')::date - %d)::timestamp AT TIME ZONE 'UTC' + interval '12 hours' AS t) x "
            "WHERE c.name = 'acme'",
            first, tag, n, ago);
    tl_exec(c,
            "INSERT INTO pgpace.item_key (customer_id, idempotency_key, item_id) SELECT "
            "i.customer_id, i.idempotency_key, i.id FROM pgpace.item i WHERE i.id > %lld AND i.id "
            "<= %lld",
            first, first + n);
    return first;
}

static long long keys_with_prefix(PGconn *c, const char *tag)
{
    return tl_query_int(c,
                        "SELECT count(*) FROM pgpace.item_key WHERE left(idempotency_key, %d) = "
                        "'%s-'",
                        (int)strlen(tag) + 1, tag);
}

static void item_days_are_dropped_whole_when_nothing_needs_them(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "SELECT pgpace.customer_set('acme', rate_per_minute => 60, webhook_url => "
               "'http://127.0.0.1:9/')");
    /* Notes every row deleted from any item partition, also from those about to be dropped. */
    tl_exec(c, "CREATE TABLE public.item_deleted (id bigint)");
    tl_exec(c, "CREATE FUNCTION public.note_delete() RETURNS trigger LANGUAGE plpgsql AS $$ "
               "BEGIN INSERT INTO public.item_deleted VALUES (OLD.id); RETURN NULL; END $$");
    tl_exec(c, "CREATE TRIGGER note_delete AFTER DELETE ON pgpace.item FOR EACH ROW EXECUTE "
               "FUNCTION public.note_delete()");

    long long delivered = old_day(c, 10, "a", 5); /* every item delivered */
    long long pending = old_day(c, 9, "b", 5);    /* one still queued (waiting for a retry) */
    long long dead = old_day(c, 8, "c", 5);       /* one dead-lettered */
    old_day(c, 3, "d", 5);                        /* delivered, but within the retention */
    tl_exec(c,
            "INSERT INTO pgpace.queue (item_id, customer_id, next_action_at, max_attempts) "
            "SELECT id, customer_id, now() + interval '1 hour', 12 FROM pgpace.item WHERE id = "
            "%lld",
            pending + 3);
    tl_exec(c,
            "INSERT INTO pgpace.dead_letter (item_id, customer_id, attempts, last_error) SELECT "
            "id, customer_id, 12, 'HTTP 500' FROM pgpace.item WHERE id = %lld",
            dead + 2);
    long long today =
        tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', idempotency_key => 'e-1')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT (pgpace.item_id_day(%lld) = (now() AT TIME ZONE "
                                  "'UTC')::date)::int",
                                  today),
                     1);

    /* Only the old day without pending or dead items goes, as a whole partition. */
    assert_int_equal(run_retention(c), 1);
    assert_int_equal(day_exists(c, 10), 0);
    assert_int_equal(day_exists(c, 9), 1);
    assert_int_equal(day_exists(c, 8), 1);
    assert_int_equal(day_exists(c, 3), 1);
    assert_int_equal(day_exists(c, 0), 1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 16);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item WHERE id > %lld AND id < "
                                  "%lld",
                                  delivered, delivered + 6),
                     0);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM public.item_deleted"), 0);
    assert_int_equal(run_retention(c), 0);

    /* Its keys go in bounded batches; the kept days' keys stay. */
    assert_int_equal(keys_with_prefix(c, "a"), 5);
    assert_int_equal(run_key_purge(c, "2"), 2);
    assert_int_equal(run_key_purge(c, "10000"), 3);
    assert_int_equal(run_key_purge(c, "10000"), 0);
    assert_int_equal(keys_with_prefix(c, "a"), 0);
    assert_int_equal(keys_with_prefix(c, "b") + keys_with_prefix(c, "c") + keys_with_prefix(c, "d"),
                     15);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item_key_purge"), 0);

    /* Enqueue goes on: a kept day's key still answers with its item, a dropped day's key is
     * forgotten (a new item, of today), a plain item lands in today's partition. */
    assert_int_equal(tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', idempotency_key => "
                                     "'b-1')"),
                     pending + 1);
    assert_int_equal(tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', idempotency_key => "
                                     "'e-1')"),
                     today);
    long long again = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', idempotency_key => "
                                      "'a-1')");
    assert_true(again != delivered + 1);
    long long plain = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"p\": 1}')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                  "q.item_id = i.id WHERE i.id IN (%lld, %lld) AND i.tableoid = "
                                  "to_regclass('pgpace.item_p' || to_char((now() AT TIME ZONE "
                                  "'UTC')::date, 'YYYYMMDD'))",
                                  again, plain),
                     2);

    /* The trigger does see deletes: `dlq purge` deletes its item (and frees its key). Then that
     * day has nothing left that needs it and goes too. */
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "purge", "--customer", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(
        tl_query_int(c, "SELECT count(*) FROM public.item_deleted WHERE id = %lld", dead + 2), 1);
    assert_int_equal(keys_with_prefix(c, "c"), 4);
    assert_int_equal(run_retention(c), 1);
    assert_int_equal(day_exists(c, 8), 0);
    assert_int_equal(day_exists(c, 9), 1);
    /* Delivering the last pending item frees its day as well. */
    tl_exec(c, "DELETE FROM pgpace.queue WHERE item_id = %lld", pending + 3);
    assert_int_equal(run_retention(c), 1);
    assert_int_equal(day_exists(c, 9), 0);
    assert_int_equal(run_key_purge(c, "10000"), 9);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM public.item_deleted"), 1);
}

/* The dispatcher runs retention when it becomes leader, logs the partitions it dropped, and
 * deletes the dropped day's keys batch by batch on its backstop timer. */
static void leader_drops_item_days_and_their_keys(void **state)
{
    (void)state;
    fx *f = fx_start();
    PGconn *c = f->db->conn;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    old_day(c, 10, "a", 30);
    long long kept = old_day(c, 9, "b", 3);
    tl_exec(c,
            "INSERT INTO pgpace.queue (item_id, customer_id, next_action_at, max_attempts) "
            "SELECT id, customer_id, now() + interval '1 hour', 12 FROM pgpace.item WHERE id = "
            "%lld",
            kept + 1);
    fx_run(f, "dispatcher.backstop_scan_ms = 100\n");
    assert_true(fx_wait_log(f, "partitions_dropped=1", 15000));
    assert_true(fx_wait_log(f, "event=idempotency_keys_purged keys=30", 15000));
    assert_int_equal(day_exists(c, 10), 0);
    assert_int_equal(day_exists(c, 9), 1);
    assert_int_equal(keys_with_prefix(c, "a"), 0);
    assert_int_equal(keys_with_prefix(c, "b"), 3);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item_key_purge"), 0);
    fx_stop_service(f, 5000);
    fx_finish(f);
}

/* A database at schema version 6 with items, keys, queue rows and dead letters: 0007 keeps every
 * row and id, moves the keys, and the old table is retained like a day. */
static void upgrade_to_item_partitions_keeps_everything(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    /* Version 6 as `pgpace migrate` of an earlier binary leaves it. */
    migrate_like_an_older_pgpace(c, 6);
    assert_int_equal(tl_query_int(c, "SELECT max(version) FROM pgpace.schema_migration"), 6);
    tl_exec(c, "SELECT pgpace.customer_set(n, rate_per_minute => 60, webhook_url => "
               "'http://127.0.0.1:9/') FROM unnest(ARRAY['acme', 'beta']) n");
    tl_exec(c, "SELECT count(pgpace.enqueue(CASE WHEN g %% 3 = 0 THEN 'beta' ELSE 'acme' END, "
               "jsonb_build_object('n', g), carrier => CASE WHEN g %% 5 = 0 THEN 'k1' END, "
               "idempotency_key => CASE WHEN g %% 2 = 0 THEN 'key-' || g END, priority => g "
               "%% 3)) FROM generate_series(1, 300) g");
    tl_exec(c, "DELETE FROM pgpace.queue WHERE item_id %% 4 = 0");
    tl_exec(c, "WITH d AS (DELETE FROM pgpace.queue WHERE item_id IN (1, 7) RETURNING *) INSERT "
               "INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error) "
               "SELECT item_id, customer_id, nullif(carrier, ''), 12, 'HTTP 500' FROM d");
    char reader[80];
    snprintf(reader, sizeof reader, "%s_reader", db->name);
    tl_exec(c, "CREATE ROLE %s", reader);
    tl_exec(c, "GRANT SELECT ON pgpace.item TO %s", reader);

    static const char *const snapshots[] = {
        /* Without the columns of later migrations (0010: deadlines, supersede keys; 0012:
         * trace context; 0018: events; 0020: order keys). */
        "SELECT md5(string_agg((to_jsonb(t) - '{expires_at,traceparent,tracestate,event_id,"
        "fanout,order_key}'::text[])::"
        "text, ',' ORDER BY t.id)) FROM pgpace.item t",
        "SELECT md5(string_agg((to_jsonb(t) - "
        "'{expires_at,supersede_key,order_key}'::text[])::text, "
        "',' "
        "ORDER BY t.item_id)) FROM pgpace.queue t",
        "SELECT md5(string_agg((to_jsonb(t) - '{order_key,order_action}'::text[])::text, ',' "
        "ORDER BY t.item_id)) FROM pgpace.dead_letter t",
    };
    char *before[3];
    for (int i = 0; i < 3; i++)
        before[i] = tl_query_str(c, "%s", snapshots[i]);
    char *keys_before = tl_query_str(c, "SELECT string_agg(customer_id || ':' || idempotency_key "
                                        "|| ':' || id, ',' ORDER BY id) FROM pgpace.item WHERE "
                                        "idempotency_key IS NOT NULL");
    long long key2 = tl_query_int(c, "SELECT id FROM pgpace.item WHERE idempotency_key = 'key-2'");
    long long key8 = tl_query_int(c, "SELECT id FROM pgpace.item WHERE idempotency_key = 'key-8'");

    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "applied 0007_item_partitions");
    tl_proc_free(&p);

    /* Every row as it was, ids included, and every key in item_key. */
    for (int i = 0; i < 3; i++) {
        char *after = tl_query_str(c, "%s", snapshots[i]);
        assert_string_equal(after, before[i]);
        free(after);
        free(before[i]);
    }
    char *keys_after = tl_query_str(c, "SELECT string_agg(customer_id || ':' || idempotency_key "
                                       "|| ':' || item_id, ',' ORDER BY item_id) FROM "
                                       "pgpace.item_key");
    assert_string_equal(keys_after, keys_before);
    free(keys_after);
    free(keys_before);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item WHERE tableoid = "
                                     "'pgpace.item_legacy'::regclass"),
                     300);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pg_class WHERE oid = "
                                     "'pgpace.item'::regclass AND relkind = 'p'"),
                     1);
    /* Partitions for today and 7 days ahead, as for the attempt log. */
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pg_inherits WHERE inhparent = "
                                     "'pgpace.item'::regclass AND inhrelid::regclass::text ~ "
                                     "'_p[0-9]{8}$'"),
                     8);

    /* Repeated keys answer with the old ids through every path. */
    assert_int_equal(tl_query_int(c, "SELECT pgpace.enqueue('acme', '{}', idempotency_key => "
                                     "'key-2')"),
                     key2);
    char *json = tl_query_str(c, "SELECT id || ' ' || created FROM pgpace.enqueue_json("
                                 "'{\"customer\": \"acme\", \"payload\": {}, "
                                 "\"idempotency_key\": \"key-8\"}')");
    char want[64];
    snprintf(want, sizeof want, "%lld false", key8);
    assert_string_equal(json, want);
    free(json);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", "-"),
                  "{\"customer\":\"acme\",\"payload\":{},\"idempotency_key\":\"key-4\"}\n"
                  "{\"customer\":\"acme\",\"payload\":{},\"idempotency_key\":\"fresh\"}\n"
                  "{\"customer\":\"acme\",\"payload\":{},\"idempotency_key\":\"fresh\"}\n",
                  NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "enqueued 1 item(s)");
    tl_assert_contains(p.out, "(2 duplicate idempotency key(s) skipped)");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 301);
    /* New ids are of today, exact in JSON (below 2^53). */
    long long id = tl_query_int(c, "SELECT pgpace.enqueue('beta', '{}')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT (pgpace.item_id_day(%lld) = (now() AT TIME ZONE "
                                  "'UTC')::date AND %lld < 9007199254740992)::int",
                                  id, id),
                     1);

    /* Privileges as before: producers read nothing, the operator's grant carried over. */
    assert_int_equal(tl_query_int(c, "SELECT has_table_privilege('pgpace_producer', "
                                     "'pgpace.item', 'SELECT')::int + "
                                     "has_table_privilege('pgpace_producer', 'pgpace.item_key', "
                                     "'SELECT')::int + has_function_privilege('pgpace_producer', "
                                     "'pgpace.next_item_id()', 'EXECUTE')::int"),
                     0);
    assert_int_equal(
        tl_query_int(c, "SELECT has_function_privilege('pgpace_producer', "
                        "'pgpace.enqueue(text, jsonb, text, text, timestamptz, "
                        "text, integer, timestamptz, text, text, text, text)', 'EXECUTE')::int + "
                        "has_function_privilege('pgpace_producer', "
                        "'pgpace.enqueue_json(jsonb)', 'EXECUTE')::int"),
        2);
    assert_int_equal(tl_query_int(c,
                                  "SELECT has_table_privilege('%s', 'pgpace.item', "
                                  "'SELECT')::int",
                                  reader),
                     1);

    /* The old ids are retained like a day: kept while any is queued or dead-lettered, or newer
     * than the retention; then dropped whole, and their keys purged. */
    assert_int_equal(run_retention(c), 0);
    tl_exec(c, "DELETE FROM pgpace.queue WHERE item_id < 8589934592");
    assert_int_equal(run_retention(c), 0);
    tl_exec(c, "DELETE FROM pgpace.dead_letter");
    assert_int_equal(run_retention(c), 0);
    tl_exec(c, "UPDATE pgpace.item SET created_at = now() - interval '8 days' WHERE id < "
               "8589934592");
    assert_int_equal(run_retention(c), 1);
    assert_int_equal(tl_query_int(c, "SELECT (to_regclass('pgpace.item_legacy') IS NULL)::int"), 1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 2);
    assert_int_equal(run_key_purge(c, "10000"), 150);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item_key"), 1); /* "fresh" */

    tl_exec(c, "REVOKE ALL ON pgpace.item FROM %s", reader);
    tl_exec(c, "DROP ROLE %s", reader);
}

/* ---- pacing that listens to the receiver (0008) ----------------------------------------- */

/* A database at schema version 17 with customers, queued items (one in flight), a dead letter
 * and keys: 0018 (endpoints) keeps every row; each customer becomes a customer whose only
 * endpoint is itself, enqueued to as before (one item holding its payload, no event), and every
 * item keeps its webhook-id (msg_<its id>). */
static void upgrade_to_endpoints_keeps_everything(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    migrate_like_an_older_pgpace(c, 17);
    tl_exec(c, "INSERT INTO pgpace.customer (name, rate_per_minute, webhook_url, signing_secrets) "
               "SELECT n, 60, 'http://127.0.0.1:9/' || n, "
               "ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] FROM unnest(ARRAY['acme', "
               "'beta']) n");
    tl_exec(c, "INSERT INTO pgpace.item (customer_id, payload, kind, idempotency_key) SELECT "
               "c.id, jsonb_build_object('n', g), 'order.created', 'k' || g FROM "
               "pgpace.customer c, generate_series(1, 5) g");
    tl_exec(c, "INSERT INTO pgpace.item_key (customer_id, idempotency_key, item_id) SELECT "
               "customer_id, idempotency_key, id FROM pgpace.item");
    tl_exec(c, "INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, "
               "next_action_at, max_attempts) SELECT id, customer_id, '', 0, now(), 12 FROM "
               "pgpace.item WHERE (payload->>'n')::int <= 4");
    tl_exec(c, "UPDATE pgpace.queue SET claim_token = 7, claimed_by = 'old', claimed_at = now(), "
               "attempt = 1 WHERE item_id = (SELECT min(item_id) FROM pgpace.queue)");
    tl_exec(c, "INSERT INTO pgpace.dead_letter (item_id, customer_id, attempts, last_error) "
               "SELECT id, customer_id, 3, 'http 500' FROM pgpace.item WHERE payload->>'n' = '5'");
    static const char *const snapshots[] = {
        "SELECT md5(string_agg((to_jsonb(c) - '{parent_id,endpoint_name,event_types,"
        "payload_filter,limits,ratelimit_headers,order_on_dead}'::text[])::text, ',' ORDER BY "
        "c.id)) FROM "
        "pgpace.customer c",
        "SELECT md5(string_agg((to_jsonb(t) - '{event_id,fanout,order_key}'::text[])::text, ',' "
        "ORDER BY t.id)) FROM pgpace.item t",
        "SELECT md5(string_agg((to_jsonb(t) - 'order_key')::text, ',' ORDER BY t.item_id)) FROM "
        "pgpace.queue t",
        "SELECT md5(string_agg((to_jsonb(t) - '{order_key,order_action}'::text[])::text, ',' "
        "ORDER BY t.item_id)) FROM pgpace.dead_letter t",
        "SELECT md5(string_agg(t::text, ',' ORDER BY t.item_id)) FROM pgpace.item_key t",
    };
    enum { N_SNAP = sizeof snapshots / sizeof *snapshots };
    char *before[N_SNAP];
    for (int i = 0; i < N_SNAP; i++)
        before[i] = tl_query_str(c, "%s", snapshots[i]);

    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "applied 0018_endpoints\n");
    tl_proc_free(&p);
    for (int i = 0; i < N_SNAP; i++) {
        char *after = tl_query_str(c, "%s", snapshots[i]);
        assert_string_equal(after, before[i]);
        free(after);
        free(before[i]);
    }
    /* Each customer is its own only endpoint and is enqueued to as before. */
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE parent_id IS "
                                     "NULL AND NOT pgpace.fans_out(id)"),
                     2);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item WHERE event_id IS NOT NULL "
                                     "OR fanout IS NOT NULL OR payload IS NULL"),
                     0);
    long long id = tl_query_int(c, "SELECT pgpace.enqueue('acme', '{\"n\": 6}')");
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                  "q.item_id = i.id WHERE i.id = %lld AND i.payload IS NOT NULL "
                                  "AND i.event_id IS NULL AND i.fanout IS NULL",
                                  id),
                     1);
    /* A repeated key of an old item still returns that item. */
    long long old_k2 = tl_query_int(c, "SELECT i.id FROM pgpace.item i JOIN pgpace.customer cu "
                                       "ON cu.id = i.customer_id WHERE cu.name = 'beta' AND "
                                       "i.idempotency_key = 'k2'");
    assert_int_equal(
        tl_query_int(c, "SELECT pgpace.enqueue('beta', '{}', idempotency_key => 'k2')"), old_k2);
}

/* A database at schema version 7 with customers, scheduler state and attempts of several days:
 * 0008 keeps every row, the new settings start unset (the configured defaults), and the attempt
 * log takes 'throttled' in its old days too, without having been scanned (NOT VALID). */
static void upgrade_to_throttle_keeps_rows(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    migrate_like_an_older_pgpace(c, 7);
    assert_int_equal(tl_query_int(c, "SELECT max(version) FROM pgpace.schema_migration"), 7);
    tl_exec(c, "SELECT pgpace.customer_set(n, rate_per_minute => 60, webhook_url => "
               "'http://127.0.0.1:9/') FROM unnest(ARRAY['acme', 'beta']) n");
    tl_exec(c, "SELECT pgpace.customer_set_timeouts('acme', 1000, 2000)");
    tl_exec(c, "INSERT INTO pgpace.frontier (customer_id, tat, batch_credit, last_tick) SELECT id, "
               "'2030-01-01', 0.5, 3 FROM pgpace.customer WHERE name = 'acme'");
    /* Attempts today, in an older day's partition and in the default partition. */
    char *old_day = tl_query_str(c, "SELECT 'delivery_attempt_p' || to_char((now() AT TIME ZONE "
                                    "'UTC')::date - 3, 'YYYYMMDD')");
    tl_exec(c,
            "CREATE TABLE pgpace.%s PARTITION OF pgpace.delivery_attempt FOR VALUES FROM (((now() "
            "AT TIME ZONE 'UTC')::date - 3)::timestamp AT TIME ZONE 'UTC') TO (((now() AT TIME "
            "ZONE 'UTC')::date - 2)::timestamp AT TIME ZONE 'UTC')",
            old_day);
    tl_exec(c, "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
               "duration_ms, outcome) SELECT g, 1, 1, t, 1, (ARRAY['success', 'retry', 'dead', "
               "'paused', 'released'])[g %% 5 + 1] FROM generate_series(1, 50) g, unnest(ARRAY["
               "now(), now() - interval '3 days', '1990-01-01'::timestamptz]) t");
    static const char *const snapshots[] = {
        "SELECT md5(string_agg((to_jsonb(c) - '{throttle_decrease,throttle_increase,"
        "throttle_floor,disabled_at,disabled_reason,max_age,extra_headers,auth_scheme,"
        "auth_username,auth_secret,client_cert,client_key,oauth_token_url,oauth_scope,proxy,"
        "parent_id,endpoint_name,event_types,payload_filter,limits,ratelimit_headers,"
        "order_on_dead}'::"
        "text[])"
        "::text, ',' ORDER BY "
        "c.id)) FROM pgpace.customer c",
        "SELECT md5(string_agg((to_jsonb(f) - 'effective_rate')::text, ',' ORDER BY "
        "f.customer_id)) FROM pgpace.frontier f",
        "SELECT md5(string_agg(a::text, ',' ORDER BY a.started_at, a.item_id)) FROM "
        "pgpace.delivery_attempt a",
    };
    char *before[3];
    for (int i = 0; i < 3; i++)
        before[i] = tl_query_str(c, "%s", snapshots[i]);

    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "applied 0008_throttle\n");
    tl_proc_free(&p);
    for (int i = 0; i < 3; i++) {
        char *after = tl_query_str(c, "%s", snapshots[i]);
        assert_string_equal(after, before[i]);
        free(after);
        free(before[i]);
    }
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE num_nulls("
                                     "throttle_decrease, throttle_increase, throttle_floor) = 3"),
                     2);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.frontier WHERE effective_rate "
                                     "IS NULL"),
                     1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.delivery_attempt"), 150);

    /* The widened set holds in every partition, old days included; it was not validated (no
     * scan under the lock), though every row passes it. */
    tl_exec(c, "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
               "duration_ms, outcome) SELECT 99, 1, 1, t, 1, 'throttled' FROM unnest(ARRAY[now(), "
               "now() - interval '3 days', '1990-01-01'::timestamptz]) t");
    PGresult *res = PQexec(c, "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, "
                              "started_at, duration_ms, outcome) VALUES (1, 1, 1, now() - "
                              "interval '3 days', 1, 'bogus')");
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    tl_assert_contains(PQresultErrorMessage(res), "delivery_attempt_outcome_valid");
    PQclear(res);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pg_constraint WHERE conname = "
                                  "'delivery_attempt_outcome_valid' AND NOT convalidated AND "
                                  "conrelid IN ('pgpace.delivery_attempt'::regclass, "
                                  "'pgpace.delivery_attempt_default'::regclass, 'pgpace.%s'"
                                  "::regclass)",
                                  old_day),
                     3);
    tl_exec(c, "ALTER TABLE pgpace.delivery_attempt VALIDATE CONSTRAINT "
               "delivery_attempt_outcome_valid");
    free(old_day);

    /* What the CLI shows of it: every setting at its default, the configured rate. */
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "get", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "throttle_decrease  default\n");
    tl_assert_contains(p.out, "connect_timeout_ms 1000\n");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "stats", "--customer", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    /* customer mode rate eff_rate ... */
    const char *row = strstr(p.out, "\nacme ");
    assert_non_null(row);
    char customer[16], mode[16], rate[16], eff[16];
    assert_int_equal(sscanf(row, "%15s %15s %15s %15s", customer, mode, rate, eff), 4);
    assert_string_equal(rate, "60");
    assert_string_equal(eff, "60");
    tl_proc_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(migrate_creates_schema_and_records_it, setup, teardown),
        cmocka_unit_test_setup_teardown(migrate_twice_is_a_noop, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_migrations_are_safe, setup, teardown),
        cmocka_unit_test_setup_teardown(checksum_mismatch_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(released_checksum_of_a_revised_migration_is_accepted,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(newer_schema_is_reported, setup, teardown),
        cmocka_unit_test(unreachable_database_says_where),
        cmocka_unit_test(upgrade_from_every_version_matches_a_fresh_install),
        cmocka_unit_test_setup_teardown(changed_function_file_is_reapplied, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(failing_function_file_rolls_back, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(failing_function_file_rolls_back_the_migration, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(attempt_partitions_ahead_and_retention, setup, teardown),
        cmocka_unit_test_setup_teardown(item_days_are_dropped_whole_when_nothing_needs_them,
                                        setup_migrated, teardown),
        cmocka_unit_test(leader_drops_item_days_and_their_keys),
        cmocka_unit_test_setup_teardown(upgrade_to_item_partitions_keeps_everything, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(upgrade_to_throttle_keeps_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(upgrade_to_endpoints_keeps_everything, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
