/* test_conn_hosts.c - libpq host lists counted and rotated (pgconn's next attempt after one that
 * timed out starts with the next host). */
#include "testlib.h"

#include "conn_hosts.h"

#include <stdlib.h>

static void check_rotate(const char *list, int by, const char *want)
{
    char *got = conn_list_rotate(list, by);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void counts(void **state)
{
    assert_int_equal(conn_list_count(NULL), 0);
    assert_int_equal(conn_list_count(""), 0);
    assert_int_equal(conn_list_count("a"), 1);
    assert_int_equal(conn_list_count("a,b"), 2);
    assert_int_equal(conn_list_count("127.0.0.1,127.0.0.1,db3"), 3);
    assert_int_equal(conn_list_count("a,"), 2); /* libpq reads an empty entry as the default */
}

static void rotates(void **state)
{
    check_rotate("a,b,c", 0, "a,b,c");
    check_rotate("a,b,c", 1, "b,c,a");
    check_rotate("a,b,c", 2, "c,a,b");
    check_rotate("a,b,c", 3, "a,b,c");
    check_rotate("a,b,c", 4, "b,c,a");
    check_rotate("a,b,c", -1, "c,a,b");
    check_rotate("5432,5433", 1, "5433,5432");
    check_rotate("db1.example,10.0.0.2", 1, "10.0.0.2,db1.example");
    check_rotate("a,", 1, ",a");
    check_rotate("only", 7, "only");
    check_rotate("", 3, "");
    assert_null(conn_list_rotate(NULL, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counts),
        cmocka_unit_test(rotates),
    };
    return TL_RUN(tests, NULL, NULL);
}
