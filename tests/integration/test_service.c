/* test_service.c - running pgpace as a service: systemd notifications, SIGHUP reload with a
 * bad and a good file, refusing an old schema. */
#include "fixture.h"
#include "strbuf.h"
#include "tcpproxy.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <curl/curl.h>

static int setup(void **state)
{
    *state = fx_start();
    return 0;
}

static int teardown(void **state)
{
    fx_finish(*state);
    return 0;
}

/* Receives one datagram within timeout_ms into buf; returns its length or -1. */
static ssize_t recv_within(int fd, char *buf, size_t len, int timeout_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1)
        return -1;
    ssize_t n = recv(fd, buf, len - 1, 0);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}

static void systemd_ready_and_stopping(void **state)
{
    fx *f = *state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/pgpace-notify-%d", (int)getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);

    char env[96];
    snprintf(env, sizeof env, "NOTIFY_SOCKET=%s", path);
    fx_run_env(f, NULL, TL_ARGV(env));
    char buf[256];
    assert_true(recv_within(fd, buf, sizeof buf, 10000) > 0);
    tl_assert_contains(buf, "READY=1");
    /* Ready means the schema was checked and the database answers. */
    assert_true(fx_wait_log(f, "event=customers_loaded", 5000));

    tl_service_signal(&f->svc, SIGTERM, 0, 0);
    assert_true(recv_within(fd, buf, sizeof buf, 10000) > 0);
    tl_assert_contains(buf, "STOPPING=1");
    /* Wait for the exit of that one stop (signal 0 only probes): no second SIGTERM. */
    assert_int_equal(tl_service_signal(&f->svc, 0, 1, 15000), 0);
    f->running = false;
    close(fd);
    unlink(path);
}

static void sighup_keeps_a_bad_config_and_applies_a_good_one(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "6000"));
    fx_run(f, "log.level = info\n");
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 10000), 1);

    /* A bad file: refused with file, line and key; the service keeps running as it was. */
    FILE *out = fopen(f->config_path, "a");
    assert_non_null(out);
    fputs("[delivery]\nretry_base_milliseconds = 5\n", out);
    fclose(out);
    tl_service_signal(&f->svc, SIGHUP, 0, 0);
    assert_true(fx_wait_log(f, "event=config_reload_failed", 5000));
    char *log = fx_log(f);
    tl_assert_contains(log, f->config_path);
    tl_assert_contains(log, "retry_base_milliseconds");
    tl_assert_contains(log, "keeping the running configuration");
    free(log);
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 2, 10000), 2);

    /* A good file that takes loopback off the allow-list: applied at once, so the next item
     * is refused (SSRF) instead of delivered. */
    fx_write_config(f, "log.level = info\ndelivery.allow_cidrs =\n");
    tl_service_signal(&f->svc, SIGHUP, 0, 0);
    assert_true(fx_wait_log(f, "event=config_reloaded", 5000));
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 1, 10000, "SELECT count(*) FROM pgpace.dead_letter"),
        1);
    assert_int_equal(receiver_count(f->recv, "/c/acme"), 2);
    char *err = tl_query_str(f->db->conn, "SELECT last_error FROM pgpace.dead_letter");
    tl_assert_contains(err, "loopback");
    free(err);
    fx_stop_service(f, 15000);
}

static void old_schema_refuses_to_start(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "DELETE FROM pgpace.schema_migration WHERE version = "
                         "(SELECT max(version) FROM pgpace.schema_migration)");
    fx_run(f, NULL);
    int status = tl_service_signal(&f->svc, 0, 0, 0); /* signal 0: just a probe */
    (void)status;
    assert_true(fx_wait_log(f, "event=schema_too_old", 10000));
    /* It exits by itself with status 1 and says what to run. */
    int deadline_status = -1;
    for (int i = 0; i < 500 && deadline_status < 0; i++)
        deadline_status = tl_service_signal(&f->svc, 0, 1, 20);
    assert_int_equal(deadline_status, 1);
    f->running = false;
    char *log = fx_log(f);
    tl_assert_contains(log, "pgpace migrate");
    free(log);
}

/* Same migration version, other function bodies (a binary upgraded without `pgpace migrate`):
 * it refuses to start and names the fix, and runs once the digest matches again. */
static void other_functions_refuse_to_start(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "UPDATE pgpace.schema_function_digest SET digest = repeat('0', 64)");
    fx_run(f, NULL);
    assert_true(fx_wait_log(f, "event=schema_functions_differ", 10000));
    int exit_status = -1;
    for (int i = 0; i < 500 && exit_status < 0; i++)
        exit_status = tl_service_signal(&f->svc, 0, 1, 20);
    assert_int_equal(exit_status, 1);
    f->running = false;
    char *log = fx_log(f);
    tl_assert_contains(log, "database_digest=0000000000000000");
    tl_assert_contains(log, "pgpace migrate");
    free(log);
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "migrate"), NULL, NULL);
    assert_int_equal(p.status, 0);
    tl_proc_free(&p);
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.schema_function_digest "
                                               "WHERE digest <> repeat('0', 64)"),
                     1);
}

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    strbuf *sb = arg;
    strbuf_append(sb, data, size * n);
    return size * n;
}

/* One request; returns the status and the body in *body (owned). */
static long http(int port, const char *method, const char *path, const char *token,
                 const char *body, char **out)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    strbuf sb = {0};
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[300];
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body)
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

static void admin_http_through_the_service(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "6000"));
    fx_run(f, "http.enqueue_token = s3cret-token\n");
    int port = fx_admin_port(f);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));

    char *body = NULL;
    assert_int_equal(http(port, "GET", "/healthz", NULL, NULL, &body), 200);
    free(body);
    assert_int_equal(http(port, "GET", "/readyz", NULL, NULL, &body), 200);
    tl_assert_contains(body, "\"role\":\"leader\"");
    free(body);

    /* Enqueue over HTTP: 201 with the id, delivered as a webhook; a repeat key gives 200. */
    const char *item = "{\"customer\":\"acme\",\"payload\":{\"order\":1},"
                       "\"idempotency_key\":\"o-1\"}";
    assert_int_equal(http(port, "POST", "/v1/items", "s3cret-token", item, &body), 201);
    tl_assert_contains(body, "\"id\":");
    free(body);
    assert_int_equal(http(port, "POST", "/v1/items", "s3cret-token", item, &body), 200);
    tl_assert_contains(body, "\"duplicate\":true");
    free(body);
    assert_int_equal(http(port, "POST", "/v1/items", "wrong", item, &body), 401);
    free(body);
    assert_int_equal(http(port, "POST", "/v1/items", "s3cret-token",
                          "{\"customer\":\"nobody\",\"payload\":{}}", &body),
                     400);
    tl_assert_contains(body, "unknown customer");
    free(body);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 10000), 1);

    /* Metrics: what happened shows, and an independent parser (promtool) accepts it. The
     * receiver has the request before the dispatcher has read the answer and counted it: wait
     * for the count (on a busy machine that takes a while). */
    const char *delivered = "pgpace_deliveries_total{customer=\"acme\",outcome=\"success\"} 1";
    int64_t deadline = fx_now_us() + 10 * 1000000LL;
    for (;;) {
        assert_int_equal(http(port, "GET", "/metrics", NULL, NULL, &body), 200);
        if (strstr(body, delivered) || fx_now_us() > deadline)
            break;
        free(body);
        receiver_wait(f->recv, "/c/none", 1, 50);
    }
    tl_assert_contains(body, "pgpace_leader 1");
    tl_assert_contains(body, delivered);
    tl_assert_contains(body, "pgpace_items_claimed_total{mode=\"spaced\"} 1");
    tl_assert_contains(body, "pgpace_claim_duration_seconds_bucket");
    tl_assert_contains(body, "pgpace_http_requests_total{route=\"/v1/items\",status=\"201\"} 1");
    /* Every metric the shipped Grafana dashboard queries is exported. */
    char path[512];
    snprintf(path, sizeof path, "%s/config/grafana-dashboard.json", getenv("PGPACE_SOURCE_ROOT"));
    FILE *dash = fopen(path, "r");
    assert_non_null(dash);
    static char json[65536];
    size_t len = fread(json, 1, sizeof json - 1, dash);
    fclose(dash);
    json[len] = '\0';
    int names = 0;
    for (const char *m = strstr(json, "pgpace_"); m; m = strstr(m + 1, "pgpace_")) {
        char name[96];
        size_t n = 0;
        while (n < sizeof name - 1 && (m[n] == '_' || (m[n] >= 'a' && m[n] <= 'z')))
            name[n] = m[n], n++;
        name[n] = '\0';
        if (n > 7 && strcmp(name + n - 7, "_bucket") == 0)
            name[n - 7] = '\0';
        char help[128];
        snprintf(help, sizeof help, "# HELP %s ", name);
        if (!strstr(body, help))
            fail_msg("the dashboard queries %s, which /metrics does not export", name);
        names++;
    }
    assert_true(names >= 15);
    /* promtool's report goes to this test's stderr (two suites may run at once: no shared
     * file). */
    FILE *promtool = popen("promtool check metrics >&2", "w");
    assert_non_null(promtool);
    fputs(body, promtool);
    int rc = pclose(promtool);
    if (rc != 0)
        fail_msg("promtool check metrics failed (%d)", rc);
    free(body);

    /* The token never reaches the log. */
    char *log = fx_log(f);
    assert_null(strstr(log, "s3cret-token"));
    free(log);
    fx_stop_service(f, 15000);
}

typedef struct standby_probe {
    tl_service *svc;
    int port;
} standby_probe;

/* True once the instance stands by and its admin server listens (port recorded). */
static int standby_listening(void *arg)
{
    standby_probe *p = arg;
    char *log = tl_service_log(p->svc);
    const char *at = strstr(log, "event=http_listening");
    if (at && strstr(log, "event=standby") && (at = strstr(at, "port=")))
        p->port = atoi(at + 5);
    free(log);
    return p->port > 0;
}

/* /readyz answers for a standby too, and turns 503 when the database goes away. */
static void readiness_standby_and_database_down(void **state)
{
    fx *f = *state;
    /* The leader goes to the database through a proxy the test controls. */
    tcpproxy *proxy = tcpproxy_start("127.0.0.1", atoi(getenv("PGPORT")));
    assert_non_null(proxy);
    char extra[256];
    snprintf(extra, sizeof extra,
             "database.conninfo = host=127.0.0.1 port=%d dbname=%s\n"
             "dispatcher.keepalive_idle_s = 1\ndispatcher.reconnect_max_ms = 200\n",
             tcpproxy_port(proxy), f->db->name);
    fx_run(f, extra);
    int port = fx_admin_port(f);
    assert_true(fx_wait_log(f, "event=leader_elected", 10000));

    /* A second instance, straight to the database: it stands by and says so. */
    fx second = *f;
    second.config_path[0] = '\0';
    fx_write_config(&second, NULL);
    tl_service standby = tl_service_start(TL_ARGV("--config", second.config_path, "run"), NULL);
    standby_probe probe = {&standby, 0};
    assert_true(tl_wait_until(standby_listening, &probe, 10000));
    int standby_port = probe.port;
    char *body = NULL;
    assert_int_equal(http(standby_port, "GET", "/readyz", NULL, NULL, &body), 200);
    tl_assert_contains(body, "\"role\":\"standby\"");
    free(body);

    /* The leader loses its database: 503 with the reason, and the process is still alive. */
    assert_int_equal(tcpproxy_set_mode(proxy, TCPPROXY_DROP), 0);
    assert_true(fx_wait_log(f, "event=db_connection_lost", 10000));
    long status = 0;
    for (int i = 0; i < 250 && status != 503; i++) {
        status = http(port, "GET", "/readyz", NULL, NULL, &body);
        if (status != 503)
            free(body);
    }
    assert_int_equal(status, 503);
    tl_assert_contains(body, "database unreachable");
    free(body);
    assert_int_equal(http(port, "GET", "/healthz", NULL, NULL, &body), 200);
    free(body);

    assert_int_equal(tl_service_signal(&standby, SIGTERM, 1, 15000), 0);
    tl_service_stop(&standby);
    unlink(second.config_path);
    assert_int_equal(tcpproxy_set_mode(proxy, TCPPROXY_PASS), 0);
    fx_stop_service(f, 15000);
    tcpproxy_stop(proxy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(systemd_ready_and_stopping, setup, teardown),
        cmocka_unit_test_setup_teardown(sighup_keeps_a_bad_config_and_applies_a_good_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(old_schema_refuses_to_start, setup, teardown),
        cmocka_unit_test_setup_teardown(other_functions_refuse_to_start, setup, teardown),
        cmocka_unit_test_setup_teardown(admin_http_through_the_service, setup, teardown),
        cmocka_unit_test_setup_teardown(readiness_standby_and_database_down, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
