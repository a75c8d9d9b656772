/* test_trace.c - W3C Trace Context on items: malformed traceparent/tracestate refused on every
 * enqueue path (SQL, JSON/HTTP, bulk file, CLI flags) with the field named, and the values
 * delivered to the receiver as traceparent/tracestate headers exactly as enqueued, through both
 * claim statements (a spaced customer: run_claim.sql; an unlimited one: run_claim_unlimited.sql),
 * with no such header for items enqueued without them. */
#include "fixture.h"
#include "common.h"
#include "strbuf.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TP  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define TP2 "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
#define TS  "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"

static void bad_trace_context_refused_on_every_path(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));

    /* SQL: SQLSTATE 22023, the field named first. */
    static const struct {
        const char *tp, *ts, *msg;
    } bad[] = {
        {"'00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01'", "NULL",
         "traceparent must be version-traceid-parentid-flags"},
        {"'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7'", "NULL",
         "traceparent must be version-traceid-parentid-flags"},
        {"''", "NULL", "traceparent must be version-traceid-parentid-flags"},
        {"'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'", "NULL",
         "traceparent must not have version ff"},
        {"'00-00000000000000000000000000000000-00f067aa0ba902b7-01'", "NULL",
         "traceparent must not have an all-zero trace-id"},
        {"'00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01'", "NULL",
         "traceparent must not have an all-zero parent-id"},
        {"'" TP "-extra'", "NULL", "traceparent must be exactly 55 characters for version 00"},
        {"'" TP "'||chr(13)||chr(10)||'x-injected: 1'", "NULL",
         "traceparent must be version-traceid-parentid-flags"},
        {"NULL", "'a=b'", "tracestate must come with a traceparent"},
        {"'" TP "'", "''", "tracestate must not be empty"},
        {"'" TP "'", "'a=b,' || repeat('k', 600)", "tracestate must be at most 512 characters"},
        {"'" TP "'",
         "'a=b,' || (SELECT string_agg('k' || i || '=v', ',') FROM generate_series(1, 32) i)",
         "tracestate must have at most 32 list-members, got 33"},
        {"'" TP "'", "'a=1,b=2,t@sys=3, a=4'",
         "tracestate must list each key once (W3C Trace Context): member 4 repeats an earlier key"},
        {"'" TP "'", "', ,'", "tracestate must have a list-member (leave it out)"},
        {"'" TP "'", "'a=b,B=c'", "member 2 is not"},
        {"'" TP "'", "'a=b,c=d=e'", "member 2 is not"},
        {"'" TP "'", "'a=b'||chr(13)||chr(10)||'x-injected: 1'", "member 1 is not"},
        {"'" TP "'", "' a=b'", "tracestate must not start or end with a space or tab"},
    };
    char sql[1024];
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        snprintf(sql, sizeof sql,
                 "SELECT pgpace.enqueue('acme', '{}', traceparent => %s, tracestate => %s)",
                 bad[i].tp, bad[i].ts);
        tl_expect_sql_error(c, sql, "22023", bad[i].msg, NULL);
    }
    /* The table's CHECK holds behind the functions (one constraint, the functions' own rule:
     * 0023_enqueue_checks.sql), for a direct INSERT too. */
    tl_expect_sql_error(
        c,
        "INSERT INTO pgpace.item (id, customer_id, payload, priority, run_at, traceparent) "
        "VALUES (1, 1, '{}', 0, now(), 'ff-x')",
        "23514", "item_trace_context_valid", NULL);
    tl_expect_sql_error(
        c,
        "INSERT INTO pgpace.item (id, customer_id, payload, priority, run_at, traceparent, "
        "tracestate) VALUES (1, 1, '{}', 0, now(), '" TP "', 'a=b' || chr(10))",
        "23514", "item_trace_context_valid", NULL);
    tl_expect_sql_error(c,
                        "INSERT INTO pgpace.item (id, customer_id, payload, priority, run_at, "
                        "tracestate) VALUES (1, 1, '{}', 0, now(), 'a=b')",
                        "23514", "item_trace_context_valid", NULL);

    /* JSON (the HTTP path's function): "field traceparent: ...", also for a non-string. */
    tl_expect_sql_error(c,
                        "SELECT pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":1,"
                        "\"traceparent\":\"00-zz\"}')",
                        "22023", "field traceparent: must be version-traceid-parentid-flags", NULL);
    tl_expect_sql_error(c,
                        "SELECT pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":1,"
                        "\"traceparent\":\"" TP "\",\"tracestate\":\"=x\"}')",
                        "22023", "field tracestate: must be a list of key=value members", NULL);
    tl_expect_sql_error(c,
                        "SELECT pgpace.enqueue_json('{\"customer\":\"acme\",\"payload\":1,"
                        "\"traceparent\":7}')",
                        "22023", "field traceparent: must be a string", NULL);

    /* Bulk: the line and the field; nothing enqueued. */
    char *file = tl_temp_file("{\"customer\":\"acme\",\"payload\":1,\"traceparent\":\"" TP "\"}\n"
                              "{\"customer\":\"acme\",\"payload\":2,\"traceparent\":\"" TP "\","
                              "\"tracestate\":\"a=b,,\\tc=\"}\n");
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "enqueue", "--file", file), NULL, NULL);
    assert_int_not_equal(p.status, 0);
    tl_assert_contains(p.err, "line 2: field tracestate: must be a list of key=value members "
                              "separated by commas (W3C Trace Context): member 3 is not");
    tl_proc_free(&p);
    unlink(file);
    free(file);
    file = tl_temp_file("{\"customer\":\"acme\",\"payload\":1,\"tracestate\":\"a=b\"}\n");
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "enqueue", "--file", file), NULL, NULL);
    assert_int_not_equal(p.status, 0);
    tl_assert_contains(p.err, "line 1: field tracestate: must come with a traceparent");
    tl_proc_free(&p);
    unlink(file);
    free(file);

    /* CLI: a usage error (exit 2) naming the flag. */
    static const struct {
        const char *tp, *ts, *msg;
    } flags[] = {
        {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", NULL,
         "--traceparent: must be version-traceid-parentid-flags"},
        {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", NULL,
         "--traceparent: must not have version ff"},
        {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", NULL,
         "--traceparent: must not have an all-zero trace-id"},
        {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", NULL,
         "--traceparent: must not have an all-zero parent-id"},
        {TP "-00", NULL, "--traceparent: must be exactly 55 characters for version 00"},
        {NULL, "a=b", "--tracestate: must come with a traceparent"},
        {TP, "a=b\r\nx-injected: 1", "--tracestate: must be a list of key=value members"},
        {TP, "a=b ", "--tracestate: must not start or end with a space or tab"},
        {TP, "a=1,b=2,a=3", "--tracestate: must list each key once (W3C Trace Context): member 3"},
        {TP, ",", "--tracestate: must have a list-member (leave it out)"},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(flags); i++) {
        const char *argv[12] = {"--db", f->db->conninfo, "enqueue", "acme", "{}"};
        int n = 5;
        if (flags[i].tp) {
            argv[n++] = "--traceparent";
            argv[n++] = flags[i].tp;
        }
        if (flags[i].ts) {
            argv[n++] = "--tracestate";
            argv[n++] = flags[i].ts;
        }
        argv[n] = NULL;
        p = tl_pgpace(argv, NULL, NULL);
        assert_int_equal(p.status, 2);
        tl_assert_contains(p.err, flags[i].msg);
        tl_proc_free(&p);
    }
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item"), 0);

    /* Accepted: a later version's extra fields, and members with spaces and empty members. */
    tl_exec(c,
            "SELECT pgpace.enqueue('acme', '{}', traceparent => '01-%s-%s-01-what-ever', "
            "tracestate => 'a=b , ,t@sys=x y,\tz=1')",
            "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.item WHERE traceparent LIKE "
                                     "'01-%%-what-ever'"),
                     1);
}

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
    h = curl_slist_append(h, "Authorization: Bearer trace-token");
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

static void trace_headers_arrive_as_enqueued(void **state)
{
    fx *f = *state;
    PGconn *c = f->db->conn;
    /* spaced: run_claim.sql; free (unlimited, no carrier): run_claim_unlimited.sql. */
    fx_customer(f, "spaced", TL_ARGV("--rate", "6000"));
    fx_customer(f, "free", TL_ARGV("--rate", "1", "--mode", "unlimited"));
    fx_run(f, "http.enqueue_token = trace-token\n");
    int port = fx_admin_port(f);

    const char *const customers[] = {"spaced", "free"};
    for (int k = 0; k < 2; k++) {
        const char *cu = customers[k];
        /* SQL, with both, with traceparent only, with neither. */
        tl_exec(c,
                "SELECT pgpace.enqueue('%s', '{\"n\": 1}', traceparent => '" TP
                "', tracestate => '" TS "')",
                cu);
        tl_exec(c, "SELECT pgpace.enqueue('%s', '{\"n\": 2}', traceparent => '" TP2 "')", cu);
        tl_exec(c, "SELECT pgpace.enqueue('%s', '{\"n\": 3}')", cu);
        /* HTTP, with spaces and a tab inside the tracestate. */
        char item[512], *out = NULL;
        snprintf(item, sizeof item,
                 "{\"customer\":\"%s\",\"payload\":{\"n\":4},\"traceparent\":\"" TP "\","
                 "\"tracestate\":\"a=1 ,\\tb@c=x y\"}",
                 cu);
        assert_int_equal(post_item(port, item, &out), 201);
        free(out);
        snprintf(item, sizeof item,
                 "{\"customer\":\"%s\",\"payload\":{\"n\":5},\"traceparent\":\"00-4bf92f3577b34da6"
                 "a3ce929d0e0e4736-00f067aa0ba902b7-0\"}",
                 cu);
        assert_int_equal(post_item(port, item, &out), 400);
        tl_assert_contains(out, "field traceparent: must be version-traceid-parentid-flags");
        free(out);
        /* Bulk: a keyed line, a plain line, a line without. */
        char lines[1024];
        snprintf(lines, sizeof lines,
                 "{\"customer\":\"%s\",\"payload\":{\"n\":6},\"traceparent\":\"" TP2 "\","
                 "\"tracestate\":\"k=v\",\"idempotency_key\":\"t6\"}\n"
                 "{\"customer\":\"%s\",\"payload\":{\"n\":7},\"traceparent\":\"" TP "\"}\n"
                 "{\"customer\":\"%s\",\"payload\":{\"n\":8}}\n",
                 cu, cu, cu);
        char *file = tl_temp_file(lines);
        tl_proc p =
            tl_pgpace(TL_ARGV("--db", f->db->conninfo, "enqueue", "--file", file), NULL, NULL);
        assert_int_equal(p.status, 0);
        tl_proc_free(&p);
        unlink(file);
        free(file);
        /* CLI flags. */
        p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "enqueue", cu, "{\"n\": 9}", "--traceparent",
                              TP2, "--tracestate", "x=1,y=2"),
                      NULL, NULL);
        assert_int_equal(p.status, 0);
        tl_proc_free(&p);
    }
    assert_int_equal(receiver_wait(f->recv, "/c/spaced", 8, 15000), 8);
    assert_int_equal(receiver_wait(f->recv, "/c/free", 8, 15000), 8);

    /* The payloads are the same for both customers: match by path as well. */
    for (int k = 0; k < 2; k++) {
        char path[32];
        snprintf(path, sizeof path, "/c/%s", customers[k]);
        receiver_request rq;
        int seen = 0;
        for (size_t i = 0; receiver_get(f->recv, i, &rq) == 0; i++) {
            if (strncmp(rq.path, path, strlen(path)) == 0) {
                int n = 0;
                assert_int_equal(sscanf(rq.body, "{\"n\": %d}", &n), 1);
                static const char *const want_tp[] = {"", TP, TP2, "", TP, "", TP2, TP, "", TP2};
                static const char *const want_ts[] = {"", TS,    "", "", "a=1 ,\tb@c=x y",
                                                      "", "k=v", "", "", "x=1,y=2"};
                assert_true(n >= 1 && n <= 9 && n != 5);
                assert_string_equal(rq.traceparent, want_tp[n]);
                assert_string_equal(rq.tracestate, want_ts[n]);
                seen++;
            }
            free(rq.body);
        }
        assert_int_equal(seen, 8);
    }
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(bad_trace_context_refused_on_every_path, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(trace_headers_arrive_as_enqueued, fx_setup, fx_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
