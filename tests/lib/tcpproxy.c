/* tcpproxy.c - a controllable TCP proxy on loopback for tests (see tcpproxy.h).
 *
 * One thread runs a poll(2) loop over the listening socket, a wake-up pipe and both sockets of
 * every pair; the test thread only sets the requested mode under the mutex, writes to the pipe
 * and waits on a condition variable until the thread has applied it. Each direction of a pair
 * has one buffer: read while it has room, write while it holds data.
 */
#include "tcpproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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

#define BUF_BYTES (64 * 1024)

typedef struct dir_buf {
    char data[BUF_BYTES];
    size_t len;
} dir_buf;

typedef struct pair {
    int down, up;      /* client side, server side */
    bool up_connected; /* the non-blocking connect finished */
    bool down_eof, up_eof;
    bool dead;
    dir_buf d2u, u2d;
    struct pair *next;
} pair;

struct tcpproxy {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wake[2];
    int listen_fd;
    int port;
    struct sockaddr_in upstream;
    /* Guarded by mu. */
    tcpproxy_mode want;
    unsigned want_gen, applied_gen;
    int apply_rc;
    bool stop;
    size_t open, accepted, reset;
    /* Proxy thread only. */
    tcpproxy_mode mode;
    pair *pairs;
};

const char *tcpproxy_mode_name(tcpproxy_mode mode)
{
    switch (mode) {
    case TCPPROXY_PASS:
        return "pass";
    case TCPPROXY_PAUSE:
        return "pause";
    case TCPPROXY_DROP:
        return "drop";
    case TCPPROXY_REFUSE:
        return "refuse";
    }
    return "?";
}

/* Closes with RST instead of FIN. */
static void close_reset(int fd)
{
    if (fd < 0)
        return;
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void count(tcpproxy *p, size_t *field, long delta)
{
    pthread_mutex_lock(&p->mu);
    *field = (size_t)((long)*field + delta);
    pthread_mutex_unlock(&p->mu);
}

/* Marks the pair closed: gracefully (FIN after what was forwarded) or with RST on both sides. */
static void pair_close(tcpproxy *p, pair *q, bool rst)
{
    if (q->dead)
        return;
    q->dead = true;
    if (rst) {
        close_reset(q->down);
        close_reset(q->up);
    } else {
        close(q->down);
        close(q->up);
    }
    q->down = q->up = -1;
    count(p, &p->open, -1);
}

static void sweep(tcpproxy *p)
{
    for (pair **pp = &p->pairs; *pp;) {
        pair *q = *pp;
        if (q->dead) {
            *pp = q->next;
            free(q);
        } else {
            pp = &q->next;
        }
    }
}

static void drop_all(tcpproxy *p)
{
    size_t n = 0;
    for (pair *q = p->pairs; q; q = q->next)
        if (!q->dead) {
            pair_close(p, q, true);
            n++;
        }
    sweep(p);
    count(p, &p->reset, (long)n);
}

static int apply_mode(tcpproxy *p, tcpproxy_mode mode)
{
    int rc = 0;
    if (mode == TCPPROXY_REFUSE && p->listen_fd >= 0) {
        close(p->listen_fd);
        p->listen_fd = -1;
    }
    if (mode != TCPPROXY_REFUSE && p->listen_fd < 0) {
        p->listen_fd = listen_on(p->port);
        if (p->listen_fd < 0) {
            fprintf(stderr, "tcpproxy: cannot listen on port %d again: %s\n", p->port,
                    strerror(errno));
            rc = -1;
        }
    }
    if (mode == TCPPROXY_DROP)
        drop_all(p);
    p->mode = mode;
    return rc;
}

static void accept_one(tcpproxy *p)
{
    int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    count(p, &p->accepted, 1);
    if (p->mode == TCPPROXY_DROP) {
        close_reset(fd);
        count(p, &p->reset, 1);
        return;
    }
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (up < 0) {
        close_reset(fd);
        return;
    }
    int rc = connect(up, (struct sockaddr *)&p->upstream, sizeof p->upstream);
    if (rc != 0 && errno != EINPROGRESS) {
        close_reset(up);
        close_reset(fd);
        return;
    }
    pair *q = calloc(1, sizeof *q);
    if (!q) {
        close_reset(up);
        close_reset(fd);
        return;
    }
    q->down = fd;
    q->up = up;
    q->up_connected = rc == 0;
    q->next = p->pairs;
    p->pairs = q;
    count(p, &p->open, 1);
}

/* Reads from `from` into b; returns 1 on data, 0 on EOF, -1 on error, 2 when it would block. */
static int fill(int from, dir_buf *b)
{
    ssize_t n = recv(from, b->data + b->len, sizeof b->data - b->len, 0);
    if (n > 0) {
        b->len += (size_t)n;
        return 1;
    }
    if (n == 0)
        return 0;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 2 : -1;
}

/* Writes b to `to`; 0 or -1 on error. */
static int flush(int to, dir_buf *b)
{
    if (b->len == 0)
        return 0;
    ssize_t n = send(to, b->data, b->len, MSG_NOSIGNAL);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    memmove(b->data, b->data + n, b->len - (size_t)n);
    b->len -= (size_t)n;
    return 0;
}

static void pair_io(tcpproxy *p, pair *q, short down_ev, short up_ev)
{
    if (!q->up_connected && (up_ev & (POLLOUT | POLLERR | POLLHUP))) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(q->up, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
            pair_close(p, q, true);
            return;
        }
        q->up_connected = true;
        up_ev = 0;
    }
    if (!q->up_connected)
        return;
    if ((down_ev & (POLLIN | POLLHUP | POLLERR)) && !q->down_eof && q->d2u.len < BUF_BYTES) {
        int r = fill(q->down, &q->d2u);
        if (r < 0) {
            pair_close(p, q, true);
            return;
        }
        if (r == 0)
            q->down_eof = true;
    }
    if ((up_ev & (POLLIN | POLLHUP | POLLERR)) && !q->up_eof && q->u2d.len < BUF_BYTES) {
        int r = fill(q->up, &q->u2d);
        if (r < 0) {
            pair_close(p, q, true);
            return;
        }
        if (r == 0)
            q->up_eof = true;
    }
    if (flush(q->up, &q->d2u) < 0 || flush(q->down, &q->u2d) < 0) {
        pair_close(p, q, true);
        return;
    }
    /* One side closed: once what it sent is forwarded, close both (FIN). */
    if ((q->up_eof && q->u2d.len == 0) || (q->down_eof && q->d2u.len == 0))
        pair_close(p, q, false);
}

static void *run(void *arg)
{
    tcpproxy *p = arg;
    size_t cap = 16;
    struct pollfd *fds = malloc(cap * sizeof *fds);
    pair **owners = malloc(cap * sizeof *owners);
    if (!fds || !owners)
        abort();
    for (;;) {
        size_t npairs = 0;
        for (pair *q = p->pairs; q; q = q->next)
            npairs++;
        if (2 + 2 * npairs > cap) {
            cap = 2 * (2 + 2 * npairs);
            fds = realloc(fds, cap * sizeof *fds);
            owners = realloc(owners, cap * sizeof *owners);
            if (!fds || !owners)
                abort();
        }
        size_t n = 0;
        fds[n++] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        size_t listen_at = SIZE_MAX;
        if (p->listen_fd >= 0 && p->mode != TCPPROXY_PAUSE) {
            listen_at = n;
            fds[n++] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
        }
        size_t first_pair = n;
        if (p->mode != TCPPROXY_PAUSE) {
            for (pair *q = p->pairs; q; q = q->next) {
                short de = 0, ue = 0;
                if (!q->up_connected) {
                    ue = POLLOUT;
                } else {
                    if (!q->down_eof && q->d2u.len < BUF_BYTES)
                        de |= POLLIN;
                    if (q->u2d.len > 0)
                        de |= POLLOUT;
                    if (!q->up_eof && q->u2d.len < BUF_BYTES)
                        ue |= POLLIN;
                    if (q->d2u.len > 0)
                        ue |= POLLOUT;
                }
                owners[n] = q;
                fds[n++] = (struct pollfd){.fd = q->down, .events = de};
                owners[n] = q;
                fds[n++] = (struct pollfd){.fd = q->up, .events = ue};
            }
        }
        if (poll(fds, (nfds_t)n, -1) < 0 && errno != EINTR)
            abort();

        if (fds[0].revents & POLLIN) {
            char junk[64];
            while (read(p->wake[0], junk, sizeof junk) > 0) {
            }
            pthread_mutex_lock(&p->mu);
            bool stop = p->stop;
            tcpproxy_mode want = p->want;
            unsigned gen = p->want_gen;
            pthread_mutex_unlock(&p->mu);
            if (stop)
                break;
            if (gen != p->applied_gen) {
                int rc = apply_mode(p, want);
                pthread_mutex_lock(&p->mu);
                p->applied_gen = gen;
                p->apply_rc = rc;
                pthread_cond_broadcast(&p->cv);
                pthread_mutex_unlock(&p->mu);
                continue; /* the fds built above may be stale now */
            }
        }
        if (listen_at != SIZE_MAX && (fds[listen_at].revents & POLLIN))
            for (int k = 0; k < 64 && p->listen_fd >= 0; k++) {
                size_t before = tcpproxy_accepted(p);
                accept_one(p);
                if (tcpproxy_accepted(p) == before)
                    break;
            }
        for (size_t i = first_pair; i + 1 < n; i += 2) {
            pair *q = owners[i];
            if (!q->dead && (fds[i].revents || fds[i + 1].revents))
                pair_io(p, q, fds[i].revents, fds[i + 1].revents);
        }
        sweep(p);
    }
    for (pair *q = p->pairs; q; q = q->next)
        pair_close(p, q, true);
    sweep(p);
    free(fds);
    free(owners);
    return NULL;
}

tcpproxy *tcpproxy_start(const char *upstream_host, int upstream_port)
{
    tcpproxy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->upstream.sin_family = AF_INET;
    p->upstream.sin_port = htons((uint16_t)upstream_port);
    if (inet_pton(AF_INET, upstream_host, &p->upstream.sin_addr) != 1) {
        fprintf(stderr, "tcpproxy: upstream host must be numeric IPv4, got '%s'\n", upstream_host);
        free(p);
        return NULL;
    }
    p->listen_fd = listen_on(0);
    if (p->listen_fd < 0) {
        fprintf(stderr, "tcpproxy: cannot listen: %s\n", strerror(errno));
        free(p);
        return NULL;
    }
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    getsockname(p->listen_fd, (struct sockaddr *)&a, &alen);
    p->port = ntohs(a.sin_port);
    if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        close(p->listen_fd);
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->mode = p->want = TCPPROXY_PASS;
    if (pthread_create(&p->thread, NULL, run, p) != 0) {
        close(p->listen_fd);
        close(p->wake[0]);
        close(p->wake[1]);
        free(p);
        return NULL;
    }
    return p;
}

static void wake(tcpproxy *p)
{
    char c = 1;
    while (write(p->wake[1], &c, 1) < 0 && errno == EINTR) {
    }
}

void tcpproxy_stop(tcpproxy *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_mutex_unlock(&p->mu);
    wake(p);
    pthread_join(p->thread, NULL);
    if (p->listen_fd >= 0)
        close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int tcpproxy_port(const tcpproxy *p)
{
    return p->port;
}

int tcpproxy_set_mode(tcpproxy *p, tcpproxy_mode mode)
{
    pthread_mutex_lock(&p->mu);
    p->want = mode;
    unsigned gen = ++p->want_gen;
    pthread_mutex_unlock(&p->mu);
    wake(p);
    pthread_mutex_lock(&p->mu);
    while (p->applied_gen != gen)
        pthread_cond_wait(&p->cv, &p->mu);
    int rc = p->apply_rc;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static size_t read_counter(tcpproxy *p, const size_t *field)
{
    pthread_mutex_lock(&p->mu);
    size_t v = *field;
    pthread_mutex_unlock(&p->mu);
    return v;
}

size_t tcpproxy_open(tcpproxy *p)
{
    return read_counter(p, &p->open);
}

size_t tcpproxy_accepted(tcpproxy *p)
{
    return read_counter(p, &p->accepted);
}

size_t tcpproxy_reset(tcpproxy *p)
{
    return read_counter(p, &p->reset);
}
