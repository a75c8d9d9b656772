/* test_shard.c - src/shard.c against a real PostgreSQL: for 100,000 ids (random, negative, 0,
 * the int64 limits and the ids around 2^31 and 2^32) the C hash equals the server's hashint8,
 * and the C shard equals pgpace.shard_of and the shard whose Citus range holds the token, found
 * in SQL over the ranges written out as pg_dist_shard would hold them; pgpace.shard_of's errors;
 * and `pgpace shard` for named customers, by id without a database, and its usage errors. */
#include "testlib.h"

#include "shard.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_IDS 100000

static const int counts[] = {1, 2, 3, 7, 32, 1000, 64000};
#define N_COUNTS ((int)PGP_ARRAY_LEN(counts))

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

static uint64_t xorshift64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The ids: the edges first, then pseudo-random ones of every magnitude and sign. */
static size_t make_ids(int64_t *ids)
{
    size_t n = 0;
    static const int64_t edges[] = {0,
                                    1,
                                    -1,
                                    INT64_MIN,
                                    INT64_MIN + 1,
                                    INT64_MAX,
                                    INT64_MAX - 1,
                                    (int64_t)1 << 62,
                                    -((int64_t)1 << 62)};
    for (size_t i = 0; i < PGP_ARRAY_LEN(edges); i++)
        ids[n++] = edges[i];
    static const int64_t around[] = {(int64_t)1 << 31, (int64_t)1 << 32, (int64_t)1 << 33};
    for (size_t i = 0; i < PGP_ARRAY_LEN(around); i++)
        for (int64_t d = -3; d <= 3; d++) {
            ids[n++] = around[i] + d;
            ids[n++] = -around[i] + d;
        }
    uint64_t s = 0x9e3779b97f4a7c15u;
    while (n < N_IDS) {
        uint64_t r = xorshift64(&s);
        switch (n % 4) {
        case 0: /* any int64 */
            ids[n++] = (int64_t)r;
            break;
        case 1: /* a customer id of a real installation */
            ids[n++] = (int64_t)(r % 10000000) + 1;
            break;
        case 2: /* within 2^34 of 0, either sign */
            ids[n++] = (int64_t)(r % ((uint64_t)1 << 35)) - ((int64_t)1 << 34);
            break;
        default: /* near the high-half boundaries: k * 2^32 + small */
            ids[n++] = (int64_t)((r >> 40) << 32) + (int64_t)(r % 9) - 4;
            break;
        }
    }
    return n;
}

/* "{a,b,...}" of the ids, for a bigint[] parameter. */
static char *id_array(const int64_t *ids, size_t n)
{
    size_t cap = n * 22 + 3, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    buf[len++] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "," : "", (long long)ids[i]);
    buf[len++] = '}';
    buf[len] = '\0';
    return buf;
}

static long long field(PGresult *res, int row, int col)
{
    assert_false(PQgetisnull(res, row, col));
    return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static void c_matches_postgresql_for_100k_ids(void **state)
{
    tl_db *db = *state;
    int64_t *ids = calloc(N_IDS, sizeof *ids);
    assert_non_null(ids);
    size_t n = make_ids(ids);
    char *arr = id_array(ids, n);
    char counts_arr[128];
    size_t len = 0;
    for (int k = 0; k < N_COUNTS; k++)
        len += (size_t)snprintf(counts_arr + len, sizeof counts_arr - len, "%s%d", k ? "," : "{",
                                counts[k]);
    snprintf(counts_arr + len, sizeof counts_arr - len, "}");

    /* Citus's rows of pg_dist_shard for each count: min = -2^31 + i * (2^32 / n) and
     * max = the next min - 1, the last max 2^31 - 1, as create_shards.c writes them. */
    tl_exec(db->conn,
            "CREATE TABLE ranges AS SELECT n, i, -2147483648 + i * (4294967296 / n) AS lo, "
            "CASE WHEN i = n - 1 THEN 2147483647 ELSE -2147483648 + (i + 1) * (4294967296 / n) "
            "- 1 END AS hi FROM unnest('%s'::int[]) n, generate_series(0, n - 1) i",
            counts_arr);
    tl_exec(db->conn, "CREATE INDEX ON ranges (n, lo)");
    tl_exec(db->conn, "ANALYZE ranges");
    /* Per id: its text, hashint8, then per count pgpace.shard_of and the range holding the token
     * (-1 when the range found does not reach up to it), as comma lists in the counts' order. */
    const char *sql =
        "SELECT u.x::text, h.t, "
        "       string_agg(pgpace.shard_of(u.x, c.n)::text, ',' ORDER BY c.k), "
        "       string_agg((SELECT CASE WHEN r.hi >= h.t THEN r.i ELSE -1 END FROM ranges r "
        "                    WHERE r.n = c.n AND r.lo <= h.t ORDER BY r.lo DESC LIMIT 1)::text, "
        "                  ',' ORDER BY c.k) "
        "  FROM unnest($1::bigint[]) WITH ORDINALITY u(x, ord) "
        "  CROSS JOIN LATERAL (SELECT hashint8(u.x) AS t) h "
        "  CROSS JOIN unnest($2::int[]) WITH ORDINALITY c(n, k) "
        " GROUP BY u.ord, u.x, h.t ORDER BY u.ord";
    const char *params[2] = {arr, counts_arr};
    PGresult *res = PQexecParams(db->conn, sql, 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("%s", PQresultErrorMessage(res));
    assert_int_equal(PQntuples(res), (int)n);
    long long mismatches = 0;
    int shard_seen[32] = {0};
    for (int row = 0; row < (int)n; row++) {
        int64_t id = ids[row];
        char want_id[32];
        snprintf(want_id, sizeof want_id, "%lld", (long long)id);
        assert_string_equal(PQgetvalue(res, row, 0), want_id);
        int32_t token = shard_hash_int8(id);
        if (field(res, row, 1) != token) {
            if (mismatches++ < 5)
                print_message("# id %lld: hashint8 %s, C %d\n", (long long)id,
                              PQgetvalue(res, row, 1), (int)token);
            continue;
        }
        const char *fn = PQgetvalue(res, row, 2), *rg = PQgetvalue(res, row, 3);
        for (int k = 0; k < N_COUNTS; k++) {
            char *end_fn, *end_rg;
            long via_fn = strtol(fn, &end_fn, 10), via_ranges = strtol(rg, &end_rg, 10);
            int c = shard_of(id, counts[k]);
            if (via_fn != c || via_ranges != c) {
                if (mismatches++ < 5)
                    print_message("# id %lld, %d shards: C %d, pgpace.shard_of %ld, ranges %ld\n",
                                  (long long)id, counts[k], c, via_fn, via_ranges);
            }
            if (counts[k] == 32)
                shard_seen[c]++;
            fn = *end_fn == ',' ? end_fn + 1 : end_fn;
            rg = *end_rg == ',' ? end_rg + 1 : end_rg;
        }
    }
    PQclear(res);
    assert_int_equal(mismatches, 0);
    /* The ids spread over all 32 shards (a constant answer would also "agree"). */
    for (int i = 0; i < 32; i++)
        assert_true(shard_seen[i] > (int)n / 32 / 2);
    free(arr);
    free(ids);
}

static void shard_of_refuses_bad_input(void **state)
{
    tl_db *db = *state;
    tl_expect_sql_error(db->conn, "SELECT pgpace.shard_of(1, 0)", "22023",
                        "pgpace.shard_of: shard_count must be between 1 and 64000, got 0", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.shard_of(1, 64001)", "22023",
                        "shard_count must be between 1 and 64000, got 64001", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.shard_of(1, -5)", "22023", "got -5", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.shard_of(NULL, 4)", "22004",
                        "pgpace.shard_of: customer_id must not be null", NULL);
    tl_expect_sql_error(db->conn, "SELECT pgpace.shard_of(4, NULL)", "22004",
                        "pgpace.shard_of: shard_count must not be null", NULL);
    assert_int_equal(tl_query_int(db->conn, "SELECT pgpace.shard_of(42, 64000)"),
                     shard_of(42, 64000));
    /* Not public, as nothing of pgpace is. */
    assert_int_equal(tl_query_int(db->conn, "SELECT has_function_privilege('public', "
                                            "'pgpace.shard_of(bigint, integer)', 'EXECUTE')::int"),
                     0);
}

/* The lines `pgpace shard` prints for id `id` under `count` shards. */
static void expect_lines(const char *out, const char *name, long long id, int count)
{
    int32_t token = shard_hash_int8(id), min = 0, max = 0;
    int index = shard_of(id, count);
    assert_true(index >= 0);
    assert_int_equal(shard_range(index, count, &min, &max), 0);
    char want[256];
    snprintf(want, sizeof want,
             "customer  %s\nid        %lld\ntoken     %d\nshard     %d of %d (0-based)\n"
             "range     %d .. %d\n",
             name, id, (int)token, index, count, (int)min, (int)max);
    assert_string_equal(out, want);
}

static void cli_shard_of_named_customers(void **state)
{
    tl_db *db = *state;
    tl_exec(db->conn, "SELECT pgpace.customer_set('acme', rate_per_minute => 60, "
                      "webhook_url => 'https://example.com/hook')");
    /* A second customer with an id past 2^32, where the high half of the id counts. */
    tl_exec(db->conn, "ALTER TABLE pgpace.customer ALTER COLUMN id RESTART WITH 4294967301");
    tl_exec(db->conn, "SELECT pgpace.customer_set('big.one', rate_per_minute => 60, "
                      "webhook_url => 'https://example.com/hook')");
    static const char *const names[] = {"acme", "big.one"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(names); i++) {
        long long id =
            tl_query_int(db->conn, "SELECT id FROM pgpace.customer WHERE name = '%s'", names[i]);
        if (i == 1)
            assert_int_equal(id, 4294967301LL);
        tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "shard", "--shards", "32", names[i]),
                              NULL, NULL);
        assert_int_equal(p.status, 0);
        assert_string_equal(p.err, "");
        expect_lines(p.out, names[i], id, 32);
        /* The database's own function agrees with what was printed. */
        char want[64];
        snprintf(want, sizeof want, "shard     %lld of 32",
                 tl_query_int(db->conn, "SELECT pgpace.shard_of(%lld, 32)", id));
        tl_assert_contains(p.out, want);
        tl_proc_free(&p);

        p = tl_pgpace(
            TL_ARGV("--db", db->conninfo, "shard", "--json", names[i], "--shards", "1000"), NULL,
            NULL);
        assert_int_equal(p.status, 0);
        json_error_t jerr;
        json_t *o = json_loads(p.out, 0, &jerr);
        if (!o)
            fail_msg("not JSON: %s (%s)", p.out, jerr.text);
        int32_t min = 0, max = 0;
        int index = shard_of(id, 1000);
        assert_int_equal(shard_range(index, 1000, &min, &max), 0);
        assert_string_equal(json_string_value(json_object_get(o, "customer")), names[i]);
        assert_int_equal(json_integer_value(json_object_get(o, "id")), id);
        assert_int_equal(json_integer_value(json_object_get(o, "token")), shard_hash_int8(id));
        assert_int_equal(json_integer_value(json_object_get(o, "shard")), index);
        assert_int_equal(json_integer_value(json_object_get(o, "shards")), 1000);
        assert_int_equal(json_integer_value(json_object_get(o, "range_min")), min);
        assert_int_equal(json_integer_value(json_object_get(o, "range_max")), max);
        json_decref(o);
        tl_proc_free(&p);
    }
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", db->conninfo, "shard", "--shards", "4", "nobody"), NULL, NULL);
    assert_int_equal(p.status, 1);
    assert_string_equal(p.out, "");
    tl_assert_contains(p.err, "pgpace shard: unknown customer 'nobody'");
    tl_proc_free(&p);
}

/* --id computes without a database: a conninfo that reaches none still answers. */
static void cli_shard_by_id_needs_no_database(void **state)
{
    (void)state;
    static const char *const nowhere = "host=/nonexistent-pgpace-socket-dir dbname=none";
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", nowhere, "shard", "--shards", "7", "--id", "-1"), NULL, NULL);
    assert_int_equal(p.status, 0);
    expect_lines(p.out, "-", -1, 7);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", nowhere, "shard", "--shards", "64000", "--id",
                          "-9223372036854775808", "--json"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    char want[200];
    int32_t min = 0, max = 0;
    int index = shard_of(INT64_MIN, 64000);
    assert_int_equal(shard_range(index, 64000, &min, &max), 0);
    snprintf(want, sizeof want,
             "{\"customer\":null,\"id\":-9223372036854775808,\"token\":%d,\"shard\":%d,"
             "\"shards\":64000,\"range_min\":%d,\"range_max\":%d}\n",
             (int)shard_hash_int8(INT64_MIN), index, (int)min, (int)max);
    assert_string_equal(p.out, want);
    tl_proc_free(&p);
}

static void cli_shard_usage_errors(void **state)
{
    (void)state;
    static const struct {
        const char *args[6];
        const char *message;
    } cases[] = {
        {{"shard", "--id", "5"}, "--shards is required"},
        {{"shard", "--shards", "0", "--id", "5"},
         "--shards: expected an integer from 1 to 64000, got '0'"},
        {{"shard", "--shards", "64001", "--id", "5"},
         "--shards: expected an integer from 1 to 64000, got '64001'"},
        {{"shard", "--shards", "ten", "--id", "5"}, "--shards: expected an integer"},
        {{"shard", "--shards", "-3", "--id", "5"}, "got '-3'"},
        {{"shard", "--shards", "4", "--id", "9223372036854775808"},
         "--id: expected an integer from -9223372036854775808 to 9223372036854775807, got "
         "'9223372036854775808'"},
        {{"shard", "--shards", "4", "--id", "12abc"}, "--id: expected an integer"},
        {{"shard", "--shards", "4"}, "a customer NAME or --id is required"},
        {{"shard", "--shards", "4", "--id", "5", "acme"}, "give --id or a customer NAME, not both"},
        {{"shard", "--shards", "4", "acme", "extra"}, "unexpected argument 'extra'"},
        {{"shard", "--shards", "4", "no spaces"}, "customer: "},
        {{"shard", "--shards", "4", "--bogus"}, "unknown or incomplete option '--bogus'"},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(cases); i++) {
        const char *argv[10] = {"--db", "host=/nonexistent-pgpace-socket-dir"};
        size_t n = 2;
        for (size_t j = 0; j < 6 && cases[i].args[j]; j++)
            argv[n++] = cases[i].args[j];
        argv[n] = NULL;
        tl_proc p = tl_pgpace(argv, NULL, NULL);
        if (p.status != 2)
            fail_msg("case %zu: exit %d, stderr: %s", i, p.status, p.err);
        assert_string_equal(p.out, "");
        tl_assert_contains(p.err, "pgpace shard: ");
        tl_assert_contains(p.err, cases[i].message);
        tl_assert_contains(p.err, "Try 'pgpace shard --help'.");
        tl_proc_free(&p);
    }
    tl_proc p = tl_pgpace(TL_ARGV("shard", "--help"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "usage: pgpace shard --shards N (--id ID | NAME) [--json]");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--help"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "  shard                   which of N shards");
    tl_proc_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(c_matches_postgresql_for_100k_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(shard_of_refuses_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(cli_shard_of_named_customers, setup, teardown),
        cmocka_unit_test(cli_shard_by_id_needs_no_database),
        cmocka_unit_test(cli_shard_usage_errors),
    };
    return TL_RUN(tests, NULL, NULL);
}
