/* netcheck.h - SSRF protection: is a connected address an acceptable webhook destination?
 *
 * Contract: pure functions, no I/O, safe to fuzz. By default every address that is loopback,
 * private (RFC 1918, IPv6 ULA fc00::/7), link-local (169.254/16 incl. 169.254.169.254,
 * fe80::/10), CGNAT (100.64/10), multicast, unspecified, broadcast, documentation, benchmarking,
 * "this network" (0/8), reserved (240/4), IPv4-mapped/translated/6to4/Teredo forms of any of
 * those, NAT64 (64:ff9b::/96) wrapping a refused IPv4, or otherwise not global unicast is
 * refused. An allow-list of CIDRs ("127.0.0.0/8, ::1/128") re-opens ranges explicitly.
 */
#ifndef PGPACE_NETCHECK_H
#define PGPACE_NETCHECK_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define NETCHECK_MAX_CIDRS 64

typedef struct netcheck_cidr {
    int family;             /* AF_INET or AF_INET6 */
    unsigned char addr[16]; /* network address, 4 or 16 bytes used */
    int prefix;             /* prefix length */
} netcheck_cidr;

typedef struct netcheck_allow {
    netcheck_cidr cidrs[NETCHECK_MAX_CIDRS];
    size_t n;
} netcheck_allow;

/* Parses a comma/space separated CIDR list ("" = empty list). Addresses without a prefix are
 * single hosts. Errors name the offending entry. */
int netcheck_parse_allow(const char *list, netcheck_allow *out, pgp_error *err) PGP_MUST_CHECK;

/* Returns true when the address may be connected to. When refused, *reason (if not NULL) is
 * set to a static description such as "loopback address" or "private address (RFC 1918)". */
bool netcheck_allowed(const struct sockaddr *sa, socklen_t len, const netcheck_allow *allow,
                      const char **reason);

/* For a webhook URL validate_url accepted, what can be judged before any DNS lookup: when its
 * host is an IP address literal (an IPv4 address in any form a resolver reads: 10.0.0.1, 127.1,
 * 0x7f.0.0.1, 2130706433; or a bracketed IPv6 address) or localhost (or a name under .localhost,
 * RFC 6761: always loopback), whether netcheck_allowed allows it. A DNS name is allowed here: the
 * dispatcher judges the address it connects to, after the lookup. When refused, *reason (if not
 * NULL) says why, as netcheck_allowed does. */
bool netcheck_url_allowed(const char *url, const netcheck_allow *allow, const char **reason);

#endif
