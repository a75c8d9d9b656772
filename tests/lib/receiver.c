/* receiver.c - a real HTTP/1.1 webhook receiver on loopback for tests (see receiver.h).
 *
 * One thread runs its own libuv loop; the test thread only touches the mutex-protected rules,
 * records and counters, and wakes the loop through an async handle to stop it. Requests are
 * parsed here (strictly enough to catch a misbehaving client, leniently about bare LF) from a
 * per-connection input buffer; a connection answers its requests one at a time, so pipelined
 * requests wait in the buffer while a delayed answer is pending.
 *
 * Closing: answers that end the connection (Connection: close, 400 / 413 / 431 / 501,
 * RECV_GARBAGE, RECV_CLOSE) send FIN after the queued bytes and then keep reading and discarding
 * until the client closes or LINGER_MS passes, so a client still sending does not get a RST that
 * would destroy the answer before it reads it. RECV_RESET closes with SO_LINGER {1, 0}.
 *
 * Throttles are decided on the loop thread under the same lock that records the request and
 * picks its rule, with the monotonic clock read at that moment: a token bucket refills lazily
 * (tokens += elapsed * rate, capped at burst) each time it is consulted; a fixed window resets
 * its count when the request falls in a later window than the last one counted; sliding windows
 * keep the arrival times they let through in a ring as long as their largest limit (window i is
 * full when its limit-th newest arrival is still inside it, so older ones never matter).
 *
 * answered_us is stamped under the lock in the same step that records the status sent, just
 * before the bytes go to uv_write (which writes at once when nothing is queued): stamping in the
 * write's callback instead would run after the client may already have read the answer.
 */
#include "receiver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <uv.h>

#define MAX_HEADER_BYTES   (64 * 1024)        /* request line + headers (+ leading CRLFs) */
#define MAX_BODY_BYTES     (64 * 1024 * 1024) /* decoded body; larger gets 413 */
#define MAX_CHUNK_LINE     4096               /* chunk-size line with extensions */
#define MAX_BUFFERED       (MAX_HEADER_BYTES + MAX_BODY_BYTES + 65536)
#define LINGER_MS          2000
#define TRICKLE_TOTAL      1073741824ULL
#define TRICKLE_PIECE      1024
#define TRICKLE_EVERY_MS   10
#define TRICKLE_MAX_QUEUED (64 * 1024) /* skip a tick while the client is not reading */

enum { P_MORE = 0, P_OK = 1 }; /* parser results; errors are HTTP status codes (>= 400) */

typedef struct rule {
    char *prefix;
    receiver_action action;
    int status;
    char *body;
    char *retry_after;
    int delay_ms;
    int remaining;    /* requests left; 0 = forever */
    int every;        /* take each every-th request that reaches the rule (<= 1: all) */
    uint64_t reached; /* matching requests that reached the rule (for every) */
    char *require_authorization, *require_body; /* or NULL */
    char *headers; /* extra header lines, each ending in CRLF; or NULL */
} rule;

typedef struct throttle {
    char *prefix;
    receiver_throttle_kind kind;
    double per_ns; /* token bucket: tokens per nanosecond */
    double tokens;
    int burst;
    int64_t last_ns; /* token bucket: when tokens was last brought up to date */
    int limit;
    int64_t window_ns;
    int64_t window_idx; /* fixed window: the window `count` is for (-1: none yet) */
    int count;
    int status;
    char *body;
    receiver_retry_after retry_after;
    int retry_after_s;
    char *retry_after_literal;
    receiver_announce announce;
    /* sliding windows: nwin windows; the admitted arrival times (monotonic ns), the newest
     * sw_cap of them in a ring (sw_cap = the largest limit: older ones count in no window) */
    int nwin;
    int sw_limit[RECV_SLIDING_MAX];
    int64_t sw_window_ns[RECV_SLIDING_MAX];
    int64_t *sw_times;
    size_t sw_cap, sw_head, sw_n;
} throttle;

typedef enum conn_state {
    ST_IDLE,    /* reading and answering requests */
    ST_DELAY,   /* an answer waits on the timer; later requests stay buffered */
    ST_HANG,    /* never answers again; input is discarded */
    ST_TRICKLE, /* sending the endless body; input is discarded */
    ST_LINGER,  /* FIN queued; input is discarded until EOF or the linger timer */
} conn_state;

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* delay, trickle or linger, depending on state */
    receiver *r;
    struct conn *prev, *next;
    conn_state state;
    bool closing;
    bool peer_eof;
    bool continue_sent; /* 100 Continue already sent for the request being received */
    int open_handles;
    char *in;
    size_t in_len, in_cap;
    int64_t read_at_us; /* CLOCK_REALTIME of the last read */
    char *pending;      /* ST_DELAY: the answer to send */
    size_t pending_len;
    bool pending_close;
    /* ST_DELAY / ST_TRICKLE: the record index of the request being answered (SIZE_MAX: not
     * recorded), to stamp its status and answered_us when the answer is sent / complete. */
    size_t pending_rec;
    int pending_status;
    uint64_t trickle_sent;
} conn;

typedef struct write_req {
    uv_write_t w;
    char *owned; /* freed when the write completes; NULL for static data */
} write_req;

struct receiver {
    /* Loop thread only (after start). */
    uv_loop_t loop;
    uv_tcp_t server;
    uv_async_t wake;
    uv_thread_t thread;
    bool halted; /* receiver_halt: the loop thread has ended (test thread only) */
    int port;
    int64_t start_ns; /* CLOCK_MONOTONIC at start: fixed windows are aligned to it */
    conn *conns;
    char readbuf[65536];
    char trickle_piece[TRICKLE_PIECE];

    /* Shared: everything below is protected by mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond; /* broadcast on each new record; CLOCK_MONOTONIC */
    rule *rules;
    size_t nrules, rules_cap;
    throttle *throttles;
    size_t nthrottles, throttles_cap;
    receiver_request *reqs;
    size_t nreqs, reqs_cap;
    size_t open_conns, accepted;
};

static const char GARBAGE[] = "HTTP/9.9 abc\r\n\r\n";
static const char CONTINUE[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* ---- small helpers ---- */

static int64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void copy_field(char *dst, size_t cap, const char *src, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* printf into a new buffer; *len gets the length. NULL on failure. */
static char *fmt_alloc(size_t extra, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static char *fmt_alloc(size_t extra, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + extra + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *len = (size_t)n;
    return s;
}

static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool ieq(const char *s, size_t len, const char *lit)
{
    return strlen(lit) == len && strncasecmp(s, lit, len) == 0;
}

static const char *reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 307:
        return "Temporary Redirect";
    case 308:
        return "Permanent Redirect";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Content Too Large";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Status";
    }
}

/* ---- parsing ---- */

typedef struct request_head {
    bool http10;
    bool head_method;
    bool conn_close, conn_keepalive;
    bool chunked;
    bool has_cl;
    uint64_t cl;
    bool expect_continue;
    size_t head_len; /* bytes up to and including the empty line */
} request_head;

/* Finds the line starting at pos: *end is where its content ends (before CR LF or LF), *next
 * where the next line starts. false when no LF yet. */
static bool find_line(const char *b, size_t len, size_t pos, size_t *end, size_t *next)
{
    const char *nl = memchr(b + pos, '\n', len - pos);
    if (!nl)
        return false;
    size_t e = (size_t)(nl - b);
    *next = e + 1;
    if (e > pos && b[e - 1] == '\r')
        e--;
    *end = e;
    return true;
}

static int parse_connection(request_head *h, const char *v, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
            i++;
        if (ieq(v + s, i - s, "close"))
            h->conn_close = true;
        else if (ieq(v + s, i - s, "keep-alive"))
            h->conn_keepalive = true;
    }
    return P_OK;
}

static int parse_header(request_head *h, receiver_request *rq, const char *name, size_t nlen,
                        const char *v, size_t vlen)
{
    if (ieq(name, nlen, "content-length")) {
        if (vlen == 0 || vlen > 19)
            return 400;
        uint64_t n = 0;
        for (size_t i = 0; i < vlen; i++) {
            if (v[i] < '0' || v[i] > '9')
                return 400;
            n = n * 10 + (uint64_t)(v[i] - '0');
        }
        if (h->has_cl && h->cl != n)
            return 400;
        h->has_cl = true;
        h->cl = n;
    } else if (ieq(name, nlen, "transfer-encoding")) {
        if (!ieq(v, vlen, "chunked"))
            return 501;
        if (h->chunked)
            return 400;
        h->chunked = true;
    } else if (ieq(name, nlen, "connection")) {
        return parse_connection(h, v, vlen);
    } else if (ieq(name, nlen, "expect")) {
        if (ieq(v, vlen, "100-continue"))
            h->expect_continue = true;
    } else if (ieq(name, nlen, "webhook-id")) {
        copy_field(rq->webhook_id, sizeof rq->webhook_id, v, vlen);
    } else if (ieq(name, nlen, "webhook-timestamp")) {
        copy_field(rq->webhook_timestamp, sizeof rq->webhook_timestamp, v, vlen);
    } else if (ieq(name, nlen, "webhook-signature")) {
        copy_field(rq->webhook_signature, sizeof rq->webhook_signature, v, vlen);
    } else if (ieq(name, nlen, "content-type")) {
        copy_field(rq->content_type, sizeof rq->content_type, v, vlen);
    } else if (ieq(name, nlen, "user-agent")) {
        copy_field(rq->user_agent, sizeof rq->user_agent, v, vlen);
    } else if (ieq(name, nlen, "traceparent")) {
        copy_field(rq->traceparent, sizeof rq->traceparent, v, vlen);
    } else if (ieq(name, nlen, "tracestate")) {
        copy_field(rq->tracestate, sizeof rq->tracestate, v, vlen);
    }
    return P_OK;
}

/* Parses the request line and headers at the start of b. */
static int parse_head(const char *b, size_t len, request_head *h, receiver_request *rq)
{
    memset(h, 0, sizeof *h);
    size_t pos = 0, end, next;

    /* RFC 9112 2.2: empty lines before the request line are ignored. */
    while (pos < len && (b[pos] == '\r' || b[pos] == '\n')) {
        if (b[pos] == '\r' && pos + 1 == len)
            return P_MORE;
        if (b[pos] == '\r' && b[pos + 1] != '\n')
            return 400;
        pos += b[pos] == '\r' ? 2 : 1;
    }
    if (!find_line(b, len, pos, &end, &next))
        return len > MAX_HEADER_BYTES ? 431 : P_MORE;
    if (next > MAX_HEADER_BYTES)
        return 431;

    /* Request line: method SP target SP version. */
    const char *line = b + pos;
    size_t llen = end - pos;
    const char *sp1 = memchr(line, ' ', llen);
    if (!sp1 || sp1 == line || sp1 - line > 15)
        return 400;
    for (const char *p = line; p < sp1; p++)
        if (!is_tchar((unsigned char)*p))
            return 400;
    h->head_method = sp1 - line == 4 && memcmp(line, "HEAD", 4) == 0;
    const char *target = sp1 + 1;
    const char *sp2 = memchr(target, ' ', (size_t)(line + llen - target));
    if (!sp2 || sp2 == target)
        return 400;
    for (const char *p = target; p < sp2; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return 400;
    size_t vlen = (size_t)(line + llen - (sp2 + 1));
    if (vlen != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1'))
        return 400;
    h->http10 = sp2[8] == '0';
    copy_field(rq->path, sizeof rq->path, target, (size_t)(sp2 - target));

    /* Header fields until the empty line. */
    for (pos = next;;) {
        if (!find_line(b, len, pos, &end, &next))
            return len > MAX_HEADER_BYTES ? 431 : P_MORE;
        if (next > MAX_HEADER_BYTES)
            return 431;
        if (end == pos)
            break;
        line = b + pos;
        llen = end - pos;
        if (line[0] == ' ' || line[0] == '\t') /* obsolete line folding */
            return 400;
        const char *colon = memchr(line, ':', llen);
        if (!colon || colon == line)
            return 400;
        for (const char *p = line; p < colon; p++)
            if (!is_tchar((unsigned char)*p))
                return 400;
        const char *v = colon + 1, *ve = line + llen;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (const char *p = v; p < ve; p++)
            if (*p != '\t' && ((unsigned char)*p < 0x20 || *p == 0x7f))
                return 400;
        int rc = parse_header(h, rq, line, (size_t)(colon - line), v, (size_t)(ve - v));
        if (rc != P_OK)
            return rc;
        pos = next;
    }
    if (h->chunked && h->has_cl)
        return 400; /* ambiguous framing (request smuggling); refuse */
    h->head_len = next;
    return P_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes a chunked body at the start of b into out (when not NULL; sized by a first pass with
 * out == NULL). *body_len gets the decoded length, *consumed the bytes used. */
static int parse_chunked(const char *b, size_t len, char *out, size_t *body_len, size_t *consumed)
{
    size_t pos = 0, total = 0, end, next;
    for (;;) {
        if (!find_line(b, len, pos, &end, &next))
            return len - pos > MAX_CHUNK_LINE ? 400 : P_MORE;
        if (next - pos > MAX_CHUNK_LINE)
            return 400;
        size_t i = pos;
        uint64_t size = 0;
        for (; i < end && hexval(b[i]) >= 0; i++) {
            if (size > MAX_BODY_BYTES)
                return 413;
            size = size * 16 + (uint64_t)hexval(b[i]);
        }
        if (i == pos)
            return 400;
        while (i < end && (b[i] == ' ' || b[i] == '\t'))
            i++;
        if (i < end && b[i] != ';')
            return 400;
        pos = next;
        if (size == 0)
            break;
        if (size > MAX_BODY_BYTES - total)
            return 413;
        if (len - pos < size)
            return P_MORE;
        if (out)
            memcpy(out + total, b + pos, size);
        total += size;
        pos += size;
        if (pos < len && b[pos] == '\r')
            pos++;
        if (pos >= len)
            return P_MORE;
        if (b[pos] != '\n')
            return 400;
        pos++;
    }
    /* Trailer fields until the empty line. */
    size_t trailers = pos;
    for (;;) {
        if (!find_line(b, len, pos, &end, &next))
            return len - trailers > MAX_HEADER_BYTES ? 431 : P_MORE;
        if (next - trailers > MAX_HEADER_BYTES)
            return 431;
        if (end == pos)
            break;
        const char *colon = memchr(b + pos, ':', end - pos);
        if (!colon || colon == b + pos)
            return 400;
        pos = next;
    }
    *body_len = total;
    *consumed = next;
    return P_OK;
}

/* ---- connections (loop thread) ---- */

static void on_conn_handle_closed(uv_handle_t *h)
{
    conn *c = h->data;
    if (--c->open_handles > 0)
        return;
    receiver *r = c->r;
    if (c->prev)
        c->prev->next = c->next;
    else
        r->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->in);
    free(c->pending);
    free(c);
    pthread_mutex_lock(&r->mu);
    r->open_conns--;
    pthread_mutex_unlock(&r->mu);
}

static void conn_close(conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}

static void on_write(uv_write_t *w, int status)
{
    write_req *req = (write_req *)w;
    conn *c = w->handle->data;
    free(req->owned);
    free(req);
    if (status < 0 && status != UV_ECANCELED)
        conn_close(c);
}

/* Queues len bytes; takes ownership of `owned` (data itself when owned, else static data). */
static void conn_write(conn *c, const char *data, size_t len, char *owned)
{
    write_req *req = malloc(sizeof *req);
    if (!req || c->closing) {
        free(req);
        free(owned);
        if (!req)
            conn_close(c);
        return;
    }
    req->owned = owned;
    uv_buf_t buf = uv_buf_init((char *)(uintptr_t)data, (unsigned)len);
    if (uv_write(&req->w, (uv_stream_t *)&c->tcp, &buf, 1, on_write) != 0) {
        free(req->owned);
        free(req);
        conn_close(c);
    }
}

static void on_linger_timeout(uv_timer_t *t)
{
    conn_close(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    conn *c = req->handle->data;
    free(req);
    if (status == UV_ECANCELED)
        return;
    if (status < 0 || c->peer_eof)
        conn_close(c);
}

/* Sends FIN after what is queued, then discards input until the client closes. */
static void conn_linger(conn *c)
{
    if (c->closing || c->state == ST_LINGER)
        return;
    c->state = ST_LINGER;
    c->in_len = 0;
    uv_timer_stop(&c->timer);
    uv_shutdown_t *req = malloc(sizeof *req);
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        free(req);
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_linger_timeout, LINGER_MS, 0);
}

static void conn_reset(conn *c)
{
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    conn_close(c);
}

static void conn_fail(conn *c, int status)
{
    const char *msg = status == 431   ? "request header fields too large\n"
                      : status == 413 ? "content too large\n"
                      : status == 501 ? "not implemented\n"
                                      : "bad request\n";
    size_t len;
    char *resp = fmt_alloc(0, &len,
                           "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                           "Connection: close\r\n\r\n%s",
                           status, reason(status), strlen(msg), msg);
    if (resp)
        conn_write(c, resp, len, resp);
    conn_linger(c);
}

/* The status build_response() puts on the status line for a rule's `status`. */
static int effective_status(int status)
{
    return status < 100 || status > 999 ? 200 : status;
}

/* Builds a full answer (r->mu held: the rule's strings are read here). */
static char *build_response(int status, const char *body, const char *retry_after,
                            const char *extra1, const char *extra2, bool head, bool close,
                            size_t *len)
{
    status = effective_status(status);
    bool no_body = status < 200 || status == 204 || status == 304;
    size_t blen = body && !no_body ? strlen(body) : 0;
    char cl[64] = "";
    if (status >= 200 && status != 204)
        snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", blen);
    char *s =
        fmt_alloc(blen, len, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n%s%s%s%s%s%s%s\r\n",
                  status, reason(status), cl, retry_after ? "Retry-After: " : "",
                  retry_after ? retry_after : "", retry_after ? "\r\n" : "", extra1 ? extra1 : "",
                  extra2 ? extra2 : "", close ? "Connection: close\r\n" : "");
    if (s && !head && blen) {
        memcpy(s + *len, body, blen);
        *len += blen;
        s[*len] = '\0';
    }
    return s;
}

static void conn_process(conn *c);

static void send_answer(conn *c, char *resp, size_t len, bool close)
{
    if (resp)
        conn_write(c, resp, len, resp);
    else
        close = true;
    if (close)
        conn_linger(c);
}

static void on_delay_done(uv_timer_t *t)
{
    conn *c = t->data;
    char *resp = c->pending;
    c->pending = NULL;
    c->state = ST_IDLE;
    if (resp && c->pending_rec != SIZE_MAX) {
        pthread_mutex_lock(&c->r->mu);
        c->r->reqs[c->pending_rec].status = c->pending_status;
        c->r->reqs[c->pending_rec].answered_us = realtime_us();
        pthread_mutex_unlock(&c->r->mu);
    }
    send_answer(c, resp, c->pending_len, c->pending_close);
    if (!c->closing && c->state == ST_IDLE) {
        conn_process(c);
        if (!c->closing && c->state == ST_IDLE && c->peer_eof)
            conn_linger(c);
    }
}

static void on_trickle_tick(uv_timer_t *t)
{
    conn *c = t->data;
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > TRICKLE_MAX_QUEUED)
        return;
    uint64_t n = TRICKLE_TOTAL - c->trickle_sent;
    if (n > TRICKLE_PIECE)
        n = TRICKLE_PIECE;
    c->trickle_sent += n;
    conn_write(c, c->r->trickle_piece, (size_t)n, NULL);
    if (!c->closing && c->trickle_sent == TRICKLE_TOTAL) {
        /* The whole gigabyte went out (after about three hours): the answer is complete. */
        uv_timer_stop(&c->timer);
        c->state = ST_IDLE;
        if (c->pending_rec != SIZE_MAX) {
            pthread_mutex_lock(&c->r->mu);
            c->r->reqs[c->pending_rec].answered_us = realtime_us();
            pthread_mutex_unlock(&c->r->mu);
        }
    }
}

/* Records rq (r->mu held) and returns its index, or SIZE_MAX when out of memory. */
static size_t record_request(receiver *r, receiver_request *rq)
{
    if (r->nreqs == r->reqs_cap) {
        size_t cap = r->reqs_cap ? r->reqs_cap * 2 : 64;
        receiver_request *n = realloc(r->reqs, cap * sizeof *n);
        if (!n) {
            fprintf(stderr, "receiver: out of memory, request to %s not recorded\n", rq->path);
            free(rq->body);
            free(rq->head);
            return SIZE_MAX;
        }
        r->reqs = n;
        r->reqs_cap = cap;
    }
    r->reqs[r->nreqs++] = *rq;
    pthread_cond_broadcast(&r->cond);
    return r->nreqs - 1;
}

/* ---- throttles (r->mu held) ---- */

#define NS_PER_S 1000000000LL

/* The k-th newest admitted arrival time (1 <= k <= sw_n). */
static int64_t sw_newest(const throttle *t, size_t k)
{
    return t->sw_times[(t->sw_head + t->sw_cap - k) % t->sw_cap];
}

/* Requests admitted in window i's (now - window, now], and the arrival of the oldest of them. */
static int sw_count(const throttle *t, int i, int64_t now, int64_t *oldest)
{
    int n = 0;
    for (size_t k = 1; k <= t->sw_n && sw_newest(t, k) > now - t->sw_window_ns[i]; k++) {
        *oldest = sw_newest(t, k);
        n++;
    }
    return n;
}

/* Admitted when every window has room: window i holds fewer than its limit in
 * (now - window, now]. Throttled requests are not recorded, so they use up nothing. The delay
 * is when the last blocking window frees a place (its limit-th newest request leaves it). */
static bool sliding_admit(throttle *t, int64_t now, int64_t *delay_ns)
{
    int64_t wait = 0;
    for (int i = 0; i < t->nwin; i++) {
        size_t lim = (size_t)t->sw_limit[i];
        int64_t w = t->sw_window_ns[i], free_at;
        if (lim == 0)
            free_at = now + w; /* never: say one window */
        else if (t->sw_n >= lim && sw_newest(t, lim) > now - w)
            free_at = sw_newest(t, lim) + w;
        else
            continue;
        if (free_at - now > wait)
            wait = free_at - now;
    }
    if (wait > 0) {
        *delay_ns = wait;
        return false;
    }
    t->sw_times[t->sw_head] = now;
    t->sw_head = (t->sw_head + 1) % t->sw_cap;
    if (t->sw_n < t->sw_cap)
        t->sw_n++;
    return true;
}

/* Takes a token (or a place in the current window) and returns true, or returns false with
 * *delay_ns = the time until one is there. */
static bool throttle_admit(throttle *t, int64_t now, int64_t start, int64_t *delay_ns)
{
    if (t->kind == RECV_TOKEN_BUCKET) {
        if (now > t->last_ns) {
            t->tokens += (double)(now - t->last_ns) * t->per_ns;
            if (t->tokens > t->burst)
                t->tokens = t->burst;
            t->last_ns = now;
        }
        if (t->tokens >= 1.0) {
            t->tokens -= 1.0;
            return true;
        }
        double wait = (1.0 - t->tokens) / t->per_ns;
        *delay_ns = wait < 1e18 ? (int64_t)wait + 1 : (int64_t)1e18; /* a very slow rate */
        return false;
    }
    if (t->kind == RECV_SLIDING_WINDOW)
        return sliding_admit(t, now, delay_ns);
    int64_t idx = (now - start) / t->window_ns;
    if (idx != t->window_idx) {
        t->window_idx = idx;
        t->count = 0;
    }
    if (t->count < t->limit) {
        t->count++;
        return true;
    }
    *delay_ns = start + (idx + 1) * t->window_ns - now;
    return false;
}

/* IMF-fixdate (RFC 9110 5.6.7) of unix time `at`, without the locale's names. */
static void http_date(int64_t at, char *buf, size_t len)
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t tt = (time_t)at;
    struct tm tm;
    if (!gmtime_r(&tt, &tm)) {
        snprintf(buf, len, "Thu, 01 Jan 1970 00:00:00 GMT");
        return;
    }
    snprintf(buf, len, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
             months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* The Retry-After value of a throttled answer into buf; NULL when there is none. */
static const char *throttle_retry_after(const throttle *t, int64_t delay_ns, char *buf, size_t len)
{
    if (t->retry_after_s > 0)
        delay_ns = (int64_t)t->retry_after_s * NS_PER_S;
    switch (t->retry_after) {
    case RECV_RA_NONE:
        return NULL;
    case RECV_RA_LITERAL:
        return t->retry_after_literal;
    case RECV_RA_DATE:
        http_date((realtime_us() * 1000 + delay_ns + NS_PER_S - 1) / NS_PER_S, buf, len);
        return buf;
    case RECV_RA_SECONDS:
    default: {
        int64_t secs = (delay_ns + NS_PER_S - 1) / NS_PER_S;
        snprintf(buf, len, "%lld", (long long)(secs < 1 ? 1 : secs));
        return buf;
    }
    }
}

/* ---- announcements (RECV_ANNOUNCE_*, r->mu held) ---- */

/* One window of a throttle's state as announced: whole seconds, rounded up (a sub-second
 * window is announced as 1 s, a slower rate than the real one, never a faster one). */
typedef struct ann_state {
    int64_t limit, window_s, remaining, reset_s;
} ann_state;

static int64_t ceil_s(double ns)
{
    return ns <= 0 ? 0 : (int64_t)((ns + NS_PER_S - 1) / NS_PER_S);
}

/* The state of each of t's windows at `now` (after the request was counted, if it was);
 * returns how many (1, or nwin for sliding windows). */
static int ann_states(const throttle *t, int64_t now, int64_t start, ann_state *st)
{
    if (t->kind == RECV_TOKEN_BUCKET) {
        /* limit = burst, window = the time to refill it all; reset = until full, or until the
         * next whole token when none is left. */
        int64_t whole = (int64_t)t->tokens;
        double need = whole > 0 ? t->burst - t->tokens : 1.0 - t->tokens;
        st[0] =
            (ann_state){t->burst, ceil_s(t->burst / t->per_ns), whole, ceil_s(need / t->per_ns)};
        if (st[0].window_s < 1)
            st[0].window_s = 1;
        return 1;
    }
    if (t->kind == RECV_FIXED_WINDOW) {
        int64_t idx = (now - start) / t->window_ns;
        int used = idx == t->window_idx ? t->count : 0;
        int64_t w = ceil_s((double)t->window_ns);
        st[0] = (ann_state){t->limit, w < 1 ? 1 : w, t->limit - used,
                            ceil_s((double)(start + (idx + 1) * t->window_ns - now))};
        return 1;
    }
    for (int i = 0; i < t->nwin; i++) {
        int64_t oldest = now;
        int used = sw_count(t, i, now, &oldest);
        int64_t w = ceil_s((double)t->sw_window_ns[i]);
        int64_t left = t->sw_limit[i] - used;
        /* reset: when the oldest request counted leaves the window (a place frees) */
        st[i] = (ann_state){t->sw_limit[i], w < 1 ? 1 : w, left < 0 ? 0 : left,
                            used ? ceil_s((double)(oldest + t->sw_window_ns[i] - now)) : 0};
    }
    return t->nwin;
}

/* The header lines (CRLF-terminated) announcing t's state into buf ("" for none). */
static void announce_headers(const throttle *t, int64_t now, int64_t start, char *buf, size_t len)
{
    buf[0] = '\0';
    if (t->announce == RECV_ANNOUNCE_NONE)
        return;
    ann_state st[RECV_SLIDING_MAX] = {{0}};
    int n = ann_states(t, now, start, st);
    if (t->announce == RECV_ANNOUNCE_IETF) {
        /* Every window as a policy of its own: the client picks the most restrictive. */
        char pol[512] = "", cur[512] = "";
        size_t pl = 0, cl = 0;
        for (int i = 0; i < n; i++) {
            pl += (size_t)snprintf(pol + pl, sizeof pol - pl, "%s\"w%d\";q=%lld;w=%lld",
                                   i ? ", " : "", i, (long long)st[i].limit,
                                   (long long)st[i].window_s);
            cl += (size_t)snprintf(cur + cl, sizeof cur - cl, "%s\"w%d\";r=%lld;t=%lld",
                                   i ? ", " : "", i, (long long)st[i].remaining,
                                   (long long)st[i].reset_s);
        }
        snprintf(buf, len, "RateLimit-Policy: %s\r\nRateLimit: %s\r\n", pol, cur);
        return;
    }
    /* The single-window forms: the tightest window (fewest left, then the latest reset). */
    int k = 0;
    for (int i = 1; i < n; i++)
        if (st[i].remaining < st[k].remaining ||
            (st[i].remaining == st[k].remaining && st[i].reset_s > st[k].reset_s))
            k = i;
    long long lim = st[k].limit, w = st[k].window_s, rem = st[k].remaining, rst = st[k].reset_s;
    switch (t->announce) {
    case RECV_ANNOUNCE_IETF_EARLY:
        snprintf(buf, len,
                 "RateLimit-Limit: %lld\r\nRateLimit-Remaining: %lld\r\nRateLimit-Reset: "
                 "%lld\r\nRateLimit-Policy: %lld;w=%lld\r\n",
                 lim, rem, rst, lim, w);
        break;
    case RECV_ANNOUNCE_X:
        snprintf(buf, len,
                 "X-RateLimit-Limit: %lld\r\nX-RateLimit-Remaining: %lld\r\nX-RateLimit-Reset: "
                 "%lld\r\n",
                 lim, rem, rst);
        break;
    case RECV_ANNOUNCE_X_EPOCH:
    default:
        snprintf(buf, len,
                 "X-RateLimit-Limit: %lld\r\nX-RateLimit-Remaining: %lld\r\nX-RateLimit-Reset: "
                 "%lld\r\n",
                 lim, rem, (long long)((realtime_us() + 999999) / 1000000) + rst);
        break;
    }
}

/* The last added throttle matching path decides. When it has no room: builds its answer into
 * *resp and returns its status; otherwise returns 0 (the request goes on to the rules). Either
 * way ann gets the header lines announcing its state (RECV_ANNOUNCE_*), or "". */
static int throttle_check(receiver *r, const char *path, bool head, bool close, char **resp,
                          size_t *len, char *ann, size_t ann_len)
{
    throttle *t = NULL;
    ann[0] = '\0';
    for (size_t i = r->nthrottles; i-- > 0;) {
        if (strncmp(path, r->throttles[i].prefix, strlen(r->throttles[i].prefix)) == 0) {
            t = &r->throttles[i];
            break;
        }
    }
    if (!t)
        return 0;
    int64_t delay_ns = 0, now = monotonic_ns();
    bool admitted = throttle_admit(t, now, r->start_ns, &delay_ns);
    announce_headers(t, now, r->start_ns, ann, ann_len);
    if (admitted)
        return 0;
    char ra[64];
    *resp = build_response(t->status, t->body, throttle_retry_after(t, delay_ns, ra, sizeof ra),
                           ann, NULL, head, close, len);
    return t->status;
}

/* How many times header `name` is in a parsed head (see receiver_header); the first value is
 * copied to buf. */
static int head_header(const char *head, const char *name, char *buf, size_t len)
{
    int found = 0;
    size_t nlen = strlen(name);
    /* The head was parsed already (parse_head): CRLF or LF lines, the request line first,
     * "Name: value" lines after it, no folding. */
    const char *p = head ? strchr(head, '\n') : NULL;
    while (p && *++p && *p != '\r' && *p != '\n') {
        const char *end = strchr(p, '\n');
        if (!end)
            break;
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (colon && (size_t)(colon - p) == nlen && strncasecmp(p, name, nlen) == 0) {
            if (found == 0 && len) {
                const char *v = colon + 1, *ve = end;
                while (v < ve && (*v == ' ' || *v == '\t'))
                    v++;
                while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                    ve--;
                size_t n = (size_t)(ve - v) < len - 1 ? (size_t)(ve - v) : len - 1;
                memcpy(buf, v, n);
                buf[n] = '\0';
            }
            found++;
        }
        p = end;
    }
    return found;
}

/* A rule's requirements on the request (require_authorization, require_body): the status to
 * answer instead of the rule's (401, 400), or 0 when they hold. */
static int rule_refuses(const rule *m, const receiver_request *rq)
{
    if (m->require_authorization) {
        char got[8192];
        if (head_header(rq->head, "authorization", got, sizeof got) != 1 ||
            strcmp(got, m->require_authorization) != 0)
            return 401;
    }
    if (m->require_body && (!rq->body || strcmp(rq->body, m->require_body) != 0))
        return 400;
    return 0;
}

/* Records a complete request and carries out the matching rule. Takes rq->body. */
static void handle_request(conn *c, receiver_request *rq, const request_head *h)
{
    receiver *r = c->r;
    bool close = h->conn_close || (h->http10 && !h->conn_keepalive);
    receiver_action action = RECV_RESPOND;
    int delay_ms = 0;
    size_t len = 0;
    char *resp = NULL;
    int status = 0; /* what is sent, for the record */

    char ann[1536];
    pthread_mutex_lock(&r->mu);
    size_t rec = record_request(r, rq);
    int throttled =
        throttle_check(r, rq->path, h->head_method, close, &resp, &len, ann, sizeof ann);
    rule *m = NULL;
    for (size_t i = r->nrules; !throttled && i-- > 0;) {
        rule *ru = &r->rules[i];
        if (strncmp(rq->path, ru->prefix, strlen(ru->prefix)) != 0)
            continue;
        /* An every-N rule lets the requests between its N-th ones fall through to the rules
         * added before it, so that rules can be layered into one repeatable pattern. */
        if (ru->every > 1 && ++ru->reached % (uint64_t)ru->every != 0)
            continue;
        m = ru;
        break;
    }
    if (throttled) {
        status = throttled;
    } else if (!m) {
        resp = build_response(200, "ok", NULL, ann, NULL, h->head_method, close, &len);
        status = 200;
    } else {
        action = m->action;
        delay_ms = m->delay_ms;
        /* rq's head and body belong to the record now (freed if it could not be made). */
        int refused =
            action == RECV_RESPOND && rec != SIZE_MAX ? rule_refuses(m, &r->reqs[rec]) : 0;
        if (refused) {
            resp = build_response(refused,
                                  refused == 401 ? "{\"error\":\"invalid_client\"}"
                                                 : "{\"error\":\"invalid_request\"}",
                                  NULL, ann, NULL, h->head_method, close, &len);
            status = refused;
        } else if (action == RECV_RESPOND) {
            resp = build_response(m->status, m->body, m->retry_after, ann, m->headers,
                                  h->head_method, close, &len);
            status = effective_status(m->status);
        } else if (action == RECV_TRICKLE_HUGE) {
            status = 200;
        }
        if (m->remaining > 0 && --m->remaining == 0) {
            free(m->prefix);
            free(m->body);
            free(m->retry_after);
            free(m->require_authorization);
            free(m->require_body);
            free(m->headers);
            size_t i = (size_t)(m - r->rules);
            memmove(m, m + 1, (r->nrules - i - 1) * sizeof *m);
            r->nrules--;
        }
    }
    /* A delayed answer's status is recorded when it is sent (on_delay_done); an answer that
     * could not be built (out of memory) closes the connection instead. */
    if (rec != SIZE_MAX) {
        bool delayed = action == RECV_RESPOND && delay_ms > 0;
        r->reqs[rec].throttled = throttled != 0;
        if ((resp && !delayed) || action == RECV_TRICKLE_HUGE)
            r->reqs[rec].status = status;
        if (resp && !delayed)
            r->reqs[rec].answered_us = realtime_us();
    }
    pthread_mutex_unlock(&r->mu);

    switch (action) {
    case RECV_RESPOND:
        if (delay_ms > 0 && resp) {
            c->state = ST_DELAY;
            c->pending = resp;
            c->pending_len = len;
            c->pending_close = close;
            c->pending_rec = rec;
            c->pending_status = status;
            /* From now: the loop's cached time is from the start of this iteration, which
             * may be before this request was read (answered_us - at_us must be the delay). */
            uv_update_time(c->timer.loop);
            uv_timer_start(&c->timer, on_delay_done, (uint64_t)delay_ms, 0);
        } else {
            send_answer(c, resp, len, close);
        }
        break;
    case RECV_HANG:
        c->state = ST_HANG;
        c->in_len = 0;
        break;
    case RECV_RESET:
        conn_reset(c);
        break;
    case RECV_GARBAGE:
        conn_write(c, GARBAGE, sizeof GARBAGE - 1, NULL);
        conn_linger(c);
        break;
    case RECV_TRICKLE_HUGE: {
        static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                   "Content-Length: 1073741824\r\n\r\n";
        conn_write(c, head, sizeof head - 1, NULL);
        c->state = ST_TRICKLE;
        c->in_len = 0;
        c->trickle_sent = 0;
        c->pending_rec = rec;
        uv_timer_start(&c->timer, on_trickle_tick, TRICKLE_EVERY_MS, TRICKLE_EVERY_MS);
        break;
    }
    case RECV_CLOSE:
    default:
        conn_linger(c);
        break;
    }
}

static void maybe_continue(conn *c, const request_head *h)
{
    if (h->expect_continue && !h->http10 && !c->continue_sent) {
        c->continue_sent = true;
        conn_write(c, CONTINUE, sizeof CONTINUE - 1, NULL);
    }
}

/* Answers every complete request in the input buffer, in order, while the connection is idle. */
static void conn_process(conn *c)
{
    while (!c->closing && c->state == ST_IDLE && c->in_len > 0) {
        receiver_request rq;
        memset(&rq, 0, sizeof rq);
        request_head h;
        int rc = parse_head(c->in, c->in_len, &h, &rq);
        if (rc == P_MORE)
            return;
        if (rc != P_OK) {
            conn_fail(c, rc);
            return;
        }
        const char *b = c->in + h.head_len;
        size_t avail = c->in_len - h.head_len, body_len = 0, used = 0;
        if (h.chunked) {
            rc = parse_chunked(b, avail, NULL, &body_len, &used);
        } else if (h.cl > MAX_BODY_BYTES) {
            rc = 413;
        } else {
            body_len = (size_t)h.cl;
            used = body_len;
            rc = avail >= body_len ? P_OK : P_MORE;
        }
        if (rc == P_MORE) {
            maybe_continue(c, &h);
            return;
        }
        if (rc != P_OK) {
            conn_fail(c, rc);
            return;
        }
        rq.body = malloc(body_len + 1);
        rq.head = malloc(h.head_len + 1);
        if (!rq.body || !rq.head) {
            free(rq.body);
            free(rq.head);
            conn_close(c);
            return;
        }
        memcpy(rq.head, c->in, h.head_len);
        rq.head[h.head_len] = '\0';
        if (h.chunked)
            parse_chunked(b, avail, rq.body, &body_len, &used);
        else
            memcpy(rq.body, b, body_len);
        rq.body[body_len] = '\0';
        rq.body_len = body_len;
        rq.at_us = c->read_at_us;

        size_t consumed = h.head_len + used;
        memmove(c->in, c->in + consumed, c->in_len - consumed);
        c->in_len -= consumed;
        c->continue_sent = false;
        handle_request(c, &rq, &h);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;
    *buf = uv_buf_init(c->r->readbuf, sizeof c->r->readbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = s->data;
    if (c->closing || nread == 0)
        return;
    if (nread < 0) {
        if (nread != UV_EOF) {
            conn_close(c); /* reset by the client, or another error */
            return;
        }
        c->peer_eof = true;
        uv_read_stop(s);
        switch (c->state) {
        case ST_DELAY:
            break; /* answer first (and what is buffered behind it), then close */
        case ST_IDLE:
            conn_linger(c); /* flush what is queued, then close (on_shutdown) */
            break;
        default:
            conn_close(c);
            break;
        }
        return;
    }
    if (c->state == ST_HANG || c->state == ST_TRICKLE || c->state == ST_LINGER)
        return; /* discarded */
    size_t n = (size_t)nread;
    if (c->in_len + n > MAX_BUFFERED) {
        conn_close(c);
        return;
    }
    if (c->in_len + n > c->in_cap) {
        size_t cap = c->in_cap ? c->in_cap : 16384;
        while (cap < c->in_len + n)
            cap *= 2;
        char *in = realloc(c->in, cap);
        if (!in) {
            conn_close(c);
            return;
        }
        c->in = in;
        c->in_cap = cap;
    }
    memcpy(c->in + c->in_len, buf->base, n);
    c->in_len += n;
    c->read_at_us = realtime_us();
    if (c->state == ST_IDLE)
        conn_process(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    receiver *r = server->data;
    if (status < 0)
        return;
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "receiver: out of memory accepting a connection\n");
        return;
    }
    c->r = r;
    uv_tcp_init(&r->loop, &c->tcp);
    uv_timer_init(&r->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->open_handles = 2;
    c->next = r->conns;
    if (r->conns)
        r->conns->prev = c;
    r->conns = c;
    pthread_mutex_lock(&r->mu);
    r->open_conns++;
    pthread_mutex_unlock(&r->mu);
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    pthread_mutex_lock(&r->mu);
    r->accepted++;
    pthread_mutex_unlock(&r->mu);
    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
        conn_close(c);
}

static void on_wake(uv_async_t *a)
{
    receiver *r = a->data;
    uv_close((uv_handle_t *)&r->server, NULL);
    for (conn *c = r->conns; c; c = c->next)
        conn_close(c);
    uv_close((uv_handle_t *)&r->wake, NULL);
}

static void run_loop(void *arg)
{
    receiver *r = arg;
    uv_run(&r->loop, UV_RUN_DEFAULT);
}

static void report_handle(uv_handle_t *h, void *arg)
{
    fprintf(stderr, "receiver: handle still open: %s\n", uv_handle_type_name(h->type));
}

/* ---- public API (any thread) ---- */

receiver *receiver_start(void)
{
    return receiver_start_port(0);
}

receiver *receiver_start_port(int port)
{
    receiver *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "receiver: out of memory\n");
        return NULL;
    }
    memset(r->trickle_piece, 'x', sizeof r->trickle_piece);
    r->start_ns = monotonic_ns();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&r->mu, NULL);

    int rc = uv_loop_init(&r->loop);
    if (rc != 0) {
        fprintf(stderr, "receiver: uv_loop_init: %s\n", uv_strerror(rc));
        pthread_cond_destroy(&r->cond);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    struct sockaddr_in addr;
    const char *what = "uv_ip4_addr";
    rc = uv_ip4_addr("127.0.0.1", port, &addr);
    /* libuv binds with SO_REUSEADDR, so an ephemeral port the kernel picks can be one a
     * connecting socket already holds, and listen() then says EADDRINUSE: with port 0 that is
     * a bad draw, not a conflict, so draw again (a fixed port's conflict is reported). */
    for (int attempt = 0;; attempt++) {
        uv_tcp_init(&r->loop, &r->server);
        r->server.data = r;
        if (rc == 0) {
            what = "bind";
            rc = uv_tcp_bind(&r->server, (struct sockaddr *)&addr, 0);
        }
        if (rc == 0) {
            what = "listen";
            rc = uv_listen((uv_stream_t *)&r->server, 128, on_connection);
        }
        if (rc != UV_EADDRINUSE || port != 0 || attempt == 20)
            break;
        uv_close((uv_handle_t *)&r->server, NULL);
        uv_run(&r->loop, UV_RUN_DEFAULT);
        rc = 0;
    }
    if (rc == 0) {
        struct sockaddr_storage ss;
        int len = sizeof ss;
        what = "getsockname";
        rc = uv_tcp_getsockname(&r->server, (struct sockaddr *)&ss, &len);
        if (rc == 0)
            r->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    if (rc == 0) {
        what = "uv_async_init";
        rc = uv_async_init(&r->loop, &r->wake, on_wake);
        r->wake.data = r;
    }
    if (rc == 0) {
        /* The loop thread takes no process signals: SIGPIPE from a write to a closed
         * connection stays pending there (the write fails with EPIPE), and SIGINT / SIGTERM go
         * to the program's own threads. */
        sigset_t block, old;
        sigemptyset(&block);
        int sigs[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP, SIGQUIT,
                      SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            sigaddset(&block, sigs[i]);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        what = "uv_thread_create";
        rc = uv_thread_create(&r->thread, run_loop, r);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0)
            uv_close((uv_handle_t *)&r->wake, NULL);
    }
    if (rc != 0) {
        fprintf(stderr, "receiver: %s on 127.0.0.1:%d: %s\n", what, port, uv_strerror(rc));
        uv_close((uv_handle_t *)&r->server, NULL);
        uv_run(&r->loop, UV_RUN_DEFAULT);
        uv_loop_close(&r->loop);
        pthread_cond_destroy(&r->cond);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    return r;
}

static void free_rule(rule *ru)
{
    free(ru->prefix);
    free(ru->body);
    free(ru->retry_after);
    free(ru->require_authorization);
    free(ru->require_body);
    free(ru->headers);
}

static void free_throttle(throttle *t)
{
    free(t->prefix);
    free(t->body);
    free(t->retry_after_literal);
    free(t->sw_times);
}

void receiver_halt(receiver *r)
{
    if (!r || r->halted)
        return;
    r->halted = true;
    uv_async_send(&r->wake);
    uv_thread_join(&r->thread);
    int rc = uv_loop_close(&r->loop);
    if (rc != 0) {
        uv_walk(&r->loop, report_handle, NULL);
        fprintf(stderr, "receiver: uv_loop_close: %s\n", uv_strerror(rc));
        abort();
    }
}

void receiver_stop(receiver *r)
{
    if (!r)
        return;
    receiver_halt(r);
    for (size_t i = 0; i < r->nreqs; i++) {
        free(r->reqs[i].body);
        free(r->reqs[i].head);
    }
    free(r->reqs);
    for (size_t i = 0; i < r->nrules; i++)
        free_rule(&r->rules[i]);
    free(r->rules);
    for (size_t i = 0; i < r->nthrottles; i++)
        free_throttle(&r->throttles[i]);
    free(r->throttles);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int receiver_port(const receiver *r)
{
    return r->port;
}

void receiver_url(const receiver *r, const char *path, char *buf, size_t len)
{
    snprintf(buf, len, "http://127.0.0.1:%d%s", r->port, path ? path : "");
}

/* "A: 1\nB: 2" (LF or CRLF separated, the last line's end optional) as CRLF-ended lines. */
static char *header_lines(const char *in)
{
    size_t n = strlen(in);
    char *out = malloc(2 * n + 3), *o = out;
    if (!out)
        return NULL;
    for (const char *p = in; *p;) {
        size_t l = strcspn(p, "\r\n");
        if (l) {
            memcpy(o, p, l);
            o += l;
            *o++ = '\r';
            *o++ = '\n';
        }
        p += l;
        p += strspn(p, "\r\n");
    }
    *o = '\0';
    return out;
}

void receiver_on(receiver *r, const receiver_rule *in)
{
    rule ru = {
        .prefix = strdup(in->path_prefix ? in->path_prefix : ""),
        .action = in->action,
        .status = in->status,
        .body = dup_or_null(in->body),
        .retry_after = dup_or_null(in->retry_after),
        .delay_ms = in->delay_ms,
        .remaining = in->times > 0 ? in->times : 0,
        .every = in->every,
        .require_authorization = dup_or_null(in->require_authorization),
        .require_body = dup_or_null(in->require_body),
        .headers = in->headers && *in->headers ? header_lines(in->headers) : NULL,
    };
    if (!ru.prefix || (in->body && !ru.body) || (in->retry_after && !ru.retry_after) ||
        (in->require_authorization && !ru.require_authorization) ||
        (in->require_body && !ru.require_body) || (in->headers && *in->headers && !ru.headers)) {
        fprintf(stderr, "receiver: out of memory adding a rule\n");
        abort();
    }
    pthread_mutex_lock(&r->mu);
    if (r->nrules == r->rules_cap) {
        size_t cap = r->rules_cap ? r->rules_cap * 2 : 8;
        rule *n = realloc(r->rules, cap * sizeof *n);
        if (!n) {
            fprintf(stderr, "receiver: out of memory adding a rule\n");
            abort();
        }
        r->rules = n;
        r->rules_cap = cap;
    }
    r->rules[r->nrules++] = ru;
    pthread_mutex_unlock(&r->mu);
}

/* Why a throttle's parameters cannot be used, or NULL when they can. */
static const char *throttle_invalid(const receiver_throttle *in)
{
    if (in->kind == RECV_TOKEN_BUCKET) {
        /* !(x > 0) also refuses NaN; above 6e13 per minute a token is under a nanosecond. */
        if (!(in->rate_per_minute > 0) || !(in->rate_per_minute < 6e13))
            return "rate_per_minute must be > 0";
        if (in->burst < 1)
            return "burst must be >= 1";
    } else if (in->kind == RECV_FIXED_WINDOW) {
        if (in->limit < 0)
            return "limit must be >= 0";
        if (in->window_ms <= 0)
            return "window_ms must be > 0";
    } else if (in->kind == RECV_SLIDING_WINDOW) {
        int n = 0;
        while (n < RECV_SLIDING_MAX && in->sliding_window_ms[n] != 0)
            n++;
        if (n == 0)
            return "sliding_window_ms[0] must be > 0";
        for (int i = 0; i < n; i++) {
            if (in->sliding_window_ms[i] < 0)
                return "sliding_window_ms must be > 0";
            if (in->sliding_limit[i] < 0 || in->sliding_limit[i] > RECV_SLIDING_LIMIT_MAX)
                return "sliding_limit must be 0..1000000";
        }
    } else {
        return "unknown kind";
    }
    if (in->status != 0 && (in->status < 400 || in->status > 599))
        return "status must be 400..599 (or 0 for 429)";
    if (in->retry_after_s < 0)
        return "retry_after_s must be >= 0";
    if (in->retry_after != RECV_RA_SECONDS && in->retry_after != RECV_RA_NONE &&
        in->retry_after != RECV_RA_DATE && in->retry_after != RECV_RA_LITERAL)
        return "unknown retry_after mode";
    if (in->retry_after == RECV_RA_LITERAL &&
        (!in->retry_after_literal || strpbrk(in->retry_after_literal, "\r\n")))
        return "retry_after_literal must be set, on one line";
    if (in->announce != RECV_ANNOUNCE_NONE && in->announce != RECV_ANNOUNCE_IETF &&
        in->announce != RECV_ANNOUNCE_IETF_EARLY && in->announce != RECV_ANNOUNCE_X &&
        in->announce != RECV_ANNOUNCE_X_EPOCH)
        return "unknown announce form";
    return NULL;
}

int receiver_throttle_on(receiver *r, const receiver_throttle *in)
{
    const char *why = throttle_invalid(in);
    if (why) {
        fprintf(stderr, "receiver: throttle on %s refused: %s\n",
                in->path_prefix ? in->path_prefix : "", why);
        return -1;
    }
    throttle t = {
        .prefix = strdup(in->path_prefix ? in->path_prefix : ""),
        .kind = in->kind,
        .per_ns = in->rate_per_minute / 60e9,
        .tokens = in->burst,
        .burst = in->burst,
        .last_ns = monotonic_ns(),
        .limit = in->limit,
        .window_ns = (int64_t)in->window_ms * 1000000,
        .window_idx = -1,
        .status = in->status ? in->status : 429,
        .body = dup_or_null(in->body),
        .retry_after = in->retry_after,
        .retry_after_s = in->retry_after_s,
        .retry_after_literal =
            in->retry_after == RECV_RA_LITERAL ? dup_or_null(in->retry_after_literal) : NULL,
        .announce = in->announce,
    };
    if (in->kind == RECV_SLIDING_WINDOW) {
        t.sw_cap = 1;
        while (t.nwin < RECV_SLIDING_MAX && in->sliding_window_ms[t.nwin] > 0) {
            t.sw_limit[t.nwin] = in->sliding_limit[t.nwin];
            t.sw_window_ns[t.nwin] = (int64_t)in->sliding_window_ms[t.nwin] * 1000000;
            if ((size_t)t.sw_limit[t.nwin] > t.sw_cap)
                t.sw_cap = (size_t)t.sw_limit[t.nwin];
            t.nwin++;
        }
        t.sw_times = calloc(t.sw_cap, sizeof *t.sw_times);
    }
    if (!t.prefix || (in->body && !t.body) ||
        (in->retry_after == RECV_RA_LITERAL && !t.retry_after_literal) ||
        (in->kind == RECV_SLIDING_WINDOW && !t.sw_times)) {
        fprintf(stderr, "receiver: out of memory adding a throttle\n");
        abort();
    }
    pthread_mutex_lock(&r->mu);
    if (r->nthrottles == r->throttles_cap) {
        size_t cap = r->throttles_cap ? r->throttles_cap * 2 : 4;
        throttle *n = realloc(r->throttles, cap * sizeof *n);
        if (!n) {
            fprintf(stderr, "receiver: out of memory adding a throttle\n");
            abort();
        }
        r->throttles = n;
        r->throttles_cap = cap;
    }
    r->throttles[r->nthrottles++] = t;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

void receiver_clear_rules(receiver *r)
{
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nrules; i++)
        free_rule(&r->rules[i]);
    r->nrules = 0;
    for (size_t i = 0; i < r->nthrottles; i++)
        free_throttle(&r->throttles[i]);
    r->nthrottles = 0;
    pthread_mutex_unlock(&r->mu);
}

static size_t count_locked(receiver *r, const char *prefix)
{
    if (!prefix || !*prefix)
        return r->nreqs;
    size_t plen = strlen(prefix), n = 0;
    for (size_t i = 0; i < r->nreqs; i++)
        if (strncmp(r->reqs[i].path, prefix, plen) == 0)
            n++;
    return n;
}

size_t receiver_count(receiver *r, const char *path_prefix)
{
    pthread_mutex_lock(&r->mu);
    size_t n = count_locked(r, path_prefix);
    pthread_mutex_unlock(&r->mu);
    return n;
}

size_t receiver_count_status(receiver *r, const char *path_prefix, int status)
{
    size_t plen = path_prefix ? strlen(path_prefix) : 0, n = 0;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nreqs; i++)
        if (r->reqs[i].status == status &&
            strncmp(r->reqs[i].path, path_prefix ? path_prefix : "", plen) == 0)
            n++;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* One end of a request's open interval, for receiver_max_concurrent's sweep. */
typedef struct edge {
    int64_t at_us;
    int delta; /* +1 arrival, -1 answer */
} edge;

static int edge_cmp(const void *a, const void *b)
{
    const edge *x = a, *y = b;
    if (x->at_us != y->at_us)
        return x->at_us < y->at_us ? -1 : 1;
    /* Arrivals first at the same instant: intervals include both ends, so a request answered in
     * the microsecond it arrived still counts, and the running count never goes below zero. */
    return y->delta - x->delta;
}

size_t receiver_max_concurrent(receiver *r, const char *path_prefix)
{
    const char *prefix = path_prefix ? path_prefix : "";
    size_t plen = strlen(prefix), n = 0;
    pthread_mutex_lock(&r->mu);
    edge *e = malloc((2 * r->nreqs + 1) * sizeof *e);
    if (!e) {
        fprintf(stderr, "receiver: out of memory counting concurrent requests\n");
        abort();
    }
    for (size_t i = 0; i < r->nreqs; i++) {
        const receiver_request *q = &r->reqs[i];
        if (strncmp(q->path, prefix, plen) != 0)
            continue;
        e[n++] = (edge){q->at_us, +1};
        /* A wall-clock step back between arrival and answer must not end it before it began. */
        if (q->answered_us != 0)
            e[n++] = (edge){q->answered_us < q->at_us ? q->at_us : q->answered_us, -1};
    }
    pthread_mutex_unlock(&r->mu);
    qsort(e, n, sizeof *e, edge_cmp);
    size_t open = 0, most = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].delta < 0) {
            open--;
        } else if (++open > most) {
            most = open;
        }
    }
    free(e);
    return most;
}

int receiver_get(receiver *r, size_t i, receiver_request *out)
{
    pthread_mutex_lock(&r->mu);
    if (i >= r->nreqs) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    *out = r->reqs[i];
    out->head = NULL; /* the receiver's: receiver_header() reads it */
    out->body = malloc(out->body_len + 1);
    if (out->body)
        memcpy(out->body, r->reqs[i].body, out->body_len + 1);
    pthread_mutex_unlock(&r->mu);
    return out->body ? 0 : -1;
}

size_t receiver_wait(receiver *r, const char *path_prefix, size_t n, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout_ms > 0) {
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&r->mu);
    size_t got;
    while ((got = count_locked(r, path_prefix)) < n) {
        if (pthread_cond_timedwait(&r->cond, &r->mu, &deadline) == ETIMEDOUT) {
            got = count_locked(r, path_prefix);
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return got;
}

size_t receiver_connections(receiver *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->open_conns;
    pthread_mutex_unlock(&r->mu);
    return n;
}

size_t receiver_accepted(receiver *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->accepted;
    pthread_mutex_unlock(&r->mu);
    return n;
}

int receiver_header(receiver *r, size_t i, const char *name, char *buf, size_t len)
{
    int found = 0;
    pthread_mutex_lock(&r->mu);
    if (i < r->nreqs)
        found = head_header(r->reqs[i].head, name, buf, len);
    pthread_mutex_unlock(&r->mu);
    return found;
}
