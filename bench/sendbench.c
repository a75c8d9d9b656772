/* sendbench.c - CPU per webhook delivery of the HTTP sender alone (src/http_sender.c).
 *
 *   sendbench URL [--requests N] [--concurrency K] [--warmup W] [--body-bytes B]
 *             [--secrets S] [--max-host-connections M] [--allow LIST]
 *
 * Pushes N requests (after W unmeasured warm-up requests that open the connections) through one
 * http_sender on one libuv loop, keeping K in flight: each completion sends the next, as the
 * dispatcher does. The receiver is another process (pgpace-receiver, stdout to /dev/null) so
 * that this process's getrusage() is the sender's cost alone: libcurl, the uv glue, signing and
 * the kernel's share of the sockets. Each request is signed with S secrets and carries a JSON
 * body of B bytes, to URL plus "/b/<i % 100>" (one host, like one busy customer). The SSRF
 * allow-list is LIST (netcheck syntax), 127.0.0.0/8 by default.
 *
 * Prints one line:
 *   requests <n> concurrency <k> seconds <s> req_per_s <r> cpu_us_per_req <c> user_us <u>
 *   sys_us <y> failed <f>
 * Every request must succeed with 200 (failed counts those that did not; a non-zero count
 * makes the exit status 1: the figures would not be a delivery's cost).
 *
 * Built by meson (bench/meson.build) with the project's flags; use a release build:
 *   meson setup build-rel -Dbuildtype=release && ninja -C build-rel
 *   build-rel/pgpace-receiver --port 18080 >/dev/null &
 *   build-rel/bench/sendbench http://127.0.0.1:18080 --requests 200000 --concurrency 100
 */
#include "http_sender.h"
#include "netcheck.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <uv.h>

#define SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

typedef struct bench {
    uv_loop_t loop;
    http_sender *s;
    const char *base_url;
    char *body;
    size_t body_len;
    const char *secrets[8];
    size_t n_secrets;
    size_t total;  /* warm-up + measured */
    size_t warmup; /* completions before the measurement starts */
    size_t sent;
    size_t done;
    size_t failed;
    struct rusage ru0;
    double t0;
    bool measuring;
} bench;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double tv_us(struct timeval tv)
{
    return (double)tv.tv_sec * 1e6 + (double)tv.tv_usec;
}

static void send_next(bench *b);

static void done_cb(const http_result *r, void *arg)
{
    bench *b = arg;
    b->done++;
    if (r->error_class || r->status != 200) {
        if (b->failed++ < 5)
            fprintf(stderr, "sendbench: request failed: status %ld %s %s\n", r->status,
                    r->error_class ? r->error_class : "", r->error);
    }
    if (b->done == b->warmup) {
        getrusage(RUSAGE_SELF, &b->ru0);
        b->t0 = mono_s();
        b->measuring = true;
    }
    if (b->sent < b->total)
        send_next(b);
}

static void send_next(bench *b)
{
    char url[512];
    char id[64];
    snprintf(url, sizeof url, "%s/b/%zu", b->base_url, b->sent % 100);
    snprintf(id, sizeof id, "msg_bench%zu", b->sent);
    http_request req = {
        .url = url,
        .body = b->body,
        .body_len = b->body_len,
        .webhook_id = id,
        .timestamp_s = 1700000000 + (int64_t)b->sent,
        .secrets = b->secrets,
        .n_secrets = b->n_secrets,
        .connect_timeout_ms = 5000,
        .total_timeout_ms = 30000,
    };
    b->sent++;
    int rc = http_send(b->s, &req, done_cb, b);
    if (rc != 0) {
        fprintf(stderr, "sendbench: http_send: %s\n", strerror(-rc));
        exit(1);
    }
}

static void closed_cb(void *arg)
{
    (void)arg;
}

static long arg_long(const char *v, const char *name)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0) {
        fprintf(stderr, "sendbench: bad %s: %s\n", name, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: sendbench URL [--requests N] [--concurrency K] [--warmup W]\n"
                        "       [--body-bytes B] [--secrets S] [--max-host-connections M]\n"
                        "       [--allow LIST]\n");
        return 2;
    }
    bench b = {.base_url = argv[1]};
    long n = 100000, k = 100, warm = -1, body_bytes = 256, secrets = 1, max_host = -1;
    const char *allow_list = "127.0.0.0/8";
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (strcmp(o, "--requests") == 0)
            n = arg_long(v, o);
        else if (strcmp(o, "--concurrency") == 0)
            k = arg_long(v, o);
        else if (strcmp(o, "--warmup") == 0)
            warm = arg_long(v, o);
        else if (strcmp(o, "--body-bytes") == 0)
            body_bytes = arg_long(v, o);
        else if (strcmp(o, "--secrets") == 0)
            secrets = arg_long(v, o);
        else if (strcmp(o, "--max-host-connections") == 0)
            max_host = arg_long(v, o);
        else if (strcmp(o, "--allow") == 0)
            allow_list = v;
        else {
            fprintf(stderr, "sendbench: unknown option %s\n", o);
            return 2;
        }
    }
    if (k < 1 || n < 1 || secrets < 1 || secrets > 8) {
        fprintf(stderr, "sendbench: need requests >= 1, concurrency >= 1, secrets 1..8\n");
        return 2;
    }
    if (warm < 0)
        warm = 5 * k;
    if (max_host < 0)
        max_host = k;

    /* A JSON body of about body_bytes: {"pad":"xxx..."}. */
    b.body_len = (size_t)(body_bytes < 12 ? 12 : body_bytes);
    b.body = malloc(b.body_len + 1);
    if (!b.body)
        return 1;
    memset(b.body, 'x', b.body_len);
    memcpy(b.body, "{\"pad\":\"", 8);
    memcpy(b.body + b.body_len - 2, "\"}", 2);
    b.body[b.body_len] = '\0';
    for (long i = 0; i < secrets; i++)
        b.secrets[i] = SECRET;
    b.n_secrets = (size_t)secrets;
    b.warmup = (size_t)warm;
    b.total = (size_t)(warm + n);

    if (uv_loop_init(&b.loop) != 0)
        return 1;
    netcheck_allow allow;
    pgp_error err = {{0}};
    if (netcheck_parse_allow(allow_list, &allow, &err) != 0) {
        fprintf(stderr, "sendbench: allow-list: %s\n", err.msg);
        return 1;
    }
    http_sender_options o = {
        .max_connections = max_host,
        .max_host_connections = max_host,
        .max_response_bytes = 64 * 1024,
        .excerpt_bytes = 1024,
        .allow = &allow,
    };
    int rc = http_sender_new(&b.loop, &o, &b.s);
    if (rc != 0) {
        fprintf(stderr, "sendbench: http_sender_new: %s\n", strerror(-rc));
        return 1;
    }
    if (b.warmup == 0) {
        getrusage(RUSAGE_SELF, &b.ru0);
        b.t0 = mono_s();
        b.measuring = true;
    }
    for (long i = 0; i < k && b.sent < b.total; i++)
        send_next(&b);
    while (b.done < b.total)
        uv_run(&b.loop, UV_RUN_ONCE);

    struct rusage ru1;
    getrusage(RUSAGE_SELF, &ru1);
    double secs = mono_s() - b.t0;
    double user = tv_us(ru1.ru_utime) - tv_us(b.ru0.ru_utime);
    double sys = tv_us(ru1.ru_stime) - tv_us(b.ru0.ru_stime);
    printf("requests %ld concurrency %ld seconds %.3f req_per_s %.0f cpu_us_per_req %.2f "
           "user_us %.0f sys_us %.0f failed %zu\n",
           n, k, secs, (double)n / secs, (user + sys) / (double)n, user, sys, b.failed);

    http_sender_close(b.s, closed_cb, NULL);
    uv_run(&b.loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&b.loop) != 0)
        fprintf(stderr, "sendbench: loop still has handles\n");
    free(b.body);
    return b.failed ? 1 : 0;
}
