/* proxy.c - proxy URL and no-proxy list checks (proxy.h). */
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A DNS name: dot-separated labels of 1 to 63 letters, digits and '-', not starting or ending
 * with '-'. An all-numeric name passes here; callers that care try inet_pton first. */
static bool host_name_ok(const char *h, size_t len)
{
    if (len == 0 || len > PROXY_HOST_MAX)
        return false;
    size_t label = 0;
    for (size_t i = 0; i < len; i++) {
        char c = h[i];
        if (c == '.') {
            if (label == 0 || h[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        if (!is_alnum(c) && c != '-')
            return false;
        if (c == '-' && label == 0)
            return false;
        if (++label > 63)
            return false;
    }
    return label > 0 && h[len - 1] != '-';
}

int proxy_url_check(const char *what, const char *url, pgp_error *err)
{
    static const char expected[] = "expected http://HOST:PORT (an HTTP proxy that accepts CONNECT)";
    if (!url || !*url)
        return pgp_error_set(err, -EINVAL, "%s: must not be empty; %s", what, expected);
    size_t len = strnlen(url, PROXY_URL_MAX + 1);
    if (len > PROXY_URL_MAX)
        return pgp_error_set(err, -EINVAL, "%s: longer than %d bytes", what, PROXY_URL_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= 0x20 || c >= 0x7f)
            return pgp_error_set(err, -EINVAL,
                                 "%s: contains whitespace, a control character (CR, LF, ...) or "
                                 "a non-ASCII byte (0x%02x at position %zu)",
                                 what, c, i + 1);
    }
    const char *sep = strstr(url, "://");
    const char *auth = sep ? sep + 3 : url;
    size_t alen = strcspn(auth, "/?#");
    /* Before anything that would quote the value: it may hold a password. */
    if (memchr(auth, '@', alen))
        return pgp_error_set(err, -EINVAL,
                             "%s: credentials (user:password@) in the proxy URL are not "
                             "supported; %s",
                             what, expected);
    if (!sep)
        return pgp_error_set(err, -EINVAL, "%s: %s, got '%.64s'", what, expected, url);
    if ((size_t)(sep - url) != 4 || strncasecmp(url, "http", 4) != 0)
        return pgp_error_set(err, -EINVAL,
                             "%s: scheme '%.*s' is not supported (https:// and SOCKS proxies are "
                             "not); %s",
                             what, (int)(sep - url) > 16 ? 16 : (int)(sep - url), url, expected);
    const char *rest = auth + alen;
    if (*rest && strcmp(rest, "/") != 0)
        return pgp_error_set(err, -EINVAL, "%s: a proxy URL has no path, query or fragment; %s",
                             what, expected);
    const char *host = auth, *colon;
    size_t hlen;
    if (*auth == '[') {
        const char *close = memchr(auth, ']', alen);
        if (!close)
            return pgp_error_set(err, -EINVAL, "%s: unterminated IPv6 address; %s", what, expected);
        char v6[INET6_ADDRSTRLEN];
        unsigned char bin[16];
        size_t v6len = (size_t)(close - auth) - 1;
        if (v6len >= sizeof v6)
            return pgp_error_set(err, -EINVAL, "%s: invalid IPv6 address", what);
        memcpy(v6, auth + 1, v6len);
        v6[v6len] = '\0';
        if (inet_pton(AF_INET6, v6, bin) != 1)
            return pgp_error_set(err, -EINVAL, "%s: invalid IPv6 address '%s'", what, v6);
        colon = close + 1 < auth + alen && close[1] == ':' ? close + 1 : NULL;
        if (!colon && close + 1 != auth + alen)
            return pgp_error_set(err, -EINVAL, "%s: %s", what, expected);
    } else {
        colon = memchr(auth, ':', alen);
        hlen = colon ? (size_t)(colon - auth) : alen;
        if (!host_name_ok(host, hlen))
            return pgp_error_set(err, -EINVAL, "%s: invalid host '%.*s'; %s", what,
                                 (int)(hlen > 64 ? 64 : hlen), host, expected);
    }
    if (!colon)
        return pgp_error_set(err, -EINVAL, "%s: the port is required; %s", what, expected);
    const char *port = colon + 1;
    size_t plen = (size_t)(auth + alen - port);
    long p = 0;
    for (size_t i = 0; i < plen; i++) {
        if (port[i] < '0' || port[i] > '9' || i >= 5) {
            p = -1;
            break;
        }
        p = p * 10 + (port[i] - '0');
    }
    if (plen == 0 || p < 1 || p > 65535)
        return pgp_error_set(err, -EINVAL, "%s: the port must be a number from 1 to 65535; %s",
                             what, expected);
    return 0;
}

int proxy_bypass_parse(const char *list, proxy_bypass *out, pgp_error *err)
{
    memset(out, 0, sizeof *out);
    if (!list)
        return 0;
    for (const char *p = list; *p;) {
        p += strspn(p, ", \t\n\r\f\v");
        size_t len = strcspn(p, ", \t\n\r\f\v");
        if (!len)
            break;
        const char *entry = p;
        p += len;
        if (out->n_names + out->cidrs.n >= PROXY_BYPASS_MAX) {
            memset(out, 0, sizeof *out);
            return pgp_error_set(err, -EINVAL, "too many entries (at most %d)", PROXY_BYPASS_MAX);
        }
        /* An IP or CIDR starts with a digit or contains a colon; a host name does neither
         * (a label may start with a digit, but a name made of digit-led labels only is read as
         * an address, as everywhere else). */
        char buf[PROXY_HOST_MAX + 2];
        if (len >= sizeof buf) {
            memset(out, 0, sizeof *out);
            return pgp_error_set(err, -EINVAL, "entry \"%.60s...\": too long", entry);
        }
        memcpy(buf, entry, len);
        buf[len] = '\0';
        if (memchr(buf, ':', len) || strspn(buf, "0123456789./") == len) {
            netcheck_allow one;
            pgp_error why;
            if (netcheck_parse_allow(buf, &one, &why) < 0) {
                memset(out, 0, sizeof *out);
                return pgp_error_set(err, -EINVAL,
                                     "entry \"%s\": expected a host name, an IP address or a "
                                     "CIDR",
                                     buf);
            }
            out->cidrs.cidrs[out->cidrs.n++] = one.cidrs[0];
            continue;
        }
        const char *name = buf[0] == '.' ? buf + 1 : buf;
        size_t nlen = strlen(name);
        if (!host_name_ok(name, nlen)) {
            memset(out, 0, sizeof *out);
            return pgp_error_set(err, -EINVAL,
                                 "entry \"%s\": expected a host name (\"example.com\" or "
                                 "\".example.com\"), an IP address or a CIDR",
                                 buf);
        }
        char *dst = out->names[out->n_names++];
        for (size_t i = 0; i <= nlen; i++)
            dst[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] + 32 : name[i]);
    }
    return 0;
}

static bool cidr_covers(const netcheck_cidr *c, int family, const unsigned char *addr)
{
    if (c->family != family)
        return false;
    int bits = c->prefix;
    size_t whole = (size_t)bits / 8;
    if (memcmp(c->addr, addr, whole) != 0)
        return false;
    if (bits % 8 == 0)
        return true;
    unsigned char mask = (unsigned char)(0xff << (8 - bits % 8));
    return (c->addr[whole] & mask) == (addr[whole] & mask);
}

bool proxy_bypass_match(const proxy_bypass *b, const char *url)
{
    if (!b || !url || (b->n_names == 0 && b->cidrs.n == 0))
        return false;
    const char *sep = strstr(url, "://");
    const char *host = sep ? sep + 3 : url;
    size_t alen = strcspn(host, "/?#");
    const char *at = memchr(host, '@', alen);
    if (at) {
        alen -= (size_t)(at + 1 - host);
        host = at + 1;
    }
    size_t hlen;
    if (*host == '[') {
        const char *close = memchr(host, ']', alen);
        if (!close)
            return false;
        host++;
        hlen = (size_t)(close - host);
    } else {
        const char *colon = memchr(host, ':', alen);
        hlen = colon ? (size_t)(colon - host) : alen;
    }
    char h[PROXY_HOST_MAX + 1];
    if (hlen == 0 || hlen > PROXY_HOST_MAX)
        return false;
    for (size_t i = 0; i < hlen; i++)
        h[i] = (char)((host[i] >= 'A' && host[i] <= 'Z') ? host[i] + 32 : host[i]);
    h[hlen] = '\0';
    /* A trailing dot names the same host. */
    if (hlen > 1 && h[hlen - 1] == '.')
        h[--hlen] = '\0';

    unsigned char addr[16];
    if (inet_pton(AF_INET, h, addr) == 1) {
        for (size_t i = 0; i < b->cidrs.n; i++)
            if (cidr_covers(&b->cidrs.cidrs[i], AF_INET, addr))
                return true;
        return false;
    }
    if (inet_pton(AF_INET6, h, addr) == 1) {
        for (size_t i = 0; i < b->cidrs.n; i++)
            if (cidr_covers(&b->cidrs.cidrs[i], AF_INET6, addr))
                return true;
        return false;
    }
    for (size_t i = 0; i < b->n_names; i++) {
        size_t nlen = strlen(b->names[i]);
        if (hlen == nlen && memcmp(h, b->names[i], nlen) == 0)
            return true;
        if (hlen > nlen && h[hlen - nlen - 1] == '.' &&
            memcmp(h + hlen - nlen, b->names[i], nlen) == 0)
            return true;
    }
    return false;
}
