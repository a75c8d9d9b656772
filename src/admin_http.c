/* admin_http.c - the admin HTTP endpoint (admin_http.h): libuv TCP + Debian's http-parser. */
#include "admin_http.h"

#include "list.h"
#include "log.h"
#include "sql_embed.h"

#include <errno.h>
#include <http_parser.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LINGER_MAX_MS  2000
#define READ_BUF_BYTES 16384
#define MAX_ERROR_TEXT 512

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
    size_t max_body;
    uint64_t idle_ms;
    size_t max_conns;
    admin_http_callbacks cb;
    void (*closed_cb)(void *arg);
    void *closed_arg;
};

static const char disabled_json[] =
    "{\"error\":\"http enqueue is disabled: set [http] enqueue_token\"}";

/* ---- small helpers ---------------------------------------------------------------------- */

/* Appends s as the inside of a JSON string: quotes, backslashes and control characters
 * escaped, so a message with a newline stays one line. */
static void json_escape(strbuf *sb, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char esc[2] = {'\\', (char)ch};
            strbuf_append(sb, esc, 2);
        } else if (ch == '\n') {
            strbuf_puts(sb, "\\n");
        } else if (ch == '\r') {
            strbuf_puts(sb, "\\r");
        } else if (ch == '\t') {
            strbuf_puts(sb, "\\t");
        } else if (ch < 0x20 || ch == 0x7f) {
            strbuf_printf(sb, "\\u%04x", ch);
        } else {
            strbuf_append(sb, (const char *)&ch, 1);
        }
    }
}

static void json_error(strbuf *sb, const char *prefix, const char *msg)
{
    /* The primary message only (never DETAIL or CONTEXT, which can quote the body), escaped
     * so it stays one line, and bounded: cut at a UTF-8 character boundary. */
    size_t n = strlen(msg);
    if (n > MAX_ERROR_TEXT) {
        n = MAX_ERROR_TEXT;
        while (n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80)
            n--;
    }
    strbuf_puts(sb, "{\"error\":\"");
    json_escape(sb, prefix, strlen(prefix));
    json_escape(sb, msg, n);
    strbuf_puts(sb, "\"}");
}

/* Equal strings in time independent of where they differ (and of the client's length). */
static bool token_equal(const char *given, size_t given_len, const char *want, size_t want_len)
{
    unsigned diff = given_len != want_len;
    for (size_t i = 0; i < want_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= g ^ (unsigned char)want[i];
    }
    return diff == 0;
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Unknown";
    }
}

/* "127.0.0.1:9187" or "[::1]:9187" into a sockaddr. */
static int parse_listen(const char *spec, struct sockaddr_storage *out)
{
    char host[256];
    const char *port_s;
    bool v6 = spec[0] == '[';
    if (v6) {
        const char *end = strchr(spec, ']');
        if (!end || end[1] != ':' || (size_t)(end - spec - 1) >= sizeof host)
            return -EINVAL;
        memcpy(host, spec + 1, (size_t)(end - spec - 1));
        host[end - spec - 1] = '\0';
        port_s = end + 2;
    } else {
        const char *colon = strrchr(spec, ':');
        if (!colon || (size_t)(colon - spec) >= sizeof host || strchr(spec, ':') != colon)
            return -EINVAL;
        memcpy(host, spec, (size_t)(colon - spec));
        host[colon - spec] = '\0';
        port_s = colon + 1;
    }
    if (!*port_s || strspn(port_s, "0123456789") != strlen(port_s) || strlen(port_s) > 5)
        return -EINVAL;
    int port = atoi(port_s);
    if (port > 65535)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    if (v6)
        return uv_ip6_addr(host, port, (struct sockaddr_in6 *)out) == 0 ? 0 : -EINVAL;
    return uv_ip4_addr(host, port, (struct sockaddr_in *)out) == 0 ? 0 : -EINVAL;
}

/* ---- connection lifetime ------------------------------------------------------------------ */

static void maybe_finish_close(admin_http *s)
{
    if (!s->closing || s->open_handles > 0 || !pgp_list_empty(&s->conns))
        return;
    void (*cb)(void *) = s->closed_cb;
    void *arg = s->closed_arg;
    free(s->token);
    free(s);
    if (cb)
        cb(arg);
}

static void conn_handle_closed(uv_handle_t *h)
{
    conn *c = h->data;
    if (--c->open_handles > 0)
        return;
    admin_http *s = c->srv;
    pgp_list_remove(&c->link);
    s->nconns--;
    if (s->nconns < s->max_conns)
        s->full_logged = false;
    strbuf_free(&c->pending);
    strbuf_free(&c->url);
    strbuf_free(&c->body);
    strbuf_free(&c->out);
    free(c);
    maybe_finish_close(s);
}

/* Safe to call twice. A pending reply is detached; queued writes are cancelled by libuv (their
 * callbacks run before the close callbacks). */
static void conn_close(conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    c->state = CONN_CLOSING;
    if (c->reply) {
        c->reply->c = NULL;
        c->reply = NULL;
    }
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
}

static void timer_cb(uv_timer_t *t)
{
    conn *c = t->data;
    LOG_DEBUG("admin_http_timeout", LOG_I("state", c->state));
    conn_close(c);
}

static void arm_timer(conn *c, uint64_t ms)
{
    /* uv_timer_start only fails for a closing handle or a NULL callback. */
    if (uv_timer_start(&c->timer, timer_cb, ms, 0) != 0)
        conn_close(c);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;
    *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void start_reading(conn *c)
{
    if (c->reading || c->state == CONN_CLOSING)
        return;
    int rc = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    if (rc != 0) {
        conn_close(c);
        return;
    }
    c->reading = true;
}

static void stop_reading(conn *c)
{
    if (!c->reading)
        return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
}

/* ---- answers ------------------------------------------------------------------------------ */

static void parse_input(conn *c, const char *data, size_t len);

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    conn *c = req->data;
    if (c->state == CONN_CLOSING)
        return;
    if (status != 0) {
        conn_close(c);
        return;
    }
    /* Read and drop what the client still sends, so closing does not reset the connection
     * before it read the answer; EOF or the timer ends it. */
    c->state = CONN_LINGER;
    uint64_t ms = c->srv->idle_ms < LINGER_MAX_MS ? c->srv->idle_ms : LINGER_MAX_MS;
    arm_timer(c, ms);
    start_reading(c);
}

/* Resets the per-request fields for the next request on this connection. */
static void request_reset(conn *c)
{
    strbuf_reset(&c->url);
    strbuf_reset(&c->body);
    c->header_bytes = 0;
    c->field_len = 0;
    c->in_value = false;
    c->current = HDR_OTHER;
    c->auth_len = c->ctype_len = c->expect_len = 0;
    c->bad_header = false;
    c->bad_expect = false;
    c->accepting_body = false;
    c->early_status = 0;
    c->early_json = NULL;
    c->early_extra = NULL;
    c->route = "other";
}

static void write_cb(uv_write_t *req, int status)
{
    conn *c = req->data;
    if (c->state == CONN_CLOSING)
        return;
    if (status != 0) {
        conn_close(c);
        return;
    }
    if (c->close_after_write) {
        c->shutdown_req.data = c;
        stop_reading(c);
        if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, shutdown_cb) != 0)
            conn_close(c);
        return;
    }
    /* Keep-alive: the next request, first from what arrived meanwhile. */
    c->state = CONN_IDLE;
    request_reset(c);
    arm_timer(c, c->srv->idle_ms);
    http_parser_pause(&c->parser, 0);
    if (c->pending.len > 0) {
        strbuf input = c->pending;
        c->pending = (strbuf){0};
        parse_input(c, input.data, input.len);
        strbuf_free(&input);
    }
    if (c->state == CONN_IDLE || c->state == CONN_READING)
        start_reading(c);
}

/* Queues the answer: status line, headers, body. */
static void respond(conn *c, int status, const char *content_type, const char *extra_headers,
                    const char *body, size_t body_len)
{
    if (c->state == CONN_CLOSING)
        return;
    bool head = c->parser.method == HTTP_HEAD;
    if (!http_should_keep_alive(&c->parser) || c->parser.upgrade)
        c->close_after_write = true;
    strbuf_reset(&c->out);
    strbuf_printf(&c->out,
                  "HTTP/1.1 %d %s\r\n"
                  "Content-Type: %s\r\n"
                  "Content-Length: %zu\r\n"
                  "Cache-Control: no-store\r\n"
                  "%s%s\r\n",
                  status, reason_phrase(status), content_type, body_len,
                  c->close_after_write ? "Connection: close\r\n" : "",
                  extra_headers ? extra_headers : "");
    if (!head)
        strbuf_append(&c->out, body, body_len);
    if (c->out.failed) {
        LOG_ERROR("admin_http_out_of_memory", LOG_I("status", status));
        conn_close(c);
        return;
    }
    admin_http *s = c->srv;
    if (s->cb.request_done)
        s->cb.request_done(s->cb.arg, c->route, status,
                           (double)(uv_now(s->loop) - c->started) / 1000.0);
    c->state = CONN_WRITING;
    arm_timer(c, s->idle_ms);
    c->write_req.data = c;
    uv_buf_t buf = uv_buf_init(c->out.data, (unsigned)c->out.len);
    if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &buf, 1, write_cb) != 0)
        conn_close(c);
}

static void respond_json(conn *c, int status, const char *extra_headers, const char *json)
{
    respond(c, status, "application/json", extra_headers, json, strlen(json));
}

void admin_http_reply_send(admin_http_reply *reply, int status, const char *json)
{
    conn *c = reply->c;
    free(reply);
    if (!c)
        return; /* the client is gone */
    c->reply = NULL;
    respond_json(c, status, NULL, json ? json : "{}");
}

void admin_http_reply_done(void *reply, int status, const char *json)
{
    admin_http_reply_send(reply, status, json);
}

/* ---- routes ------------------------------------------------------------------------------- */

typedef enum route { ROUTE_METRICS, ROUTE_HEALTHZ, ROUTE_READYZ, ROUTE_ITEMS, ROUTE_NONE } route;

static route find_route(conn *c)
{
    /* url is never empty for a parsed request line; "" when its buffer failed. */
    const char *url = c->url.len && !c->url.failed ? c->url.data : "";
    size_t n = strcspn(url, "?#");
    static const struct {
        const char *path;
        route r;
    } routes[] = {{"/metrics", ROUTE_METRICS},
                  {"/healthz", ROUTE_HEALTHZ},
                  {"/readyz", ROUTE_READYZ},
                  {"/v1/items", ROUTE_ITEMS}};
    for (size_t i = 0; i < PGP_ARRAY_LEN(routes); i++) {
        if (strlen(routes[i].path) == n && strncmp(url, routes[i].path, n) == 0) {
            c->route = routes[i].path;
            return routes[i].r;
        }
    }
    c->route = "other";
    return ROUTE_NONE;
}

/* The media type of Content-Type, without parameters, is application/json. */
static bool is_json_type(const conn *c)
{
    if (c->bad_header || c->ctype_len == 0)
        return false;
    size_t n = strcspn(c->ctype, ";");
    while (n > 0 && (c->ctype[n - 1] == ' ' || c->ctype[n - 1] == '\t'))
        n--;
    return n == strlen("application/json") && strncasecmp(c->ctype, "application/json", n) == 0;
}

static bool authorized(const conn *c)
{
    const admin_http *s = c->srv;
    if (c->bad_header || c->auth_len < 7 || strncasecmp(c->auth, "Bearer ", 7) != 0)
        return false;
    const char *tok = c->auth + 7;
    while (*tok == ' ' || *tok == '\t')
        tok++;
    size_t n = strlen(tok);
    while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t'))
        n--;
    return token_equal(tok, n, s->token, s->token_len);
}

/* Checks that can be made from the request line and headers. Returns 0 to go on, else the
 * status to answer with (json and extra set). */
static int precheck(conn *c, const char **json, const char **extra)
{
    admin_http *s = c->srv;
    route r = find_route(c);
    bool get = c->parser.method == HTTP_GET || c->parser.method == HTTP_HEAD;
    *extra = NULL;
    switch (r) {
    case ROUTE_NONE:
        *json = "{\"error\":\"not found\"}";
        return 404;
    case ROUTE_METRICS:
    case ROUTE_HEALTHZ:
    case ROUTE_READYZ:
        if (!get) {
            *json = "{\"error\":\"method not allowed\"}";
            *extra = "Allow: GET, HEAD\r\n";
            return 405;
        }
        return 0;
    case ROUTE_ITEMS:
        break;
    }
    if (c->parser.method != HTTP_POST) {
        *json = "{\"error\":\"method not allowed\"}";
        *extra = "Allow: POST\r\n";
        return 405;
    }
    if (s->token_len == 0 || !s->cb.enqueue) {
        *json = disabled_json;
        return 503;
    }
    if (!authorized(c)) {
        *json = "{\"error\":\"missing or invalid bearer token\"}";
        *extra = "WWW-Authenticate: Bearer realm=\"pgpace\"\r\n";
        return 401;
    }
    if (!is_json_type(c)) {
        *json = "{\"error\":\"content-type must be application/json\"}";
        return 415;
    }
    if ((c->parser.flags & F_CONTENTLENGTH) && c->parser.content_length > s->max_body) {
        *json = "{\"error\":\"body is too large\"}";
        return 413;
    }
    return 0;
}

static void answer_readyz(conn *c)
{
    admin_http *s = c->srv;
    admin_http_readiness rd = {.ready = false, .role = "starting", .reason = "not started"};
    if (s->cb.readiness)
        s->cb.readiness(s->cb.arg, &rd);
    strbuf j = {0};
    strbuf_printf(&j, "{\"ready\":%s,\"role\":\"", rd.ready ? "true" : "false");
    const char *role = rd.role ? rd.role : "starting";
    json_escape(&j, role, strlen(role));
    strbuf_puts(&j, "\"");
    if (!rd.ready) {
        const char *reason = rd.reason ? rd.reason : "not ready";
        strbuf_puts(&j, ",\"reason\":\"");
        json_escape(&j, reason, strlen(reason));
        strbuf_puts(&j, "\"");
    }
    strbuf_puts(&j, "}");
    const char *text = strbuf_str(&j);
    if (text)
        respond_json(c, rd.ready ? 200 : 503, NULL, text);
    else
        conn_close(c);
    strbuf_free(&j);
}

static void answer_metrics(conn *c)
{
    admin_http *s = c->srv;
    if (!s->cb.render_metrics) {
        respond_json(c, 503, NULL, "{\"error\":\"metrics are not available\"}");
        return;
    }
    strbuf text = {0};
    strbuf_append(&text, "", 0);
    int rc = s->cb.render_metrics(s->cb.arg, &text);
    if (rc != 0 || text.failed) {
        LOG_WARN("admin_http_metrics_failed", LOG_S("error", strerror(rc ? -rc : ENOMEM)));
        respond_json(c, 500, NULL, "{\"error\":\"rendering metrics failed\"}");
    } else {
        respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, text.data, text.len);
    }
    strbuf_free(&text);
}

static void answer_items(conn *c)
{
    admin_http *s = c->srv;
    if (c->body.failed) {
        respond_json(c, 500, NULL, "{\"error\":\"out of memory\"}");
        return;
    }
    strbuf_append(&c->body, "", 0); /* a terminated (possibly empty) string */
    if (c->body.len > 0 && memchr(c->body.data, '\0', c->body.len)) {
        respond_json(c, 400, NULL,
                     "{\"error\":\"body is not valid JSON: it contains a NUL byte\"}");
        return;
    }
    admin_http_reply *r = malloc(sizeof *r);
    if (!r || c->body.failed) {
        free(r);
        respond_json(c, 500, NULL, "{\"error\":\"out of memory\"}");
        return;
    }
    r->c = c;
    c->reply = r;
    /* May answer at once (admin_http_reply_send from inside the call). */
    s->cb.enqueue(s->cb.arg, c->body.data, c->body.len, r);
}

/* A complete request (or one answered early): answer it. */
static void handle_request(conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    c->state = CONN_HANDLING;
    uv_timer_stop(&c->timer);
    if (c->early_status) {
        c->close_after_write = true;
        respond_json(c, c->early_status, c->early_extra, c->early_json);
        return;
    }
    const char *json, *extra;
    int status = precheck(c, &json, &extra);
    if (status == 0 && c->body.len > c->srv->max_body) {
        status = 413;
        json = "{\"error\":\"body is too large\"}";
    }
    if (status != 0) {
        respond_json(c, status, extra, json);
        return;
    }
    switch (find_route(c)) {
    case ROUTE_METRICS:
        answer_metrics(c);
        break;
    case ROUTE_HEALTHZ:
        respond_json(c, 200, NULL, "{\"status\":\"ok\"}");
        break;
    case ROUTE_READYZ:
        answer_readyz(c);
        break;
    case ROUTE_ITEMS:
        answer_items(c);
        break;
    case ROUTE_NONE:
        break;
    }
}

/* ---- parsing ------------------------------------------------------------------------------ */

/* Answer before the request is complete, then close (its body, if any, is not read). */
static int fail_early(conn *c, int status, const char *json, const char *extra)
{
    c->early_status = status;
    c->early_json = json;
    c->early_extra = extra;
    http_parser_pause(&c->parser, 1);
    return 0;
}

static int count_header_bytes(conn *c, size_t n)
{
    c->header_bytes += n;
    if (c->header_bytes > ADMIN_HTTP_MAX_HEADER) {
        fail_early(c, 431, "{\"error\":\"request header fields too large\"}", NULL);
        return 1;
    }
    return 0;
}

static int on_message_begin(http_parser *p)
{
    conn *c = p->data;
    request_reset(c);
    c->started = uv_now(c->srv->loop);
    c->state = CONN_READING;
    /* The whole request must arrive within one timeout from its first byte. */
    arm_timer(c, c->srv->idle_ms);
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    conn *c = p->data;
    if (count_header_bytes(c, n))
        return 0;
    strbuf_append(&c->url, at, n);
    return 0;
}

/* Appends to a fixed header buffer; an overlong value sets *bad. */
static void header_append(char *buf, size_t cap, size_t *len, bool *bad, const char *at, size_t n)
{
    if (*len + n >= cap) {
        *bad = true;
        return;
    }
    memcpy(buf + *len, at, n);
    *len += n;
    buf[*len] = '\0';
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    conn *c = p->data;
    if (count_header_bytes(c, n + 4)) /* ": " and CRLF */
        return 0;
    if (c->in_value) {
        c->in_value = false;
        c->field_len = 0;
    }
    if (c->field_len + n < sizeof c->field) {
        memcpy(c->field + c->field_len, at, n);
        c->field_len += n;
    } else {
        c->field_len = sizeof c->field; /* too long to be one we look at */
    }
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    conn *c = p->data;
    if (count_header_bytes(c, n))
        return 0;
    if (!c->in_value) {
        /* A new value: which header is it? */
        c->in_value = true;
        c->current = HDR_OTHER;
        size_t fl = c->field_len < sizeof c->field ? c->field_len : 0;
        static const struct {
            const char *name;
            hdr h;
        } known[] = {{"authorization", HDR_AUTHORIZATION},
                     {"content-type", HDR_CONTENT_TYPE},
                     {"expect", HDR_EXPECT}};
        for (size_t i = 0; i < PGP_ARRAY_LEN(known); i++) {
            if (fl == strlen(known[i].name) && strncasecmp(c->field, known[i].name, fl) == 0)
                c->current = known[i].h;
        }
        /* A second Authorization or Content-Type is ambiguous: refuse it. */
        if ((c->current == HDR_AUTHORIZATION && c->auth_len) ||
            (c->current == HDR_CONTENT_TYPE && c->ctype_len))
            c->bad_header = true;
    }
    switch (c->current) {
    case HDR_AUTHORIZATION:
        header_append(c->auth, sizeof c->auth, &c->auth_len, &c->bad_header, at, n);
        break;
    case HDR_CONTENT_TYPE:
        header_append(c->ctype, sizeof c->ctype, &c->ctype_len, &c->bad_header, at, n);
        break;
    case HDR_EXPECT:
        header_append(c->expect, sizeof c->expect, &c->expect_len, &c->bad_expect, at, n);
        break;
    case HDR_OTHER:
        break;
    }
    return 0;
}

static void continue_cb(uv_write_t *req, int status)
{
    conn *c = req->data;
    if (status != 0 && c->state != CONN_CLOSING)
        conn_close(c);
}

static int on_headers_complete(http_parser *p)
{
    conn *c = p->data;
    bool has_body =
        (p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length > 0);
    if (!has_body)
        return 0; /* decided when the message is complete, right after this */
    const char *json, *extra;
    int status = precheck(c, &json, &extra);
    if (status == 0 && find_route(c) != ROUTE_ITEMS) {
        /* A GET with a body: answer it, but do not read the body. */
        status = 400;
        json = "{\"error\":\"unexpected request body\"}";
    }
    if (status != 0)
        return fail_early(c, status, json, extra);
    c->accepting_body = true;
    if (c->expect_len && !c->bad_expect && strcasecmp(c->expect, "100-continue") == 0) {
        /* Never written: static only because uv_buf_t takes a char *. */
        static char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";
        uv_buf_t buf = uv_buf_init(continue_line, sizeof continue_line - 1);
        c->continue_req.data = c;
        if (uv_write(&c->continue_req, (uv_stream_t *)&c->tcp, &buf, 1, continue_cb) != 0)
            return -1;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    conn *c = p->data;
    if (!c->accepting_body)
        return 0;
    if (c->body.len + n > c->srv->max_body)
        return fail_early(c, 413, "{\"error\":\"body is too large\"}", NULL);
    strbuf_append(&c->body, at, n);
    return 0;
}

static int on_message_complete(http_parser *p)
{
    /* Stop here: the next pipelined request waits until this one is answered. */
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void parse_input(conn *c, const char *data, size_t len)
{
    size_t used = http_parser_execute(&c->parser, &parser_settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (c->state == CONN_CLOSING)
        return;
    if (e == HPE_PAUSED) {
        /* A request is complete or answered early: keep the rest for later. */
        if (used < len && !c->early_status)
            strbuf_append(&c->pending, data + used, len - used);
        if (c->pending.failed) {
            conn_close(c);
            return;
        }
        stop_reading(c);
        handle_request(c);
        return;
    }
    if (e != HPE_OK) {
        int status = e == HPE_HEADER_OVERFLOW ? 431 : 400;
        LOG_DEBUG("admin_http_bad_request", LOG_S("error", http_errno_name(e)));
        stop_reading(c);
        c->state = CONN_HANDLING;
        c->close_after_write = true;
        respond_json(c, status, NULL,
                     status == 431 ? "{\"error\":\"request header fields too large\"}"
                                   : "{\"error\":\"malformed HTTP request\"}");
    }
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = stream->data;
    if (c->state == CONN_CLOSING)
        return;
    if (nread < 0) {
        /* EOF or error. A request cut short is not answered. */
        conn_close(c);
        return;
    }
    if (nread == 0)
        return;
    switch (c->state) {
    case CONN_LINGER:
        return; /* discarded */
    case CONN_HANDLING:
    case CONN_WRITING:
        /* Not reading in these states; a read already under way when we stopped lands here. */
        strbuf_append(&c->pending, buf->base, (size_t)nread);
        stop_reading(c);
        if (c->pending.failed)
            conn_close(c);
        return;
    case CONN_IDLE:
    case CONN_READING:
        parse_input(c, buf->base, (size_t)nread);
        return;
    case CONN_CLOSING:
        return;
    }
}

/* ---- the listener ------------------------------------------------------------------------- */

static void on_connection(uv_stream_t *server, int status);

static void reject_closed(uv_handle_t *h)
{
    admin_http *s = h->data;
    s->reject_busy = false;
    s->open_handles--;
    if (s->closing) {
        maybe_finish_close(s);
        return;
    }
    if (s->accept_waiting) {
        s->accept_waiting = false;
        on_connection((uv_stream_t *)&s->listener, 0);
    }
}

/* Takes the pending connection off the queue and closes it. */
static void reject_one(admin_http *s)
{
    if (!s->full_logged) {
        LOG_WARN("admin_http_connection_limit", LOG_I("connections", s->nconns),
                 LOG_S("listen", s->listen));
        s->full_logged = true;
    }
    if (s->reject_busy) {
        /* libuv stops watching the listener until uv_accept; resume from reject_closed. */
        s->accept_waiting = true;
        return;
    }
    if (uv_tcp_init(s->loop, &s->reject) != 0) {
        s->accept_waiting = true;
        return;
    }
    s->reject.data = s;
    s->reject_busy = true;
    s->open_handles++;
    (void)uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&s->reject);
    uv_close((uv_handle_t *)&s->reject, reject_closed);
}

static void on_connection(uv_stream_t *server, int status)
{
    admin_http *s = server->data;
    if (status < 0) {
        LOG_WARN("admin_http_accept_failed", LOG_S("error", uv_strerror(status)));
        return;
    }
    if (s->closing)
        return;
    if (s->nconns >= s->max_conns) {
        reject_one(s);
        return;
    }
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        reject_one(s);
        return;
    }
    if (uv_timer_init(s->loop, &c->timer) != 0) {
        free(c); /* a timer that failed to initialise is not registered with the loop */
        reject_one(s);
        return;
    }
    c->srv = s;
    c->tcp.data = c;
    c->timer.data = c;
    c->open_handles = 1;
    pgp_list_push(&s->conns, &c->link);
    s->nconns++;
    if (uv_tcp_init(s->loop, &c->tcp) != 0) {
        c->state = CONN_CLOSING;
        uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
        reject_one(s);
        return;
    }
    c->open_handles = 2;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    request_reset(c);
    int rc = uv_accept(server, (uv_stream_t *)&c->tcp);
    if (rc != 0) {
        LOG_WARN("admin_http_accept_failed", LOG_S("error", uv_strerror(rc)));
        conn_close(c);
        return;
    }
    c->state = CONN_IDLE;
    c->started = uv_now(s->loop);
    arm_timer(c, s->idle_ms);
    start_reading(c);
}

int admin_http_new(uv_loop_t *loop, const admin_http_options *opts,
                   const admin_http_callbacks *callbacks, admin_http **out, pgp_error *err)
{
    const char *listen = opts->listen ? opts->listen : "";
    struct sockaddr_storage addr;
    if (strlen(listen) >= sizeof((admin_http *)0)->listen || parse_listen(listen, &addr) != 0)
        return pgp_error_set(err, -EINVAL,
                             "[http] listen: expected host:port or [host]:port with a numeric "
                             "address, got '%.200s'",
                             listen);
    if (opts->idle_timeout_ms < 0 || opts->max_connections < 0)
        return pgp_error_set(err, -EINVAL, "[http] timeouts and limits must not be negative");
    const char *token = opts->enqueue_token ? opts->enqueue_token : "";
    admin_http *s = calloc(1, sizeof *s);
    if (!s)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    s->token = strdup(token);
    if (!s->token) {
        free(s);
        return pgp_error_set(err, -ENOMEM, "out of memory");
    }
    s->loop = loop;
    pgp_list_init(&s->conns);
    s->token_len = strlen(token);
    snprintf(s->listen, sizeof s->listen, "%s", listen);
    s->addr = addr;
    s->max_body = opts->max_body_bytes ? opts->max_body_bytes : ADMIN_HTTP_DEFAULT_MAX_BODY;
    s->idle_ms =
        (uint64_t)(opts->idle_timeout_ms ? opts->idle_timeout_ms : ADMIN_HTTP_DEFAULT_IDLE_MS);
    s->max_conns =
        (size_t)(opts->max_connections ? opts->max_connections : ADMIN_HTTP_DEFAULT_MAX_CONNS);
    if (callbacks)
        s->cb = *callbacks;
    /* Last, so nothing after it can fail: from here on the server is released by closing. */
    int rc = uv_tcp_init(loop, &s->listener);
    if (rc != 0) {
        free(s->token);
        free(s);
        return pgp_error_set(err, rc, "[http] listen: %s", uv_strerror(rc));
    }
    s->listener.data = s;
    s->open_handles = 1;
    *out = s;
    return 0;
}

int admin_http_start(admin_http *s, pgp_error *err)
{
    if (s->closing || s->listening)
        return pgp_error_set(err, -EINVAL, "[http] listen: already started or closing");
    int rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&s->addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
    if (rc != 0)
        return pgp_error_set(err, rc, "[http] listen %s: %s", s->listen, uv_strerror(rc));
    s->listening = true;
    LOG_INFO("admin_http_listening", LOG_S("listen", s->listen), LOG_I("port", admin_http_port(s)),
             LOG_I("enqueue", s->token_len > 0));
    return 0;
}

int admin_http_set_token(admin_http *s, const char *token)
{
    char *copy = strdup(token ? token : "");
    if (!copy)
        return -ENOMEM;
    free(s->token);
    s->token = copy;
    s->token_len = strlen(copy);
    return 0;
}

int admin_http_port(const admin_http *s)
{
    if (!s->listening)
        return -ENOTCONN;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    int rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    if (rc != 0)
        return rc;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

size_t admin_http_connections(const admin_http *s)
{
    return s->nconns;
}

static void listener_closed(uv_handle_t *h)
{
    admin_http *s = h->data;
    s->open_handles--;
    maybe_finish_close(s);
}

void admin_http_close(admin_http *s, void (*closed_cb)(void *arg), void *arg)
{
    if (s->closing)
        return;
    s->closing = true;
    s->closed_cb = closed_cb;
    s->closed_arg = arg;
    pgp_list *pos;
    pgp_list_each(pos, &s->conns)
    {
        conn_close(pgp_list_entry(pos, conn, link));
    }
    uv_close((uv_handle_t *)&s->listener, listener_closed);
}

/* ---- POST /v1/items over pgconn ----------------------------------------------------------- */

typedef struct enqueue_call {
    admin_http_enqueue_cb cb;
    void *arg;
} enqueue_call;

int admin_http_enqueue_answer(const PGresult *res, strbuf *json)
{
    if (!res) {
        strbuf_puts(json, "{\"error\":\"database unreachable\"}");
        return 503;
    }
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK) {
        if (PQntuples(res) != 1 || PQnfields(res) != 2 || PQgetisnull(res, 0, 0)) {
            LOG_ERROR("http_enqueue_unexpected_result", LOG_I("rows", PQntuples(res)));
            strbuf_puts(json, "{\"error\":\"internal error\"}");
            return 500;
        }
        const char *id = PQgetvalue(res, 0, 0);
        if (strcmp(PQgetvalue(res, 0, 1), "t") == 0) {
            strbuf_printf(json, "{\"id\":%s}", id);
            return 201;
        }
        strbuf_printf(json, "{\"id\":%s,\"duplicate\":true}", id);
        return 200;
    }
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *context = PQresultErrorField(res, PG_DIAG_CONTEXT);
    if (!state)
        state = "";
    if (!msg)
        msg = "";
    if (strncmp(state, "22", 2) == 0 || strcmp(state, "23503") == 0 ||
        strcmp(state, "54000") == 0) {
        /* pgpace.enqueue_json names the field itself; anything else in these classes comes
         * from turning the body into jsonb ($1::jsonb, the encoding check). The context is
         * never copied: for a JSON syntax error it quotes the body. */
        bool from_function = context && strncmp(context, "JSON data", 9) != 0 &&
                             strstr(context, "PL/pgSQL function") != NULL;
        json_error(json, from_function ? "" : "body is not valid JSON: ", msg);
        return 400;
    }
    if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0 ||
        strcmp(state, "53300") == 0) {
        strbuf_puts(json, "{\"error\":\"database unreachable\"}");
        return 503;
    }
    if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0) {
        strbuf_puts(json, "{\"error\":\"conflict with a concurrent enqueue, retry\"}");
        return 503;
    }
    LOG_WARN("http_enqueue_failed", LOG_S("sqlstate", state), LOG_S("error", msg));
    strbuf_puts(json, "{\"error\":\"internal error\"}");
    return 500;
}

static void on_enqueue_result(pgconn *db, PGresult *res, void *arg)
{
    enqueue_call *call = arg;
    strbuf json = {0};
    int status = admin_http_enqueue_answer(res, &json);
    const char *text = strbuf_str(&json);
    if (!text) {
        status = 500;
        text = "{\"error\":\"out of memory\"}";
    }
    call->cb(call->arg, status, text);
    strbuf_free(&json);
    free(call);
}

int admin_http_enqueue_sql(pgconn *db, const char *body, size_t len, admin_http_enqueue_cb cb,
                           void *arg)
{
    if (memchr(body, '\0', len))
        return -EINVAL;
    enqueue_call *call = malloc(sizeof *call);
    if (!call)
        return -ENOMEM;
    call->cb = cb;
    call->arg = arg;
    const char *params[] = {body};
    int rc = pgconn_query(db, sql_q_http_enqueue, 1, params, on_enqueue_result, call);
    if (rc != 0)
        free(call);
    return rc;
}
