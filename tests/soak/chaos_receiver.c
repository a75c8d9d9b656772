/* chaos_receiver.c - the soak test's misbehaving webhook receiver.
 *
 *   chaos_receiver --port N [--customers K] [--prefix /c/soak_c] [--reroll-ms MS] [--seed S]
 *                  [--healthy PCT]
 *
 * Serves on 127.0.0.1:N with tests/lib/receiver.c. Customer i (0 <= i < K) is reached at path
 * "<prefix><i as %03d>". Every --reroll-ms (default 5000) each of those paths gets a new
 * behaviour: healthy (no rule: 200 "ok") with probability --healthy percent (default 50),
 * otherwise one of 500, 503 + Retry-After, 429 + Retry-After, a slow 200, 400 (dead letter),
 * 410 (pauses the customer), hang, reset, garbage, close without answer, a 1 GiB trickle.
 * The trickle counts as "ok": its status line is 200, and pgpace stops reading at
 * max_response_bytes and lets the status stand (tests/integration/dispatch/test_delivery.c).
 *
 * Prints one line per request on stdout:
 *     <unix_ms> <path> <webhook-id> <body_len> <verdict>
 * where verdict is "ok" when the receiver answered 2xx, "fail:<what>" when it did not, and
 * "amb:<old>/<new>" for the rare request that arrived while the rules were being replaced and
 * whose old and new behaviour differ (the receiver records a request and picks its rule under
 * one lock, so requests recorded before the re-roll started used the old rules and those
 * recorded after it ended the new ones: the verdict is exact except inside that window).
 *
 * A 2xx answer that pgpace does not see (e.g. a slow 200 cut by its request timeout) is still
 * printed "ok": keep slow-200 delays below pgpace's request_timeout_ms (the maximum used here is
 * 1500 ms). Exits 0 on SIGINT / SIGTERM.
 */
#include "receiver.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct behaviour {
    const char *name; /* verdict text: "ok" or the failure's name */
    int weight;       /* relative weight among the unhealthy behaviours */
    receiver_action action;
    int status;
    const char *retry_after;
    int delay_ms;
} behaviour;

/* Index 0 is "healthy" (no rule). */
static const behaviour behaviours[] = {
    {"ok", 0, RECV_RESPOND, 200, NULL, 0},
    {"ok", 20, RECV_RESPOND, 200, NULL, 1500}, /* slow but fine */
    {"ok", 10, RECV_RESPOND, 202, NULL, 100},  /* another 2xx */
    {"fail:500", 20, RECV_RESPOND, 500, NULL, 0},
    {"fail:503", 8, RECV_RESPOND, 503, "2", 0},
    {"fail:429", 8, RECV_RESPOND, 429, "1", 0},
    {"fail:400", 6, RECV_RESPOND, 400, NULL, 0}, /* dead letter at once */
    {"fail:410", 1, RECV_RESPOND, 410, NULL, 0}, /* pauses the customer */
    {"fail:hang", 5, RECV_HANG, 0, NULL, 0},
    {"fail:reset", 6, RECV_RESET, 0, NULL, 0},
    {"fail:garbage", 5, RECV_GARBAGE, 0, NULL, 0},
    {"fail:close", 5, RECV_CLOSE, 0, NULL, 0},
    {"ok", 2, RECV_TRICKLE_HUGE, 0, NULL, 0}, /* 200; pgpace stops at max_response_bytes */
};
#define NBEHAVIOURS (sizeof behaviours / sizeof behaviours[0])

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    stop_requested = sig;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int usage(void)
{
    fprintf(stderr, "usage: chaos_receiver --port N [--customers K] [--prefix P] [--reroll-ms MS]"
                    " [--seed S] [--healthy PCT]\n");
    return 2;
}

/* The customer index of a recorded path, or -1. */
static int path_index(const char *path, const char *prefix, int ncust)
{
    size_t pl = strlen(prefix);
    if (strncmp(path, prefix, pl) != 0)
        return -1;
    char *end;
    long i = strtol(path + pl, &end, 10);
    if (end == path + pl || i < 0 || i >= ncust)
        return -1;
    return (int)i;
}

static int pick(unsigned *seed, int healthy_pct)
{
    if ((int)(rand_r(seed) % 100) < healthy_pct)
        return 0;
    int total = 0;
    for (size_t i = 1; i < NBEHAVIOURS; i++)
        total += behaviours[i].weight;
    int x = (int)(rand_r(seed) % (unsigned)total);
    for (size_t i = 1; i < NBEHAVIOURS; i++) {
        if (x < behaviours[i].weight)
            return (int)i;
        x -= behaviours[i].weight;
    }
    return 0;
}

static void print_request(const receiver_request *rq, const char *verdict)
{
    printf("%" PRId64 " %s %s %zu %s\n", rq->at_us / 1000, rq->path,
           rq->webhook_id[0] ? rq->webhook_id : "-", rq->body_len, verdict);
}

/* Prints requests [*printed, upto) with the verdicts of table `cur` (or, when `old` is given,
 * "amb" where old and cur differ). */
static void print_upto(receiver *r, size_t *printed, size_t upto, const int *cur, const int *old,
                       const char *prefix, int ncust)
{
    for (; *printed < upto; (*printed)++) {
        receiver_request rq;
        if (receiver_get(r, *printed, &rq) != 0)
            break;
        int i = path_index(rq.path, prefix, ncust);
        const char *v = "ok"; /* paths without rules always get 200 */
        char amb[64];
        if (i >= 0) {
            v = behaviours[cur[i]].name;
            if (old && strcmp(behaviours[old[i]].name, v) != 0) {
                snprintf(amb, sizeof amb, "amb:%s/%s", behaviours[old[i]].name, v);
                v = amb;
            }
        }
        print_request(&rq, v);
        free(rq.body);
    }
}

static void apply(receiver *r, const int *table, const char *prefix, int ncust)
{
    receiver_clear_rules(r);
    for (int i = 0; i < ncust; i++) {
        const behaviour *b = &behaviours[table[i]];
        if (table[i] == 0)
            continue;
        char path[128];
        snprintf(path, sizeof path, "%s%03d", prefix, i);
        receiver_rule rule = {
            .path_prefix = path,
            .action = b->action,
            .status = b->status,
            .body = b->status >= 200 && b->status < 300 ? "ok" : "chaos",
            .retry_after = b->retry_after,
            .delay_ms = b->delay_ms,
            .times = 0,
        };
        receiver_on(r, &rule);
    }
}

int main(int argc, char **argv)
{
    int port = 0, ncust = 40, reroll_ms = 5000, healthy = 50;
    unsigned seed = (unsigned)time(NULL);
    const char *prefix = "/c/soak_c";
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return usage();
        const char *k = argv[i], *v = argv[++i];
        if (strcmp(k, "--port") == 0)
            port = atoi(v);
        else if (strcmp(k, "--customers") == 0)
            ncust = atoi(v);
        else if (strcmp(k, "--prefix") == 0)
            prefix = v;
        else if (strcmp(k, "--reroll-ms") == 0)
            reroll_ms = atoi(v);
        else if (strcmp(k, "--seed") == 0)
            seed = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(k, "--healthy") == 0)
            healthy = atoi(v);
        else
            return usage();
    }
    if (port < 0 || port > 65535 || ncust < 0 || ncust > 100000 || reroll_ms < 100)
        return usage();

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int *cur = calloc((size_t)ncust + 1, sizeof *cur);
    int *next = calloc((size_t)ncust + 1, sizeof *next);
    if (!cur || !next)
        return 1;
    receiver *r = receiver_start_port(port);
    if (!r)
        return 1;
    char url[64];
    receiver_url(r, "/", url, sizeof url);
    fprintf(stderr, "chaos_receiver: listening on %s, %d customers, seed %u\n", url, ncust, seed);

    size_t printed = 0;
    long long next_roll = now_ms() + reroll_ms;
    unsigned long rolls = 0;
    while (!stop_requested) {
        size_t n = receiver_wait(r, NULL, printed + 1, 100);
        print_upto(r, &printed, n, cur, NULL, prefix, ncust);
        if (now_ms() >= next_roll) {
            for (int i = 0; i < ncust; i++)
                next[i] = pick(&seed, healthy);
            size_t n0 = receiver_count(r, NULL);
            print_upto(r, &printed, n0, cur, NULL, prefix, ncust);
            apply(r, next, prefix, ncust);
            size_t n1 = receiver_count(r, NULL);
            print_upto(r, &printed, n1, next, cur, prefix, ncust);
            int *t = cur;
            cur = next;
            next = t;
            next_roll += reroll_ms;
            rolls++;
            if (rolls % 12 == 0) {
                int bad = 0;
                for (int i = 0; i < ncust; i++)
                    bad += cur[i] != 0;
                fprintf(stderr, "chaos_receiver: re-roll %lu: %d of %d customers misbehave\n",
                        rolls, bad, ncust);
            }
        }
        fflush(stdout);
    }
    print_upto(r, &printed, receiver_count(r, NULL), cur, NULL, prefix, ncust);
    fflush(stdout);
    receiver_stop(r);
    free(cur);
    free(next);
    fprintf(stderr, "chaos_receiver: stopped by signal %d after %zu requests\n",
            (int)stop_requested, printed);
    return 0;
}
