/* test_dlq.c - `pgpace dlq list|replay|purge` against a real server, also with endpoints
 * (0018): filtered by customer and endpoint, replayed to the endpoint they failed at, never to a
 * receiver they were not for when their endpoint was deleted. */
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

/* A customer with its own receiver and endpoints crm and gone, one event fanned out to the three
 * and dead-lettered at each (gone's after its attempt, under its own row), a second event still
 * queued at gone when gone is deleted with --drop-queued (endpoint_deleted), and a customer
 * with one receiver. Returns the ids of: acme's own dead delivery, crm's. */
static void endpoint_scene(tl_db *db, long long *own, long long *crm)
{
    PGconn *c = db->conn;
    tl_exec(c, "SELECT pgpace.customer_set('shop', rate_per_minute => 60, webhook_url => "
               "'https://example.com/shop')");
    tl_exec(c, "SELECT pgpace.customer_set('solo', rate_per_minute => 60, webhook_url => "
               "'https://example.com/solo')");
    tl_exec(c, "SELECT pgpace.endpoint_add('shop', 'crm', 'https://example.com/crm', 60)");
    tl_exec(c, "SELECT pgpace.endpoint_add('shop', 'gone', 'https://example.com/gone', 60)");
    long long e1 = tl_query_int(c, "SELECT pgpace.enqueue('shop', '{\"n\": 1}')");
    tl_query_int(c, "SELECT pgpace.enqueue('shop', '{\"n\": 2}')");
    tl_query_int(c, "SELECT pgpace.enqueue('solo', '{\"n\": 3}')");
    /* e1's deliveries, and solo's item, fail for good; gone's after an attempt of its own. */
    tl_exec(c,
            "INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, "
            "duration_ms, http_status, outcome) SELECT q.item_id, q.customer_id, 1, now(), 5, 500, "
            "'dead' FROM pgpace.queue q JOIN pgpace.item i ON i.id = q.item_id WHERE i.event_id = "
            "%lld OR i.payload IS NOT NULL",
            e1);
    tl_exec(c,
            "WITH d AS (DELETE FROM pgpace.queue q USING pgpace.item i WHERE i.id = q.item_id AND "
            "(i.event_id = %lld OR i.payload IS NOT NULL) RETURNING q.*) INSERT INTO "
            "pgpace.dead_letter (item_id, customer_id, attempts, last_status, last_error) SELECT "
            "d.item_id, d.customer_id, 1, 500, 'HTTP 500' FROM d",
            e1);
    assert_int_equal(tl_query_int(c, "SELECT pgpace.endpoint_delete('shop', 'gone', true)"), 1);
    *own = tl_query_int(c,
                        "SELECT i.id FROM pgpace.item i JOIN pgpace.customer c ON c.id = "
                        "i.customer_id WHERE c.name = 'shop' AND i.event_id = %lld AND EXISTS "
                        "(SELECT 1 FROM pgpace.delivery_attempt a WHERE a.item_id = i.id AND "
                        "a.customer_id = c.id)",
                        e1);
    *crm = tl_query_int(c,
                        "SELECT i.id FROM pgpace.item i JOIN pgpace.customer c ON c.id = "
                        "i.customer_id WHERE c.name = 'shop/crm' AND i.event_id = %lld",
                        e1);
}

/* The endpoint column of dead letter `item` in the output of `dlq list` (columns: item customer
 * endpoint carrier ...; the carrier is empty here): "" when not listed. */
static void endpoint_listed(const char *out, long long item, char *customer, char *endpoint)
{
    char key[32];
    snprintf(key, sizeof key, "\n%lld ", item);
    const char *row = strstr(out, key);
    customer[0] = endpoint[0] = '\0';
    if (row)
        assert_int_equal(sscanf(row + 1, "%*s %63s %63s", customer, endpoint), 2);
}

static void endpoints_filtered_replayed_and_refused(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    long long own, crm;
    endpoint_scene(db, &own, &crm);
    /* shop's: its own, crm's, and gone's two (moved to shop's row when gone was deleted). */
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "list", "--customer", "shop"), NULL, NULL);
    assert_int_equal(p.status, 0);
    assert_int_equal(lines(p.out), 1 + 4);
    tl_assert_contains(p.out, "item");
    tl_assert_contains(p.out, "  customer  endpoint  ");
    char cust[64], ep[64];
    endpoint_listed(p.out, own, cust, ep);
    assert_string_equal(cust, "shop");
    assert_string_equal(ep, "default");
    endpoint_listed(p.out, crm, cust, ep);
    assert_string_equal(cust, "shop");
    assert_string_equal(ep, "crm");
    /* gone's two: its failed one (attempted under its row) and its queued one. */
    const char *deleted = strstr(p.out, "(deleted)");
    assert_non_null(deleted);
    assert_non_null(strstr(deleted + 1, "(deleted)"));
    tl_assert_contains(p.out, "endpoint_deleted");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "list", "--customer", "solo"), NULL, NULL);
    assert_int_equal(lines(p.out), 1 + 1);
    tl_assert_contains(p.out, " solo      default ");
    tl_proc_free(&p);
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "dlq", "list", "--customer", "shop", "--endpoint", "crm"),
        NULL, NULL);
    assert_int_equal(lines(p.out), 1 + 1);
    endpoint_listed(p.out, crm, cust, ep);
    assert_string_equal(ep, "crm");
    tl_proc_free(&p);
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "dlq", "list", "--customer", "shop", "--endpoint", "default"),
        NULL, NULL);
    assert_int_equal(lines(p.out), 1 + 1);
    endpoint_listed(p.out, own, cust, ep);
    assert_string_equal(ep, "default");
    tl_proc_free(&p);
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "dlq", "list", "--customer", "shop", "--endpoint", "nope"),
        NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "no dead letters match");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "list", "--endpoint", "crm"), NULL, NULL);
    assert_int_equal(p.status, 2);
    tl_assert_contains(p.err, "--endpoint needs --customer");
    tl_proc_free(&p);

    /* crm's goes back to crm. */
    p = tl_pgpace(
        TL_ARGV("--db", db->conninfo, "dlq", "replay", "--customer", "shop", "--endpoint", "crm"),
        NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "replayed 1 dead letter(s)");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer c ON "
                                  "c.id = q.customer_id WHERE q.item_id = %lld AND c.name = "
                                  "'shop/crm' AND q.attempt = 0",
                                  crm),
                     1);
    /* Only deleted-endpoint ones asked for: refused, exit 1, nothing changed. */
    long long dead_before = tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "replay", "--customer", "shop", "--error",
                          "endpoint_deleted"),
                  NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.out, "replayed 0 dead letter(s)");
    tl_assert_contains(p.err, "pgpace dlq replay: 1 dead letter(s) whose endpoint was deleted "
                              "(endpoint_deleted) were not replayed: they have no receiver");
    tl_assert_contains(p.err, "pgpace recover --customer C --endpoint E --since T");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter"), dead_before);
    /* The customer's: its own goes to its own receiver, gone's two stay (said on stdout). */
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "replay", "--customer", "shop"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "replayed 1 dead letter(s)");
    tl_assert_contains(p.out, "2 dead letter(s) whose endpoint was deleted");
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer c ON "
                                  "c.id = q.customer_id WHERE q.item_id = %lld AND c.name = 'shop'",
                                  own),
                     1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter d JOIN "
                                     "pgpace.customer c ON c.id = d.customer_id WHERE c.name = "
                                     "'shop'"),
                     2);
    /* Without a receiver of its own any more, nothing of the customer's row is replayed. */
    tl_exec(c, "DELETE FROM pgpace.queue q USING pgpace.customer c WHERE c.id = q.customer_id "
               "AND c.name = 'shop'");
    tl_exec(c, "SELECT pgpace.endpoint_delete('shop', 'default')");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "replay", "--customer", "shop"), NULL, NULL);
    assert_int_equal(p.status, 1);
    tl_assert_contains(p.err, "2 dead letter(s) whose endpoint was deleted");
    tl_proc_free(&p);
    /* Purged like any other, by their error. */
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "dlq", "purge", "--customer", "shop", "--error",
                          "endpoint_deleted"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "purged 1 dead letter(s)");
    tl_proc_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(list_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(replay_trickles, setup, teardown),
        cmocka_unit_test_setup_teardown(purge_needs_a_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(endpoints_filtered_replayed_and_refused, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
