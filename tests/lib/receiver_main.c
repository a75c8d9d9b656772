/* receiver_main.c - pgpace-receiver: the test webhook receiver as a foreground program.
 *
 *   pgpace-receiver [--port N] [--throttle SPEC]... [--rule SPEC]...
 *
 * Serves on 127.0.0.1 (port N, default ephemeral), answers 200 "ok" to everything, and prints
 * one line per request on stdout: "<unix_ms> <path> <webhook-id> <body_len>" ("-" when there is
 * no webhook-id). The listening URL goes to stderr. Exits 0 on SIGINT / SIGTERM.
 *
 * --throttle throttles a path prefix like a rate-limited API (receiver_throttle_on(); see the
 * usage text for SPEC). --rule answers a path prefix with a status, optionally late and only
 * every N-th request (receiver_on()), so a benchmark can stand up a host that is sometimes slow
 * and sometimes fails, the same way on every run. With at least one --throttle or --rule, each
 * line gets a fifth field: the status sent, so a plot can tell accepted from throttled or failed
 * requests; without, the four-field format stays as it was (tests/soak/run and the quickstart
 * read it). A line is then printed once its answer is sent, so that a delayed answer's line
 * carries its real status instead of 0; requests still unanswered when the receiver stops are
 * printed then, with status 0.
 */
#include "receiver.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
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
            "usage: pgpace-receiver [--port N] [--micros] [--throttle SPEC]... [--rule SPEC]...\n"
            "Receives webhooks on 127.0.0.1 (port N, default any free one; the URL goes to\n"
            "stderr) and prints one line per request on stdout:\n"
            "  <unix_ms> <path> <webhook-id> <body_len>\n"
            "or, with --throttle or --rule,\n"
            "  <unix_ms> <path> <webhook-id> <body_len> <status>\n"
            "unix_ms: when the request was complete (milliseconds since the epoch); path: as\n"
            "requested, with the query; webhook-id: the header's value, or - without one;\n"
            "body_len: the body's bytes; status: the status sent. Without --throttle or --rule\n"
            "every answer is 200 \"ok\" and lines come in arrival order. With them a line comes\n"
            "once its answer is sent, so a delayed answer's line follows those of requests that\n"
            "arrived later (unix_ms keeps the arrival time); a request not answered when the\n"
            "receiver stops (its client left before a delayed answer) is printed then, status 0.\n"
            "--micros prints unix_us (microseconds since the epoch) in unix_ms's place.\n"
            "\n"
            "--throttle SPEC answers like a rate-limited API for paths starting with PREFIX\n"
            "(repeatable; the last matching --throttle decides). SPEC is one of\n"
            "  PREFIX:token-bucket:RATE:BURST[:STATUS][:retry-after=MODE]\n"
            "      BURST tokens (>= 1), refilled continuously at RATE per minute (> 0,\n"
            "      fractions allowed); a request takes a token or is throttled\n"
            "  PREFIX:window:LIMIT:WINDOW_MS[:STATUS][:retry-after=MODE]\n"
            "      at most LIMIT requests per WINDOW_MS window, windows aligned to the start\n"
            "  PREFIX:sliding:LIMIT/MS[,LIMIT/MS]...[:STATUS][:retry-after=MODE]\n"
            "      up to 4 sliding windows enforced together: at most LIMIT requests let\n"
            "      through in any MS milliseconds (throttled ones do not count)\n"
            "Each may add :announce=FORM after STATUS: every answer of PREFIX then states the\n"
            "throttle's limit and state in rate limit headers, FORM one of ietf (RateLimit-Policy\n"
            "and RateLimit), ietf-early (RateLimit-Limit/-Remaining/-Reset), x (X-RateLimit-*,\n"
            "reset in seconds) or x-epoch (X-RateLimit-Reset in epoch seconds).\n"
            "STATUS is the throttled answer's status: 429 (default) or 503 (any 400..599).\n"
            "MODE is its Retry-After header: auto (default: seconds until a token or the next\n"
            "window, rounded up, at least 1), none (no header), date (an HTTP date of then), or\n"
            "any other text, sent as is (e.g. 99999999999 or soon; it runs to the end of SPEC\n"
            "and may contain ':').\n"
            "Example: pgpace-receiver --port 8080 --throttle /c/acme:token-bucket:60:5:429\n"
            "         pgpace-receiver --throttle /:sliding:10/1000,300/60000:announce=ietf\n"
            "\n"
            "--rule SPEC answers requests whose path starts with PREFIX (repeatable; added in\n"
            "order, tried last first: the last matching --rule that takes a request answers it;\n"
            "throttles come before rules). SPEC is\n"
            "  PREFIX:STATUS[:delay=MS][:every=N][:retry-after=VALUE]\n"
            "STATUS is the answer's status (200..599, no body); delay=MS sends it MS milliseconds\n"
            "late; every=N (>= 1, default 1) takes only the N-th, 2N-th, ... request that reaches\n"
            "this rule and lets the others fall through to the --rule options before it, and\n"
            "then to the default 200 \"ok\"; retry-after=VALUE adds that Retry-After header (it\n"
            "runs to the end of SPEC and may contain ':'). delay and every come in either order,\n"
            "before retry-after. The counts are exact, so a run repeats the same pattern.\n"
            "Example: pgpace-receiver --rule /:500:every=4 --rule /:200:delay=3000:every=20\n"
            "  every 20th request answers after 3 s, a quarter of the rest fail.\n");
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

/* Cuts the next ':'-separated field off *p: *f, *n; false when none is left. A ':' at the very
 * end leaves an empty field, so that a trailing ':' is refused like any empty field. */
static bool next_field(const char **p, bool *more, const char **f, size_t *n)
{
    if (!*more)
        return false;
    const char *colon = strchr(*p, ':');
    *f = *p;
    *n = colon ? (size_t)(colon - *p) : strlen(*p);
    *more = colon != NULL;
    *p = colon ? colon + 1 : *p + *n;
    return true;
}

/* "LIMIT/MS[,LIMIT/MS...]" (at most RECV_SLIDING_MAX) into t's sliding windows. */
static int parse_sliding(const char *s, size_t len, receiver_throttle *t)
{
    int n = 0;
    const char *end = s + len;
    while (s < end) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *e = comma ? comma : end;
        const char *slash = memchr(s, '/', (size_t)(e - s));
        if (n == RECV_SLIDING_MAX || !slash ||
            parse_int(s, (size_t)(slash - s), 0, RECV_SLIDING_LIMIT_MAX, &t->sliding_limit[n]) !=
                0 ||
            parse_int(slash + 1, (size_t)(e - slash - 1), 1, 1000000000,
                      &t->sliding_window_ms[n]) != 0)
            return -1;
        n++;
        if (comma && comma + 1 == end)
            return -1;
        s = comma ? comma + 1 : end;
    }
    return n > 0 ? 0 : -1;
}

/* Parses --throttle's SPEC into *t (whose strings point into spec, or into prefix_buf). */
static int parse_throttle(const char *spec, receiver_throttle *t, char *prefix_buf, size_t cap)
{
    memset(t, 0, sizeof *t);
    const char *p = spec, *f[4];
    size_t flen[4];
    bool more = true;
    if (!next_field(&p, &more, &f[0], &flen[0]) || !more ||
        !next_field(&p, &more, &f[1], &flen[1]) || !more)
        return -1;
    if (flen[0] == 0 || f[0][0] != '/' || flen[0] >= cap)
        return -1;
    memcpy(prefix_buf, f[0], flen[0]);
    prefix_buf[flen[0]] = '\0';
    t->path_prefix = prefix_buf;
    if (flen[1] == 7 && memcmp(f[1], "sliding", 7) == 0) {
        t->kind = RECV_SLIDING_WINDOW;
        if (!next_field(&p, &more, &f[2], &flen[2]) || parse_sliding(f[2], flen[2], t) != 0)
            return -1;
    } else {
        if (!next_field(&p, &more, &f[2], &flen[2]) || !more ||
            !next_field(&p, &more, &f[3], &flen[3]))
            return -1;
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
    }
    if (more && !*p)
        return -1; /* a trailing ':' */
    /* p is at the options: [STATUS][:announce=FORM][:retry-after=MODE], the mode running to
     * the end. */
    if (*p && strncmp(p, "retry-after=", 12) != 0 && strncmp(p, "announce=", 9) != 0) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (parse_int(p, n, 400, 599, &t->status) != 0)
            return -1;
        p = colon ? colon + 1 : p + n;
        if (colon && !*p)
            return -1;
    }
    if (strncmp(p, "announce=", 9) == 0) {
        static const struct {
            const char *name;
            receiver_announce form;
        } forms[] = {{"ietf", RECV_ANNOUNCE_IETF},
                     {"ietf-early", RECV_ANNOUNCE_IETF_EARLY},
                     {"x", RECV_ANNOUNCE_X},
                     {"x-epoch", RECV_ANNOUNCE_X_EPOCH}};
        const char *v = p + 9, *colon = strchr(v, ':');
        size_t n = colon ? (size_t)(colon - v) : strlen(v);
        size_t i = 0;
        while (i < sizeof forms / sizeof forms[0] &&
               !(strlen(forms[i].name) == n && memcmp(forms[i].name, v, n) == 0))
            i++;
        if (i == sizeof forms / sizeof forms[0])
            return -1;
        t->announce = forms[i].form;
        p = colon ? colon + 1 : v + n;
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

/* Parses --rule's SPEC (PREFIX:STATUS[:delay=MS][:every=N][:retry-after=VALUE]) into *ru (its
 * prefix into prefix_buf, its Retry-After pointing into spec). Returns NULL, or why SPEC is bad,
 * naming the part (the text is in why_buf or static). */
static const char *parse_rule(const char *spec, receiver_rule *ru, char *prefix_buf, size_t cap,
                              char *why_buf, size_t why_cap)
{
    memset(ru, 0, sizeof *ru);
    ru->action = RECV_RESPOND;
    const char *colon = strchr(spec, ':');
    if (!colon)
        return "no STATUS (SPEC is PREFIX:STATUS[:delay=MS][:every=N][:retry-after=VALUE])";
    size_t plen = (size_t)(colon - spec);
    if (plen == 0 || spec[0] != '/') {
        snprintf(why_buf, why_cap, "PREFIX \"%.*s\" must start with '/'", (int)plen, spec);
        return why_buf;
    }
    if (plen >= cap) {
        snprintf(why_buf, why_cap, "PREFIX is longer than %zu bytes", cap - 1);
        return why_buf;
    }
    memcpy(prefix_buf, spec, plen);
    prefix_buf[plen] = '\0';
    ru->path_prefix = prefix_buf;

    const char *p = colon + 1;
    colon = strchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    /* 1xx are not final answers: a client would go on waiting for one. */
    if (parse_int(p, n, 200, 599, &ru->status) != 0) {
        snprintf(why_buf, why_cap, "STATUS \"%.*s\" must be a number in 200..599", (int)n, p);
        return why_buf;
    }
    bool have_delay = false, have_every = false;
    while (colon) {
        p = colon + 1;
        if (strncmp(p, "retry-after=", 12) == 0) {
            /* The value runs to the end: an HTTP date has ':' in it. */
            if (!p[12] || strpbrk(p + 12, "\r\n"))
                return "retry-after needs a value, on one line";
            ru->retry_after = p + 12;
            break;
        }
        colon = strchr(p, ':');
        n = colon ? (size_t)(colon - p) : strlen(p);
        const char *v = memchr(p, '=', n);
        size_t klen = v ? (size_t)(v - p) : n, vlen = v ? n - klen - 1 : 0;
        if (n == 0)
            return "empty option (a stray ':')";
        if (v && klen == 5 && memcmp(p, "delay", 5) == 0) {
            if (have_delay)
                return "delay given twice";
            have_delay = true;
            if (parse_int(v + 1, vlen, 0, 86400000, &ru->delay_ms) != 0) {
                snprintf(why_buf, why_cap,
                         "delay \"%.*s\" must be milliseconds in 0..86400000 (a day)", (int)vlen,
                         v + 1);
                return why_buf;
            }
        } else if (v && klen == 5 && memcmp(p, "every", 5) == 0) {
            if (have_every)
                return "every given twice";
            have_every = true;
            if (parse_int(v + 1, vlen, 1, 1000000000, &ru->every) != 0) {
                snprintf(why_buf, why_cap, "every \"%.*s\" must be a number in 1..1000000000",
                         (int)vlen, v + 1);
                return why_buf;
            }
        } else {
            snprintf(why_buf, why_cap,
                     "unknown option \"%.*s\" (expected delay=MS, every=N or retry-after=VALUE)",
                     (int)n, p);
            return why_buf;
        }
    }
    return NULL;
}

/* Milliseconds in the lines, or microseconds (--micros: a latency bench's resolution). */
static int64_t time_divisor = 1000;

/* Prints recorded request i: four fields, or five with the status when `with_status`. */
static void print_request(const receiver_request *rq, bool with_status)
{
    if (with_status)
        printf("%" PRId64 " %s %s %zu %d\n", rq->at_us / time_divisor, rq->path,
               rq->webhook_id[0] ? rq->webhook_id : "-", rq->body_len, rq->status);
    else
        printf("%" PRId64 " %s %s %zu\n", rq->at_us / time_divisor, rq->path,
               rq->webhook_id[0] ? rq->webhook_id : "-", rq->body_len);
}

enum { MAX_THROTTLES = 64, MAX_RULES = 64 };

int main(int argc, char **argv)
{
    int port = 0;
    static receiver_throttle throttles[MAX_THROTTLES];
    static char prefixes[MAX_THROTTLES][256];
    static receiver_rule rules[MAX_RULES];
    static char rule_prefixes[MAX_RULES][256];
    int nthrottles = 0, nrules = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage(stdout);
        if (strcmp(argv[i], "--micros") == 0) {
            time_divisor = 1;
            continue;
        }
        const char *spec = NULL;
        if (strcmp(argv[i], "--rule") == 0 && i + 1 < argc)
            spec = argv[++i];
        else if (strncmp(argv[i], "--rule=", 7) == 0)
            spec = argv[i] + 7;
        if (spec) {
            if (nrules == MAX_RULES) {
                fprintf(stderr, "pgpace-receiver: at most %d --rule\n", MAX_RULES);
                return 2;
            }
            char why[256];
            const char *bad = parse_rule(spec, &rules[nrules], rule_prefixes[nrules],
                                         sizeof rule_prefixes[nrules], why, sizeof why);
            if (bad) {
                fprintf(stderr, "pgpace-receiver: bad --rule \"%s\": %s (see --help)\n", spec, bad);
                return 2;
            }
            nrules++;
            continue;
        }
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
    for (int i = 0; i < nrules; i++)
        receiver_on(r, &rules[i]);
    char url[64];
    receiver_url(r, "/", url, sizeof url);
    fprintf(stderr, "pgpace-receiver: listening on %s\n", url);

    /* Requests [0, first) are printed; of [first, seen), those with printed[i - first] set. With
     * a status to print, a line waits for its answer (status 0 until then), which only a
     * delayed --rule answer makes wait, so the window stays small. */
    bool with_status = nthrottles > 0 || nrules > 0;
    size_t first = 0, seen = 0, cap = 0;
    bool *printed = NULL;
    for (bool last = false; !last;) {
        last = stop_requested != 0; /* one more pass after the signal prints what is left */
        /* Wakes on each new request; the timeout bounds how late a signal or a delayed answer
         * is noticed. */
        if (!last) {
            seen = receiver_wait(r, NULL, seen + 1, 100);
        } else {
            /* Requests the loop has read but not yet recorded (pipelined behind an answer the
             * client already has) are recorded once the loop has stopped. */
            receiver_halt(r);
            seen = receiver_count(r, NULL);
        }
        if (seen - first > cap) {
            size_t ncap = cap ? cap : 64;
            while (ncap < seen - first)
                ncap *= 2;
            bool *np = realloc(printed, ncap * sizeof *np);
            if (!np) {
                fprintf(stderr, "pgpace-receiver: out of memory\n");
                abort();
            }
            memset(np + cap, 0, (ncap - cap) * sizeof *np);
            printed = np;
            cap = ncap;
        }
        for (size_t i = first; i < seen; i++) {
            receiver_request rq;
            if (printed[i - first] || receiver_get(r, i, &rq) != 0)
                continue;
            if (!with_status || rq.status != 0 || last) {
                print_request(&rq, with_status);
                printed[i - first] = true;
            }
            free(rq.body);
        }
        size_t done = 0;
        while (first + done < seen && printed[done])
            done++;
        if (done > 0) {
            memmove(printed, printed + done, (cap - done) * sizeof *printed);
            memset(printed + cap - done, 0, done * sizeof *printed);
            first += done;
        }
        fflush(stdout);
    }
    free(printed);
    receiver_stop(r);
    fprintf(stderr, "pgpace-receiver: stopped by signal %d\n", (int)stop_requested);
    return 0;
}
