/* receiver.h - a real HTTP/1.1 webhook receiver on loopback for tests (and the demo).
 *
 * Contract: receiver_start() binds 127.0.0.1 on an ephemeral port and serves from its own
 * thread (own libuv loop), so the test thread can run pgpace and poll the recorded requests.
 * Keep-alive connections are supported (HTTP/1.1, Content-Length bodies; chunked request bodies
 * are accepted too). Every complete request is recorded with its arrival time. How it answers
 * is chosen per request path prefix with receiver_on(), the last matching rule wins; the default
 * is 200 with body "ok". All functions are thread-safe.
 */
#ifndef PGPACE_RECEIVER_H
#define PGPACE_RECEIVER_H

#include <stddef.h>
#include <stdint.h>

typedef struct receiver receiver;

typedef enum receiver_action {
    RECV_RESPOND,      /* send `status` with `body` (+ Retry-After if set) after delay_ms */
    RECV_HANG,         /* read the request, never answer, keep the connection open */
    RECV_RESET,        /* close the connection with RST (SO_LINGER 0) after reading */
    RECV_GARBAGE,      /* answer bytes that are not HTTP */
    RECV_TRICKLE_HUGE, /* answer 200 with Content-Length 1 GiB, sending 1 KiB every 10 ms */
    RECV_CLOSE,        /* close the connection (FIN) without answering */
} receiver_action;

typedef struct receiver_rule {
    const char *path_prefix; /* e.g. "/c/acme" (copied) */
    receiver_action action;
    int status;              /* RECV_RESPOND */
    const char *body;        /* RECV_RESPOND, may be NULL (copied) */
    const char *retry_after; /* RECV_RESPOND: Retry-After header value, or NULL (copied) */
    int delay_ms;            /* RECV_RESPOND: wait before answering */
    int times;               /* apply to this many requests, then the rule expires; 0 = forever */
} receiver_rule;

typedef struct receiver_request {
    int64_t at_us; /* CLOCK_REALTIME microseconds when the request was complete */
    char path[256];
    char webhook_id[128];
    char webhook_timestamp[32];
    char webhook_signature[512];
    char content_type[128];
    char user_agent[128];
    char *body; /* NUL-terminated copy, owned by the receiver */
    size_t body_len;
} receiver_request;

/* Starts the server; returns NULL on failure (message on stderr). */
receiver *receiver_start(void);
/* Same, on a given port of 127.0.0.1 (0 = ephemeral); for the standalone pgpace-receiver. */
receiver *receiver_start_port(int port);
/* Stops the thread, closes every connection, frees everything (recorded bodies included). */
void receiver_stop(receiver *r);

int receiver_port(const receiver *r);
/* "http://127.0.0.1:<port>" + path into buf. */
void receiver_url(const receiver *r, const char *path, char *buf, size_t len);

void receiver_on(receiver *r, const receiver_rule *rule);
void receiver_clear_rules(receiver *r);

/* Number of requests recorded so far (optionally only those whose path starts with prefix). */
size_t receiver_count(receiver *r, const char *path_prefix);
/* Copies out recorded request i (0-based, arrival order) into *out; body is strdup'ed and must
 * be freed by the caller. Returns 0, or -1 when i is out of range. */
int receiver_get(receiver *r, size_t i, receiver_request *out);
/* Waits until receiver_count(prefix) >= n or timeout_ms passes; returns the count reached. */
size_t receiver_wait(receiver *r, const char *path_prefix, size_t n, int timeout_ms);
/* Connections currently open (for keep-alive assertions). */
size_t receiver_connections(receiver *r);
/* Total TCP connections accepted since start. */
size_t receiver_accepted(receiver *r);

#endif
