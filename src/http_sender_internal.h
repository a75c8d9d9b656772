/* http_sender_internal.h - what the HTTP sender's modules share; not for other callers (they
 * use http_sender.h).
 *
 * - http_sender.c: the sender (one curl multi on the libuv loop), its sockets, the pool of
 *   request objects, and the webhook request (http_send): its headers and signatures.
 * - http_route.c: how a request leaves: direct, or through an egress proxy with its
 *   destination resolved, checked against the SSRF rules and pinned (hs_req_route), and how a
 *   started request reaches curl (hs_req_start); what a proxy's refusal means (hs_proxy_failed).
 * - http_form.c: form posts (http_post_form, OAuth2 token endpoints) on the same objects.
 * - http_headers.c: a customer's extra header lines (http_headers), shared by its requests.
 * Single-threaded: the loop's thread.
 */
#ifndef PGPACE_HTTP_SENDER_INTERNAL_H
#define PGPACE_HTTP_SENDER_INTERNAL_H

#include "http_sender.h"
#include "list.h"
#include "proxy.h"
#include "ratelimit_header.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct sock_ctx sock_ctx;
typedef struct http_req http_req;

/* The RateLimit / X-RateLimit-* fields of a response (ratelimit_header.h), copied as they
 * arrive: repeated lines of one field joined with ", " (RFC 9110 §5.3), each field bounded.
 * The two structured IETF fields may list several policies, hence the longer buffers. */
#define HS_RL_FIELDS    9
#define HS_RL_LONG_MAX  512 /* RateLimit-Policy, RateLimit */
#define HS_RL_SHORT_MAX 64  /* the single-number fields */
typedef struct hs_ratelimit {
    unsigned present; /* bit i: field i (http_sender.c's table) arrived */
    size_t len[HS_RL_FIELDS];
    bool unusable; /* a value was cut short or held a control byte */
    char policy[HS_RL_LONG_MAX], ratelimit[HS_RL_LONG_MAX];
    char limit[HS_RL_SHORT_MAX], remaining[HS_RL_SHORT_MAX], reset[HS_RL_SHORT_MAX];
    char x_limit[HS_RL_SHORT_MAX], x_remaining[HS_RL_SHORT_MAX], x_reset[HS_RL_SHORT_MAX];
    char x_reset_after[HS_RL_SHORT_MAX];
    rl_raw raw; /* what http_result.ratelimit points at, filled when the request ends */
} hs_ratelimit;

struct http_sender {
    uv_loop_t *loop;
    CURLM *multi;              /* NULL once closing has cleaned it up */
    uv_timer_t timer;          /* curl's single timeout */
    http_sender_options o;     /* copy; o.allow points at `allow` */
    netcheck_allow allow;      /* copy of the caller's allow-list */
    char *ca_file;             /* copy of o.ca_file; NULL: the system's CA bundle */
    uint64_t allow_changed_ns; /* uv_hrtime() of the last allow-list change; 0 = never */
    pgp_list reqs;             /* in-flight requests (http_req.link) */
    size_t in_flight;
    pgp_list idle;    /* request objects ready for reuse (http_req.link) */
    size_t n_idle;    /* length of idle */
    size_t pool_max;  /* idle is kept at most this long */
    pgp_list socks;   /* open (not yet closing) socket contexts (sock_ctx.link) */
    sock_ctx **by_fd; /* open socket contexts by descriptor (n_by_fd slots), to find parked ones */
    size_t n_by_fd;
    size_t open_handles; /* uv handles not yet through their close callback */
    bool closing;
    void (*closed_cb)(void *arg);
    void *closed_arg;
};

/* Header nodes of a request: curl reads the list, never frees or changes it. The nodes up to
 * HDR_EXPECT are in every request; the optional ones after it are linked in by build_headers
 * for the requests that carry them, so that a request without them has no such header. */
enum {
    HDR_CONTENT_TYPE,
    HDR_USER_AGENT,
    HDR_ID,
    HDR_TIMESTAMP,
    HDR_SIGNATURE,
    HDR_EXPECT,
    HDR_TRACEPARENT,
    HDR_TRACESTATE,
    HDR_COUNT
};

struct http_req {
    pgp_list link; /* in s->reqs while in flight, in s->idle while pooled */
    http_sender *s;
    CURL *easy; /* created with the object, reused by every request it carries */
    /* The last URL parsed for this object, kept parsed: curl parses a CURLOPT_URL string anew
     * for every transfer (curl_url_set and curl_url_get were 1.6 us of libcurl's 12 us per
     * delivery), and the next request of a pooled object usually goes to the same URL. */
    CURLU *uh;     /* set on the handle (CURLOPT_CURLU) when uh_url[0]; or NULL */
    char *uh_url;  /* the URL uh holds ("" none: the handle has CURLOPT_URL instead) */
    size_t uh_cap; /* uh_url's size */
    struct curl_slist hdr[HDR_COUNT]; /* the last one linked links to extra->nodes in flight */
    struct curl_slist **hdr_end;      /* that last node's next, set by build_headers */
    http_headers *extra;              /* the customer's extra headers, referenced; or NULL */
    client_cert *cert; /* the customer's client certificate, referenced while curl may read it
                          (CURL_BLOB_NOCOPY); or NULL, and then none is set on the handle */
    char *hbuf;        /* the varying header lines (id, timestamp, signatures), NUL-separated */
    size_t hbuf_cap;
    const char *body; /* what curl sends: the caller's, borrowed until the callback */
    size_t excerpt_len;
    size_t received;   /* response body bytes accepted (<= max_response_bytes) */
    bool truncated;    /* body exceeded max_response_bytes: transfer stopped on purpose */
    bool saw_response; /* a status line arrived: CURLINFO_RESPONSE_CODE is this request's */
    bool have_retry_after;
    char retry_after[128];
    hs_ratelimit rl;           /* the answer's RateLimit / X-RateLimit-* fields */
    unsigned connects_allowed; /* sockets opened after a netcheck pass */
    char refused[192];         /* first SSRF refusal, "" if none */
    char errbuf[CURL_ERROR_SIZE];
    char error[CURL_ERROR_SIZE + 256];
    uint64_t start_ns;
    /* form requests (http_post_form) */
    bool form;
    struct curl_slist fnodes[5]; /* content-type, accept, user-agent, Expect:, authorization */
    char *fbuf;                  /* the form, then the Authorization line: secrets */
    size_t fbuf_len;
    char *rbody; /* the response body, up to rbody_max bytes */
    size_t rbody_len, rbody_max;
    http_done_cb cb;
    void *arg;
    /* Through a proxy (http_sender.h): the destination is resolved and checked first, then
     * pinned with a CONNECT_TO entry. */
    bool proxied;   /* this request goes through `proxy` */
    bool proxy_set; /* the easy handle holds proxy options (from this or an earlier request) */
    bool resolving; /* its uv_getaddrinfo is pending */
    bool orphaned;  /* aborted by http_sender_close while resolving: the resolve callback frees
                       it (libuv still owns `gai` until then) */
    uv_getaddrinfo_t gai;
    long total_timeout_ms; /* the request's, which the lookup counts against */
    long dest_port;
    char proxy[PROXY_URL_MAX + 1];
    char dest_host[PROXY_HOST_MAX + 3]; /* the URL's host as curl reads it ("[v6]" bracketed) */
    char connect_to[2 * (PROXY_HOST_MAX + 3) + 16];
    struct curl_slist connect_to_node;
    char excerpt[]; /* first excerpt_bytes of the response body */
};

/* A customer's extra headers: one allocation holding the nodes and the lines they point to. */
struct http_headers {
    unsigned refs;
    size_t n;
    struct curl_slist nodes[]; /* n nodes, then the lines, NUL-terminated */
};

/* Sets a curl option on the easy handle `e` in scope, or jumps to the caller's `fail` label. */
#define SETOPT(opt, val)                                                                           \
    do {                                                                                           \
        if (curl_easy_setopt(e, opt, val) != CURLE_OK)                                             \
            goto fail;                                                                             \
    } while (0)

/* Header lines every request carries (curl_slist.data is char *; curl only reads them). */
extern char http_hdr_user_agent[];
extern char http_hdr_expect[];

/* ---- http_sender.c ---- */

/* A request object from the pool (or a new one); NULL: no memory. */
http_req *hs_req_get(http_sender *s);
/* Back to the pool (or freed): what the request held is released, its options reset. */
void hs_req_put(http_req *r);
/* Frees a request object and its easy handle. */
void hs_req_destroy(http_req *r);
/* Unlinks r, runs its callback once with `res` filled in, releases it. */
void hs_req_finish(http_req *r, http_result *res);
/* A uv handle of the sender went through its close callback. */
void hs_handle_closed(http_sender *s);

/* What differs between two requests carried by the same object, besides its headers. */
typedef struct hs_launch {
    const char *url;
    const char *body; /* sent as is, borrowed until the callback */
    size_t body_len;
    long connect_timeout_ms, total_timeout_ms;
    const char *proxy; /* NULL or "": direct */
    http_done_cb cb;
    void *arg;
} hs_launch;
/* Sets those options, routes and starts r. Returns 0 (the callback will run) or a negative
 * error, and then the caller puts r back. */
int hs_req_launch(http_sender *s, http_req *r, const hs_launch *l);

/* ---- http_route.c ---- */

/* The route of r: through `proxy` (its destination parsed for the check) or direct; clears the
 * proxy options a pooled handle kept from an earlier request. */
int hs_req_route(http_req *r, const char *url, const char *proxy);
/* Hands r (options, cb and arg set) to curl, or a proxied one first to the resolver. Returns 0
 * (its callback will run) or a negative error. */
int hs_req_start(http_sender *s, http_req *r);
/* A proxied request's failure that is the proxy's ("proxy") or a 502/504 CONNECT answer
 * ("connect"), with r->error written; NULL when it was not the proxy. */
const char *hs_proxy_failed(http_req *r, CURLcode code);

#endif
