/* test_queries.c - every query that declares its shape (`-- @params:` / `-- @columns:` in
 * sql/queries/) is what PostgreSQL says it is: prepared on a migrated database and described,
 * it takes the declared number of parameters and returns the declared columns, by name and in
 * order. The C code indexes results by those declarations, so a query edited without its
 * declaration (or the reverse) fails here rather than as a wrong field read at run time. */
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

static void declared_shapes_match_the_server(void **state)
{
    tl_db *db = *state;
    /* The service's statements, and those of migrate that read results, are all declared (their
     * code has no other way to index them). */
    static const char *const must[] = {"run_backstop",
                                       "run_breaker",
                                       "run_carriers",
                                       "run_claim",
                                       "run_customers",
                                       "run_finalize",
                                       "run_finalize_success",
                                       "run_frontier",
                                       "run_key_purge",
                                       "run_metrics",
                                       "run_pace",
                                       "run_partitions",
                                       "run_pause",
                                       "run_retention",
                                       "run_session",
                                       "run_try_lock",
                                       "schema_version",
                                       "http_enqueue",
                                       "migrate_applied",
                                       "migrate_function_applied",
                                       "migrate_function_forget"};
    for (size_t m = 0; m < sizeof must / sizeof *must; m++) {
        bool found = false;
        for (size_t i = 0; i < sql_query_shapes_count; i++)
            found = found || strcmp(sql_query_shapes[i].name, must[m]) == 0;
        if (!found)
            fail_msg("%s.sql declares no shape", must[m]);
    }
    int checked = 0;
    for (size_t i = 0; i < sql_query_shapes_count; i++) {
        const struct sql_query_shape *q = &sql_query_shapes[i];
        char name[80];
        snprintf(name, sizeof name, "shape_%zu", i);
        PGresult *prep = PQprepare(db->conn, name, q->text, 0, NULL);
        if (PQresultStatus(prep) != PGRES_COMMAND_OK)
            fail_msg("%s.sql does not prepare: %s", q->name, PQresultErrorMessage(prep));
        PQclear(prep);
        PGresult *desc = PQdescribePrepared(db->conn, name);
        assert_int_equal(PQresultStatus(desc), PGRES_COMMAND_OK);
        if (q->nparams >= 0 && PQnparams(desc) != q->nparams)
            fail_msg("%s.sql: @params declares %d, the server counts %d", q->name, q->nparams,
                     PQnparams(desc));
        if (q->ncolumns >= 0) {
            if (PQnfields(desc) != q->ncolumns)
                fail_msg("%s.sql: @columns declares %d, the server returns %d", q->name,
                         q->ncolumns, PQnfields(desc));
            for (int c = 0; c < q->ncolumns; c++)
                if (strcmp(PQfname(desc, c), q->columns[c]) != 0)
                    fail_msg("%s.sql: column %d is \"%s\", declared \"%s\"", q->name, c + 1,
                             PQfname(desc, c), q->columns[c]);
        }
        PQclear(desc);
        checked++;
    }
    print_message("# %d declared query shapes checked against the server\n", checked);
    assert_true(checked >= (int)(sizeof must / sizeof *must));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(declared_shapes_match_the_server, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
