/* oauth.c - OAuth2 client credentials: token requests and their cache (oauth.h).
 *
 * A set's token lives in `headers` (the customer's extra lines plus the Authorization one, built
 * once per token so a delivery pays nothing for it) until refresh_ns. A request in flight holds
 * a reference on its set and the waiters queued meanwhile; its completion takes the waiting list
 * off the set before telling anyone, since a waiter's callback may start deliveries that
 * acquire from the same set again (they then see the new token, or start the next request).
 * The answer's parsing and the form-encoding are pure, in oauth_token.c.
 */
#include "oauth.h"

#include "log.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

struct oauth_cred {
    unsigned refs;
    char *customer;                                      /* metric label and log field */
    char *token_url, *client_id, *client_secret, *scope; /* scope may be NULL */
    char *header_lines;                                  /* the customer's extra lines, or NULL */
    char *token;           /* the cached access token (a secret), or NULL */
    http_headers *headers; /* header_lines + its Authorization line, NULL without a token */
    uint64_t gen;          /* generation of the current token (0: none yet) */
    uint64_t refresh_ns;   /* uv_hrtime() after which a new token is asked for, in the
                            * background while this one is still handed out */
    uint64_t usable_ns;    /* uv_hrtime() after which this one is not handed out at all */
    bool fetching;         /* a request is in flight (it holds a reference) */
    pgp_list waiting;      /* oauth_waiter.link */
    /* The last failure, answered at once until fail_until_ns. */
    uint64_t fail_until_ns;
    const char *fail_class;
    char fail_error[256];
    const oauth_env *env; /* of the request in flight (the dispatcher's, stable) */
};

static uint64_t mono_ns(void)
{
    return uv_hrtime();
}

static void wipe_free(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

static char *dup_or_null(const char *s)
{
    return s && *s ? strdup(s) : NULL;
}

/* ---- form encoding and the request ---- */

/* "Basic base64(urlencode(id):urlencode(secret))" (RFC 6749 2.3.1), malloc'd; NULL: no memory
 * or too long. */
static char *basic_credentials(const oauth_cred *c)
{
    size_t cap = 3 * (strlen(c->client_id) + strlen(c->client_secret)) + 2;
    char *plain = malloc(cap);
    char *out = NULL;
    if (!plain)
        return NULL;
    long a = oauth_form_encode(c->client_id, plain, cap);
    if (a < 0)
        goto done;
    plain[a] = ':';
    long b = oauth_form_encode(c->client_secret, plain + a + 1, cap - (size_t)a - 1);
    if (b < 0)
        goto done;
    size_t len = (size_t)a + 1 + (size_t)b;
    out = malloc(sizeof "Basic " + 4 * ((len + 2) / 3) + 1);
    if (!out)
        goto done;
    memcpy(out, "Basic ", 6);
    EVP_EncodeBlock((unsigned char *)out + 6, (const unsigned char *)plain, (int)len);
done:
    explicit_bzero(plain, cap);
    free(plain);
    return out;
}

/* grant_type=client_credentials[&scope=...], malloc'd. */
static char *token_form(const oauth_cred *c)
{
    static const char grant[] = "grant_type=client_credentials";
    size_t cap = sizeof grant + (c->scope ? sizeof "&scope=" + 3 * strlen(c->scope) : 0);
    char *form = malloc(cap);
    if (!form)
        return NULL;
    memcpy(form, grant, sizeof grant);
    if (c->scope) {
        size_t n = sizeof grant - 1;
        memcpy(form + n, "&scope=", 7);
        n += 7;
        if (oauth_form_encode(c->scope, form + n, cap - n) < 0) {
            free(form);
            return NULL;
        }
    }
    return form;
}

/* ---- the set ---- */

static int build_headers(const char *lines, const char *token, http_headers **out)
{
    static const char prefix[] = "Authorization: Bearer ";
    size_t ll = lines ? strlen(lines) : 0;
    size_t tl = strlen(token);
    char *all = malloc(ll + 1 + sizeof prefix + tl);
    if (!all)
        return -ENOMEM;
    char *p = all;
    if (ll) {
        memcpy(p, lines, ll);
        p += ll;
        *p++ = '\n';
    }
    memcpy(p, prefix, sizeof prefix - 1);
    memcpy(p + sizeof prefix - 1, token, tl + 1);
    int rc = http_headers_new(all, out);
    explicit_bzero(all, strlen(all));
    free(all);
    return rc;
}

static void cred_free(oauth_cred *c)
{
    free(c->customer);
    free(c->token_url);
    wipe_free(c->client_id);
    wipe_free(c->client_secret);
    free(c->scope);
    wipe_free(c->header_lines);
    wipe_free(c->token);
    http_headers_release(c->headers);
    free(c);
}

int oauth_cred_new(const char *customer, const char *token_url, const char *client_id,
                   const char *client_secret, const char *scope, const char *header_lines,
                   oauth_cred **out)
{
    *out = NULL;
    if (!customer || !token_url || !*token_url || !client_id || !*client_id || !client_secret ||
        !*client_secret)
        return -EINVAL;
    oauth_cred *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->refs = 1;
    pgp_list_init(&c->waiting);
    c->customer = strdup(customer);
    c->token_url = strdup(token_url);
    c->client_id = strdup(client_id);
    c->client_secret = strdup(client_secret);
    c->scope = dup_or_null(scope);
    c->header_lines = dup_or_null(header_lines);
    if (!c->customer || !c->token_url || !c->client_id || !c->client_secret ||
        (scope && *scope && !c->scope) || (header_lines && *header_lines && !c->header_lines)) {
        cred_free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

static bool same(const char *a, const char *b)
{
    if (!a || !*a)
        return !b || !*b;
    return b && strcmp(a, b) == 0;
}

bool oauth_cred_matches(const oauth_cred *c, const char *token_url, const char *client_id,
                        const char *client_secret, const char *scope)
{
    return c && same(c->token_url, token_url) && same(c->client_id, client_id) &&
           same(c->client_secret, client_secret) && same(c->scope, scope);
}

int oauth_cred_update(oauth_cred *c, const char *customer, const char *header_lines)
{
    char *name = strdup(customer);
    char *lines = dup_or_null(header_lines);
    http_headers *h = NULL;
    int rc = !name || (header_lines && *header_lines && !lines) ? -ENOMEM : 0;
    if (rc == 0 && c->token)
        rc = build_headers(lines, c->token, &h);
    if (rc != 0) {
        free(name);
        wipe_free(lines);
        return rc;
    }
    free(c->customer);
    c->customer = name;
    wipe_free(c->header_lines);
    c->header_lines = lines;
    if (c->token) {
        http_headers_release(c->headers);
        c->headers = h;
    }
    return 0;
}

void oauth_cred_release(oauth_cred *c)
{
    if (c && --c->refs == 0)
        cred_free(c);
}

static void drop_token(oauth_cred *c)
{
    wipe_free(c->token);
    c->token = NULL;
    http_headers_release(c->headers);
    c->headers = NULL;
}

void oauth_invalidate(oauth_cred *c, uint64_t gen)
{
    if (c && c->token && c->gen == gen)
        drop_token(c);
}

/* ---- the request's completion ---- */

static void count(const oauth_cred *c, const char *result)
{
    if (!c->env || !c->env->m)
        return;
    const char *labels[] = {c->customer, result};
    metrics_counter_add(c->env->m, c->env->requests_metric, labels, 1);
}

/* Tells every waiter queued on c (taken off it first: see the top of the file). */
static void tell_waiters(oauth_cred *c, const http_result *failure)
{
    pgp_list list;
    pgp_list_init(&list);
    while (!pgp_list_empty(&c->waiting)) {
        pgp_list *n = c->waiting.next;
        pgp_list_remove(n);
        pgp_list_push(&list, n);
    }
    while (!pgp_list_empty(&list)) {
        oauth_waiter *w = pgp_list_entry(list.next, oauth_waiter, link);
        pgp_list_remove(&w->link);
        w->queued = false;
        if (failure)
            w->cb(w, NULL, 0, failure);
        else
            w->cb(w, c->headers, c->gen, NULL);
    }
}

/* The request failed: fail_error is set; remembered (see the contract), counted and logged. */
static void fail(oauth_cred *c, const char *cls)
{
    c->fail_class = cls;
    /* An aborted request (shutdown) says nothing about the endpoint. */
    c->fail_until_ns =
        strcmp(cls, "aborted") == 0 ? 0 : mono_ns() + (uint64_t)OAUTH_FAILURE_HOLD_MS * 1000000u;
    count(c, cls);
    LOG_WARN("oauth_token_failed", LOG_S("customer", c->customer), LOG_S("error_class", cls),
             LOG_S("error", c->fail_error));
}

static void on_token_done(const http_result *r, void *arg)
{
    oauth_cred *c = arg;
    bool ok = false;
    c->fetching = false;
    if (r->error_class) {
        const char *cls = r->error_class;
        /* A refused address, a failing egress proxy and a shutdown mean what they mean for a
         * webhook; anything else is the token endpoint's transport. */
        if (strcmp(cls, "ssrf") != 0 && strcmp(cls, "aborted") != 0 && strcmp(cls, "proxy") != 0)
            cls = "oauth_transport";
        /* The sender's text names the address or curl's error, never a header. */
        snprintf(c->fail_error, sizeof c->fail_error, "token request failed: %s", r->error);
        fail(c, cls);
    } else if (r->status < 200 || r->status > 299) {
        snprintf(c->fail_error, sizeof c->fail_error, "token endpoint answered HTTP %ld",
                 r->status);
        fail(c, "oauth_http");
    } else {
        char *token = NULL;
        int64_t life = 0;
        const char *why = NULL;
        http_headers *h = NULL;
        int rc = oauth_parse_token(r->body, r->body_len, &token, &life, &why);
        if (rc == 0 && (rc = build_headers(c->header_lines, token, &h)) != 0)
            why = "the token does not fit in a header";
        if (rc != 0) {
            wipe_free(token);
            snprintf(c->fail_error, sizeof c->fail_error, "token endpoint response refused: %s",
                     why);
            fail(c, "oauth_response");
        } else {
            ok = true;
            drop_token(c);
            c->token = token;
            c->headers = h;
            c->gen++;
            /* Refreshed min(60 s, 10 % of its lifetime) before it expires; handed out until
             * min(5 s, 2 %) before (clocks and the request's own time), so a refresh, or its
             * failure, holds no delivery up while the token still works. */
            int64_t margin_ms = life * 100 < 60000 ? life * 100 : 60000;
            int64_t slack_ms = life * 20 < 5000 ? life * 20 : 5000;
            uint64_t now = mono_ns();
            c->refresh_ns = now + (uint64_t)(life * 1000 - margin_ms) * 1000000u;
            c->usable_ns = now + (uint64_t)(life * 1000 - slack_ms) * 1000000u;
            c->fail_until_ns = 0;
            count(c, "ok");
            LOG_DEBUG("oauth_token_fetched", LOG_S("customer", c->customer),
                      LOG_I("expires_in_s", life), LOG_D("duration_ms", r->duration_ms));
        }
    }
    if (ok) {
        tell_waiters(c, NULL);
    } else {
        http_result f = {.error_class = c->fail_class, .error = c->fail_error};
        tell_waiters(c, &f);
    }
    c->env = NULL;
    oauth_cred_release(c);
}

const char *oauth_cred_token_url(const oauth_cred *c)
{
    return c->token_url;
}

/* Starts the token request (c->fetching then); on a request that could not even start, the
 * failure is remembered like any other (fail: counted, logged, held). */
static int start_fetch(oauth_cred *c, const oauth_env *env, const char *proxy,
                       long connect_timeout_ms, long total_timeout_ms)
{
    char *form = token_form(c);
    char *auth = basic_credentials(c);
    int rc = -ENOMEM;
    if (form && auth && env && env->http) {
        http_form_request req = {.url = c->token_url,
                                 .form = form,
                                 .authorization = auth,
                                 .proxy = proxy,
                                 .connect_timeout_ms = connect_timeout_ms,
                                 .total_timeout_ms = total_timeout_ms,
                                 .max_body = OAUTH_BODY_MAX};
        rc = http_post_form(env->http, &req, on_token_done, c);
    }
    wipe_free(auth);
    free(form);
    if (rc != 0) {
        snprintf(c->fail_error, sizeof c->fail_error,
                 "could not start the token request (error %d)", rc);
        const oauth_env *was = c->env;
        c->env = env; /* for the metric */
        fail(c, "oauth_transport");
        c->env = was;
        return rc;
    }
    c->fetching = true;
    c->env = env;
    c->refs++;
    LOG_DEBUG("oauth_token_request", LOG_S("customer", c->customer));
    return 0;
}

oauth_state oauth_acquire(oauth_cred *c, const oauth_env *env, const char *proxy,
                          long connect_timeout_ms, long total_timeout_ms, oauth_waiter *w,
                          http_headers **headers, uint64_t *gen, http_result *failure)
{
    uint64_t now = mono_ns();
    *headers = NULL;
    *gen = 0;
    if (c->token && now < c->usable_ns) {
        /* Past refresh_ns: a new one is asked for in the background (not within a failure's
         * hold), and this one served meanwhile. */
        if (now >= c->refresh_ns && !c->fetching && c->fail_until_ns <= now)
            (void)start_fetch(c, env, proxy, connect_timeout_ms, total_timeout_ms);
        *headers = c->headers;
        *gen = c->gen;
        return OAUTH_READY;
    }
    if (!c->fetching && c->fail_until_ns > now) {
        *failure = (http_result){.error_class = c->fail_class, .error = c->fail_error};
        return OAUTH_FAILED;
    }
    if (!c->fetching && start_fetch(c, env, proxy, connect_timeout_ms, total_timeout_ms) != 0) {
        *failure = (http_result){.error_class = c->fail_class, .error = c->fail_error};
        return OAUTH_FAILED;
    }
    pgp_list_push_tail(&c->waiting, &w->link);
    w->queued = true;
    return OAUTH_WAITING;
}
