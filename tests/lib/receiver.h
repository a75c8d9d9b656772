/* receiver.h - a real HTTP/1.1 webhook receiver on loopback for tests (and the demo).
 *
 * Contract: receiver_start() binds 127.0.0.1 on an ephemeral port and serves from its own
 * thread (own libuv loop), so the test thread can run pgpace and poll the recorded requests.
 * Keep-alive connections are supported (HTTP/1.1, Content-Length bodies; chunked request bodies
 * are accepted too). Every complete request is recorded with its arrival time and, once its
 * answer is sent, the time of that. How it answers is chosen per request path prefix with
 * receiver_on(), the last matching rule wins; the default is 200 with body "ok". All functions
 * are thread-safe.
 *
 * Rules are tried last-added first. A rule with `every` N > 1 counts the matching requests that
 * reach it (those no later-added rule took, and no throttle answered) and takes only the N-th,
 * 2N-th, ... of them; the others go on to the earlier-added rules and finally to the default,
 * as if it did not match. Its `times` counts only the requests it took. The count is the rule's
 * own, shared by every connection, never reset while the rule lives, and advanced in the order
 * the receiver decides requests: the order they are complete in (a request pipelined behind a
 * delayed answer is decided when that answer has been sent). So the pattern is exact and
 * repeatable: a host that is sometimes slow and sometimes fails, without randomness.
 * {"/", 500, every 4} added before {"/", 200, delay 3000, every 20} answers requests 20, 40, ...
 * after 3 s and every 4th of the others with 500 (4, 8, 12, 16, 21, 25, ...).
 *
 * Throttling (receiver_throttle_on) is decided first, like a real API's rate limiter in front of
 * its handlers: the last added throttle whose prefix matches the path takes the request; when it
 * has no room, the request is answered at once with the throttle's status (default 429) and
 * Retry-After, and never reaches the rules (a rule's `times` is not used up). Otherwise, or when
 * no throttle matches, the rules answer as above. Each throttle keeps its own state (tokens,
 * the current window's count, or the arrivals its sliding windows let through), shared by every
 * connection, and is decided when the request is complete, in arrival order (pipelined requests
 * too). Every recorded request carries the status actually sent and whether a throttle sent it
 * (receiver_request.status / .throttled). A throttle with `announce` also states its limit and
 * state in rate limit headers on every answer of its paths (receiver_announce). A throttle on every
 * path (path_prefix NULL) plays a receiver host's own limit; receiver_count_status(r, prefix, 429)
 * counts its refusals per path prefix (per customer or endpoint).
 */
#ifndef PGPACE_RECEIVER_H
#define PGPACE_RECEIVER_H

#include <stddef.h>
#include <stdint.h>

typedef struct receiver receiver;

typedef enum receiver_action {
    RECV_RESPOND,      /* send `status` with `body` (+ Retry-After if set) after delay_ms */
    RECV_HANG,         /* read the request, never answer, keep the connection open */
    RECV_RESET,        /* close the connection with RST (SO_LINGER 0) after reading */
    RECV_GARBAGE,      /* answer bytes that are not HTTP */
    RECV_TRICKLE_HUGE, /* answer 200 with Content-Length 1 GiB, sending 1 KiB every 10 ms */
    RECV_CLOSE,        /* close the connection (FIN) without answering */
} receiver_action;

typedef struct receiver_rule {
    const char *path_prefix; /* e.g. "/c/acme" (copied) */
    receiver_action action;
    int status;              /* RECV_RESPOND */
    const char *body;        /* RECV_RESPOND, may be NULL (copied) */
    const char *retry_after; /* RECV_RESPOND: Retry-After header value, or NULL (copied) */
    int delay_ms;            /* RECV_RESPOND: wait before answering */
    int times;               /* take this many requests, then the rule expires; 0 = forever */
    int every; /* <= 1: take every matching request; N > 1: each N-th that reaches the rule */
    /* RECV_RESPOND, to play an OAuth2 token endpoint and a receiver checking its token: when
     * set, a request the rule takes whose Authorization header is not exactly this value is
     * answered 401 (body {"error":"invalid_client"}), one whose body is not exactly
     * require_body 400 ({"error":"invalid_request"}); its `times` is used up all the same. */
    const char *require_authorization; /* copied */
    const char *require_body;          /* copied */
    /* RECV_RESPOND: extra header lines sent as they are, "Name: value" separated by "\n"
     * (e.g. a receiver's own RateLimit announcement); NULL: none (copied). */
    const char *headers;
} receiver_rule;

typedef struct receiver_request {
    int64_t at_us; /* CLOCK_REALTIME microseconds when the request was complete */
    char path[256];
    char webhook_id[128];
    char webhook_timestamp[32];
    char webhook_signature[512];
    char content_type[128];
    char user_agent[128];
    /* W3C Trace Context headers ("" when absent; pgpace never sends them empty). Sized for the
     * longest values pgpace accepts (256 and 512 characters). */
    char traceparent[264];
    char tracestate[520];
    char *body; /* NUL-terminated copy, owned by the receiver */
    size_t body_len;
    /* The request line and header lines as received (NUL-terminated), owned by the receiver;
     * NULL in receiver_get's copies: read headers with receiver_header(). */
    char *head;
    /* The status line's code sent for this request; 0 while not (or never) answered: RECV_HANG,
     * RECV_RESET, RECV_CLOSE, RECV_GARBAGE, or a delayed answer not sent yet (or never: the
     * connection closed or the receiver stopped first). RECV_TRICKLE_HUGE records 200 (its
     * status line). */
    int status;
    int throttled; /* 1 when a throttle answered it (status is then the throttle's status) */
    /* CLOCK_REALTIME microseconds when the whole answer (status line, headers, body) was handed
     * to the socket: for a delayed answer when it was actually sent; throttled answers too.
     * Stamped just before the write, so a client that has read the answer finds it set. 0
     * while not (or never) answered, as for status; RECV_TRICKLE_HUGE sets it only when the
     * whole gigabyte has gone out. */
    int64_t answered_us;
} receiver_request;

typedef enum receiver_throttle_kind {
    /* `burst` tokens, refilled continuously at rate_per_minute (never above burst); the bucket
     * is full when the throttle is added. A request takes one token or is throttled. */
    RECV_TOKEN_BUCKET,
    /* At most `limit` requests per window of window_ms; windows are aligned to the receiver's
     * start (window k is [start + k * window_ms, start + (k + 1) * window_ms) on the monotonic
     * clock), so the first window after adding a throttle may be short. */
    RECV_FIXED_WINDOW,
    /* Up to RECV_SLIDING_MAX windows enforced together on arrival times: a request is let
     * through when, for every window i, fewer than sliding_limit[i] requests were let through
     * in (now - sliding_window_ms[i], now]; throttled requests do not count. Retry-After's
     * delay: until every window has a place (the limit-th newest request has left it). */
    RECV_SLIDING_WINDOW,
} receiver_throttle_kind;

#define RECV_SLIDING_MAX       4
#define RECV_SLIDING_LIMIT_MAX 1000000

/* The rate limit headers a throttle puts on every answer of its paths, let through (whatever
 * answers it: a rule or the default) or throttled, describing its state just after deciding
 * that request. Whole seconds, rounded up (a window under a second is announced as 1 s: a
 * slower rate than the real one). A token bucket is announced as limit = burst, window = the
 * time to refill a whole burst, remaining = whole tokens, reset = the time until full (or, with
 * no whole token left, until the next one). A fixed window: its limit, length, places left and
 * the time until it ends. Sliding windows: each window's limit, length, places left in
 * (now - window, now], and reset = when the oldest request counted leaves it (0: none counted);
 * the single-window forms describe the tightest (fewest left, then the latest reset). */
typedef enum receiver_announce {
    RECV_ANNOUNCE_NONE = 0,
    /* RateLimit-Policy: "w0";q=LIMIT;w=WINDOW, "w1";... and RateLimit: "w0";r=LEFT;t=RESET, ...
     * (the current IETF draft; every window a policy) */
    RECV_ANNOUNCE_IETF,
    /* RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset and RateLimit-Policy: LIMIT;w=WINDOW
     * (the earlier IETF drafts) */
    RECV_ANNOUNCE_IETF_EARLY,
    RECV_ANNOUNCE_X,       /* X-RateLimit-Limit, -Remaining, -Reset (seconds from now) */
    RECV_ANNOUNCE_X_EPOCH, /* the same with X-RateLimit-Reset in epoch seconds (rounded up) */
} receiver_announce;

/* The Retry-After header of throttled answers. "The delay" is retry_after_s when it is > 0,
 * otherwise computed: the time until the bucket holds a whole token, or until the current window
 * ends. */
typedef enum receiver_retry_after {
    RECV_RA_SECONDS = 0, /* delta-seconds: the delay rounded up, at least 1 */
    RECV_RA_NONE,        /* no Retry-After header */
    RECV_RA_DATE,        /* IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") of now + the delay,
                          * rounded up to the next whole second */
    RECV_RA_LITERAL,     /* retry_after_literal as is ("99999999999", "soon", ...) */
} receiver_retry_after;

typedef struct receiver_throttle {
    const char *path_prefix; /* e.g. "/c/acme" (copied); NULL or "" = every path */
    receiver_throttle_kind kind;
    double rate_per_minute; /* RECV_TOKEN_BUCKET: refill rate, > 0 */
    int burst;              /* RECV_TOKEN_BUCKET: capacity, >= 1 */
    int limit;              /* RECV_FIXED_WINDOW: requests let through per window, >= 0 */
    int window_ms;          /* RECV_FIXED_WINDOW: window length, > 0 */
    int status;             /* throttled answers' status (400..599, e.g. 429 or 503); 0 = 429 */
    const char *body;       /* throttled answers' body, or NULL for none (copied) */
    receiver_retry_after retry_after;
    int retry_after_s;               /* RECV_RA_SECONDS / RECV_RA_DATE: fixed delay when > 0 */
    const char *retry_after_literal; /* RECV_RA_LITERAL: the header value (copied) */
    /* RECV_SLIDING_WINDOW: window i lets through sliding_limit[i] (0..RECV_SLIDING_LIMIT_MAX)
     * requests per sliding_window_ms[i] (> 0); the first 0 window ends the list (>= 1). */
    int sliding_limit[RECV_SLIDING_MAX];
    int sliding_window_ms[RECV_SLIDING_MAX];
    receiver_announce announce; /* RECV_ANNOUNCE_NONE: no rate limit headers */
} receiver_throttle;

/* Starts the server; returns NULL on failure (message on stderr). */
receiver *receiver_start(void);
/* Same, on a given port of 127.0.0.1 (0 = ephemeral); for the standalone pgpace-receiver. */
receiver *receiver_start_port(int port);
/* Stops the thread, closes every connection, frees everything (recorded bodies included). */
void receiver_stop(receiver *r);
/* Stops the thread and closes every connection, keeping the records: once it returns, every
 * request the loop had read is recorded (a pass of the parser ends before the loop stops), and
 * receiver_count/receiver_get read the final list. receiver_stop frees it. */
void receiver_halt(receiver *r);

int receiver_port(const receiver *r);
/* "http://127.0.0.1:<port>" + path into buf. */
void receiver_url(const receiver *r, const char *path, char *buf, size_t len);

void receiver_on(receiver *r, const receiver_rule *rule);
/* Adds a throttle (see the contract above); throttles never expire. Returns 0, or -1 when the
 * parameters are out of range (message on stderr; nothing added). */
int receiver_throttle_on(receiver *r, const receiver_throttle *throttle);
/* Removes every rule and every throttle (with its state). */
void receiver_clear_rules(receiver *r);

/* Number of requests recorded so far (optionally only those whose path starts with prefix). */
size_t receiver_count(receiver *r, const char *path_prefix);
/* Of those, the ones whose recorded status is `status` (see receiver_request.status: 0 counts
 * the requests not answered so far). */
size_t receiver_count_status(receiver *r, const char *path_prefix, int status);
/* The most requests (optionally only those whose path starts with prefix; NULL or "" = all)
 * that were open at one moment over the whole recording: a request is open from its at_us to
 * its answered_us, both included, and one with answered_us 0 (RECV_HANG, RECV_RESET,
 * RECV_CLOSE, RECV_GARBAGE, RECV_TRICKLE_HUGE, a delayed answer still pending or lost when the
 * client reset the connection) stays open to the end. Pipelined requests are open together.
 * For checks like "this tenant never held more than N connections of the host". */
size_t receiver_max_concurrent(receiver *r, const char *path_prefix);
/* Copies out recorded request i (0-based, arrival order) into *out; body is strdup'ed and must
 * be freed by the caller. Returns 0, or -1 when i is out of range. */
int receiver_get(receiver *r, size_t i, receiver_request *out);
/* How many times header `name` (case-insensitive) came with recorded request i: 0 when it did
 * not (or i is out of range). The first one's value (without the spaces around it) is copied
 * to buf (len bytes, NUL-terminated, cut short if need be). */
int receiver_header(receiver *r, size_t i, const char *name, char *buf, size_t len);
/* Waits until receiver_count(prefix) >= n or timeout_ms passes; returns the count reached. */
size_t receiver_wait(receiver *r, const char *path_prefix, size_t n, int timeout_ms);
/* Connections currently open (for keep-alive assertions). */
size_t receiver_connections(receiver *r);
/* Total TCP connections accepted since start. */
size_t receiver_accepted(receiver *r);

#endif
