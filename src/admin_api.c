/* admin_api.c - the admin listener's management API (/v1/..., answered by the database through
 * callbacks.api), its OpenAPI document (GET /v1/openapi.json) and the tenant page (GET /portal,
 * whose own API is /v1/portal/...). See admin_http.h for the contract and README "Management
 * API" for what users see.
 *
 * Before a request is handed on:
 * - the method is GET (HEAD), POST, PATCH or DELETE (else 405 with Allow);
 * - /v1/portal/... needs a bearer token, which the database checks (a signed link); every other
 *   route an API token (pgpace token create) with the read scope for GET and the write scope for
 *   the rest: no token or an unknown one 401, a known one without the scope 403 (the configured
 *   enqueue_token and status_token are not API tokens: 403 too, which says so);
 * - a body only with POST and PATCH, of type application/json, within max_body_bytes, without a
 *   NUL byte, and without a member named twice in one object (400 naming it, as on every JSON
 *   path: json_dupkey.h);
 * - the path's segments are percent-decoded (a malformed escape, a NUL or control character, or
 *   an empty segment is a 400) and the query string becomes an object of strings (a parameter
 *   given twice is a 400).
 * Every answer of the API is JSON, its errors RFC 9457 problem documents
 * (application/problem+json); the tokens, links and bodies never reach the log.
 */
#include "admin_http_internal.h"

#include "json_dupkey.h"
#include "log.h"
#include "openapi_json.h"
#include "portal_page_html.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PROBLEM(status, title, slug, detail)                                                       \
    "{\"type\":\"urn:pgpace:problem:" slug "\",\"title\":\"" title "\",\"status\":" #status        \
    ",\"detail\":\"" detail "\"}"

/* The first segments of the API's paths, and their metrics labels. */
static const char *const api_roots[] = {"customers",  "carriers",     "hosts", "events",
                                        "deliveries", "dead-letters", "stats", "portal"};
static const char *const api_labels[] = {"/v1/customers", "/v1/carriers",   "/v1/hosts",
                                         "/v1/events",    "/v1/deliveries", "/v1/dead-letters",
                                         "/v1/stats",     "/v1/portal"};

static bool is_portal(const char *url, size_t n)
{
    return (n == 10 && strncmp(url, "/v1/portal", 10) == 0) ||
           (n > 10 && strncmp(url, "/v1/portal/", 11) == 0);
}

api_route ahttp_api_route(conn *c, const char *url, size_t n)
{
    if (n == strlen("/v1/openapi.json") && strncmp(url, "/v1/openapi.json", n) == 0) {
        c->route = "/v1/openapi.json";
        return API_OPENAPI;
    }
    if (n == strlen("/portal") && strncmp(url, "/portal", n) == 0) {
        c->route = "/portal";
        return API_PORTAL_PAGE;
    }
    if (n <= 4 || strncmp(url, "/v1/", 4) != 0)
        return API_NONE;
    size_t root = strcspn(url + 4, "/?#");
    if (4 + root > n)
        root = n - 4;
    for (size_t i = 0; i < PGP_ARRAY_LEN(api_roots); i++) {
        if (strlen(api_roots[i]) == root && strncmp(url + 4, api_roots[i], root) == 0) {
            c->route = api_labels[i];
            return API_CALL;
        }
    }
    return API_NONE; /* another path under /v1: 404 */
}

static bool method_is(const conn *c, enum http_method m)
{
    return c->parser.method == m;
}

bool ahttp_api_takes_body(const conn *c, api_route r)
{
    return r == API_CALL && (method_is(c, HTTP_POST) || method_is(c, HTTP_PATCH));
}

static const char *request_url(const conn *c)
{
    return c->url.len && !c->url.failed ? c->url.data : "";
}

/* The API token's index for the request's bearer token; -1 for none, -2 for a configured
 * (enqueue or status) token, -3 for no token at all. */
static ssize_t request_token(const conn *c)
{
    char tok[sizeof c->auth];
    ssize_t n = ahttp_bearer(c, tok, sizeof tok);
    if (n < 0)
        return -3;
    ssize_t i = ahttp_api_token_find(c->srv, tok, (size_t)n);
    if (i < 0 && ahttp_is_configured_token(c->srv, tok, (size_t)n))
        i = -2;
    OPENSSL_cleanse(tok, sizeof tok);
    return i;
}

int ahttp_api_precheck(conn *c, api_route r, const char **json, const char **extra)
{
    admin_http *s = c->srv;
    bool get = method_is(c, HTTP_GET) || method_is(c, HTTP_HEAD);
    *extra = NULL;
    if (r != API_CALL) {
        if (!get) {
            *json = "{\"error\":\"method not allowed\"}";
            *extra = "Allow: GET, HEAD\r\n";
            return 405;
        }
        return 0;
    }
    c->problem = true;
    if (!get && !method_is(c, HTTP_POST) && !method_is(c, HTTP_PATCH) &&
        !method_is(c, HTTP_DELETE)) {
        *json = PROBLEM(405, "Method Not Allowed", "method-not-allowed",
                        "the API answers GET, POST, PATCH and DELETE");
        *extra = "Allow: GET, POST, PATCH, DELETE\r\n";
        return 405;
    }
    if (!s->cb.api) {
        *json = PROBLEM(503, "Service Unavailable", "error", "the API is not available");
        return 503;
    }
    const char *url = request_url(c);
    if (is_portal(url, strcspn(url, "?#"))) {
        char tok[sizeof c->auth];
        ssize_t n = ahttp_bearer(c, tok, sizeof tok);
        OPENSSL_cleanse(tok, sizeof tok);
        if (n <= 0) {
            *json =
                PROBLEM(401, "Unauthorized", "unauthorized", "open the tenant page from its link");
            *extra = "WWW-Authenticate: Bearer realm=\"pgpace portal\"\r\n";
            return 401;
        }
    } else {
        ssize_t i = request_token(c);
        if (i == -2) {
            *json = PROBLEM(403, "Forbidden", "forbidden",
                            "the enqueue and status tokens of the configuration do not open the "
                            "API: create a token with pgpace token create --scope read,write");
            return 403;
        }
        if (i < 0) {
            *json = PROBLEM(401, "Unauthorized", "unauthorized", "missing or invalid bearer token");
            *extra = "WWW-Authenticate: Bearer realm=\"pgpace\"\r\n";
            return 401;
        }
        unsigned need = get ? ADMIN_SCOPE_READ : ADMIN_SCOPE_WRITE;
        if (!(s->api_tokens[i].scopes & need)) {
            *json =
                get ? PROBLEM(403, "Forbidden", "forbidden", "this token lacks the read scope")
                    : PROBLEM(403, "Forbidden", "forbidden", "this token lacks the write scope");
            return 403;
        }
    }
    if (c->bad_api_header) {
        *json = PROBLEM(400, "Bad Request", "invalid-request",
                        "If-Match or Idempotency-Key is repeated or too long");
        return 400;
    }
    bool has_body = (c->parser.flags & F_CHUNKED) ||
                    ((c->parser.flags & F_CONTENTLENGTH) && c->parser.content_length > 0);
    if (has_body && ahttp_api_takes_body(c, r) && !ahttp_is_json_type(c)) {
        *json = PROBLEM(415, "Unsupported Media Type", "invalid-request",
                        "content-type must be application/json");
        return 415;
    }
    if ((c->parser.flags & F_CONTENTLENGTH) && c->parser.content_length > s->max_body) {
        *json = PROBLEM(413, "Content Too Large", "invalid-request", "body is too large");
        return 413;
    }
    return 0;
}

/* ---- the request as JSON ------------------------------------------------------------------ */

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Whether s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len = c < 0x80             ? 1
                     : (c & 0xE0) == 0xC0 ? 2
                     : (c & 0xF0) == 0xE0 ? 3
                     : (c & 0xF8) == 0xF0 ? 4
                                          : 0;
        if (len == 0 || i + len > n || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4))
            return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        if ((len == 3 && c == 0xE0 && s[i + 1] < 0xA0) ||
            (len == 3 && c == 0xED && s[i + 1] > 0x9F) ||
            (len == 4 && c == 0xF0 && s[i + 1] < 0x90) ||
            (len == 4 && c == 0xF4 && s[i + 1] > 0x8F))
            return false;
        i += len;
    }
    return true;
}

/* Percent-decodes s[0..n) ('+' as a space when plus) as a JSON string onto out. -EINVAL for a
 * malformed escape, a decoded NUL or control character, or bytes that are not UTF-8. */
static int put_decoded(strbuf *out, const char *s, size_t n, bool plus)
{
    strbuf plain = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '%') {
            int hi = i + 2 < n ? hex_value(s[i + 1]) : -1;
            int lo = i + 2 < n ? hex_value(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                rc = -EINVAL;
                break;
            }
            ch = (unsigned char)(hi * 16 + lo);
            i += 2;
        } else if (ch == '+' && plus) {
            ch = ' ';
        }
        if (ch < 0x20 || ch == 0x7f)
            rc = -EINVAL;
        else
            strbuf_append(&plain, (const char *)&ch, 1);
    }
    if (rc == 0 && plain.failed)
        rc = -ENOMEM;
    if (rc == 0 && !utf8_valid((const unsigned char *)plain.data, plain.len))
        rc = -EINVAL;
    if (rc == 0) {
        strbuf_puts(out, "\"");
        strbuf_json_escape(out, plain.len ? plain.data : "", plain.len);
        strbuf_puts(out, "\"");
    }
    strbuf_free(&plain);
    return rc;
}

int admin_api_path_json(const char *path, size_t n, strbuf *out)
{
    strbuf_puts(out, "[");
    size_t i = 0;
    bool first = true;
    while (i <= n) {
        size_t len = 0;
        while (i + len < n && path[i + len] != '/')
            len++;
        if (len == 0)
            return -EINVAL; /* an empty segment: "//" or a trailing '/' */
        if (!first)
            strbuf_puts(out, ",");
        first = false;
        if (put_decoded(out, path + i, len, false) != 0)
            return -EINVAL;
        i += len + 1;
    }
    strbuf_puts(out, "]");
    return out->failed ? -ENOMEM : 0;
}

int admin_api_query_json(const char *query, size_t n, strbuf *out)
{
    strbuf_puts(out, "{");
    size_t start = out->len;
    size_t i = 0;
    /* The decoded names so far, each followed by NUL, to refuse one given twice. */
    strbuf names = {0};
    int rc = 0;
    while (i < n && rc == 0) {
        size_t len = strcspn(query + i, "&");
        if (i + len > n)
            len = n - i;
        if (len > 0) {
            const char *pair = query + i;
            const char *eq = memchr(pair, '=', len);
            size_t name_len = eq ? (size_t)(eq - pair) : len;
            if (out->len > start)
                strbuf_puts(out, ",");
            size_t name_at = out->len;
            if (name_len == 0 || put_decoded(out, pair, name_len, true) != 0) {
                rc = -EINVAL;
                break;
            }
            /* Compare the escaped name: equal names escape alike. */
            size_t elen = out->len - name_at;
            for (size_t k = 0; k < names.len && rc == 0;) {
                size_t klen = strlen(names.data + k);
                if (klen == elen && memcmp(names.data + k, out->data + name_at, elen) == 0)
                    rc = -EEXIST;
                k += klen + 1;
            }
            strbuf_append(&names, out->data + name_at, elen);
            strbuf_append(&names, "", 1);
            strbuf_puts(out, ":");
            if (rc == 0 &&
                put_decoded(out, eq ? eq + 1 : pair + len, eq ? len - name_len - 1 : 0, true) != 0)
                rc = -EINVAL;
        }
        i += len + 1;
    }
    strbuf_puts(out, "}");
    if (rc == 0 && (out->failed || names.failed))
        rc = -ENOMEM;
    strbuf_free(&names);
    return rc;
}

/* ---- answers ------------------------------------------------------------------------------ */

static void answer_problem(conn *c, int status, const char *detail, const char *field)
{
    strbuf j = {0};
    strbuf_printf(&j,
                  "{\"type\":\"urn:pgpace:problem:%s\",\"status\":%d,\"title\":\"%s\","
                  "\"detail\":\"",
                  status == 400 ? "invalid-request" : "error", status,
                  status == 400 ? "Bad Request" : "Internal Server Error");
    strbuf_json_escape(&j, detail, strlen(detail));
    strbuf_puts(&j, "\"");
    if (field) {
        strbuf_puts(&j, ",\"field\":\"");
        strbuf_json_escape(&j, field, strlen(field));
        strbuf_puts(&j, "\"");
    }
    strbuf_puts(&j, "}");
    const char *text = strbuf_str(&j);
    if (text)
        ahttp_respond_json(c, status, NULL, text);
    else
        ahttp_conn_close(c);
    strbuf_free(&j);
}

static void answer_call(conn *c)
{
    admin_http *s = c->srv;
    const char *url = request_url(c);
    size_t path_len = strcspn(url, "?#");
    const char *q = url[path_len] == '?' ? url + path_len + 1 : NULL;
    strbuf segs = {0}, query = {0};
    int rc = admin_api_path_json(url + 4, path_len - 4, &segs);
    if (rc != 0) {
        strbuf_free(&segs);
        if (rc == -ENOMEM)
            answer_problem(c, 500, "out of memory", NULL);
        else
            answer_problem(c, 400,
                           "the path has an empty segment, a malformed %-escape or a "
                           "control character",
                           NULL);
        return;
    }
    rc = admin_api_query_json(q ? q : "", q ? strcspn(q, "#") : 0, &query);
    if (rc != 0) {
        strbuf_free(&segs);
        strbuf_free(&query);
        answer_problem(c, rc == -ENOMEM ? 500 : 400,
                       rc == -ENOMEM   ? "out of memory"
                       : rc == -EEXIST ? "a query parameter is given twice"
                                       : "the query string has an empty name, a malformed "
                                         "%-escape or a control character",
                       NULL);
        return;
    }
    bool body = ahttp_api_takes_body(c, API_CALL) && c->body.len > 0;
    strbuf_append(&c->body, "", 0);
    char where[256] = "";
    if (c->body.failed) {
        answer_problem(c, 500, "out of memory", NULL);
    } else if (body && memchr(c->body.data, '\0', c->body.len)) {
        answer_problem(c, 400, "the body is not valid JSON: it contains a NUL byte", NULL);
    } else if (body && json_dupkey(c->body.data, c->body.len, where, sizeof where) == 1) {
        char detail[320];
        snprintf(detail, sizeof detail, "%s: a member named twice in one object", where);
        answer_problem(c, 400, detail, where);
    } else {
        char actor[160] = "portal";
        char portal[sizeof c->auth] = "";
        bool on_portal = is_portal(url, path_len);
        if (on_portal) {
            if (ahttp_bearer(c, portal, sizeof portal) < 0)
                portal[0] = '\0';
        } else {
            ssize_t i = request_token(c);
            snprintf(actor, sizeof actor, "token:%s", i >= 0 ? s->api_tokens[i].name : "?");
        }
        char if_match[sizeof c->if_match], idem[sizeof c->idem_key];
        memcpy(if_match, c->if_match, c->if_match_len);
        if_match[c->if_match_len] = '\0';
        memcpy(idem, c->idem_key, c->idem_key_len);
        idem[c->idem_key_len] = '\0';
        admin_http_api_request req = {
            .method = method_is(c, HTTP_HEAD) ? "GET" : http_method_str(c->parser.method),
            .segments = segs.data,
            .query = query.data,
            .body = body ? c->body.data : NULL,
            .body_len = body ? c->body.len : 0,
            .actor = actor,
            .if_match = c->if_match_len ? if_match : NULL,
            .idempotency_key = c->idem_key_len ? idem : NULL,
            .portal_token = on_portal ? portal : NULL,
        };
        admin_http_reply *r = malloc(sizeof *r);
        if (!r) {
            answer_problem(c, 500, "out of memory", NULL);
        } else {
            r->c = c;
            c->reply = r;
            /* May answer at once (admin_http_reply_api from inside the call). */
            s->cb.api(s->cb.arg, &req, r);
        }
        OPENSSL_cleanse(portal, sizeof portal);
    }
    strbuf_free(&segs);
    strbuf_free(&query);
}

/* A header value from the database is one line of printable characters, or it is dropped. */
static void put_header(strbuf *sb, const char *name, const char *value)
{
    if (!value || !*value)
        return;
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return;
    strbuf_printf(sb, "%s: %s\r\n", name, value);
}

void admin_http_reply_api(admin_http_reply *reply, const admin_http_api_answer *a)
{
    conn *c = reply->c;
    free(reply);
    if (!c)
        return; /* the client is gone */
    c->reply = NULL;
    c->problem = true;
    strbuf extra = {0};
    strbuf_append(&extra, "", 0);
    put_header(&extra, "ETag", a->etag);
    put_header(&extra, "Location", a->location);
    put_header(&extra, "Allow", a->allow);
    if (a->status == 401) {
        const char *url = request_url(c);
        put_header(&extra, "WWW-Authenticate",
                   is_portal(url, strcspn(url, "?#")) ? "Bearer realm=\"pgpace portal\""
                                                      : "Bearer realm=\"pgpace\"");
    }
    const char *headers = strbuf_str(&extra);
    if (!headers) {
        strbuf_free(&extra);
        ahttp_conn_close(c);
        return;
    }
    if (a->status == 204 || !a->body)
        ahttp_respond(c, a->status, "application/json", headers, "", 0);
    else
        ahttp_respond_json(c, a->status, headers, a->body);
    strbuf_free(&extra);
}

void ahttp_api_answer(conn *c, api_route r)
{
    switch (r) {
    case API_CALL:
        answer_call(c);
        return;
    case API_OPENAPI:
        ahttp_respond(c, 200, "application/json", NULL, (const char *)openapi_json,
                      openapi_json_len);
        return;
    case API_PORTAL_PAGE:
        if (!c->srv->portal_headers) {
            ahttp_respond_json(c, 500, NULL, "{\"error\":\"the tenant page is not available\"}");
            return;
        }
        ahttp_respond(c, 200, "text/html; charset=utf-8", c->srv->portal_headers,
                      (const char *)portal_page_html, portal_page_html_len);
        return;
    case API_NONE:
        return;
    }
}
