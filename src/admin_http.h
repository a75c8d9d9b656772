/* admin_http.h - the admin HTTP endpoint on the libuv loop: GET /metrics, /healthz, /readyz,
 * the live status page (GET / and GET /v1/status), POST /v1/items (HTTP enqueue), the management
 * API under /v1 with its OpenAPI document (GET /v1/openapi.json), and the tenant page (GET
 * /portal and its API under /v1/portal).
 *
 * Contract:
 * - One listening TCP socket on opts->listen ("127.0.0.1:9187", "[::1]:9187"; numeric
 *   addresses only; port 0 picks a free port, see admin_http_port()). HTTP/1.1 with keep-alive
 *   and pipelining: requests on one connection are answered in order, one at a time (the next
 *   is not parsed before the previous answer is written), so each connection has at most one
 *   enqueue in flight and reads stop meanwhile (back-pressure).
 * - The server knows nothing of the dispatcher: it calls the admin_http_callbacks it was given.
 *   Any callback may be NULL (/metrics then answers 503, /readyz 503 "starting", enqueue is
 *   disabled).
 * - Limits: request line + headers at most ADMIN_HTTP_MAX_HEADER bytes (431); body at most
 *   max_body_bytes (413, also announced by Content-Length or hit while reading a chunked
 *   body); at most max_connections connections (more are accepted and closed at once); and
 *   idle_timeout_ms per connection for each phase: waiting for a request, receiving it (from
 *   its first byte to its last, so a client trickling bytes cannot hold a connection), and
 *   having the answer read. Waiting for the enqueue callback has no timeout (pgconn answers
 *   every statement). Answers that end a connection (parse errors, 413, 431, early rejections
 *   of a request with a body) are followed by a lingering close (shutdown, read and discard for
 *   up to 2 s) so the client sees the answer rather than a reset.
 * - POST /v1/items, in order: 503 when no enqueue_token is configured; 401 (with
 *   WWW-Authenticate: Bearer) unless "Authorization: Bearer <token>" matches (constant-time
 *   comparison); 415 unless the media type is application/json; 413 over the limit; 400 for a
 *   NUL byte in the body; then callbacks.enqueue(), whose admin_http_reply_send() gives the
 *   answer. "Expect: 100-continue" is honoured once the headers pass these checks.
 * - GET / serves the embedded status page (status_page.h, with its Content-Security-Policy);
 *   GET /v1/status hands its query string to callbacks.status, whose admin_http_reply_send()
 *   gives the answer. When a status token is set, both need "Authorization: Bearer <token>" or
 *   HTTP Basic with any user name and the token as password (constant-time comparison), else
 *   401: for / with WWW-Authenticate: Basic, so that a browser asks for it and then sends it with
 *   the page's polls too; for /v1/status with a Bearer challenge, which no browser prompts for
 *   (a poll answered with a Basic one would wait for a prompt). Without a token they are open
 *   like /metrics (the listener's address is the protection: loopback by default).
 * - The management API (GET, POST, PATCH, DELETE of /v1/customers, /v1/carriers, /v1/hosts,
 *   /v1/events, /v1/deliveries, /v1/dead-letters, /v1/stats and below) and the tenant page's API
 *   (/v1/portal...): checked as admin_api.c says (tokens and scopes, content type, size, NUL,
 *   duplicate members, path and query decoding), then handed to callbacks.api, whose
 *   admin_http_reply_api() gives the answer; errors are application/problem+json. GET
 *   /v1/openapi.json (the API's document) and GET /portal (the tenant page, with its CSP) are
 *   open: they hold no data.
 * - Wrong method: 405 with Allow; unknown path: 404. Every answer is JSON except /metrics, / and
 *   /portal.
 * - The tokens, tenant links and bodies never reach the log.
 */
#ifndef PGPACE_ADMIN_HTTP_H
#define PGPACE_ADMIN_HTTP_H

#include "common.h"
#include "pgconn.h"
#include "strbuf.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#define ADMIN_HTTP_MAX_HEADER        16384
#define ADMIN_HTTP_DEFAULT_LISTEN    "127.0.0.1:9187"
#define ADMIN_HTTP_DEFAULT_MAX_BODY  1048576
#define ADMIN_HTTP_DEFAULT_IDLE_MS   10000
#define ADMIN_HTTP_DEFAULT_MAX_CONNS 256

typedef struct admin_http admin_http;
/* One pending answer to POST /v1/items. */
typedef struct admin_http_reply admin_http_reply;

typedef struct admin_http_readiness {
    bool ready;
    const char *role;   /* "leader", "standby" or "starting" */
    const char *reason; /* when not ready, e.g. "database unreachable" */
} admin_http_readiness;

/* One request of the management API: GET, POST, PATCH or DELETE of a path under /v1/ other
 * than /v1/items, /v1/status and /v1/openapi.json (see admin_api.c for the checks made before
 * it is handed on). Valid during the callback only. */
typedef struct admin_http_api_request {
    const char *method;   /* "GET" (also for HEAD), "POST", "PATCH" or "DELETE" */
    const char *segments; /* the path after /v1/ as a JSON array of its percent-decoded segments */
    const char *query;    /* the query string as a JSON object of (decoded) strings */
    const char *body;     /* NUL-terminated text of body_len bytes, or NULL for none */
    size_t body_len;
    const char *actor;           /* "token:NAME" (an API token), or "portal" (a tenant page) */
    const char *if_match;        /* the If-Match header, or NULL */
    const char *idempotency_key; /* the Idempotency-Key header, or NULL */
    const char *portal_token;    /* a tenant page's bearer token (unchecked), or NULL */
} admin_http_api_request;

/* The answer to one: a status, optional ETag, Location and Allow values, and a JSON body (NULL:
 * none, as for 204). Bodies of statuses from 400 on go out as application/problem+json. */
typedef struct admin_http_api_answer {
    int status;
    const char *etag, *location, *allow;
    const char *body;
} admin_http_api_answer;

typedef struct admin_http_callbacks {
    /* GET /metrics: appends the exposition text to out; 0, or -errno for a 500. */
    int (*render_metrics)(void *arg, strbuf *out);
    /* GET /readyz: 200 when out->ready, else 503. */
    void (*readiness)(void *arg, admin_http_readiness *out);
    /* POST /v1/items, after the checks above. body is NUL-terminated (len bytes, no NUL
     * inside) and valid during the call only. The callee must call admin_http_reply_send()
     * exactly once, during the call or later; the reply outlives the connection (the answer
     * is then dropped). */
    void (*enqueue)(void *arg, const char *body, size_t len, admin_http_reply *reply);
    /* GET /v1/status, after the token check. query is what follows '?' up to any '#' ("" when
     * none), valid during the call only. The callee calls admin_http_reply_send() exactly once,
     * as for enqueue. NULL: 503. */
    void (*status)(void *arg, const char *query, admin_http_reply *reply);
    /* A management API or tenant page request, after the token, scope, content-type, size,
     * NUL-byte and duplicate-member checks. The callee calls admin_http_reply_api() exactly
     * once, as for enqueue. NULL: 503. */
    void (*api)(void *arg, const admin_http_api_request *req, admin_http_reply *reply);
    /* After each answer is queued, for metrics: route is "/metrics", "/healthz", "/readyz",
     * "/v1/items", "/", "/v1/status" or "other"; seconds from the request's first byte. */
    void (*request_done)(void *arg, const char *route, int status, double seconds);
    void *arg;
} admin_http_callbacks;

typedef struct admin_http_options {
    const char *listen;        /* "host:port" or "[v6 host]:port" (copied) */
    const char *enqueue_token; /* bearer token for POST /v1/items; NULL or "" = disabled */
    const char *status_token;  /* protects / and /v1/status; NULL or "" = open */
    size_t max_body_bytes;     /* 0 = ADMIN_HTTP_DEFAULT_MAX_BODY */
    int idle_timeout_ms;       /* 0 = ADMIN_HTTP_DEFAULT_IDLE_MS */
    int max_connections;       /* 0 = ADMIN_HTTP_DEFAULT_MAX_CONNS */
    /* Origins that may frame the tenant page ("https://a.example https://b.example"); NULL or
     * "" = none (frame-ancestors 'none'). */
    const char *portal_frame_ancestors;
} admin_http_options;

/* Checks the options and creates the server (not yet listening). Errors name the option:
 * "[http] listen: expected host:port or [host]:port with a numeric address, got 'x'". */
int admin_http_new(uv_loop_t *loop, const admin_http_options *opts,
                   const admin_http_callbacks *callbacks, admin_http **out,
                   pgp_error *err) PGP_MUST_CHECK;

/* Binds and listens. On failure (e.g. address in use) the caller still closes the server. */
int admin_http_start(admin_http *s, pgp_error *err) PGP_MUST_CHECK;

/* Replaces the enqueue token (a configuration reload): "" disables POST /v1/items. Requests
 * already past the check are not affected. 0 or -ENOMEM (the old token stays). */
int admin_http_set_token(admin_http *s, const char *token) PGP_MUST_CHECK;

/* Replaces the status token (a reload): "" leaves / and /v1/status open. 0 or -ENOMEM. */
int admin_http_set_status_token(admin_http *s, const char *token) PGP_MUST_CHECK;

/* API tokens (pgpace token create, migration 0021): the SHA-256 of each active token's text and
 * the scopes it grants. A request's bearer token is hashed and compared with every entry in
 * constant time; a known token without the route's scope is answered 403, an unknown one 401.
 * They add to the configured enqueue_token and status_token, which keep working. */
enum {
    ADMIN_SCOPE_ENQUEUE = 1u << 0, /* POST /v1/items */
    ADMIN_SCOPE_READ = 1u << 1,
    ADMIN_SCOPE_WRITE = 1u << 2,
    ADMIN_SCOPE_STATUS = 1u << 3, /* GET / and /v1/status */
};
typedef struct admin_http_token {
    unsigned char hash[32];
    unsigned scopes; /* ADMIN_SCOPE_* */
    char name[129];  /* who, for the audit of API writes */
} admin_http_token;

/* Replaces the API tokens (a copy of n entries; n 0: none). 0 or -ENOMEM (the old set stays). */
int admin_http_set_api_tokens(admin_http *s, const admin_http_token *tokens,
                              size_t n) PGP_MUST_CHECK;

/* Whether the listener's address is a loopback one (127.0.0.0/8 or ::1). */
bool admin_http_is_loopback(const admin_http *s);

/* The bound port (useful with port 0), or a negative errno when not listening. */
int admin_http_port(const admin_http *s);

/* Open connections. */
size_t admin_http_connections(const admin_http *s);

/* Stops listening and closes every connection; pending replies are detached. The server is
 * freed after its handles closed, then closed_cb(arg) runs (never from inside this call). */
void admin_http_close(admin_http *s, void (*closed_cb)(void *arg), void *arg);

/* Answers a pending POST with status and a JSON body (copied). Frees the reply. */
void admin_http_reply_send(admin_http_reply *reply, int status, const char *json);

/* Answers a pending API request (admin_http_api_answer's strings are copied). Frees the reply. */
void admin_http_reply_api(admin_http_reply *reply, const admin_http_api_answer *answer);

/* The same with the reply as a void pointer: an admin_http_enqueue_cb. */
void admin_http_reply_done(void *reply, int status, const char *json);

typedef void (*admin_http_enqueue_cb)(void *arg, int status, const char *json);

/* How deeply a payload may nest arrays and objects, on every enqueue path: pgpace.enqueue_item
 * (sql/functions/05_enqueue.sql) refuses deeper with 54000, and the HTTP path refuses a body
 * deeper than this plus one (its own object) before the database. PostgreSQL parses and walks
 * JSON recursively: at its smallest max_stack_depth (100 kB) it parses about 620 levels and
 * its jsonpath walks 470, at the default (2 MB) about 13,000. 256 stays clear of both at any
 * setting, so a payload the database could parse meets this limit and its message rather than
 * "stack depth limit exceeded" (54001); and it is far beyond what a webhook payload needs. */
#define ADMIN_HTTP_PAYLOAD_MAX_DEPTH 256

/* Runs sql/queries/http_enqueue.sql (pgpace.enqueue_json) on db and calls cb(arg, status,
 * json) once with the answer: 201 {"id":N}, 200 {"id":N,"duplicate":true}; 400 {"error":...}
 * for what the body caused: nesting over the limit above (answered from inside this call,
 * before the database), SQLSTATE classes 22, 23 (but 23505) and 54, and P0001, with the
 * server's one-line message; 503 when the connection was lost, the database is unavailable
 * (classes 08, 53, 57P, 57014 and 55P03 timeouts, 25006 read-only) or a concurrent call
 * conflicted (class 40, 23505); 500 otherwise. On failure (-ENOTCONN when db is not ready,
 * -ENOMEM, -EINVAL for a NUL byte in body) cb never runs and the caller answers itself. */
int admin_http_enqueue_sql(pgconn *db, const char *body, size_t len, admin_http_enqueue_cb cb,
                           void *arg) PGP_MUST_CHECK;

/* The answer for an http_enqueue.sql result (NULL = connection lost): returns the status and
 * appends the JSON body to json. Exposed for tests. */
int admin_http_enqueue_answer(const PGresult *res, strbuf *json);

#endif
