/* http_sender.h - webhook POSTs over libcurl multi, driven by the libuv loop.
 *
 * Contract:
 * - CURLMOPT_SOCKETFUNCTION/TIMERFUNCTION map curl's sockets onto uv_poll_t (one context per
 *   socket, both directions for CURL_POLL_INOUT, poll errors passed as CURL_CSELECT_ERR) and
 *   its timer onto one uv_timer_t. Nothing blocks the loop; DNS is asynchronous (curl's
 *   threaded resolver).
 * - Each request is a POST of the body as given with the Standard Webhooks headers:
 *   webhook-id, webhook-timestamp, webhook-signature ("v1,<sig>" per active secret, space
 *   separated, signed by secret.h), content-type: application/json, user-agent
 *   "pgpace/<version>"; traceparent and tracestate when the request carries them (an item's
 *   W3C Trace Context), none when it does not; then the customer's extra header lines
 *   (http_headers: static headers and its Authorization), which cost no allocation per request.
 *   No redirects, only http/https, TLS verification on, connect and total timeouts per request,
 *   keep-alive reuse, total and per-host connection limits, HTTP/2 over TLS where offered.
 * - Mutual TLS: a request may carry its customer's client_cert (client_cert.h), presented from
 *   memory (CURLOPT_SSLCERT_BLOB/SSLKEY_BLOB, PEM) and referenced until its callback; a pooled
 *   handle forgets it when the request ends, so the next request on it presents none unless it
 *   brings its own. A kept-alive TLS connection goes only to a request with the same client
 *   certificate (libcurl compares the certificate blob when it looks for a connection to reuse),
 *   never to another customer's or one without. Trust anchors: options.ca_file, else the
 *   system's CA bundle.
 * - Every connect is checked against netcheck (CURLOPT_OPENSOCKETFUNCTION) on the address
 *   actually connected to; a refused address fails the request with error_class "ssrf".
 * - Through a proxy (http_request.proxy): the connection goes to the proxy, whose address is
 *   the operator's choice and is not checked. The destination is: before the request, its host
 *   is resolved here (uv_getaddrinfo on the loop's thread pool; an IP literal as it is), the
 *   first address netcheck allows is kept (none allowed: error_class "ssrf", and the proxy is
 *   never contacted), and the proxy is asked to CONNECT to that IP and the URL's port
 *   (CURLOPT_CONNECT_TO), so it cannot resolve the name to anything else. Always a CONNECT
 *   tunnel (CURLOPT_HTTPPROXYTUNNEL, http:// URLs too): the proxy sees "CONNECT ip:port" and,
 *   for https, only TLS, whose SNI and certificate check use the URL's host name. A proxy that
 *   cannot be reached or refuses the CONNECT (a non-2xx answer) fails the request with
 *   error_class "proxy". The environment's proxy variables are never used.
 * - The response body is read up to max_response_bytes; the first bytes (excerpt) are kept.
 *   Retry-After and the rate limit fields (RateLimit-Policy, RateLimit, RateLimit-Limit/
 *   -Remaining/-Reset, X-RateLimit-Limit/-Remaining/-Reset/-Reset-After) are kept in bounded
 *   copies for the callback (http_result.retry_after, .ratelimit); the sender does not read
 *   them: rl_parse (ratelimit_header.h) does, with the caller's clock and bounds.
 * - The done callback runs exactly once per accepted request, from the loop, never from inside
 *   http_send(). Secrets and bodies are never logged.
 * - http_post_form() is the other kind of request, for a customer's OAuth2 token endpoint: a
 *   POST of an application/x-www-form-urlencoded body with "accept: application/json", the
 *   user-agent and an optional Authorization, no webhook headers. The same multi, connection
 *   limits, SSRF check, proxy handling, TLS verification and timeout handling as webhooks; the
 * response body is kept whole up to its max_body (more fails the request with error_class
 * "too_large") and handed to the callback as http_result.body.
 */
#ifndef PGPACE_HTTP_SENDER_H
#define PGPACE_HTTP_SENDER_H

#include "client_cert.h"
#include "common.h"
#include "netcheck.h"
#include "ratelimit_header.h"
#include "secret.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct http_sender http_sender;

typedef struct http_sender_options {
    long max_connections;        /* CURLMOPT_MAX_TOTAL_CONNECTIONS, and idle ones kept at most */
    long max_host_connections;   /* CURLMOPT_MAX_HOST_CONNECTIONS */
    size_t max_response_bytes;   /* body bytes read at most (rest: transfer ends, not an error) */
    size_t excerpt_bytes;        /* body bytes kept for the attempt log (<= max_response_bytes) */
    const netcheck_allow *allow; /* SSRF allow-list (copied); NULL = empty */
    const char *ca_file;         /* PEM CA bundle verifying receivers (copied); NULL or "": the
                                    system's default */
} http_sender_options;

/* A customer's extra header lines ("Name: value", the Authorization one included), built once
 * when the customer is (re)loaded and linked after the request's own header nodes, so a request
 * pays nothing for them. Reference-counted: the creator holds one reference, each request in
 * flight another (taken in http_send, dropped after its callback), so a customer reloaded or
 * deleted while its requests are in flight can release its set at once. Single-threaded (the
 * loop's thread), like the sender. The values are secrets: never logged. */
typedef struct http_headers http_headers;

/* Builds a set from LF-separated lines (as run_customers.sql gives them). "" or NULL gives
 * *out = NULL: no extra headers. Each line needs a colon and no control character other than
 * tab (the database refused them already; this keeps the sender safe from any other caller).
 * Returns 0, -EINVAL (a bad line, more than HTTP_HEADERS_MAX lines) or -ENOMEM. */
#define HTTP_HEADERS_MAX 32
int http_headers_new(const char *lines, http_headers **out) PGP_MUST_CHECK;
/* Drops a reference; the set is freed with its last one. NULL is a no-op. */
void http_headers_release(http_headers *h);

typedef struct http_request {
    const char *url;
    const char *body; /* JSON text as stored: not copied, so it must stay valid (and unchanged)
                         until the done callback runs (or http_send fails) */
    size_t body_len;
    const char *webhook_id;     /* stable across retries of one item */
    const char *traceparent;    /* W3C Trace Context headers, sent verbatim when not NULL; */
    const char *tracestate;     /* copied (like webhook_id), printable ASCII (tracestate: and
                                   spaces, tabs) or the request is refused */
    int64_t timestamp_s;        /* webhook-timestamp (epoch seconds) */
    const char *const *secrets; /* whsec_/whsk_ secrets, n_secrets of them, newest first */
    /* Optional: the same secrets parsed (secret.h), n_secrets of them, so that nothing is
     * decoded (and no Ed25519 key derived) per request; a NULL array or entry: parsed here. */
    const secret_key *const *keys;
    size_t n_secrets;
    long connect_timeout_ms;
    long total_timeout_ms;
    http_headers *headers;    /* extra header lines, or NULL; referenced until the callback */
    client_cert *client_cert; /* mutual TLS certificate and key, or NULL; referenced until the
                                 callback */
    const char *proxy;        /* "http://host:port" (proxy.h), copied; NULL or "": direct */
} http_request;

typedef struct http_result {
    long status;             /* HTTP status, 0 when no response was received */
    const char *error_class; /* NULL on a received response; else "dns", "connect", "timeout",
                                "tls", "reset", "protocol", "ssrf", "proxy", "too_large",
                                "aborted", "internal" */
    const char *error;       /* human-readable detail ("" when none) */
    const char *excerpt;     /* response body excerpt (not NUL-terminated; excerpt_len bytes) */
    size_t excerpt_len;
    const char *retry_after; /* Retry-After header value, or NULL */
    double duration_ms;      /* from send to completion */
    const char *body;        /* http_post_form: the whole response body (not NUL-terminated),
                                body_len bytes; NULL for webhooks */
    size_t body_len;
    /* The response's RateLimit-Policy, RateLimit, RateLimit-Limit/-Remaining/-Reset and
     * X-RateLimit-Limit/-Remaining/-Reset/-Reset-After values for rl_parse(), or NULL when it
     * had none of them. Names matched case-insensitively; a field's repeated lines joined with
     * ", "; a value longer than its buffer (512 bytes for RateLimit-Policy and RateLimit, 64 for
     * the others) or holding a control byte sets .truncated (rl_parse: "malformed"). Only the
     * final response's fields (not a 1xx's). */
    const rl_raw *ratelimit;
} http_result;

/* The result and its strings are valid only during the callback. */
typedef void (*http_done_cb)(const http_result *r, void *arg);

int http_sender_new(uv_loop_t *loop, const http_sender_options *o,
                    http_sender **out) PGP_MUST_CHECK;

/* Starts a request. Returns 0 (cb will run once) or a negative error (cb will not run). */
int http_send(http_sender *s, const http_request *req, http_done_cb cb, void *arg) PGP_MUST_CHECK;

/* A form POST (see the contract). The form and authorization are copied (and wiped when the
 * request ends: they hold the client secret); neither may hold a CR or LF. */
typedef struct http_form_request {
    const char *url;
    const char *form;          /* the urlencoded body */
    const char *authorization; /* the Authorization value ("Basic ..."), or NULL */
    const char *proxy;         /* as http_request.proxy: NULL or "" direct */
    long connect_timeout_ms;
    long total_timeout_ms;
    size_t max_body; /* response body bytes kept at most (1..1 MiB) */
} http_form_request;

/* Starts a form request. Returns 0 (cb will run once, from the loop) or a negative error. */
int http_post_form(http_sender *s, const http_form_request *req, http_done_cb cb,
                   void *arg) PGP_MUST_CHECK;

size_t http_sender_in_flight(const http_sender *s);

/* Replaces the SSRF allow-list (copied) for connections opened from now on (config reload). */
void http_sender_set_allow(http_sender *s, const netcheck_allow *allow);

/* Aborts in-flight requests (their callbacks run with error_class "aborted"), closes every
 * handle and frees the sender; closed_cb runs when done. */
void http_sender_close(http_sender *s, void (*closed_cb)(void *arg), void *arg);

#endif
