/* tls_server.c - the client-certificate-requiring HTTPS test receiver (tls_server.h).
 *
 * Blocking OpenSSL on plain threads is enough for tests and keeps the code short: the accept
 * thread polls the listening socket and a stop pipe; each connection thread does the handshake
 * and then reads requests until the peer closes or the server stops, which shuts its socket
 * down so that a blocked read returns.
 */
#include "tls_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS    256
#define MAX_REQUESTS 4096
#define HEAD_MAX     16384

typedef struct conn {
    tls_server *s;
    int fd;
    unsigned id;
    pthread_t thread;
    int done; /* the thread has finished (under s->mu) */
} conn;

struct tls_server {
    SSL_CTX *ctx;
    int listen_fd;
    int port;
    int stop_pipe[2];
    pthread_t accept_thread;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* broadcast on every record; CLOCK_MONOTONIC */
    int stopping;
    conn *conns[MAX_CONNS];
    unsigned n_conns;
    tls_request *reqs;
    size_t n_reqs;
    size_t refused;
};

static void record(tls_server *s, const tls_request *r, int refused)
{
    pthread_mutex_lock(&s->mu);
    if (refused)
        s->refused++;
    else if (s->n_reqs < MAX_REQUESTS)
        s->reqs[s->n_reqs++] = *r;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

/* Reads one request (head and Content-Length body) into buf; returns the head's length (the
 * body is read and dropped), 0 at a clean end, -1 on error. */
static int read_request(SSL *ssl, char *buf, size_t cap)
{
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        if (have + 1 >= cap)
            return -1;
        int n = SSL_read(ssl, buf + have, (int)(cap - 1 - have));
        if (n <= 0)
            return have == 0 ? 0 : -1;
        have += (size_t)n;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    size_t head = (size_t)(end - buf) + 4;
    long body = 0;
    for (const char *p = buf; p && p < end; p = strstr(p, "\r\n"), p = p ? p + 2 : NULL)
        if (strncasecmp(p, "content-length:", 15) == 0)
            body = strtol(p + 15, NULL, 10);
    /* Body bytes already read, then the rest. Requests are not pipelined by curl here. */
    long left = body - (long)(have - head);
    char sink[4096];
    while (left > 0) {
        int n = SSL_read(ssl, sink, left < (long)sizeof sink ? (int)left : (int)sizeof sink);
        if (n <= 0)
            return -1;
        left -= n;
    }
    buf[head] = '\0';
    return (int)head;
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    tls_server *s = c->s;
    SSL *ssl = SSL_new(s->ctx);
    char *buf = malloc(HEAD_MAX);
    tls_request r;
    memset(&r, 0, sizeof r);
    r.conn = c->id;
    if (!ssl || !buf || SSL_set_fd(ssl, c->fd) != 1 || SSL_accept(ssl) != 1) {
        record(s, NULL, 1);
        /* Like a well-behaved server: the alert OpenSSL sent is followed by a FIN, and what
         * the client had sent already (a TLS 1.3 client writes its request before it learns
         * that its certificate was refused) is read, so that closing does not reset the
         * connection and destroy the alert before the client reads it. */
        shutdown(c->fd, SHUT_WR);
        struct timeval tv = {.tv_sec = 2};
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char sink[4096];
        while (read(c->fd, sink, sizeof sink) > 0)
            ;
        SSL_free(ssl);
        ssl = NULL;
        goto out;
    }
    X509 *peer = SSL_get1_peer_certificate(ssl);
    if (!peer) {
        record(s, NULL, 1);
        goto out;
    }
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, r.cn, sizeof r.cn);
    r.resumed = SSL_session_reused(ssl) == 1;
    X509_free(peer);
    for (;;) {
        int head = read_request(ssl, buf, HEAD_MAX);
        if (head <= 0)
            break;
        /* "POST /path HTTP/1.1" */
        const char *sp = strchr(buf, ' ');
        const char *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
        size_t len = sp && sp2 ? (size_t)(sp2 - sp - 1) : 0;
        if (len >= sizeof r.path)
            len = sizeof r.path - 1;
        memcpy(r.path, sp ? sp + 1 : "", len);
        r.path[len] = '\0';
        record(s, &r, 0);
        static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                     "Content-Type: text/plain\r\n\r\nok";
        if (SSL_write(ssl, answer, (int)sizeof answer - 1) <= 0)
            break;
    }
out:
    if (ssl) {
        SSL_shutdown(ssl);
        SSL_free(ssl);
    }
    ERR_clear_error();
    free(buf);
    /* Unpublished before it is closed: stop() must never shut down a reused number. */
    pthread_mutex_lock(&s->mu);
    int fd = c->fd;
    c->fd = -1;
    c->done = 1;
    pthread_mutex_unlock(&s->mu);
    close(fd);
    return NULL;
}

static void *accept_main(void *arg)
{
    tls_server *s = arg;
    struct pollfd p[2] = {{.fd = s->listen_fd, .events = POLLIN},
                          {.fd = s->stop_pipe[0], .events = POLLIN}};
    for (;;) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&s->mu);
        conn *c = s->n_conns < MAX_CONNS && !s->stopping ? calloc(1, sizeof *c) : NULL;
        if (!c) {
            pthread_mutex_unlock(&s->mu);
            close(fd);
            continue;
        }
        c->s = s;
        c->fd = fd;
        c->id = s->n_conns + 1;
        s->conns[s->n_conns++] = c;
        if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
            s->conns[--s->n_conns] = NULL;
            close(fd);
            free(c);
        }
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

tls_server *tls_server_start(const char *ca_file, const char *cert_file, const char *key_file)
{
    tls_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->listen_fd = -1;
    s->stop_pipe[0] = s->stop_pipe[1] = -1;
    s->reqs = calloc(MAX_REQUESTS, sizeof *s->reqs);
    s->ctx = SSL_CTX_new(TLS_server_method());
    if (!s->reqs || !s->ctx || SSL_CTX_use_certificate_chain_file(s->ctx, cert_file) != 1 ||
        SSL_CTX_use_PrivateKey_file(s->ctx, key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_load_verify_locations(s->ctx, ca_file, NULL) != 1)
        goto fail;
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca_file);
    if (!names)
        goto fail;
    SSL_CTX_set_client_CA_list(s->ctx, names);
    SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    SSL_CTX_set_verify_depth(s->ctx, 4);
    /* Resumption needs a session id context when client certificates are verified (else
     * OpenSSL refuses a resuming client with an internal error); a resumed session keeps the
     * certificate of the handshake that made it, which tls_request.resumed shows. */
    static const unsigned char sid_ctx[] = "pgpace-tls-server";
    if (SSL_CTX_set_session_id_context(s->ctx, sid_ctx, sizeof sid_ctx - 1) != 1)
        goto fail;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);

    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(s->listen_fd, 128) != 0 ||
        getsockname(s->listen_fd, (struct sockaddr *)&a, &alen) != 0 ||
        pipe2(s->stop_pipe, O_CLOEXEC) != 0)
        goto fail_sync;
    s->port = ntohs(a.sin_port);
    if (pthread_create(&s->accept_thread, NULL, accept_main, s) != 0)
        goto fail_sync;
    return s;
fail_sync:
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cond);
fail:
    fprintf(stderr, "tls_server: cannot start\n");
    ERR_print_errors_fp(stderr);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->stop_pipe[0] >= 0) {
        close(s->stop_pipe[0]);
        close(s->stop_pipe[1]);
    }
    SSL_CTX_free(s->ctx);
    free(s->reqs);
    free(s);
    return NULL;
}

int tls_server_port(const tls_server *s)
{
    return s->port;
}

void tls_server_url(const tls_server *s, const char *path, char *buf, size_t n)
{
    snprintf(buf, n, "https://127.0.0.1:%d%s", s->port, path);
}

/* Waits until *counter >= n or the deadline; returns *counter. */
static size_t wait_for(tls_server *s, const size_t *counter, size_t n, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    while (*counter < n && pthread_cond_timedwait(&s->cond, &s->mu, &until) == 0)
        ;
    size_t got = *counter;
    pthread_mutex_unlock(&s->mu);
    return got;
}

size_t tls_server_count(tls_server *s)
{
    return wait_for(s, &s->n_reqs, 0, 0);
}

size_t tls_server_wait(tls_server *s, size_t n, int timeout_ms)
{
    return wait_for(s, &s->n_reqs, n, timeout_ms);
}

size_t tls_server_refused(tls_server *s)
{
    return wait_for(s, &s->refused, 0, 0);
}

size_t tls_server_wait_refused(tls_server *s, size_t n, int timeout_ms)
{
    return wait_for(s, &s->refused, n, timeout_ms);
}

unsigned tls_server_connections(tls_server *s)
{
    pthread_mutex_lock(&s->mu);
    unsigned n = s->n_conns;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int tls_server_request(tls_server *s, size_t i, tls_request *out)
{
    pthread_mutex_lock(&s->mu);
    int rc = -1;
    if (i < s->n_reqs) {
        *out = s->reqs[i];
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void tls_server_stop(tls_server *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    ssize_t w = write(s->stop_pipe[1], "x", 1);
    (void)w;
    pthread_join(s->accept_thread, NULL);
    /* No new connections now: wake the blocked ones and wait for them. */
    pthread_mutex_lock(&s->mu);
    for (unsigned i = 0; i < s->n_conns; i++)
        if (s->conns[i]->fd >= 0)
            shutdown(s->conns[i]->fd, SHUT_RDWR);
    pthread_mutex_unlock(&s->mu);
    for (unsigned i = 0; i < s->n_conns; i++) {
        pthread_join(s->conns[i]->thread, NULL);
        free(s->conns[i]);
    }
    close(s->listen_fd);
    close(s->stop_pipe[0]);
    close(s->stop_pipe[1]);
    SSL_CTX_free(s->ctx);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cond);
    free(s->reqs);
    free(s);
}
