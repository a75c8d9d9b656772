/* test_http_sender.c - webhook delivery over libcurl multi + libuv against the loopback
 * receiver: headers and signatures, failure classes, SSRF refusals, keep-alive, concurrency and
 * closing with requests in flight; through an HTTP CONNECT proxy (tests/lib/connect_proxy.c):
 * the destination checked and pinned, pooled handles reset, proxy failures, close while a
 * destination is being resolved. Every test runs its loop under a deadline timer, no sleeps.
 */
#include "testlib.h"

#include "connect_proxy.h"
#include "http_sender.h"
#include "netcheck.h"
#include "pgpace_version.h"
#include "receiver.h"
#include "tcpproxy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#define SECRET_A "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define SECRET_B "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24tdGVzdHM="
#define BODY     "{\"event\":\"order.paid\",\"order\":42,\"note\":\"caf\xc3\xa9\"}"
#define MSG_ID   "msg_2b9Xq7TestId"
#define TS       1700000000

typedef struct fixture {
    uv_loop_t loop;
    uv_timer_t deadline; /* bounds every wait; fires = test failure */
    uv_timer_t probe;    /* polls the receiver from the loop where a test needs that */
    bool timed_out;
    bool in_send;   /* true while the test is inside http_send() */
    bool reentered; /* a done callback ran inside http_send() */
    receiver *rcv;
    http_sender *s;
    bool sender_closed;
    size_t done;        /* callbacks seen */
    size_t probe_ready; /* set by the probe */
    const char *probe_prefix;
    size_t probe_want;
} fixture;

/* What one done callback saw, copied out (the result is valid only during the callback). */
typedef struct outcome {
    fixture *fx;
    int calls;
    long status;
    bool ok; /* error_class == NULL */
    char error_class[32];
    char error[512];
    char excerpt[256];
    size_t excerpt_len;
    bool has_retry_after;
    char retry_after[64];
    double duration_ms;
    int send_from_cb_rc; /* close test: what http_send returned from inside an aborted cb */
    bool has_ratelimit;  /* http_result.ratelimit != NULL; its fields ("" when NULL): */
    char rl_policy[600], rl_ratelimit[600], rl_x_limit[80], rl_x_remaining[80], rl_reset[80];
    bool rl_other; /* a field this test never sends came through */
    bool rl_truncated;
    rl_status rl_parsed; /* rl_parse of them at a fixed clock */
    rl_announce rl;
} outcome;

/* ---- loop helpers ---- */

static void deadline_cb(uv_timer_t *t)
{
    fixture *fx = t->data;
    fx->timed_out = true;
    uv_stop(&fx->loop);
}

/* Runs the loop until *count reaches want; callbacks that change a count call uv_stop(). */
static void run_until(fixture *fx, const size_t *count, size_t want, uint64_t ms)
{
    fx->timed_out = false;
    uv_timer_start(&fx->deadline, deadline_cb, ms, 0);
    while (*count < want && !fx->timed_out)
        uv_run(&fx->loop, UV_RUN_ONCE);
    uv_timer_stop(&fx->deadline);
    if (fx->timed_out)
        fail_msg("deadline of %llu ms passed with %zu of %zu done", (unsigned long long)ms, *count,
                 want);
}

static void probe_cb(uv_timer_t *t)
{
    fixture *fx = t->data;
    if (receiver_count(fx->rcv, fx->probe_prefix) >= fx->probe_want) {
        fx->probe_ready = 1;
        uv_timer_stop(t);
        uv_stop(&fx->loop);
    }
}

static void closed_cb(void *arg)
{
    fixture *fx = arg;
    fx->sender_closed = true;
    uv_stop(&fx->loop);
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    assert_int_equal(uv_timer_init(&fx->loop, &fx->deadline), 0);
    assert_int_equal(uv_timer_init(&fx->loop, &fx->probe), 0);
    fx->deadline.data = fx;
    fx->probe.data = fx;
    fx->rcv = receiver_start();
    assert_non_null(fx->rcv);
    *state = fx;
    return 0;
}

static void close_sender(fixture *fx)
{
    if (!fx->s)
        return;
    http_sender_close(fx->s, closed_cb, fx);
    fx->s = NULL;
    fx->timed_out = false;
    uv_timer_start(&fx->deadline, deadline_cb, 5000, 0);
    while (!fx->sender_closed && !fx->timed_out)
        uv_run(&fx->loop, UV_RUN_ONCE);
    uv_timer_stop(&fx->deadline);
    assert_true(fx->sender_closed);
}

static int teardown(void **state)
{
    fixture *fx = *state;
    close_sender(fx);
    uv_close((uv_handle_t *)&fx->deadline, NULL);
    uv_close((uv_handle_t *)&fx->probe, NULL);
    for (int i = 0; i < 10 && uv_run(&fx->loop, UV_RUN_NOWAIT) != 0; i++)
        ;
    int rc = uv_loop_close(&fx->loop);
    if (rc != 0)
        uv_print_all_handles(&fx->loop, stderr);
    receiver_stop(fx->rcv);
    free(fx);
    assert_int_equal(rc, 0);
    return 0;
}

/* ---- sender helpers ---- */

static void new_sender(fixture *fx, const char *allow_list, size_t max_response, size_t excerpt,
                       long max_conns, long max_host)
{
    netcheck_allow allow;
    pgp_error err = {{0}};
    if (netcheck_parse_allow(allow_list, &allow, &err) != 0)
        fail_msg("allow-list: %s", err.msg);
    http_sender_options o = {
        .max_connections = max_conns,
        .max_host_connections = max_host,
        .max_response_bytes = max_response,
        .excerpt_bytes = excerpt,
        .allow = &allow,
    };
    /* The sender copies the allow-list: `allow` goes out of scope right after. */
    assert_int_equal(http_sender_new(&fx->loop, &o, &fx->s), 0);
}

static void done_cb(const http_result *r, void *arg)
{
    outcome *o = arg;
    if (o->fx->in_send)
        o->fx->reentered = true;
    o->calls++;
    o->status = r->status;
    o->ok = r->error_class == NULL;
    snprintf(o->error_class, sizeof o->error_class, "%s", r->error_class ? r->error_class : "");
    snprintf(o->error, sizeof o->error, "%s", r->error ? r->error : "(null)");
    o->excerpt_len = r->excerpt_len;
    size_t n = r->excerpt_len < sizeof o->excerpt - 1 ? r->excerpt_len : sizeof o->excerpt - 1;
    memcpy(o->excerpt, r->excerpt, n);
    o->excerpt[n] = '\0';
    o->has_retry_after = r->retry_after != NULL;
    snprintf(o->retry_after, sizeof o->retry_after, "%s", r->retry_after ? r->retry_after : "");
    const rl_raw *rl = r->ratelimit;
    o->has_ratelimit = rl != NULL;
    if (rl) {
#define RLCOPY(dst, f) snprintf(o->dst, sizeof o->dst, "%s", rl->f ? rl->f : "")
        RLCOPY(rl_policy, policy);
        RLCOPY(rl_ratelimit, ratelimit);
        RLCOPY(rl_x_limit, x_limit);
        RLCOPY(rl_x_remaining, x_remaining);
        RLCOPY(rl_reset, reset);
#undef RLCOPY
        o->rl_other = rl->limit || rl->remaining || rl->x_reset || rl->x_reset_after;
        o->rl_truncated = rl->truncated;
        o->rl_parsed = rl_parse(rl, 1748785031.0, 3600, &o->rl, NULL);
    }
    o->duration_ms = r->duration_ms;
    o->fx->done++;
    /* UV_RUN_ONCE runs timers before it blocks in poll: without this, a completion delivered
     * from curl's timer would leave run_until() waiting for the next unrelated event. */
    uv_stop(&o->fx->loop);
}

static const char *const one_secret[] = {SECRET_A};

static http_request base_request(const char *url)
{
    return (http_request){
        .url = url,
        .body = BODY,
        .body_len = strlen(BODY),
        .webhook_id = MSG_ID,
        .timestamp_s = TS,
        .secrets = one_secret,
        .n_secrets = 1,
        .connect_timeout_ms = 2000,
        .total_timeout_ms = 5000,
    };
}

static void send_req(fixture *fx, const http_request *req, outcome *o)
{
    o->fx = fx;
    fx->in_send = true;
    int rc = http_send(fx->s, req, done_cb, o);
    fx->in_send = false;
    assert_int_equal(rc, 0);
}

/* Sends one request to the receiver path and runs the loop until its callback ran. */
static void send_and_wait(fixture *fx, const char *url, const http_request *tmpl, outcome *o,
                          uint64_t deadline_ms)
{
    http_request req = tmpl ? *tmpl : base_request(url);
    req.url = url;
    size_t before = fx->done;
    send_req(fx, &req, o);
    run_until(fx, &fx->done, before + 1, deadline_ms);
    assert_int_equal(o->calls, 1);
    assert_false(fx->reentered);
}

static void url_for(fixture *fx, const char *path, char *buf, size_t len)
{
    receiver_url(fx->rcv, path, buf, len);
}

/* ---- an independent Standard Webhooks verifier (OpenSSL HMAC, not secret.c) ---- */

static bool verify_one(const char *secret, const char *id, const char *ts, const char *body,
                       size_t body_len, const char *sig)
{
    if (strncmp(secret, "whsec_", 6) != 0 || strncmp(sig, "v1,", 3) != 0)
        return false;
    const char *b64 = secret + 6;
    size_t blen = strlen(b64);
    unsigned char key[128];
    if (blen == 0 || blen % 4 != 0 || blen / 4 * 3 > sizeof key)
        return false;
    int klen = EVP_DecodeBlock(key, (const unsigned char *)b64, (int)blen);
    if (klen < 0)
        return false;
    klen -= (b64[blen - 1] == '=') + (b64[blen - 2] == '=');

    size_t mlen = strlen(id) + 1 + strlen(ts) + 1 + body_len;
    unsigned char *msg = malloc(mlen);
    assert_non_null(msg);
    int off = sprintf((char *)msg, "%s.%s.", id, ts);
    memcpy(msg + off, body, body_len);

    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    unsigned char *res = HMAC(EVP_sha256(), key, klen, msg, mlen, mac, &maclen);
    free(msg);
    if (!res)
        return false;
    char expect[EVP_MAX_MD_SIZE * 2];
    EVP_EncodeBlock((unsigned char *)expect, mac, (int)maclen);
    return strcmp(sig + 3, expect) == 0;
}

static void verifier_matches_spec_vector(void **state)
{
    /* Standard Webhooks' published example: proves the verifier before we trust it. */
    const char *body = "{\"test\": 2432232314}";
    assert_true(verify_one(SECRET_A, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body,
                           strlen(body), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
    assert_false(verify_one(SECRET_A, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265331", body,
                            strlen(body), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
}

/* ---- delivery ---- */

static void delivers_with_standard_webhooks_headers(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    url_for(fx, "/ok/headers", url, sizeof url);
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);

    assert_true(o.ok);
    assert_int_equal(o.status, 200);
    assert_string_equal(o.error, "");
    assert_string_equal(o.excerpt, "ok");
    assert_false(o.has_retry_after);
    assert_true(o.duration_ms > 0 && o.duration_ms < 5000);
    assert_int_equal(http_sender_in_flight(fx->s), 0);

    assert_int_equal(receiver_count(fx->rcv, "/ok"), 1);
    receiver_request rq;
    assert_int_equal(receiver_get(fx->rcv, 0, &rq), 0);
    assert_string_equal(rq.path, "/ok/headers");
    assert_string_equal(rq.webhook_id, MSG_ID);
    assert_string_equal(rq.webhook_timestamp, "1700000000");
    assert_string_equal(rq.content_type, "application/json");
    assert_string_equal(rq.user_agent, "pgpace/" PGPACE_VERSION);
    assert_int_equal(rq.body_len, strlen(BODY));
    assert_memory_equal(rq.body, BODY, strlen(BODY));
    /* Exactly one signature for one secret, and it verifies. */
    assert_null(strchr(rq.webhook_signature, ' '));
    assert_true(verify_one(SECRET_A, rq.webhook_id, rq.webhook_timestamp, rq.body, rq.body_len,
                           rq.webhook_signature));
    free(rq.body);
}

/* A customer's extra headers ride after the request's own, need no copy per request, outlive
 * the owner's release while a request holds them (ASan checks), and leave no trace in the
 * pooled request object that carries the next request. Lines that could inject are refused. */
#define TRACEPARENT "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void extra_headers_are_borrowed_by_requests(void **state)
{
    fixture *fx = *state;
    http_headers *bad = NULL;
    assert_int_equal(http_headers_new("X-A: v\r", &bad), -EINVAL);
    assert_int_equal(http_headers_new("X-A: v\nno colon", &bad), -EINVAL);
    assert_int_equal(http_headers_new(": v", &bad), -EINVAL);
    assert_int_equal(http_headers_new("X-A: \x01", &bad), -EINVAL);
    /* What only a direct UPDATE gets past the table's CHECK: framing and reserved names, an
     * Authorization that is not the last line (run_customers.sql puts it last). */
    assert_int_equal(http_headers_new("Content-Length: 0", &bad), -EINVAL);
    assert_int_equal(http_headers_new("X-A: v\nHost: evil", &bad), -EINVAL);
    assert_int_equal(http_headers_new("webhook-id: x", &bad), -EINVAL);
    assert_int_equal(http_headers_new("X A: v", &bad), -EINVAL);
    assert_int_equal(http_headers_new("Authorization: Bearer t\nX-A: v", &bad), -EINVAL);
    assert_int_equal(http_headers_new("X-A: v\nAuthorization:", &bad), -EINVAL);
    assert_null(bad);
    assert_int_equal(http_headers_new("", &bad), 0);
    assert_null(bad);

    new_sender(fx, "127.0.0.0/8", 4096, 256, 1, 1);
    char url[256];
    url_for(fx, "/ok/extra", url, sizeof url);
    http_headers *h = NULL;
    assert_int_equal(http_headers_new("X-Api-Key: k1\nAuthorization: Bearer t0k", &h), 0);
    http_request req = base_request(url);
    req.headers = h;
    outcome o1 = {0}, o2 = {0}, o3 = {0};
    send_req(fx, &req, &o1);
    send_req(fx, &req, &o2);
    /* The owner lets go while both requests are in flight (a customer reload). */
    http_headers_release(h);
    run_until(fx, &fx->done, 2, 5000);
    assert_true(o1.ok && o2.ok);
    req.headers = NULL;
    send_req(fx, &req, &o3);
    run_until(fx, &fx->done, 3, 5000);
    assert_true(o3.ok);
    assert_int_equal(receiver_count(fx->rcv, "/ok/extra"), 3);
    char v[64];
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(receiver_header(fx->rcv, i, "x-api-key", v, sizeof v), 1);
        assert_string_equal(v, "k1");
        assert_int_equal(receiver_header(fx->rcv, i, "authorization", v, sizeof v), 1);
        assert_string_equal(v, "Bearer t0k");
        assert_int_equal(receiver_header(fx->rcv, i, "webhook-id", v, sizeof v), 1);
    }
    assert_int_equal(receiver_header(fx->rcv, 2, "x-api-key", NULL, 0), 0);
    assert_int_equal(receiver_header(fx->rcv, 2, "authorization", NULL, 0), 0);

    /* The one pooled request object carries every mix of trace headers and extra headers: the
     * extras follow whichever line came last, each header comes once or not at all. */
    static const struct {
        const char *tp, *ts;
        bool extra;
    } mix[] = {
        {TRACEPARENT, NULL, true},   {TRACEPARENT, "a=b", true}, {NULL, NULL, true},
        {TRACEPARENT, "a=b", false}, {TRACEPARENT, NULL, false}, {TRACEPARENT, NULL, true},
    };
    assert_int_equal(http_headers_new("X-Api-Key: k2\nAuthorization: Basic eDp5", &h), 0);
    for (size_t i = 0; i < PGP_ARRAY_LEN(mix); i++) {
        req.traceparent = mix[i].tp;
        req.tracestate = mix[i].ts;
        req.headers = mix[i].extra ? h : NULL;
        outcome o = {0};
        send_req(fx, &req, &o);
        run_until(fx, &fx->done, 4 + i, 5000);
        assert_true(o.ok);
        size_t at = 3 + i;
        assert_int_equal(receiver_header(fx->rcv, at, "traceparent", NULL, 0), mix[i].tp ? 1 : 0);
        assert_int_equal(receiver_header(fx->rcv, at, "tracestate", NULL, 0), mix[i].ts ? 1 : 0);
        assert_int_equal(receiver_header(fx->rcv, at, "x-api-key", v, sizeof v),
                         mix[i].extra ? 1 : 0);
        assert_int_equal(receiver_header(fx->rcv, at, "authorization", v, sizeof v),
                         mix[i].extra ? 1 : 0);
        if (mix[i].extra)
            assert_string_equal(v, "Basic eDp5");
        assert_int_equal(receiver_header(fx->rcv, at, "webhook-signature", NULL, 0), 1);
        assert_int_equal(receiver_header(fx->rcv, at, "content-type", NULL, 0), 1);
    }
    http_headers_release(h);
}

static void two_secrets_give_two_verifiable_signatures(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    url_for(fx, "/ok/rotation", url, sizeof url);
    const char *const secrets[] = {SECRET_B, SECRET_A}; /* newest first */
    http_request req = base_request(url);
    req.secrets = secrets;
    req.n_secrets = 2;
    outcome o = {0};
    send_and_wait(fx, url, &req, &o, 5000);
    assert_int_equal(o.status, 200);

    receiver_request rq;
    assert_int_equal(receiver_get(fx->rcv, 0, &rq), 0);
    char sigs[512];
    snprintf(sigs, sizeof sigs, "%s", rq.webhook_signature);
    char *sp = strchr(sigs, ' ');
    assert_non_null(sp);
    *sp = '\0';
    const char *first = sigs, *second = sp + 1;
    assert_null(strchr(second, ' '));
    const char *id = rq.webhook_id, *ts = rq.webhook_timestamp;
    assert_true(verify_one(SECRET_B, id, ts, rq.body, rq.body_len, first));
    assert_true(verify_one(SECRET_A, id, ts, rq.body, rq.body_len, second));
    assert_false(verify_one(SECRET_A, id, ts, rq.body, rq.body_len, first));
    assert_false(verify_one(SECRET_B, id, ts, rq.body, rq.body_len, second));
    /* A tampered body fails verification. */
    assert_false(verify_one(SECRET_B, id, ts, "{}", 2, first));
    free(rq.body);
}

static void status_503_records_retry_after(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/busy",
                                          .action = RECV_RESPOND,
                                          .status = 503,
                                          .body = "slow down",
                                          .retry_after = "120"});
    char url[256];
    url_for(fx, "/busy", url, sizeof url);
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    assert_true(o.ok); /* a received response is not a transport error */
    assert_int_equal(o.status, 503);
    assert_true(o.has_retry_after);
    assert_string_equal(o.retry_after, "120");
    assert_string_equal(o.excerpt, "slow down");
}

/* RateLimit / X-RateLimit-* answer headers reach the callback: names in any case, a repeated
 * field joined with ", ", the ones not sent NULL, nothing left over on the pooled handle for
 * the next answer, an over-long value flagged rather than cut into another number. */
static void ratelimit_headers_are_captured(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/limited",
                                          .action = RECV_RESPOND,
                                          .status = 429,
                                          .retry_after = "2",
                                          .headers = "RateLimit-Policy: \"burst\";q=10;w=1\n"
                                                     "ratelimit: \"burst\";r=0;t=2\n"
                                                     "X-RATELIMIT-LIMIT: 10\n"
                                                     "x-ratelimit-remaining: 0\n"
                                                     "X-RateLimit-Remaining:  0 \n"
                                                     "RateLimit-Reset: 2\n"
                                                     "X-RateLimit-Used: 10"});
    char long_policy[700];
    memset(long_policy, 'a', sizeof long_policy);
    memcpy(long_policy, "RateLimit-Policy: ", 18);
    long_policy[sizeof long_policy - 1] = '\0';
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/long",
                                          .action = RECV_RESPOND,
                                          .status = 200,
                                          .headers = long_policy});
    char url[256];
    url_for(fx, "/limited", url, sizeof url);
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    assert_int_equal(o.status, 429);
    assert_true(o.has_ratelimit);
    assert_string_equal(o.rl_policy, "\"burst\";q=10;w=1");
    assert_string_equal(o.rl_ratelimit, "\"burst\";r=0;t=2");
    assert_string_equal(o.rl_x_limit, "10");
    assert_string_equal(o.rl_x_remaining, "0, 0");
    assert_string_equal(o.rl_reset, "2");
    assert_false(o.rl_other);
    assert_false(o.rl_truncated);
    assert_int_equal(o.rl_parsed, RL_OK);
    assert_true(o.rl.limit == 10 && o.rl.window_s == 1 && o.rl.remaining == 0 && o.rl.reset_s == 2);
    assert_string_equal(o.retry_after, "2"); /* still captured beside them */

    /* The next answer on the same connection and pooled handle has none. */
    url_for(fx, "/plain", url, sizeof url);
    outcome plain = {0};
    send_and_wait(fx, url, NULL, &plain, 5000);
    assert_int_equal(plain.status, 200);
    assert_false(plain.has_ratelimit);

    url_for(fx, "/long", url, sizeof url);
    outcome lo = {0};
    send_and_wait(fx, url, NULL, &lo, 5000);
    assert_int_equal(lo.status, 200);
    assert_true(lo.has_ratelimit);
    assert_true(lo.rl_truncated);
    assert_int_equal(lo.rl_parsed, RL_IGNORED);
}

static void excerpt_is_capped(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 4, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/long",
                                          .action = RECV_RESPOND,
                                          .status = 400,
                                          .body = "invalid payload: field x"});
    char url[256];
    url_for(fx, "/long", url, sizeof url);
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    assert_true(o.ok);
    assert_int_equal(o.status, 400);
    assert_int_equal(o.excerpt_len, 4);
    assert_string_equal(o.excerpt, "inva");
}

/* ---- failure classes ---- */

static void hang_times_out_within_total_timeout(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/hang", .action = RECV_HANG});
    char url[256];
    url_for(fx, "/hang", url, sizeof url);
    http_request req = base_request(url);
    req.total_timeout_ms = 600;
    outcome o = {0};
    send_and_wait(fx, url, &req, &o, 5000);
    assert_string_equal(o.error_class, "timeout");
    assert_int_equal(o.status, 0);
    assert_true(o.duration_ms >= 590);
    assert_true(o.duration_ms < 2000);
    assert_int_equal(receiver_count(fx->rcv, "/hang"), 1);
}

static void reset_is_reset(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/rst", .action = RECV_RESET});
    char url[256];
    url_for(fx, "/rst", url, sizeof url);
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    assert_string_equal(o.error_class, "reset");
    assert_int_equal(o.status, 0);
    assert_true(o.error[0] != '\0');
}

static void close_without_answer_is_reset(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/fin", .action = RECV_CLOSE});
    char url[256];
    url_for(fx, "/fin", url, sizeof url);
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    assert_string_equal(o.error_class, "reset");
}

static void garbage_is_protocol(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/junk", .action = RECV_GARBAGE});
    char url[256];
    url_for(fx, "/junk", url, sizeof url);
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    assert_string_equal(o.error_class, "protocol");
}

static void huge_body_stops_early_with_status(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 64 * 1024, 100, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/huge", .action = RECV_TRICKLE_HUGE});
    char url[256];
    url_for(fx, "/huge", url, sizeof url);
    http_request req = base_request(url);
    req.total_timeout_ms = 20000;
    outcome o = {0};
    send_and_wait(fx, url, &req, &o, 15000);
    /* 64 KiB at 1 KiB / 10 ms is ~0.65 s: far below the 20 s timeout. */
    if (!o.ok)
        fail_msg("expected success, got %s: %s", o.error_class, o.error);
    assert_int_equal(o.status, 200);
    assert_true(o.excerpt_len <= 100);
    assert_true(o.excerpt_len > 0);
    assert_true(o.duration_ms < 10000);
}

static void connection_refused_is_connect(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    outcome o = {0};
    send_and_wait(fx, "http://127.0.0.1:1/", NULL, &o, 5000);
    assert_string_equal(o.error_class, "connect");
    assert_int_equal(o.status, 0);
}

static void dns_failure_is_dns(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "", 4096, 256, 8, 4);
    outcome o = {0};
    send_and_wait(fx, "http://pgpace-test.invalid/hook", NULL, &o, 10000);
    assert_string_equal(o.error_class, "dns");
}

static void tls_to_plain_http_is_tls(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/tls", receiver_port(fx->rcv));
    /* Loading the CA bundle is slow under valgrind and counts against the connect timeout. */
    http_request req = base_request(url);
    req.connect_timeout_ms = 20000;
    req.total_timeout_ms = 20000;
    outcome o = {0};
    send_and_wait(fx, url, &req, &o, 25000);
    assert_string_equal(o.error_class, "tls");
}

static void non_http_schemes_are_refused(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "0.0.0.0/0, ::/0", 4096, 256, 8, 4);
    const char *urls[] = {"file:///etc/passwd", "ftp://127.0.0.1:1/x", "gopher://127.0.0.1:1/x",
                          "dict://127.0.0.1:1/x"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(urls); i++) {
        outcome o = {0};
        send_and_wait(fx, urls[i], NULL, &o, 5000);
        if (strcmp(o.error_class, "protocol") != 0)
            fail_msg("%s: class %s (%s)", urls[i], o.error_class, o.error);
        assert_string_equal(o.excerpt, "");
    }
}

/* ---- SSRF ---- */

static void ssrf_refuses_loopback_by_default(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "", 4096, 256, 8, 4);
    char url[256];
    url_for(fx, "/ssrf", url, sizeof url);
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    assert_string_equal(o.error_class, "ssrf");
    assert_string_equal(o.error, "refused destination 127.0.0.1: loopback address");
    assert_int_equal(o.status, 0);
    assert_int_equal(receiver_count(fx->rcv, NULL), 0);
    assert_int_equal(receiver_accepted(fx->rcv), 0);
}

static void ssrf_checks_the_resolved_address_of_names(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "", 4096, 256, 8, 4);
    char url[256];
    snprintf(url, sizeof url, "http://localhost:%d/ssrf", receiver_port(fx->rcv));
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    assert_string_equal(o.error_class, "ssrf");
    tl_assert_contains(o.error, "refused destination ");
    tl_assert_contains(o.error, "loopback address");
    assert_int_equal(receiver_accepted(fx->rcv), 0);
}

static void allow_list_opens_loopback(void **state)
{
    fixture *fx = *state;
    /* localhost may resolve to ::1 as well: only 127/8 is opened, so that attempt is refused
     * and the IPv4 one carries the request. */
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    snprintf(url, sizeof url, "http://localhost:%d/allowed", receiver_port(fx->rcv));
    outcome o = {0};
    send_and_wait(fx, url, NULL, &o, 5000);
    if (!o.ok)
        fail_msg("expected success, got %s: %s", o.error_class, o.error);
    assert_int_equal(o.status, 200);
    assert_int_equal(receiver_count(fx->rcv, "/allowed"), 1);
}

/* ---- connections ---- */

typedef struct chain {
    fixture *fx;
    char url[256];
    outcome o[20];
    size_t sent;
} chain;

static void chain_cb(const http_result *r, void *arg);

static void chain_next(chain *c)
{
    http_request req = base_request(c->url);
    outcome *o = &c->o[c->sent++];
    o->fx = c->fx;
    c->fx->in_send = true;
    int rc = http_send(c->fx->s, &req, chain_cb, c);
    c->fx->in_send = false;
    assert_int_equal(rc, 0);
}

static void chain_cb(const http_result *r, void *arg)
{
    chain *c = arg;
    done_cb(r, &c->o[c->sent - 1]);
    /* Sending from inside a done callback is allowed. */
    if (c->sent < PGP_ARRAY_LEN(c->o))
        chain_next(c);
}

static void keep_alive_reuses_one_connection(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    chain *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->fx = fx;
    url_for(fx, "/seq", c->url, sizeof c->url);
    chain_next(c);
    run_until(fx, &fx->done, 20, 10000);
    for (size_t i = 0; i < 20; i++) {
        assert_int_equal(c->o[i].calls, 1);
        assert_int_equal(c->o[i].status, 200);
    }
    assert_false(fx->reentered);
    free(c);
    assert_int_equal(receiver_count(fx->rcv, "/seq"), 20);
    assert_int_equal(receiver_accepted(fx->rcv), 1);
    /* The kept connection, idle, does not keep the loop alive. */
    assert_int_equal(uv_run(&fx->loop, UV_RUN_NOWAIT), 0);
}

/* Connection attempts that fail (curl closes those sockets without close_socket_cb, and their
 * numbers come back for the next sockets) beside a kept, parked connection: every request gets
 * its own answer and the kept connection is still reused. */
static void failed_connects_beside_a_kept_connection(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8, ::1/128", 4096, 256, 8, 4);
    char ok[256];
    url_for(fx, "/mix", ok, sizeof ok);
    const char *bad[] = {"http://[::1]:1/", "http://127.0.0.1:1/"};
    for (int round = 0; round < 10; round++) {
        outcome o[3];
        memset(o, 0, sizeof o);
        http_request req = base_request(ok);
        size_t before = fx->done;
        send_req(fx, &req, &o[0]);
        for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
            req = base_request(bad[i]);
            send_req(fx, &req, &o[1 + i]);
        }
        run_until(fx, &fx->done, before + 3, 5000);
        if (o[0].status != 200)
            fail_msg("round %d: %s: %s", round, o[0].error_class, o[0].error);
        for (size_t i = 1; i < 3; i++) {
            assert_int_equal(o[i].calls, 1);
            if (strcmp(o[i].error_class, "connect") != 0)
                fail_msg("round %d, %s: %s: %s", round, bad[i - 1], o[i].error_class, o[i].error);
        }
    }
    assert_int_equal(receiver_count(fx->rcv, "/mix"), 10);
    assert_int_equal(receiver_accepted(fx->rcv), 1);
}

static void burst(fixture *fx, const char *url, outcome *o, size_t n)
{
    http_request req = base_request(url);
    size_t before = fx->done;
    for (size_t i = 0; i < n; i++)
        send_req(fx, &req, &o[i]);
    run_until(fx, &fx->done, before + n, 10000);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(o[i].status, 200);
}

/* Connections opened for a burst survive a quiet spell with one request at a time, ready for the
 * next burst (curl by default keeps only 4 idle connections per transfer in flight: here it
 * closed half of them). */
static void idle_connections_are_kept_through_a_lull(void **state)
{
    fixture *fx = *state;
    enum { N = 8 };
    new_sender(fx, "127.0.0.0/8", 4096, 256, N, N);
    char url[256];
    url_for(fx, "/lull", url, sizeof url);
    outcome o[N];
    memset(o, 0, sizeof o);
    burst(fx, url, o, N);
    assert_int_equal(receiver_accepted(fx->rcv), N);
    for (size_t i = 0; i < N; i++) {
        outcome one = {0};
        send_and_wait(fx, url, NULL, &one, 5000);
        assert_int_equal(one.status, 200);
    }
    /* Nothing was closed (the receiver may count a closed one a moment longer, never less). */
    assert_int_equal(receiver_connections(fx->rcv), N);
    memset(o, 0, sizeof o);
    burst(fx, url, o, N);
    assert_int_equal(receiver_accepted(fx->rcv), N);
}

static void many_concurrent_requests_complete(void **state)
{
    fixture *fx = *state;
    enum { N = 200 };
    new_sender(fx, "127.0.0.0/8", 4096, 256, 16, 8);
    outcome *o = calloc(N, sizeof *o);
    assert_non_null(o);
    char url[256];
    url_for(fx, "/many", url, sizeof url);
    http_request req = base_request(url);
    for (size_t i = 0; i < N; i++)
        send_req(fx, &req, &o[i]);
    assert_int_equal(http_sender_in_flight(fx->s), N);
    run_until(fx, &fx->done, N, 30000);
    for (size_t i = 0; i < N; i++) {
        if (o[i].calls != 1 || o[i].status != 200)
            fail_msg("request %zu: %d calls, status %ld, %s %s", i, o[i].calls, o[i].status,
                     o[i].error_class, o[i].error);
    }
    free(o);
    assert_int_equal(http_sender_in_flight(fx->s), 0);
    assert_int_equal(receiver_count(fx->rcv, "/many"), N);
    /* The per-host limit held: at most 8 connections were ever opened. */
    assert_true(receiver_accepted(fx->rcv) <= 8);
}

/* One sender carries these one after the other, so every request after the first runs on a
 * request object (easy handle, header buffers, excerpt) its predecessor used: nothing of one may
 * show in the next. */
static void reused_requests_carry_nothing_over(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/busy",
                                          .action = RECV_RESPOND,
                                          .status = 503,
                                          .body = "slow down",
                                          .retry_after = "120"});
    char busy[256], ok[256], hang[256];
    url_for(fx, "/busy", busy, sizeof busy);
    url_for(fx, "/ok/next", ok, sizeof ok);
    url_for(fx, "/hang", hang, sizeof hang);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/hang", .action = RECV_HANG});

    /* Two secrets, a Retry-After and an excerpt... */
    const char *const secrets[] = {SECRET_B, SECRET_A};
    http_request req = base_request(busy);
    req.secrets = secrets;
    req.n_secrets = 2;
    outcome o1 = {0};
    send_and_wait(fx, busy, &req, &o1, 5000);
    assert_int_equal(o1.status, 503);
    assert_true(o1.has_retry_after);
    assert_string_equal(o1.excerpt, "slow down");

    /* ...then one secret, a longer id, another timestamp and body, no Retry-After, a shorter
     * excerpt. */
    char long_id[121];
    memset(long_id, 'i', sizeof long_id - 1);
    memcpy(long_id, "msg_", 4);
    long_id[sizeof long_id - 1] = '\0';
    static const char body2[] = "{\"n\":2}";
    req = base_request(ok);
    req.webhook_id = long_id;
    req.timestamp_s = TS + 7;
    req.body = body2;
    req.body_len = strlen(body2);
    outcome o2 = {0};
    send_and_wait(fx, ok, &req, &o2, 5000);
    assert_true(o2.ok);
    assert_int_equal(o2.status, 200);
    assert_false(o2.has_retry_after);
    assert_string_equal(o2.excerpt, "ok");
    assert_int_equal(o2.excerpt_len, 2);

    receiver_request rq;
    assert_int_equal(receiver_get(fx->rcv, 1, &rq), 0);
    assert_string_equal(rq.path, "/ok/next");
    assert_int_equal(rq.body_len, strlen(body2));
    assert_memory_equal(rq.body, body2, strlen(body2));
    assert_string_equal(rq.webhook_timestamp, "1700000007");
    /* The receiver keeps 127 bytes of the id: the start of ours, and the signature (over the
     * whole id) verifies against what we sent. */
    assert_int_equal(strncmp(rq.webhook_id, long_id, strlen(rq.webhook_id)), 0);
    assert_null(strchr(rq.webhook_signature, ' '));
    assert_true(
        verify_one(SECRET_A, long_id, "1700000007", rq.body, rq.body_len, rq.webhook_signature));
    free(rq.body);

    /* A transfer that ended in an error leaves no error (nor status) for the next one. */
    req = base_request(hang);
    req.total_timeout_ms = 300;
    outcome o3 = {0};
    send_and_wait(fx, hang, &req, &o3, 5000);
    assert_string_equal(o3.error_class, "timeout");
    outcome o4 = {0};
    send_and_wait(fx, ok, NULL, &o4, 5000);
    assert_true(o4.ok);
    assert_int_equal(o4.status, 200);
    assert_string_equal(o4.error, "");
    assert_true(o4.duration_ms < 300);
}

/* A pooled request object keeps its last URL parsed; each request still goes to its own URL,
 * read on its own: a relative one is not resolved against the last one (curl refuses it, as a
 * URL without a host), and one curl cannot parse fails as before. */
static void reused_requests_parse_their_own_url(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char a[256], b[256];
    url_for(fx, "/ok/a", a, sizeof a);
    url_for(fx, "/ok/b", b, sizeof b);
    const char *seq[] = {a, a, "/ok/relative", b, "http://[::1/broken", a, "", b};
    const bool good[] = {true, true, false, true, false, true, false, true};
    for (size_t i = 0; i < PGP_ARRAY_LEN(seq); i++) {
        outcome o = {0};
        send_and_wait(fx, seq[i], NULL, &o, 5000);
        if (good[i] ? !o.ok || o.status != 200 : strcmp(o.error_class, "protocol") != 0)
            fail_msg("%zu %s: class %s (%s), status %ld", i, seq[i], o.error_class, o.error,
                     o.status);
    }
    assert_int_equal(receiver_count(fx->rcv, "/ok/a"), 3);
    assert_int_equal(receiver_count(fx->rcv, "/ok/b"), 2);
    assert_int_equal(receiver_count(fx->rcv, "/ok/relative"), 0);
}

/* A request aborted before it ran reports no status, even on a request object whose last
 * request got one. */
static void aborted_reused_request_has_no_status(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    url_for(fx, "/ok", url, sizeof url);
    outcome o1 = {0};
    send_and_wait(fx, url, NULL, &o1, 5000);
    assert_int_equal(o1.status, 200);
    outcome o2 = {0};
    http_request req = base_request(url);
    send_req(fx, &req, &o2);
    close_sender(fx);
    assert_int_equal(o2.calls, 1);
    assert_string_equal(o2.error_class, "aborted");
    assert_int_equal(o2.status, 0);
}

/* ---- allow-list changes ---- */

/* A kept connection was checked against the old list: right after a change, a request opens a
 * new connection and that one is checked against the new list. */
static void allow_list_change_applies_to_kept_connections(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    url_for(fx, "/a", url, sizeof url);
    outcome o1 = {0};
    send_and_wait(fx, url, NULL, &o1, 5000);
    assert_int_equal(o1.status, 200);
    assert_int_equal(receiver_accepted(fx->rcv), 1);

    http_sender_set_allow(fx->s, NULL); /* loopback refused from now on */
    url_for(fx, "/b", url, sizeof url);
    outcome o2 = {0};
    send_and_wait(fx, url, NULL, &o2, 5000);
    assert_string_equal(o2.error_class, "ssrf");
    assert_int_equal(receiver_count(fx->rcv, "/b"), 0);
    assert_int_equal(receiver_accepted(fx->rcv), 1);

    netcheck_allow allow;
    pgp_error err = {{0}};
    assert_int_equal(netcheck_parse_allow("127.0.0.0/8", &allow, &err), 0);
    http_sender_set_allow(fx->s, &allow);
    url_for(fx, "/c", url, sizeof url);
    outcome o3 = {0};
    send_and_wait(fx, url, NULL, &o3, 5000);
    assert_int_equal(o3.status, 200);
    assert_int_equal(receiver_accepted(fx->rcv), 2);
}

static void timer_stop_cb(uv_timer_t *t)
{
    fixture *fx = t->data;
    fx->probe_ready = 1;
    uv_stop(&fx->loop);
}

/* After the first 2 s, reuse resumes for connections younger than the change, never for one
 * opened before it: curl judges age in whole seconds, and at 2.0-3.0 s after the change a
 * connection opened just before it is "2 s old" too. */
static void allow_list_change_retires_older_connections_later_too(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    url_for(fx, "/a", url, sizeof url);
    outcome o1 = {0};
    send_and_wait(fx, url, NULL, &o1, 5000);
    assert_int_equal(o1.status, 200);

    netcheck_allow allow;
    pgp_error err = {{0}};
    assert_int_equal(netcheck_parse_allow("127.0.0.0/8, 10.0.0.0/8", &allow, &err), 0);
    http_sender_set_allow(fx->s, &allow);
    /* What is tested is the passing of time after the change: wait on the loop for it. */
    fx->probe_ready = 0;
    uv_timer_start(&fx->probe, timer_stop_cb, 2300, 0);
    run_until(fx, &fx->probe_ready, 1, 5000);

    url_for(fx, "/b", url, sizeof url);
    outcome o2 = {0};
    send_and_wait(fx, url, NULL, &o2, 5000);
    assert_int_equal(o2.status, 200);
    assert_int_equal(receiver_accepted(fx->rcv), 2);
}

/* ---- idle connections closed by the peer ---- */

/* A kept connection the peer resets while idle: its parked watch fires and stops; the next
 * request finds the connection dead and opens a new one. Also without the loop running in
 * between (curl's own check before reuse). */
static void idle_connection_reset_by_peer_is_replaced(void **state)
{
    fixture *fx = *state;
    tcpproxy *px = tcpproxy_start("127.0.0.1", receiver_port(fx->rcv));
    assert_non_null(px);
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/idle", tcpproxy_port(px));
    for (int round = 0; round < 2; round++) {
        outcome o1 = {0};
        send_and_wait(fx, url, NULL, &o1, 5000);
        assert_int_equal(o1.status, 200);
        assert_int_equal(tcpproxy_set_mode(px, TCPPROXY_DROP), 0);
        assert_int_equal(tcpproxy_set_mode(px, TCPPROXY_PASS), 0);
        if (round == 0) {
            /* Let the loop see the reset of the idle connection. */
            for (int i = 0; i < 10; i++)
                uv_run(&fx->loop, UV_RUN_NOWAIT);
        }
        outcome o2 = {0};
        send_and_wait(fx, url, NULL, &o2, 5000);
        if (!o2.ok)
            fail_msg("round %d: %s: %s", round, o2.error_class, o2.error);
        assert_int_equal(o2.status, 200);
    }
    assert_int_equal(tcpproxy_accepted(px), 3);
    close_sender(fx);
    tcpproxy_stop(px);
}

/* ---- closing ---- */

typedef struct abort_ctx {
    outcome o;
    http_sender *s;
} abort_ctx;

static void abort_cb(const http_result *r, void *arg)
{
    abort_ctx *a = arg;
    done_cb(r, &a->o);
    /* The sender is closing: a new request is refused and its callback never runs. */
    a->o.send_from_cb_rc = http_send(a->s,
                                     &(http_request){.url = "http://127.0.0.1:1/",
                                                     .body = "{}",
                                                     .body_len = 2,
                                                     .webhook_id = "msg_x",
                                                     .secrets = one_secret,
                                                     .n_secrets = 1,
                                                     .total_timeout_ms = 1000},
                                     done_cb, &a->o);
}

static void close_aborts_in_flight_requests(void **state)
{
    fixture *fx = *state;
    enum { N = 5 };
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 8);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/hang", .action = RECV_HANG});
    char url[256];
    url_for(fx, "/hang", url, sizeof url);
    http_request req = base_request(url);
    req.total_timeout_ms = 30000;
    abort_ctx a[N];
    memset(a, 0, sizeof a);
    for (size_t i = 0; i < N; i++) {
        a[i].o.fx = fx;
        a[i].s = fx->s;
        assert_int_equal(http_send(fx->s, &req, abort_cb, &a[i]), 0);
    }
    /* Wait (from the loop) until the receiver holds all of them. */
    fx->probe_prefix = "/hang";
    fx->probe_want = N;
    uv_timer_start(&fx->probe, probe_cb, 5, 5);
    run_until(fx, &fx->probe_ready, 1, 5000);
    assert_int_equal(fx->done, 0);
    assert_int_equal(http_sender_in_flight(fx->s), N);

    http_sender *s = fx->s;
    fx->s = NULL;
    http_sender_close(s, closed_cb, fx);
    http_sender_close(s, closed_cb, fx); /* a second close is a no-op */
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(a[i].o.calls, 1);
        assert_string_equal(a[i].o.error_class, "aborted");
        assert_int_equal(a[i].o.send_from_cb_rc, -ESHUTDOWN);
    }
    /* closed_cb comes from the loop, after every handle closed; teardown then asserts
     * uv_loop_close() == 0. */
    assert_false(fx->sender_closed);
    fx->timed_out = false;
    uv_timer_start(&fx->deadline, deadline_cb, 5000, 0);
    while (!fx->sender_closed && !fx->timed_out)
        uv_run(&fx->loop, UV_RUN_ONCE);
    uv_timer_stop(&fx->deadline);
    assert_true(fx->sender_closed);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(a[i].o.calls, 1);
}

static void close_before_the_loop_ran(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 8);
    char url[256];
    url_for(fx, "/never", url, sizeof url);
    http_request req = base_request(url);
    outcome o[3] = {{0}};
    for (size_t i = 0; i < 3; i++)
        send_req(fx, &req, &o[i]);
    close_sender(fx);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(o[i].calls, 1);
        assert_string_equal(o[i].error_class, "aborted");
    }
    assert_int_equal(receiver_count(fx->rcv, NULL), 0);
}

typedef struct closer {
    outcome o;
    fixture *fx;
    http_sender *s;
} closer;

static void close_from_cb(const http_result *r, void *arg)
{
    closer *c = arg;
    done_cb(r, &c->o);
    /* Closing from inside a done callback: the sender is in the middle of draining curl's
     * completion queue and must stop touching the multi handle. */
    http_sender_close(c->s, closed_cb, c->fx);
}

static void close_from_inside_a_done_callback(void **state)
{
    fixture *fx = *state;
    enum { N = 3 };
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 8);
    receiver_on(fx->rcv, &(receiver_rule){.path_prefix = "/hang", .action = RECV_HANG});
    char hang[256], ok[256];
    url_for(fx, "/hang", hang, sizeof hang);
    url_for(fx, "/ok", ok, sizeof ok);
    http_request req = base_request(hang);
    req.total_timeout_ms = 30000;
    outcome o[N] = {{0}};
    for (size_t i = 0; i < N; i++)
        send_req(fx, &req, &o[i]);
    closer c = {.o = {.fx = fx}, .fx = fx, .s = fx->s};
    req.url = ok;
    assert_int_equal(http_send(fx->s, &req, close_from_cb, &c), 0);
    fx->s = NULL; /* closed by close_from_cb */

    fx->timed_out = false;
    uv_timer_start(&fx->deadline, deadline_cb, 5000, 0);
    while (!fx->sender_closed && !fx->timed_out)
        uv_run(&fx->loop, UV_RUN_ONCE);
    uv_timer_stop(&fx->deadline);
    assert_true(fx->sender_closed);
    assert_int_equal(c.o.calls, 1);
    assert_int_equal(c.o.status, 200);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(o[i].calls, 1);
        assert_string_equal(o[i].error_class, "aborted");
    }
}

static void bad_requests_are_refused_without_callback(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 8);
    char url[256];
    url_for(fx, "/bad", url, sizeof url);
    outcome o = {.fx = fx};
    const char *const bad_secret[] = {"whsec_!!!!"};

    http_request req = base_request(url);
    req.n_secrets = 0;
    assert_int_equal(http_send(fx->s, &req, done_cb, &o), -EINVAL);
    req = base_request(url);
    req.secrets = bad_secret;
    assert_int_equal(http_send(fx->s, &req, done_cb, &o), -EINVAL);
    req = base_request(url);
    req.webhook_id = "msg_1\r\nX-Injected: 1";
    assert_int_equal(http_send(fx->s, &req, done_cb, &o), -EINVAL);
    req = base_request(url);
    req.webhook_id = "";
    assert_int_equal(http_send(fx->s, &req, done_cb, &o), -EINVAL);
    req = base_request(url);
    req.total_timeout_ms = 0;
    assert_int_equal(http_send(fx->s, &req, done_cb, &o), -EINVAL);
    req = base_request(url);
    req.url = NULL;
    assert_int_equal(http_send(fx->s, &req, done_cb, &o), -EINVAL);
    req = base_request(url);
    assert_int_equal(http_send(fx->s, &req, NULL, &o), -EINVAL);

    assert_int_equal(http_sender_in_flight(fx->s), 0);
    /* Give the loop a chance to (wrongly) run a callback. */
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    assert_int_equal(o.calls, 0);

    /* An empty body is fine. */
    req = base_request(url);
    req.body = NULL;
    req.body_len = 0;
    outcome ok = {0};
    send_and_wait(fx, url, &req, &ok, 5000);
    assert_int_equal(ok.status, 200);
}

/* ---- through a proxy ---- */

static void proxy_pins_the_checked_address_and_pooled_handles_forget_it(void **state)
{
    fixture *fx = *state;
    connect_proxy *px = connect_proxy_start();
    assert_non_null(px);
    char proxy[64], url[256], named[256], target[64];
    snprintf(proxy, sizeof proxy, "http://127.0.0.1:%d", connect_proxy_port(px));
    snprintf(target, sizeof target, "CONNECT 127.0.0.1:%d", receiver_port(fx->rcv));
    /* One request object at most in the pool: every request below reuses the same one. */
    new_sender(fx, "127.0.0.0/8", 4096, 256, 1, 1);
    url_for(fx, "/via", url, sizeof url);
    http_request req = base_request(url);
    req.proxy = proxy;
    outcome o1 = {0};
    send_and_wait(fx, url, &req, &o1, 5000);
    if (!o1.ok)
        fail_msg("through the proxy: %s: %s", o1.error_class, o1.error);
    assert_int_equal(o1.status, 200);
    assert_int_equal(connect_proxy_count(px), 1);
    assert_int_equal(connect_proxy_count_line(px, target), 1);

    /* A name: resolved here, the proxy asked for the checked IP (::1 is not allowed). */
    snprintf(named, sizeof named, "http://localhost:%d/named", receiver_port(fx->rcv));
    connect_proxy_refuse(px, 0); /* closes the tunnel: the next one is a new CONNECT */
    outcome o2 = {0};
    send_and_wait(fx, named, &req, &o2, 5000);
    if (!o2.ok)
        fail_msg("a name through the proxy: %s: %s", o2.error_class, o2.error);
    assert_int_equal(connect_proxy_count(px), 2);
    assert_int_equal(connect_proxy_count_line(px, target), 2);

    /* Direct on the same pooled handle: nothing of the proxy is left on it (the proxy would
     * refuse it now). */
    connect_proxy_refuse(px, 403);
    outcome o3 = {0};
    send_and_wait(fx, url, NULL, &o3, 5000);
    if (!o3.ok)
        fail_msg("direct after proxied: %s: %s", o3.error_class, o3.error);
    assert_int_equal(connect_proxy_count(px), 2);
    assert_int_equal(receiver_count(fx->rcv, NULL), 3);
    close_sender(fx);
    connect_proxy_stop(px);
}

static void proxy_never_hears_of_refused_destinations(void **state)
{
    fixture *fx = *state;
    connect_proxy *px = connect_proxy_start();
    assert_non_null(px);
    char proxy[64], url[256];
    snprintf(proxy, sizeof proxy, "http://127.0.0.1:%d", connect_proxy_port(px));
    /* Nothing allowed: the loopback receiver is refused, the loopback proxy is not checked. */
    new_sender(fx, "", 4096, 256, 8, 4);
    url_for(fx, "/ssrf", url, sizeof url);
    http_request req = base_request(url);
    req.proxy = proxy;
    outcome o = {0};
    send_and_wait(fx, url, &req, &o, 5000);
    assert_string_equal(o.error_class, "ssrf");
    assert_string_equal(o.error, "refused destination 127.0.0.1: loopback address");
    snprintf(url, sizeof url, "http://localhost:%d/ssrf", receiver_port(fx->rcv));
    outcome o2 = {0};
    send_and_wait(fx, url, &req, &o2, 5000);
    assert_string_equal(o2.error_class, "ssrf");
    tl_assert_contains(o2.error, "loopback address");
    /* A name that does not resolve: "dns", the proxy not asked either. */
    outcome o3 = {0};
    send_and_wait(fx, "http://no-such-host.invalid/x", &req, &o3, 10000);
    assert_string_equal(o3.error_class, "dns");
    assert_int_equal(connect_proxy_count(px), 0);
    assert_int_equal(receiver_accepted(fx->rcv), 0);
    close_sender(fx);
    connect_proxy_stop(px);
}

static void proxy_refusal_and_absence_are_class_proxy(void **state)
{
    fixture *fx = *state;
    connect_proxy *px = connect_proxy_start();
    assert_non_null(px);
    char proxy[64], url[256];
    snprintf(proxy, sizeof proxy, "http://127.0.0.1:%d", connect_proxy_port(px));
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    url_for(fx, "/x", url, sizeof url);
    http_request req = base_request(url);
    req.proxy = proxy;
    /* 502/504: the proxy could not reach the destination, the receiver's failure. */
    static const int refusals[] = {403, 407, 502, 504};
    for (size_t i = 0; i < PGP_ARRAY_LEN(refusals); i++) {
        connect_proxy_refuse(px, refusals[i]);
        outcome o = {0};
        send_and_wait(fx, url, &req, &o, 5000);
        bool unreachable = refusals[i] == 502 || refusals[i] == 504;
        assert_string_equal(o.error_class, unreachable ? "connect" : "proxy");
        char want[32];
        snprintf(want, sizeof want, ": HTTP %d", refusals[i]);
        tl_assert_contains(o.error, unreachable ? "the proxy could not reach the destination"
                                                : "proxy refused CONNECT");
        tl_assert_contains(o.error, want);
        assert_int_equal(o.status, 0);
    }
    connect_proxy_stop(px); /* nothing listens there now */
    outcome o = {0};
    send_and_wait(fx, url, &req, &o, 5000);
    assert_string_equal(o.error_class, "proxy");
    tl_assert_contains(o.error, "proxy unreachable");
    assert_int_equal(receiver_count(fx->rcv, NULL), 0);
}

static void close_while_resolving_aborts_once(void **state)
{
    fixture *fx = *state;
    new_sender(fx, "127.0.0.0/8", 4096, 256, 8, 4);
    char url[256];
    snprintf(url, sizeof url, "http://localhost:%d/x", receiver_port(fx->rcv));
    http_request req = base_request(url);
    req.proxy = "http://127.0.0.1:1";
    abort_ctx a[3];
    memset(a, 0, sizeof a);
    for (size_t i = 0; i < 3; i++) {
        a[i].o.fx = fx;
        a[i].s = fx->s;
        assert_int_equal(http_send(fx->s, &req, abort_cb, &a[i]), 0);
    }
    assert_int_equal(http_sender_in_flight(fx->s), 3);
    /* Before the loop ran: the lookups are queued or running on the thread pool. */
    http_sender *s = fx->s;
    fx->s = NULL;
    http_sender_close(s, closed_cb, fx);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(a[i].o.calls, 1);
        assert_string_equal(a[i].o.error_class, "aborted");
        assert_int_equal(a[i].o.send_from_cb_rc, -ESHUTDOWN);
    }
    fx->timed_out = false;
    uv_timer_start(&fx->deadline, deadline_cb, 5000, 0);
    while (!fx->sender_closed && !fx->timed_out)
        uv_run(&fx->loop, UV_RUN_ONCE);
    uv_timer_stop(&fx->deadline);
    assert_true(fx->sender_closed);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(a[i].o.calls, 1);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(verifier_matches_spec_vector),
        T(delivers_with_standard_webhooks_headers),
        T(two_secrets_give_two_verifiable_signatures),
        T(extra_headers_are_borrowed_by_requests),
        T(status_503_records_retry_after),
        T(ratelimit_headers_are_captured),
        T(excerpt_is_capped),
        T(hang_times_out_within_total_timeout),
        T(reset_is_reset),
        T(close_without_answer_is_reset),
        T(garbage_is_protocol),
        T(huge_body_stops_early_with_status),
        T(connection_refused_is_connect),
        T(dns_failure_is_dns),
        T(tls_to_plain_http_is_tls),
        T(non_http_schemes_are_refused),
        T(ssrf_refuses_loopback_by_default),
        T(ssrf_checks_the_resolved_address_of_names),
        T(allow_list_opens_loopback),
        T(keep_alive_reuses_one_connection),
        T(reused_requests_carry_nothing_over),
        T(reused_requests_parse_their_own_url),
        T(aborted_reused_request_has_no_status),
        T(allow_list_change_applies_to_kept_connections),
        T(allow_list_change_retires_older_connections_later_too),
        T(idle_connection_reset_by_peer_is_replaced),
        T(failed_connects_beside_a_kept_connection),
        T(idle_connections_are_kept_through_a_lull),
        T(many_concurrent_requests_complete),
        T(close_aborts_in_flight_requests),
        T(close_before_the_loop_ran),
        T(close_from_inside_a_done_callback),
        T(bad_requests_are_refused_without_callback),
        T(proxy_pins_the_checked_address_and_pooled_handles_forget_it),
        T(proxy_never_hears_of_refused_destinations),
        T(proxy_refusal_and_absence_are_class_proxy),
        T(close_while_resolving_aborts_once),
    };
    return TL_RUN(tests, NULL, NULL);
}
