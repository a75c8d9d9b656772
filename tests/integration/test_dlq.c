/* test_dlq.c - `pgpace dlq list|replay|purge` against a real server. */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

static int setup(void **state)
{
    tl_db *db = tl_fresh_db(1);
    const char *c[] = {"acme", "beta"};
    for (int i = 0; i < 2; i++) {
        tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "customer", "set", c[i], "--rate", "60",
                                      "--url", "https://example.com/hook"),
                              NULL, NULL);
        assert_int_equal(p.status, 0);
        tl_proc_free(&p);
    }
    /* Five dead letters: acme/big x3 (500, one yesterday), acme/small x1 (404), beta x1. */
    tl_exec(db->conn, "INSERT INTO pgpace.item (customer_id, carrier, payload) "
                      "SELECT c.id, x.carrier, '{}' FROM (VALUES ('acme','big'), ('acme','big'), "
                      "('acme','big'), ('acme','small'), ('beta', NULL)) x(name, carrier) "
                      "JOIN pgpace.customer c ON c.name = x.name");
    tl_exec(
        db->conn,
        "INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_status, "
        "last_error, failed_at) SELECT i.id, i.customer_id, i.carrier, 12, "
        "CASE i.carrier WHEN 'small' THEN 404 ELSE 500 END, "
        "CASE i.carrier WHEN 'small' THEN 'HTTP 404' ELSE 'HTTP 500: Internal Server Error' END, "
        "now() - CASE WHEN i.id = (SELECT min(id) FROM pgpace.item) THEN interval '1 day' "
        "ELSE interval '1 minute' END FROM pgpace.item i");
    *state = db;
    return 0;
}

static int teardown(void **state)
{
    tl_drop_db(*state);
    return 0;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void list_filters(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "list"), NULL, NULL);
    assert_int_equal(p.status, 0);
    assert_int_equal(lines(p.out), 1 + 5);
    tl_assert_contains(p.out, "HTTP 500");
    tl_proc_free(&p);
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "dlq", "list", "--customer", "acme", "--carrier", "big"),
        NULL, NULL);
    assert_int_equal(lines(p.out), 1 + 3);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "list", "--error", "404"), NULL, NULL);
    assert_int_equal(lines(p.out), 1 + 1);
    tl_assert_contains(p.out, "small");
    tl_proc_free(&p);
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "dlq", "list", "--until", "now() is not a timestamp"), NULL,
        NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "invalid input syntax for type timestamp");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "list", "--customer", "nobody"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "no dead letters match");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "list", "--limit", "2"), NULL, NULL);
    assert_int_equal(lines(p.out), 1 + 2);
    tl_proc_free(&p);
}

static void replay_trickles(void **state)
{
    tl_db *db = *state;
    /* 3 big ones at 6/min: due now, +10 s, +20 s; attempts reset; dead letters gone. */
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "replay", "--carrier", "big", "--rate", "6"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "replayed 3 dead letter(s), one becoming due every 10 s");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.dead_letter"), 2);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.queue WHERE attempt = 0 "
                                            "AND claim_token IS NULL AND carrier = 'big'"),
                     3);
    /* Gaps between the replayed items' due times are the trickle period. */
    assert_int_equal(tl_query_int(db->conn, "SELECT round(extract(epoch FROM max(next_action_at) - "
                                            "min(next_action_at)))::int FROM pgpace.queue"),
                     20);
    /* Nothing matches any more: a second replay does nothing. */
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "replay", "--carrier", "big"), NULL, NULL);
    tl_assert_contains(p.out, "replayed 0 dead letter(s)");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "replay", "--rate", "0"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_proc_free(&p);
}

static void purge_needs_a_filter(void **state)
{
    tl_db *db = *state;
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "purge"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--all");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.dead_letter"), 5);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "purge", "--customer", "beta"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "purged 1 dead letter(s)");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(db->conn, "SELECT count(*) FROM pgpace.item i JOIN "
                                            "pgpace.customer c ON c.id = i.customer_id WHERE "
                                            "c.name = 'beta'"),
                     0);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "purge", "--since", "yesterday"), NULL,
                  NULL);
    tl_assert_contains(p.out, "purged 4 dead letter(s)"); /* "yesterday" is midnight: all left */
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "purge", "--all"), NULL, NULL);
    tl_assert_contains(p.out, "purged 0 dead letter(s)");
    tl_proc_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(list_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(replay_trickles, setup, teardown),
        cmocka_unit_test_setup_teardown(purge_needs_a_filter, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
