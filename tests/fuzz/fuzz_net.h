/* fuzz_net.h - a loopback TCP client for the targets that drive a real listener (admin_http,
 * enqueue_http): connect with send/receive timeouts, surviving libFuzzer's timer signal.
 */
#ifndef PGPACE_FUZZ_NET_H
#define PGPACE_FUZZ_NET_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* A connected socket to 127.0.0.1:port with timeouts of timeout_s, or -1 with errno set. A
 * connect interrupted by libFuzzer's timer signal goes on in the background (waiting for the
 * listen backlog): it is waited for and its outcome taken. */
static inline int fuzz_connect_loopback(int port, int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    int rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    if (rc != 0 && errno == EINTR) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t len = sizeof soerr;
        int pr;
        do
            pr = poll(&pfd, 1, timeout_s * 1000);
        while (pr < 0 && errno == EINTR);
        if (pr == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
            rc = 0;
        else
            errno = pr == 0 ? ETIMEDOUT : soerr ? soerr : errno;
    }
    if (rc != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

#endif
