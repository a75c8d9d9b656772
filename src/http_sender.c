/* http_sender.c - webhook POSTs over libcurl multi, driven by the libuv loop (http_sender.h).
 *
 * Shape: one CURLM per sender. curl tells us which sockets to watch (socket_cb) and when to
 * wake it up (timer_cb); each socket gets a sock_ctx owning a uv_poll_t, the timer is one
 * uv_timer_t in the sender. Every readiness or timer event calls curl_multi_socket_action and
 * then drains curl_multi_info_read, which is the only place (besides close) where requests
 * complete. That is what keeps completions on the loop: http_send only adds the easy handle,
 * which in the socket API never performs I/O; curl merely asks (via timer_cb) to be woken
 * "in 0 ms", which uv turns into the next loop iteration.
 *
 * Cost per delivery (the hot path): a request object (http_req) owns its curl easy handle, its
 * header list (fixed nodes pointing into its own buffer) and its excerpt buffer, and goes back
 * to a bounded free list after its callback, so a delivery allocates nothing of ours and only
 * re-sets the options that change per request; its URL stays parsed (CURLOPT_CURLU) while the
 * next request goes to the same one. A keep-alive connection going idle in curl's
 * cache keeps its sock_ctx and its uv_poll armed for reading ("parked"): curl forgets the
 * socket (CURL_POLL_REMOVE) after every transfer and asks for it again on the next one, and
 * re-creating the poll each time costs five epoll_ctl calls and an ioctl per delivery. A parked
 * poll that fires (the peer closed the idle connection) is stopped; the socket itself is
 * released when curl closes it (CURLOPT_CLOSESOCKETFUNCTION).
 *
 * Routing (direct or through an egress proxy) is in http_route.c, form posts in http_form.c,
 * a customer's extra header lines in http_headers.c; what they share is in
 * http_sender_internal.h.
 *
 * Memory: requests go back to the free list (or are freed) right after their callback; sock_ctx
 * and the sender are freed only in uv close callbacks, so a poll or timer callback never sees
 * freed memory even when the user closes the sender from inside a done callback.
 */
#include "http_sender_internal.h"

#include "pgpace_version.h"
#include "secret.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define USER_AGENT "pgpace/" PGPACE_VERSION

/* Idle request objects kept at most: each holds a curl easy handle (~20 KiB with its buffers).
 * Bounded by max_connections too: more requests than that are queued inside curl anyway. */
#define REQ_POOL_MAX 1024
/* A pooled request keeps a body or header buffer up to this size; a larger one (a rare big
 * payload, many secrets) is freed when the request ends instead of being held by the pool. */
#define REQ_KEEP_BUF_MAX (64 * 1024)

/* One per socket curl asked us to watch; curl_multi_assign links it to the socket while curl
 * watches it. A parked one (an idle keep-alive connection) is linked only from by_fd. */
struct sock_ctx {
    uv_poll_t poll;
    http_sender *s;
    curl_socket_t fd;
    int armed;   /* UV_READABLE | UV_WRITABLE the poll is started with; 0 stopped; -1 unknown */
    bool tcp;    /* an IPv4/IPv6 socket: a connection curl opened through open_socket_cb */
    bool parked; /* curl removed it; its connection may come back from curl's cache */
    bool closing;
    pgp_list link;
};

/* Constant header lines (not const: curl_slist.data is char *; curl only reads them). */
static char hdr_content_type[] = "content-type: application/json";
/* A header of ours rather than CURLOPT_USERAGENT, which curl formats anew for every transfer. */
char http_hdr_user_agent[] = "user-agent: " USER_AGENT;
/* No "Expect: 100-continue" round trip for larger bodies. */
char http_hdr_expect[] = "Expect:";

/* ---- completion ---- */

static const char *classify(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return "dns";
    case CURLE_COULDNT_CONNECT:
        return "connect";
    case CURLE_OPERATION_TIMEDOUT:
        return "timeout";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_USE_SSL_FAILED:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
#if LIBCURL_VERSION_NUM >= 0x074d00
    case CURLE_SSL_CLIENTCERT:
#endif
        return "tls";
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return "reset";
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_RANGE_ERROR:
#if LIBCURL_VERSION_NUM >= 0x074500
    case CURLE_QUIC_CONNECT_ERROR:
#endif
        return "protocol";
    case CURLE_FILESIZE_EXCEEDED:
        return "too_large";
    default:
        return "internal";
    }
}

/* ---- request objects: a bounded free list ---- */

/* What a form request holds: the secret-bearing buffer wiped, the body freed. */
static void req_form_clear(http_req *r)
{
    if (r->fbuf) {
        explicit_bzero(r->fbuf, r->fbuf_len);
        free(r->fbuf);
    }
    r->fbuf = NULL;
    r->fbuf_len = 0;
    free(r->rbody);
    r->rbody = NULL;
    r->rbody_len = r->rbody_max = 0;
}

void hs_req_destroy(http_req *r)
{
    req_form_clear(r);
    http_headers_release(r->extra);
    if (r->easy)
        curl_easy_cleanup(r->easy); /* frees its blob structs, never reads their data */
    curl_url_cleanup(r->uh);        /* after the handle: it points at it */
    free(r->uh_url);
    client_cert_release(r->cert);
    free(r->hbuf);
    free(r);
}

/* Back to the free list after its callback (or a refused http_send): the easy handle is no
 * longer in the multi. Per-request state is reset when the object is taken again. */
void hs_req_put(http_req *r)
{
    http_sender *s = r->s;
    if (r->form) {
        req_form_clear(r);
        r->form = false;
        /* Webhooks use the fixed header nodes again; an object that cannot is not reused. */
        if (curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->hdr) != CURLE_OK) {
            hs_req_destroy(r);
            return;
        }
    }
    if (s->closing || s->n_idle >= s->pool_max) {
        hs_req_destroy(r);
        return;
    }
    if (r->hbuf_cap > REQ_KEEP_BUF_MAX) {
        free(r->hbuf);
        r->hbuf = NULL;
        r->hbuf_cap = 0;
    }
    /* The customer's set may be released as soon as no request holds it. */
    if (r->hdr_end)
        *r->hdr_end = NULL;
    http_headers_release(r->extra);
    r->extra = NULL;
    /* The handle forgets the certificate before its reference goes: the blobs point into it
     * (NOCOPY), and the next request on this handle must not present it unless it is its own.
     * A failure here would leave a pointer about to dangle: the object is then not pooled. */
    if (r->cert) {
        bool cleared = curl_easy_setopt(r->easy, CURLOPT_SSLCERT_BLOB, NULL) == CURLE_OK &&
                       curl_easy_setopt(r->easy, CURLOPT_SSLKEY_BLOB, NULL) == CURLE_OK;
        if (!cleared) {
            hs_req_destroy(r);
            return;
        }
        client_cert_release(r->cert);
        r->cert = NULL;
    }
    r->body = NULL;
    r->cb = NULL;
    r->arg = NULL;
    pgp_list_push(&s->idle, &r->link);
    s->n_idle++;
}

/* The rate limit fields captured (hs_ratelimit), in rl_raw's order. */
static const struct {
    const char *name; /* lowercase, with the colon */
    size_t off, cap;
} rl_fields[HS_RL_FIELDS] = {
#define RLF(n, f)                                                                                  \
    {                                                                                              \
        n ":", offsetof(hs_ratelimit, f), sizeof(((hs_ratelimit *)0)->f)                           \
    }
    RLF("ratelimit-policy", policy),
    RLF("ratelimit", ratelimit),
    RLF("ratelimit-limit", limit),
    RLF("ratelimit-remaining", remaining),
    RLF("ratelimit-reset", reset),
    RLF("x-ratelimit-limit", x_limit),
    RLF("x-ratelimit-remaining", x_remaining),
    RLF("x-ratelimit-reset", x_reset),
    RLF("x-ratelimit-reset-after", x_reset_after),
#undef RLF
};

/* If the header line data[0..n) is one of rl_fields, appends its value (", " after an earlier
 * line of the same field) and returns true. Bounded: what does not fit marks the capture
 * unusable rather than keeping a prefix that could read as another number ("1000" cut to
 * "100"); so does a control byte, which no form allows (and a NUL would end the string early). */
static bool rl_capture(hs_ratelimit *c, const char *data, size_t n)
{
    const char *colon = memchr(data, ':', n);
    if (!colon)
        return false;
    size_t namelen = (size_t)(colon - data) + 1;
    size_t i = 0;
    while (i < HS_RL_FIELDS && !(strlen(rl_fields[i].name) == namelen &&
                                 strncasecmp(data, rl_fields[i].name, namelen) == 0))
        i++;
    if (i == HS_RL_FIELDS)
        return false;
    const char *v = colon + 1, *end = data + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    char *buf = (char *)c + rl_fields[i].off;
    size_t cap = rl_fields[i].cap, len = (c->present & (1u << i)) ? c->len[i] : 0;
    size_t add = (size_t)(end - v), sep = len ? 2 : 0;
    for (const char *p = v; p < end; p++)
        if ((unsigned char)*p < 0x20 ? *p != '\t' : *p == 0x7f)
            c->unusable = true;
    if (!(c->present & (1u << i)))
        buf[0] = '\0';
    c->present |= 1u << i;
    if (len + sep + add >= cap) {
        c->unusable = true; /* what was kept stays, unused */
        return true;
    }
    memcpy(buf + len, ", ", sep);
    memcpy(buf + len + sep, v, add);
    c->len[i] = len + sep + add;
    buf[c->len[i]] = '\0';
    return true;
}

/* The captured fields as rl_parse reads them, or NULL when the response had none. */
static const rl_raw *rl_raw_fill(hs_ratelimit *c)
{
    if (!c->present)
        return NULL;
    const char **slot[HS_RL_FIELDS] = {
        &c->raw.policy,  &c->raw.ratelimit,   &c->raw.limit,   &c->raw.remaining,     &c->raw.reset,
        &c->raw.x_limit, &c->raw.x_remaining, &c->raw.x_reset, &c->raw.x_reset_after,
    };
    for (size_t i = 0; i < HS_RL_FIELDS; i++)
        *slot[i] = (c->present & (1u << i)) ? (const char *)c + rl_fields[i].off : NULL;
    c->raw.truncated = c->unusable;
    return &c->raw;
}

/* Unlinks r, runs its callback once with `res` filled in, releases it. */
void hs_req_finish(http_req *r, http_result *res)
{
    http_sender *s = r->s;
    pgp_list_remove(&r->link);
    s->in_flight--;

    res->excerpt = r->excerpt;
    res->excerpt_len = r->excerpt_len;
    res->retry_after = r->have_retry_after ? r->retry_after : NULL;
    res->ratelimit = rl_raw_fill(&r->rl);
    res->duration_ms = (double)(uv_hrtime() - r->start_ns) / 1e6;
    if (r->form) {
        res->body = r->rbody ? r->rbody : "";
        res->body_len = r->rbody_len;
    }
    if (!res->error)
        res->error = "";
    r->cb(res, r->arg);
    hs_req_put(r);
}

/* The HTTP status of r's transfer, 0 when none arrived. A reused easy handle still reports the
 * previous transfer's code until curl starts the new one, hence saw_response. */
static long req_status(http_req *r)
{
    long status = 0;
    if (!r->saw_response || curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
        return 0;
    return status;
}

/* Turns curl's verdict on a finished transfer into an http_result. */
static void req_complete(http_req *r, CURLcode code)
{
    http_result res = {0};
    long status = req_status(r);
    res.status = status;

    if (code == CURLE_OK) {
        /* a received response, whatever its status */
    } else if (code == CURLE_WRITE_ERROR && r->truncated && status > 0 && !r->form) {
        /* We stopped reading at max_response_bytes on purpose: the status stands. */
    } else if (!r->proxied && r->refused[0] && r->connects_allowed == 0) {
        /* Every address curl tried was refused by netcheck (curl says COULDNT_CONNECT). A
         * proxied request's refusals were of other addresses of its name: one was allowed. */
        res.error_class = "ssrf";
        snprintf(r->error, sizeof r->error, "%s", r->refused);
    } else if (r->proxied && (res.error_class = hs_proxy_failed(r, code)) != NULL) {
        /* the proxy's verdict, in r->error */
    } else {
        res.error_class = code == CURLE_WRITE_ERROR && r->truncated ? "too_large" : classify(code);
        /* A resolver that never answered surfaces as a timeout; it is a DNS failure. */
        if (code == CURLE_OPERATION_TIMEDOUT && strncmp(r->errbuf, "Resolving timed out", 19) == 0)
            res.error_class = "dns";
        /* A TLS alert after the handshake seemed done is still TLS: with TLS 1.3 a server that
         * requires a client certificate (and gets none, or one it does not trust) says so only
         * when the request is read ("tlsv13 alert certificate required"), which curl reports
         * as a receive error. */
        if ((code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR) &&
            strncmp(r->errbuf, "OpenSSL SSL_", 12) == 0 && strstr(r->errbuf, " alert "))
            res.error_class = "tls";
        const char *what = curl_easy_strerror(code);
        if (r->errbuf[0] && strcmp(r->errbuf, what) != 0)
            snprintf(r->error, sizeof r->error, "%s: %s", what, r->errbuf);
        else
            snprintf(r->error, sizeof r->error, "%s", what);
        if (r->refused[0]) {
            size_t used = strlen(r->error);
            snprintf(r->error + used, sizeof r->error - used, " (also %s)", r->refused);
        }
    }
    res.error = r->error;
    hs_req_finish(r, &res);
}

/* Completes every transfer curl reports done. Stops when a callback closed the sender. */
static void check_multi_info(http_sender *s)
{
    CURLMsg *msg;
    int pending;
    while (!s->closing && (msg = curl_multi_info_read(s->multi, &pending)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        /* msg is invalid after remove_handle: copy what we need first. */
        CURL *easy = msg->easy_handle;
        CURLcode code = msg->data.result;
        char *priv = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
        http_req *r = (http_req *)priv;
        curl_multi_remove_handle(s->multi, easy);
        if (r)
            req_complete(r, code);
        else
            curl_easy_cleanup(easy);
    }
}

/* ---- uv <-> curl glue ---- */

static void finish_close(http_sender *s)
{
    void (*cb)(void *) = s->closed_cb;
    void *arg = s->closed_arg;
    free(s->by_fd);
    free(s->ca_file);
    free(s);
    curl_global_cleanup();
    if (cb)
        cb(arg);
}

void hs_handle_closed(http_sender *s)
{
    if (--s->open_handles == 0 && s->closing)
        finish_close(s);
}

static void sock_closed_cb(uv_handle_t *h)
{
    sock_ctx *c = h->data;
    http_sender *s = c->s;
    free(c);
    hs_handle_closed(s);
}

static sock_ctx *sock_lookup(const http_sender *s, curl_socket_t fd)
{
    return fd >= 0 && (size_t)fd < s->n_by_fd ? s->by_fd[fd] : NULL;
}

static void sock_close(sock_ctx *c)
{
    if (c->closing)
        return;
    c->closing = true;
    pgp_list_remove(&c->link);
    http_sender *s = c->s;
    if (sock_lookup(s, c->fd) == c)
        s->by_fd[c->fd] = NULL;
    /* uv_close stops the poll (and drops the fd from epoll) before curl closes the fd. */
    uv_close((uv_handle_t *)&c->poll, sock_closed_cb);
}

static void poll_cb(uv_poll_t *h, int status, int events);

/* Makes the poll watch `want` (UV_READABLE | UV_WRITABLE, 0 = nothing). Only a change touches
 * the poll: libuv's uv_poll_start always removes the fd from epoll and adds it again. */
static void sock_arm(sock_ctx *c, int want)
{
    if (c->armed == want)
        return;
    if (want == 0) {
        uv_poll_stop(&c->poll);
        c->armed = 0;
    } else {
        c->armed = uv_poll_start(&c->poll, want, poll_cb) == 0 ? want : -1;
    }
}

static void poll_cb(uv_poll_t *h, int status, int events)
{
    sock_ctx *c = h->data;
    http_sender *s = c->s;
    if (s->closing || c->closing)
        return;
    if (c->parked) {
        /* An idle connection became readable: the peer closed it (or sent junk). curl finds
         * out when it next considers the connection; until then, stop watching. */
        sock_arm(c, 0);
        return;
    }
    int flags = 0;
    if (status < 0) {
        /* libuv has stopped this poll. Let curl attempt the I/O it wanted so it meets the real
         * socket error (ECONNRESET...) rather than a generic one; it then fails the transfer
         * and removes the socket, or re-arms it through socket_cb. */
        flags = CURL_CSELECT_ERR;
        if (c->armed > 0 && (c->armed & UV_READABLE))
            flags |= CURL_CSELECT_IN;
        if (c->armed > 0 && (c->armed & UV_WRITABLE))
            flags |= CURL_CSELECT_OUT;
        c->armed = 0;
    } else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    int running;
    curl_multi_socket_action(s->multi, c->fd, flags, &running);
    check_multi_info(s);
}

static bool is_tcp_socket(curl_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return false;
    return ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
}

static sock_ctx *sock_new(http_sender *s, curl_socket_t fd)
{
    if (fd < 0)
        return NULL;
    if ((size_t)fd >= s->n_by_fd) {
        size_t n = s->n_by_fd ? s->n_by_fd : 64;
        while (n <= (size_t)fd)
            n *= 2;
        sock_ctx **grown = realloc(s->by_fd, n * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + s->n_by_fd, 0, (n - s->n_by_fd) * sizeof *grown);
        s->by_fd = grown;
        s->n_by_fd = n;
    }
    sock_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (uv_poll_init_socket(s->loop, &c->poll, fd) != 0) {
        free(c);
        return NULL;
    }
    c->poll.data = c;
    c->s = s;
    c->fd = fd;
    /* Only connection sockets are parked: curl closes those through close_socket_cb, so a
     * parked context never outlives its socket. Others (the threaded resolver's socketpair)
     * are closed right after CURL_POLL_REMOVE without telling us. */
    c->tcp = is_tcp_socket(fd);
    pgp_list_push(&s->socks, &c->link);
    s->by_fd[fd] = c;
    s->open_handles++;
    return c;
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    http_sender *s = userp;
    sock_ctx *c = socketp;

    if (what == CURL_POLL_REMOVE) {
        /* curl drops its own socket->ctx association after this call. An idle keep-alive
         * connection (curl wanted to read: it had the whole request out) stays watched for
         * the peer closing it, so that reusing it costs no epoll_ctl; anything else (a
         * connection attempt, a half-sent request) is let go. */
        if (c) {
            if (c->tcp && c->armed == UV_READABLE && !s->closing) {
                c->parked = true;
                /* An idle connection does not keep the loop running (it did not when its poll
                 * was closed here). */
                uv_unref((uv_handle_t *)&c->poll);
            } else {
                sock_close(c);
            }
        }
        return 0;
    }
    /* Returning -1 would make curl (>= 7.85) fail every transfer on this multi for good. A
     * socket we cannot watch instead fails just its transfer, by that transfer's timeout. */
    if (!c) {
        c = sock_lookup(s, fd);
        if (c) {
            /* A parked connection back from curl's cache. Anything else under this fd is
             * stale: re-arm it for sure. */
            if (c->parked)
                uv_ref((uv_handle_t *)&c->poll);
            else
                c->armed = -1;
            c->parked = false;
        } else if ((c = sock_new(s, fd)) == NULL) {
            return 0;
        }
        curl_multi_assign(s->multi, fd, c);
    }
    int events = 0;
    if (what & CURL_POLL_IN)
        events |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        events |= UV_WRITABLE;
    sock_arm(c, events);
    return 0;
}

static void timer_fired_cb(uv_timer_t *t)
{
    http_sender *s = t->data;
    if (s->closing)
        return;
    int running;
    curl_multi_socket_action(s->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_multi_info(s);
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    http_sender *s = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&s->timer);
    else
        uv_timer_start(&s->timer, timer_fired_cb, (uint64_t)timeout_ms, 0);
    return 0;
}

/* ---- per-request curl callbacks ---- */

static curl_socket_t open_socket_cb(void *clientp, curlsocktype purpose,
                                    struct curl_sockaddr *address)
{
    http_req *r = clientp;
    http_sender *s = r->s;
    if (purpose != CURLSOCKTYPE_IPCXN)
        return CURL_SOCKET_BAD;
    const char *reason = NULL;
    /* Through a proxy the connection goes to the proxy, which the operator chose; the
     * destination was checked before the request started (resolved_cb). */
    if (!r->proxied &&
        !netcheck_allowed(&address->addr, (socklen_t)address->addrlen, &s->allow, &reason)) {
        if (!r->refused[0]) {
            char ip[INET6_ADDRSTRLEN] = "?";
            struct sockaddr_storage ss;
            size_t n = address->addrlen < sizeof ss ? address->addrlen : sizeof ss;
            memset(&ss, 0, sizeof ss);
            memcpy(&ss, &address->addr, n);
            if (ss.ss_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
            else if (ss.ss_family == AF_INET6)
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
            snprintf(r->refused, sizeof r->refused, "refused destination %s: %s", ip,
                     reason ? reason : "refused");
        }
        return CURL_SOCKET_BAD;
    }
    curl_socket_t fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
    if (fd == CURL_SOCKET_BAD)
        return fd;
    r->connects_allowed++;
    /* curl closes a connection attempt that lost (or failed) without close_socket_cb, so a
     * context may still sit under this number. A parked one belongs to a gone socket; one
     * curl still links to this fd is re-armed, as curl may not call socket_cb again for it
     * when the new socket wants the same events. */
    sock_ctx *old = sock_lookup(s, fd);
    if (old) {
        if (old->parked) {
            sock_close(old);
        } else {
            int ev = old->armed;
            old->armed = -1;
            if (ev > 0)
                sock_arm(old, ev);
        }
    }
    return fd;
}

/* Every socket open_socket_cb made is closed here (curl keeps this callback with the
 * connection, hence the sender, not the request, as its argument). */
static int close_socket_cb(void *clientp, curl_socket_t fd)
{
    http_sender *s = clientp;
    sock_ctx *c = sock_lookup(s, fd);
    if (c)
        sock_close(c);
    return close(fd);
}

/* A form request's response body, kept whole up to rbody_max (more: too_large). */
static size_t form_write(http_req *r, const char *data, size_t n)
{
    if (n > r->rbody_max - r->rbody_len) {
        r->truncated = true;
        return 0;
    }
    if (!r->rbody) {
        r->rbody = malloc(r->rbody_max);
        if (!r->rbody)
            return 0;
    }
    memcpy(r->rbody + r->rbody_len, data, n);
    r->rbody_len += n;
    return n;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    http_req *r = userp;
    size_t n = size * nmemb;
    if (r->form)
        return form_write(r, data, n);
    size_t max = r->s->o.max_response_bytes;
    size_t take = n;
    if (n > max - r->received) {
        take = max - r->received;
        r->truncated = true;
    }
    size_t room = r->s->o.excerpt_bytes - r->excerpt_len;
    size_t keep = take < room ? take : room;
    if (keep) {
        memcpy(r->excerpt + r->excerpt_len, data, keep);
        r->excerpt_len += keep;
    }
    r->received += take;
    /* A short count makes curl stop the transfer with CURLE_WRITE_ERROR. */
    return r->truncated ? take : n;
}

static size_t header_cb(char *data, size_t size, size_t nitems, void *userp)
{
    http_req *r = userp;
    size_t n = size * nitems;
    static const char name[] = "retry-after:";
    const size_t nlen = sizeof name - 1;
    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        /* A new response (after a 1xx): forget headers of the previous one. */
        r->have_retry_after = false;
        r->rl.present = 0;
        r->rl.unusable = false;
        r->saw_response = true;
    } else if (rl_capture(&r->rl, data, n)) {
        /* one of the rate limit fields */
    } else if (n > nlen && strncasecmp(data, name, nlen) == 0) {
        const char *v = data + nlen;
        const char *end = data + n;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
            end--;
        size_t len = (size_t)(end - v);
        if (len >= sizeof r->retry_after)
            len = sizeof r->retry_after - 1;
        memcpy(r->retry_after, v, len);
        r->retry_after[len] = '\0';
        r->have_retry_after = true;
    }
    return n;
}

/* ---- public API ---- */

int http_sender_new(uv_loop_t *loop, const http_sender_options *o, http_sender **out)
{
    *out = NULL;
    if (!loop || !o)
        return -EINVAL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return -EIO;
    http_sender *s = calloc(1, sizeof *s);
    if (!s) {
        curl_global_cleanup();
        return -ENOMEM;
    }
    s->loop = loop;
    pgp_list_init(&s->reqs);
    pgp_list_init(&s->idle);
    pgp_list_init(&s->socks);
    s->o = *o;
    if (o->allow)
        s->allow = *o->allow;
    s->o.allow = &s->allow;
    if (o->ca_file && o->ca_file[0]) {
        s->ca_file = strdup(o->ca_file);
        if (!s->ca_file) {
            free(s);
            curl_global_cleanup();
            return -ENOMEM;
        }
    }
    s->o.ca_file = s->ca_file;
    if (s->o.excerpt_bytes > s->o.max_response_bytes)
        s->o.excerpt_bytes = s->o.max_response_bytes;
    s->pool_max = o->max_connections > 0 && (size_t)o->max_connections < REQ_POOL_MAX
                      ? (size_t)o->max_connections
                      : REQ_POOL_MAX;

    s->multi = curl_multi_init();
    if (!s->multi)
        goto fail;
    if (curl_multi_setopt(s->multi, CURLMOPT_SOCKETFUNCTION, socket_cb) != CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_SOCKETDATA, s) != CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_TIMERFUNCTION, timer_cb) != CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_TIMERDATA, s) != CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, o->max_connections) !=
            CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_MAX_HOST_CONNECTIONS, o->max_host_connections) !=
            CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX) != CURLM_OK)
        goto fail;
    /* curl's default keeps 4 idle connections per transfer in flight: when the load dips, the
     * rest are closed, and reopened moments later. Keep as many as we may open. */
    if (o->max_connections > 0 &&
        curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, o->max_connections) != CURLM_OK)
        goto fail;
    if (uv_timer_init(loop, &s->timer) != 0)
        goto fail;
    s->timer.data = s;
    s->open_handles = 1;
    *out = s;
    return 0;

fail:
    if (s->multi)
        curl_multi_cleanup(s->multi);
    free(s->ca_file);
    free(s);
    curl_global_cleanup();
    return -ENOMEM;
}

void http_sender_set_allow(http_sender *s, const netcheck_allow *allow)
{
    if (allow)
        s->allow = *allow;
    else
        s->allow.n = 0;
    s->allow_changed_ns = uv_hrtime();
}

size_t http_sender_in_flight(const http_sender *s)
{
    return s ? s->in_flight : 0;
}

/* Header values go on the wire verbatim: no CR/LF (header injection), no controls. */
static bool header_safe(const char *v)
{
    if (!v || !*v)
        return false;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if (*p < 0x21 || *p > 0x7e)
            return false;
    return true;
}

/* A tracestate may hold spaces and tabs inside (around its list-members), never at its ends
 * (HTTP would strip them); otherwise as header_safe. pgpace.item's CHECK allows no other. */
static bool tracestate_safe(const char *v)
{
    if (!v || !*v || *v == ' ' || *v == '\t')
        return false;
    const unsigned char *p = (const unsigned char *)v;
    for (; *p; p++)
        if ((*p < 0x20 || *p > 0x7e) && *p != '\t')
            return false;
    return p[-1] != ' ' && p[-1] != '\t';
}

/* The options every request of this object shares, set once when the object is made. */
static int easy_setup(http_req *r)
{
    CURL *e = r->easy;
    SETOPT(CURLOPT_PRIVATE, (void *)r);
    SETOPT(CURLOPT_HTTPHEADER, r->hdr);
    SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
    SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    SETOPT(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    SETOPT(CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    /* An environment proxy would make netcheck judge the proxy, not the destination. A
     * request through a proxy sets its own (http_send); the no-proxy choice is made by the
     * caller, never by curl from NO_PROXY. */
    SETOPT(CURLOPT_PROXY, "");
    SETOPT(CURLOPT_NOPROXY, "");
    SETOPT(CURLOPT_SSL_VERIFYPEER, 1L);
    SETOPT(CURLOPT_SSL_VERIFYHOST, 2L);
    /* Every connection of the sender trusts the same anchors, so this is no reason for curl
     * to keep connections apart. */
    if (r->s->ca_file) {
        SETOPT(CURLOPT_CAINFO, r->s->ca_file);
        /* Instead of the system's anchors, all of them: Debian's libcurl also searches a
         * compiled-in CA directory (/etc/ssl/certs) unless CAPATH is unset. */
        SETOPT(CURLOPT_CAPATH, (const char *)NULL);
    }
    /* Client certificates come as PEM blobs (http_send); the types stay set. */
    SETOPT(CURLOPT_SSLCERTTYPE, "PEM");
    SETOPT(CURLOPT_SSLKEYTYPE, "PEM");
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_ERRORBUFFER, r->errbuf);
    SETOPT(CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
    SETOPT(CURLOPT_OPENSOCKETDATA, (void *)r);
    SETOPT(CURLOPT_CLOSESOCKETFUNCTION, close_socket_cb);
    SETOPT(CURLOPT_CLOSESOCKETDATA, (void *)r->s);
    SETOPT(CURLOPT_WRITEFUNCTION, write_cb);
    SETOPT(CURLOPT_WRITEDATA, (void *)r);
    SETOPT(CURLOPT_HEADERFUNCTION, header_cb);
    SETOPT(CURLOPT_HEADERDATA, (void *)r);
    /* Not fatal: a libcurl without nghttp2 just speaks HTTP/1.1. */
    (void)curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    return 0;
fail:
    return -EINVAL;
}

/* A request object from the free list, or a new one. Per-request state is reset. */
http_req *hs_req_get(http_sender *s)
{
    http_req *r;
    if (!pgp_list_empty(&s->idle)) {
        r = pgp_list_entry(s->idle.next, http_req, link);
        pgp_list_remove(&r->link);
        s->n_idle--;
    } else {
        r = calloc(1, sizeof *r + s->o.excerpt_bytes);
        if (!r)
            return NULL;
        r->s = s;
        pgp_list_init(&r->link);
        r->hdr[HDR_CONTENT_TYPE].data = hdr_content_type;
        r->hdr[HDR_USER_AGENT].data = http_hdr_user_agent;
        r->hdr[HDR_EXPECT].data = http_hdr_expect;
        for (int i = 0; i < HDR_COUNT - 1; i++)
            r->hdr[i].next = &r->hdr[i + 1];
        r->hdr[HDR_EXPECT].next = NULL;
        r->easy = curl_easy_init();
        if (!r->easy || easy_setup(r) != 0) {
            hs_req_destroy(r);
            return NULL;
        }
    }
    r->excerpt_len = 0;
    r->received = 0;
    r->truncated = false;
    r->saw_response = false;
    r->have_retry_after = false;
    r->rl.present = 0;
    r->rl.unusable = false;
    r->connects_allowed = 0;
    r->proxied = false;
    r->resolving = false;
    r->orphaned = false;
    r->connect_to[0] = '\0';
    r->refused[0] = '\0';
    r->errbuf[0] = '\0';
    r->error[0] = '\0';
    return r;
}

/* Writes v in decimal (no NUL) and returns the length, at most 20 (snprintf costs more than
 * the rest of the header lines together). */
static size_t put_decimal(char *p, int64_t v)
{
    char tmp[20];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t len = 0;
    if (v < 0)
        p[len++] = '-';
    while (n)
        p[len++] = tmp[--n];
    return len;
}

/* Fills the varying Standard Webhooks header lines (webhook-id, webhook-timestamp,
 * webhook-signature) and the optional trace context lines into r->hbuf, which r's fixed
 * header nodes point into. */
static int build_headers(http_req *r, const http_request *req)
{
    static const char id_prefix[] = "webhook-id: ";
    static const char ts_prefix[] = "webhook-timestamp: ";
    static const char sig_prefix[] = "webhook-signature: ";
    static const char tp_prefix[] = "traceparent: ";
    static const char tstate_prefix[] = "tracestate: ";
    size_t id_len = strlen(req->webhook_id);
    /* id line + timestamp line (a long long is at most 20 digits and a sign) + signature line
     * ("v1,<sig>" or "v1a,<sig>" for each secret, space separated, each shorter than
     * SECRET_SIGNATURE_MAX) */
    size_t tp_len = req->traceparent ? strlen(req->traceparent) : 0;
    size_t ts_len = req->tracestate ? strlen(req->tracestate) : 0;
    size_t need = sizeof id_prefix + id_len + sizeof "webhook-timestamp: " + 21 +
                  sizeof sig_prefix + req->n_secrets * SECRET_SIGNATURE_MAX + sizeof tp_prefix +
                  tp_len + sizeof tstate_prefix + ts_len;
    if (need > r->hbuf_cap) {
        size_t cap = 512;
        while (cap < need)
            cap *= 2;
        free(r->hbuf);
        r->hbuf_cap = 0;
        r->hbuf = malloc(cap);
        if (!r->hbuf)
            return -ENOMEM;
        r->hbuf_cap = cap;
    }
    char *p = r->hbuf;
    r->hdr[HDR_ID].data = p;
    memcpy(p, id_prefix, sizeof id_prefix - 1);
    p += sizeof id_prefix - 1;
    memcpy(p, req->webhook_id, id_len + 1);
    p += id_len + 1;

    r->hdr[HDR_TIMESTAMP].data = p;
    memcpy(p, ts_prefix, sizeof ts_prefix - 1);
    p += sizeof ts_prefix - 1;
    p += put_decimal(p, req->timestamp_s);
    *p++ = '\0';

    r->hdr[HDR_SIGNATURE].data = p;
    memcpy(p, sig_prefix, sizeof sig_prefix - 1);
    p += sizeof sig_prefix - 1;
    for (size_t i = 0; i < req->n_secrets; i++) {
        char sig[SECRET_SIGNATURE_MAX];
        pgp_error err;
        const secret_key *key = req->keys ? req->keys[i] : NULL;
        int src = key ? secret_key_sign(key, req->webhook_id, req->timestamp_s, r->body,
                                        req->body_len, sig, &err)
                  : req->secrets[i]
                      ? secret_sign(req->secrets[i], req->webhook_id, req->timestamp_s, r->body,
                                    req->body_len, sig, &err)
                      : -EINVAL;
        if (src != 0)
            return -EINVAL;
        size_t sl = strlen(sig);
        if (i > 0)
            *p++ = ' ';
        memcpy(p, sig, sl);
        p += sl;
    }
    *p++ = '\0';

    /* The optional lines: linked after the fixed ones only when present (the pooled object's
     * links are whatever its previous request left, so they are set every time). */
    struct curl_slist **tail = &r->hdr[HDR_EXPECT].next;
    if (req->traceparent) {
        r->hdr[HDR_TRACEPARENT].data = p;
        memcpy(p, tp_prefix, sizeof tp_prefix - 1);
        p += sizeof tp_prefix - 1;
        memcpy(p, req->traceparent, tp_len + 1);
        p += tp_len + 1;
        *tail = &r->hdr[HDR_TRACEPARENT];
        tail = &r->hdr[HDR_TRACEPARENT].next;
    }
    if (req->tracestate) {
        r->hdr[HDR_TRACESTATE].data = p;
        memcpy(p, tstate_prefix, sizeof tstate_prefix - 1);
        p += sizeof tstate_prefix - 1;
        memcpy(p, req->tracestate, ts_len + 1);
        *tail = &r->hdr[HDR_TRACESTATE];
        tail = &r->hdr[HDR_TRACESTATE].next;
    }
    *tail = NULL;
    r->hdr_end = tail;
    return 0;
}

/* Destinations are checked when a connection opens. After the allow-list changed, a
 * connection opened under the old list must not be reused: for 2 s every request opens
 * its own, then reuse is limited to connections younger than the change. curl compares
 * whole seconds of age (floored) with "> max": a connection older than the change, at
 * t >= since_s seconds after it, has a floored age >= since_s, so since_s - 1 excludes it
 * (since_s itself would let one opened under a second before the change through). Both
 * options are set on every request: the easy handle keeps them from its last one. */
static int reuse_options(http_sender *s, CURL *e)
{
    long fresh = 0, max_life = 0;
    if (s->allow_changed_ns) {
        uint64_t since_s = (uv_hrtime() - s->allow_changed_ns) / 1000000000u;
        if (since_s < 2)
            fresh = 1;
        else
            max_life = since_s - 1 < (uint64_t)LONG_MAX ? (long)(since_s - 1) : LONG_MAX;
    }
    SETOPT(CURLOPT_FRESH_CONNECT, fresh);
    SETOPT(CURLOPT_MAXLIFETIME_CONN, max_life);
    return 0;
fail:
    return -EINVAL;
}

/* Points r's handle at `url`: a parsed copy (CURLOPT_CURLU), the one kept from r's last request
 * when it is the same URL. Parsed as curl parses a CURLOPT_URL string (url.c's flags), so the
 * transfer sees the same URL; one curl's parser refuses goes to curl as a string instead, and
 * fails the transfer as it did before. */
static int set_url(http_req *r, const char *url)
{
    CURL *e = r->easy;
    if (r->uh_url && r->uh_url[0] && strcmp(r->uh_url, url) == 0)
        return 0;
    size_t len = strlen(url);
    if (r->uh_url)
        r->uh_url[0] = '\0';
    if (!r->uh && (r->uh = curl_url()) == NULL)
        return -ENOMEM;
    /* Emptied first: curl_url_set would read a relative URL against the last one, where curl
     * parses each transfer's URL on its own. */
    if (curl_url_set(r->uh, CURLUPART_URL, NULL, 0) != CURLUE_OK ||
        curl_url_set(r->uh, CURLUPART_URL, url, CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) !=
            CURLUE_OK)
        goto as_string;
    if (len + 1 > r->uh_cap) {
        char *grown = realloc(r->uh_url, len + 1);
        if (!grown)
            goto as_string;
        r->uh_url = grown;
        r->uh_cap = len + 1;
    }
    SETOPT(CURLOPT_CURLU, r->uh);
    memcpy(r->uh_url, url, len + 1);
    return 0;
as_string:
    SETOPT(CURLOPT_CURLU, (CURLU *)NULL);
    SETOPT(CURLOPT_URL, url);
    return 0;
fail:
    return -EINVAL;
}

int hs_req_launch(http_sender *s, http_req *r, const hs_launch *l)
{
    CURL *e = r->easy;
    /* Only what differs between requests; easy_setup() set the rest. */
    int urc = set_url(r, l->url);
    if (urc < 0)
        return urc;
    SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)l->body_len);
    SETOPT(CURLOPT_POSTFIELDS, l->body);
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, l->connect_timeout_ms);
    SETOPT(CURLOPT_TIMEOUT_MS, l->total_timeout_ms);
    r->total_timeout_ms = l->total_timeout_ms;
    if (reuse_options(s, e) != 0)
        goto fail;
    int rc = hs_req_route(r, l->url, l->proxy);
    if (rc < 0)
        return rc;
    r->cb = l->cb;
    r->arg = l->arg;
    return hs_req_start(s, r);
fail:
    return -EINVAL;
}

int http_send(http_sender *s, const http_request *req, http_done_cb cb, void *arg)
{
    if (!s || !req || !cb || !req->url || !header_safe(req->webhook_id) ||
        (req->traceparent && !header_safe(req->traceparent)) ||
        (req->tracestate && !tracestate_safe(req->tracestate)) || req->n_secrets == 0 ||
        !req->secrets || (!req->body && req->body_len > 0) || req->total_timeout_ms <= 0 ||
        req->connect_timeout_ms < 0)
        return -EINVAL;
    if (s->closing)
        return -ESHUTDOWN;

    http_req *r = hs_req_get(s);
    if (!r)
        return -ENOMEM;
    CURL *e = r->easy;
    int rc;
    /* Not copied: the caller keeps the body until the callback (a dispatcher's delivery holds
     * the claim's result it points into). An empty body is sent from "": with a NULL
     * POSTFIELDS curl would read the body from a callback instead. */
    r->body = req->body_len ? req->body : "";
    if ((rc = build_headers(r, req)) < 0)
        goto fail_rc;

    rc = -EINVAL;
    /* Linked after the fixed nodes (the list curl has from easy_setup), referenced until
     * req_put: no allocation, and a reload of the customer cannot free it under curl. */
    if (req->headers) {
        r->extra = req->headers;
        r->extra->refs++;
        *r->hdr_end = r->extra->nodes;
    }
    /* The customer's certificate and key, from memory. NOCOPY: curl keeps only a pointer, and
     * the reference taken here keeps the object until req_put has unset both blobs, so the
     * copy per request (and the key's bytes in one more buffer curl does not wipe) is saved.
     * libcurl compares the certificate blob when it picks a connection to reuse
     * (Curl_ssl_config_matches), so a connection authenticated with this certificate goes to
     * no request without it (http_sender test and tests/integration/dispatch/test_mtls.c). */
    if (req->client_cert) {
        const char *cert, *key;
        size_t cert_len, key_len;
        client_cert_pem(req->client_cert, &cert, &cert_len, &key, &key_len);
        struct curl_blob cb_cert = {
            .data = (void *)(uintptr_t)cert, .len = cert_len, .flags = CURL_BLOB_NOCOPY};
        struct curl_blob cb_key = {
            .data = (void *)(uintptr_t)key, .len = key_len, .flags = CURL_BLOB_NOCOPY};
        r->cert = req->client_cert;
        client_cert_retain(r->cert);
        SETOPT(CURLOPT_SSLCERT_BLOB, &cb_cert);
        SETOPT(CURLOPT_SSLKEY_BLOB, &cb_key);
    }
    hs_launch l = {.url = req->url,
                   .body = r->body,
                   .body_len = req->body_len,
                   .connect_timeout_ms = req->connect_timeout_ms,
                   .total_timeout_ms = req->total_timeout_ms,
                   .proxy = req->proxy,
                   .cb = cb,
                   .arg = arg};
    if ((rc = hs_req_launch(s, r, &l)) < 0)
        goto fail_rc;
    return 0;

fail:
    rc = -EINVAL;
fail_rc:
    hs_req_put(r);
    return rc;
}

static void timer_closed_cb(uv_handle_t *h)
{
    hs_handle_closed(h->data);
}

void http_sender_close(http_sender *s, void (*closed_cb)(void *arg), void *arg)
{
    if (!s || s->closing)
        return;
    s->closing = true;
    s->closed_cb = closed_cb;
    s->closed_arg = arg;

    /* Abort in-flight requests. Callbacks may call http_send (refused: closing) or close
     * (a no-op now). */
    while (!pgp_list_empty(&s->reqs)) {
        http_req *r = pgp_list_entry(s->reqs.next, http_req, link);
        if (r->resolving) {
            /* libuv owns r->gai until resolved_cb runs (at once with UV_EAI_CANCELED if the
             * lookup had not started): r lives until then, its callback runs now. */
            uv_cancel((uv_req_t *)&r->gai);
            pgp_list_remove(&r->link);
            s->in_flight--;
            http_result res = {.error_class = "aborted", .error = "sender closed"};
            res.excerpt = r->excerpt;
            res.duration_ms = (double)(uv_hrtime() - r->start_ns) / 1e6;
            r->orphaned = true;
            r->cb(&res, r->arg);
            continue;
        }
        curl_multi_remove_handle(s->multi, r->easy);
        http_result res = {.error_class = "aborted", .error = "sender closed"};
        res.status = req_status(r);
        hs_req_finish(r, &res);
    }
    /* May still report REMOVE for cached connections' sockets, and closes them through
     * close_socket_cb: both close their contexts. */
    curl_multi_cleanup(s->multi);
    s->multi = NULL;
    while (!pgp_list_empty(&s->idle)) {
        http_req *r = pgp_list_entry(s->idle.next, http_req, link);
        pgp_list_remove(&r->link);
        hs_req_destroy(r);
    }
    s->n_idle = 0;
    while (!pgp_list_empty(&s->socks))
        sock_close(pgp_list_entry(s->socks.next, sock_ctx, link));
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, timer_closed_cb);
}
