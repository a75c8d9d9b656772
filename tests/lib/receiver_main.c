/* receiver_main.c - pgpace-receiver: the test webhook receiver as a foreground program.
 *
 *   pgpace-receiver [--port N]
 *
 * Serves on 127.0.0.1 (port N, default ephemeral), answers 200 "ok" to everything, and prints
 * one line per request on stdout: "<unix_ms> <path> <webhook-id> <body_len>" ("-" when there is
 * no webhook-id). The listening URL goes to stderr. Exits 0 on SIGINT / SIGTERM.
 */
#include "receiver.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    stop_requested = sig;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: pgpace-receiver [--port N]\n"
               "Receives webhooks on 127.0.0.1 and prints one line per request:\n"
               "<unix_ms> <path> <webhook-id> <body_len>\n");
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage(stdout);
        const char *v = NULL;
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            v = argv[++i];
        else if (strncmp(argv[i], "--port=", 7) == 0)
            v = argv[i] + 7;
        if (!v)
            return usage(stderr);
        char *end;
        errno = 0;
        long p = strtol(v, &end, 10);
        if (errno || end == v || *end || p < 0 || p > 65535) {
            fprintf(stderr, "pgpace-receiver: bad port: %s\n", v);
            return 2;
        }
        port = (int)p;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    receiver *r = receiver_start_port(port);
    if (!r)
        return 1;
    char url[64];
    receiver_url(r, "/", url, sizeof url);
    fprintf(stderr, "pgpace-receiver: listening on %s\n", url);

    size_t printed = 0;
    while (!stop_requested) {
        /* Wakes on each new request; the timeout bounds how late a signal is noticed. */
        size_t n = receiver_wait(r, NULL, printed + 1, 100);
        for (; printed < n; printed++) {
            receiver_request rq;
            if (receiver_get(r, printed, &rq) != 0)
                break;
            printf("%" PRId64 " %s %s %zu\n", rq.at_us / 1000, rq.path,
                   rq.webhook_id[0] ? rq.webhook_id : "-", rq.body_len);
            free(rq.body);
        }
        fflush(stdout);
    }
    receiver_stop(r);
    fprintf(stderr, "pgpace-receiver: stopped by signal %d\n", (int)stop_requested);
    return 0;
}
