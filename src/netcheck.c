/* netcheck.c - SSRF guard: classifies IPv4/IPv6 destinations against the IANA special-purpose
 * registries and an explicit allow-list.
 *
 * The policy is "global unicast or nothing": an address is refused unless it is ordinary public
 * unicast, or an allow-list entry covers it. IPv6 forms that carry an IPv4 address (mapped,
 * SIIT-translated, NAT64, 6to4) are judged by the IPv4 address they lead to, because that is
 * where the packets end up. Only the IPv4-mapped form (::ffff:0:0/96) is *normalized* to IPv4
 * for the allow-list as well: the kernel connects such a socket to that very IPv4 address, while
 * the other forms go through a translator or relay, so an entry like 127.0.0.0/8 must not open
 * 64:ff9b::7f00:1 (which would reach the translator's own loopback).
 */
#include "netcheck.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Reasons are static strings: callers keep the pointer. */
static const char R_LOOPBACK[] = "loopback address";
static const char R_PRIVATE[] = "private address (RFC 1918)";
static const char R_ULA[] = "unique local address (fc00::/7)";
static const char R_LINK_LOCAL[] = "link-local address";
static const char R_METADATA[] = "cloud metadata address (169.254.169.254)";
static const char R_CGNAT[] = "carrier-grade NAT address (100.64.0.0/10)";
static const char R_MULTICAST[] = "multicast address";
static const char R_UNSPECIFIED[] = "unspecified address";
static const char R_BROADCAST[] = "broadcast address";
static const char R_DOCUMENTATION[] = "documentation address";
static const char R_BENCHMARKING[] = "benchmarking address";
static const char R_THIS_NETWORK[] = "\"this network\" address (0.0.0.0/8)";
static const char R_RESERVED[] = "reserved address";
static const char R_SITE_LOCAL[] = "site-local address (fec0::/10, deprecated)";
static const char R_V4_COMPAT[] = "IPv4-compatible address (::/96, deprecated)";
static const char R_TEREDO[] = "Teredo address (2001::/32)";
static const char R_DISCARD[] = "discard-only address (100::/64)";
static const char R_NOT_GLOBAL[] = "not a global unicast address";
static const char R_FAMILY[] = "unsupported address family";
static const char R_INVALID[] = "invalid socket address";

/* One row of a classification table: prefix, length, reason. */
typedef struct range4 {
    uint32_t net;
    int prefix;
    const char *reason;
} range4;

typedef struct range6 {
    unsigned char net[16];
    int prefix;
    const char *reason;
} range6;

#define V4(a, b, c, d) (((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (d))

/* Most specific first: the first match wins. IANA IPv4 Special-Purpose Address Registry, plus
 * multicast and the "future use" block, which that registry does not list. Ranges the registry
 * marks globally reachable (192.0.0.9/32, 192.31.196/24, 192.52.193/24, 192.175.48/24) are
 * refused only where they sit inside a refused block. */
static const range4 v4_ranges[] = {
    {V4(0, 0, 0, 0), 32, R_UNSPECIFIED},
    {V4(0, 0, 0, 0), 8, R_THIS_NETWORK},
    {V4(10, 0, 0, 0), 8, R_PRIVATE},
    {V4(100, 64, 0, 0), 10, R_CGNAT},
    {V4(127, 0, 0, 0), 8, R_LOOPBACK},
    {V4(169, 254, 169, 254), 32, R_METADATA},
    {V4(169, 254, 0, 0), 16, R_LINK_LOCAL},
    {V4(172, 16, 0, 0), 12, R_PRIVATE},
    {V4(192, 0, 0, 0), 24, R_RESERVED}, /* IETF protocol assignments */
    {V4(192, 0, 2, 0), 24, R_DOCUMENTATION},
    {V4(192, 88, 99, 0), 24, R_RESERVED}, /* deprecated 6to4 relay anycast */
    {V4(192, 168, 0, 0), 16, R_PRIVATE},
    {V4(198, 18, 0, 0), 15, R_BENCHMARKING},
    {V4(198, 51, 100, 0), 24, R_DOCUMENTATION},
    {V4(203, 0, 113, 0), 24, R_DOCUMENTATION},
    {V4(224, 0, 0, 0), 4, R_MULTICAST},
    {V4(255, 255, 255, 255), 32, R_BROADCAST},
    {V4(240, 0, 0, 0), 4, R_RESERVED},
};

/* IPv6 ranges refused outright (the IPv4-carrying forms are handled in classify_v6). Anything
 * outside 2000::/3 is refused afterwards as not global unicast. */
static const range6 v6_ranges[] = {
    {{0}, 128, R_UNSPECIFIED},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, R_LOOPBACK},
    {{0x01, 0x00}, 64, R_DISCARD},
    {{0x20, 0x01, 0x00, 0x00}, 32, R_TEREDO},
    {{0x20, 0x01, 0x00, 0x02, 0x00, 0x00}, 48, R_BENCHMARKING},
    {{0x20, 0x01, 0x00, 0x10}, 28, R_RESERVED}, /* ORCHID (deprecated) */
    {{0x20, 0x01, 0x00, 0x20}, 28, R_RESERVED}, /* ORCHIDv2 */
    {{0x20, 0x01, 0x00, 0x00}, 23, R_RESERVED}, /* IETF protocol assignments */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, R_DOCUMENTATION},
    {{0x3f, 0xff, 0x00, 0x00}, 20, R_DOCUMENTATION}, /* RFC 9637 */
    {{0x5f, 0x00}, 16, R_RESERVED},                  /* SRv6 SIDs, RFC 9602 */
    {{0xfc, 0x00}, 7, R_ULA},
    {{0xfe, 0x80}, 10, R_LINK_LOCAL},
    {{0xfe, 0xc0}, 10, R_SITE_LOCAL},
    {{0xff, 0x00}, 8, R_MULTICAST},
};

/* Prefix matching over big-endian byte strings. */
static bool prefix_match(const unsigned char *addr, const unsigned char *net, int prefix)
{
    int full = prefix / 8;
    if (memcmp(addr, net, (size_t)full) != 0)
        return false;
    int rest = prefix % 8;
    if (rest == 0)
        return true;
    unsigned char mask = (unsigned char)(0xffu << (8 - rest));
    return (addr[full] & mask) == (net[full] & mask);
}

static uint32_t load_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static const char *classify_v4(uint32_t a)
{
    for (size_t i = 0; i < PGP_ARRAY_LEN(v4_ranges); i++) {
        int p = v4_ranges[i].prefix;
        uint32_t mask = p == 0 ? 0 : 0xffffffffu << (32 - p);
        if ((a & mask) == v4_ranges[i].net)
            return v4_ranges[i].reason;
    }
    return NULL;
}

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static const unsigned char v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
static const unsigned char v4_translated_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
static const unsigned char nat64_wk_prefix[12] = {0, 0x64, 0xff, 0x9b};
static const unsigned char nat64_local_prefix[6] = {0, 0x64, 0xff, 0x9b, 0, 1};

/* Classifies a non-mapped IPv6 address; NULL = global unicast. */
static const char *classify_v6(const unsigned char b[16])
{
    /* SIIT-translated ::ffff:0:a.b.c.d and NAT64 64:ff9b::a.b.c.d: the translator connects to
     * the embedded IPv4 address. */
    if (memcmp(b, v4_translated_prefix, 12) == 0 || memcmp(b, nat64_wk_prefix, 12) == 0)
        return classify_v4(load_be32(b + 12));
    /* Local-use NAT64 (RFC 8215): only the /96 layout says where the IPv4 address is; other
     * layouts cannot be checked, so they are refused. */
    if (memcmp(b, nat64_local_prefix, 6) == 0) {
        if (!all_zero(b + 6, 6))
            return R_RESERVED;
        return classify_v4(load_be32(b + 12));
    }
    /* 6to4 (2002:a.b.c.d::/48): the relay delivers to the embedded IPv4 address. */
    if (b[0] == 0x20 && b[1] == 0x02)
        return classify_v4(load_be32(b + 2));
    for (size_t i = 0; i < PGP_ARRAY_LEN(v6_ranges); i++)
        if (prefix_match(b, v6_ranges[i].net, v6_ranges[i].prefix))
            return v6_ranges[i].reason;
    /* ::/96 minus :: and ::1 (matched above): deprecated IPv4-compatible addresses. */
    if (all_zero(b, 12))
        return R_V4_COMPAT;
    if ((b[0] & 0xe0) != 0x20)
        return R_NOT_GLOBAL;
    return NULL;
}

static bool allow_match(const netcheck_allow *allow, int family, const unsigned char *addr)
{
    if (!allow)
        return false;
    for (size_t i = 0; i < allow->n && i < NETCHECK_MAX_CIDRS; i++) {
        const netcheck_cidr *c = &allow->cidrs[i];
        if (c->family == family && prefix_match(addr, c->addr, c->prefix))
            return true;
    }
    return false;
}

bool netcheck_allowed(const struct sockaddr *sa, socklen_t len, const netcheck_allow *allow,
                      const char **reason)
{
    const char *why = R_INVALID;
    unsigned char addr[16];
    int family;

    if (!sa || len < (socklen_t)sizeof(sa_family_t))
        goto refused;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        if (len < (socklen_t)sizeof in)
            goto refused;
        memcpy(&in, sa, sizeof in);
        memcpy(addr, &in.sin_addr, 4);
        family = AF_INET;
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        if (len < (socklen_t)sizeof in6)
            goto refused;
        memcpy(&in6, sa, sizeof in6);
        memcpy(addr, &in6.sin6_addr, 16);
        family = AF_INET6;
        /* ::ffff:a.b.c.d connects to a.b.c.d: judge and allow-list it as that address. */
        if (memcmp(addr, v4_mapped_prefix, 12) == 0) {
            memmove(addr, addr + 12, 4);
            family = AF_INET;
        }
    } else {
        why = R_FAMILY;
        goto refused;
    }

    if (allow_match(allow, family, addr))
        return true;
    why = family == AF_INET ? classify_v4(load_be32(addr)) : classify_v6(addr);
    if (!why)
        return true;
refused:
    if (reason)
        *reason = why;
    return false;
}

/* Parses one entry ("addr" or "addr/prefix") into *c. */
static int parse_entry(const char *entry, netcheck_cidr *c, pgp_error *err)
{
    char buf[INET6_ADDRSTRLEN + 8];
    size_t len = strlen(entry);
    if (len >= sizeof buf)
        return pgp_error_set(err, -EINVAL, "allow-list entry \"%.60s...\": too long", entry);
    memcpy(buf, entry, len + 1);

    char *slash = strchr(buf, '/');
    if (slash)
        *slash = '\0';
    memset(c, 0, sizeof *c);
    int max;
    if (inet_pton(AF_INET, buf, c->addr) == 1) {
        c->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, buf, c->addr) == 1) {
        c->family = AF_INET6;
        max = 128;
    } else {
        return pgp_error_set(err, -EINVAL,
                             "allow-list entry \"%s\": not an IPv4 or IPv6 address or CIDR", entry);
    }

    c->prefix = max;
    if (slash) {
        const char *p = slash + 1;
        if (*p == '\0' || strlen(p) > 3)
            return pgp_error_set(err, -EINVAL, "allow-list entry \"%s\": bad prefix length", entry);
        int v = 0;
        for (; *p; p++) {
            if (*p < '0' || *p > '9')
                return pgp_error_set(err, -EINVAL, "allow-list entry \"%s\": bad prefix length",
                                     entry);
            v = v * 10 + (*p - '0');
        }
        if (v > max)
            return pgp_error_set(err, -EINVAL,
                                 "allow-list entry \"%s\": prefix length %d out of range 0-%d",
                                 entry, v, max);
        c->prefix = v;
    }

    /* Strict: "10.0.0.1/8" is probably a typo for a host or for 10.0.0.0/8; say which. */
    unsigned char net[16];
    memcpy(net, c->addr, sizeof net);
    size_t bytes = (size_t)max / 8;
    for (size_t i = 0; i < bytes; i++) {
        int bit0 = (int)i * 8;
        if (bit0 >= c->prefix)
            net[i] = 0;
        else if (bit0 + 8 > c->prefix)
            net[i] &= (unsigned char)(0xffu << (8 - (c->prefix - bit0)));
    }
    if (memcmp(net, c->addr, bytes) != 0) {
        char shown[INET6_ADDRSTRLEN];
        if (!inet_ntop(c->family, net, shown, sizeof shown))
            shown[0] = '\0';
        return pgp_error_set(err, -EINVAL,
                             "allow-list entry \"%s\": host bits set (did you mean %s/%d?)", entry,
                             shown, c->prefix);
    }

    /* An IPv4-mapped entry covers IPv4 addresses, which is how netcheck_allowed sees them. */
    if (c->family == AF_INET6 && c->prefix >= 96 && memcmp(c->addr, v4_mapped_prefix, 12) == 0) {
        memmove(c->addr, c->addr + 12, 4);
        memset(c->addr + 4, 0, 12);
        c->family = AF_INET;
        c->prefix -= 96;
    }
    return 0;
}

static bool is_separator(char ch)
{
    return ch == ',' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' ||
           ch == '\v';
}

int netcheck_parse_allow(const char *list, netcheck_allow *out, pgp_error *err)
{
    memset(out, 0, sizeof *out);
    if (!list)
        return 0;
    const char *p = list;
    while (*p) {
        while (*p && is_separator(*p))
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && !is_separator(*p))
            p++;
        size_t len = (size_t)(p - start);
        char entry[128];
        if (len >= sizeof entry) {
            out->n = 0;
            return pgp_error_set(err, -EINVAL, "allow-list entry \"%.60s...\": too long", start);
        }
        memcpy(entry, start, len);
        entry[len] = '\0';
        if (out->n >= NETCHECK_MAX_CIDRS) {
            out->n = 0;
            return pgp_error_set(err, -EINVAL,
                                 "allow-list entry \"%s\": too many entries (at most %d)", entry,
                                 NETCHECK_MAX_CIDRS);
        }
        int rc = parse_entry(entry, &out->cidrs[out->n], err);
        if (rc < 0) {
            out->n = 0;
            return rc;
        }
        out->n++;
    }
    return 0;
}

/* Whether the address a literal host of a URL names is allowed; `host` is len bytes. */
static bool literal_allowed(const char *host, size_t len, const netcheck_allow *allow,
                            const char **reason, bool *literal)
{
    char buf[64];
    *literal = false;
    if (len == 0 || len >= sizeof buf)
        return true;
    memcpy(buf, host, len);
    buf[len] = '\0';
    if (buf[0] == '[') {
        if (len < 3 || buf[len - 1] != ']')
            return true;
        buf[len - 1] = '\0';
        struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
        if (inet_pton(AF_INET6, buf + 1, &in6.sin6_addr) != 1)
            return true;
        *literal = true;
        return netcheck_allowed((const struct sockaddr *)&in6, sizeof in6, allow, reason);
    }
    /* inet_aton reads every form a resolver (and libcurl) takes as an IPv4 address: 127.1,
     * 0x7f.0.0.1, 2130706433. A name is not one of them. */
    struct sockaddr_in in = {.sin_family = AF_INET};
    if (inet_aton(buf, &in.sin_addr) == 0)
        return true;
    *literal = true;
    return netcheck_allowed((const struct sockaddr *)&in, sizeof in, allow, reason);
}

bool netcheck_url_allowed(const char *url, const netcheck_allow *allow, const char **reason)
{
    const char *p = url ? strstr(url, "://") : NULL;
    if (!p)
        return true;
    p += 3;
    size_t len = strcspn(p, "/?#");
    if (memchr(p, '@', len)) { /* user info: validate_url refuses it; judge the host after it */
        const char *at = memchr(p, '@', len);
        len -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    /* Without the port: after the closing bracket of an IPv6 literal, else after the colon. */
    const char *close = p[0] == '[' ? memchr(p, ']', len) : NULL;
    if (close)
        len = (size_t)(close + 1 - p);
    else if (memchr(p, ':', len))
        len = (size_t)((const char *)memchr(p, ':', len) - p);
    if (len > 0 && p[len - 1] == '.')
        len--;
    bool literal;
    bool ok = literal_allowed(p, len, allow, reason, &literal);
    if (literal)
        return ok;
    /* localhost and the names under .localhost always resolve to a loopback address (RFC 6761,
     * 6.3): allowed only when the allow-list opens 127.0.0.1 or ::1. */
    static const char dot_localhost[] = ".localhost";
    size_t dl = sizeof dot_localhost - 1;
    if ((len == 9 && strncasecmp(p, "localhost", 9) == 0) ||
        (len > dl && strncasecmp(p + len - dl, dot_localhost, dl) == 0)) {
        struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
        return netcheck_allowed((const struct sockaddr *)&in, sizeof in, allow, reason) ||
               netcheck_allowed((const struct sockaddr *)&in6, sizeof in6, allow, reason);
    }
    return true;
}
