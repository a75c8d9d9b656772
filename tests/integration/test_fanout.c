/* test_fanout.c - fan-out of one event to a customer's endpoints on every enqueue path:
 * pgpace.enqueue (SQL), pgpace.enqueue_json (the HTTP path's function) and `pgpace enqueue
 * --file` (the set-based bulk load), each case run through all three against a real server.
 * Routing by subscription (exact, prefix*, empty) and payload filter; the payload stored once
 * (deliveries hold none and point at their event); an event that matches nothing kept with
 * fanout 0; idempotency keys on the event; supersede_key per endpoint, with a claimed delivery
 * left alone; deadlines per endpoint with its max_age, and past at enqueue. Then the same end to
 * end: a running dispatcher, POST /v1/items, `pgpace enqueue` and a bulk file, each endpoint's
 * receiver getting the event's payload under the event's webhook-id, signed with its own secret.
 */
#include "fixture.h"
#include "common.h"
#include "strbuf.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* acme (a customer without a URL: its endpoints receive) has three endpoints:
 *   crm  exact 'order.created'                              (max_attempts 12, the default)
 *   wh   prefix 'order.*' and payload filter {"region":"eu"} (max_attempts 5)
 *   all  no subscription: every kind                         (max_attempts 9)
 * picky has one endpoint, inv, subscribed to 'invoice.*'; solo is a customer without endpoints
 * (its own receiver, the path every customer had before endpoints). */
static void make_customers(PGconn *c, const char *url_base)
{
    tl_exec(c, "SELECT pgpace.customer_set('acme', rate_per_minute => 6000)");
    tl_exec(c,
            "SELECT pgpace.endpoint_add('acme', 'crm', '%s/c/acme-crm', 6000, "
            "event_types => '{order.created}')",
            url_base);
    tl_exec(c,
            "SELECT pgpace.endpoint_add('acme', 'wh', '%s/c/acme-wh', 6000, "
            "event_types => '{order.*}', payload_filter => '{\"region\": \"eu\"}', "
            "max_attempts => 5)",
            url_base);
    tl_exec(c,
            "SELECT pgpace.endpoint_add('acme', 'all', '%s/c/acme-all', 6000, max_attempts => 9)",
            url_base);
    tl_exec(c, "SELECT pgpace.customer_set('picky', rate_per_minute => 60)");
    tl_exec(c,
            "SELECT pgpace.endpoint_add('picky', 'inv', '%s/c/picky-inv', 60, "
            "event_types => '{invoice.*}')",
            url_base);
    tl_exec(c,
            "SELECT pgpace.customer_set('solo', rate_per_minute => 60, webhook_url => '%s/c/solo')",
            url_base);
}

static int setup(void **state)
{
    tl_db *db = tl_fresh_db(1);
    make_customers(db->conn, "https://example.com");
    *state = db;
    return 0;
}

static int teardown(void **state)
{
    tl_drop_db(*state);
    return 0;
}

/* ---- one enqueue through each path ---------------------------------------------------------- */

typedef enum via { VIA_SQL, VIA_JSON, VIA_BULK, VIA_COUNT } via;
static const char *const via_name[VIA_COUNT] = {"sql", "json", "bulk"};

/* What a path said about one enqueue. */
typedef struct outcome {
    long long id;         /* the id it returned (bulk: the customer's newest event, 0: none) */
    long long deliveries; /* the deliveries it reported; -1: none reported (SQL, a duplicate) */
    int created, superseded, expired; /* pgpace.enqueue_json's columns (-1 elsewhere) */
    char summary[512];                /* bulk: the CLI's line */
} outcome;

static PGresult *exec_doc(PGconn *c, const char *sql, const char *doc)
{
    const char *params[] = {doc};
    PGresult *res = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("%s with %s: %s", sql, doc, PQresultErrorMessage(res));
    return res;
}

/* Enqueues the item `doc` (a bulk line: {customer, payload, kind?, ...}) through `v`. */
static outcome enq(tl_db *db, via v, const char *doc)
{
    outcome o = {.deliveries = -1, .created = -1, .superseded = -1, .expired = -1};
    PGresult *res;
    switch (v) {
    case VIA_SQL:
        res = exec_doc(db->conn,
                       "SELECT pgpace.enqueue(d ->> 'customer', d -> 'payload', d ->> 'carrier', "
                       "d ->> 'kind', (d ->> 'run_at')::timestamptz, d ->> 'idempotency_key', 0, "
                       "(d ->> 'expires_at')::timestamptz, d ->> 'supersede_key') "
                       "FROM (SELECT $1::jsonb AS d) x",
                       doc);
        o.id = atoll(PQgetvalue(res, 0, 0));
        PQclear(res);
        break;
    case VIA_JSON:
        res = exec_doc(db->conn,
                       "SELECT id, deliveries, created::int, superseded::int, expired::int "
                       "FROM pgpace.enqueue_json($1::jsonb)",
                       doc);
        o.id = atoll(PQgetvalue(res, 0, 0));
        o.deliveries = PQgetisnull(res, 0, 1) ? -1 : atoll(PQgetvalue(res, 0, 1));
        o.created = atoi(PQgetvalue(res, 0, 2));
        o.superseded = atoi(PQgetvalue(res, 0, 3));
        o.expired = atoi(PQgetvalue(res, 0, 4));
        PQclear(res);
        break;
    default: {
        char line[1024];
        snprintf(line, sizeof line, "%s\n", doc);
        char *file = tl_temp_file(line);
        tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", file), NULL, NULL);
        unlink(file);
        free(file);
        if (p.status != 0)
            fail_msg("enqueue --file %s: %s", doc, p.err);
        snprintf(o.summary, sizeof o.summary, "%s", p.out);
        tl_proc_free(&p);
        const char *f = strstr(o.summary, " event(s) fanned out to ");
        if (f)
            o.deliveries = atoll(f + strlen(" event(s) fanned out to "));
        res = exec_doc(db->conn,
                       "SELECT coalesce(max(i.id), 0) FROM pgpace.item i "
                       "JOIN pgpace.customer c ON c.id = i.customer_id "
                       "WHERE c.name = $1::jsonb ->> 'customer' AND i.fanout IS NOT NULL",
                       doc);
        o.id = atoll(PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    }
    assert_true(o.id > 0);
    return o;
}

/* Every path starts from no items. */
static void clear_items(PGconn *c)
{
    tl_exec(c, "TRUNCATE pgpace.item, pgpace.queue, pgpace.item_key, pgpace.dead_letter");
}

/* The endpoints an event's deliveries went to, "all,crm,wh" ("" for none). */
static char *endpoints_of(PGconn *c, long long event)
{
    return tl_query_str(
        c,
        "SELECT coalesce(string_agg(e.endpoint_name, ',' ORDER BY e.endpoint_name), "
        "'') FROM pgpace.item i JOIN pgpace.customer e ON e.id = i.customer_id "
        "WHERE i.event_id = %lld",
        event);
}

/* The delivery of `event` to endpoint `ep` of acme (0: none). */
static long long delivery_of(PGconn *c, long long event, const char *ep)
{
    return tl_query_int(c,
                        "SELECT coalesce(max(i.id), 0) FROM pgpace.item i "
                        "JOIN pgpace.customer e ON e.id = i.customer_id "
                        "WHERE i.event_id = %lld AND e.name = 'acme/%s'",
                        event, ep);
}

/* ---- routing ------------------------------------------------------------------------------- */

static void routes_by_subscription_and_filter(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    static const struct {
        const char *doc, *endpoints;
        int n;
    } cases[] = {
        /* crm's exact kind, wh's prefix and filter, all's every kind. */
        {"{\"customer\":\"acme\",\"kind\":\"order.created\",\"payload\":{\"region\":\"eu\",\"n\":1}"
         "}",
         "all,crm,wh", 3},
        {"{\"customer\":\"acme\",\"kind\":\"order.paid\",\"payload\":{\"region\":\"eu\",\"n\":2}}",
         "all,wh", 2},
        /* The filter: the payload must contain {"region":"eu"}. */
        {"{\"customer\":\"acme\",\"kind\":\"order.paid\",\"payload\":{\"region\":\"us\",\"n\":3}}",
         "all", 1},
        /* 'order.*' is the prefix 'order.': not 'order' itself; deeper kinds match. */
        {"{\"customer\":\"acme\",\"kind\":\"order\",\"payload\":{\"region\":\"eu\",\"n\":4}}",
         "all", 1},
        {"{\"customer\":\"acme\",\"kind\":\"order.created.v2\",\"payload\":{\"region\":\"eu\"}}",
         "all,wh", 2},
        /* No kind: only a subscription to every kind takes it. */
        {"{\"customer\":\"acme\",\"payload\":{\"region\":\"eu\",\"n\":6}}", "all", 1},
    };
    for (int v = 0; v < VIA_COUNT; v++) {
        clear_items(c);
        int total = 0;
        for (size_t k = 0; k < PGP_ARRAY_LEN(cases); k++) {
            outcome o = enq(db, (via)v, cases[k].doc);
            total += cases[k].n;
            if (v != VIA_SQL && o.deliveries != cases[k].n)
                fail_msg("%s %s: reported %lld deliveries, want %d", via_name[v], cases[k].doc,
                         o.deliveries, cases[k].n);
            if (v == VIA_JSON)
                assert_true(o.created == 1 && o.superseded == 0 && o.expired == 0);
            if (v == VIA_BULK)
                tl_assert_contains(o.summary, "enqueued 1 item(s)");
            char *eps = endpoints_of(c, o.id);
            if (strcmp(eps, cases[k].endpoints) != 0)
                fail_msg("%s %s: delivered to '%s', want '%s'", via_name[v], cases[k].doc, eps,
                         cases[k].endpoints);
            free(eps);
            /* The event: acme's row, the payload, its fanout, no queue row of its own. */
            assert_int_equal(
                tl_query_int(c,
                             "SELECT count(*) FROM pgpace.item i "
                             "JOIN pgpace.customer a ON a.id = i.customer_id AND a.name = 'acme' "
                             "WHERE i.id = %lld AND i.payload = ($$%s$$::jsonb -> 'payload') "
                             "AND i.event_id IS NULL AND i.fanout = %d "
                             "AND NOT EXISTS (SELECT 1 FROM pgpace.queue q WHERE q.item_id = i.id)",
                             o.id, cases[k].doc, cases[k].n),
                1);
            /* Its deliveries: no payload, its kind, queued for their endpoint with its
             * max_attempts, never claimed. */
            assert_int_equal(
                tl_query_int(c,
                             "SELECT count(*) FROM pgpace.item i "
                             "JOIN pgpace.item ev ON ev.id = i.event_id "
                             "JOIN pgpace.queue q ON q.item_id = i.id "
                             "JOIN pgpace.customer e ON e.id = i.customer_id "
                             "WHERE i.event_id = %lld AND i.payload IS NULL AND i.fanout IS NULL "
                             "AND i.kind IS NOT DISTINCT FROM ev.kind AND q.customer_id = e.id "
                             "AND q.max_attempts = e.max_attempts AND q.claim_token IS NULL "
                             "AND q.attempt = 0 AND q.supersede_key IS NULL",
                             o.id),
                cases[k].n);
        }
        /* The payload stored once per event, never per delivery. */
        assert_int_equal(
            tl_query_int(c, "SELECT count(*) FROM pgpace.item WHERE payload IS NOT NULL"),
            (long long)PGP_ARRAY_LEN(cases));
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item WHERE payload IS NULL "
                                         "AND event_id IS NOT NULL"),
                         total);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue"), total);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    }
}

/* An event that matches no endpoint is kept (for `pgpace recover` to back-fill one added
 * later), with fanout 0 and nothing queued. */
static void unmatched_event_is_kept(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    const char *doc = "{\"customer\":\"picky\",\"kind\":\"order.created\",\"payload\":{\"n\":1}}";
    for (int v = 0; v < VIA_COUNT; v++) {
        clear_items(c);
        outcome o = enq(db, (via)v, doc);
        if (v == VIA_JSON)
            assert_true(o.deliveries == 0 && o.created == 1 && o.expired == 0);
        if (v == VIA_BULK)
            tl_assert_contains(o.summary, "; 1 event(s) fanned out to 0 deliveries, 1 matched no "
                                          "endpoint (kept as events)");
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.item WHERE id = %lld AND "
                                      "fanout = 0 AND payload = '{\"n\": 1}'",
                                      o.id),
                         1);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 1);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue"), 0);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter"), 0);
        /* The subscription it lacks: an invoice goes out. */
        o = enq(db, (via)v, "{\"customer\":\"picky\",\"kind\":\"invoice.paid\",\"payload\":{}}");
        char *eps = endpoints_of(c, o.id);
        assert_string_equal(eps, "inv");
        free(eps);
    }
}

/* ---- keys ---------------------------------------------------------------------------------- */

static void idempotency_key_acts_on_the_event(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    const char *first = "{\"customer\":\"acme\",\"kind\":\"order.created\",\"idempotency_key\":"
                        "\"order-1\",\"payload\":{\"region\":\"eu\",\"v\":1}}";
    const char *again = "{\"customer\":\"acme\",\"kind\":\"order.paid\",\"idempotency_key\":"
                        "\"order-1\",\"payload\":{\"region\":\"eu\",\"v\":2}}";
    for (int v = 0; v < VIA_COUNT; v++) {
        clear_items(c);
        outcome o1 = enq(db, (via)v, first);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 4);
        /* The key names the event. */
        assert_int_equal(tl_query_int(c, "SELECT k.item_id FROM pgpace.item_key k "
                                         "JOIN pgpace.customer a ON a.id = k.customer_id "
                                         "WHERE a.name = 'acme' AND k.idempotency_key = 'order-1'"),
                         o1.id);
        outcome o2 = enq(db, (via)v, again);
        assert_int_equal(o2.id, o1.id);
        if (v == VIA_JSON)
            assert_true(o2.created == 0 && o2.superseded == 0 && o2.deliveries == -1);
        if (v == VIA_BULK) {
            tl_assert_contains(o2.summary, "enqueued 0 item(s)");
            tl_assert_contains(o2.summary, "(1 duplicate idempotency key(s) skipped)");
            assert_null(strstr(o2.summary, "fanned out"));
        }
        /* Nothing created: the first event, its three deliveries, as they were. */
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 4);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue"), 3);
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.item WHERE payload->>'v' = '1' "
                                      "AND kind = 'order.created'"),
                         1);
        /* Keys are per customer: picky's event with the same key is its own. */
        outcome o3 = enq(db, (via)v,
                         "{\"customer\":\"picky\",\"kind\":\"invoice.paid\",\"idempotency_key\":"
                         "\"order-1\",\"payload\":{}}");
        assert_true(o3.id != o1.id);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 6);
    }
}

/* The claim statement's mark on a queue row (sql/queries/run_claim.sql): leased, attempted, and
 * the supersede key cleared (a receiver may have seen its webhook-id). */
static void claim(PGconn *c, long long item)
{
    tl_exec(c,
            "UPDATE pgpace.queue SET next_action_at = now() + interval '1 minute', "
            "claim_token = 42, claimed_by = 'test', claimed_at = now(), attempt = attempt + 1, "
            "supersede_key = NULL WHERE item_id = %lld",
            item);
}

static void supersede_key_acts_per_endpoint(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    const char *v1 = "{\"customer\":\"acme\",\"kind\":\"order.created\",\"supersede_key\":\"o-7\","
                     "\"payload\":{\"region\":\"eu\",\"v\":1}}";
    const char *v2 = "{\"customer\":\"acme\",\"kind\":\"order.created\",\"supersede_key\":\"o-7\","
                     "\"payload\":{\"region\":\"eu\",\"v\":2}}";
    /* order.paid from the US: only 'all' wants it. */
    const char *v3 = "{\"customer\":\"acme\",\"kind\":\"order.paid\",\"supersede_key\":\"o-7\","
                     "\"payload\":{\"region\":\"us\",\"v\":3}}";
    for (int v = 0; v < VIA_COUNT; v++) {
        clear_items(c);
        outcome e1 = enq(db, (via)v, v1);
        long long crm = delivery_of(c, e1.id, "crm"), wh = delivery_of(c, e1.id, "wh"),
                  all = delivery_of(c, e1.id, "all");
        assert_true(crm > 0 && wh > 0 && all > 0);
        assert_int_equal(
            tl_query_int(c, "SELECT count(*) FROM pgpace.queue WHERE supersede_key = 'o-7'"), 3);
        /* crm's delivery was claimed: it stays with the first event. */
        claim(c, crm);

        outcome e2 = enq(db, (via)v, v2);
        assert_true(e2.id != e1.id); /* a new event, whose payload the moved deliveries send */
        if (v == VIA_JSON)
            assert_true(e2.created == 1 && e2.superseded == 1 && e2.deliveries == 3);
        if (v == VIA_BULK)
            tl_assert_contains(e2.summary, "; 1 superseded a queued item");
        /* wh and all: the same deliveries (ids, queue rows never claimed), now the new event's. */
        assert_int_equal(delivery_of(c, e2.id, "wh"), wh);
        assert_int_equal(delivery_of(c, e2.id, "all"), all);
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.queue WHERE item_id IN (%lld, "
                                      "%lld) AND supersede_key = 'o-7' AND claim_token IS NULL",
                                      wh, all),
                         2);
        /* crm: the claimed delivery still the first event's (its payload kept), and a new one. */
        assert_int_equal(delivery_of(c, e1.id, "crm"), crm);
        assert_int_equal(
            tl_query_int(c, "SELECT claim_token FROM pgpace.queue WHERE item_id = %lld", crm), 42);
        long long crm2 = delivery_of(c, e2.id, "crm");
        assert_true(crm2 > 0 && crm2 != crm);
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld AND "
                                      "supersede_key = 'o-7' AND claim_token IS NULL",
                                      crm2),
                         1);
        assert_int_equal(tl_query_int(c, "SELECT fanout FROM pgpace.item WHERE id = %lld", e2.id),
                         3);
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.item WHERE id = %lld AND "
                                      "payload->>'v' = '1'",
                                      e1.id),
                         1);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue"), 4);

        /* Per endpoint: the third event reaches 'all' only, and moves only its delivery. */
        outcome e3 = enq(db, (via)v, v3);
        assert_int_equal(delivery_of(c, e3.id, "all"), all);
        assert_int_equal(delivery_of(c, e2.id, "wh"), wh);
        assert_int_equal(delivery_of(c, e2.id, "crm"), crm2);
        assert_int_equal(tl_query_int(c, "SELECT fanout FROM pgpace.item WHERE id = %lld", e3.id),
                         1);
        assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue"), 4);
        /* The moved delivery takes the new event's kind. */
        char *kind = tl_query_str(c, "SELECT kind FROM pgpace.item WHERE id = %lld", all);
        assert_string_equal(kind, "order.paid");
        free(kind);
    }
}

/* ---- deadlines ----------------------------------------------------------------------------- */

/* Each delivery's deadline is least(expires_at, due + its endpoint's max_age), due being the
 * later of run_at and the enqueue. A max_age (more than 0) counts from then on, so at enqueue
 * only an expires_at already past can have expired them, every delivery alike. */
static void deadlines_per_endpoint(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "SELECT pgpace.customer_set_max_age('acme/crm', '1 minute')");
    tl_exec(c, "SELECT pgpace.customer_set_max_age('acme/wh', '1 hour')");
    const char *later = "{\"customer\":\"acme\",\"kind\":\"order.created\",\"payload\":"
                        "{\"region\":\"eu\"},\"run_at\":\"2100-01-01T00:00:00Z\","
                        "\"expires_at\":\"2100-01-01T00:30:00Z\"}";
    const char *past = "{\"customer\":\"acme\",\"kind\":\"order.created\",\"payload\":"
                       "{\"region\":\"eu\"},\"run_at\":\"2000-01-01T00:00:00Z\","
                       "\"expires_at\":\"2000-01-01T00:30:00Z\"}";
    for (int v = 0; v < VIA_COUNT; v++) {
        clear_items(c);
        outcome o = enq(db, (via)v, later);
        char *d = tl_query_str(
            c,
            "SELECT string_agg(e.endpoint_name || '=' || to_char(q.expires_at AT TIME ZONE 'UTC', "
            "'HH24:MI') || '/' || to_char(q.next_action_at AT TIME ZONE 'UTC', 'YYYY HH24:MI'), "
            "',' ORDER BY e.endpoint_name) FROM pgpace.item i "
            "JOIN pgpace.queue q ON q.item_id = i.id "
            "JOIN pgpace.customer e ON e.id = i.customer_id WHERE i.event_id = %lld",
            o.id);
        /* crm: run_at + 1 minute; wh: the expires_at, before run_at + 1 hour; all: no max_age. */
        assert_string_equal(d, "all=00:30/2100 00:00,crm=00:01/2100 00:00,wh=00:30/2100 00:00");
        free(d);
        /* The deliveries keep the expires_at as enqueued. */
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.item WHERE event_id = %lld AND "
                                      "expires_at = '2100-01-01T00:30:00Z'",
                                      o.id),
                         3);

        /* Past at enqueue: every delivery dead-lettered as expired, nothing queued, the event
         * kept (the dead letters send its payload on `dlq replay`). */
        o = enq(db, (via)v, past);
        if (v == VIA_JSON)
            assert_true(o.expired == 1 && o.created == 1 && o.deliveries == 3);
        if (v == VIA_BULK)
            tl_assert_contains(o.summary, "; 1 past their deadline, dead-lettered as expired; 1 "
                                          "event(s) fanned out to 3 deliveries");
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.dead_letter d "
                                      "JOIN pgpace.item i ON i.id = d.item_id "
                                      "WHERE i.event_id = %lld AND d.last_error = 'expired' "
                                      "AND d.customer_id = i.customer_id AND d.attempts = 0",
                                      o.id),
                         3);
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i "
                                      "ON i.id = q.item_id WHERE i.event_id = %lld",
                                      o.id),
                         0);
        assert_int_equal(tl_query_int(c, "SELECT fanout FROM pgpace.item WHERE id = %lld", o.id),
                         3);

        /* One endpoint's max_age alone past at enqueue: its months and days all but cancel out
         * (5 days by the CHECK's 30-day months, yet a year back and 365 days on is at most
         * now), so crm's delivery is dead-lettered while wh's and all's are queued. */
        tl_exec(c, "SELECT pgpace.customer_set_max_age('acme/crm', '-12 months +365 days')");
        o = enq(
            db, (via)v,
            "{\"customer\":\"acme\",\"kind\":\"order.created\",\"payload\":{\"region\":\"eu\"}}");
        if (v == VIA_JSON)
            assert_true(o.expired == 0 && o.created == 1 && o.deliveries == 3);
        if (v == VIA_BULK) {
            tl_assert_contains(o.summary, "enqueued 1 item(s)");
            tl_assert_contains(o.summary, "; 1 event(s) fanned out to 3 deliveries");
        }
        char *dead =
            tl_query_str(c,
                         "SELECT string_agg(e.endpoint_name, ',') FROM pgpace.dead_letter d "
                         "JOIN pgpace.item i ON i.id = d.item_id "
                         "JOIN pgpace.customer e ON e.id = d.customer_id "
                         "WHERE i.event_id = %lld AND d.last_error = 'expired'",
                         o.id);
        assert_string_equal(dead, "crm");
        free(dead);
        assert_int_equal(tl_query_int(c,
                                      "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i "
                                      "ON i.id = q.item_id WHERE i.event_id = %lld",
                                      o.id),
                         2);
        tl_exec(c, "SELECT pgpace.customer_set_max_age('acme/crm', '1 minute')");
    }
}

/* ---- the bulk file ------------------------------------------------------------------------- */

/* Many lines in one load, customers with and without endpoints mixed: each line of acme or
 * picky one event, solo's lines plain items as before endpoints. */
static void bulk_file_mixes_events_and_plain_items(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    const char *lines =
        "{\"customer\":\"solo\",\"payload\":{\"line\":1}}\n"
        "{\"customer\":\"acme\",\"kind\":\"order.created\",\"idempotency_key\":\"a\","
        "\"payload\":{\"region\":\"eu\",\"line\":2}}\n"
        /* The key again in the same file: its first line wins. */
        "{\"customer\":\"acme\",\"kind\":\"order.created\",\"idempotency_key\":\"a\","
        "\"payload\":{\"region\":\"eu\",\"line\":3}}\n"
        "{\"customer\":\"picky\",\"kind\":\"order.created\",\"payload\":{\"line\":4}}\n"
        "{\"customer\":\"solo\",\"idempotency_key\":\"a\",\"payload\":{\"line\":5}}\n"
        "{\"customer\":\"acme\",\"kind\":\"invoice.paid\",\"expires_at\":\"2000-01-02T00:00:00Z\","
        "\"run_at\":\"2000-01-01T00:00:00Z\",\"payload\":{\"line\":6}}\n"
        "{\"customer\":\"acme\",\"kind\":\"order.paid\",\"carrier\":\"shop\",\"priority\":7,"
        "\"payload\":{\"region\":\"eu\",\"line\":7}}\n";
    char *file = tl_temp_file(lines);
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", file), NULL, NULL);
    if (p.status != 0)
        fail_msg("enqueue --file: %s", p.err);
    /* Lines 1, 2, 4, 5, 7 new; 3 a duplicate; 6 expired. Events: 2 (3 deliveries), 4 (none),
     * 6 (all: expired), 7 (wh and all). */
    tl_assert_contains(p.out, "enqueued 5 item(s) from ");
    tl_assert_contains(p.out, "(1 duplicate idempotency key(s) skipped); 1 past their deadline, "
                              "dead-lettered as expired; 4 event(s) fanned out to 6 deliveries, "
                              "1 matched no endpoint (kept as events)\n");
    tl_proc_free(&p);
    unlink(file);
    free(file);

    /* solo: plain items with their payloads and queue rows, as every customer had. */
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                     "q.item_id = i.id AND q.customer_id = i.customer_id "
                                     "JOIN pgpace.customer s ON s.id = i.customer_id AND s.name = "
                                     "'solo' WHERE i.payload IS NOT NULL AND i.event_id IS NULL "
                                     "AND i.fanout IS NULL"),
                     2);
    /* Events: the payload once each, with their fanout. */
    char *ev = tl_query_str(c, "SELECT string_agg((payload->>'line') || ':' || fanout, ',' "
                               "ORDER BY id) FROM pgpace.item WHERE fanout IS NOT NULL");
    assert_string_equal(ev, "2:3,4:0,6:1,7:2");
    free(ev);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item WHERE payload IS NULL"), 6);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter WHERE "
                                     "last_error = 'expired'"),
                     1);
    /* 2 solo + 3 + 2 deliveries queued. */
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue"), 7);
    /* Line 7: the deliveries carry its carrier and priority; their queue rows too. */
    assert_int_equal(tl_query_int(c,
                                  "SELECT count(*) FROM pgpace.item i JOIN pgpace.queue q ON "
                                  "q.item_id = i.id JOIN pgpace.item ev ON ev.id = i.event_id "
                                  "WHERE ev.payload->>'line' = '7' AND i.carrier = 'shop' "
                                  "AND q.carrier = 'shop' AND i.priority = 7 AND q.priority = 7"),
                     2);
    /* The keys: acme's on its event, solo's on its item. */
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item_key k JOIN pgpace.item i "
                                     "ON i.id = k.item_id AND i.customer_id = k.customer_id "
                                     "WHERE k.idempotency_key = 'a' AND i.payload IS NOT NULL"),
                     2);

    /* A NOTIFY per endpoint and carrier at commit, as each enqueue sends. */
    PGconn *l = PQconnectdb(db->conninfo);
    assert_int_equal(PQstatus(l), CONNECTION_OK);
    tl_exec(l, "LISTEN pgpace_enqueue");
    file = tl_temp_file("{\"customer\":\"acme\",\"kind\":\"order.created\",\"payload\":"
                        "{\"region\":\"eu\"}}\n");
    p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", file), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    unlink(file);
    free(file);
    char *want = tl_query_str(c, "SELECT string_agg(id || ' ', ',' ORDER BY id) FROM "
                                 "pgpace.customer WHERE parent_id = (SELECT id FROM "
                                 "pgpace.customer WHERE name = 'acme')");
    strbuf got = {0};
    long long t0 = tl_now_ms();
    int n = 0;
    while (n < 3 && tl_now_ms() - t0 < 5000) {
        PQclear(PQexec(l, "SELECT 1"));
        assert_int_equal(PQconsumeInput(l), 1);
        PGnotify *nt;
        while ((nt = PQnotifies(l)) != NULL) {
            strbuf_printf(&got, "%s%s", n++ ? "," : "", nt->extra);
            PQfreemem(nt);
        }
        if (n < 3)
            usleep(20000);
    }
    /* In endpoint order (the statement sends them so); compared sorted all the same. */
    char *sorted = tl_query_str(c,
                                "SELECT string_agg(x, ',' ORDER BY x::bigint) FROM "
                                "unnest(string_to_array('%s', ',')) x",
                                strbuf_str(&got) ? strbuf_str(&got) : "");
    assert_string_equal(sorted, want);
    free(sorted);
    free(want);
    strbuf_free(&got);
    PQfinish(l);
}

/* Lines with both keys, or with a supersede_key, go one by one (pgpace.enqueue_item): their
 * events are counted all the same. */
static void bulk_file_keyed_lines_one_by_one(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    const char *lines =
        "{\"customer\":\"acme\",\"kind\":\"order.created\",\"idempotency_key\":\"m\","
        "\"supersede_key\":\"s\",\"payload\":{\"region\":\"eu\",\"v\":1}}\n"
        "{\"customer\":\"acme\",\"kind\":\"order.created\",\"idempotency_key\":\"m\","
        "\"supersede_key\":\"s\",\"payload\":{\"region\":\"eu\",\"v\":2}}\n"
        "{\"customer\":\"acme\",\"kind\":\"order.created\",\"supersede_key\":\"s\","
        "\"payload\":{\"region\":\"eu\",\"v\":3}}\n"
        "{\"customer\":\"picky\",\"kind\":\"x\",\"idempotency_key\":\"m\",\"payload\":{}}\n";
    char *file = tl_temp_file(lines);
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", file), NULL, NULL);
    if (p.status != 0)
        fail_msg("enqueue --file: %s", p.err);
    /* Line 1 new, 2 a duplicate, 3 supersedes all three deliveries, 4 matches nothing. */
    tl_assert_contains(p.out, "enqueued 2 item(s) from ");
    tl_assert_contains(p.out, "(1 duplicate idempotency key(s) skipped); 1 superseded a queued "
                              "item; 3 event(s) fanned out to 6 deliveries, 1 matched no endpoint");
    tl_proc_free(&p);
    unlink(file);
    free(file);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue"), 3);
    /* Every queued delivery sends v 3. */
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON "
                                     "i.id = q.item_id JOIN pgpace.item ev ON ev.id = i.event_id "
                                     "WHERE ev.payload->>'v' = '3'"),
                     3);
}

/* An endpoint is not enqueued to: its customer is, on every path. */
static void endpoint_names_are_refused(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_expect_sql_error(c, "SELECT pgpace.enqueue('acme/crm', '{}')", "23503",
                        "unknown customer 'acme/crm'", NULL);
    tl_expect_sql_error(c,
                        "SELECT * FROM pgpace.enqueue_json('{\"customer\":\"acme/crm\","
                        "\"payload\":{}}')",
                        "23503", "field customer: unknown customer 'acme/crm'", NULL);
    char *file = tl_temp_file("{\"customer\":\"solo\",\"payload\":{}}\n"
                              "{\"customer\":\"acme/crm\",\"payload\":{}}\n");
    tl_proc p = tl_pgpace(TL_ARGV("--db", db->conninfo, "enqueue", "--file", file), NULL, NULL);
    assert_int_not_equal(p.status, 0);
    tl_assert_contains(p.err, "line 2: field customer: unknown customer 'acme/crm' (enqueue to "
                              "the customer, the part before /");
    tl_assert_contains(p.err, "nothing was enqueued");
    tl_proc_free(&p);
    unlink(file);
    free(file);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 0);
}

/* ---- end to end ---------------------------------------------------------------------------- */

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    strbuf *sb = arg;
    strbuf_append(sb, data, size * n);
    return size * n;
}

/* POST /v1/items; returns the status, the body in *out (owned). */
static long post_item(int port, const char *body, char **out)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/items", port);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    strbuf sb = {0};
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, "Authorization: Bearer fan-token");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sb);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    *out = strdup(strbuf_str(&sb) ? strbuf_str(&sb) : "");
    strbuf_free(&sb);
    return status;
}

static void delivered_end_to_end(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    char base[128];
    receiver_url(f->recv, "", base, sizeof base);
    make_customers(c, base);
    fx_run(f, "http.enqueue_token = fan-token\n");
    int port = fx_admin_port(f);
    /* The listener comes up before the database session that answers POSTs (503 until then). */
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));

    /* HTTP: the event's id, and the deliveries it made. */
    char *out = NULL;
    assert_int_equal(post_item(port,
                               "{\"customer\":\"acme\",\"kind\":\"order.created\","
                               "\"payload\":{\"region\":\"eu\",\"n\":1}}",
                               &out),
                     201);
    long long e1 = 0;
    assert_int_equal(sscanf(out, "{\"id\":%lld,", &e1), 1);
    char want[128];
    snprintf(want, sizeof want, "{\"id\":%lld,\"deliveries\":3,\"estimated_send_at\":null}", e1);
    assert_string_equal(out, want);
    free(out);
    /* A repeated key: the same event, nothing made. */
    assert_int_equal(post_item(port,
                               "{\"customer\":\"picky\",\"kind\":\"invoice.paid\","
                               "\"idempotency_key\":\"i-1\",\"payload\":{\"n\":0}}",
                               &out),
                     201);
    long long e0 = 0;
    assert_int_equal(sscanf(out, "{\"id\":%lld,\"deliveries\":1,", &e0), 1);
    free(out);
    assert_int_equal(post_item(port,
                               "{\"customer\":\"picky\",\"kind\":\"invoice.paid\","
                               "\"idempotency_key\":\"i-1\",\"payload\":{\"n\":0}}",
                               &out),
                     200);
    snprintf(want, sizeof want, "{\"id\":%lld,\"duplicate\":true,\"estimated_send_at\":null}", e0);
    assert_string_equal(out, want);
    free(out);

    /* CLI: prints the event's id. */
    tl_proc p = tl_pgpace(
        TL_ARGV("--db", f->db->conninfo, "enqueue", "acme", "{\"n\": 2}", "--kind", "order.paid"),
        NULL, NULL);
    assert_int_equal(p.status, 0);
    long long e2 = atoll(p.out);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT fanout FROM pgpace.item WHERE id = %lld", e2), 1);

    /* A bulk file: two events. */
    char *file = tl_temp_file("{\"customer\":\"acme\",\"kind\":\"order.created\",\"payload\":"
                              "{\"region\":\"eu\",\"n\":3}}\n"
                              "{\"customer\":\"acme\",\"kind\":\"order.paid\",\"payload\":"
                              "{\"region\":\"us\",\"n\":4}}\n");
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "enqueue", "--file", file), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "2 event(s) fanned out to 4 deliveries");
    tl_proc_free(&p);
    unlink(file);
    free(file);

    /* n1: crm, wh, all; n2: all; n3: crm, wh, all; n4: all; picky's n0: inv. */
    assert_int_equal(receiver_wait(f->recv, "/c/acme-", 8, 20000), 8);
    assert_int_equal(receiver_wait(f->recv, "/c/picky-inv", 1, 20000), 1);
    assert_int_equal(receiver_count(f->recv, "/c/acme-crm"), 2);
    assert_int_equal(receiver_count(f->recv, "/c/acme-wh"), 2);
    assert_int_equal(receiver_count(f->recv, "/c/acme-all"), 4);
    /* Each request: its event's payload, under its event's webhook-id, signed with its own
     * endpoint's secret. */
    receiver_request rq;
    int checked = 0;
    for (size_t i = 0; receiver_get(f->recv, i, &rq) == 0; i++) {
        if (strncmp(rq.path, "/c/acme-", 8) != 0) {
            free(rq.body);
            continue;
        }
        long long ev = 0;
        assert_int_equal(sscanf(rq.webhook_id, "msg_%lld", &ev), 1);
        char *body = tl_query_str(c,
                                  "SELECT payload::text FROM pgpace.item WHERE id = %lld AND "
                                  "fanout IS NOT NULL",
                                  ev);
        assert_string_equal(rq.body, body);
        free(body);
        char *secret = tl_query_str(c,
                                    "SELECT signing_secrets[1] FROM pgpace.customer WHERE name = "
                                    "'acme/' || '%s'",
                                    rq.path + 8);
        assert_true(tl_verify_signature(secret, rq.webhook_id, rq.webhook_timestamp, rq.body,
                                        rq.webhook_signature));
        free(secret);
        if (ev == e1 || ev == e2)
            checked++;
        free(rq.body);
    }
    assert_int_equal(checked, 4);
    /* Everything delivered: the queue drains, each delivery's attempt recorded under it. */
    assert_int_equal(tl_wait_query_at_least(c, 9, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE outcome = 'success'"),
                     9);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                     "pgpace.item i ON i.id = a.item_id WHERE i.event_id IS NULL"),
                     0);
}

static int e2e_setup(void **state)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return -1;
    return fx_setup(state);
}

static int e2e_teardown(void **state)
{
    int rc = fx_teardown(state);
    curl_global_cleanup();
    return rc;
}

/* A delivery queued since an earlier day that a new event supersedes moves to the event's day
 * (a new id: it was never claimed), so that retention, which keeps a day while its own ids are
 * queued, can never drop the event's payload from under it. */
static void superseded_delivery_moves_to_the_events_day(void **state)
{
    tl_db *db = *state;
    PGconn *c = db->conn;
    tl_exec(c, "SELECT pgpace.customer_set('sx', rate_per_minute => 60)");
    tl_exec(c, "SELECT pgpace.endpoint_add('sx', 'a', 'https://example.com/a', 60)");
    tl_exec(c, "SELECT pgpace.create_item_partition((now() AT TIME ZONE 'UTC')::date - 1)");
    long long first =
        tl_query_int(c, "SELECT pgpace.item_day_first_id((now() AT TIME ZONE 'UTC')::date - 1)");
    /* Yesterday's event and its delivery, queued with the key. */
    tl_exec(c,
            "INSERT INTO pgpace.item (id, customer_id, payload, fanout) SELECT %lld, id, "
            "'{\"v\": 1}', 1 FROM pgpace.customer WHERE name = 'sx'",
            first + 1);
    tl_exec(c,
            "INSERT INTO pgpace.item (id, customer_id, event_id) SELECT %lld, id, %lld FROM "
            "pgpace.customer WHERE name = 'sx/a'",
            first + 2, first + 1);
    tl_exec(c,
            "INSERT INTO pgpace.queue (item_id, customer_id, next_action_at, max_attempts, "
            "supersede_key) SELECT %lld, id, now() - interval '1 hour', 12, 'k' FROM "
            "pgpace.customer WHERE name = 'sx/a'",
            first + 2);
    long long ev = tl_query_int(c, "SELECT pgpace.enqueue('sx', '{\"v\": 2}', supersede_key => "
                                   "'k')");
    /* One queued delivery with the key: of today, pointing at the new event, in the old place. */
    assert_int_equal(
        tl_query_int(c,
                     "SELECT count(*) FROM pgpace.queue q JOIN pgpace.item i ON "
                     "i.id = q.item_id WHERE q.supersede_key = 'k' AND i.event_id = "
                     "%lld AND pgpace.item_id_day(q.item_id) = pgpace.item_id_day(%lld) "
                     "AND q.next_action_at < now() - interval '59 minutes'",
                     ev, ev),
        1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.queue"), 1);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item WHERE id = %lld", first + 2),
                     0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(routes_by_subscription_and_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(unmatched_event_is_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(idempotency_key_acts_on_the_event, setup, teardown),
        cmocka_unit_test_setup_teardown(supersede_key_acts_per_endpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(superseded_delivery_moves_to_the_events_day, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(deadlines_per_endpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_mixes_events_and_plain_items, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk_file_keyed_lines_one_by_one, setup, teardown),
        cmocka_unit_test_setup_teardown(endpoint_names_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(delivered_end_to_end, e2e_setup, e2e_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
