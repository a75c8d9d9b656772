/* http_route.c - how a request leaves the sender (http_sender_internal.h): direct, or through
 * an HTTP CONNECT egress proxy. Through a proxy the socket curl opens is the proxy's, so the
 * SSRF check on the connected address (open_socket_cb) cannot see the destination: it is
 * resolved here first (uv_getaddrinfo, counted against the request's timeout), checked with
 * netcheck, and the proxy is asked to CONNECT to that very address (a wildcard CONNECT_TO
 * entry), so it cannot resolve the name elsewhere.
 */
#include "http_sender_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Did the proxy fail r: not reachable (the only connection a proxied request opens is to the
 * proxy), or it answered the CONNECT with anything but 2xx (403 by policy, 407 wanting
 * credentials)? Writes r->error when so. A 502 or 504 is the proxy saying that the
 * destination could not be reached: the receiver's failure, classed "connect" as it would be
 * without the proxy (proxy failures do not count against a customer's breaker). */
const char *hs_proxy_failed(http_req *r, CURLcode code)
{
    long connect_code = 0;
    if (curl_easy_getinfo(r->easy, CURLINFO_HTTP_CONNECTCODE, &connect_code) == CURLE_OK &&
        (connect_code == 502 || connect_code == 504)) {
        snprintf(r->error, sizeof r->error,
                 "the proxy could not reach the destination (CONNECT %.300s): HTTP %ld",
                 r->connect_to, connect_code);
        return "connect";
    }
    if (connect_code != 0 && (connect_code < 200 || connect_code > 299)) {
        snprintf(r->error, sizeof r->error, "proxy refused CONNECT (%.300s): HTTP %ld",
                 r->connect_to, connect_code);
        return "proxy";
    }
    if (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_PROXY
#if LIBCURL_VERSION_NUM >= 0x074900
        || code == CURLE_PROXY
#endif
    ) {
        snprintf(r->error, sizeof r->error, "proxy unreachable: %s",
                 r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
        return "proxy";
    }
    return NULL;
}

/* The URL's host and port as curl itself reads them (its URL parser), for the check and the
 * CONNECT_TO entry, which curl matches against the same host name and port. */
static int dest_parse(http_req *r, const char *url)
{
    CURLU *u = curl_url();
    if (!u)
        return -ENOMEM;
    char *host = NULL, *port = NULL;
    int rc = -EINVAL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
        strlen(host) < sizeof r->dest_host) {
        memcpy(r->dest_host, host, strlen(host) + 1);
        r->dest_port = strtol(port, NULL, 10);
        rc = r->dest_port > 0 && r->dest_port <= 65535 ? 0 : -EINVAL;
    }
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}

/* Proxy options of r's easy handle: for a request through r->proxy, or cleared for a direct
 * one after a proxied request (the pooled handle keeps whatever it was last given). */
static int set_proxy_options(http_req *r, bool on)
{
    CURL *e = r->easy;
    SETOPT(CURLOPT_PROXY, on ? r->proxy : "");
    SETOPT(CURLOPT_PROXYTYPE, (long)CURLPROXY_HTTP);
    /* A tunnel for http:// too: the proxy only ever sees "CONNECT ip:port". */
    SETOPT(CURLOPT_HTTPPROXYTUNNEL, on ? 1L : 0L);
    /* The proxy's answer to CONNECT is not the receiver's response (nor its Retry-After). */
    SETOPT(CURLOPT_SUPPRESS_CONNECT_HEADERS, on ? 1L : 0L);
    /* The request's headers (Authorization, the customer's) go to the receiver only, never in
     * the CONNECT (libcurl's default since 7.42; said here because it matters). */
    SETOPT(CURLOPT_HEADEROPT, CURLHEADER_SEPARATE);
    SETOPT(CURLOPT_CONNECT_TO, (struct curl_slist *)NULL);
    r->proxy_set = on;
    return 0;
fail:
    return -EINVAL;
}

/* The destination of a proxied request resolved (on the thread pool): keep the first address
 * netcheck allows and pin it, then hand the request to curl; or fail it ("dns", "ssrf")
 * without the proxy ever hearing of it. */
static void resolved_cb(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    http_req *r = g->data;
    http_sender *s = r->s;
    r->resolving = false;
    if (r->orphaned) {
        /* Its callback ran already (aborted by http_sender_close). */
        uv_freeaddrinfo(res);
        hs_req_destroy(r);
        hs_handle_closed(s);
        return;
    }
    s->open_handles--; /* not closing: this is not the last one */
    http_result failed = {0};
    char ip[INET6_ADDRSTRLEN] = "";
    bool v6 = false;
    if (status != 0) {
        failed.error_class = "dns";
        snprintf(r->error, sizeof r->error, "could not resolve %s: %s", r->dest_host,
                 uv_strerror(status));
    } else {
        for (struct addrinfo *ai = res; ai && !ip[0]; ai = ai->ai_next) {
            const char *reason = NULL;
            const void *bin = ai->ai_family == AF_INET
                                  ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                  : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
            char text[INET6_ADDRSTRLEN] = "?";
            if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
                continue;
            inet_ntop(ai->ai_family, bin, text, sizeof text);
            if (netcheck_allowed(ai->ai_addr, ai->ai_addrlen, &s->allow, &reason)) {
                memcpy(ip, text, sizeof ip);
                v6 = ai->ai_family == AF_INET6;
            } else if (!r->refused[0]) {
                snprintf(r->refused, sizeof r->refused, "refused destination %s: %s", text,
                         reason ? reason : "refused");
            }
        }
        if (!ip[0]) {
            failed.error_class = r->refused[0] ? "ssrf" : "dns";
            snprintf(r->error, sizeof r->error, "%s",
                     r->refused[0] ? r->refused : "no usable address");
        }
    }
    uv_freeaddrinfo(res);
    if (!failed.error_class) {
        /* "::IP:PORT": for any host and port. An entry naming the host applies only if its
         * text equals curl's own spelling of the name, which can differ (an IDN's punycode):
         * curl would then drop the pin without a word and the proxy resolve the name itself.
         * The easy handle carries this one request, so the wildcard pins exactly it. */
        snprintf(r->connect_to, sizeof r->connect_to, "::%s%s%s:%ld", v6 ? "[" : "", ip,
                 v6 ? "]" : "", r->dest_port);
        r->connect_to_node.data = r->connect_to;
        r->connect_to_node.next = NULL;
        /* The lookup counts against the request's total time: curl gets what is left. */
        uint64_t spent_ms = (uv_hrtime() - r->start_ns) / 1000000u;
        if (spent_ms >= (uint64_t)r->total_timeout_ms) {
            failed.error_class = "dns";
            snprintf(r->error, sizeof r->error,
                     "resolving %.200s took %llu ms, the request's whole timeout", r->dest_host,
                     (unsigned long long)spent_ms);
        } else if (curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS,
                                    (long)((uint64_t)r->total_timeout_ms - spent_ms)) != CURLE_OK ||
                   curl_easy_setopt(r->easy, CURLOPT_CONNECT_TO, &r->connect_to_node) != CURLE_OK ||
                   curl_multi_add_handle(s->multi, r->easy) != CURLM_OK) {
            failed.error_class = "internal";
            snprintf(r->error, sizeof r->error, "could not start the request");
        }
    }
    if (failed.error_class) {
        failed.error = r->error;
        hs_req_finish(r, &failed);
    }
}

/* Direct, or through `proxy` (NULL or "": direct) with the destination checked and pinned
 * (see the contract): sets r's proxy options, which a pooled handle keeps from its last
 * request. Returns 0 or a negative error. */
int hs_req_route(http_req *r, const char *url, const char *proxy)
{
    bool via_proxy = proxy && *proxy;
    if (via_proxy) {
        size_t plen = strlen(proxy);
        int rc;
        if (plen >= sizeof r->proxy)
            return -EINVAL;
        if ((rc = dest_parse(r, url)) < 0)
            return rc;
        memcpy(r->proxy, proxy, plen + 1);
    }
    if ((via_proxy || r->proxy_set) && set_proxy_options(r, via_proxy) != 0)
        return -EINVAL;
    r->proxied = via_proxy;
    return 0;
}

/* Hands r (its options, cb and arg set) to curl, or a proxied one first to the resolver
 * (resolved_cb). Returns 0 (its callback will run) or a negative error. */
int hs_req_start(http_sender *s, http_req *r)
{
    r->start_ns = uv_hrtime();
    if (r->proxied) {
        /* The brackets of an IPv6 literal are URL syntax, not part of the address. */
        char host[sizeof r->dest_host];
        size_t hlen = strlen(r->dest_host);
        if (r->dest_host[0] == '[' && hlen >= 2) {
            memcpy(host, r->dest_host + 1, hlen - 2);
            host[hlen - 2] = '\0';
        } else {
            memcpy(host, r->dest_host, hlen + 1);
        }
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        r->gai.data = r;
        if (uv_getaddrinfo(s->loop, &r->gai, resolved_cb, host, NULL, &hints) != 0)
            return -EIO;
        r->resolving = true;
        s->open_handles++; /* the sender is freed only after resolved_cb */
    } else if (curl_multi_add_handle(s->multi, r->easy) != CURLM_OK) {
        return -EIO;
    }
    pgp_list_push(&s->reqs, &r->link);
    s->in_flight++;
    return 0;
}
