/* test_admin_http.c - the admin HTTP endpoint against a real database: every route, every bad
 * input, the limits (body, header, connections, slow clients), keep-alive and pipelining, and
 * /metrics checked by promtool.
 *
 * The server, its pgconn and a metrics registry run in the test's own uv loop on the main
 * thread, with fake dispatcher callbacks. The client side runs in a second thread (libcurl easy
 * and raw sockets, every wait bounded by a deadline) and records its first failure as text;
 * the main thread asserts on it after joining, since cmocka cannot fail from another thread.
 */
#include "testlib.h"

#include "admin_http.h"
#include "metrics.h"
#include "pgconn.h"
#include "strbuf.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_MS  60000
#define IDLE_MS      400 /* the server's per-phase timeout in these tests */
#define MAX_BODY     65536
#define TOKEN        "s3cret-token-for-tests"
#define CUSTOMER     "acme"
#define STATUS_TOKEN "page-token:with-colon"

static const char GET_HEALTHZ[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

typedef struct t_ctx t_ctx;
typedef int (*client_fn)(t_ctx *t);

struct t_ctx {
    uv_loop_t loop;
    uv_timer_t deadline;
    uv_async_t client_done; /* the client thread finished */
    tl_db *db;
    pgconn *db_conn;
    admin_http *srv;
    admin_http *srv2; /* a second server (no token), when the test wants one */
    metrics *m;
    int fam_requests, fam_seconds, fam_due;
    admin_http_options opts;
    int reconnect_min_ms;
    char app[64]; /* application_name of the server's database session */
    client_fn client;
    pthread_t thread;
    bool thread_started;
    int port, port2;
    int closed; /* close callbacks seen (servers and pgconn) */
    int expect_closed;
    atomic_int role_leader; /* what the fake readiness callback reports */
    atomic_int enqueues;    /* enqueue callbacks */
    char failure[4096];     /* the client's first failure, "" if none */
    long long ids[8];       /* item ids returned, for checks in the database afterwards */
};

/* ---- client-side checks (no cmocka in the client thread) ---------------------------------- */

PGP_PRINTF(3, 4) static int failed(t_ctx *t, int line, const char *fmt, ...)
{
    if (t->failure[0])
        return -1;
    int n = snprintf(t->failure, sizeof t->failure, "line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->failure + n, sizeof t->failure - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return failed(t, __LINE__, __VA_ARGS__);                                               \
    } while (0)

/* ---- libcurl client ------------------------------------------------------------------------ */

typedef struct http_res {
    long status;
    strbuf body;
    strbuf headers;
    long connects; /* new connections made for this request (0 = reused) */
} http_res;

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    strbuf_append(arg, data, size * n);
    return size * n;
}

static void res_free(http_res *r)
{
    strbuf_free(&r->body);
    strbuf_free(&r->headers);
}

/* One request. method "GET", "HEAD", "POST", ...; headers NULL-terminated or NULL; body NULL
 * for none. With `easy` given, its connection is reused (keep-alive). */
static int http_req(t_ctx *t, CURL *easy, int port, const char *method, const char *path,
                    const char *const *headers, const char *body, size_t body_len, http_res *res)
{
    *res = (http_res){0};
    strbuf_append(&res->body, "", 0);
    strbuf_append(&res->headers, "", 0);
    CURL *h = easy ? easy : curl_easy_init();
    CHECK(h, "curl_easy_init failed");
    curl_easy_reset(h);
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    struct curl_slist *list = NULL;
    for (size_t i = 0; headers && headers[i]; i++)
        list = curl_slist_append(list, headers[i]);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &res->body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &res->headers);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        if (strcmp(method, "POST") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &res->status);
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &res->connects);
    curl_slist_free_all(list);
    if (!easy)
        curl_easy_cleanup(h);
    CHECK(rc == CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(rc));
    CHECK(!res->body.failed && !res->headers.failed, "out of memory");
    return 0;
}

/* A request whose answer must be exactly `status` and `body`. */
static int expect(t_ctx *t, int port, const char *method, const char *path,
                  const char *const *headers, const char *body, int status, const char *want)
{
    http_res r;
    if (http_req(t, NULL, port, method, path, headers, body, body ? strlen(body) : 0, &r) != 0) {
        res_free(&r);
        return -1;
    }
    int ok = r.status == status && (!want || strcmp(r.body.data, want) == 0);
    if (!ok) {
        failed(t, __LINE__, "%s %s: want %d %s, got %ld %s", method, path, status,
               want ? want : "(any)", r.status, r.body.data);
    }
    res_free(&r);
    return ok ? 0 : -1;
}

static int has_header(const http_res *r, const char *line)
{
    return strcasestr(r->headers.data, line) != NULL;
}

static const char *const json_auth[] = {"Authorization: Bearer " TOKEN,
                                        "Content-Type: application/json", NULL};

static int post_item(t_ctx *t, const char *body, int status, const char *want)
{
    return expect(t, t->port, "POST", "/v1/items", json_auth, body, status, want);
}

/* ---- raw sockets --------------------------------------------------------------------------- */

static int raw_connect(int family, int port)
{
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        a->sin6_addr = in6addr_loopback;
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
    }
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int raw_send(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads into out until the peer closes (returns 0; a reset after data counts as closed) or
 * timeout_ms passes (-ETIMEDOUT). */
static int raw_read_to_close(int fd, strbuf *out, int timeout_ms)
{
    long long end = tl_now_ms() + timeout_ms;
    for (;;) {
        long long left = end - tl_now_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0)
            return -ETIMEDOUT;
        char buf[8192];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 0;
        if (n < 0)
            return -errno;
        strbuf_append(out, buf, (size_t)n);
    }
}

/* Number of complete responses at the start of text (interim 1xx skipped). */
static int complete_responses(const char *text, size_t len)
{
    int n = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *hdr_end = strstr(p, "\r\n\r\n");
        if (!hdr_end)
            break;
        const char *cl = strcasestr(p, "\r\nContent-Length: ");
        size_t body = cl && cl < hdr_end ? strtoul(cl + 18, NULL, 10) : 0;
        const char *next = hdr_end + 4 + body;
        if (next > end)
            break;
        if (strncmp(p, "HTTP/1.1 1", 10) != 0)
            n++;
        p = next;
    }
    return n;
}

/* Reads until `want` complete responses arrived (0) or the deadline / a close came first. */
static int raw_read_responses(int fd, strbuf *out, int want, int timeout_ms)
{
    long long end = tl_now_ms() + timeout_ms;
    while (complete_responses(out->data ? out->data : "", out->len) < want) {
        long long left = end - tl_now_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0)
            return -ETIMEDOUT;
        char buf[8192];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            return -EPIPE;
        strbuf_append(out, buf, (size_t)n);
    }
    return 0;
}

/* ---- promtool ------------------------------------------------------------------------------ */

/* `promtool check metrics` on text: its exit status (127 when not installed), output in out. */
static int promtool_check(const char *text, strbuf *out)
{
    strbuf_append(out, "", 0);
    if (access("/usr/bin/promtool", X_OK) != 0) {
        strbuf_puts(out, "promtool is not installed (Debian package prometheus)");
        return 127;
    }
    char path[] = "/tmp/pgpace-metrics-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 126;
    size_t len = strlen(text);
    bool ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    if (!ok) {
        unlink(path);
        return 126;
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "/usr/bin/promtool check metrics < %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    if (!p) {
        unlink(path);
        return 126;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        strbuf_append(out, buf, n);
    int status = pclose(p);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* ---- the fake dispatcher (loop thread) ----------------------------------------------------- */

static int fake_render(void *arg, strbuf *out)
{
    t_ctx *t = arg;
    metrics_gauge_set(t->m, t->fam_due, (const char *[]){CUSTOMER}, 3);
    return metrics_render(t->m, out);
}

static void fake_readiness(void *arg, admin_http_readiness *out)
{
    t_ctx *t = arg;
    bool up = t->db_conn && pgconn_ready(t->db_conn);
    out->ready = up;
    out->role = atomic_load(&t->role_leader) ? "leader" : "standby";
    out->reason = up ? NULL : "database unreachable";
}

static void fake_enqueue(void *arg, const char *body, size_t len, admin_http_reply *reply)
{
    t_ctx *t = arg;
    atomic_fetch_add(&t->enqueues, 1);
    if (admin_http_enqueue_sql(t->db_conn, body, len, admin_http_reply_done, reply) != 0)
        admin_http_reply_send(reply, 503, "{\"error\":\"database unreachable\"}");
}

/* Echoes the query it was given, so the client sees what reached the dispatcher. */
static void fake_status(void *arg, const char *query, admin_http_reply *reply)
{
    strbuf j = {0};
    strbuf_puts(&j, "{\"query\":\"");
    strbuf_json_escape(&j, query, strlen(query));
    strbuf_puts(&j, "\"}");
    admin_http_reply_send(reply, 200, strbuf_str(&j));
    strbuf_free(&j);
}

static void fake_request_done(void *arg, const char *route, int status, double seconds)
{
    t_ctx *t = arg;
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    metrics_counter_add(t->m, t->fam_requests, (const char *[]){route, code}, 1);
    metrics_histogram_observe(t->m, t->fam_seconds, (const char *[]){route}, seconds);
}

/* ---- the loop side --------------------------------------------------------------------- */

static void deadline_cb(uv_timer_t *timer)
{
    t_ctx *t = timer->data;
    fail_msg("deadline of %d ms passed; client failure so far: '%s'", DEADLINE_MS, t->failure);
}

static void closed_one(void *arg)
{
    t_ctx *t = arg;
    t->closed++;
    if (t->closed == t->expect_closed) {
        uv_close((uv_handle_t *)&t->deadline, NULL);
        uv_close((uv_handle_t *)&t->client_done, NULL);
    }
}

static void client_done_cb(uv_async_t *a)
{
    t_ctx *t = a->data;
    if (!t->thread_started)
        return;
    assert_int_equal(pthread_join(t->thread, NULL), 0);
    t->thread_started = false;
    t->expect_closed = 1 + (t->srv ? 1 : 0) + (t->srv2 ? 1 : 0);
    if (t->srv)
        admin_http_close(t->srv, closed_one, t);
    if (t->srv2)
        admin_http_close(t->srv2, closed_one, t);
    pgconn_close(t->db_conn, closed_one, t);
    t->db_conn = NULL;
}

static void *client_main(void *arg)
{
    t_ctx *t = arg;
    if (t->client(t) != 0 && !t->failure[0])
        snprintf(t->failure, sizeof t->failure, "client failed without a message");
    uv_async_send(&t->client_done);
    return NULL;
}

static admin_http_callbacks fake_callbacks(t_ctx *t)
{
    return (admin_http_callbacks){.render_metrics = fake_render,
                                  .readiness = fake_readiness,
                                  .enqueue = fake_enqueue,
                                  .status = fake_status,
                                  .request_done = fake_request_done,
                                  .arg = t};
}

static void on_db_state(pgconn *c, pgconn_state s, void *arg)
{
    t_ctx *t = arg;
    if (s != PGCONN_READY || t->srv)
        return;
    /* The first READY: start the server(s) and the client. */
    admin_http_callbacks cb = fake_callbacks(t);
    pgp_error err = {{0}};
    assert_int_equal(admin_http_new(&t->loop, &t->opts, &cb, &t->srv, &err), 0);
    if (admin_http_start(t->srv, &err) != 0)
        fail_msg("admin_http_start: %s", err.msg);
    t->port = admin_http_port(t->srv);
    assert_true(t->port > 0);
    /* The same routes with enqueue disabled (no token). */
    admin_http_options o2 = t->opts;
    o2.enqueue_token = "";
    o2.status_token = "";
    assert_int_equal(admin_http_new(&t->loop, &o2, &cb, &t->srv2, &err), 0);
    if (admin_http_start(t->srv2, &err) != 0)
        fail_msg("admin_http_start: %s", err.msg);
    t->port2 = admin_http_port(t->srv2);
    assert_int_equal(pthread_create(&t->thread, NULL, client_main, t), 0);
    t->thread_started = true;
}

static void t_init(t_ctx *t, client_fn client)
{
    memset(t, 0, sizeof *t);
    t->client = client;
    t->opts = (admin_http_options){.listen = "127.0.0.1:0",
                                   .enqueue_token = TOKEN,
                                   .status_token = STATUS_TOKEN,
                                   .max_body_bytes = MAX_BODY,
                                   .idle_timeout_ms = IDLE_MS,
                                   .max_connections = 16};
    t->reconnect_min_ms = 20;
    snprintf(t->app, sizeof t->app, "pgpace_admin_http_test_%d", (int)getpid());
    atomic_store(&t->role_leader, 1);
    assert_int_equal(uv_loop_init(&t->loop), 0);
    assert_int_equal(uv_timer_init(&t->loop, &t->deadline), 0);
    t->deadline.data = t;
    assert_int_equal(uv_timer_start(&t->deadline, deadline_cb, DEADLINE_MS, 0), 0);
    assert_int_equal(uv_async_init(&t->loop, &t->client_done, client_done_cb), 0);
    t->client_done.data = t;
    t->db = tl_fresh_db(1);
    tl_exec(t->db->conn, "SELECT pgpace.customer_set('" CUSTOMER
                         "', rate_per_minute => 60, webhook_url => 'http://127.0.0.1:9/hook')");

    static const double buckets[] = {0.001, 0.01, 0.1, 1};
    assert_int_equal(metrics_new(&(metrics_options){.customer_top_n = 10}, &t->m), 0);
    assert_int_equal(
        metrics_register(t->m,
                         &(metrics_family_def){.name = "pgpace_http_requests_total",
                                               .help = "Admin HTTP requests by route and status.",
                                               .type = METRICS_COUNTER,
                                               .labels = {"route", "status"}},
                         &t->fam_requests),
        0);
    assert_int_equal(metrics_register(t->m,
                                      &(metrics_family_def){.name = "pgpace_http_request_seconds",
                                                            .help = "Admin HTTP request duration.",
                                                            .type = METRICS_HISTOGRAM,
                                                            .labels = {"route"},
                                                            .buckets = buckets,
                                                            .nbuckets = PGP_ARRAY_LEN(buckets)},
                                      &t->fam_seconds),
                     0);
    assert_int_equal(metrics_register(t->m,
                                      &(metrics_family_def){.name = "pgpace_due_items",
                                                            .help = "Items claimable now.",
                                                            .type = METRICS_GAUGE,
                                                            .labels = {"customer"}},
                                      &t->fam_due),
                     0);
}

/* Runs the loop: connect, serve until the client is done, close everything. */
static void t_run(t_ctx *t)
{
    pgconn_options o = {.conninfo = t->db->conninfo,
                        .application_name = t->app,
                        .keepalive_idle_s = 10,
                        .reconnect_min_ms = t->reconnect_min_ms,
                        .reconnect_max_ms = t->reconnect_min_ms * 2,
                        .on_state = on_db_state,
                        .arg = t};
    assert_int_equal(pgconn_new(&t->loop, &o, &t->db_conn), 0);
    pgconn_start(t->db_conn);
    assert_int_equal(uv_run(&t->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&t->loop), 0);
    metrics_free(t->m);
    if (t->failure[0])
        fail_msg("%s", t->failure);
}

static void t_done(t_ctx *t)
{
    tl_drop_db(t->db);
}

/* ---- 1. routes ----------------------------------------------------------------------------- */

static int client_routes(t_ctx *t)
{
    if (expect(t, t->port, "GET", "/healthz", NULL, NULL, 200, "{\"status\":\"ok\"}") ||
        expect(t, t->port, "GET", "/healthz?verbose=1", NULL, NULL, 200, "{\"status\":\"ok\"}") ||
        expect(t, t->port, "GET", "/readyz", NULL, NULL, 200,
               "{\"ready\":true,\"role\":\"leader\"}"))
        return -1;
    atomic_store(&t->role_leader, 0);
    if (expect(t, t->port, "GET", "/readyz", NULL, NULL, 200,
               "{\"ready\":true,\"role\":\"standby\"}") ||
        expect(t, t->port, "GET", "/nope", NULL, NULL, 404, "{\"error\":\"not found\"}") ||
        expect(t, t->port, "GET", "/v1", NULL, NULL, 404, "{\"error\":\"not found\"}") ||
        expect(t, t->port, "GET", "/metricsx", NULL, NULL, 404, NULL) ||
        expect(t, t->port, "GET", "/v1/items/1", NULL, NULL, 404, NULL))
        return -1;

    http_res r;
    CHECK(http_req(t, NULL, t->port, "HEAD", "/healthz", NULL, NULL, 0, &r) == 0, "HEAD");
    CHECK(r.status == 200 && r.body.len == 0 && has_header(&r, "Content-Length: 15\r\n"),
          "HEAD /healthz: %ld '%s' %s", r.status, r.body.data, r.headers.data);
    res_free(&r);

    /* Wrong methods: 405 with Allow. */
    CHECK(http_req(t, NULL, t->port, "POST", "/metrics", NULL, "x", 1, &r) == 0, "POST /metrics");
    CHECK(r.status == 405 && has_header(&r, "Allow: GET, HEAD\r\n"), "POST /metrics: %ld %s",
          r.status, r.headers.data);
    res_free(&r);
    CHECK(http_req(t, NULL, t->port, "DELETE", "/healthz", NULL, NULL, 0, &r) == 0, "DELETE");
    CHECK(r.status == 405 && has_header(&r, "Allow: GET, HEAD\r\n"), "DELETE: %ld", r.status);
    res_free(&r);
    CHECK(http_req(t, NULL, t->port, "GET", "/v1/items", NULL, NULL, 0, &r) == 0, "GET items");
    CHECK(r.status == 405 && has_header(&r, "Allow: POST\r\n") &&
              strcmp(r.body.data, "{\"error\":\"method not allowed\"}") == 0,
          "GET /v1/items: %ld %s", r.status, r.body.data);
    res_free(&r);
    CHECK(http_req(t, NULL, t->port, "PUT", "/v1/items", json_auth, "{}", 2, &r) == 0, "PUT");
    CHECK(r.status == 405 && has_header(&r, "Allow: POST\r\n"), "PUT: %ld", r.status);
    res_free(&r);

    /* /metrics: the exposition type, the registry's lines, and promtool agrees. */
    CHECK(http_req(t, NULL, t->port, "GET", "/metrics", NULL, NULL, 0, &r) == 0, "metrics");
    CHECK(r.status == 200, "GET /metrics: %ld", r.status);
    CHECK(has_header(&r, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
          "content type: %s", r.headers.data);
    CHECK(strstr(r.body.data, "# TYPE pgpace_http_requests_total counter\n"), "%s", r.body.data);
    CHECK(strstr(r.body.data, "pgpace_http_requests_total{route=\"/healthz\",status=\"200\"} 3\n"),
          "%s", r.body.data);
    CHECK(strstr(r.body.data, "pgpace_http_requests_total{route=\"other\",status=\"404\"} 4\n"),
          "%s", r.body.data);
    CHECK(strstr(r.body.data, "pgpace_due_items{customer=\"acme\"} 3\n"), "%s", r.body.data);
    CHECK(strstr(r.body.data,
                 "pgpace_http_request_seconds_bucket{route=\"/readyz\",le=\"+Inf\"} 2\n"),
          "%s", r.body.data);
    strbuf out = {0};
    int rc = promtool_check(r.body.data, &out);
    if (rc != 0)
        failed(t, __LINE__, "promtool check metrics: %d %s\n%s", rc, out.data, r.body.data);
    strbuf_free(&out);
    res_free(&r);
    return t->failure[0] ? -1 : 0;
}

static void routes(void **state)
{
    t_ctx t;
    t_init(&t, client_routes);
    t_run(&t);
    t_done(&t);
}

/* ---- 1b. the status page and /v1/status ------------------------------------------------------ */

/* The base64 SHA-256 of the page's one <tag> element's content, as its CSP names it. */
static int element_sha(const char *html, const char *tag, char out[45])
{
    char open[16], close[16];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = strstr(html, open);
    const char *b = a ? strstr(a, close) : NULL;
    if (!a || !b || strstr(a + 1, open))
        return -1;
    a += strlen(open);
    unsigned char md[32];
    unsigned int n = 0;
    if (EVP_Digest(a, (size_t)(b - a), md, &n, EVP_sha256(), NULL) != 1)
        return -1;
    EVP_EncodeBlock((unsigned char *)out, md, 32);
    return 0;
}

static int client_status_page(t_ctx *t)
{
    static const char *const bearer[] = {"Authorization: Bearer " STATUS_TOKEN, NULL};
    static const char *const wrong_bearer[] = {"Authorization: Bearer page-token", NULL};
    static const char *const enqueue_bearer[] = {"Authorization: Bearer " TOKEN, NULL};
    /* base64("anyone:page-token:with-colon"): the password may hold colons. */
    static const char *const basic[] = {
        "Authorization: Basic YW55b25lOnBhZ2UtdG9rZW46d2l0aC1jb2xvbg==", NULL};
    /* base64("page-token:with-colon"): the user name is "page-token", the password wrong. */
    static const char *const basic_wrong[] = {"Authorization: Basic cGFnZS10b2tlbjp3aXRoLWNvbG9u",
                                              NULL};
    static const char *const basic_garbage[] = {"Authorization: Basic !!!!", NULL};
    static const char *const basic_no_colon[] = {"Authorization: Basic cGFnZQ==", NULL};
    static const char *const two_auth[] = {"Authorization: Bearer " STATUS_TOKEN,
                                           "Authorization: Bearer " STATUS_TOKEN, NULL};
    const char *unauth = "{\"error\":\"missing or invalid status token\"}";

    /* With a token: nothing without it, and the browser is asked for Basic credentials. */
    http_res r;
    CHECK(http_req(t, NULL, t->port, "GET", "/", NULL, NULL, 0, &r) == 0, "GET /");
    CHECK(r.status == 401 && has_header(&r, "WWW-Authenticate: Basic realm=\"pgpace status\""),
          "GET / without token: %ld %s", r.status, r.headers.data);
    CHECK(strcmp(r.body.data, unauth) == 0, "%s", r.body.data);
    res_free(&r);
    CHECK(http_req(t, NULL, t->port, "GET", "/v1/status", NULL, NULL, 0, &r) == 0, "status");
    CHECK(r.status == 401 && has_header(&r, "WWW-Authenticate: Bearer realm=\"pgpace status\"") &&
              !has_header(&r, "Basic"),
          "GET /v1/status without token: %ld %s", r.status, r.headers.data);
    res_free(&r);
    if (expect(t, t->port, "GET", "/v1/status", NULL, NULL, 401, unauth) ||
        expect(t, t->port, "GET", "/v1/status", wrong_bearer, NULL, 401, unauth) ||
        expect(t, t->port, "GET", "/v1/status", enqueue_bearer, NULL, 401, unauth) ||
        expect(t, t->port, "GET", "/v1/status", basic_wrong, NULL, 401, unauth) ||
        expect(t, t->port, "GET", "/v1/status", basic_garbage, NULL, 401, unauth) ||
        expect(t, t->port, "GET", "/v1/status", basic_no_colon, NULL, 401, unauth) ||
        expect(t, t->port, "GET", "/v1/status", two_auth, NULL, 401, unauth))
        return -1;
    /* Bearer or Basic; the query reaches the callback as sent, without any fragment. */
    if (expect(t, t->port, "GET", "/v1/status", bearer, NULL, 200, "{\"query\":\"\"}") ||
        expect(t, t->port, "GET", "/v1/status?limit=5&filter=a%20b", basic, NULL, 200,
               "{\"query\":\"limit=5&filter=a%20b\"}") ||
        expect(t, t->port, "GET", "/v1/status?", bearer, NULL, 200, "{\"query\":\"\"}"))
        return -1;
    /* The other routes keep their own rules: /metrics stays open, the enqueue token is not the
     * status token. */
    if (expect(t, t->port, "GET", "/healthz", NULL, NULL, 200, NULL) ||
        expect(t, t->port, "POST", "/v1/items",
               (const char *const[]){"Authorization: Bearer " STATUS_TOKEN,
                                     "Content-Type: application/json", NULL},
               "{}", 401, NULL))
        return -1;
    CHECK(http_req(t, NULL, t->port, "GET", "/metrics", NULL, NULL, 0, &r) == 0, "metrics");
    CHECK(r.status == 200, "GET /metrics with a status token set: %ld", r.status);
    res_free(&r);

    /* Read-only: no other method. */
    CHECK(http_req(t, NULL, t->port, "POST", "/v1/status", bearer, "x", 1, &r) == 0, "POST");
    CHECK(r.status == 405 && has_header(&r, "Allow: GET, HEAD\r\n"), "POST /v1/status: %ld",
          r.status);
    res_free(&r);
    CHECK(http_req(t, NULL, t->port, "DELETE", "/", bearer, NULL, 0, &r) == 0, "DELETE /");
    CHECK(r.status == 405 && has_header(&r, "Allow: GET, HEAD\r\n"), "DELETE /: %ld", r.status);
    res_free(&r);

    /* The page: HTML, with a policy that allows exactly its own script and style. */
    CHECK(http_req(t, NULL, t->port, "GET", "/", basic, NULL, 0, &r) == 0, "GET / with token");
    CHECK(r.status == 200 && has_header(&r, "Content-Type: text/html; charset=utf-8\r\n"),
          "GET /: %ld %s", r.status, r.headers.data);
    CHECK(strncmp(r.body.data, "<!doctype html>", 15) == 0, "page: %.80s", r.body.data);
    char script[45], style[45], want[160];
    CHECK(element_sha(r.body.data, "script", script) == 0, "the page has one <script>");
    CHECK(element_sha(r.body.data, "style", style) == 0, "the page has one <style>");
    snprintf(want, sizeof want, "script-src 'sha256-%s'; style-src 'sha256-%s';", script, style);
    CHECK(has_header(&r, "Content-Security-Policy: default-src 'none'; ") && has_header(&r, want) &&
              has_header(&r, "connect-src 'self'") && has_header(&r, "frame-ancestors 'none'"),
          "CSP: want %s in %s", want, r.headers.data);
    CHECK(has_header(&r, "X-Content-Type-Options: nosniff\r\n") &&
              has_header(&r, "Referrer-Policy: no-referrer\r\n") &&
              has_header(&r, "X-Frame-Options: DENY\r\n"),
          "headers: %s", r.headers.data);
    /* Nothing outside: no URL of another origin anywhere in it. */
    CHECK(!strstr(r.body.data, "http://") && !strstr(r.body.data, "https://") &&
              !strstr(r.body.data, "//cdn") && !strstr(r.body.data, "@import"),
          "the page refers to something outside itself");
    size_t page_len = r.body.len;
    res_free(&r);
    CHECK(http_req(t, NULL, t->port, "HEAD", "/", bearer, NULL, 0, &r) == 0, "HEAD /");
    char cl[64];
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", page_len);
    CHECK(r.status == 200 && r.body.len == 0 && has_header(&r, cl), "HEAD /: %ld %s", r.status,
          r.headers.data);
    res_free(&r);

    /* Without a token (the second server), both are open. */
    if (expect(t, t->port2, "GET", "/v1/status?sort=-name", NULL, NULL, 200,
               "{\"query\":\"sort=-name\"}"))
        return -1;
    CHECK(http_req(t, NULL, t->port2, "GET", "/", NULL, NULL, 0, &r) == 0, "GET / open");
    CHECK(r.status == 200 && r.body.len == page_len, "GET / without a token set: %ld", r.status);
    res_free(&r);
    return 0;
}

static void status_page(void **state)
{
    t_ctx t;
    t_init(&t, client_status_page);
    t_run(&t);
    t_done(&t);
}

/* ---- 2. enqueue: created, duplicate, body forms ---------------------------------------------- */

/* The answer's id, and its tail after the id: `suffix` exactly, or (suffix NULL) a new item's
 * estimated send time, an RFC 3339 UTC timestamp at most a minute from now (an idle customer at
 * 60/min sends it within its first period). */
static int parse_id(t_ctx *t, const char *body, const char *suffix, long long *id)
{
    char tail[96];
    int n = sscanf(body, "{\"id\":%lld%95s", id, tail);
    if (suffix) {
        CHECK(n == 2 && strcmp(tail, suffix) == 0, "unexpected answer %s", body);
        return 0;
    }
    int y, mo, d, h, mi, sec, us;
    char z = 0, close[4] = "";
    CHECK(n == 2 &&
              sscanf(tail, ",\"estimated_send_at\":\"%4d-%2d-%2dT%2d:%2d:%2d.%6d%c%3s", &y, &mo, &d,
                     &h, &mi, &sec, &us, &z, close) == 9 &&
              z == 'Z' && strcmp(close, "\"}") == 0,
          "unexpected answer %s", body);
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = d,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = sec};
    long long at = (long long)timegm(&tm), now = (long long)time(NULL);
    CHECK(at >= now - 5 && at <= now + 65, "estimated_send_at %s is not within a minute of now",
          tail);
    return 0;
}

static int client_enqueue(t_ctx *t)
{
    http_res r;
    const char *item = "{\"customer\":\"" CUSTOMER "\",\"payload\":{\"order\":42},"
                       "\"idempotency_key\":\"order-42\",\"kind\":\"order.created\","
                       "\"carrier\":\"shopify\",\"priority\":5,"
                       "\"run_at\":\"2030-01-01T00:00:00Z\"}";
    CHECK(http_req(t, NULL, t->port, "POST", "/v1/items", json_auth, item, strlen(item), &r) == 0,
          "post");
    CHECK(r.status == 201 && has_header(&r, "Content-Type: application/json\r\n"), "%ld %s",
          r.status, r.body.data);
    /* Its run_at is the estimate: nothing sends it before then. */
    if (parse_id(t, r.body.data, ",\"estimated_send_at\":\"2030-01-01T00:00:00.000000Z\"}",
                 &t->ids[0]))
        return -1;
    res_free(&r);

    /* The same key again: the first id, marked duplicate. */
    CHECK(http_req(t, NULL, t->port, "POST", "/v1/items", json_auth, item, strlen(item), &r) == 0,
          "post");
    CHECK(r.status == 200, "duplicate: %ld %s", r.status, r.body.data);
    /* A duplicate may have been sent long ago: no estimate. */
    if (parse_id(t, r.body.data, ",\"duplicate\":true,\"estimated_send_at\":null}", &t->ids[1]))
        return -1;
    CHECK(t->ids[1] == t->ids[0], "duplicate id %lld != %lld", t->ids[1], t->ids[0]);
    res_free(&r);

    /* Media type parameters and case are fine; no key means always new. */
    const char *const charset[] = {"authorization: bearer " TOKEN,
                                   "Content-Type: Application/JSON; charset=utf-8", NULL};
    const char *plain = "{\"customer\":\"" CUSTOMER "\",\"payload\":[1,2,3]}";
    CHECK(http_req(t, NULL, t->port, "POST", "/v1/items", charset, plain, strlen(plain), &r) == 0,
          "post");
    CHECK(r.status == 201, "charset: %ld %s", r.status, r.body.data);
    if (parse_id(t, r.body.data, NULL, &t->ids[2]))
        return -1;
    res_free(&r);

    /* A chunked body, and a 4 KB body sent after "Expect: 100-continue". */
    const char *const chunked[] = {"Authorization: Bearer " TOKEN, "Content-Type: application/json",
                                   "Transfer-Encoding: chunked", NULL};
    CHECK(http_req(t, NULL, t->port, "POST", "/v1/items", chunked, plain, strlen(plain), &r) == 0,
          "post");
    CHECK(r.status == 201, "chunked: %ld %s", r.status, r.body.data);
    if (parse_id(t, r.body.data, NULL, &t->ids[3]))
        return -1;
    res_free(&r);
    strbuf big = {0};
    strbuf_puts(&big, "{\"customer\":\"" CUSTOMER "\",\"payload\":\"");
    for (int i = 0; i < 4000; i++)
        strbuf_append(&big, "x", 1);
    strbuf_puts(&big, "\"}");
    const char *const expect_continue[] = {"Authorization: Bearer " TOKEN,
                                           "Content-Type: application/json", "Expect: 100-continue",
                                           NULL};
    int rc =
        http_req(t, NULL, t->port, "POST", "/v1/items", expect_continue, big.data, big.len, &r);
    strbuf_free(&big);
    CHECK(rc == 0, "post");
    CHECK(r.status == 201, "4 KB body: %ld %s", r.status, r.body.data);
    CHECK(strcasestr(r.headers.data, "HTTP/1.1 100 Continue"), "no 100 Continue: %s",
          r.headers.data);
    if (parse_id(t, r.body.data, NULL, &t->ids[4]))
        return -1;
    res_free(&r);
    CHECK(atomic_load(&t->enqueues) == 5, "enqueue callback ran %d times",
          atomic_load(&t->enqueues));
    return 0;
}

static void enqueue_created_and_duplicate(void **state)
{
    t_ctx t;
    t_init(&t, client_enqueue);
    t_run(&t);
    /* The items exist as sent. */
    assert_int_equal(tl_query_int(t.db->conn, "SELECT count(*) FROM pgpace.item"), 4);
    assert_int_equal(tl_query_int(t.db->conn, "SELECT count(*) FROM pgpace.queue"), 4);
    char *row =
        tl_query_str(t.db->conn,
                     "SELECT concat_ws('|', i.payload::text, i.carrier, i.kind, i.priority, "
                     "i.run_at AT TIME ZONE 'UTC', i.idempotency_key) FROM pgpace.item i "
                     "WHERE i.id = %lld",
                     t.ids[0]);
    assert_string_equal(row,
                        "{\"order\": 42}|shopify|order.created|5|2030-01-01 00:00:00|order-42");
    free(row);
    assert_int_equal(tl_query_int(t.db->conn,
                                  "SELECT octet_length(payload #>> '{}') FROM pgpace.item "
                                  "WHERE id = %lld",
                                  t.ids[4]),
                     4000);
    t_done(&t);
}

/* ---- 3. auth, content type, disabled -------------------------------------------------------- */

static int client_auth(t_ctx *t)
{
    const char *ok_item = "{\"customer\":\"" CUSTOMER "\",\"payload\":{}}";
    static const char *const variants[][3] = {
        {"Content-Type: application/json", NULL, NULL},
        {"Authorization: Bearer wrong", "Content-Type: application/json", NULL},
        {"Authorization: Bearer " TOKEN "x", "Content-Type: application/json", NULL},
        {"Authorization: Bearer s3cret", "Content-Type: application/json", NULL},
        {"Authorization: Basic " TOKEN, "Content-Type: application/json", NULL},
        {"Authorization: Bearer", "Content-Type: application/json", NULL},
        {"Authorization: " TOKEN, "Content-Type: application/json", NULL},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(variants); i++) {
        http_res r;
        CHECK(http_req(t, NULL, t->port, "POST", "/v1/items", variants[i], ok_item, strlen(ok_item),
                       &r) == 0,
              "post");
        CHECK(r.status == 401 && has_header(&r, "WWW-Authenticate: Bearer realm=\"pgpace\"\r\n") &&
                  strcmp(r.body.data, "{\"error\":\"missing or invalid bearer token\"}") == 0,
              "variant %zu: %ld %s %s", i, r.status, r.body.data, r.headers.data);
        res_free(&r);
    }
    /* Two Authorization headers: ambiguous, refused even if one is right. */
    const char *const twice[] = {"Authorization: Bearer " TOKEN, "Authorization: Bearer " TOKEN,
                                 "Content-Type: application/json", NULL};
    if (expect(t, t->port, "POST", "/v1/items", twice, ok_item, 401, NULL))
        return -1;

    const char *const wrong_type[][3] = {
        {"Authorization: Bearer " TOKEN, "Content-Type: text/plain", NULL},
        {"Authorization: Bearer " TOKEN, "Content-Type: application/jsonx", NULL},
        {"Authorization: Bearer " TOKEN, "Content-Type: application/x-www-form-urlencoded", NULL},
        {"Authorization: Bearer " TOKEN, "Content-Type:", NULL},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(wrong_type); i++) {
        if (expect(t, t->port, "POST", "/v1/items", wrong_type[i], ok_item, 415,
                   "{\"error\":\"content-type must be application/json\"}"))
            return -1;
    }
    /* The server without a token: disabled, before any other check. */
    if (expect(t, t->port2, "POST", "/v1/items", json_auth, ok_item, 503,
               "{\"error\":\"http enqueue is disabled: set [http] enqueue_token\"}") ||
        expect(t, t->port2, "POST", "/v1/items", NULL, ok_item, 503, NULL) ||
        expect(t, t->port2, "GET", "/healthz", NULL, NULL, 200, NULL))
        return -1;
    CHECK(atomic_load(&t->enqueues) == 0, "enqueue callback ran %d times",
          atomic_load(&t->enqueues));
    /* And the right token works on the enabled one. */
    return post_item(t, ok_item, 201, NULL);
}

static void enqueue_auth_and_content_type(void **state)
{
    t_ctx t;
    t_init(&t, client_auth);
    t_run(&t);
    assert_int_equal(tl_query_int(t.db->conn, "SELECT count(*) FROM pgpace.item"), 1);
    t_done(&t);
}

/* ---- 4. bad input ----------------------------------------------------------------------- */

static int client_bad_input(t_ctx *t)
{
    static const struct {
        const char *body;
        const char *want;
    } cases[] = {
        {"{bad", "{\"error\":\"body is not valid JSON: invalid input syntax for type json\"}"},
        {"", "{\"error\":\"body is not valid JSON: invalid input syntax for type json\"}"},
        {"{\"customer\":\"acme\",\"payload\":{}} trailing",
         "{\"error\":\"body is not valid JSON: invalid input syntax for type json\"}"},
        {"[1,2]", "{\"error\":\"body must be a JSON object\"}"},
        /* One reading of a body: a member named twice is refused, wherever it is, before the
         * database keeps the last of the two (a gateway in front may have read the first). */
        {"{\"customer\":\"acme\",\"customer\":\"other\",\"payload\":{}}",
         "{\"error\":\"duplicate member customer: an object names it twice (each member is "
         "read once)\"}"},
        {"{\"customer\":\"acme\",\"payload\":{\"order\":{\"id\":1,\"\\u0069d\":2}}}",
         "{\"error\":\"duplicate member payload.order.id: an object names it twice (each member "
         "is read once)\"}"},
        {"null", "{\"error\":\"body must be a JSON object\"}"},
        {"{\"payload\":{}}", "{\"error\":\"field customer: required, must be a string\"}"},
        {"{\"customer\":7,\"payload\":{}}",
         "{\"error\":\"field customer: required, must be a string\"}"},
        {"{\"customer\":\"acme\"}", "{\"error\":\"field payload: required, must not be null\"}"},
        {"{\"customer\":\"acme\",\"payload\":null}",
         "{\"error\":\"field payload: required, must not be null\"}"},
        {"{\"customer\":\"nobody\",\"payload\":{}}",
         "{\"error\":\"field customer: unknown customer 'nobody'\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"colour\":\"red\"}",
         "{\"error\":\"unknown field 'colour' (allowed: customer, payload, carrier, kind, run_at, "
         "idempotency_key, priority, expires_at, supersede_key, traceparent, tracestate, "
         "order_key)\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"priority\":1.5}",
         "{\"error\":\"field priority: must be an integer between -32767 and 32767\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"priority\":\"1\"}",
         "{\"error\":\"field priority: must be an integer between -32767 and 32767\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"priority\":99999}",
         "{\"error\":\"field priority: must be an integer between -32767 and 32767\"}"},
        /* -32768 is the recovery lane's (pgpace recover). */
        {"{\"customer\":\"acme\",\"payload\":{},\"priority\":-32768}",
         "{\"error\":\"field priority: must be an integer between -32767 and 32767\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"expires_at\":\"later\"}",
         "{\"error\":\"field expires_at: invalid input syntax for type timestamp with time zone: "
         "\\\"later\\\"\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"expires_at\":\"-infinity\"}",
         "{\"error\":\"field expires_at: must be a finite timestamp\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"expires_at\":1893456000}",
         "{\"error\":\"field expires_at: must be a string\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"run_at\":\"2100-01-02T00:00:00Z\","
         "\"expires_at\":\"2100-01-01T00:00:00Z\"}",
         "{\"error\":\"field expires_at: must be later than run_at\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"supersede_key\":\"\"}",
         "{\"error\":\"field supersede_key: must be 1 to 255 characters\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"supersede_key\":[\"k\"]}",
         "{\"error\":\"field supersede_key: must be a string\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"order_key\":\"\"}",
         "{\"error\":\"field order_key: must not be empty (leave it out for none)\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"order_key\":\"a\\u0007b\"}",
         "{\"error\":\"field order_key: must not contain control characters\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"kind\":3}",
         "{\"error\":\"field kind: must be a string\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"kind\":\"\"}",
         "{\"error\":\"field kind: must be 1 to 128 characters\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"carrier\":\"-bad\"}",
         "{\"error\":\"field carrier: invalid carrier '-bad'\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"idempotency_key\":\"\"}",
         "{\"error\":\"field idempotency_key: must be 1 to 255 characters\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"run_at\":\"soon\"}",
         "{\"error\":\"field run_at: invalid input syntax for type timestamp with time zone: "
         "\\\"soon\\\"\"}"},
        {"{\"customer\":\"acme\",\"payload\":{},\"run_at\":\"infinity\"}",
         "{\"error\":\"field run_at: must be a finite timestamp\"}"},
        /* The payload limit is the database's (set to 64 bytes below). */
        {"{\"customer\":\"acme\",\"payload\":\"0123456789012345678901234567890123456789012345678901"
         "234567890123456789\"}",
         "{\"error\":\"field payload: 72 bytes, above the limit of 64 bytes\"}"},
        /* A name with a quote and a newline comes back escaped, on one line. */
        {"{\"customer\":\"a\\\"b\\nc\",\"payload\":{}}",
         "{\"error\":\"field customer: unknown customer 'a\\\"b\\nc'\"}"},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(cases); i++) {
        if (post_item(t, cases[i].body, 400, cases[i].want) != 0)
            return -1;
    }
    /* Bytes that are not text: a NUL (caught by the server) and invalid UTF-8 (by PostgreSQL). */
    http_res r;
    static const char nul_body[] = "{\"customer\":\"acme\",\"payload\":{}}\0garbage";
    CHECK(http_req(t, NULL, t->port, "POST", "/v1/items", json_auth, nul_body, sizeof nul_body - 1,
                   &r) == 0,
          "post");
    CHECK(r.status == 400 &&
              strcmp(r.body.data,
                     "{\"error\":\"body is not valid JSON: it contains a NUL byte\"}") == 0,
          "NUL: %ld %s", r.status, r.body.data);
    res_free(&r);
    const char *latin1 = "{\"customer\":\"acme\",\"payload\":\"caf\xe9\"}";
    CHECK(http_req(t, NULL, t->port, "POST", "/v1/items", json_auth, latin1, strlen(latin1), &r) ==
              0,
          "post");
    CHECK(r.status == 400 &&
              strncmp(r.body.data, "{\"error\":\"body is not valid JSON: invalid byte sequence",
                      55) == 0,
          "latin1: %ld %s", r.status, r.body.data);
    res_free(&r);
    return 0;
}

static void enqueue_bad_input(void **state)
{
    t_ctx t;
    t_init(&t, client_bad_input);
    tl_exec(t.db->conn, "UPDATE pgpace.setting SET value = '64' WHERE name = 'max_payload_bytes'");
    t_run(&t);
    assert_int_equal(tl_query_int(t.db->conn, "SELECT count(*) FROM pgpace.item"), 0);
    t_done(&t);
}

/* ---- 4b. nesting: refused before the database, with the limit named ------------------------- */

#define TOO_DEEP                                                                                   \
    "{\"error\":\"body nests arrays and objects more than 257 levels deep (a payload may nest "    \
    "at most 256)\"}"

/* {"customer":"acme","payload":OPEN x n, MIDDLE, CLOSE x n} (a heap string). */
static char *nested_item(const char *open, const char *middle, const char *close, size_t n)
{
    strbuf b = {0};
    strbuf_puts(&b, "{\"customer\":\"" CUSTOMER "\",\"payload\":");
    for (size_t i = 0; i < n; i++)
        strbuf_puts(&b, open);
    strbuf_puts(&b, middle);
    for (size_t i = 0; i < n; i++)
        strbuf_puts(&b, close);
    strbuf_puts(&b, "}");
    char *text = strbuf_str(&b) ? strdup(b.data) : NULL;
    strbuf_free(&b);
    return text;
}

static int client_nesting(t_ctx *t)
{
    static const struct {
        const char *open, *middle, *close;
        size_t n;
        int status;
        const char *want;
    } cases[] = {
        /* 100,000 levels: a 500 "internal error" before (PostgreSQL's stack depth limit). */
        {"[", "", "]", 100000, 400, TOO_DEEP},
        {"{\"a\":", "1", "}", 100000, 400, TOO_DEEP},
        /* Never closed: counted all the same (a parser would go that deep before failing). */
        {"[", "", "", 100000, 400, TOO_DEEP},
        /* The limit: 256 levels in the payload, 257 with the body's own object. */
        {"[", "", "]", 257, 400, TOO_DEEP},
        {"{\"a\":", "1", "}", 257, 400, TOO_DEEP},
        {"[", "", "]", 256, 201, NULL},
        {"{\"a\":", "1", "}", 256, 201, NULL},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(cases); i++) {
        char *body = nested_item(cases[i].open, cases[i].middle, cases[i].close, cases[i].n);
        CHECK(body, "out of memory");
        int rc = post_item(t, body, cases[i].status, cases[i].want);
        free(body);
        if (rc)
            return -1;
    }
    /* Brackets in a string are not nesting, and an escaped quote does not end it: a string of
     * 100,000 '[' after \", and one of ten '[' between \" and \\. */
    strbuf b = {0};
    strbuf_puts(&b, "{\"customer\":\"" CUSTOMER "\",\"payload\":\"\\\"");
    for (int i = 0; i < 100000; i++)
        strbuf_puts(&b, "[");
    strbuf_puts(&b, "\"}");
    int rc = post_item(t, strbuf_str(&b), 201, NULL) ||
             post_item(t, "{\"customer\":\"" CUSTOMER "\",\"payload\":\"\\\"[[[[[[[[[[\\\\\"}", 201,
                       NULL);
    strbuf_free(&b);
    if (rc)
        return -1;
    /* Deep elsewhere than the payload: refused the same way, before the fields are checked. */
    strbuf_puts(&b, "{\"customer\":\"" CUSTOMER "\",\"payload\":1,\"kind\":");
    for (int i = 0; i < 300; i++)
        strbuf_puts(&b, "[");
    rc = post_item(t, strbuf_str(&b), 400, TOO_DEEP);
    strbuf_free(&b);
    return rc;
}

static void enqueue_nesting_limit(void **state)
{
    t_ctx t;
    t_init(&t, client_nesting);
    t.opts.max_body_bytes = 1 << 20; /* room for 100,000 levels */
    t_run(&t);
    /* The four accepted items, and the 256-level payloads stored whole. */
    assert_int_equal(tl_query_int(t.db->conn, "SELECT count(*) FROM pgpace.item"), 4);
    assert_int_equal(tl_query_int(t.db->conn,
                                  "SELECT count(*) FROM pgpace.item WHERE jsonb_path_exists("
                                  "payload, 'strict $.**{255} ? (@.type() == \"array\" || "
                                  "@.type() == \"object\")')"),
                     2);
    assert_int_equal(tl_query_int(t.db->conn, "SELECT count(*) FROM pgpace.item "
                                              "WHERE jsonb_typeof(payload) = 'string' AND "
                                              "strpos(payload #>> '{}', '[[[[[[[[[[') > 0"),
                     2);
    t_done(&t);
}

/* ---- 5. limits: body, header, slow clients ------------------------------------------------ */

static int client_limits(t_ctx *t)
{
    /* Over max_body_bytes by Content-Length: 413 before the body is sent (Expect). */
    size_t big_len = MAX_BODY + 1;
    char *big = malloc(big_len + 1);
    CHECK(big, "malloc");
    memset(big, ' ', big_len);
    big[0] = '{';
    big[big_len - 1] = '}';
    big[big_len] = '\0';
    http_res r;
    int rc = http_req(t, NULL, t->port, "POST", "/v1/items", json_auth, big, big_len, &r);
    CHECK(rc == 0, "post");
    CHECK(r.status == 413 && strcmp(r.body.data, "{\"error\":\"body is too large\"}") == 0 &&
              has_header(&r, "Connection: close\r\n"),
          "413: %ld %s", r.status, r.body.data);
    res_free(&r);
    /* Exactly the limit passes the size check (and is then not a valid item). */
    rc = http_req(t, NULL, t->port, "POST", "/v1/items", json_auth, big, MAX_BODY, &r);
    CHECK(rc == 0, "post");
    CHECK(r.status == 400, "at the limit: %ld %s", r.status, r.body.data);
    res_free(&r);

    /* Over the limit in a chunked body, sent raw without waiting for 100 Continue. */
    int fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    strbuf req = {0};
    strbuf_printf(&req,
                  "POST /v1/items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                  "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "%zx\r\n",
                  big_len);
    strbuf_append(&req, big, big_len);
    strbuf_puts(&req, "\r\n0\r\n\r\n");
    free(big);
    rc = raw_send(fd, req.data, req.len);
    strbuf_free(&req);
    strbuf out = {0};
    strbuf_append(&out, "", 0);
    int rr = raw_read_to_close(fd, &out, 5000);
    close(fd);
    CHECK(rc == 0 && rr == 0, "chunked 413: send %d read %d", rc, rr);
    CHECK(strncmp(out.data, "HTTP/1.1 413 Content Too Large\r\n", 32) == 0, "chunked: %s",
          out.data);
    strbuf_free(&out);

    /* Request line and headers over 16 KiB: 431, then closed. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    strbuf_puts(&req, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ");
    for (int i = 0; i < 17000; i++)
        strbuf_append(&req, "a", 1);
    strbuf_puts(&req, "\r\n\r\n");
    rc = raw_send(fd, req.data, req.len);
    strbuf_free(&req);
    strbuf_append(&out, "", 0);
    rr = raw_read_to_close(fd, &out, 5000);
    close(fd);
    CHECK(rc == 0 && rr == 0, "431: send %d read %d", rc, rr);
    CHECK(strncmp(out.data, "HTTP/1.1 431 ", 13) == 0, "431: %s", out.data);
    strbuf_free(&out);
    /* Many small headers count too. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    strbuf_puts(&req, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 2000; i++)
        strbuf_printf(&req, "X-H%d: v\r\n", i);
    strbuf_puts(&req, "\r\n");
    rc = raw_send(fd, req.data, req.len);
    strbuf_free(&req);
    strbuf_append(&out, "", 0);
    rr = raw_read_to_close(fd, &out, 5000);
    close(fd);
    CHECK(rc == 0 && rr == 0 && strncmp(out.data, "HTTP/1.1 431 ", 13) == 0, "431 many: %s",
          out.data);
    strbuf_free(&out);

    /* Garbage instead of HTTP: 400, then closed. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    rc = raw_send(fd, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
    strbuf_append(&out, "", 0);
    rr = raw_read_to_close(fd, &out, 5000);
    close(fd);
    CHECK(rc == 0 && rr == 0 && strncmp(out.data, "HTTP/1.1 400 ", 13) == 0, "garbage: %s",
          out.data);
    strbuf_free(&out);

    /* Half a request, then silence: closed after the timeout, without an answer. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    long long t0 = tl_now_ms();
    rc = raw_send(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n", 32);
    strbuf_append(&out, "", 0);
    rr = raw_read_to_close(fd, &out, 10 * IDLE_MS);
    long long waited = tl_now_ms() - t0;
    close(fd);
    CHECK(rc == 0 && rr == 0, "half request: send %d read %d after %lld ms", rc, rr, waited);
    CHECK(out.len == 0, "half request got an answer: %s", out.data);
    /* Never before the timeout; after it, whenever the loop gets to it (the read gives up at
     * ten timeouts, which is the failure this guards). */
    CHECK(waited >= IDLE_MS - 50 && waited < 10 * IDLE_MS, "closed after %lld ms", waited);
    strbuf_free(&out);

    /* A connection that never sends anything: closed after the timeout too. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    t0 = tl_now_ms();
    rr = raw_read_to_close(fd, &out, 10 * IDLE_MS);
    waited = tl_now_ms() - t0;
    close(fd);
    CHECK(rr == 0 && out.len == 0 && waited >= IDLE_MS - 50, "silent: %d after %lld ms", rr,
          waited);
    strbuf_free(&out);

    /* A GET with a body: answered, the body not read, closed. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    const char *get_body = "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    rc = raw_send(fd, get_body, strlen(get_body));
    strbuf_append(&out, "", 0);
    rr = raw_read_to_close(fd, &out, 5000);
    close(fd);
    CHECK(rc == 0 && rr == 0 && strncmp(out.data, "HTTP/1.1 400 ", 13) == 0, "GET body: %s",
          out.data);
    strbuf_free(&out);
    return 0;
}

static void limits_and_slow_clients(void **state)
{
    t_ctx t;
    t_init(&t, client_limits);
    t_run(&t);
    assert_int_equal(tl_query_int(t.db->conn, "SELECT count(*) FROM pgpace.item"), 0);
    t_done(&t);
}

/* ---- 6. keep-alive and pipelining ---------------------------------------------------------- */

static int client_keepalive(t_ctx *t)
{
    /* libcurl reuses the connection for consecutive requests. */
    CURL *easy = curl_easy_init();
    CHECK(easy, "curl_easy_init");
    http_res r;
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        rc = http_req(t, easy, t->port, "GET", "/healthz", NULL, NULL, 0, &r);
        if (rc == 0 && (r.status != 200 || r.connects != (i == 0 ? 1 : 0)))
            rc = failed(t, __LINE__, "request %d: %ld, %ld new connections", i, r.status,
                        r.connects);
        res_free(&r);
    }
    const char *item = "{\"customer\":\"" CUSTOMER "\",\"payload\":{\"n\":1}}";
    if (rc == 0)
        rc = http_req(t, easy, t->port, "POST", "/v1/items", json_auth, item, strlen(item), &r);
    if (rc == 0 && (r.status != 201 || r.connects != 0))
        rc = failed(t, __LINE__, "POST on a kept-alive connection: %ld, %ld new", r.status,
                    r.connects);
    if (rc == 0)
        res_free(&r);
    curl_easy_cleanup(easy);
    if (rc != 0)
        return rc;

    /* Four requests in one write, one an enqueue answered asynchronously, and an error in
     * between: answered in order on one connection; the last asks to close. */
    int fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    strbuf req = {0};
    strbuf_puts(&req, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    strbuf_printf(&req,
                  "POST /v1/items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                  "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                  strlen(item), item);
    strbuf_puts(&req, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
    strbuf_puts(&req, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    rc = raw_send(fd, req.data, req.len);
    strbuf_free(&req);
    strbuf out = {0};
    strbuf_append(&out, "", 0);
    int rr = raw_read_to_close(fd, &out, 5000);
    close(fd);
    CHECK(rc == 0 && rr == 0, "pipelined: send %d read %d: %s", rc, rr, out.data);
    CHECK(complete_responses(out.data, out.len) == 4, "pipelined answers: %s", out.data);
    const char *a = strstr(out.data, "HTTP/1.1 200 OK\r\n");
    const char *b = strstr(out.data, "HTTP/1.1 201 Created\r\n");
    const char *c = strstr(out.data, "HTTP/1.1 404 Not Found\r\n");
    const char *d = strstr(out.data, "{\"ready\":true,\"role\":\"leader\"}");
    CHECK(a && b && c && d && a < b && b < c && c < d, "order: %s", out.data);
    const char *closing = strstr(out.data, "Connection: close\r\n");
    CHECK(closing && closing > c && !strstr(closing + 1, "Connection: close"),
          "only the last answer closes: %s", out.data);
    strbuf_free(&out);

    /* Pipelined requests split at awkward places arrive in several reads. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const char *parts[] = {"GET /hea", "lthz HTTP/1.1\r\nHo",
                           "st: x\r\n\r\nGET /healthz HTTP/1.1\r", "\nHost: x\r\n\r\n"};
    strbuf_append(&out, "", 0);
    for (size_t i = 0; i < PGP_ARRAY_LEN(parts) && rc == 0; i++)
        rc = raw_send(fd, parts[i], strlen(parts[i]));
    rr = raw_read_responses(fd, &out, 2, 5000);
    close(fd);
    CHECK(rc == 0 && rr == 0, "split: send %d read %d: %s", rc, rr, out.data);
    strbuf_free(&out);

    /* An idle kept-alive connection is closed after the timeout. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    rc = raw_send(fd, GET_HEALTHZ, strlen(GET_HEALTHZ));
    strbuf_append(&out, "", 0);
    long long t0 = tl_now_ms();
    rr = raw_read_to_close(fd, &out, 10 * IDLE_MS);
    long long waited = tl_now_ms() - t0;
    close(fd);
    CHECK(rc == 0 && rr == 0 && complete_responses(out.data, out.len) == 1,
          "idle keep-alive: %d %s", rr, out.data);
    CHECK(waited >= IDLE_MS - 50, "closed after %lld ms", waited);
    strbuf_free(&out);

    /* HTTP/1.0 without keep-alive: answered, then closed. */
    fd = raw_connect(AF_INET, t->port);
    CHECK(fd >= 0, "connect");
    rc = raw_send(fd, "GET /healthz HTTP/1.0\r\n\r\n", 25);
    strbuf_append(&out, "", 0);
    t0 = tl_now_ms();
    rr = raw_read_to_close(fd, &out, 5000);
    waited = tl_now_ms() - t0;
    close(fd);
    CHECK(rc == 0 && rr == 0 && strstr(out.data, "Connection: close\r\n") &&
              strstr(out.data, "{\"status\":\"ok\"}"),
          "HTTP/1.0: %s", out.data);
    CHECK(waited < IDLE_MS, "HTTP/1.0 closed after %lld ms, not at once", waited);
    strbuf_free(&out);
    return 0;
}

static void keepalive_and_pipelining(void **state)
{
    t_ctx t;
    t_init(&t, client_keepalive);
    t_run(&t);
    assert_int_equal(tl_query_int(t.db->conn, "SELECT count(*) FROM pgpace.item"), 2);
    t_done(&t);
}

/* ---- 7. connection limit ------------------------------------------------------------------- */

#define MAX_CONNS 4

static int client_max_connections(t_ctx *t)
{
    int fds[MAX_CONNS];
    strbuf out = {0};
    /* Fill the server: each connection proven accepted by an answer on it. */
    for (int i = 0; i < MAX_CONNS; i++) {
        fds[i] = raw_connect(AF_INET, t->port);
        CHECK(fds[i] >= 0, "connect %d", i);
        strbuf_reset(&out);
        strbuf_append(&out, "", 0);
        CHECK(raw_send(fds[i], GET_HEALTHZ, strlen(GET_HEALTHZ)) == 0 &&
                  raw_read_responses(fds[i], &out, 1, 5000) == 0,
              "connection %d not served", i);
    }
    /* One more: accepted by the kernel, closed by the server without an answer. */
    int extra = raw_connect(AF_INET, t->port);
    CHECK(extra >= 0, "connect extra");
    strbuf_reset(&out);
    strbuf_append(&out, "", 0);
    (void)raw_send(extra, GET_HEALTHZ, strlen(GET_HEALTHZ));
    int rr = raw_read_to_close(extra, &out, 5000);
    close(extra);
    CHECK(rr == 0 && out.len == 0, "extra connection: %d '%s'", rr, out.data);
    /* Room again after one closes: a new connection is served (retried until the server has
     * seen the close, within a deadline). */
    close(fds[0]);
    long long end = tl_now_ms() + 5000;
    bool served = false;
    while (!served && tl_now_ms() < end) {
        int fd = raw_connect(AF_INET, t->port);
        CHECK(fd >= 0, "connect");
        strbuf_reset(&out);
        strbuf_append(&out, "", 0);
        served = raw_send(fd, GET_HEALTHZ, strlen(GET_HEALTHZ)) == 0 &&
                 raw_read_responses(fd, &out, 1, 1000) == 0;
        close(fd);
    }
    for (int i = 1; i < MAX_CONNS; i++)
        close(fds[i]);
    strbuf_free(&out);
    CHECK(served, "no connection served after one closed");
    return 0;
}

static void connection_limit(void **state)
{
    t_ctx t;
    t_init(&t, client_max_connections);
    t.opts.max_connections = MAX_CONNS;
    t.opts.idle_timeout_ms = 10000; /* the held connections must not time out meanwhile */
    t_run(&t);
    t_done(&t);
}

/* ---- 8. database unreachable ------------------------------------------------------------- */

static int client_db_down(t_ctx *t)
{
    const char *item = "{\"customer\":\"" CUSTOMER "\",\"payload\":{}}";
    if (post_item(t, item, 201, NULL))
        return -1;
    /* Terminate the server's session; it reconnects only after a long backoff. */
    PGconn *admin = PQconnectdb(t->db->conninfo);
    CHECK(PQstatus(admin) == CONNECTION_OK, "connect: %s", PQerrorMessage(admin));
    const char *params[] = {t->app};
    PGresult *res = PQexecParams(admin,
                                 "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE application_name = $1",
                                 1, NULL, params, NULL, NULL, 0);
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "1") == 0;
    PQclear(res);
    PQfinish(admin);
    CHECK(ok, "terminating the backend failed");
    /* /readyz turns 503 once the loss is noticed. */
    long long end = tl_now_ms() + 5000;
    http_res r = {0};
    bool down = false;
    while (!down && tl_now_ms() < end) {
        if (http_req(t, NULL, t->port, "GET", "/readyz", NULL, NULL, 0, &r) != 0)
            return -1;
        down = r.status == 503;
        if (down)
            CHECK(strcmp(r.body.data, "{\"ready\":false,\"role\":\"leader\",\"reason\":\"database "
                                      "unreachable\"}") == 0,
                  "readyz: %s", r.body.data);
        res_free(&r);
    }
    CHECK(down, "/readyz never reported the database down");
    return post_item(t, item, 503, "{\"error\":\"database unreachable\"}");
}

static void database_unreachable(void **state)
{
    t_ctx t;
    t_init(&t, client_db_down);
    t.reconnect_min_ms = 600000;
    t_run(&t);
    t_done(&t);
}

/* ---- 9. options, IPv6, and the answer mapping ----------------------------------------------- */

static void closed_flag(void *arg)
{
    (*(int *)arg)++;
}

static void listen_options(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    static const char *const bad[] = {"",           "9187",        "localhost:9187",  "127.0.0.1",
                                      "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:70000", "::1:9187",
                                      "[::1]9187",  "[::1]:",      "[nope]:1",        "1.2.3:80"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        admin_http *s = NULL;
        pgp_error err = {{0}};
        admin_http_options o = {.listen = bad[i]};
        if (admin_http_new(&loop, &o, NULL, &s, &err) != -EINVAL)
            fail_msg("listen '%s' was accepted", bad[i]);
        char want[256];
        snprintf(want, sizeof want,
                 "[http] listen: expected host:port or [host]:port with a numeric address, got "
                 "'%s'",
                 bad[i]);
        assert_string_equal(err.msg, want);
    }
    /* `pgpace run` says it once, after its own prefix ("[http] listen: " is not repeated). It
     * stops before connecting, so no database needs to be reachable. */
    static const char *const bad_run[] = {"localhost:9187", "127.0.0.1:99999"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad_run); i++) {
        char ini[256], want[256];
        snprintf(ini, sizeof ini,
                 "[database]\nconninfo = host=127.0.0.1 port=1 connect_timeout=1\n[http]\n"
                 "listen = %s\n",
                 bad_run[i]);
        snprintf(want, sizeof want,
                 "pgpace run: [http] listen: expected host:port or [host]:port with a numeric "
                 "address, got '%s'\n",
                 bad_run[i]);
        char *path = tl_temp_file(ini);
        tl_service svc = tl_service_start(TL_ARGV("--config", path, "run"), NULL);
        int status = tl_service_signal(&svc, 0, 1, 10000); /* signal 0: only waits */
        char *log = tl_service_log(&svc);
        tl_service_stop(&svc);
        unlink(path);
        free(path);
        if (status != 1)
            fail_msg("pgpace run with listen = %s: exit %d, expected 1:\n%s", bad_run[i], status,
                     log);
        assert_string_equal(log, want);
        free(log);
    }
    /* Port in use: start fails, naming the address; the server still closes cleanly. */
    admin_http *a = NULL, *b = NULL;
    pgp_error err = {{0}};
    assert_int_equal(
        admin_http_new(&loop, &(admin_http_options){.listen = "127.0.0.1:0"}, NULL, &a, &err), 0);
    assert_int_equal(admin_http_port(a), -ENOTCONN);
    assert_int_equal(admin_http_start(a, &err), 0);
    char spec[64];
    snprintf(spec, sizeof spec, "127.0.0.1:%d", admin_http_port(a));
    assert_int_equal(admin_http_new(&loop, &(admin_http_options){.listen = spec}, NULL, &b, &err),
                     0);
    assert_int_equal(admin_http_start(b, &err), UV_EADDRINUSE);
    tl_assert_contains(err.msg, spec);
    tl_assert_contains(err.msg, "address already in use");
    int closed = 0;
    admin_http_close(a, closed_flag, &closed);
    admin_http_close(b, closed_flag, &closed);
    assert_int_equal(closed, 0); /* never from inside admin_http_close */
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(closed, 2);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Servers driven from this thread, the loop run in steps (no database, no client thread). */

/* Sends request on fd and runs the loop until `want` complete answers are in out. */
static void step_exchange(uv_loop_t *loop, int fd, const char *request, int want, strbuf *out)
{
    strbuf_reset(out);
    strbuf_append(out, "", 0);
    assert_int_equal(raw_send(fd, request, strlen(request)), 0);
    long long end = tl_now_ms() + 5000;
    while (complete_responses(out->data, out->len) < want) {
        if (tl_now_ms() > end)
            fail_msg("no answer to %s; so far: %s", request, out->data);
        uv_run(loop, UV_RUN_NOWAIT);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5) == 1) {
            char buf[4096];
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            assert_true(n > 0);
            strbuf_append(out, buf, (size_t)n);
        }
    }
}

static void run_until_closed(uv_loop_t *loop, admin_http *s)
{
    int closed = 0;
    admin_http_close(s, closed_flag, &closed);
    assert_int_equal(uv_run(loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(closed, 1);
    assert_int_equal(uv_loop_close(loop), 0);
}

static void ipv6_listen(void **state)
{
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
    bool have_v6 = probe >= 0 && bind(probe, (struct sockaddr *)&a, sizeof a) == 0;
    if (probe >= 0)
        close(probe);
    if (!have_v6)
        skip();
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    admin_http *s = NULL;
    pgp_error err = {{0}};
    assert_int_equal(
        admin_http_new(&loop, &(admin_http_options){.listen = "[::1]:0"}, NULL, &s, &err), 0);
    assert_int_equal(admin_http_start(s, &err), 0);
    int port = admin_http_port(s);
    assert_true(port > 0);
    int fd = raw_connect(AF_INET6, port);
    assert_true(fd >= 0);
    /* No callbacks given: /metrics and /readyz say so, enqueue is disabled. */
    strbuf out = {0};
    step_exchange(&loop, fd,
                  "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
                  "POST /v1/items HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                  4, &out);
    tl_assert_contains(out.data, "{\"status\":\"ok\"}");
    tl_assert_contains(out.data, "{\"error\":\"metrics are not available\"}");
    tl_assert_contains(out.data,
                       "{\"ready\":false,\"role\":\"starting\",\"reason\":\"not started\"}");
    tl_assert_contains(out.data,
                       "{\"error\":\"http enqueue is disabled: set [http] enqueue_token\"}");
    close(fd);
    strbuf_free(&out);
    run_until_closed(&loop, s);
}

/* An enqueue callback that answers at once, from inside the call. */
static void instant_enqueue(void *arg, const char *body, size_t len, admin_http_reply *reply)
{
    (*(int *)arg)++;
    admin_http_reply_send(reply, 201, "{\"id\":1}");
}

/* A configuration reload replaces the token; "" disables the endpoint. */
static void token_reload(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    int calls = 0;
    admin_http *s = NULL;
    pgp_error err = {{0}};
    admin_http_callbacks cb = {.enqueue = instant_enqueue, .arg = &calls};
    assert_int_equal(
        admin_http_new(&loop,
                       &(admin_http_options){.listen = "127.0.0.1:0", .enqueue_token = "first"},
                       &cb, &s, &err),
        0);
    assert_int_equal(admin_http_start(s, &err), 0);
    int fd = raw_connect(AF_INET, admin_http_port(s));
    assert_true(fd >= 0);
#define POST_WITH(tok)                                                                             \
    "POST /v1/items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " tok                             \
    "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    strbuf out = {0};
    step_exchange(&loop, fd, POST_WITH("first"), 1, &out);
    tl_assert_contains(out.data, "HTTP/1.1 201 Created\r\n");
    assert_int_equal(admin_http_set_token(s, "second"), 0);
    /* A 401 for a request with a body closes the connection: use a new one each time. */
    step_exchange(&loop, fd, POST_WITH("first"), 1, &out);
    tl_assert_contains(out.data, "HTTP/1.1 401 Unauthorized\r\n");
    close(fd);
    fd = raw_connect(AF_INET, admin_http_port(s));
    step_exchange(&loop, fd, POST_WITH("second"), 1, &out);
    tl_assert_contains(out.data, "HTTP/1.1 201 Created\r\n");
    assert_int_equal(admin_http_set_token(s, ""), 0);
    step_exchange(&loop, fd, POST_WITH("second"), 1, &out);
    tl_assert_contains(out.data, "HTTP/1.1 503 Service Unavailable\r\n");
#undef POST_WITH
    assert_int_equal(calls, 2);
    close(fd);
    strbuf_free(&out);
    run_until_closed(&loop, s);
}

/* API tokens (pgpace token create): a token with the enqueue scope enqueues beside the
 * configured one, one without it is 403, an unknown or revoked (no longer in the set) one 401;
 * the status page, open before, needs a token once one has the status scope, Basic included. */
static void sha256_of(const char *text, unsigned char out[32])
{
    unsigned len = 0;
    assert_int_equal(EVP_Digest(text, strlen(text), out, &len, EVP_sha256(), NULL), 1);
    assert_int_equal(len, 32);
}

static void api_tokens_and_scopes(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    int calls = 0;
    admin_http *s = NULL;
    pgp_error err = {{0}};
    admin_http_callbacks cb = {.enqueue = instant_enqueue, .status = fake_status, .arg = &calls};
    assert_int_equal(
        admin_http_new(&loop,
                       &(admin_http_options){.listen = "127.0.0.1:0", .enqueue_token = "cfg"}, &cb,
                       &s, &err),
        0);
    assert_int_equal(admin_http_start(s, &err), 0);
    admin_http_token toks[2] = {{.scopes = ADMIN_SCOPE_ENQUEUE},
                                {.scopes = ADMIN_SCOPE_READ | ADMIN_SCOPE_STATUS}};
    sha256_of("pgp_enqueuer", toks[0].hash);
    sha256_of("pgp_reader", toks[1].hash);
#define POST_WITH(tok)                                                                             \
    "POST /v1/items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " tok                             \
    "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
#define STATUS_WITH(auth) "GET /v1/status HTTP/1.1\r\nHost: x\r\n" auth "\r\n"
    static const struct {
        const char *request;
        const char *want;
        bool with_tokens;
    } cases[] = {
        /* Before any API token: the configured token only; the page open. */
        {POST_WITH("pgp_enqueuer"), "HTTP/1.1 401 ", false},
        {STATUS_WITH(""), "HTTP/1.1 200 ", false},
        /* With them. */
        {POST_WITH("cfg"), "HTTP/1.1 201 ", true},
        {POST_WITH("pgp_enqueuer"), "HTTP/1.1 201 ", true},
        {POST_WITH("pgp_reader"), "HTTP/1.1 403 ", true},
        {POST_WITH("pgp_unknown"), "HTTP/1.1 401 ", true},
        {STATUS_WITH(""), "HTTP/1.1 401 ", true},
        {STATUS_WITH("Authorization: Bearer pgp_reader\r\n"), "HTTP/1.1 200 ", true},
        /* Basic, any user, the token as password: "u:pgp_reader". */
        {STATUS_WITH("Authorization: Basic dTpwZ3BfcmVhZGVy\r\n"), "HTTP/1.1 200 ", true},
        {STATUS_WITH("Authorization: Bearer pgp_enqueuer\r\n"), "HTTP/1.1 403 ", true},
        {STATUS_WITH("Authorization: Bearer pgp_unknown\r\n"), "HTTP/1.1 401 ", true},
    };
    strbuf out = {0};
    bool set = false;
    for (size_t i = 0; i < PGP_ARRAY_LEN(cases); i++) {
        if (cases[i].with_tokens && !set) {
            assert_int_equal(admin_http_set_api_tokens(s, toks, 2), 0);
            set = true;
        }
        /* A refused request with a body closes its connection: one each. */
        int fd = raw_connect(AF_INET, admin_http_port(s));
        assert_true(fd >= 0);
        step_exchange(&loop, fd, cases[i].request, 1, &out);
        if (!out.data || strncmp(out.data, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("case %zu: want %s, got %.60s", i, cases[i].want, out.data ? out.data : "");
        close(fd);
    }
    /* Revoked: the set without it. */
    assert_int_equal(admin_http_set_api_tokens(s, toks + 1, 1), 0);
    int fd = raw_connect(AF_INET, admin_http_port(s));
    step_exchange(&loop, fd, POST_WITH("pgp_enqueuer"), 1, &out);
    tl_assert_contains(out.data, "HTTP/1.1 401 ");
    close(fd);
#undef POST_WITH
#undef STATUS_WITH
    assert_int_equal(calls, 2); /* the two 201s */
    strbuf_free(&out);
    run_until_closed(&loop, s);
}

static void enqueue_answer_mapping(void **state)
{
    strbuf j = {0};
    assert_int_equal(admin_http_enqueue_answer(NULL, &j), 503);
    assert_string_equal(strbuf_str(&j), "{\"error\":\"database unreachable\"}");
    strbuf_free(&j);
    /* Real error results from the database, without the server in between. */
    tl_db *db = tl_fresh_db(1);
    tl_exec(db->conn, "SELECT pgpace.customer_set('" CUSTOMER
                      "', rate_per_minute => 60, webhook_url => 'http://127.0.0.1:9/hook')");
    static const struct {
        const char *sql;
        int status;
        const char *body;
    } cases[] = {
        {"SELECT * FROM no_such_table", 500, "{\"error\":\"internal error\"}"},
        {"SELECT * FROM pgpace.enqueue_json('{\"customer\":\"x\",\"payload\":1}')", 400,
         "{\"error\":\"field customer: unknown customer 'x'\"}"},
        {"SELECT 1::bigint AS id, false AS created, false AS superseded, false AS expired, "
         "NULL::text AS e, "
         "NULL::integer AS d",
         200, "{\"id\":1,\"duplicate\":true,\"estimated_send_at\":null}"},
        {"SELECT 7::bigint AS id, true AS created, false AS superseded, false AS expired, "
         "'2030-01-01T00:00:00.000000Z' AS e, NULL::integer AS d",
         201, "{\"id\":7,\"estimated_send_at\":\"2030-01-01T00:00:00.000000Z\"}"},
        /* A paused customer: a new item, no estimate. */
        {"SELECT 8::bigint AS id, true AS created, false AS superseded, false AS expired, "
         "NULL::text AS e, "
         "NULL::integer AS d",
         201, "{\"id\":8,\"estimated_send_at\":null}"},
        {"SELECT 8::bigint AS id, false AS created, true AS superseded, false AS expired, "
         "NULL::text AS e, "
         "NULL::integer AS d",
         200, "{\"id\":8,\"superseded\":true,\"estimated_send_at\":null}"},
        {"SELECT 9::bigint AS id, true AS created, false AS superseded, true AS expired, "
         "NULL::text AS e, "
         "NULL::integer AS d",
         201, "{\"id\":9,\"expired\":true,\"estimated_send_at\":null}"},
        /* An event of a customer with endpoints: its id, the deliveries it made; new also
         * when it superseded an endpoint's queued delivery. */
        {"SELECT 10::bigint AS id, true AS created, false AS superseded, false AS expired, "
         "NULL::text AS e, 3 AS d",
         201, "{\"id\":10,\"deliveries\":3,\"estimated_send_at\":null}"},
        {"SELECT 11::bigint AS id, true AS created, true AS superseded, false AS expired, "
         "NULL::text AS e, 2 AS d",
         201, "{\"id\":11,\"superseded\":true,\"deliveries\":2,\"estimated_send_at\":null}"},
        {"SELECT 12::bigint AS id, true AS created, false AS superseded, false AS expired, "
         "NULL::text AS e, 0 AS d",
         201, "{\"id\":12,\"deliveries\":0,\"estimated_send_at\":null}"},
        /* The shape before deliveries (a stale binary's query) is no answer either. */
        {"SELECT 7::bigint AS id, true AS created, false AS superseded, false AS expired, "
         "NULL::text AS e",
         500, "{\"error\":\"internal error\"}"},
        /* A result of another shape (a stale binary against a changed query) is no answer. */
        {"SELECT 7::bigint AS id, true AS created", 500, "{\"error\":\"internal error\"}"},
        {"DO $$ BEGIN RAISE EXCEPTION 'gone' USING ERRCODE = '57P01'; END $$", 503,
         "{\"error\":\"database unreachable\"}"},
        {"DO $$ BEGIN RAISE EXCEPTION 'race' USING ERRCODE = '40001'; END $$", 503,
         "{\"error\":\"conflict with a concurrent enqueue, retry\"}"},
        /* What a body can cause is a 400 (PostgreSQL's own stack depth limit, a CHECK, a
         * refusal raised without a code), with the message only (never the hint). */
        {"SELECT (repeat('[', 100000) || repeat(']', 100000))::jsonb", 400,
         "{\"error\":\"body is nested too deeply for the database (stack depth limit "
         "exceeded)\"}"},
        {"DO $$ BEGIN RAISE EXCEPTION 'no' USING ERRCODE = '23514', HINT = 'h'; END $$", 400,
         "{\"error\":\"no\"}"},
        {"SELECT * FROM pgpace.enqueue_json(('{\"customer\":\"" CUSTOMER "\",\"payload\":' || "
         "repeat('[', 257) || repeat(']', 257) || '}')::jsonb)",
         400, "{\"error\":\"field payload: nests arrays and objects more than 256 levels deep\"}"},
        {"DO $$ BEGIN RAISE EXCEPTION 'refused'; END $$", 400, "{\"error\":\"refused\"}"},
        /* The database's trouble: 503, worth a retry. */
        {"DO $$ BEGIN RAISE EXCEPTION 'dup' USING ERRCODE = '23505'; END $$", 503,
         "{\"error\":\"conflict with a concurrent enqueue, retry\"}"},
        {"DO $$ BEGIN RAISE EXCEPTION 'full' USING ERRCODE = '53100'; END $$", 503,
         "{\"error\":\"database is out of resources, retry later\"}"},
        {"SET statement_timeout = '10ms'; SELECT pg_sleep(1)", 503,
         "{\"error\":\"database timed out, retry\"}"},
        {"RESET statement_timeout; DO $$ BEGIN RAISE EXCEPTION 'lock' USING ERRCODE = '55P03'; "
         "END $$",
         503, "{\"error\":\"database timed out, retry\"}"},
        {"BEGIN READ ONLY; INSERT INTO pgpace.setting VALUES ('x', 'y')", 503,
         "{\"error\":\"database is read-only, retry\"}"},
        {"ROLLBACK; DO $$ BEGIN RAISE EXCEPTION 'bug' USING ERRCODE = 'XX000'; END $$", 500,
         "{\"error\":\"internal error\"}"},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(cases); i++) {
        PGresult *res = PQexec(db->conn, cases[i].sql);
        strbuf_reset(&j);
        int status = admin_http_enqueue_answer(res, &j);
        PQclear(res);
        if (status != cases[i].status || strcmp(strbuf_str(&j), cases[i].body) != 0)
            fail_msg("%s: got %d %s", cases[i].sql, status, strbuf_str(&j));
    }
    strbuf_free(&j);
    tl_drop_db(db);
}

static int group_setup(void **state)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    curl_global_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(routes),
        cmocka_unit_test(status_page),
        cmocka_unit_test(enqueue_created_and_duplicate),
        cmocka_unit_test(enqueue_auth_and_content_type),
        cmocka_unit_test(enqueue_bad_input),
        cmocka_unit_test(enqueue_nesting_limit),
        cmocka_unit_test(limits_and_slow_clients),
        cmocka_unit_test(keepalive_and_pipelining),
        cmocka_unit_test(connection_limit),
        cmocka_unit_test(database_unreachable),
        cmocka_unit_test(listen_options),
        cmocka_unit_test(ipv6_listen),
        cmocka_unit_test(token_reload),
        cmocka_unit_test(api_tokens_and_scopes),
        cmocka_unit_test(enqueue_answer_mapping),
    };
    return TL_RUN(tests, group_setup, group_teardown);
}
