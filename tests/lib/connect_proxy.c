/* connect_proxy.c - an HTTP CONNECT proxy on loopback for tests (see connect_proxy.h).
 *
 * Blocking sockets, one thread per connection: simple, and the tests open few connections.
 * Every connection thread is kept in a list to be joined at stop; stop shuts the sockets down
 * (shutdown(2) wakes a thread blocked in accept, read or poll on them) before joining.
 */
#include "connect_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX     8192
#define MAX_RECORDED 1024

typedef struct conn {
    connect_proxy *p;
    pthread_t thread;
    int down, up; /* client side, target side (-1 until connected) */
    struct conn *next;
} conn;

struct connect_proxy {
    pthread_t accept_thread;
    int listen_fd;
    int port;
    pthread_mutex_t mu;
    /* Guarded by mu. */
    bool stop;
    int refuse;
    conn *conns;
    char *recorded[MAX_RECORDED];
    size_t n_recorded, relayed;
};

static bool write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

static void answer(int fd, int status, const char *reason)
{
    char buf[160];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status,
                     reason);
    (void)write_all(fd, buf, (size_t)n);
}

/* Connects to "host:port" or "[v6]:port"; -1 on failure. */
static int connect_target(const char *target)
{
    char host[256];
    const char *port;
    if (target[0] == '[') {
        const char *close = strchr(target, ']');
        if (!close || close[1] != ':' || (size_t)(close - target - 1) >= sizeof host)
            return -1;
        memcpy(host, target + 1, (size_t)(close - target - 1));
        host[close - target - 1] = '\0';
        port = close + 2;
    } else {
        const char *colon = strrchr(target, ':');
        if (!colon || (size_t)(colon - target) >= sizeof host)
            return -1;
        memcpy(host, target, (size_t)(colon - target));
        host[colon - target] = '\0';
        port = colon + 1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static void count_relayed(connect_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    p->relayed++;
    pthread_mutex_unlock(&p->mu);
}

/* Relays both ways until either side closes or errs; counts the tunnel as relayed when the
 * client's first byte goes through. */
static void relay(connect_proxy *p, int a, int b, const char *pending, size_t n_pending)
{
    bool sent = n_pending > 0;
    if (sent)
        count_relayed(p);
    if (n_pending && !write_all(b, pending, n_pending))
        return;
    char buf[16384];
    for (;;) {
        struct pollfd fds[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        for (int i = 0; i < 2; i++) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = recv(fds[i].fd, buf, sizeof buf, 0);
            if (n <= 0)
                return;
            if (i == 0 && !sent) {
                sent = true;
                count_relayed(p);
            }
            if (!write_all(fds[1 - i].fd, buf, (size_t)n))
                return;
        }
    }
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    connect_proxy *p = c->p;
    char head[HEAD_MAX + 1];
    size_t len = 0;
    char *end = NULL;
    while (len < HEAD_MAX && !end) {
        ssize_t n = recv(c->down, head + len, HEAD_MAX - len, 0);
        if (n <= 0)
            return NULL;
        len += (size_t)n;
        head[len] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    if (!end) {
        answer(c->down, 431, "Request Header Fields Too Large");
        return NULL;
    }
    /* "METHOD target HTTP/1.1" */
    char method[32] = "", target[300] = "";
    if (sscanf(head, "%31s %299s", method, target) != 2) {
        answer(c->down, 400, "Bad Request");
        return NULL;
    }
    char line[340];
    snprintf(line, sizeof line, "%s %s", method, target);
    pthread_mutex_lock(&p->mu);
    if (p->n_recorded < MAX_RECORDED)
        p->recorded[p->n_recorded++] = strdup(line);
    int refuse = p->refuse;
    pthread_mutex_unlock(&p->mu);
    if (strcmp(method, "CONNECT") != 0) {
        answer(c->down, 405, "Method Not Allowed");
        return NULL;
    }
    if (refuse) {
        answer(c->down, refuse, "Refused By Test");
        return NULL;
    }
    int up = connect_target(target);
    if (up < 0) {
        answer(c->down, 502, "Bad Gateway");
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    c->up = up;
    bool stopping = p->stop;
    pthread_mutex_unlock(&p->mu);
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (stopping || !write_all(c->down, ok, sizeof ok - 1))
        return NULL;
    char *rest = end + 4;
    relay(p, c->down, up, rest, len - (size_t)(rest - head));
    return NULL;
}

static void *accept_main(void *arg)
{
    connect_proxy *p = arg;
    for (;;) {
        int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        pthread_mutex_lock(&p->mu);
        bool stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) {
            if (fd >= 0)
                close(fd);
            return NULL;
        }
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->p = p;
        c->down = fd;
        c->up = -1;
        pthread_mutex_lock(&p->mu);
        c->next = p->conns;
        p->conns = c;
        if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
            p->conns = c->next;
            close(fd);
            free(c);
        }
        pthread_mutex_unlock(&p->mu);
    }
}

connect_proxy *connect_proxy_start(void)
{
    connect_proxy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(p->listen_fd, 64) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&a, &alen) != 0) {
        fprintf(stderr, "connect_proxy: cannot listen: %s\n", strerror(errno));
        if (p->listen_fd >= 0)
            close(p->listen_fd);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    p->port = ntohs(a.sin_port);
    if (pthread_create(&p->accept_thread, NULL, accept_main, p) != 0) {
        fprintf(stderr, "connect_proxy: cannot start its thread\n");
        close(p->listen_fd);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    return p;
}

void connect_proxy_stop(connect_proxy *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    for (conn *c = p->conns; c; c = c->next) {
        shutdown(c->down, SHUT_RDWR);
        if (c->up >= 0)
            shutdown(c->up, SHUT_RDWR);
    }
    pthread_mutex_unlock(&p->mu);
    shutdown(p->listen_fd, SHUT_RDWR);
    pthread_join(p->accept_thread, NULL);
    /* No new connection threads now; shut down the target sockets connected meanwhile. */
    pthread_mutex_lock(&p->mu);
    for (conn *c = p->conns; c; c = c->next) {
        shutdown(c->down, SHUT_RDWR);
        if (c->up >= 0)
            shutdown(c->up, SHUT_RDWR);
    }
    pthread_mutex_unlock(&p->mu);
    while (p->conns) {
        conn *c = p->conns;
        p->conns = c->next;
        pthread_join(c->thread, NULL);
        close(c->down);
        if (c->up >= 0)
            close(c->up);
        free(c);
    }
    close(p->listen_fd);
    for (size_t i = 0; i < p->n_recorded; i++)
        free(p->recorded[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int connect_proxy_port(const connect_proxy *p)
{
    return p->port;
}

void connect_proxy_refuse(connect_proxy *p, int status)
{
    pthread_mutex_lock(&p->mu);
    p->refuse = status;
    /* Sockets are closed only at stop, so these descriptors are still the connections'. */
    for (conn *c = p->conns; c; c = c->next) {
        shutdown(c->down, SHUT_RDWR);
        if (c->up >= 0)
            shutdown(c->up, SHUT_RDWR);
    }
    pthread_mutex_unlock(&p->mu);
}

size_t connect_proxy_count(connect_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->n_recorded;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int connect_proxy_request(connect_proxy *p, size_t i, char *buf, size_t len)
{
    pthread_mutex_lock(&p->mu);
    int rc = -1;
    if (i < p->n_recorded && p->recorded[i]) {
        snprintf(buf, len, "%s", p->recorded[i]);
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

size_t connect_proxy_count_line(connect_proxy *p, const char *line)
{
    pthread_mutex_lock(&p->mu);
    size_t n = 0;
    for (size_t i = 0; i < p->n_recorded; i++)
        n += p->recorded[i] && strcmp(p->recorded[i], line) == 0;
    pthread_mutex_unlock(&p->mu);
    return n;
}

size_t connect_proxy_relayed(connect_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->relayed;
    pthread_mutex_unlock(&p->mu);
    return n;
}
