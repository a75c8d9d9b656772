/* connect_proxy.h - an HTTP CONNECT proxy on loopback for tests: records what it is asked,
 * can refuse, and relays bytes both ways.
 *
 * Contract: connect_proxy_start() listens on 127.0.0.1 on an ephemeral port; an accept thread
 * hands each connection to a thread of its own. Each connection's request head (up to 8 KiB)
 * is recorded as its request line's "METHOD target" ("CONNECT 127.0.0.1:8080"). A CONNECT is
 * answered with the refusal status when one is set (connect_proxy_refuse: 403, 407, 502...,
 * "Connection: close", then closed); otherwise the proxy connects to the target (an IPv4,
 * [IPv6] or a name resolved here), answers "200 Connection established" and relays bytes both
 * ways until either side closes (502 when the target cannot be reached). Any other method is
 * answered 405 and closed: a client that sends plain requests to the proxy is visible.
 * connect_proxy_stop() closes every socket and joins every thread. All functions are
 * thread-safe.
 */
#ifndef PGPACE_CONNECT_PROXY_H
#define PGPACE_CONNECT_PROXY_H

#include <stddef.h>

typedef struct connect_proxy connect_proxy;

/* NULL on failure (message on stderr). */
connect_proxy *connect_proxy_start(void);
void connect_proxy_stop(connect_proxy *p);
int connect_proxy_port(const connect_proxy *p);

/* Answer every CONNECT from now on with this status (0: relay again). Closes the connections
 * open now, tunnels included, so the next request through this proxy is a new CONNECT (a
 * client cannot keep using a tunnel opened before). */
void connect_proxy_refuse(connect_proxy *p, int status);

/* Requests recorded so far; the i-th one's "METHOD target" into buf (0, or -1 when there is
 * no such request). */
size_t connect_proxy_count(connect_proxy *p);
int connect_proxy_request(connect_proxy *p, size_t i, char *buf, size_t len);
/* Requests whose "METHOD target" is exactly `line`. */
size_t connect_proxy_count_line(connect_proxy *p, const char *line);
/* Tunnels that carried bytes from the client after the 200 (relayed requests). */
size_t connect_proxy_relayed(connect_proxy *p);

#endif
