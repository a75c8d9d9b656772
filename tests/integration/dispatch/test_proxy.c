/* test_proxy.c - deliveries through an HTTP CONNECT proxy (tests/lib/connect_proxy.c) with the
 * SSRF check still on the destination: delivered through a tunnel to the checked IP (never to
 * a name the proxy would resolve), a private destination refused ("ssrf") before the proxy
 * hears of it unless allow_cidrs covers it, no_proxy and the per-customer choice (direct, its
 * own proxy) exact, a proxy that refuses the CONNECT or is down classed "proxy" and retried
 * (the item not lost); and the bad proxy URLs that SQL and the CLI refuse. */
#include "connect_proxy.h"
#include "fixture.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct env {
    fx *f;
    connect_proxy *proxy;
    char proxy_ini[128]; /* "delivery.proxy = http://127.0.0.1:PORT\n" */
    char target[64];     /* "CONNECT 127.0.0.1:<receiver port>" */
} env;

/* No message may echo the password of a proxy URL with credentials. */
#define expect_refused(c, sql, state, want) tl_expect_sql_error(c, sql, state, want, "hunter2")

static int setup(void **state)
{
    env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->f = fx_start();
    e->proxy = connect_proxy_start();
    assert_non_null(e->proxy);
    snprintf(e->proxy_ini, sizeof e->proxy_ini, "delivery.proxy = http://127.0.0.1:%d\n",
             connect_proxy_port(e->proxy));
    snprintf(e->target, sizeof e->target, "CONNECT 127.0.0.1:%d", receiver_port(e->f->recv));
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    env *e = *state;
    fx_finish(e->f);
    connect_proxy_stop(e->proxy);
    free(e);
    return 0;
}

/* Everything the proxy recorded, for failure messages. */
static void print_proxy_log(connect_proxy *p)
{
    char line[340];
    for (size_t i = 0; connect_proxy_request(p, i, line, sizeof line) == 0; i++)
        print_error("proxy request %zu: %s\n", i, line);
}

static void expect_proxy_count(connect_proxy *p, size_t want)
{
    size_t got = connect_proxy_count(p);
    if (got != want) {
        print_proxy_log(p);
        fail_msg("the proxy recorded %zu requests, want %zu", got, want);
    }
}

/* The attempts of `customer` with this error_class, waited for until at least `want`. */
static long long wait_attempts(fx *f, const char *customer, const char *cls, long long want)
{
    return tl_wait_query_at_least(f->db->conn, want, 10000,
                                  "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                  "pgpace.customer c ON c.id = a.customer_id WHERE c.name = '%s' "
                                  "AND a.error_class IS NOT DISTINCT FROM %s",
                                  customer, cls);
}

static void delivers_through_a_tunnel_to_the_checked_ip(void **state)
{
    env *e = *state;
    fx *f = e->f;
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    /* A name: pgpace resolves it, and the proxy is asked for the address that was checked
     * (127.0.0.1: localhost's ::1 is not in allow_cidrs 127.0.0.0/8), never for the name. */
    char url[128];
    snprintf(url, sizeof url, "http://localhost:%d/c/named", receiver_port(f->recv));
    fx_customer(f, "named", TL_ARGV("--rate", "600", "--url", url));
    fx_run(f, e->proxy_ini);

    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 10000), 1);
    expect_proxy_count(e->proxy, 1);
    assert_int_equal(connect_proxy_count_line(e->proxy, e->target), 1);
    assert_int_equal(connect_proxy_relayed(e->proxy), 1);

    fx_enqueue(f, "named", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/named", 1, 10000), 1);
    /* The tunnel of acme may be reused (same proxy, same pinned target) or a new one opened:
     * either way every CONNECT was to the checked IP. */
    size_t n = connect_proxy_count(e->proxy);
    assert_true(n >= 1 && n <= 2);
    assert_int_equal(connect_proxy_count_line(e->proxy, e->target), n);
    /* The receiver saw the URL's host, not the pinned IP. */
    char host[128], want[128];
    assert_int_equal(receiver_header(f->recv, 1, "host", host, sizeof host), 1);
    snprintf(want, sizeof want, "localhost:%d", receiver_port(f->recv));
    assert_string_equal(host, want);
    assert_int_equal(wait_attempts(f, "acme", "NULL", 1), 1);
}

static void private_destination_refused_before_the_proxy(void **state)
{
    env *e = *state;
    fx *f = e->f;
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    char url[128];
    snprintf(url, sizeof url, "http://localhost:%d/c/named", receiver_port(f->recv));
    fx_customer(f, "named", TL_ARGV("--rate", "600", "--url", url));
    /* allow_cidrs does not cover the loopback receiver; the proxy itself (on loopback) is the
     * operator's choice and exempt. */
    char ini[256];
    snprintf(ini, sizeof ini, "%sdelivery.allow_cidrs = 192.0.2.0/24\n", e->proxy_ini);
    fx_run(f, ini);
    long long acme = fx_enqueue(f, "acme", NULL, 1);
    long long named = fx_enqueue(f, "named", NULL, 1);
    assert_int_equal(wait_attempts(f, "acme", "'ssrf'", 1), 1);
    assert_int_equal(wait_attempts(f, "named", "'ssrf'", 1), 1);
    /* Refused, and not retried: dead letters naming the refused address. */
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 2, 10000,
                                            "SELECT count(*) FROM pgpace.dead_letter WHERE "
                                            "item_id IN (%lld, %lld) AND last_error LIKE "
                                            "'refused destination 127.0.0.1: loopback%%'",
                                            acme, named),
                     2);
    expect_proxy_count(e->proxy, 0);
    assert_int_equal(receiver_count(f->recv, "/c/"), 0);
}

static void allowed_when_allow_cidrs_covers_it(void **state)
{
    env *e = *state;
    fx *f = e->f;
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    char ini[256];
    snprintf(ini, sizeof ini, "%sdelivery.allow_cidrs = 192.0.2.0/24, 127.0.0.1/32\n",
             e->proxy_ini);
    fx_run(f, ini);
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 10000), 1);
    expect_proxy_count(e->proxy, 1);
    assert_int_equal(connect_proxy_count_line(e->proxy, e->target), 1);
}

static void no_proxy_and_per_customer_choice(void **state)
{
    env *e = *state;
    fx *f = e->f;
    connect_proxy *own = connect_proxy_start();
    assert_non_null(own);
    char own_url[64], url[128];
    snprintf(own_url, sizeof own_url, "http://127.0.0.1:%d", connect_proxy_port(own));
    snprintf(url, sizeof url, "http://localhost:%d/c/bypass", receiver_port(f->recv));
    fx_customer(f, "viaconfig", TL_ARGV("--rate", "600"));
    fx_customer(f, "bypass", TL_ARGV("--rate", "600", "--url", url));
    fx_customer(f, "direct", TL_ARGV("--rate", "600", "--proxy", "direct"));
    fx_customer(f, "own", TL_ARGV("--rate", "600", "--proxy", own_url));
    char ini[256];
    snprintf(ini, sizeof ini, "%sdelivery.no_proxy = .example.com, LOCALHOST\n", e->proxy_ini);
    fx_run(f, ini);

    /* One at a time, so that each proxy's log says whose request it carried; the tunnels
     * are closed after each (connect_proxy_refuse), so a request through a proxy is always a
     * new CONNECT there, never a reused tunnel. */
    fx_enqueue(f, "viaconfig", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/viaconfig", 1, 10000), 1);
    expect_proxy_count(e->proxy, 1);
    /* The answer must be back through the tunnel before it is closed (the receiver records a
     * request before it answers): else the attempt fails and its retry is one more CONNECT. */
    assert_true(wait_attempts(f, "viaconfig", "NULL", 1) >= 1);
    connect_proxy_refuse(e->proxy, 0);
    fx_enqueue(f, "bypass", NULL, 1); /* localhost is in no_proxy: direct */
    assert_int_equal(receiver_wait(f->recv, "/c/bypass", 1, 10000), 1);
    fx_enqueue(f, "direct", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/direct", 1, 10000), 1);
    expect_proxy_count(e->proxy, 1);
    fx_enqueue(f, "own", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/own", 1, 10000), 1);
    expect_proxy_count(e->proxy, 1);
    expect_proxy_count(own, 1);
    assert_int_equal(connect_proxy_count_line(own, e->target), 1);

    /* Back to the default: the configured proxy again (the change reaches the dispatcher by
     * NOTIFY; wait for it by its effect). */
    tl_proc p =
        tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "own", "--proxy", "default"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_true(fx_wait_log(f, "event=customer_updated", 5000));
    fx_enqueue(f, "own", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/own", 2, 10000), 2);
    expect_proxy_count(own, 1);
    expect_proxy_count(e->proxy, 2);
    connect_proxy_stop(own);
}

static void proxy_refusing_connect_is_class_proxy(void **state)
{
    env *e = *state;
    fx *f = e->f;
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    connect_proxy_refuse(e->proxy, 403);
    fx_run(f, e->proxy_ini);
    long long id = fx_enqueue(f, "acme", NULL, 1);
    assert_true(wait_attempts(f, "acme", "'proxy'", 1) >= 1);
    /* Asked for the checked address, refused: retried as usual, nothing reached the receiver,
     * and the log holds no secret but says what happened. */
    assert_true(connect_proxy_count_line(e->proxy, e->target) >= 1);
    assert_int_equal(receiver_count(f->recv, "/c/"), 0);
    assert_int_equal(tl_query_int(f->db->conn,
                                  "SELECT count(*) FROM pgpace.delivery_attempt WHERE item_id = "
                                  "%lld AND error_class = 'proxy' AND outcome = 'retry'",
                                  id) >= 1,
                     1);
    assert_true(fx_wait_log(f, "proxy refused CONNECT", 5000));
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter"), 0);

    /* 407 (the proxy wants credentials) is the same class. */
    connect_proxy_refuse(e->proxy, 407);
    assert_true(fx_wait_log(f, "HTTP 407", 10000));
    /* The proxy lets it through again: the item is delivered, not lost. */
    connect_proxy_refuse(e->proxy, 0);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 15000), 1);
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 10000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt WHERE "
                                            "item_id = %lld AND outcome = 'success'",
                                            id),
                     1);
}

static void proxy_down_is_class_proxy(void **state)
{
    env *e = *state;
    fx *f = e->f;
    fx_customer(f, "acme", TL_ARGV("--rate", "600"));
    /* A port nobody listens on any more. */
    connect_proxy *gone = connect_proxy_start();
    assert_non_null(gone);
    char ini[128];
    snprintf(ini, sizeof ini, "delivery.proxy = http://127.0.0.1:%d\n", connect_proxy_port(gone));
    connect_proxy_stop(gone);
    fx_run(f, ini);
    long long id = fx_enqueue(f, "acme", NULL, 1);
    assert_true(wait_attempts(f, "acme", "'proxy'", 2) >= 2);
    assert_int_equal(
        tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.queue WHERE item_id = %lld", id), 1);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    assert_true(fx_wait_log(f, "proxy unreachable", 5000));
}

static void bad_proxies_refused(void **state)
{
    env *e = *state;
    fx *f = e->f;
    fx_customer(f, "acme", TL_ARGV("--rate", "60"));
    PGconn *c = f->db->conn;
    static const struct {
        const char *value, *want;
    } sql_cases[] = {
        {"socks5://p.example:1080", "proxy: expected http://HOST:PORT"},
        {"https://p.example:3128", "https:// and SOCKS proxies are not supported"},
        {"http://p.example", "proxy: expected http://HOST:PORT"},
        {"http://p.example:70000", "proxy: the port must be a number from 1 to 65535"},
        {"http://p.example:3128/path", "proxy: expected http://HOST:PORT"},
        {"http://u:hunter2@p.example:3128", "proxy: credentials (user:password@)"},
        {"http://p.example:3128\\r\\nX: 1", "proxy: contains whitespace, a control character"},
        {"http://[::1x]:3128", "proxy: expected http://HOST:PORT"},
        {"http://[::1::2]:3128", "proxy: invalid IPv6 address"},
        {"", "proxy: expected http://HOST:PORT"},
        /* A 64-character label (the CLI and config refuse it too). */
        {"http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example:3128",
         "proxy: expected http://HOST:PORT"},
    };
    for (size_t i = 0; i < sizeof sql_cases / sizeof sql_cases[0]; i++) {
        char sql[512];
        snprintf(sql, sizeof sql, "SELECT pgpace.customer_set_proxy('acme', E'%s')",
                 sql_cases[i].value);
        expect_refused(c, sql, "22023", sql_cases[i].want);
    }
    expect_refused(c, "SELECT pgpace.customer_set_proxy('ghost', 'direct')", "P0002", "ghost");
    expect_refused(c, "UPDATE pgpace.customer SET proxy = E'http://p:1\\r\\n' WHERE name = 'acme'",
                   "23514", "customer_proxy_valid");
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE proxy IS NULL"),
                     1);
    /* Not for producers. */
    assert_int_equal(tl_query_int(c, "SELECT has_function_privilege('pgpace_producer', "
                                     "'pgpace.customer_set_proxy(text, text)', 'EXECUTE')::int"),
                     0);

    /* CLI: exit 2 naming --proxy, the credential never echoed. */
    static const struct {
        const char *value, *want;
    } cli_cases[] = {
        {"socks5://p.example:1080", "scheme 'socks5' is not supported"},
        {"https://p.example:3128", "scheme 'https' is not supported"},
        {"http://p.example", "the port is required"},
        {"http://p.example:3128\r\nX: 1", "control character"},
        {"http://u:hunter2@p.example:3128", "credentials (user:password@)"},
        {"directly", "expected http://HOST:PORT"},
    };
    for (size_t i = 0; i < sizeof cli_cases / sizeof cli_cases[0]; i++) {
        tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--proxy",
                                      cli_cases[i].value),
                              NULL, NULL);
        if (p.status != 2 || !strstr(p.err, "--proxy") || !strstr(p.err, cli_cases[i].want) ||
            strstr(p.err, "hunter2"))
            fail_msg("--proxy '%s': exit %d, stderr: %s", cli_cases[i].value, p.status, p.err);
        tl_proc_free(&p);
    }

    /* Set, shown, back to default; the scheme is stored in lower case. */
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--proxy",
                                  "HTTP://proxy.corp.example:3128/"),
                          NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "proxy              http://proxy.corp.example:3128/\n");
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--proxy", "direct"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE proxy = 'direct'"),
                     1);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "acme", "--proxy", "default"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "get", "acme"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_assert_contains(p.out, "proxy              default\n");
    tl_proc_free(&p);
    /* A new customer and its proxy in one transaction: a refused proxy creates nothing. */
    p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "newco", "--rate", "60",
                          "--url", "http://127.0.0.1:1/x", "--proxy", "http://p.example:3128"),
                  NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(c, "SELECT count(*) FROM pgpace.customer WHERE name = 'newco' "
                                     "AND proxy = 'http://p.example:3128'"),
                     1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(delivers_through_a_tunnel_to_the_checked_ip, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(private_destination_refused_before_the_proxy, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(allowed_when_allow_cidrs_covers_it, setup, teardown),
        cmocka_unit_test_setup_teardown(no_proxy_and_per_customer_choice, setup, teardown),
        cmocka_unit_test_setup_teardown(proxy_refusing_connect_is_class_proxy, setup, teardown),
        cmocka_unit_test_setup_teardown(proxy_down_is_class_proxy, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_proxies_refused, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
