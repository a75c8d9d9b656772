/* admin_http.c - the admin HTTP endpoint (admin_http.h) on libuv TCP: the server object and its
 * options, the listener and the connection limit, each connection's lifetime (its timer,
 * reading, closing) and writing answers, then keep-alive or a lingering close. Parsing and
 * routing a request are admin_http_request.c's; POST /v1/items over pgconn is admin_enqueue.c's.
 */
#include "admin_http.h"
#include "admin_http_internal.h"

#include "list.h"
#include "log.h"
#include "portal_page_html.h"
#include "status_page.h"

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINGER_MAX_MS 2000

/* ---- small helpers ---------------------------------------------------------------------- */

static const char *reason_phrase(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 428:
        return "Precondition Required";
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
    free(s->status_token);
    free(s->api_tokens);
    free(s->portal_headers);
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
void ahttp_conn_close(conn *c)
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
    ahttp_conn_close(c);
}

void ahttp_arm_timer(conn *c, uint64_t ms)
{
    /* uv_timer_start only fails for a closing handle or a NULL callback. */
    if (uv_timer_start(&c->timer, timer_cb, ms, 0) != 0)
        ahttp_conn_close(c);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;
    *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

void ahttp_start_reading(conn *c)
{
    if (c->reading || c->state == CONN_CLOSING)
        return;
    int rc = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, ahttp_read_cb);
    if (rc != 0) {
        ahttp_conn_close(c);
        return;
    }
    c->reading = true;
}

void ahttp_stop_reading(conn *c)
{
    if (!c->reading)
        return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
}

/* ---- answers ------------------------------------------------------------------------------ */

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    conn *c = req->data;
    if (c->state == CONN_CLOSING)
        return;
    if (status != 0) {
        ahttp_conn_close(c);
        return;
    }
    /* Read and drop what the client still sends, so closing does not reset the connection
     * before it read the answer; EOF or the timer ends it. */
    c->state = CONN_LINGER;
    uint64_t ms = c->srv->idle_ms < LINGER_MAX_MS ? c->srv->idle_ms : LINGER_MAX_MS;
    ahttp_arm_timer(c, ms);
    ahttp_start_reading(c);
}

/* Resets the per-request fields for the next request on this connection. */
void ahttp_request_reset(conn *c)
{
    strbuf_reset(&c->url);
    strbuf_reset(&c->body);
    c->header_bytes = 0;
    c->field_len = 0;
    c->in_value = false;
    c->current = HDR_OTHER;
    c->auth_len = c->ctype_len = c->expect_len = 0;
    c->if_match_len = c->idem_key_len = 0;
    c->bad_api_header = false;
    c->problem = false;
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
        ahttp_conn_close(c);
        return;
    }
    if (c->close_after_write) {
        c->shutdown_req.data = c;
        ahttp_stop_reading(c);
        if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, shutdown_cb) != 0)
            ahttp_conn_close(c);
        return;
    }
    /* Keep-alive: the next request, first from what arrived meanwhile. */
    c->state = CONN_IDLE;
    ahttp_request_reset(c);
    ahttp_arm_timer(c, c->srv->idle_ms);
    http_parser_pause(&c->parser, 0);
    if (c->pending.len > 0) {
        strbuf input = c->pending;
        c->pending = (strbuf){0};
        ahttp_parse_input(c, input.data, input.len);
        strbuf_free(&input);
    }
    if (c->state == CONN_IDLE || c->state == CONN_READING)
        ahttp_start_reading(c);
}

/* Queues the answer: status line, headers, body. */
void ahttp_respond(conn *c, int status, const char *content_type, const char *extra_headers,
                   const char *body, size_t body_len)
{
    if (c->state == CONN_CLOSING)
        return;
    bool head = c->parser.method == HTTP_HEAD;
    if (!http_should_keep_alive(&c->parser) || c->parser.upgrade)
        c->close_after_write = true;
    strbuf_reset(&c->out);
    strbuf_printf(&c->out, "HTTP/1.1 %d %s\r\n", status, reason_phrase(status));
    /* 204 has neither (RFC 9110 8.6: no Content-Length in a 204). */
    if (status == 204)
        body_len = 0;
    else
        strbuf_printf(&c->out, "Content-Type: %s\r\nContent-Length: %zu\r\n", content_type,
                      body_len);
    strbuf_printf(&c->out,
                  "Cache-Control: no-store\r\n"
                  "X-Content-Type-Options: nosniff\r\n"
                  "%s%s\r\n",
                  c->close_after_write ? "Connection: close\r\n" : "",
                  extra_headers ? extra_headers : "");
    if (!head)
        strbuf_append(&c->out, body, body_len);
    if (c->out.failed) {
        LOG_ERROR("admin_http_out_of_memory", LOG_I("status", status));
        ahttp_conn_close(c);
        return;
    }
    admin_http *s = c->srv;
    if (s->cb.request_done)
        s->cb.request_done(s->cb.arg, c->route, status,
                           (double)(uv_now(s->loop) - c->started) / 1000.0);
    c->state = CONN_WRITING;
    ahttp_arm_timer(c, s->idle_ms);
    c->write_req.data = c;
    uv_buf_t buf = uv_buf_init(c->out.data, (unsigned)c->out.len);
    if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &buf, 1, write_cb) != 0)
        ahttp_conn_close(c);
}

void ahttp_respond_json(conn *c, int status, const char *extra_headers, const char *json)
{
    ahttp_respond(c, status,
                  c->problem && status >= 400 ? "application/problem+json" : "application/json",
                  extra_headers, json, strlen(json));
}

void admin_http_reply_send(admin_http_reply *reply, int status, const char *json)
{
    conn *c = reply->c;
    free(reply);
    if (!c)
        return; /* the client is gone */
    c->reply = NULL;
    ahttp_respond_json(c, status, NULL, json ? json : "{}");
}

void admin_http_reply_done(void *reply, int status, const char *json)
{
    admin_http_reply_send(reply, status, json);
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
    ahttp_request_reset(c);
    int rc = uv_accept(server, (uv_stream_t *)&c->tcp);
    if (rc != 0) {
        LOG_WARN("admin_http_accept_failed", LOG_S("error", uv_strerror(rc)));
        ahttp_conn_close(c);
        return;
    }
    c->state = CONN_IDLE;
    c->started = uv_now(s->loop);
    ahttp_arm_timer(c, s->idle_ms);
    ahttp_start_reading(c);
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
    const char *status_token = opts->status_token ? opts->status_token : "";
    admin_http *s = calloc(1, sizeof *s);
    if (!s)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    s->token = strdup(token);
    s->status_token = strdup(status_token);
    int hrc = page_headers((const char *)portal_page_html, opts->portal_frame_ancestors,
                           &s->portal_headers);
    if (!s->token || !s->status_token || hrc != 0) {
        free(s->token);
        free(s->status_token);
        free(s->portal_headers);
        free(s);
        return hrc == -EINVAL ? pgp_error_set(err, -EINVAL,
                                              "[http] portal_frame_ancestors: expected origins "
                                              "such as https://dashboard.example.com, space "
                                              "separated")
                              : pgp_error_set(err, -ENOMEM, "out of memory");
    }
    s->status_token_len = strlen(status_token);
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
        free(s->status_token);
        free(s->portal_headers);
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
             LOG_I("enqueue", s->token_len > 0), LOG_I("status_token", s->status_token_len > 0));
    /* The status page names customers and their state: open only where the address keeps it
     * private, or behind a token. */
    if (!admin_http_is_loopback(s) && s->status_token_len == 0)
        LOG_WARN("status_page_unprotected", LOG_S("listen", s->listen),
                 LOG_S("hint", "set [http] status_token, or listen on loopback"));
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

int admin_http_set_status_token(admin_http *s, const char *token)
{
    char *copy = strdup(token ? token : "");
    if (!copy)
        return -ENOMEM;
    free(s->status_token);
    s->status_token = copy;
    s->status_token_len = strlen(copy);
    return 0;
}

int admin_http_set_api_tokens(admin_http *s, const admin_http_token *tokens, size_t n)
{
    admin_http_token *copy = NULL;
    if (n > 0) {
        copy = malloc(n * sizeof *copy);
        if (!copy)
            return -ENOMEM;
        memcpy(copy, tokens, n * sizeof *copy);
    }
    unsigned scopes = 0;
    for (size_t i = 0; i < n; i++)
        scopes |= copy[i].scopes;
    free(s->api_tokens);
    s->api_tokens = copy;
    s->n_api_tokens = n;
    s->api_scopes = scopes;
    return 0;
}

bool admin_http_is_loopback(const admin_http *s)
{
    if (s->addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&s->addr;
        return memcmp(&a6->sin6_addr, &in6addr_loopback, sizeof in6addr_loopback) == 0;
    }
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&s->addr;
    return (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
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
        ahttp_conn_close(pgp_list_entry(pos, conn, link));
    }
    uv_close((uv_handle_t *)&s->listener, listener_closed);
}
