/* test_migrate.c - `pgpace migrate` against a real server: apply, re-run, concurrency,
 * checksum mismatch, unreachable database. */
#include "testlib.h"

#include "migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int setup(void **state)
{
    *state = tl_fresh_db(0);
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
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "applied 0001_schema");
    tl_proc_free(&p);

    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.schema_migration"),
                     migrate_latest_version());
    assert_int_equal(tl_query_int(db->conn, "SELECT min(length(checksum)) FROM "
                                            "pgpace.schema_migration"),
                     64);
    /* DESIGN §2 physical rules. */
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
    /* Exactly one index on queue besides its primary key: the partial claim index. */
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_index WHERE indrelid = "
                                            "'pgpace.queue'::regclass AND NOT indisprimary"),
                     1);
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
     * migration is applied exactly once. */
    enum { N = 4 };
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "migrate"), NULL, NULL);
            _exit(p.status);
        }
    }
    for (int i = 0; i < N; i++) {
        int st;
        assert_int_equal(waitpid(kids[i], &st, 0), kids[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.schema_migration"),
                     migrate_latest_version());
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
    assert_string_equal(PQgetvalue(res, 0, 0), "2");
    PQclear(res);
    free(sql);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.delivery_attempt"), 1);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pg_inherits WHERE inhparent = "
                                            "'pgpace.delivery_attempt'::regclass AND "
                                            "inhrelid::regclass::text ~ '_p[0-9]{8}$'"),
                     10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(migrate_creates_schema_and_records_it, setup, teardown),
        cmocka_unit_test_setup_teardown(migrate_twice_is_a_noop, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_migrations_are_safe, setup, teardown),
        cmocka_unit_test_setup_teardown(checksum_mismatch_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(newer_schema_is_reported, setup, teardown),
        cmocka_unit_test(unreachable_database_says_where),
        cmocka_unit_test_setup_teardown(attempt_partitions_ahead_and_retention, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
