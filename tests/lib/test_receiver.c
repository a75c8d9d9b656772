/* test_receiver.c - the loopback webhook receiver used by the dispatcher tests, checked with
 * plain blocking sockets (exact bytes on the wire) and libcurl (what the dispatcher uses). */
#include "testlib.h"

#include "ratelimit_header.h"
#include "receiver.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---- */

/* (testlib.c is not linked into this self-test: a local substring assertion.) */
#define assert_contains(haystack, needle)                                                          \
    do {                                                                                           \
        if (!strstr((haystack), (needle)))                                                         \
            fail_msg("expected \"%s\" in:\n%s", (needle), (haystack));                             \
    } while (0)

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state)
{
    receiver *r = receiver_start();
    assert_non_null(r);
    *state = r;
    return 0;
}

static int teardown(void **state)
{
    receiver_stop(*state);
    return 0;
}

/* A blocking client connection with a read buffer (responses may arrive back to back). */
typedef struct client {
    int fd;
    char buf[65536];
    size_t len;
} client;

typedef struct response {
    int status;
    char head[8192];
    char body[8192];
    size_t body_len;
} response;

static void set_timeout(client *cl, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    assert_int_equal(setsockopt(cl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
}

/* A connection to 127.0.0.1:port (a receiver of this process, or a pgpace-receiver). */
static client *client_open_port(int port)
{
    client *cl = calloc(1, sizeof *cl);
    assert_non_null(cl);
    cl->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(cl->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(cl->fd, (struct sockaddr *)&a, sizeof a), 0);
    set_timeout(cl, 5000);
    return cl;
}

static client *client_open(receiver *r)
{
    return client_open_port(receiver_port(r));
}

static void client_close(client *cl)
{
    close(cl->fd);
    free(cl);
}

static void client_send_n(client *cl, const char *data, size_t n)
{
    while (n > 0) {
        ssize_t w = send(cl->fd, data, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        assert_true(w > 0);
        data += w;
        n -= (size_t)w;
    }
}

static void client_send(client *cl, const char *s)
{
    client_send_n(cl, s, strlen(s));
}

/* Reads more into the buffer: > 0 bytes, 0 at EOF, -errno on error (-EAGAIN on timeout). */
static ssize_t client_fill(client *cl)
{
    assert_true(cl->len < sizeof cl->buf);
    ssize_t n;
    do
        n = recv(cl->fd, cl->buf + cl->len, sizeof cl->buf - cl->len, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    cl->len += (size_t)n;
    return n;
}

/* Reads one response with a Content-Length body. 0, or what client_fill said (<= 0). */
static int client_response(client *cl, response *out)
{
    memset(out, 0, sizeof *out);
    char *end;
    for (;;) {
        end = memmem(cl->buf, cl->len, "\r\n\r\n", 4);
        if (end)
            break;
        ssize_t n = client_fill(cl);
        if (n <= 0)
            return (int)(n < 0 ? n : -1);
    }
    size_t hlen = (size_t)(end - cl->buf) + 4;
    assert_true(hlen < sizeof out->head);
    memcpy(out->head, cl->buf, hlen);
    assert_int_equal(sscanf(out->head, "HTTP/1.1 %d", &out->status), 1);
    size_t cl_len = 0;
    for (char *p = out->head; (p = strstr(p, "\r\n")) != NULL; p += 2)
        if (strncasecmp(p + 2, "content-length:", 15) == 0)
            cl_len = strtoul(p + 17, NULL, 10);
    assert_true(cl_len < sizeof out->body);
    while (cl->len < hlen + cl_len) {
        ssize_t n = client_fill(cl);
        if (n <= 0)
            return (int)(n < 0 ? n : -1);
    }
    memcpy(out->body, cl->buf + hlen, cl_len);
    out->body_len = cl_len;
    memmove(cl->buf, cl->buf + hlen + cl_len, cl->len - hlen - cl_len);
    cl->len -= hlen + cl_len;
    return 0;
}

/* Reads until EOF: 0, or -errno. What was read stays in cl->buf. */
static int client_until_eof(client *cl)
{
    for (;;) {
        ssize_t n = client_fill(cl);
        if (n <= 0)
            return (int)n;
    }
}

/* Waits (polling; test side only) until the receiver has n open connections. */
static void wait_connections(receiver *r, size_t n)
{
    int64_t until = now_ms() + 5000;
    while (receiver_connections(r) != n && now_ms() < until)
        sleep_ms(5);
    assert_int_equal(receiver_connections(r), n);
}

static size_t discard_cb(char *p, size_t size, size_t n, void *arg)
{
    size_t *got = arg;
    *got += size * n;
    return size * n;
}

typedef struct sink {
    char data[4096];
    size_t len;
} sink;

static size_t sink_cb(char *p, size_t size, size_t n, void *arg)
{
    sink *s = arg;
    size_t k = size * n;
    if (k > sizeof s->data - 1 - s->len)
        k = sizeof s->data - 1 - s->len;
    memcpy(s->data + s->len, p, k);
    s->len += k;
    s->data[s->len] = '\0';
    return size * n;
}

/* One request with curl; body NULL means GET. */
static CURLcode curl_do(CURL *h, receiver *r, const char *path, const char *body,
                        struct curl_slist *headers, int timeout_ms, long *status, sink *out)
{
    char url[512];
    receiver_url(r, path, url, sizeof url);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    else
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    CURLcode rc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    return rc;
}

static CURLcode curl_once(receiver *r, const char *path, const char *body, int timeout_ms,
                          long *status, sink *out)
{
    CURL *h = curl_easy_init();
    assert_non_null(h);
    CURLcode rc = curl_do(h, r, path, body, NULL, timeout_ms, status, out);
    curl_easy_cleanup(h);
    return rc;
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

/* ---- tests ---- */

static void post_with_webhook_headers_is_recorded(void **state)
{
    receiver *r = *state;
    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct curl_slist *hd = NULL;
    hd = curl_slist_append(hd, "Webhook-Id: msg_2KWPBgLlAfxdpx2AI54pPJ85f4W");
    hd = curl_slist_append(hd, "WEBHOOK-TIMESTAMP: 1674087231");
    hd =
        curl_slist_append(hd, "webhook-signature: v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=");
    hd = curl_slist_append(hd, "Content-Type: application/json");
    hd = curl_slist_append(hd, "User-Agent: pgpace/0.1.0");
    long status;
    sink out = {0};
    const char *body = "{\"type\":\"invoice.paid\",\"amount\":42}";
    assert_int_equal(curl_do(h, r, "/c/acme/hook?x=1", body, hd, 5000, &status, &out), CURLE_OK);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    assert_int_equal(status, 200);
    assert_string_equal(out.data, "ok");

    assert_int_equal(receiver_count(r, NULL), 1);
    assert_int_equal(receiver_count(r, "/c/acme"), 1);
    assert_int_equal(receiver_count(r, "/c/other"), 0);
    receiver_request rq;
    assert_int_equal(receiver_get(r, 0, &rq), 0);
    assert_string_equal(rq.path, "/c/acme/hook?x=1");
    assert_string_equal(rq.webhook_id, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W");
    assert_string_equal(rq.webhook_timestamp, "1674087231");
    assert_string_equal(rq.webhook_signature, "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=");
    assert_string_equal(rq.content_type, "application/json");
    assert_string_equal(rq.user_agent, "pgpace/0.1.0");
    assert_int_equal(rq.body_len, strlen(body));
    assert_string_equal(rq.body, body);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    assert_true(rq.at_us <= now_us && rq.at_us > now_us - 10 * 1000000);
    free(rq.body);
    assert_int_equal(receiver_get(r, 1, &rq), -1);
}

static void body_with_nul_and_binary_is_kept(void **state)
{
    receiver *r = *state;
    client *cl = client_open(r);
    static const char req[] = "PUT /bin HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\na\0b\xff\n";
    client_send_n(cl, req, sizeof req - 1);
    response resp;
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    client_close(cl);
    receiver_request rq;
    assert_int_equal(receiver_get(r, 0, &rq), 0);
    assert_int_equal(rq.body_len, 5);
    assert_memory_equal(rq.body, "a\0b\xff\n", 6);
    assert_string_equal(rq.webhook_id, "");
    free(rq.body);
}

static void keep_alive_serves_two_requests_on_one_connection(void **state)
{
    receiver *r = *state;
    /* curl reuses its connection. */
    CURL *h = curl_easy_init();
    assert_non_null(h);
    long status;
    sink out = {0};
    assert_int_equal(curl_do(h, r, "/ka/1", "one", NULL, 5000, &status, &out), CURLE_OK);
    assert_int_equal(status, 200);
    assert_int_equal(curl_do(h, r, "/ka/2", "two", NULL, 5000, &status, &out), CURLE_OK);
    assert_int_equal(status, 200);
    assert_int_equal(receiver_accepted(r), 1);
    assert_int_equal(receiver_count(r, "/ka/"), 2);
    assert_int_equal(receiver_connections(r), 1);
    curl_easy_cleanup(h);
    wait_connections(r, 0);

    /* Raw: one request, its answer, another; then three pipelined in one write. */
    client *cl = client_open(r);
    response resp;
    client_send(cl, "POST /p/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_contains(resp.head, "Content-Length: 2\r\n");
    assert_null(strstr(resp.head, "Connection: close"));
    client_send(cl, GET("/p/2"));
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    client_send(cl, "POST /p/3 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA" GET(
                        "/p/4") "POST /p/5 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nBC");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(client_response(cl, &resp), 0);
        assert_int_equal(resp.status, 200);
        assert_memory_equal(resp.body, "ok", 2);
    }
    assert_int_equal(receiver_accepted(r), 2);
    assert_int_equal(receiver_count(r, "/p/"), 5);
    receiver_request rq;
    assert_int_equal(receiver_get(r, 6, &rq), 0);
    assert_string_equal(rq.path, "/p/5");
    assert_string_equal(rq.body, "BC");
    free(rq.body);
    client_close(cl);
}

static void connection_close_and_http10_end_the_connection(void **state)
{
    receiver *r = *state;
    response resp;
    client *cl = client_open(r);
    client_send(cl, "GET /cc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_contains(resp.head, "Connection: close\r\n");
    assert_int_equal(client_until_eof(cl), 0);
    client_close(cl);

    cl = client_open(r);
    client_send(cl, "GET /10 HTTP/1.0\r\n\r\n");
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(client_until_eof(cl), 0);
    client_close(cl);

    cl = client_open(r);
    client_send(cl, "GET /10ka HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n" GET("/10ka/2"));
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(client_response(cl, &resp), 0);
    client_close(cl);
    assert_int_equal(receiver_count(r, NULL), 4);
}

static void rules_match_by_prefix_last_wins_and_expire(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/c/acme",
                                    .action = RECV_RESPOND,
                                    .status = 503,
                                    .body = "busy",
                                    .retry_after = "7",
                                    .times = 1});
    long status;
    sink out = {0};
    CURL *h = curl_easy_init();
    assert_non_null(h);
    assert_int_equal(curl_do(h, r, "/c/acme/1", "{}", NULL, 5000, &status, &out), CURLE_OK);
    assert_int_equal(status, 503);
    assert_string_equal(out.data, "busy");
    curl_off_t retry = 0;
    curl_easy_getinfo(h, CURLINFO_RETRY_AFTER, &retry);
    assert_int_equal(retry, 7);
    out.len = 0;
    assert_int_equal(curl_do(h, r, "/c/acme/2", "{}", NULL, 5000, &status, &out), CURLE_OK);
    assert_int_equal(status, 200);
    assert_string_equal(out.data, "ok");
    curl_easy_cleanup(h);

    /* Raw, for the exact header. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/ra", .status = 429, .retry_after = "120"});
    client *cl = client_open(r);
    response resp;
    client_send(cl, GET("/ra"));
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 429);
    assert_contains(resp.head, "\r\nRetry-After: 120\r\n");
    assert_int_equal(resp.body_len, 0);

    /* Last added matching rule wins; a more specific rule added earlier loses. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/a/b", .status = 202});
    receiver_on(r, &(receiver_rule){.path_prefix = "/a", .status = 500, .times = 2});
    client_send(cl, GET("/a/b/c") GET("/a/x") GET("/a/b/c") GET("/b"));
    int want[] = {500, 500, 202, 200};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(client_response(cl, &resp), 0);
        assert_int_equal(resp.status, want[i]);
    }
    assert_contains(resp.head, "HTTP/1.1 200 OK\r\n");
    assert_null(strstr(resp.head, "Retry-After"));

    receiver_clear_rules(r);
    client_send(cl, GET("/a/b") GET("/ra"));
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    client_close(cl);

    /* A forever rule with 204 has no body and no Content-Length. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/nc", .status = 204, .body = "ignored"});
    cl = client_open(r);
    for (int i = 0; i < 3; i++) {
        client_send(cl, GET("/nc"));
        assert_int_equal(client_response(cl, &resp), 0);
        assert_int_equal(resp.status, 204);
        assert_null(strstr(resp.head, "Content-Length"));
    }
    client_close(cl);
}

static void delay_is_honoured(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/slow", .status = 201, .delay_ms = 250});
    long status;
    sink out = {0};
    int64_t t0 = now_ms();
    assert_int_equal(curl_once(r, "/slow", "x", 5000, &status, &out), CURLE_OK);
    assert_true(now_ms() - t0 >= 250);
    assert_int_equal(status, 201);

    /* Pipelined behind a delayed answer: served in order, after it. */
    client *cl = client_open(r);
    t0 = now_ms();
    client_send(cl, GET("/slow/1") GET("/fast") GET("/slow/2"));
    response resp;
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 201);
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 201);
    assert_true(now_ms() - t0 >= 500);
    client_close(cl);
    assert_int_equal(receiver_count(r, NULL), 4);
}

static void hang_never_answers(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/hang", .action = RECV_HANG});
    long status;
    sink out = {0};
    int64_t t0 = now_ms();
    assert_int_equal(curl_once(r, "/hang", "{}", 300, &status, &out), CURLE_OPERATION_TIMEDOUT);
    assert_true(now_ms() - t0 >= 290);
    assert_int_equal(status, 0);
    assert_int_equal(receiver_count(r, "/hang"), 1);

    client *cl = client_open(r);
    set_timeout(cl, 300);
    client_send(cl, GET("/hang/raw"));
    assert_int_equal(client_fill(cl), -EAGAIN);
    assert_int_equal(receiver_wait(r, "/hang", 2, 1000), 2);
    /* Still open, still silent, even when the client sends more. */
    client_send(cl, GET("/other"));
    assert_int_equal(client_fill(cl), -EAGAIN);
    assert_int_equal(receiver_count(r, "/other"), 0);
    wait_connections(r, 1);
    client_close(cl);
    wait_connections(r, 0);
}

static void reset_sends_rst(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/rst", .action = RECV_RESET});
    client *cl = client_open(r);
    client_send(cl, GET("/rst"));
    assert_int_equal(client_fill(cl), -ECONNRESET);
    client_close(cl);

    long status;
    sink out = {0};
    assert_int_equal(curl_once(r, "/rst", "{}", 5000, &status, &out), CURLE_RECV_ERROR);
    assert_int_equal(receiver_count(r, "/rst"), 2);
}

static void garbage_is_not_http(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/junk", .action = RECV_GARBAGE});
    client *cl = client_open(r);
    client_send(cl, GET("/junk"));
    assert_int_equal(client_until_eof(cl), 0);
    assert_int_equal(cl->len, strlen("HTTP/9.9 abc\r\n\r\n"));
    assert_memory_equal(cl->buf, "HTTP/9.9 abc\r\n\r\n", cl->len);
    client_close(cl);

    long status;
    sink out = {0};
    CURLcode rc = curl_once(r, "/junk", "{}", 5000, &status, &out);
    assert_true(rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_WEIRD_SERVER_REPLY);
}

static void close_sends_fin_without_answer(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/fin", .action = RECV_CLOSE});
    client *cl = client_open(r);
    client_send(cl, GET("/fin"));
    assert_int_equal(client_until_eof(cl), 0);
    assert_int_equal(cl->len, 0);
    client_close(cl);

    long status;
    sink out = {0};
    assert_int_equal(curl_once(r, "/fin", "{}", 5000, &status, &out), CURLE_GOT_NOTHING);
    assert_int_equal(receiver_count(r, "/fin"), 2);
    wait_connections(r, 0);
}

static void trickle_huge_then_still_serving(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/huge", .action = RECV_TRICKLE_HUGE});
    client *cl = client_open(r);
    client_send(cl, GET("/huge"));
    while (!memmem(cl->buf, cl->len, "\r\n\r\n", 4))
        assert_true(client_fill(cl) > 0);
    assert_contains(cl->buf, "HTTP/1.1 200 OK\r\n");
    assert_contains(cl->buf, "Content-Length: 1073741824\r\n");
    int64_t t0 = now_ms();
    size_t hlen = (size_t)((char *)memmem(cl->buf, cl->len, "\r\n\r\n", 4) - cl->buf) + 4;
    while (cl->len - hlen < 5 * 1024)
        assert_true(client_fill(cl) > 0);
    assert_true(now_ms() - t0 >= 30); /* it trickles: 1 KiB per 10 ms */
    client_close(cl);
    wait_connections(r, 0);

    /* curl gives up by its timeout, having received some of it. */
    CURL *h = curl_easy_init();
    assert_non_null(h);
    char url[512];
    receiver_url(r, "/huge/curl", url, sizeof url);
    size_t got = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 300L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &got);
    assert_int_equal(curl_easy_perform(h), CURLE_OPERATION_TIMEDOUT);
    curl_easy_cleanup(h);
    assert_true(got >= 1024 && got < 1024 * 1024);
    wait_connections(r, 0);

    long status;
    sink out = {0};
    assert_int_equal(curl_once(r, "/next", "{}", 5000, &status, &out), CURLE_OK);
    assert_int_equal(status, 200);
    assert_int_equal(receiver_count(r, NULL), 3);
}

static void chunked_request_body(void **state)
{
    receiver *r = *state;
    client *cl = client_open(r);
    /* In pieces, with an extension, upper-case hex, and a trailer; then a normal request. */
    const char *parts[] = {
        "POST /chunk HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n",
        "Webhook-Id: msg_1\r\n\r\n5\r\nhel",
        "lo\r\n1;ext=1\r\n,\r\nA\r\n 0123456",
        "78\r\n0\r\nX-Trailer: t\r\n\r\n",
    };
    for (size_t i = 0; i < 4; i++) {
        client_send(cl, parts[i]);
        if (i < 3)
            assert_int_equal(receiver_wait(r, NULL, 1, 20), 0);
    }
    response resp;
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    receiver_request rq;
    assert_int_equal(receiver_get(r, 0, &rq), 0);
    assert_string_equal(rq.webhook_id, "msg_1");
    assert_int_equal(rq.body_len, 16);
    assert_string_equal(rq.body, "hello, 012345678");
    free(rq.body);

    /* Keep-alive after it; an empty chunked body. */
    client_send(cl,
                "POST /chunk/2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n");
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(receiver_get(r, 1, &rq), 0);
    assert_int_equal(rq.body_len, 0);
    assert_string_equal(rq.body, "");
    free(rq.body);
    client_close(cl);

    /* curl streams an unknown-length body as chunked. */
    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct curl_slist *hd = curl_slist_append(NULL, "Transfer-Encoding: chunked");
    long status;
    sink out = {0};
    assert_int_equal(curl_do(h, r, "/chunk/curl", "streamed", hd, 5000, &status, &out), CURLE_OK);
    assert_int_equal(status, 200);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    assert_int_equal(receiver_get(r, 2, &rq), 0);
    assert_string_equal(rq.body, "streamed");
    free(rq.body);
}

static void expect_100_continue(void **state)
{
    receiver *r = *state;
    client *cl = client_open(r);
    client_send(cl,
                "POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    response resp;
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 100);
    client_send(cl, "data");
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    client_close(cl);

    /* curl waits for the 100 before sending a large body. */
    size_t n = 2 * 1024 * 1024;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'b', n);
    big[n] = '\0';
    struct curl_slist *hd = curl_slist_append(NULL, "Expect: 100-continue");
    CURL *h = curl_easy_init();
    assert_non_null(h);
    long status;
    sink out = {0};
    int64_t t0 = now_ms();
    assert_int_equal(curl_do(h, r, "/e/big", big, hd, 10000, &status, &out), CURLE_OK);
    assert_true(now_ms() - t0 < 900); /* curl's own Expect wait is 1 s */
    assert_int_equal(status, 200);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    receiver_request rq;
    assert_int_equal(receiver_get(r, 1, &rq), 0);
    assert_int_equal(rq.body_len, n);
    assert_memory_equal(rq.body, big, n);
    free(rq.body);
    free(big);
}

/* Sends `req` on a new connection; expects `status`, Connection: close and then EOF. */
static void expect_refused(receiver *r, const char *req, size_t len, int status)
{
    client *cl = client_open(r);
    client_send_n(cl, req, len);
    response resp;
    int rc = client_response(cl, &resp);
    if (rc != 0)
        fail_msg("no answer to %.60s: %d", req, rc);
    if (resp.status != status)
        fail_msg("%.60s: got %d, want %d", req, resp.status, status);
    assert_contains(resp.head, "Connection: close\r\n");
    assert_int_equal(client_until_eof(cl), 0);
    client_close(cl);
}

#define REFUSED(r, lit, status) expect_refused(r, lit, sizeof lit - 1, status)

static void malformed_requests_get_400_and_close(void **state)
{
    receiver *r = *state;
    REFUSED(r, "GARBAGE\r\n\r\n", 400);
    REFUSED(r, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400); /* TLS hello */
    REFUSED(r, "GET / HTTP/2.0\r\n\r\n", 400);
    REFUSED(r, "GET  / HTTP/1.1\r\n\r\n", 400);
    REFUSED(r, "GET /a b HTTP/1.1\r\n\r\n", 400);
    REFUSED(r, "G(T / HTTP/1.1\r\n\r\n", 400);
    REFUSED(r, "GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400);
    REFUSED(r, "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400);
    REFUSED(r, "GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400);
    REFUSED(r, "GET / HTTP/1.1\r\nX: a\x01z\r\n\r\n", 400);
    REFUSED(r, "POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400);
    REFUSED(r, "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400);
    REFUSED(r, "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400);
    REFUSED(r,
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400);
    REFUSED(r, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400);
    REFUSED(r, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n", 400);
    REFUSED(r, "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
    REFUSED(r, "POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413);
    /* A good request and then a bad one on the same connection: the first is answered. */
    client *cl = client_open(r);
    client_send(cl, GET("/good") "BAD\r\n\r\n");
    response resp;
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 400);
    assert_int_equal(client_until_eof(cl), 0);
    client_close(cl);
    assert_int_equal(receiver_count(r, NULL), 1);
    wait_connections(r, 0);
}

static void huge_headers_get_431_and_close(void **state)
{
    receiver *r = *state;
    size_t n = 80 * 1024;
    char *req = malloc(n + 64);
    assert_non_null(req);
    int k = snprintf(req, 64, "GET /big HTTP/1.1\r\nX-Big: ");
    memset(req + k, 'a', n);
    memcpy(req + k + n, "\r\n\r\n", 5);
    expect_refused(r, req, strlen(req), 431);
    /* Without ever ending the headers. */
    req[k + n] = '\0';
    expect_refused(r, req, strlen(req), 431);
    free(req);
    assert_int_equal(receiver_count(r, NULL), 0);
}

static void client_disconnects_mid_request(void **state)
{
    receiver *r = *state;
    const char *partial[] = {
        "GE",
        "GET /x HTTP/1.1\r\nHost: x\r\n",
        "POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly part",
        "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",
    };
    for (size_t i = 0; i < 4; i++) {
        client *cl = client_open(r);
        client_send(cl, partial[i]);
        client_close(cl);
        /* And once with RST. */
        cl = client_open(r);
        client_send(cl, partial[i]);
        struct linger lg = {1, 0};
        setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        client_close(cl);
    }
    /* Half-close after a complete request: still answered. */
    client *cl = client_open(r);
    client_send(cl, GET("/half"));
    shutdown(cl->fd, SHUT_WR);
    response resp;
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(client_until_eof(cl), 0);
    client_close(cl);
    /* Disconnect while a delayed answer is pending. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/d", .status = 200, .delay_ms = 100});
    cl = client_open(r);
    client_send(cl, GET("/d"));
    assert_int_equal(receiver_wait(r, "/d", 1, 2000), 1);
    client_close(cl);
    wait_connections(r, 0);
    assert_int_equal(receiver_count(r, NULL), 2);

    long status;
    sink out = {0};
    assert_int_equal(curl_once(r, "/alive", "{}", 5000, &status, &out), CURLE_OK);
    assert_int_equal(status, 200);
}

typedef struct late_arg {
    receiver *r;
    int delay_ms;
} late_arg;

static void *send_late(void *p)
{
    late_arg *a = p;
    sleep_ms(a->delay_ms);
    long status;
    sink out = {0};
    CURL *h = curl_easy_init();
    if (h) {
        curl_do(h, a->r, "/late", "{}", NULL, 5000, &status, &out);
        curl_easy_cleanup(h);
    }
    return NULL;
}

static void wait_returns_on_count_or_timeout(void **state)
{
    receiver *r = *state;
    int64_t t0 = now_ms();
    assert_int_equal(receiver_wait(r, NULL, 1, 200), 0);
    int64_t took = now_ms() - t0;
    assert_true(took >= 199 && took < 2000);
    assert_int_equal(receiver_wait(r, NULL, 0, 0), 0);

    late_arg a = {r, 150};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, send_late, &a), 0);
    t0 = now_ms();
    assert_int_equal(receiver_wait(r, "/late", 1, 10000), 1);
    took = now_ms() - t0;
    assert_true(took >= 100 && took < 5000);
    pthread_join(th, NULL);

    t0 = now_ms();
    assert_int_equal(receiver_wait(r, "/late", 2, 150), 1);
    assert_true(now_ms() - t0 >= 149);
    assert_int_equal(receiver_wait(r, "/other", 1, 0), 0);
}

static void stop_with_open_connections_is_clean(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/hang", .action = RECV_HANG});
    receiver_on(r, &(receiver_rule){.path_prefix = "/huge", .action = RECV_TRICKLE_HUGE});
    receiver_on(r, &(receiver_rule){.path_prefix = "/slow", .delay_ms = 60000});
    receiver_on(r, &(receiver_rule){.path_prefix = "/fin", .action = RECV_CLOSE});
    const char *reqs[] = {"",           GET("/hang"),
                          GET("/huge"), GET("/slow"),
                          GET("/fin"),  "POST /p HTTP/1.1\r\nContent-Length: 9\r\n\r\nab"};
    enum { N = sizeof reqs / sizeof reqs[0] };
    client *cl[N];
    for (size_t i = 0; i < N; i++) {
        cl[i] = client_open(r);
        client_send(cl[i], reqs[i]);
    }
    assert_int_equal(receiver_wait(r, NULL, 4, 5000), 4);
    wait_connections(r, N);
    receiver_stop(r);
    *state = NULL;
    for (size_t i = 0; i < N; i++) {
        int rc = client_until_eof(cl[i]);
        assert_true(rc == 0 || rc == -ECONNRESET);
        client_close(cl[i]);
    }
}

static void two_receivers_and_fixed_port(void **state)
{
    receiver *a = *state;
    receiver *b = receiver_start();
    assert_non_null(b);
    assert_true(receiver_port(a) != receiver_port(b));
    char url[64];
    receiver_url(b, "/x", url, sizeof url);
    char want[64];
    snprintf(want, sizeof want, "http://127.0.0.1:%d/x", receiver_port(b));
    assert_string_equal(url, want);
    /* A port in use is refused (NULL, message on stderr). */
    assert_null(receiver_start_port(receiver_port(b)));
    receiver_stop(b);
    receiver_stop(NULL);
}

/* ---- throttling ---- */

static int64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The value of header `name` in resp->head into buf; false when absent. */
static bool header_value(const response *resp, const char *name, char *buf, size_t cap)
{
    size_t nlen = strlen(name);
    for (const char *p = resp->head; (p = strstr(p, "\r\n")) != NULL; p += 2) {
        if (strncasecmp(p + 2, name, nlen) != 0 || p[2 + nlen] != ':')
            continue;
        const char *v = p + 2 + nlen + 1;
        while (*v == ' ')
            v++;
        const char *e = strstr(v, "\r\n");
        assert_non_null(e);
        size_t n = (size_t)(e - v);
        assert_true(n < cap);
        memcpy(buf, v, n);
        buf[n] = '\0';
        return true;
    }
    return false;
}

/* A Retry-After value that must be delta-seconds: its number (fails otherwise). */
static long retry_after_seconds(const response *resp)
{
    char v[128];
    if (!header_value(resp, "Retry-After", v, sizeof v))
        fail_msg("no Retry-After in:\n%s", resp->head);
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end || v[0] < '0' || v[0] > '9')
        fail_msg("Retry-After is not delta-seconds: \"%s\"", v);
    return n;
}

/* Parses an IMF-fixdate strictly (it must print back identically); -1 when it is not one. */
static int64_t parse_imf_fixdate(const char *s)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    char wday[4], mon[4];
    int day, year, hh, mm, ss, n = 0;
    if (sscanf(s, "%3[A-Za-z], %2d %3[A-Za-z] %4d %2d:%2d:%2d GMT%n", wday, &day, mon, &year, &hh,
               &mm, &ss, &n) != 7 ||
        s[n] != '\0')
        return -1;
    const char *m = strstr(months, mon);
    if (!m || (m - months) % 3 != 0 || strlen(mon) != 3)
        return -1;
    struct tm tm = {.tm_year = year - 1900,
                    .tm_mon = (int)((m - months) / 3),
                    .tm_mday = day,
                    .tm_hour = hh,
                    .tm_min = mm,
                    .tm_sec = ss};
    time_t t = timegm(&tm);
    struct tm back;
    char again[64];
    if (t == (time_t)-1 || !gmtime_r(&t, &back) ||
        strftime(again, sizeof again, "%a, %d %b %Y %H:%M:%S GMT", &back) == 0 ||
        strcmp(again, s) != 0)
        return -1;
    return (int64_t)t;
}

/* One GET on cl; the response into *resp, its status returned. */
static int get_status(client *cl, const char *path, response *resp)
{
    char req[512];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    client_send(cl, req);
    int rc = client_response(cl, resp);
    if (rc != 0)
        fail_msg("no answer to GET %s: %d", path, rc);
    return resp->status;
}

/* n GETs of path pipelined in one write (decided back to back by the receiver); their statuses
 * into st[], the last response into *last. Returns how many got 200. */
static int burst(client *cl, const char *path, int n, int *st, response *last)
{
    char req[8192] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(req + len, sizeof req - len, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n",
                                path);
    assert_true(len < sizeof req);
    client_send_n(cl, req, len);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(client_response(cl, last), 0);
        st[i] = last->status;
        ok += st[i] == 200;
    }
    return ok;
}

static void throttle_token_bucket_burst_then_refill(void **state)
{
    receiver *r = *state;
    /* 600 per minute: a token every 100 ms; at most 2 saved up. */
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/tb",
                                                                  .kind = RECV_TOKEN_BUCKET,
                                                                  .rate_per_minute = 600,
                                                                  .burst = 2}),
                     0);
    client *cl = client_open(r);
    response resp;
    int st[10];
    int64_t t_burst = now_ms();
    /* Pipelined, so the ten are decided within microseconds of each other: exactly the burst
     * gets through, in order. */
    assert_int_equal(burst(cl, "/tb/x", 10, st, &resp), 2);
    for (int i = 0; i < 10; i++)
        assert_int_equal(st[i], i < 2 ? 200 : 429);
    assert_contains(resp.head, "HTTP/1.1 429 Too Many Requests\r\n");
    assert_int_equal(resp.body_len, 0);
    assert_int_equal(retry_after_seconds(&resp), 1); /* under 100 ms, rounded up */
    /* Other paths are not throttled. */
    assert_int_equal(get_status(cl, "/other", &resp), 200);

    /* The next token comes 100 ms after the burst took the last one: poll for it. */
    int passed = 0, polled = 0;
    int64_t deadline = now_ms() + 5000;
    while (!passed && now_ms() < deadline) {
        polled++;
        passed = get_status(cl, "/tb/poll", &resp) == 200;
        if (!passed)
            sleep_ms(10);
    }
    assert_true(passed);
    int64_t waited = now_ms() - t_burst;
    if (waited < 95)
        fail_msg("a token came back after %lld ms; the rate gives one per 100 ms",
                 (long long)waited);

    /* Tokens saved up never exceed the burst: after 350 ms (3.5 tokens' worth, more if this
     * thread sleeps longer), a pipelined burst still gets exactly 2 through. */
    sleep_ms(350);
    assert_int_equal(burst(cl, "/tb/y", 6, st, &resp), 2);
    assert_int_equal(st[0], 200);
    assert_int_equal(st[1], 200);

    /* The state is the throttle's, shared by connections: B takes what A left (a token a
     * minute, so none comes back during this). */
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/tb/shared",
                                                                  .kind = RECV_TOKEN_BUCKET,
                                                                  .rate_per_minute = 1,
                                                                  .burst = 2}),
                     0);
    client *cl2 = client_open(r);
    assert_int_equal(get_status(cl, "/tb/shared", &resp), 200);
    assert_int_equal(get_status(cl2, "/tb/shared", &resp), 200);
    assert_int_equal(get_status(cl, "/tb/shared", &resp), 429);
    assert_int_equal(get_status(cl2, "/tb/shared", &resp), 429);
    client_close(cl2);
    client_close(cl);

    /* 2 + 1 + 2 + 2 answered 200 under /tb; everything else there 429. */
    assert_int_equal(receiver_count_status(r, "/tb", 200), 7);
    assert_int_equal(receiver_count_status(r, "/tb", 429), 8 + (size_t)(polled - 1) + 4 + 2);
    assert_int_equal(receiver_count_status(r, "/other", 200), 1);
    assert_int_equal(receiver_count_status(r, "/tb", 0), 0);
}

/* Polls GET path every 10 ms until it gets `want` (deadline 5 s). *sent_prev gets when the
 * previous poll (with the other answer) was sent, *got when `want` arrived (test monotonic ms);
 * returns how many polls got the other answer. */
static int poll_until(client *cl, const char *path, int want, int64_t *sent_prev, int64_t *got)
{
    response resp;
    int64_t deadline = now_ms() + 5000;
    int other = 0;
    *sent_prev = -1;
    for (;;) {
        int64_t sent = now_ms();
        int st = get_status(cl, path, &resp);
        if (st == want) {
            *got = now_ms();
            return other;
        }
        assert_int_equal(st, want == 200 ? 429 : 200);
        *sent_prev = sent;
        other++;
        if (now_ms() > deadline)
            fail_msg("%s: no %d within 5 s", path, want);
        sleep_ms(10);
    }
}

static void throttle_fixed_window_counts_per_window_and_resets(void **state)
{
    /* A receiver of our own, to know when it started: windows are aligned to its start. */
    receiver_stop(*state);
    int64_t t0 = now_ms();
    receiver *r = receiver_start();
    int64_t t1 = now_ms();
    *state = r;
    assert_non_null(r);
    /* Let time pass first, so that windows aligned to something later (the throttle, its first
     * request) would show. */
    sleep_ms(300);
    enum { W = 1000, LIMIT = 3 };
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/fw",
                                                                  .kind = RECV_FIXED_WINDOW,
                                                                  .limit = LIMIT,
                                                                  .window_ms = W}),
                     0);
    client *cl = client_open(r);
    response resp;
    int64_t p1_sent, r1_got, p2_sent, r2_got, unused;

    /* Window 0 (it began when the receiver started): LIMIT through, then refused. */
    assert_int_equal(poll_until(cl, "/fw", 429, &unused, &unused), LIMIT);
    assert_int_equal(get_status(cl, "/fw", &resp), 429);
    assert_int_equal(retry_after_seconds(&resp), 1); /* under a second to the boundary */

    /* Until the boundary; the first request after it passes. The boundary lies between when
     * the last refused poll was sent and when that one was answered. */
    poll_until(cl, "/fw", 200, &p1_sent, &r1_got);
    assert_true(p1_sent >= 0);
    /* Aligned to the start: some k * W after start (in [t0, t1]) lies in that interval. */
    int64_t k = (r1_got + 2 - t0) / W;
    if (!(k >= 1 && t1 + k * W >= p1_sent - 2))
        fail_msg("boundary in (%lld, %lld] ms after start, not at a multiple of %d ms",
                 (long long)(p1_sent - t1), (long long)(r1_got - t0), W);

    /* The same window: one used by that poll, LIMIT - 1 more, then refused. */
    int st[6];
    assert_int_equal(burst(cl, "/fw/b", 6, st, &resp), LIMIT - 1);
    int64_t b_got = now_ms();
    for (int i = 0; i < 6; i++)
        assert_int_equal(st[i], i < LIMIT - 1 ? 200 : 429);
    if (b_got - p1_sent >= W)
        fail_msg("this thread stalled for a whole window (%lld ms)", (long long)(b_got - p1_sent));

    /* The next boundary is exactly W later: between (p2_sent, r2_got]. So r2_got is more than W
     * after p1_sent and p2_sent less than W after r1_got (ms rounding: 2 ms of slack). */
    poll_until(cl, "/fw", 200, &p2_sent, &r2_got);
    assert_true(p2_sent >= 0);
    if (r2_got - p1_sent < W - 2 || p2_sent - r1_got > W + 2)
        fail_msg("window length: boundary 1 in (%lld, %lld], boundary 2 in (%lld, %lld] (ms)",
                 (long long)p1_sent, (long long)r1_got, (long long)p2_sent, (long long)r2_got);
    client_close(cl);

    /* Retry-After auto = seconds to the end of the window, rounded up: with a 60 s window, 60
     * minus the seconds since the start, give or take this request's own time. */
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/fw/long",
                                                                  .kind = RECV_FIXED_WINDOW,
                                                                  .limit = 1,
                                                                  .window_ms = 60000}),
                     0);
    cl = client_open(r);
    assert_int_equal(get_status(cl, "/fw/long", &resp), 200);
    int64_t sent = now_ms();
    assert_int_equal(get_status(cl, "/fw/long", &resp), 429);
    int64_t got = now_ms();
    long ra = retry_after_seconds(&resp);
    long lo = (60000 - (got - t0) + 999) / 1000 - 1, hi = (60000 - (sent - t1) + 999) / 1000 + 1;
    if (ra < lo || ra > hi)
        fail_msg("Retry-After %ld, want %ld..%ld", ra, lo, hi);
    client_close(cl);
}

/* A token bucket that lets one through per 10 s; the second request gets the throttle answer.
 * *sent1 / *got1: around the first request (realtime ms). */
static void bucket_second_refused(receiver *r, const char *path, receiver_throttle t,
                                  response *resp, int64_t *sent1, int64_t *got1)
{
    t.path_prefix = path;
    t.kind = RECV_TOKEN_BUCKET;
    t.rate_per_minute = 6;
    t.burst = 1;
    assert_int_equal(receiver_throttle_on(r, &t), 0);
    client *cl = client_open(r);
    *sent1 = real_ms();
    assert_int_equal(get_status(cl, path, resp), 200);
    *got1 = real_ms();
    assert_int_equal(get_status(cl, path, resp), t.status ? t.status : 429);
    client_close(cl);
}

static void throttle_retry_after_modes(void **state)
{
    receiver *r = *state;
    response resp;
    char v[128];
    int64_t sent1, got1;

    bucket_second_refused(r, "/ra/none", (receiver_throttle){.retry_after = RECV_RA_NONE}, &resp,
                          &sent1, &got1);
    assert_false(header_value(&resp, "Retry-After", v, sizeof v));

    /* Computed: the token comes 10 s after the first request took it, rounded up. */
    bucket_second_refused(r, "/ra/secs", (receiver_throttle){.retry_after = RECV_RA_SECONDS}, &resp,
                          &sent1, &got1);
    long secs = retry_after_seconds(&resp);
    long lo = 10 - (real_ms() - sent1) / 1000 - 1;
    if (secs < lo || secs > 10)
        fail_msg("Retry-After %ld, want %ld..10", secs, lo);

    bucket_second_refused(r, "/ra/fixed", (receiver_throttle){.retry_after_s = 42}, &resp, &sent1,
                          &got1);
    assert_int_equal(retry_after_seconds(&resp), 42);

    /* A date: when the token comes (the first request + 10 s), rounded up to a second. */
    bucket_second_refused(r, "/ra/date", (receiver_throttle){.retry_after = RECV_RA_DATE}, &resp,
                          &sent1, &got1);
    assert_true(header_value(&resp, "Retry-After", v, sizeof v));
    int64_t at = parse_imf_fixdate(v);
    if (at < 0)
        fail_msg("Retry-After is not an IMF-fixdate: \"%s\"", v);
    if (at * 1000 < sent1 + 10000 || at * 1000 > got1 + 11001)
        fail_msg("Retry-After %s is %lld ms after the first request, want 10000..11000", v,
                 (long long)(at * 1000 - sent1));
    assert_true(at * 1000 > real_ms()); /* in the future */
    /* libcurl (what pgpace reads it with) understands it as a delay. */
    long status;
    sink out = {0};
    CURL *h = curl_easy_init();
    assert_non_null(h);
    assert_int_equal(curl_do(h, r, "/ra/date", "{}", NULL, 5000, &status, &out), CURLE_OK);
    assert_int_equal(status, 429);
    curl_off_t retry = 0;
    curl_easy_getinfo(h, CURLINFO_RETRY_AFTER, &retry);
    curl_easy_cleanup(h);
    if (retry < 5 || retry > 11)
        fail_msg("curl read Retry-After as %lld s", (long long)retry);

    /* A date with a fixed delay: an hour away. */
    bucket_second_refused(r, "/ra/datefixed",
                          (receiver_throttle){.retry_after = RECV_RA_DATE, .retry_after_s = 3600},
                          &resp, &sent1, &got1);
    assert_true(header_value(&resp, "Retry-After", v, sizeof v));
    at = parse_imf_fixdate(v);
    assert_true(at >= 0);
    assert_true(at * 1000 >= sent1 + 3600000 && at * 1000 < real_ms() + 3601000);

    /* Literals, as they are. */
    bucket_second_refused(
        r, "/ra/lit",
        (receiver_throttle){.retry_after = RECV_RA_LITERAL, .retry_after_literal = "99999999999"},
        &resp, &sent1, &got1);
    assert_true(header_value(&resp, "Retry-After", v, sizeof v));
    assert_string_equal(v, "99999999999");
    bucket_second_refused(
        r, "/ra/soon",
        (receiver_throttle){.retry_after = RECV_RA_LITERAL, .retry_after_literal = "soon"}, &resp,
        &sent1, &got1);
    assert_contains(resp.head, "\r\nRetry-After: soon\r\n");
}

static void throttle_status_503_and_bad_parameters(void **state)
{
    receiver *r = *state;
    /* limit 0: everything refused, with the configured status and body. */
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/busy",
                                                                  .kind = RECV_FIXED_WINDOW,
                                                                  .limit = 0,
                                                                  .window_ms = 1000,
                                                                  .status = 503,
                                                                  .body = "slow down"}),
                     0);
    client *cl = client_open(r);
    response resp;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(get_status(cl, "/busy", &resp), 503);
        assert_contains(resp.head, "HTTP/1.1 503 Service Unavailable\r\n");
        assert_int_equal(resp.body_len, 9);
        assert_memory_equal(resp.body, "slow down", 9);
        assert_int_equal(retry_after_seconds(&resp), 1); /* under a second to the boundary */
    }
    assert_int_equal(receiver_count_status(r, "/busy", 503), 3);
    assert_int_equal(receiver_count_status(r, "/busy", 429), 0);

    /* Refused parameters add nothing. */
    receiver_throttle bad[] = {
        {.path_prefix = "/bad", .kind = RECV_TOKEN_BUCKET, .rate_per_minute = 0, .burst = 1},
        {.path_prefix = "/bad", .kind = RECV_TOKEN_BUCKET, .rate_per_minute = -1, .burst = 1},
        {.path_prefix = "/bad", .kind = RECV_TOKEN_BUCKET, .rate_per_minute = 60, .burst = 0},
        {.path_prefix = "/bad", .kind = RECV_FIXED_WINDOW, .limit = -1, .window_ms = 10},
        {.path_prefix = "/bad", .kind = RECV_FIXED_WINDOW, .limit = 1, .window_ms = 0},
        {.path_prefix = "/bad", .kind = RECV_FIXED_WINDOW, .window_ms = 10, .status = 200},
        {.path_prefix = "/bad", .kind = RECV_FIXED_WINDOW, .window_ms = 10, .status = 600},
        {.path_prefix = "/bad",
         .kind = RECV_FIXED_WINDOW,
         .window_ms = 10,
         .retry_after = RECV_RA_LITERAL},
        {.path_prefix = "/bad",
         .kind = RECV_FIXED_WINDOW,
         .window_ms = 10,
         .retry_after = RECV_RA_LITERAL,
         .retry_after_literal = "1\r\nX-Injected: yes"},
        {.path_prefix = "/bad", .kind = RECV_FIXED_WINDOW, .window_ms = 10, .retry_after_s = -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (receiver_throttle_on(r, &bad[i]) != -1)
            fail_msg("bad throttle %zu accepted", i);
    assert_int_equal(get_status(cl, "/bad", &resp), 200);
    client_close(cl);
}

static void throttle_before_rules_and_status_recorded(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/s/x", .status = 201, .times = 1});
    receiver_on(r, &(receiver_rule){.path_prefix = "/rl", .status = 429, .retry_after = "3"});
    receiver_on(r, &(receiver_rule){.path_prefix = "/hang", .action = RECV_HANG});
    receiver_on(r, &(receiver_rule){.path_prefix = "/slow", .status = 202, .delay_ms = 100});
    receiver_on(r, &(receiver_rule){.path_prefix = "/never", .delay_ms = 60000});
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/s/",
                                                                  .kind = RECV_FIXED_WINDOW,
                                                                  .limit = 1,
                                                                  .window_ms = 600000}),
                     0);
    client *cl = client_open(r);
    response resp;
    assert_int_equal(get_status(cl, "/s/a", &resp), 200);
    /* Throttled: the rule is not reached, so not used up. */
    assert_int_equal(get_status(cl, "/s/x", &resp), 429);
    /* A later, matching throttle decides instead (with room): now the rule answers, once. */
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/s/x",
                                                                  .kind = RECV_TOKEN_BUCKET,
                                                                  .rate_per_minute = 1,
                                                                  .burst = 5}),
                     0);
    assert_int_equal(get_status(cl, "/s/x", &resp), 201);
    assert_int_equal(get_status(cl, "/s/x", &resp), 200);
    assert_int_equal(get_status(cl, "/s/b", &resp), 429);
    /* A rule's 429 is not a throttle's. */
    assert_int_equal(get_status(cl, "/rl", &resp), 429);
    /* A delayed answer's status is there once it is sent. */
    assert_int_equal(get_status(cl, "/slow", &resp), 202);
    client_close(cl);

    /* Never answered: 0 (the 60 s answer stays pending until teardown stops the receiver). */
    cl = client_open(r);
    client_send(cl, GET("/hang"));
    client *cl2 = client_open(r);
    client_send(cl2, GET("/never"));
    assert_int_equal(receiver_wait(r, NULL, 9, 5000), 9);
    client_close(cl);
    client_close(cl2);

    struct {
        const char *path;
        int status, throttled;
    } want[] = {
        {"/s/a", 200, 0}, {"/s/x", 429, 1},  {"/s/x", 201, 0}, {"/s/x", 200, 0}, {"/s/b", 429, 1},
        {"/rl", 429, 0},  {"/slow", 202, 0}, {"/hang", 0, 0},  {"/never", 0, 0},
    };
    assert_int_equal(receiver_count(r, NULL), 9);
    for (size_t i = 0; i < 9; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(r, i, &rq), 0);
        free(rq.body);
        /* /hang and /never arrive in either order. */
        size_t j = i;
        if (i >= 7 && strcmp(rq.path, want[i].path) != 0)
            j = i == 7 ? 8 : 7;
        assert_string_equal(rq.path, want[j].path);
        if (rq.status != want[j].status || rq.throttled != want[j].throttled)
            fail_msg("%s: status %d throttled %d, want %d %d", rq.path, rq.status, rq.throttled,
                     want[j].status, want[j].throttled);
    }
    assert_int_equal(receiver_count_status(r, NULL, 429), 3);
    assert_int_equal(receiver_count_status(r, "/s/", 429), 2);
    assert_int_equal(receiver_count_status(r, "/s/", 200), 2);
    assert_int_equal(receiver_count_status(r, "", 200), 2);
    assert_int_equal(receiver_count_status(r, NULL, 0), 2);
    assert_int_equal(receiver_count_status(r, "/nothing", 200), 0);

    /* receiver_clear_rules removes throttles too. */
    receiver_clear_rules(r);
    cl = client_open(r);
    assert_int_equal(get_status(cl, "/s/b", &resp), 200);
    client_close(cl);
}

/* ---- answer times, concurrency, every-N rules ---- */

static int64_t real_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Recorded request i (fails when there is none), without its body. */
static receiver_request record(receiver *r, size_t i)
{
    receiver_request rq;
    if (receiver_get(r, i, &rq) != 0)
        fail_msg("no record %zu", i);
    free(rq.body);
    rq.body = NULL;
    return rq;
}

static void answered_us_is_when_the_answer_was_sent(void **state)
{
    receiver *r = *state;
    receiver_on(r, &(receiver_rule){.path_prefix = "/slow", .status = 202, .delay_ms = 250});
    receiver_on(r, &(receiver_rule){.path_prefix = "/hang", .action = RECV_HANG});
    receiver_on(r, &(receiver_rule){.path_prefix = "/fin", .action = RECV_CLOSE});
    receiver_on(r, &(receiver_rule){.path_prefix = "/never", .delay_ms = 60000});
    receiver_on(r, &(receiver_rule){.path_prefix = "/huge", .action = RECV_TRICKLE_HUGE});
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/thr",
                                                                  .kind = RECV_FIXED_WINDOW,
                                                                  .limit = 0,
                                                                  .window_ms = 600000}),
                     0);
    client *cl = client_open(r);
    response resp;

    /* Set by the time the client has read the answer, between arrival and then. */
    int64_t before = real_us();
    assert_int_equal(get_status(cl, "/fast", &resp), 200);
    int64_t after = real_us();
    receiver_request rq = record(r, 0);
    if (!(before <= rq.at_us && rq.at_us <= rq.answered_us && rq.answered_us <= after))
        fail_msg("sent %lld, arrived %lld, answered %lld, read %lld (us)", (long long)before,
                 (long long)rq.at_us, (long long)rq.answered_us, (long long)after);

    /* A delayed answer: when it was actually sent, the delay after its arrival. */
    assert_int_equal(get_status(cl, "/slow/1", &resp), 202);
    rq = record(r, 1);
    assert_int_equal(rq.status, 202);
    if (rq.answered_us - rq.at_us < 250000)
        fail_msg("delayed answer sent %lld us after arrival, want >= 250 ms",
                 (long long)(rq.answered_us - rq.at_us));

    /* Pipelined behind a delayed answer: answered after it. */
    client_send(cl, GET("/slow/2") GET("/fast/2"));
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 202);
    assert_int_equal(client_response(cl, &resp), 0);
    assert_int_equal(resp.status, 200);
    receiver_request slow = record(r, 2), fast = record(r, 3);
    assert_string_equal(fast.path, "/fast/2");
    assert_true(slow.answered_us - slow.at_us >= 250000);
    assert_true(fast.answered_us >= slow.answered_us);

    /* A throttled answer counts as answered too. */
    assert_int_equal(get_status(cl, "/thr", &resp), 429);
    rq = record(r, 4);
    assert_int_equal(rq.throttled, 1);
    assert_true(rq.answered_us >= rq.at_us);
    client_close(cl);

    /* Never answered: a hang, a FIN, a delayed answer whose client left first, and a trickle
     * (its status line is out, its body never finishes). */
    client *hang = client_open(r), *fin = client_open(r), *never = client_open(r);
    client *huge = client_open(r);
    client_send(hang, GET("/hang"));
    client_send(fin, GET("/fin"));
    client_send(never, GET("/never"));
    client_send(huge, GET("/huge"));
    assert_int_equal(client_until_eof(fin), 0);
    while (!memmem(huge->buf, huge->len, "\r\n\r\n", 4))
        assert_true(client_fill(huge) > 0);
    assert_int_equal(receiver_wait(r, NULL, 9, 5000), 9);
    client_close(hang);
    client_close(fin);
    /* With RST: after a FIN the receiver still sends the delayed answer, then closes. */
    struct linger lg = {1, 0};
    assert_int_equal(setsockopt(never->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    client_close(never);
    client_close(huge);
    /* Once every connection is gone no answer can still be sent. */
    wait_connections(r, 0);
    for (size_t i = 5; i < 9; i++) {
        rq = record(r, i);
        int want_status = strcmp(rq.path, "/huge") == 0 ? 200 : 0;
        if (rq.answered_us != 0 || rq.status != want_status)
            fail_msg("%s: answered_us %lld status %d, want 0 and %d", rq.path,
                     (long long)rq.answered_us, rq.status, want_status);
    }
}

static void max_concurrent_sweeps_the_open_intervals(void **state)
{
    receiver *r = *state;
    assert_int_equal(receiver_max_concurrent(r, NULL), 0);

    /* One after another on one connection: never two at once. */
    client *cl = client_open(r);
    response resp;
    for (int i = 0; i < 5; i++)
        assert_int_equal(get_status(cl, "/seq", &resp), 200);
    assert_int_equal(receiver_max_concurrent(r, "/seq"), 1);
    assert_int_equal(receiver_max_concurrent(r, NULL), 1);
    /* The same with delayed answers: an interval ends when its answer is sent. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/late", .delay_ms = 100});
    client *cl2 = client_open(r);
    assert_int_equal(get_status(cl, "/late/1", &resp), 200);
    assert_int_equal(get_status(cl2, "/late/2", &resp), 200);
    assert_int_equal(receiver_max_concurrent(r, "/late"), 1);

    /* Pipelined requests are open together: all arrived before the first was answered. */
    client_send(cl, GET("/late/p1") GET("/late/p2") GET("/late/p3"));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(client_response(cl, &resp), 0);
        assert_int_equal(resp.status, 200);
    }
    assert_int_equal(receiver_max_concurrent(r, "/late/p"), 3);
    assert_int_equal(receiver_max_concurrent(r, "/late"), 3);

    /* Three requests under /a that are never answered, and meanwhile a quick one under /b. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/a", .action = RECV_HANG});
    client *held[3];
    for (int i = 0; i < 3; i++) {
        held[i] = client_open(r);
        char req[64];
        snprintf(req, sizeof req, "GET /a/%d HTTP/1.1\r\nHost: x\r\n\r\n", i);
        client_send(held[i], req);
    }
    assert_int_equal(receiver_wait(r, "/a", 3, 5000), 3);
    assert_int_equal(get_status(cl2, "/b", &resp), 200);
    assert_int_equal(receiver_max_concurrent(r, "/a"), 3);
    assert_int_equal(receiver_max_concurrent(r, "/b"), 1);
    assert_int_equal(receiver_max_concurrent(r, "/seq"), 1);
    assert_int_equal(receiver_max_concurrent(r, NULL), 4);
    assert_int_equal(receiver_max_concurrent(r, ""), 4);
    assert_int_equal(receiver_max_concurrent(r, "/nothing"), 0);
    /* Unanswered requests stay open to the end, also after their connection is gone. */
    for (int i = 0; i < 3; i++)
        client_close(held[i]);
    wait_connections(r, 2);
    assert_int_equal(get_status(cl, "/b", &resp), 200);
    assert_int_equal(receiver_max_concurrent(r, "/a"), 3);
    assert_int_equal(receiver_max_concurrent(r, NULL), 4);
    client_close(cl);
    client_close(cl2);
}

/* Fails unless resp's body is exactly `want`. */
static void assert_body(const response *resp, const char *want)
{
    if (resp->body_len != strlen(want) || memcmp(resp->body, want, resp->body_len) != 0)
        fail_msg("body \"%.*s\", want \"%s\"", (int)resp->body_len, resp->body, want);
}

static void rule_every_takes_each_nth_and_the_rest_fall_through(void **state)
{
    receiver *r = *state;
    /* The contract's shared host, scaled down: B, added last, takes every 20th request and
     * answers it late; A takes every 4th of the requests B lets through. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/", .status = 500, .body = "fail", .every = 4});
    receiver_on(
        r, &(receiver_rule){
               .path_prefix = "/", .status = 200, .body = "slow", .delay_ms = 100, .every = 20});
    /* B takes 20 and 40. A counts the 38 others, so after B's 20 its phase moves by one: the
     * 20th request A sees is request 21. The rest fall through to the default. */
    static const int fails[] = {4, 8, 12, 16, 21, 25, 29, 33, 37};
    enum { NFAILS = sizeof fails / sizeof fails[0] };
    client *cl = client_open(r);
    response resp;
    size_t nf = 0;
    for (int i = 1; i <= 40; i++) {
        char path[32];
        snprintf(path, sizeof path, "/h/%d", i);
        int want = 200;
        const char *body = "ok";
        if (i % 20 == 0) {
            body = "slow";
        } else if (nf < NFAILS && fails[nf] == i) {
            want = 500;
            body = "fail";
            nf++;
        }
        if (get_status(cl, path, &resp) != want)
            fail_msg("request %d: status %d, want %d", i, resp.status, want);
        assert_body(&resp, body);
    }
    assert_int_equal(nf, NFAILS);
    client_close(cl);
    /* The record agrees; B's two answers went out at least its delay after they arrived. */
    assert_int_equal(receiver_count_status(r, "/h/", 500), NFAILS);
    assert_int_equal(receiver_count_status(r, "/h/", 200), 40 - NFAILS);
    for (size_t i = 19; i < 40; i += 20) {
        receiver_request rq = record(r, i);
        if (rq.answered_us - rq.at_us < 100000)
            fail_msg("request %zu answered %lld us after it arrived, want >= 100 ms", i + 1,
                     (long long)(rq.answered_us - rq.at_us));
    }

    /* The count is the rule's, shared by connections: the 3rd and the 6th, whichever
     * connection sends them. */
    receiver_clear_rules(r);
    receiver_on(r, &(receiver_rule){.path_prefix = "/s", .status = 503, .every = 3});
    client *a = client_open(r), *b = client_open(r);
    for (int i = 1; i <= 6; i++)
        assert_int_equal(get_status(i % 2 ? a : b, "/s", &resp), i % 3 == 0 ? 503 : 200);
    client_close(b);

    /* `times` counts only the requests the rule took: the 2nd and the 4th, then it expires. */
    receiver_on(r,
                &(receiver_rule){.path_prefix = "/times", .status = 503, .every = 2, .times = 2});
    static const int want_times[] = {200, 503, 200, 503, 200, 200, 200, 200};
    for (size_t i = 0; i < sizeof want_times / sizeof want_times[0]; i++)
        if (get_status(a, "/times", &resp) != want_times[i])
            fail_msg("/times request %zu: status %d, want %d", i + 1, resp.status, want_times[i]);

    /* A throttled request never reaches the rules, so it does not count. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/th", .status = 503, .every = 2});
    assert_int_equal(receiver_throttle_on(r, &(receiver_throttle){.path_prefix = "/th/x",
                                                                  .kind = RECV_FIXED_WINDOW,
                                                                  .limit = 0,
                                                                  .window_ms = 600000}),
                     0);
    assert_int_equal(get_status(a, "/th/a", &resp), 200);
    assert_int_equal(get_status(a, "/th/x", &resp), 429);
    assert_int_equal(get_status(a, "/th/a", &resp), 503);

    /* every 1, 0 and below: every matching request. */
    receiver_on(r, &(receiver_rule){.path_prefix = "/e1", .status = 202, .every = 1});
    receiver_on(r, &(receiver_rule){.path_prefix = "/e0", .status = 203, .every = 0});
    receiver_on(r, &(receiver_rule){.path_prefix = "/en", .status = 204, .every = -3});
    for (int i = 0; i < 3; i++) {
        assert_int_equal(get_status(a, "/e1", &resp), 202);
        assert_int_equal(get_status(a, "/e0", &resp), 203);
        assert_int_equal(get_status(a, "/en", &resp), 204);
    }
    client_close(a);
}

/* ---- pgpace-receiver, the standalone program ---- */

/* A pgpace-receiver run: its pid (0 once reaped) and files holding its stdout and stderr. */
typedef struct child {
    pid_t pid;
    char out_path[32], err_path[32];
} child;

/* The one a test runs, so that teardown can kill it when the test fails half way. */
static child running;

static void child_spawn(child *c, const char *const *args)
{
    const char *bin = getenv("PGPACE_RECEIVER_BIN");
    if (!bin)
        fail_msg("PGPACE_RECEIVER_BIN is not set (run the tests through meson test)");
    const char *argv[32] = {bin};
    size_t n = 1;
    for (; args[n - 1]; n++) {
        assert_true(n < 31);
        argv[n] = args[n - 1];
    }
    argv[n] = NULL;
    snprintf(c->out_path, sizeof c->out_path, "/tmp/pgpace-recv-XXXXXX");
    snprintf(c->err_path, sizeof c->err_path, "/tmp/pgpace-recv-XXXXXX");
    int out = mkstemp(c->out_path), err = mkstemp(c->err_path);
    assert_true(out >= 0 && err >= 0);
    int devnull = open("/dev/null", O_RDONLY);
    assert_true(devnull >= 0);
    /* Only async-signal-safe calls between fork and exec: this process has threads. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(devnull, 0);
        dup2(out, 1);
        dup2(err, 2);
        execv(bin, (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(out);
    close(err);
    close(devnull);
    c->pid = pid;
}

/* Waits up to timeout_ms for it to exit: its exit status, 128 + signal, or -1 on timeout. */
static int child_wait(child *c, int timeout_ms)
{
    int64_t until = now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t p = waitpid(c->pid, &st, WNOHANG);
        if (p == c->pid) {
            c->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        assert_int_equal(p, 0);
        if (now_ms() >= until)
            return -1;
        sleep_ms(10);
    }
}

/* The whole file, NUL-terminated (the caller frees it). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *s = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *grown = realloc(s, cap);
            assert_non_null(grown);
            s = grown;
        }
        size_t n = fread(s + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    s[len] = '\0';
    return s;
}

/* Kills it if it still runs, reaps it, removes its files. */
static void child_done(child *c)
{
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        c->pid = 0;
    }
    if (c->out_path[0])
        unlink(c->out_path);
    if (c->err_path[0])
        unlink(c->err_path);
    memset(c, 0, sizeof *c);
}

static int teardown_child(void **state)
{
    child_done(&running);
    return teardown(state);
}

/* Runs pgpace-receiver with args to its exit (deadline 10 s): the exit status, *out and *err. */
static int run_receiver(const char *const *args, char **out, char **err)
{
    child_spawn(&running, args);
    int st = child_wait(&running, 10000);
    if (st < 0)
        fail_msg("pgpace-receiver still running after 10 s");
    *out = slurp(running.out_path);
    *err = slurp(running.err_path);
    child_done(&running);
    return st;
}

static void cli_rule_bad_specs_exit_2_naming_the_bad_part(void **state)
{
    static const struct {
        const char *spec, *why;
    } bad[] = {
        {"/x", "no STATUS"},
        {"x:500", "PREFIX \"x\" must start with '/'"},
        {":500", "PREFIX \"\" must start with '/'"},
        {"/x:", "STATUS \"\" must be a number in 200..599"},
        {"/x:abc", "STATUS \"abc\" must be a number in 200..599"},
        {"/x:199", "STATUS \"199\""},
        {"/x:600", "STATUS \"600\""},
        {"/x:500:every=0", "every \"0\" must be a number in 1..1000000000"},
        {"/x:500:every=many", "every \"many\""},
        {"/x:500:every=", "every \"\""},
        {"/x:500:delay=-5", "delay \"-5\" must be milliseconds in 0..86400000"},
        {"/x:500:delay=1s", "delay \"1s\""},
        {"/x:500:colour=red", "unknown option \"colour=red\""},
        {"/x:500:every", "unknown option \"every\""},
        {"/x:500:", "empty option"},
        {"/x:500::every=2", "empty option"},
        {"/x:500:every=2:every=3", "every given twice"},
        {"/x:500:delay=1:delay=2", "delay given twice"},
        {"/x:500:retry-after=", "retry-after needs a value"},
        {"/x:500:retry-after=1\r\nX-Injected: yes", "retry-after needs a value, on one line"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out, *err;
        int st = run_receiver(TL_ARGV("--rule", "/ok:200", "--rule", bad[i].spec), &out, &err);
        char want[256];
        snprintf(want, sizeof want, "pgpace-receiver: bad --rule \"%s\": %s", bad[i].spec,
                 bad[i].why);
        if (st != 2 || !strstr(err, want) || out[0] != '\0')
            fail_msg("--rule %s: exit %d, stdout \"%s\", stderr \"%s\"; want exit 2 and \"%s\"",
                     bad[i].spec, st, out, err, want);
        free(out);
        free(err);
    }
    /* The --rule=SPEC form, and --rule without its SPEC (the usage, also exit 2). */
    char *out, *err;
    assert_int_equal(run_receiver(TL_ARGV("--rule=/x:abc"), &out, &err), 2);
    assert_contains(err, "bad --rule \"/x:abc\": STATUS \"abc\"");
    free(out);
    free(err);
    assert_int_equal(run_receiver(TL_ARGV("--rule"), &out, &err), 2);
    assert_contains(err, "usage: pgpace-receiver");
    free(out);
    free(err);
    /* The usage documents the syntax and the example. */
    assert_int_equal(run_receiver(TL_ARGV("--help"), &out, &err), 0);
    assert_contains(out, "PREFIX:STATUS[:delay=MS][:every=N][:retry-after=VALUE]");
    assert_contains(out, "--rule /:500:every=4 --rule /:200:delay=3000:every=20");
    free(out);
    free(err);
}

/* Waits (deadline 10 s) for the running child's "listening on" line; returns its port. */
static int child_port(void)
{
    int64_t until = now_ms() + 10000;
    for (;;) {
        char *err = slurp(running.err_path);
        const char *at = strstr(err, "listening on http://127.0.0.1:");
        int port = 0;
        if (at)
            port = atoi(at + strlen("listening on http://127.0.0.1:"));
        free(err);
        if (port > 0)
            return port;
        if (now_ms() >= until)
            fail_msg("pgpace-receiver did not say where it listens within 10 s");
        sleep_ms(10);
    }
}

static void cli_rule_answers_as_configured(void **state)
{
    /* 503 with an HTTP date (it has ':' in it) for every 2nd request under /a that the 202 rule
     * lets through; the 202 rule, given last, takes every 3rd, 200 ms late. Those under /slow
     * 201, 300 ms late, and /gone never in time. */
    static const char date[] = "Sun, 06 Nov 1994 08:49:37 GMT";
    char rule503[128];
    snprintf(rule503, sizeof rule503, "/a:503:every=2:retry-after=%s", date);
    child_spawn(&running, TL_ARGV("--rule", rule503, "--rule", "/a:202:every=3:delay=200", "--rule",
                                  "/slow:201:delay=300", "--rule", "/gone:200:delay=600000"));
    int port = child_port();
    client *cl = client_open_port(port);
    response resp;
    /* 3 and 6 are the 202 rule's; of 1, 2, 4, 5 the 503 rule takes its 2nd and 4th. */
    static const int want[] = {200, 503, 202, 200, 503, 202};
    for (int i = 1; i <= 6; i++) {
        char path[16];
        snprintf(path, sizeof path, "/a/%d", i);
        int64_t t0 = now_ms();
        if (get_status(cl, path, &resp) != want[i - 1])
            fail_msg("%s: status %d, want %d", path, resp.status, want[i - 1]);
        char v[64];
        if (want[i - 1] == 503) {
            assert_true(header_value(&resp, "Retry-After", v, sizeof v));
            assert_string_equal(v, date);
        } else {
            assert_false(header_value(&resp, "Retry-After", v, sizeof v));
        }
        if (want[i - 1] == 202 && now_ms() - t0 < 200)
            fail_msg("%s answered after %lld ms, want >= 200", path, (long long)(now_ms() - t0));
        assert_int_equal(resp.body_len, want[i - 1] == 200 ? 2 : 0);
    }
    /* Other paths: the default. */
    assert_int_equal(get_status(cl, "/b", &resp), 200);
    assert_body(&resp, "ok");
    /* A delayed answer on one connection while another is answered at once: its line comes
     * when it is sent, with its status. */
    client *cl2 = client_open_port(port);
    int64_t t0 = now_ms();
    client_send(cl2, GET("/slow"));
    assert_int_equal(get_status(cl, "/b/2", &resp), 200);
    assert_int_equal(client_response(cl2, &resp), 0);
    assert_int_equal(resp.status, 201);
    assert_true(now_ms() - t0 >= 300);
    /* Pipelined behind an answer, in one write (one segment on loopback, so one read and one
     * pass of the parser): /gone is recorded before the loop thread gets back to its loop,
     * and still pending when the receiver stops. */
    client_send(cl2, GET("/b/3") GET("/gone"));
    assert_int_equal(client_response(cl2, &resp), 0);
    assert_int_equal(resp.status, 200);
    assert_int_equal(kill(running.pid, SIGTERM), 0);
    assert_int_equal(child_wait(&running, 10000), 0);
    client_close(cl);
    client_close(cl2);

    char *out = slurp(running.out_path), *err = slurp(running.err_path);
    assert_contains(err, "stopped by signal 15");
    /* One line per request, five fields: arrival ms, path, webhook-id, body length, status. */
    static const struct {
        const char *path;
        int status;
    } lines[] = {{"/a/1", 200},  {"/a/2", 503}, {"/a/3", 202}, {"/a/4", 200},
                 {"/a/5", 503},  {"/a/6", 202}, {"/b", 200},   {"/b/2", 200},
                 {"/slow", 201}, {"/b/3", 200}, {"/gone", 0}};
    enum { NLINES = sizeof lines / sizeof lines[0] };
    bool seen[NLINES] = {false};
    int64_t now = real_ms();
    size_t n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), n++) {
        long long ms;
        char path[64], id[64];
        size_t body_len;
        int status, end = 0;
        if (sscanf(line, "%lld %63s %63s %zu %d%n", &ms, path, id, &body_len, &status, &end) != 5 ||
            line[end] != '\0')
            fail_msg("not five fields: \"%s\"", line);
        assert_string_equal(id, "-");
        assert_int_equal(body_len, 0);
        assert_true(ms <= now && ms > now - 60000);
        size_t j = 0;
        while (j < NLINES && (seen[j] || strcmp(lines[j].path, path) != 0))
            j++;
        if (j == NLINES)
            fail_msg("unexpected line \"%s\"", line);
        else if (status != lines[j].status)
            fail_msg("%s: status %d in the output, want %d", path, status, lines[j].status);
        else
            seen[j] = true;
    }
    assert_int_equal(n, NLINES);
    free(out);
    free(err);
    child_done(&running);
}

/* --throttle with sliding windows and an announcement; bad specs exit 2. */
static void cli_throttle_sliding_and_announce(void **state)
{
    static const char *const bad[] = {
        "/s:sliding",
        "/s:sliding:",
        "/s:sliding:2",
        "/s:sliding:2/0",
        "/s:sliding:-1/1000",
        "/s:sliding:2/1000,",
        "/s:sliding:1/1,1/2,1/3,1/4,1/5",
        "/s:sliding:2/1000:",
        "/s:sliding:2/1000:announce=json",
        "/s:window:1:1000:announce=",
        "/s:window:1:1000:announce=x:",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out, *err;
        int st = run_receiver(TL_ARGV("--throttle", bad[i]), &out, &err);
        if (st != 2 || !strstr(err, "bad --throttle"))
            fail_msg("--throttle %s: exit %d, stderr \"%s\"; want exit 2", bad[i], st, err);
        free(out);
        free(err);
    }
    child_spawn(&running, TL_ARGV("--throttle", "/s:sliding:2/60000,5/3600000:429:announce=x",
                                  "--throttle", "/w:window:1:3600000:503:announce=ietf"));
    client *cl = client_open_port(child_port());
    response resp;
    char v[64];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(get_status(cl, "/s/x", &resp), i < 2 ? 200 : 429);
        assert_true(header_value(&resp, "X-RateLimit-Limit", v, sizeof v));
        assert_string_equal(v, "2");
        assert_true(header_value(&resp, "X-RateLimit-Remaining", v, sizeof v));
        assert_int_equal(atoi(v), i < 2 ? 1 - i : 0);
    }
    assert_int_equal(get_status(cl, "/w", &resp), 200);
    assert_int_equal(get_status(cl, "/w", &resp), 503);
    assert_true(header_value(&resp, "RateLimit", v, sizeof v));
    assert_contains(v, ";r=0;t=");
    client_close(cl);
    assert_int_equal(kill(running.pid, SIGTERM), 0);
    assert_int_equal(child_wait(&running, 10000), 0);
    child_done(&running);
}

/* ---- sliding windows, announcements, a host-wide throttle ---- */

/* The admitted (status 200) arrival times under prefix, oldest first (realtime us). */
static size_t admitted_times(receiver *r, const char *prefix, int64_t *at, size_t cap)
{
    size_t n = 0;
    receiver_request rq;
    for (size_t i = 0; receiver_get(r, i, &rq) == 0; i++) {
        free(rq.body);
        if (strncmp(rq.path, prefix, strlen(prefix)) == 0 && rq.status == 200 && !rq.throttled) {
            assert_true(n < cap);
            at[n++] = rq.at_us;
        }
    }
    return n;
}

/* Sliding-window invariant on the record: no (t - window, t] holds more than limit admitted
 * requests. at_us (realtime, taken when the request was complete) and the throttle's monotonic
 * reading differ by microseconds: 2 ms of slack. */
static void assert_window_held(const int64_t *at, size_t n, int64_t window_us, int limit)
{
    for (size_t i = 0; i < n; i++) {
        int in = 0;
        for (size_t j = 0; j <= i; j++)
            in += at[j] > at[i] - window_us + 2000;
        if (in > limit)
            fail_msg("%d requests let through in the %lld us before request %zu", in,
                     (long long)window_us, i);
    }
}

static void throttle_sliding_windows_enforced_together(void **state)
{
    receiver *r = *state;
    /* 2 per 1.5 s and 4 per minute, together. (1.5 s: the test needs a request decided within
     * the short window after a pipelined burst, which a busy machine still manages.) */
    receiver_throttle t = {.path_prefix = "/sw",
                           .kind = RECV_SLIDING_WINDOW,
                           .sliding_limit = {2, 4},
                           .sliding_window_ms = {1500, 60000}};
    assert_int_equal(receiver_throttle_on(r, &t), 0);
    client *cl = client_open(r);
    response resp;
    int st[6];
    int64_t t0 = now_ms();
    assert_int_equal(burst(cl, "/sw/a", 5, st, &resp), 2);
    for (int i = 0; i < 5; i++)
        assert_int_equal(st[i], i < 2 ? 200 : 429);
    long ra = retry_after_seconds(&resp);
    assert_true(ra >= 1 && ra <= 2); /* under 1.5 s, rounded up */

    /* One throttled request later in the first window: it must not count. */
    int64_t at[16];
    assert_int_equal(admitted_times(r, "/sw", at, 16), 2);
    assert_int_equal(get_status(cl, "/sw/b", &resp), 429);
    /* Wait (test side) until the first two left the short window, by the receiver's record. */
    while (real_ms() * 1000 <= at[1] + 1500000 + 5000)
        sleep_ms(10);
    assert_int_equal(burst(cl, "/sw/c", 3, st, &resp), 2);
    assert_int_equal(st[0], 200);
    assert_int_equal(st[1], 200);
    assert_int_equal(st[2], 429);

    /* 4 let through within the minute: the long window now refuses even after the short one
     * has room again, and says until when (the first request's minute, rounded up). */
    assert_int_equal(admitted_times(r, "/sw", at, 16), 4);
    while (real_ms() * 1000 <= at[3] + 1500000 + 5000)
        sleep_ms(10);
    assert_int_equal(get_status(cl, "/sw/d", &resp), 429);
    ra = retry_after_seconds(&resp);
    long lo = 60 - (long)((now_ms() - t0) / 1000) - 1;
    if (ra < lo || ra > 60)
        fail_msg("Retry-After %ld, want %ld..60", ra, lo);
    size_t n = admitted_times(r, "/sw", at, 16);
    assert_int_equal(n, 4);
    assert_window_held(at, n, 1500000, 2);
    assert_window_held(at, n, 60000000, 4);
    assert_int_equal(receiver_count_status(r, "/sw", 429), 3 + 1 + 1 + 1);
    client_close(cl);

    /* Parameters out of range are refused. */
    receiver_throttle bad = {.kind = RECV_SLIDING_WINDOW};
    assert_int_equal(receiver_throttle_on(r, &bad), -1); /* no window */
    bad.sliding_window_ms[0] = -5;
    assert_int_equal(receiver_throttle_on(r, &bad), -1);
    bad.sliding_window_ms[0] = 1000;
    bad.sliding_limit[0] = -1;
    assert_int_equal(receiver_throttle_on(r, &bad), -1);
    bad.sliding_limit[0] = RECV_SLIDING_LIMIT_MAX + 1;
    assert_int_equal(receiver_throttle_on(r, &bad), -1);
    bad.sliding_limit[0] = 0; /* lets nothing through: allowed */
    bad.path_prefix = "/none";
    assert_int_equal(receiver_throttle_on(r, &bad), 0);
    cl = client_open(r);
    assert_int_equal(get_status(cl, "/none", &resp), 429);
    client_close(cl);
}

/* The rate limit fields of a response, read with pgpace's own parser. */
static rl_status announced(const response *resp, rl_announce *a)
{
    static char v[9][600];
    static const char *const names[9] = {
        "RateLimit-Policy",      "RateLimit",         "RateLimit-Limit",
        "RateLimit-Remaining",   "RateLimit-Reset",   "X-RateLimit-Limit",
        "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Reset-After"};
    const char *p[9];
    for (int i = 0; i < 9; i++)
        p[i] = header_value(resp, names[i], v[i], sizeof v[i]) ? v[i] : NULL;
    rl_raw raw = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], false};
    const char *why = NULL;
    rl_status st = rl_parse(&raw, (double)real_ms() / 1000, 3600, a, &why);
    if (st == RL_IGNORED)
        fail_msg("announcement ignored (%s):\n%s", why, resp->head);
    return st;
}

static void throttle_announces_its_state(void **state)
{
    receiver *r = *state;
    static const struct {
        receiver_announce form;
        const char *path, *header;
        unsigned forms;
    } cases[] = {
        {RECV_ANNOUNCE_IETF, "/ietf", "RateLimit-Policy", RL_FORM_IETF},
        {RECV_ANNOUNCE_IETF_EARLY, "/early", "RateLimit-Remaining", RL_FORM_IETF_EARLY},
        {RECV_ANNOUNCE_X, "/x", "X-RateLimit-Reset", RL_FORM_X},
        {RECV_ANNOUNCE_X_EPOCH, "/epoch", "X-RateLimit-Reset", RL_FORM_X},
    };
    response resp;
    rl_announce a;
    char v[128];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        /* A token every 10 s, 3 saved up: limit 3 per 30 s; nothing comes back during this. */
        receiver_throttle t = {.path_prefix = cases[c].path,
                               .kind = RECV_TOKEN_BUCKET,
                               .rate_per_minute = 6,
                               .burst = 3,
                               .announce = cases[c].form};
        assert_int_equal(receiver_throttle_on(r, &t), 0);
        client *cl = client_open(r);
        for (int i = 0; i < 4; i++) {
            int want = i < 3 ? 200 : 429;
            assert_int_equal(get_status(cl, cases[c].path, &resp), want);
            assert_true(header_value(&resp, cases[c].header, v, sizeof v));
            assert_int_equal(announced(&resp, &a), RL_OK);
            assert_int_equal(a.forms, cases[c].forms);
            assert_true(a.have_limit && a.limit == 3);
            if (cases[c].form != RECV_ANNOUNCE_X && cases[c].form != RECV_ANNOUNCE_X_EPOCH)
                assert_true(a.window_s == 30);
            assert_true(a.have_remaining);
            assert_int_equal(a.remaining, i < 3 ? 2 - i : 0);
            /* until full (10 s per token missing) or, with none left, until the next token;
             * the epoch form's rounding adds up to a second */
            double most = (a.remaining > 0 ? 10.0 * (3 - (double)a.remaining) : 10.0) + 1;
            if (!(a.have_reset && a.reset_s >= 1 && a.reset_s <= most))
                fail_msg("case %zu request %d: reset %g, want 1..%g:\n%s", c, i, a.reset_s, most,
                         resp.head);
        }
        double hold;
        assert_true(rl_hold_s(&a, &hold));
        client_close(cl);
    }
    /* The X-RateLimit-Reset of the epoch form is an epoch instant, of the other one seconds. */
    client *cl = client_open(r);
    assert_int_equal(get_status(cl, "/epoch", &resp), 429);
    assert_true(header_value(&resp, "X-RateLimit-Reset", v, sizeof v));
    assert_true(strtoll(v, NULL, 10) > 1000000000LL);
    assert_int_equal(get_status(cl, "/x", &resp), 429);
    assert_true(header_value(&resp, "X-RateLimit-Reset", v, sizeof v));
    assert_true(strtoll(v, NULL, 10) <= 11);

    /* Announced on a rule's answers too, beside the rule's own headers; not on other paths. */
    receiver_throttle fw = {.path_prefix = "/fw",
                            .kind = RECV_FIXED_WINDOW,
                            .limit = 5,
                            .window_ms = 3600000,
                            .announce = RECV_ANNOUNCE_IETF_EARLY};
    assert_int_equal(receiver_throttle_on(r, &fw), 0);
    receiver_on(r, &(receiver_rule){.path_prefix = "/fw",
                                    .action = RECV_RESPOND,
                                    .status = 202,
                                    .headers = "X-Extra: yes"});
    assert_int_equal(get_status(cl, "/fw/1", &resp), 202);
    assert_true(header_value(&resp, "X-Extra", v, sizeof v));
    assert_string_equal(v, "yes");
    assert_int_equal(announced(&resp, &a), RL_OK);
    assert_true(a.limit == 5 && a.window_s == 3600 && a.remaining == 4);
    assert_true(a.reset_s >= 1 && a.reset_s <= 3600);
    assert_int_equal(get_status(cl, "/plain", &resp), 200);
    assert_false(header_value(&resp, "RateLimit-Limit", v, sizeof v));
    assert_int_equal(announced(&resp, &a), RL_NONE);

    /* Sliding windows in the IETF form: every window a policy; the parser takes the tightest
     * rate (2 per 60 s) as the limit and the exhausted state. */
    receiver_throttle sw = {.path_prefix = "/swa",
                            .kind = RECV_SLIDING_WINDOW,
                            .sliding_limit = {3, 2},
                            .sliding_window_ms = {1000, 60000},
                            .announce = RECV_ANNOUNCE_IETF};
    assert_int_equal(receiver_throttle_on(r, &sw), 0);
    assert_int_equal(get_status(cl, "/swa", &resp), 200);
    assert_true(header_value(&resp, "RateLimit-Policy", v, sizeof v));
    assert_string_equal(v, "\"w0\";q=3;w=1, \"w1\";q=2;w=60");
    assert_int_equal(announced(&resp, &a), RL_OK);
    assert_true(a.limit == 2 && a.window_s == 60 && a.remaining == 1 && a.n_windows == 2);
    assert_int_equal(get_status(cl, "/swa", &resp), 200);
    assert_int_equal(get_status(cl, "/swa", &resp), 429);
    assert_int_equal(announced(&resp, &a), RL_OK);
    assert_int_equal(a.remaining, 0);
    assert_true(a.reset_s >= 1 && a.reset_s <= 60);
    client_close(cl);
}

/* A throttle on every path (a receiver host's own limit) answers 429s that can be counted per
 * path prefix: which endpoint (or customer) was refused how often. */
static void host_throttle_counts_per_prefix(void **state)
{
    receiver *r = *state;
    receiver_throttle host = {.kind = RECV_FIXED_WINDOW, .limit = 3, .window_ms = 3600000};
    assert_int_equal(receiver_throttle_on(r, &host), 0);
    client *cl = client_open(r);
    response resp;
    int st[8];
    assert_int_equal(burst(cl, "/c/a/1", 2, st, &resp), 2);
    assert_int_equal(burst(cl, "/c/b/1", 4, st, &resp), 1);
    assert_int_equal(burst(cl, "/c/a/2", 2, st, &resp), 0);
    assert_int_equal(receiver_count_status(r, "/c/a", 429), 2);
    assert_int_equal(receiver_count_status(r, "/c/b", 429), 3);
    assert_int_equal(receiver_count_status(r, "/c/a", 200), 2);
    assert_int_equal(receiver_count_status(r, "/c/b", 200), 1);
    assert_int_equal(receiver_count_status(r, NULL, 429), 5);
    client_close(cl);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    atexit(curl_global_cleanup);
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(post_with_webhook_headers_is_recorded),
        T(body_with_nul_and_binary_is_kept),
        T(keep_alive_serves_two_requests_on_one_connection),
        T(connection_close_and_http10_end_the_connection),
        T(rules_match_by_prefix_last_wins_and_expire),
        T(delay_is_honoured),
        T(hang_never_answers),
        T(reset_sends_rst),
        T(garbage_is_not_http),
        T(close_sends_fin_without_answer),
        T(trickle_huge_then_still_serving),
        T(chunked_request_body),
        T(expect_100_continue),
        T(malformed_requests_get_400_and_close),
        T(huge_headers_get_431_and_close),
        T(client_disconnects_mid_request),
        T(wait_returns_on_count_or_timeout),
        T(stop_with_open_connections_is_clean),
        T(two_receivers_and_fixed_port),
        T(throttle_token_bucket_burst_then_refill),
        T(throttle_fixed_window_counts_per_window_and_resets),
        T(throttle_retry_after_modes),
        T(throttle_status_503_and_bad_parameters),
        T(throttle_before_rules_and_status_recorded),
        T(answered_us_is_when_the_answer_was_sent),
        T(max_concurrent_sweeps_the_open_intervals),
        T(rule_every_takes_each_nth_and_the_rest_fall_through),
        T(throttle_sliding_windows_enforced_together),
        T(throttle_announces_its_state),
        T(host_throttle_counts_per_prefix),
        cmocka_unit_test_setup_teardown(cli_rule_bad_specs_exit_2_naming_the_bad_part, setup,
                                        teardown_child),
        cmocka_unit_test_setup_teardown(cli_rule_answers_as_configured, setup, teardown_child),
        cmocka_unit_test_setup_teardown(cli_throttle_sliding_and_announce, setup, teardown_child),
#undef T
    };
    return TL_RUN(tests, NULL, NULL);
}
