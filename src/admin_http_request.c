/* admin_http_request.c - one request on an admin HTTP connection: Debian's http-parser
 * callbacks with the header and body limits, early answers (before the body is read), routing,
 * the token and content-type checks, and the answers of GET /metrics, /healthz, /readyz, the
 * status page (GET /, and GET /v1/status handed to callbacks.status) and POST /v1/items (handed
 * to callbacks.enqueue). The API's routes are admin_api.c's; connections and writing answers
 * are admin_http.c's.
 */
#include "admin_http_internal.h"

#include "log.h"
#include "status_page.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <errno.h>
#include <http_parser.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char disabled_json[] =
    "{\"error\":\"http enqueue is disabled: set [http] enqueue_token\"}";

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

/* ---- routes ------------------------------------------------------------------------------- */

typedef enum route {
    ROUTE_METRICS,
    ROUTE_HEALTHZ,
    ROUTE_READYZ,
    ROUTE_ITEMS,
    ROUTE_PAGE,
    ROUTE_STATUS,
    ROUTE_API, /* the management API, its document, the tenant page (admin_api.c) */
    ROUTE_NONE
} route;

static route find_route(conn *c, api_route *api)
{
    /* url is never empty for a parsed request line; "" when its buffer failed. */
    const char *url = c->url.len && !c->url.failed ? c->url.data : "";
    size_t n = strcspn(url, "?#");
    static const struct {
        const char *path;
        route r;
    } routes[] = {{"/metrics", ROUTE_METRICS}, {"/healthz", ROUTE_HEALTHZ},
                  {"/readyz", ROUTE_READYZ},   {"/v1/items", ROUTE_ITEMS},
                  {"/", ROUTE_PAGE},           {"/v1/status", ROUTE_STATUS}};
    for (size_t i = 0; i < PGP_ARRAY_LEN(routes); i++) {
        if (strlen(routes[i].path) == n && strncmp(url, routes[i].path, n) == 0) {
            c->route = routes[i].path;
            return routes[i].r;
        }
    }
    api_route a = ahttp_api_route(c, url, n);
    if (api)
        *api = a;
    if (a != API_NONE)
        return ROUTE_API;
    c->route = "other";
    return ROUTE_NONE;
}

bool ahttp_is_json_type(const conn *c)
{
    if (c->bad_header || c->ctype_len == 0)
        return false;
    size_t n = strcspn(c->ctype, ";");
    while (n > 0 && (c->ctype[n - 1] == ' ' || c->ctype[n - 1] == '\t'))
        n--;
    return n == strlen("application/json") && strncasecmp(c->ctype, "application/json", n) == 0;
}

/* The credentials after Authorization's scheme (case-insensitive, then a space), without the
 * blanks around them: *n bytes at the result, or NULL for another scheme or a bad header. */
static const char *credentials(const conn *c, const char *scheme, size_t *n)
{
    size_t sl = strlen(scheme);
    if (c->bad_header || c->auth_len <= sl || strncasecmp(c->auth, scheme, sl) != 0 ||
        c->auth[sl] != ' ')
        return NULL;
    const char *v = c->auth + sl + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t len = strlen(v);
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    *n = len;
    return v;
}

/* The token a request presents: Bearer credentials, or (basic_too) the password of HTTP Basic
 * ones with any user name, which a browser asked by WWW-Authenticate: Basic sends with the
 * status page's polls too. Copied into buf; its length, or -1 when none. */
static ssize_t presented_token(const conn *c, bool basic_too, char *buf, size_t cap)
{
    size_t n;
    const char *tok = credentials(c, "Bearer", &n);
    if (tok) {
        if (n >= cap)
            return -1;
        memcpy(buf, tok, n);
        return (ssize_t)n;
    }
    const char *b64 = basic_too ? credentials(c, "Basic", &n) : NULL;
    if (!b64 || n == 0 || n % 4 != 0 || n > sizeof c->auth)
        return -1;
    unsigned char plain[sizeof c->auth];
    int len = EVP_DecodeBlock(plain, (const unsigned char *)b64, (int)n);
    if (len < 0)
        return -1;
    /* EVP_DecodeBlock counts the padding's bytes as decoded zeros. */
    if (b64[n - 1] == '=')
        len--;
    if (b64[n - 2] == '=')
        len--;
    if (len <= 0)
        return -1;
    const unsigned char *colon = memchr(plain, ':', (size_t)len);
    if (!colon)
        return -1;
    size_t pass_len = (size_t)len - (size_t)(colon + 1 - plain);
    if (pass_len >= cap)
        return -1;
    memcpy(buf, colon + 1, pass_len);
    return (ssize_t)pass_len;
}

ssize_t ahttp_bearer(const conn *c, char *buf, size_t cap)
{
    ssize_t n = presented_token(c, false, buf, cap > 0 ? cap - 1 : 0);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}

ssize_t ahttp_api_token_find(const admin_http *s, const char *tok, size_t n)
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (s->n_api_tokens == 0 || EVP_Digest(tok, n, digest, &len, EVP_sha256(), NULL) != 1 ||
        len != 32)
        return -1;
    ssize_t found = -1;
    for (size_t i = 0; i < s->n_api_tokens; i++)
        if (CRYPTO_memcmp(digest, s->api_tokens[i].hash, 32) == 0)
            found = (ssize_t)i;
    return found;
}

bool ahttp_is_configured_token(const admin_http *s, const char *tok, size_t n)
{
    bool enqueue = s->token_len > 0 && token_equal(tok, n, s->token, s->token_len);
    bool status =
        s->status_token_len > 0 && token_equal(tok, n, s->status_token, s->status_token_len);
    return enqueue || status;
}

/* What the API tokens (admin_http_set_api_tokens) say of a presented token: its scopes with
 * TOKEN_KNOWN, or 0 for none of them. */
#define TOKEN_KNOWN 0x80000000u
static unsigned api_token_scopes(const admin_http *s, const char *tok, size_t n)
{
    ssize_t i = ahttp_api_token_find(s, tok, n);
    return i < 0 ? 0 : s->api_tokens[i].scopes | TOKEN_KNOWN;
}

typedef enum token_right { ACCESS_OK, ACCESS_UNAUTHORIZED, ACCESS_FORBIDDEN } token_right;

/* The request's right to a route guarded by `configured` (the enqueue or status token; "" =
 * none) and API tokens with `scope`. */
static token_right token_access(const conn *c, const char *configured, size_t configured_len,
                                unsigned scope, bool basic_too)
{
    char tok[sizeof c->auth];
    ssize_t n = presented_token(c, basic_too, tok, sizeof tok);
    if (n < 0)
        return ACCESS_UNAUTHORIZED;
    bool configured_ok =
        configured_len > 0 && token_equal(tok, (size_t)n, configured, configured_len);
    unsigned scopes = configured_ok ? 0 : api_token_scopes(c->srv, tok, (size_t)n);
    OPENSSL_cleanse(tok, sizeof tok); /* on every path: the copy is the client's secret */
    if (configured_ok || (scopes & scope))
        return ACCESS_OK;
    return scopes & TOKEN_KNOWN ? ACCESS_FORBIDDEN : ACCESS_UNAUTHORIZED;
}

/* Checks that can be made from the request line and headers. Returns 0 to go on, else the
 * status to answer with (json and extra set). */
static int precheck(conn *c, const char **json, const char **extra)
{
    admin_http *s = c->srv;
    api_route api = API_NONE;
    route r = find_route(c, &api);
    bool get = c->parser.method == HTTP_GET || c->parser.method == HTTP_HEAD;
    *extra = NULL;
    switch (r) {
    case ROUTE_API:
        return ahttp_api_precheck(c, api, json, extra);
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
    case ROUTE_PAGE:
    case ROUTE_STATUS:
        if (!get) {
            *json = "{\"error\":\"method not allowed\"}";
            *extra = "Allow: GET, HEAD\r\n";
            return 405;
        }
        /* Open when neither a status token nor an API token with the status scope is set. */
        token_right a =
            s->status_token_len > 0 || (s->api_scopes & ADMIN_SCOPE_STATUS)
                ? token_access(c, s->status_token, s->status_token_len, ADMIN_SCOPE_STATUS, true)
                : ACCESS_OK;
        if (a == ACCESS_FORBIDDEN) {
            *json = "{\"error\":\"this token lacks the status scope\"}";
            return 403;
        }
        if (a != ACCESS_OK) {
            *json = "{\"error\":\"missing or invalid status token\"}";
            /* The page asks for Basic credentials, which a browser prompts for and then sends
             * with the page's polls too. The polls' own 401 must not ask: a fetch() answered
             * with a Basic challenge waits for a prompt (for ever in headless Chromium), so it
             * names Bearer, which no browser prompts for. */
            *extra = r == ROUTE_PAGE
                         ? "WWW-Authenticate: Basic realm=\"pgpace status\", charset=\"UTF-8\"\r\n"
                         : "WWW-Authenticate: Bearer realm=\"pgpace status\"\r\n";
            return 401;
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
    if ((s->token_len == 0 && !(s->api_scopes & ADMIN_SCOPE_ENQUEUE)) || !s->cb.enqueue) {
        *json = disabled_json;
        return 503;
    }
    token_right a = token_access(c, s->token, s->token_len, ADMIN_SCOPE_ENQUEUE, false);
    if (a == ACCESS_FORBIDDEN) {
        *json = "{\"error\":\"this token lacks the enqueue scope\"}";
        return 403;
    }
    if (a != ACCESS_OK) {
        *json = "{\"error\":\"missing or invalid bearer token\"}";
        *extra = "WWW-Authenticate: Bearer realm=\"pgpace\"\r\n";
        return 401;
    }
    if (!ahttp_is_json_type(c)) {
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
    strbuf_json_escape(&j, role, strlen(role));
    strbuf_puts(&j, "\"");
    if (!rd.ready) {
        const char *reason = rd.reason ? rd.reason : "not ready";
        strbuf_puts(&j, ",\"reason\":\"");
        strbuf_json_escape(&j, reason, strlen(reason));
        strbuf_puts(&j, "\"");
    }
    strbuf_puts(&j, "}");
    const char *text = strbuf_str(&j);
    if (text)
        ahttp_respond_json(c, rd.ready ? 200 : 503, NULL, text);
    else
        ahttp_conn_close(c);
    strbuf_free(&j);
}

static void answer_metrics(conn *c)
{
    admin_http *s = c->srv;
    if (!s->cb.render_metrics) {
        ahttp_respond_json(c, 503, NULL, "{\"error\":\"metrics are not available\"}");
        return;
    }
    strbuf text = {0};
    strbuf_append(&text, "", 0);
    int rc = s->cb.render_metrics(s->cb.arg, &text);
    if (rc != 0 || text.failed) {
        LOG_WARN("admin_http_metrics_failed", LOG_S("error", strerror(rc ? -rc : ENOMEM)));
        ahttp_respond_json(c, 500, NULL, "{\"error\":\"rendering metrics failed\"}");
    } else {
        ahttp_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, text.data,
                      text.len);
    }
    strbuf_free(&text);
}

static void answer_items(conn *c)
{
    admin_http *s = c->srv;
    if (c->body.failed) {
        ahttp_respond_json(c, 500, NULL, "{\"error\":\"out of memory\"}");
        return;
    }
    strbuf_append(&c->body, "", 0); /* a terminated (possibly empty) string */
    if (c->body.len > 0 && memchr(c->body.data, '\0', c->body.len)) {
        ahttp_respond_json(c, 400, NULL,
                           "{\"error\":\"body is not valid JSON: it contains a NUL byte\"}");
        return;
    }
    admin_http_reply *r = malloc(sizeof *r);
    if (!r || c->body.failed) {
        free(r);
        ahttp_respond_json(c, 500, NULL, "{\"error\":\"out of memory\"}");
        return;
    }
    r->c = c;
    c->reply = r;
    /* May answer at once (admin_http_reply_send from inside the call). */
    s->cb.enqueue(s->cb.arg, c->body.data, c->body.len, r);
}

static void answer_page(conn *c)
{
    status_page page;
    if (status_page_load(&page) != 0) {
        ahttp_respond_json(c, 500, NULL, "{\"error\":\"the status page is not available\"}");
        return;
    }
    ahttp_respond(c, 200, "text/html; charset=utf-8", page.headers, page.html, page.len);
}

static void answer_status(conn *c)
{
    admin_http *s = c->srv;
    if (!s->cb.status) {
        ahttp_respond_json(c, 503, NULL, "{\"error\":\"status is not available\"}");
        return;
    }
    /* url is terminated: strbuf keeps a NUL after its bytes. */
    const char *url = c->url.len && !c->url.failed ? c->url.data : "";
    const char *q = strchr(url, '?');
    char query[ADMIN_HTTP_MAX_HEADER + 1];
    size_t n = 0;
    if (q) {
        q++;
        n = strcspn(q, "#");
        if (n > ADMIN_HTTP_MAX_HEADER)
            n = ADMIN_HTTP_MAX_HEADER;
        memcpy(query, q, n);
    }
    query[n] = '\0';
    admin_http_reply *r = malloc(sizeof *r);
    if (!r) {
        ahttp_respond_json(c, 500, NULL, "{\"error\":\"out of memory\"}");
        return;
    }
    r->c = c;
    c->reply = r;
    s->cb.status(s->cb.arg, query, r);
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
        ahttp_respond_json(c, c->early_status, c->early_extra, c->early_json);
        return;
    }
    const char *json, *extra;
    int status = precheck(c, &json, &extra);
    if (status == 0 && c->body.len > c->srv->max_body) {
        status = 413;
        json = c->problem ? "{\"type\":\"urn:pgpace:problem:invalid-request\",\"title\":"
                            "\"Content Too Large\",\"status\":413,\"detail\":\"body is too "
                            "large\"}"
                          : "{\"error\":\"body is too large\"}";
    }
    if (status != 0) {
        ahttp_respond_json(c, status, extra, json);
        return;
    }
    api_route api = API_NONE;
    switch (find_route(c, &api)) {
    case ROUTE_API:
        ahttp_api_answer(c, api);
        break;
    case ROUTE_METRICS:
        answer_metrics(c);
        break;
    case ROUTE_HEALTHZ:
        ahttp_respond_json(c, 200, NULL, "{\"status\":\"ok\"}");
        break;
    case ROUTE_READYZ:
        answer_readyz(c);
        break;
    case ROUTE_ITEMS:
        answer_items(c);
        break;
    case ROUTE_PAGE:
        answer_page(c);
        break;
    case ROUTE_STATUS:
        answer_status(c);
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
    ahttp_request_reset(c);
    c->started = uv_now(c->srv->loop);
    c->state = CONN_READING;
    /* The whole request must arrive within one timeout from its first byte. */
    ahttp_arm_timer(c, c->srv->idle_ms);
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
                     {"expect", HDR_EXPECT},
                     {"if-match", HDR_IF_MATCH},
                     {"idempotency-key", HDR_IDEMPOTENCY_KEY}};
        for (size_t i = 0; i < PGP_ARRAY_LEN(known); i++) {
            if (fl == strlen(known[i].name) && strncasecmp(c->field, known[i].name, fl) == 0)
                c->current = known[i].h;
        }
        /* A second Authorization or Content-Type is ambiguous: refuse it. */
        if ((c->current == HDR_AUTHORIZATION && c->auth_len) ||
            (c->current == HDR_CONTENT_TYPE && c->ctype_len))
            c->bad_header = true;
        if ((c->current == HDR_IF_MATCH && c->if_match_len) ||
            (c->current == HDR_IDEMPOTENCY_KEY && c->idem_key_len))
            c->bad_api_header = true;
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
    case HDR_IF_MATCH:
        header_append(c->if_match, sizeof c->if_match, &c->if_match_len, &c->bad_api_header, at, n);
        break;
    case HDR_IDEMPOTENCY_KEY:
        header_append(c->idem_key, sizeof c->idem_key, &c->idem_key_len, &c->bad_api_header, at, n);
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
        ahttp_conn_close(c);
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
    api_route api = API_NONE;
    route r = find_route(c, &api);
    if (status == 0 && r != ROUTE_ITEMS && !(r == ROUTE_API && ahttp_api_takes_body(c, api))) {
        /* A GET with a body: answer it, but do not read the body. */
        status = 400;
        json = c->problem ? "{\"type\":\"urn:pgpace:problem:invalid-request\",\"title\":\"Bad "
                            "Request\",\"status\":400,\"detail\":\"unexpected request body\"}"
                          : "{\"error\":\"unexpected request body\"}";
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
        return fail_early(c, 413,
                          c->problem ? "{\"type\":\"urn:pgpace:problem:invalid-request\","
                                       "\"title\":\"Content Too Large\",\"status\":413,"
                                       "\"detail\":\"body is too large\"}"
                                     : "{\"error\":\"body is too large\"}",
                          NULL);
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

void ahttp_parse_input(conn *c, const char *data, size_t len)
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
            ahttp_conn_close(c);
            return;
        }
        ahttp_stop_reading(c);
        handle_request(c);
        return;
    }
    if (e != HPE_OK) {
        int status = e == HPE_HEADER_OVERFLOW ? 431 : 400;
        LOG_DEBUG("admin_http_bad_request", LOG_S("error", http_errno_name(e)));
        ahttp_stop_reading(c);
        c->state = CONN_HANDLING;
        c->close_after_write = true;
        ahttp_respond_json(c, status, NULL,
                           status == 431 ? "{\"error\":\"request header fields too large\"}"
                                         : "{\"error\":\"malformed HTTP request\"}");
    }
}

void ahttp_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = stream->data;
    if (c->state == CONN_CLOSING)
        return;
    if (nread < 0) {
        /* EOF or error. A request cut short is not answered. */
        ahttp_conn_close(c);
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
        ahttp_stop_reading(c);
        if (c->pending.failed)
            ahttp_conn_close(c);
        return;
    case CONN_IDLE:
    case CONN_READING:
        ahttp_parse_input(c, buf->base, (size_t)nread);
        return;
    case CONN_CLOSING:
        return;
    }
}
