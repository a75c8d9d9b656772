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
typedef enum hdr { HDR_OTHER, HDR_AUTHORIZATION, HDR_CONTENT_TYPE, HDR_EXPECT } hdr;

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
    unsigned api_scopes; /* the union of their scopes */
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

#endif
