/* tls_server.h - an HTTPS/1.1 receiver on loopback that requires a client certificate, for the
 * mutual TLS tests.
 *
 * Contract: tls_server_start() listens on 127.0.0.1 (an ephemeral port) with the given server
 * certificate and key, and REQUIRES every client to present a certificate that verifies
 * against ca_file (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT); a handshake without one,
 * or with one of another CA, is counted as refused and the connection closed. It serves from
 * its own threads (one accepting, one per connection; blocking OpenSSL): keep-alive
 * connections, any number of them, requests with Content-Length bodies, each answered 200 "ok".
 * Every request is recorded with the subject CN of the certificate its connection presented,
 * its path and the connection's number (1, 2, ... in accept order), so a test sees which
 * requests shared a connection. All accessors are thread-safe; the waits take deadlines.
 * tls_server_stop() closes every connection, joins every thread and frees the server.
 */
#ifndef PGPACE_TLS_SERVER_H
#define PGPACE_TLS_SERVER_H

#include <stddef.h>

typedef struct tls_server tls_server;

typedef struct tls_request {
    char cn[128];   /* the client certificate's subject CN */
    char path[256]; /* the request target */
    unsigned conn;  /* the connection it came on (1-based, accept order) */
    int resumed;    /* its connection resumed an earlier TLS session (and its certificate) */
} tls_request;

tls_server *tls_server_start(const char *ca_file, const char *cert_file, const char *key_file);
int tls_server_port(const tls_server *s);
/* "https://127.0.0.1:PORT<path>" into buf. */
void tls_server_url(const tls_server *s, const char *path, char *buf, size_t n);
/* Requests recorded so far; waits until at least n are (or timeout_ms passed) and returns the
 * count then. */
size_t tls_server_count(tls_server *s);
size_t tls_server_wait(tls_server *s, size_t n, int timeout_ms);
/* The i-th request (0-based); returns 0, or -1 when there is none. */
int tls_server_request(tls_server *s, size_t i, tls_request *out);
/* Handshakes refused (no certificate, an unknown CA...); waits like tls_server_wait. */
size_t tls_server_refused(tls_server *s);
size_t tls_server_wait_refused(tls_server *s, size_t n, int timeout_ms);
/* Connections accepted so far. */
unsigned tls_server_connections(tls_server *s);
void tls_server_stop(tls_server *s);

#endif
