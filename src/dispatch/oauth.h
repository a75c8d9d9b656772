/* oauth.h - OAuth2 client credentials (RFC 6749 section 4.4) for receiver authentication: a
 * customer's access token, fetched through the dispatcher's HTTP sender and cached.
 *
 * Contract:
 * - An oauth_cred is one customer's credential set (token URL, client id and secret, scope)
 *   with its cached token. Reference-counted: the customer holds one reference and a token
 *   request in flight another, so a customer reloaded with other credentials (or deleted)
 *   releases its set at once; the old set's request still completes and tells its waiters.
 *   Changed credentials make a new set, so a change of the customer's auth drops the token.
 * - oauth_acquire() with a usable token (until its expiry less min(5 s, 2 % of its lifetime))
 *   gives OAUTH_READY and the header set to send: the customer's extra header lines plus
 *   "Authorization: Bearer TOKEN" (an http_headers the caller references through http_send,
 *   never frees). From its expiry less min(60 s, 10 %) on, that acquire also starts a new
 *   token request in the background (outside a failure's hold), so refreshing, or failing to,
 *   holds no delivery up while the token still works. Without a usable token the waiter is
 *   queued (OAUTH_WAITING) and a token request started unless one is in flight: at most one
 *   per set, every waiter shares its answer. A request that cannot even start is a failure
 *   like any other ("oauth_transport": counted, logged, held).
 *   Waiters are told exactly once, from the loop (the request's completion), with the headers
 *   or with a failure: an http_result whose error_class is "oauth_http" (a non-2xx answer),
 *   "oauth_response" (not a usable token), "oauth_transport" (dns, connect, TLS, timeout...),
 *   "ssrf" (the token endpoint's address is refused), "proxy" (the egress proxy failed) or
 *   "aborted" (the sender closed). The
 *   wait is bounded by that request's timeouts (the customer's connect and request timeouts),
 *   never by anything else.
 * - A failure is remembered for OAUTH_FAILURE_HOLD_MS: acquires meanwhile fail at once with it
 *   (OAUTH_FAILED, *failure filled in), so a broken token endpoint sees one request per hold,
 *   not one per delivery.
 * - oauth_invalidate(set, gen): the receiver refused the token of generation gen (a 401): it is
 *   dropped unless a newer one replaced it already, so a burst of 401s costs one request.
 * - The request (http_post_form): POST token_url with grant_type=client_credentials (and
 *   scope=S when set), "Authorization: Basic base64(urlencode(id):urlencode(secret))" (RFC 6749
 *   2.3.1), accept: application/json, through the egress proxy the caller chose for the token
 *   URL (the SSRF check then applies to the token endpoint's address, as for webhooks). The answer
 * must be a 2xx with a JSON object (at most OAUTH_BODY_MAX bytes) holding access_token (1 to
 * OAUTH_TOKEN_MAX printable ASCII characters without space), token_type "Bearer" in any case and
 * optionally expires_in (1 s to 1 year, a number or a numeric string; OAUTH_DEFAULT_LIFETIME_S when
 * absent).
 * - The client secret and the token are never logged nor put in an error text; a failure's
 *   text says what was wrong (status, missing field), never the response body.
 * - Metrics: every request counts in pgpace_oauth_token_requests_total{customer, result},
 *   result "ok" or the failure's class.
 * Single-threaded (the loop's thread), like the sender.
 */
#ifndef PGPACE_DISPATCH_OAUTH_H
#define PGPACE_DISPATCH_OAUTH_H

#include "http_sender.h"
#include "list.h"
#include "metrics.h"
#include "oauth_token.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OAUTH_FAILURE_HOLD_MS 1000

typedef struct oauth_cred oauth_cred;
typedef struct oauth_waiter oauth_waiter;

/* headers: the set to send (valid during the call; http_send takes its own reference) and gen
 * its token's generation, or failure (headers NULL). */
typedef void (*oauth_ready_cb)(oauth_waiter *w, http_headers *headers, uint64_t gen,
                               const http_result *failure);

struct oauth_waiter {
    pgp_list link; /* its set's waiting list while queued */
    oauth_ready_cb cb;
    bool queued;
};

/* What a request needs from the dispatcher. */
typedef struct oauth_env {
    http_sender *http;
    metrics *m;
    int requests_metric; /* counter {customer, result} */
} oauth_env;

/* A set from a customer's row (all but scope required). header_lines: the customer's extra
 * header lines (LF-separated, "" or NULL for none). Returns 0, -EINVAL or -ENOMEM. */
int oauth_cred_new(const char *customer, const char *token_url, const char *client_id,
                   const char *client_secret, const char *scope, const char *header_lines,
                   oauth_cred **out) PGP_MUST_CHECK;
/* Whether the set holds exactly these credentials (a reload that changed none keeps it). */
bool oauth_cred_matches(const oauth_cred *c, const char *token_url, const char *client_id,
                        const char *client_secret, const char *scope);
/* The customer's name and extra header lines after a reload that kept the credentials. The
 * token stays. Returns 0 or -ENOMEM / -EINVAL (the set is unchanged then). */
int oauth_cred_update(oauth_cred *c, const char *customer, const char *header_lines) PGP_MUST_CHECK;
void oauth_cred_release(oauth_cred *c);

typedef enum oauth_state { OAUTH_READY, OAUTH_WAITING, OAUTH_FAILED } oauth_state;

/* The token endpoint (for the caller's choice of egress proxy). */
const char *oauth_cred_token_url(const oauth_cred *c);

/* See the contract (times on the monotonic uv_hrtime clock). proxy: the egress proxy for the
 * token URL (http_form_request.proxy), copied. On OAUTH_FAILED *failure is
 * filled in (its strings valid until the loop runs on). */
oauth_state oauth_acquire(oauth_cred *c, const oauth_env *env, const char *proxy,
                          long connect_timeout_ms, long total_timeout_ms, oauth_waiter *w,
                          http_headers **headers, uint64_t *gen, http_result *failure);
void oauth_invalidate(oauth_cred *c, uint64_t gen);

#endif
