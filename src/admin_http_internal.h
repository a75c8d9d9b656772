/* admin_http_internal.h - what the files of the admin HTTP endpoint share: the server and
 * connection structs, and the calls between the parts. Private to them; the public contract is
 * admin_http.h.
 *
 * Who owns what:
 * - admin_http.c          the server: options, the listener and its connection limit, each
 *                         connection's lifetime (timer, reads, close), and writing answers
 *                         (keep-alive or lingering close after them).
 * - admin_http_request.c  one request: http-parser callbacks and header limits, early answers,
 *                         routing, and the answers of /metrics, /healthz, /readyz, /v1/items.
 * - admin_enqueue.c       POST /v1/items over pgconn: the enqueue statement and its answer.
 * - admin_api.c           the management API's and the tenant page's requests: their routes,
 *                         token and scope checks, the path and query as JSON for the callback,
 *                         and their answers; GET /v1/openapi.json and GET /portal.
 *
 * Contract between them:
 * - Everything runs on the loop thread. A conn belongs to admin_http.c: created on accept,
 *   freed after ahttp_conn_close() once its handles closed (never inside that call).
 * - Calls that may close the conn (ahttp_respond*, ahttp_parse_input) leave it allocated;
 *   callers check c->state == CONN_CLOSING before doing more with it.
 * - An answer is queued by ahttp_respond() (CONN_WRITING); the parser stays paused until that
 *   write completes, when admin_http.c resumes it with ahttp_parse_input() on what arrived
 *   meanwhile (c->pending).
 */
#ifndef PGPACE_ADMIN_HTTP_INTERNAL_H
#define PGPACE_ADMIN_HTTP_INTERNAL_H

#include "admin_http.h"
#include "list.h"
#include "strbuf.h"

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define READ_BUF_BYTES 16384

/* What a connection is doing; decides what the timer and reads mean. */
typedef enum conn_state {
    CONN_IDLE,     /* waiting for a request's first byte */
    CONN_READING,  /* inside a request */
    CONN_HANDLING, /* request complete, waiting for its answer (the enqueue callback) */
    CONN_WRITING,  /* answer queued on the socket */
    CONN_LINGER,   /* answer written, write side shut down, discarding input until EOF */
    CONN_CLOSING,
} conn_state;

/* The headers the server looks at. */
typedef enum hdr {
    HDR_OTHER,
    HDR_AUTHORIZATION,
    HDR_CONTENT_TYPE,
    HDR_EXPECT,
    HDR_IF_MATCH,
    HDR_IDEMPOTENCY_KEY
} hdr;

typedef struct conn {
    uv_tcp_t tcp;     /* data = this */
    uv_timer_t timer; /* the per-phase timeout; data = this */
    uv_write_t write_req;
    uv_write_t continue_req; /* "100 Continue" */
    uv_shutdown_t shutdown_req;
    int open_handles; /* tcp and timer; the conn is freed when both closed */
    admin_http *srv;
    pgp_list link; /* srv->conns */
    conn_state state;
    bool reading; /* uv_read_start in effect */
    http_parser parser;
    char rbuf[READ_BUF_BYTES];
    strbuf pending; /* input received after a complete request, parsed after its answer */

    /* The request being received. */
    uint64_t started; /* uv_now at its first byte */
    strbuf url;
    size_t header_bytes;
    char field[32]; /* current header name (longer names are HDR_OTHER) */
    size_t field_len;
    bool in_value; /* the last header callback was a value */
    hdr current;   /* header whose value is being received */
    char auth[1024], ctype[256], expect[64];
    size_t auth_len, ctype_len, expect_len;
    bool bad_header; /* a repeated or overlong Authorization / Content-Type */
    bool bad_expect; /* an overlong Expect (ignored) */
    char if_match[1024], idem_key[256];
    size_t if_match_len, idem_key_len;
    bool bad_api_header; /* a repeated or overlong If-Match / Idempotency-Key */
    bool problem;        /* answers are application/problem+json (the management API's) */
    bool accepting_body;
    strbuf body;
    int early_status; /* answer decided before the request was complete (closes after) */
    const char *early_json;
    const char *early_extra; /* extra header lines for early_status */
    const char *route;

    /* The answer. */
    strbuf out;
    bool close_after_write;
    admin_http_reply *reply; /* pending POST answer, or NULL */
} conn;

struct admin_http_reply {
    conn *c; /* NULL once the connection went away */
};

struct admin_http {
    uv_loop_t *loop;
    uv_tcp_t listener;   /* data = this */
    uv_tcp_t reject;     /* accepts a connection over the limit only to close it */
    bool reject_busy;    /* reject is open or closing */
    bool accept_waiting; /* a connection is pending while reject was busy */
    bool listening;
    bool closing;
    bool full_logged; /* "connection limit reached" logged since it last had room */
    int open_handles; /* listener and reject */
    pgp_list conns;   /* conn.link */
    size_t nconns;
    char listen[300];
    struct sockaddr_storage addr;
    char *token; /* "" = enqueue disabled */
    size_t token_len;
    char *status_token; /* "" = the status page and /v1/status are open */
    size_t status_token_len;
    admin_http_token *api_tokens; /* admin_http_set_api_tokens */
    size_t n_api_tokens;
    unsigned api_scopes;  /* the union of their scopes */
    char *portal_headers; /* the tenant page's CSP and framing headers, or NULL */
    size_t max_body;
    uint64_t idle_ms;
    size_t max_conns;
    admin_http_callbacks cb;
    void (*closed_cb)(void *arg);
    void *closed_arg;
};

/* ---- admin_http.c ------------------------------------------------------------------------- */

/* Closes the connection: detaches a pending reply; freed from the close callbacks. Safe to call
 * twice. */
void ahttp_conn_close(conn *c);

/* (Re)starts the connection's one timer; expiry closes the connection. */
void ahttp_arm_timer(conn *c, uint64_t ms);

/* Start and stop reading the socket; starting is a no-op while reading or closing. */
void ahttp_start_reading(conn *c);
void ahttp_stop_reading(conn *c);

/* Resets the per-request fields for the next request on this connection. */
void ahttp_request_reset(conn *c);

/* Queues the answer (status line, headers, body; no body for HEAD) and reports it through
 * callbacks.request_done. After the write, the connection is shut down and lingers to its close
 * when c->close_after_write is set or the request did not keep the connection alive. */
void ahttp_respond(conn *c, int status, const char *content_type, const char *extra_headers,
                   const char *body, size_t body_len);
void ahttp_respond_json(conn *c, int status, const char *extra_headers, const char *json);

/* ---- admin_http_request.c ----------------------------------------------------------------- */

/* Feeds received bytes to the parser; a complete request is answered from inside. */
void ahttp_parse_input(conn *c, const char *data, size_t len);

/* The connection's libuv read callback. */
void ahttp_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

/* The Bearer token the request presents, copied into buf (NUL-terminated): its length, or -1. */
ssize_t ahttp_bearer(const conn *c, char *buf, size_t cap);

/* The API token (admin_http_set_api_tokens) a presented token is, compared with every entry in
 * constant time: its index, or -1. */
ssize_t ahttp_api_token_find(const admin_http *s, const char *tok, size_t n);

/* Whether the media type of Content-Type, without parameters, is application/json. */
bool ahttp_is_json_type(const conn *c);

/* Whether the presented token is the configured enqueue or status token (constant time). */
bool ahttp_is_configured_token(const admin_http *s, const char *tok, size_t n);

/* ---- admin_api.c -------------------------------------------------------------------------- */

typedef enum api_route { API_NONE, API_CALL, API_OPENAPI, API_PORTAL_PAGE } api_route;

/* Which of the API's routes the path (n bytes of url, up to '?' or '#') is; sets c->route to
 * its metrics label ("/v1/customers", ...). */
api_route ahttp_api_route(conn *c, const char *url, size_t n);

/* The checks of an API route's request line and headers: 0 to go on, else the status, with
 * *json a problem document and *extra header lines. */
int ahttp_api_precheck(conn *c, api_route r, const char **json, const char **extra);

/* Whether the request may carry a body (POST and PATCH of the API). */
bool ahttp_api_takes_body(const conn *c, api_route r);

/* Answers a complete request of an API route. */
void ahttp_api_answer(conn *c, api_route r);

/* The path after /v1/ (n bytes) as a JSON array of its percent-decoded segments, and a query
 * string (n bytes) as a JSON object of percent-decoded strings ('+' a space), appended to out.
 * -EINVAL for an empty segment or name, a malformed escape, or a decoded NUL or control
 * character; -EEXIST for a query parameter given twice; -ENOMEM. Exposed for tests. */
int admin_api_path_json(const char *path, size_t n, strbuf *out);
int admin_api_query_json(const char *query, size_t n, strbuf *out);

#endif
