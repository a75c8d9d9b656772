/* tcpproxy.h - a TCP proxy on loopback that tests control, to put network trouble between a
 * client (pgpace) and a server (PostgreSQL).
 *
 * Contract: tcpproxy_start() listens on 127.0.0.1 on an ephemeral port and forwards every
 * connection it accepts to upstream_host:upstream_port (numeric IPv4), from its own thread.
 * The test switches the mode at runtime; tcpproxy_set_mode() returns only once the proxy
 * thread has applied it, so no byte moves in a direction the new mode forbids after it returns.
 *
 * - TCPPROXY_PASS: accept and forward both ways.
 * - TCPPROXY_PAUSE: a blackhole without FIN or RST: nothing is read, written, accepted or
 *   closed; every socket stays open (new connections wait in the listen backlog). Note that
 *   the kernel of this host still acknowledges TCP segments and keepalive probes, so a peer's
 *   TCP keepalive / tcp_user_timeout cannot notice a paused proxy (no root-less user-space
 *   proxy can hide that); only an application-level deadline can.
 * - TCPPROXY_DROP: closes every current connection with RST (SO_LINGER {1, 0}) on both sides,
 *   then keeps resetting new connections right after accepting them.
 * - TCPPROXY_REFUSE: closes the listening socket, so new connections are refused
 *   (ECONNREFUSED); the current ones keep forwarding. Leaving REFUSE binds the same port again.
 *
 * When one side of a pair closes, what it sent is still forwarded, then both are closed.
 * All functions are thread-safe.
 */
#ifndef PGPACE_TCPPROXY_H
#define PGPACE_TCPPROXY_H

#include <stddef.h>

typedef struct tcpproxy tcpproxy;

typedef enum tcpproxy_mode {
    TCPPROXY_PASS,
    TCPPROXY_PAUSE,
    TCPPROXY_DROP,
    TCPPROXY_REFUSE,
} tcpproxy_mode;

/* Starts the proxy thread; NULL on failure (message on stderr). */
tcpproxy *tcpproxy_start(const char *upstream_host, int upstream_port);
/* Stops the thread and closes every socket (RST). */
void tcpproxy_stop(tcpproxy *p);

int tcpproxy_port(const tcpproxy *p);
/* Switches the mode; returns once the proxy thread applied it. 0, or -1 when leaving REFUSE
 * could not bind the port again. */
int tcpproxy_set_mode(tcpproxy *p, tcpproxy_mode mode);
const char *tcpproxy_mode_name(tcpproxy_mode mode);

/* Connection pairs open now; accepted since start; closed by DROP (reset). */
size_t tcpproxy_open(tcpproxy *p);
size_t tcpproxy_accepted(tcpproxy *p);
size_t tcpproxy_reset(tcpproxy *p);

#endif
