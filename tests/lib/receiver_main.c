/* receiver_main.c - pgpace-receiver: the test webhook receiver as a foreground program.
 *
 *   pgpace-receiver [--port N] [--throttle SPEC]...
 *
 * Serves on 127.0.0.1 (port N, default ephemeral), answers 200 "ok" to everything, and prints
 * one line per request on stdout: "<unix_ms> <path> <webhook-id> <body_len>" ("-" when there is
 * no webhook-id). The listening URL goes to stderr. Exits 0 on SIGINT / SIGTERM.
 *
 * --throttle throttles a path prefix like a rate-limited API (receiver_throttle_on(); see the
 * usage text for SPEC). With at least one --throttle, each line gets a fifth field: the status
 * sent (200, or the throttle's 429 / 503), so a plot can tell accepted from throttled requests;
 * without, the four-field format stays as it was (tests/soak/run and the quickstart read it).
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
    fprintf(f,
            "usage: pgpace-receiver [--port N] [--throttle SPEC]...\n"
            "Receives webhooks on 127.0.0.1 and prints one line per request:\n"
            "<unix_ms> <path> <webhook-id> <body_len>\n"
            "\n"
            "--throttle SPEC answers like a rate-limited API for paths starting with PREFIX\n"
            "(repeatable; the last matching --throttle decides). SPEC is one of\n"
            "  PREFIX:token-bucket:RATE:BURST[:STATUS][:retry-after=MODE]\n"
            "      BURST tokens (>= 1), refilled continuously at RATE per minute (> 0,\n"
            "      fractions allowed); a request takes a token or is throttled\n"
            "  PREFIX:window:LIMIT:WINDOW_MS[:STATUS][:retry-after=MODE]\n"
            "      at most LIMIT requests per WINDOW_MS window, windows aligned to the start\n"
            "STATUS is the throttled answer's status: 429 (default) or 503 (any 400..599).\n"
            "MODE is its Retry-After header: auto (default: seconds until a token or the next\n"
            "window, rounded up, at least 1), none (no header), date (an HTTP date of then), or\n"
            "any other text, sent as is (e.g. 99999999999 or soon; it runs to the end of SPEC\n"
            "and may contain ':').\n"
            "With --throttle, each line gets a fifth field: the status sent (e.g. 200 or 429).\n"
            "Example: pgpace-receiver --port 8080 --throttle /c/acme:token-bucket:60:5:429\n");
    return f == stdout ? 0 : 2;
}

/* Parses an int in [min, max] from s[0..len). */
static int parse_int(const char *s, size_t len, long min, long max, int *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

/* Parses --throttle's SPEC into *t (whose strings point into spec, or into prefix_buf). */
static int parse_throttle(const char *spec, receiver_throttle *t, char *prefix_buf, size_t cap)
{
    memset(t, 0, sizeof *t);
    const char *f[4]; /* PREFIX, kind, and the kind's two numbers */
    size_t flen[4];
    const char *p = spec;
    for (int i = 0; i < 4; i++) {
        const char *colon = strchr(p, ':');
        if (!colon && i < 3)
            return -1;
        f[i] = p;
        flen[i] = colon ? (size_t)(colon - p) : strlen(p);
        p = colon ? colon + 1 : p + flen[i];
        if (i == 3 && colon && !*p)
            return -1; /* a trailing ':' */
    }
    if (flen[0] == 0 || f[0][0] != '/' || flen[0] >= cap)
        return -1;
    memcpy(prefix_buf, f[0], flen[0]);
    prefix_buf[flen[0]] = '\0';
    t->path_prefix = prefix_buf;
    if (flen[1] == 12 && memcmp(f[1], "token-bucket", 12) == 0) {
        char num[64];
        if (flen[2] == 0 || flen[2] >= sizeof num)
            return -1;
        memcpy(num, f[2], flen[2]);
        num[flen[2]] = '\0';
        char *end;
        errno = 0;
        t->kind = RECV_TOKEN_BUCKET;
        t->rate_per_minute = strtod(num, &end);
        if (errno || *end || !(t->rate_per_minute > 0) ||
            parse_int(f[3], flen[3], 1, 1000000000, &t->burst) != 0)
            return -1;
    } else if (flen[1] == 6 && memcmp(f[1], "window", 6) == 0) {
        t->kind = RECV_FIXED_WINDOW;
        if (parse_int(f[2], flen[2], 0, 1000000000, &t->limit) != 0 ||
            parse_int(f[3], flen[3], 1, 1000000000, &t->window_ms) != 0)
            return -1;
    } else {
        return -1;
    }
    /* p is at the options: [STATUS][:retry-after=MODE], the mode running to the end. */
    if (*p && strncmp(p, "retry-after=", 12) != 0) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (parse_int(p, n, 400, 599, &t->status) != 0)
            return -1;
        p = colon ? colon + 1 : p + n;
        if (colon && !*p)
            return -1;
    }
    if (*p) {
        if (strncmp(p, "retry-after=", 12) != 0 || !p[12])
            return -1;
        const char *mode = p + 12;
        if (strcmp(mode, "auto") == 0) {
            t->retry_after = RECV_RA_SECONDS;
        } else if (strcmp(mode, "none") == 0) {
            t->retry_after = RECV_RA_NONE;
        } else if (strcmp(mode, "date") == 0) {
            t->retry_after = RECV_RA_DATE;
        } else {
            t->retry_after = RECV_RA_LITERAL;
            t->retry_after_literal = mode;
        }
    }
    return 0;
}

enum { MAX_THROTTLES = 64 };

int main(int argc, char **argv)
{
    int port = 0;
    static receiver_throttle throttles[MAX_THROTTLES];
    static char prefixes[MAX_THROTTLES][256];
    int nthrottles = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage(stdout);
        const char *spec = NULL;
        if (strcmp(argv[i], "--throttle") == 0 && i + 1 < argc)
            spec = argv[++i];
        else if (strncmp(argv[i], "--throttle=", 11) == 0)
            spec = argv[i] + 11;
        if (spec) {
            if (nthrottles == MAX_THROTTLES) {
                fprintf(stderr, "pgpace-receiver: at most %d --throttle\n", MAX_THROTTLES);
                return 2;
            }
            if (parse_throttle(spec, &throttles[nthrottles], prefixes[nthrottles],
                               sizeof prefixes[nthrottles]) != 0) {
                fprintf(stderr, "pgpace-receiver: bad --throttle: %s (see --help)\n", spec);
                return 2;
            }
            nthrottles++;
            continue;
        }
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
    for (int i = 0; i < nthrottles; i++) {
        if (receiver_throttle_on(r, &throttles[i]) != 0) {
            receiver_stop(r);
            return 2;
        }
    }
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
            if (nthrottles > 0)
                printf("%" PRId64 " %s %s %zu %d\n", rq.at_us / 1000, rq.path,
                       rq.webhook_id[0] ? rq.webhook_id : "-", rq.body_len, rq.status);
            else
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
