/* proxy.h - the egress proxy settings: proxy URLs ([delivery] proxy, a customer's own) and the
 * no-proxy list ([delivery] no_proxy).
 *
 * Contract: pure functions, no I/O, safe to fuzz.
 * - A proxy URL is "http://HOST:PORT", optionally ending in "/": HOST a DNS name (labels of
 *   letters, digits and '-', separated by dots), an IPv4 address or a bracketed IPv6 address;
 *   PORT from 1 to 65535, required (there is no well-known proxy port). At most PROXY_URL_MAX
 *   bytes. Refused: other schemes (https://, socks5://, ...: pgpace speaks to the proxy in
 *   clear and only asks it for CONNECT tunnels), user:password@ (credentials are not supported,
 *   so no secret ever sits in the configuration or the customer table; the message never
 *   quotes what was given then), paths, queries, whitespace and control characters (CR/LF).
 * - A no-proxy list holds entries separated by commas or blanks (at most PROXY_BYPASS_MAX):
 *   a host name, matching that name and every name under it ("example.com" and ".example.com"
 *   both match example.com and api.example.com, not badexample.com), case-insensitively; or
 *   an IPv4/IPv6 address or CIDR, matching webhook URLs whose host is an IP literal in it.
 *   Host names are never resolved to decide: a name goes direct only through a name entry.
 *   No wildcard ("*"): to send a customer direct, set its proxy to `direct`.
 */
#ifndef PGPACE_PROXY_H
#define PGPACE_PROXY_H

#include "common.h"
#include "netcheck.h"

#include <stdbool.h>
#include <stddef.h>

#define PROXY_URL_MAX    255 /* bytes of a proxy URL */
#define PROXY_BYPASS_MAX 64  /* entries of a no-proxy list */
#define PROXY_HOST_MAX   253 /* a DNS name */

/* Checks a proxy URL (rules above). Errors start with `what` ("[delivery] proxy", "--proxy"). */
int proxy_url_check(const char *what, const char *url, pgp_error *err) PGP_MUST_CHECK;

typedef struct proxy_bypass {
    size_t n_names;
    char names[PROXY_BYPASS_MAX][PROXY_HOST_MAX + 1]; /* lower case, no leading dot */
    netcheck_allow cidrs;
} proxy_bypass;

/* Parses a no-proxy list ("" or NULL: empty). Errors name the entry. */
int proxy_bypass_parse(const char *list, proxy_bypass *out, pgp_error *err) PGP_MUST_CHECK;

/* Does the host of this webhook URL ("https://host:port/path") match the list? */
bool proxy_bypass_match(const proxy_bypass *b, const char *url);

#endif
