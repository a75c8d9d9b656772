/* test_failover.c - failover to a promoted standby, and what a new leader knows of the spacing.
 *
 * `replica` (its own clusters, runs alone): a primary and a streaming standby
 * (tests/tools/pgreplica.sh) on loopback ports, two `pgpace run` instances with the multi-host
 * conninfo `host=127.0.0.1,127.0.0.1 port=P1,P2 target_session_attrs=read-write`, spaced
 * customers (burst 1, and one with burst 3), a batch customer, and producers that enqueue all
 * the time and record every enqueue whose commit returned. Mid-run the standby is made to lag
 * (its walsender stopped for a second, as a slow network or standby would), then promoted, and the
 * old primary crashes (its walsender killed, then an immediate stop). Once with synchronous
 * replication, once with asynchronous. Asserted: the instances follow to the new primary and
 * deliver again within seconds (measured), exactly one session holds the leader lock there and
 * the instances never both lead, every acknowledged enqueue is delivered (synchronous; the
 * asynchronous run counts those lost, and must lose the lag's), no spaced customer's arrivals
 * break GCRA(T, burst) across the failover (synchronous; counted in the asynchronous run, whose
 * lost claims the new leader cannot know of) and no batch tick is sent twice.
 *
 * `takeover` (the shared cluster of tests/run): the problem the frontier floor fixes, on its
 * own: the leader sends, the UNLOGGED frontier is emptied (as on a promoted standby) and the
 * leader killed; the standby instance, which has no GCRA state of its own, takes over. Without
 * the floor it would send at once (a second burst); with it, the gaps stay at the period.
 * And a multi-host conninfo whose first host is dead (SYNs dropped) or hung (takes the
 * connection, never answers): the instance still reaches the second.
 *
 * Ports: PGPACE_FAILOVER_PORTS="P1,P2" for the replica pair, else two free ones. Waits are
 * conditions with deadlines; the only fixed wait is the standby's lag, which is the scenario.
 */
#include "twosvc.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The leader lock (src/db.h): pg_try_advisory_lock(DB_LOCK_CLASS = 0x70677061, DB_LOCK_LEADER
 * = 2), which pg_locks shows as classid 1885827169, objid 2. */
#define LEADER_LOCKS                                                                               \
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885827169 "          \
    "AND objid = 2 AND granted"
#define TICK_MS     2000
#define LAG_MS      1000
#define JITTER_US   50000 /* a send this much early still counts as conforming */
#define PRODUCERS   2
#define MAX_MARKERS 200000

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- spacing ------------------------------------------------------------------------------- */

typedef struct spacing {
    int violations;
    int64_t worst_early_us; /* how early the worst non-conforming arrival was */
    int64_t min_gap_us;     /* smallest gap between consecutive arrivals */
} spacing;

/* Checks arrival times (ascending) against GCRA(period, burst): an arrival conforms when
 * tat - tau <= at + jitter; tat = max(tat, at) + period. */
static spacing gcra_check(const int64_t *at, size_t n, int64_t period, int burst)
{
    spacing s = {0, 0, INT64_MAX};
    int64_t tau = (int64_t)(burst - 1) * period, tat = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && at[i] - at[i - 1] < s.min_gap_us)
            s.min_gap_us = at[i] - at[i - 1];
        if (tat != INT64_MIN && tat - tau > at[i] + JITTER_US) {
            s.violations++;
            if (tat - tau - at[i] > s.worst_early_us)
                s.worst_early_us = tat - tau - at[i];
        }
        tat = (tat == INT64_MIN || at[i] > tat ? at[i] : tat) + period;
    }
    return s;
}

/* Arrival times of a customer's requests (ascending: the receiver records in arrival order). */
static size_t arrivals(receiver *rx, const char *customer, int64_t *out, size_t cap)
{
    char path[160];
    snprintf(path, sizeof path, "/c/%s", customer);
    size_t total = receiver_count(rx, NULL), n = 0;
    for (size_t i = 0; i < total && n < cap; i++) {
        receiver_request rq;
        if (receiver_get(rx, i, &rq) != 0)
            break;
        free(rq.body);
        if (strncmp(rq.path, path, strlen(path)) == 0)
            out[n++] = rq.at_us;
    }
    return n;
}

static size_t count_after(receiver *rx, const char *customer, int64_t after_us)
{
    int64_t at[4096];
    size_t n = arrivals(rx, customer, at, 4096), k = 0;
    for (size_t i = 0; i < n; i++)
        k += at[i] > after_us;
    return k;
}

/* ---- GET /readyz ---------------------------------------------------------------------------- */

static size_t curl_sink(char *p, size_t size, size_t n, void *arg)
{
    char *buf = arg;
    size_t len = strlen(buf), add = size * n;
    if (len + add >= 256)
        add = 255 - len;
    memcpy(buf + len, p, add);
    buf[len + add] = '\0';
    return size * n;
}

/* Whether the instance on admin port `port` says it leads (an unanswered request: no). */
static bool says_leader(int port)
{
    char url[64], body[256] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/readyz", port);
    CURL *h = curl_easy_init();
    if (!h)
        return false;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 500L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, curl_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    return rc == CURLE_OK && strstr(body, "\"role\":\"leader\"") != NULL;
}

/* The admin port an instance logged ("event=http_listening ... port=N"), 0 until it did. */
static int admin_port_of(const tl_service *s)
{
    char *log = tl_service_log(s);
    const char *e = strstr(log, "event=http_listening");
    const char *p = e ? strstr(e, "port=") : NULL;
    int port = p ? atoi(p + 5) : 0;
    free(log);
    return port;
}

typedef struct log_wait {
    const tl_service *s;
    const char *needle;
} log_wait;

static int log_has(void *arg)
{
    log_wait *w = arg;
    char *log = tl_service_log(w->s);
    int found = strstr(log, w->needle) != NULL;
    free(log);
    return found;
}

static bool wait_log(const tl_service *s, const char *needle, int timeout_ms)
{
    log_wait w = {s, needle};
    return tl_wait_until(log_has, &w, timeout_ms) != 0;
}

/* The last line of the log that contains `needle`, as a TAP comment. */
static void print_log_line(const tl_service *s, const char *label, const char *needle)
{
    char *log = tl_service_log(s);
    const char *p = NULL;
    for (const char *q = strstr(log, needle); q; q = strstr(q + 1, needle))
        p = q;
    if (p) {
        while (p > log && p[-1] != '\n')
            p--;
        const char *end = strchr(p, '\n');
        printf("# %s: %.*s\n", label, end ? (int)(end - p) : (int)strlen(p), p);
    }
    free(log);
}

/* ==== replica: a primary, a streaming standby, promotion ===================================== */

typedef struct marker_log {
    int seq[MAX_MARKERS]; /* acknowledged enqueues, in order */
    int64_t acked_us[MAX_MARKERS];
    atomic_size_t n; /* written by its producer only, read by the test thread */
} marker_log;

typedef struct pair_fx {
    char dir[64];
    int port[2];
    bool sync;
    char multi[320];   /* the multi-host conninfo the instances and producers use */
    char node[2][160]; /* one node each */
    receiver *rx;
    tl_service svc[2];
    char *cfg[2];
    int admin[2];
    /* producers */
    pthread_t producer[PRODUCERS];
    atomic_bool stop;
    marker_log acked[PRODUCERS + 1]; /* the last one: the test's own backlog enqueues */
    /* leader sampler */
    pthread_t sampler;
    atomic_bool sampler_stop;
    atomic_int max_leaders_after_crash;
    atomic_llong crash_us;
    atomic_int samples;
} pair_fx;

static pair_fx *cur_pair; /* for dumping logs when a check fails */

static void pair_dump_logs(void)
{
    if (!cur_pair)
        return;
    for (int i = 0; i < 2; i++) {
        if (!cur_pair->svc[i].log_path[0])
            continue;
        char *log = tl_service_log(&cur_pair->svc[i]);
        size_t len = strlen(log);
        const char *from = len > 8000 ? log + len - 8000 : log;
        fprintf(stderr, "---- log of instance %c, last %zu bytes ----\n%s\n", 'a' + i, strlen(from),
                from);
        free(log);
    }
}

#define PCHECK(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            pair_dump_logs();                                                                      \
            fail_msg(__VA_ARGS__);                                                                 \
        }                                                                                          \
    } while (0)

/* A port of 127.0.0.1 free now, below the kernel's ephemeral range (32768+, where an outgoing
 * connection may take it before the cluster binds it), not `avoid` nor the shared cluster's. */
static int free_port(int avoid)
{
    const char *pgport = getenv("PGPORT");
    srand((unsigned)getpid() ^ (unsigned)now_us());
    for (int tries = 0; tries < 200; tries++) {
        int port = 20000 + rand() % 12000;
        if (port == avoid || (pgport && port == atoi(pgport)))
            continue;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        close(fd);
        if (rc == 0)
            return port;
    }
    fail_msg("no free port");
    return 0;
}

/* tests/tools/pgreplica.sh CMD DIR EXTRA (the clusters without fsync, as the suite's). */
static void replica_script(pair_fx *f, const char *cmd_name, const char *extra)
{
    const char *root = getenv("PGPACE_SOURCE_ROOT");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "PGCLUSTER_FSYNC=off bash '%s/tests/tools/pgreplica.sh' %s '%s' %s",
             root ? root : ".", cmd_name, f->dir, extra);
    int rc = system(cmd);
    PCHECK(rc == 0, "pgreplica.sh failed (status %d): %s", rc, cmd);
}

static PGconn *node_conn(pair_fx *f, int i)
{
    PGconn *c = PQconnectdb(f->node[i]);
    PCHECK(PQstatus(c) == CONNECTION_OK, "cannot reach node %d: %s", i, PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

static void pgpace_ok(const char *const *argv)
{
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    PCHECK(p.status == 0, "pgpace %s %s failed (%d): %s", argv[2], argv[3] ? argv[3] : "", p.status,
           p.err);
    tl_proc_free(&p);
}

static void pair_customer(pair_fx *f, const char *name, const char *mode, const char *rate,
                          const char *burst)
{
    char path[64], url[160];
    snprintf(path, sizeof path, "/c/%s", name);
    receiver_url(f->rx, path, url, sizeof url);
    pgpace_ok(TL_ARGV("--db", f->multi, "customer", "set", name, "--mode", mode, "--rate", rate,
                      "--burst", burst, "--url", url));
}

static void start_instance(pair_fx *f, int i)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "[database]\nconninfo = %s\n"
             "[dispatcher]\ninstance_name = %c\nlease_seconds = 10\nstandby_retry_ms = 200\n"
             "batch_tick_ms = %d\nbackstop_scan_ms = 1000\nreconnect_max_ms = 500\n"
             "keepalive_idle_s = 2\n"
             "[delivery]\nallow_cidrs = 127.0.0.0/8\nrequest_timeout_ms = 2000\n"
             "[http]\nlisten = 127.0.0.1:0\n[log]\nlevel = info\n",
             f->multi, 'a' + i, TICK_MS);
    f->cfg[i] = tl_temp_file(cfg);
    f->svc[i] = tl_service_start(TL_ARGV("--config", f->cfg[i], "run"), NULL);
    assert_true(f->svc[i].pid > 0);
    PCHECK(wait_log(&f->svc[i], "event=http_listening", 10000), "instance %c did not listen",
           'a' + i);
    f->admin[i] = admin_port_of(&f->svc[i]);
    assert_true(f->admin[i] > 0);
}

/* ---- producers: enqueue all the time, record what was acknowledged ------------------------- */

typedef struct producer_arg {
    pair_fx *f;
    int id;
} producer_arg;

static void *producer_main(void *arg)
{
    producer_arg *pa = arg;
    pair_fx *f = pa->f;
    marker_log *log = &f->acked[pa->id];
    char conninfo[400];
    snprintf(conninfo, sizeof conninfo, "%s connect_timeout=2", f->multi);
    PGconn *c = NULL;
    int seq = 0;
    while (!atomic_load(&f->stop) && seq < MAX_MARKERS) {
        if (!c || PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            c = PQconnectdb(conninfo);
            if (PQstatus(c) != CONNECTION_OK) {
                /* The old primary is gone and the standby not promoted yet: try again soon. */
                struct timespec pause = {0, 100 * 1000000};
                nanosleep(&pause, NULL);
                continue;
            }
        }
        char payload[64], id[16];
        snprintf(id, sizeof id, "%d", seq);
        snprintf(payload, sizeof payload, "{\"m\": \"p%d-%d\"}", pa->id, seq);
        /* Every other item is due 3 s later: what the standby did not receive of those is
         * lost undelivered (the others are delivered within milliseconds, even by a leader
         * whose primary is about to vanish). */
        const char *params[] = {"flow", payload, seq % 2 ? "3 seconds" : "0"};
        PGresult *r = PQexecParams(c,
                                   "SELECT pgpace.enqueue($1, $2::jsonb, "
                                   "run_at => now() + $3::interval)",
                                   3, NULL, params, NULL, NULL, 0);
        /* The commit returned: acknowledged, so it must be delivered. */
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
            size_t k = atomic_load(&log->n);
            log->acked_us[k] = now_us();
            log->seq[k] = seq;
            atomic_store(&log->n, k + 1);
        }
        PQclear(r);
        seq++;
        /* About 90 enqueues a second per producer: a steady stream, not a flood. */
        struct timespec pace = {0, 10 * 1000000};
        nanosleep(&pace, NULL);
    }
    PQfinish(c);
    return NULL;
}

/* ---- the leader sampler: never two instances leading at once after the crash --------------- */

static void *sampler_main(void *arg)
{
    pair_fx *f = arg;
    while (!atomic_load(&f->sampler_stop)) {
        int leaders = says_leader(f->admin[0]) + says_leader(f->admin[1]);
        long long crash = atomic_load(&f->crash_us);
        if (crash > 0 && now_us() > crash && leaders > atomic_load(&f->max_leaders_after_crash))
            atomic_store(&f->max_leaders_after_crash, leaders);
        atomic_fetch_add(&f->samples, 1);
        struct timespec pause = {0, 50 * 1000000};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* ---- waits ---------------------------------------------------------------------------------- */

typedef struct count_wait {
    receiver *rx;
    const char *customer;
    int64_t after_us;
    size_t want;
} count_wait;

static int count_cond(void *arg)
{
    count_wait *w = arg;
    return count_after(w->rx, w->customer, w->after_us) >= w->want;
}

static bool wait_arrivals(pair_fx *f, const char *customer, int64_t after_us, size_t want,
                          int timeout_ms)
{
    count_wait w = {f->rx, customer, after_us, want};
    return tl_wait_until(count_cond, &w, timeout_ms) != 0;
}

typedef struct sql_wait {
    const char *conninfo;
    const char *sql;
    const char *want;
} sql_wait;

/* One value from a fresh connection (the node may be down or restarting): "" on any failure. */
static int sql_cond(void *arg)
{
    sql_wait *w = arg;
    PGconn *c = PQconnectdb(w->conninfo);
    int ok = 0;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, w->sql);
        ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
             strcmp(PQgetvalue(r, 0, 0), w->want) == 0;
        PQclear(r);
    }
    PQfinish(c);
    return ok;
}

static bool wait_sql(const char *conninfo, const char *sql, const char *want, int timeout_ms)
{
    sql_wait w = {conninfo, sql, want};
    return tl_wait_until(sql_cond, &w, timeout_ms) != 0;
}

/* ---- markers delivered, present, lost ----------------------------------------------------- */

/* Marker "p<prod>-<seq>" of a body, or false. */
static bool parse_marker(const char *body, int *prod, int *seq)
{
    const char *m = body ? strstr(body, "\"m\": \"p") : NULL;
    return m && sscanf(m + 7, "%d-%d", prod, seq) == 2 && *prod >= 0 && *prod <= PRODUCERS &&
           *seq >= 0 && *seq < MAX_MARKERS;
}

typedef struct tally {
    size_t acked, delivered, present_only, lost, duplicates;
    size_t rows_lost; /* not in the new primary's pgpace.item (delivered before the crash or not) */
} tally;

/* The first arrival of a producer's item acknowledged after `after_us`. */
typedef struct first_wait {
    pair_fx *f;
    int64_t after_us;
    int64_t first_us;
} first_wait;

static int first_after_cond(void *arg)
{
    first_wait *w = arg;
    /* Newest first, down to the arrivals before the crash (none of those can qualify). */
    for (size_t i = receiver_count(w->f->rx, NULL); i-- > 0;) {
        receiver_request rq;
        if (receiver_get(w->f->rx, i, &rq) != 0)
            continue;
        int prod, seq;
        bool mine = strncmp(rq.path, "/c/flow", 7) == 0 && parse_marker(rq.body, &prod, &seq) &&
                    prod < PRODUCERS;
        free(rq.body);
        if (rq.at_us <= w->after_us)
            break;
        if (!mine)
            continue;
        marker_log *log = &w->f->acked[prod];
        for (size_t k = atomic_load(&log->n); k-- > 0;) {
            if (log->seq[k] != seq)
                continue;
            if (log->acked_us[k] > w->after_us && rq.at_us < w->first_us)
                w->first_us = rq.at_us;
            break;
        }
    }
    return w->first_us != INT64_MAX;
}

static tally count_markers(pair_fx *f, PGconn *newp)
{
    tally t = {0};
    size_t span = MAX_MARKERS;
    unsigned char *seen = calloc((PRODUCERS + 1) * span, 1); /* deliveries per marker */
    unsigned char *present = calloc((PRODUCERS + 1) * span, 1);
    assert_non_null(seen);
    assert_non_null(present);
    size_t total = receiver_count(f->rx, NULL);
    for (size_t i = 0; i < total; i++) {
        receiver_request rq;
        if (receiver_get(f->rx, i, &rq) != 0)
            break;
        int prod, seq;
        if (parse_marker(rq.body, &prod, &seq)) {
            size_t k = (size_t)prod * span + (size_t)seq;
            if (seen[k] < 255)
                seen[k]++;
        }
        free(rq.body);
    }
    PGresult *r = PQexec(newp, "SELECT payload::text FROM pgpace.item");
    PCHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "items: %s", PQerrorMessage(newp));
    for (int i = 0; i < PQntuples(r); i++) {
        int prod, seq;
        if (parse_marker(PQgetvalue(r, i, 0), &prod, &seq))
            present[(size_t)prod * span + (size_t)seq] = 1;
    }
    PQclear(r);
    for (int p = 0; p <= PRODUCERS; p++) {
        for (size_t i = 0; i < f->acked[p].n; i++) {
            size_t k = (size_t)p * span + (size_t)f->acked[p].seq[i];
            t.acked++;
            t.rows_lost += !present[k];
            if (seen[k]) {
                t.delivered++;
                t.duplicates += seen[k] - 1u;
            } else if (present[k]) {
                t.present_only++;
            } else {
                t.lost++;
            }
        }
    }
    free(seen);
    free(present);
    return t;
}

/* ---- the run ------------------------------------------------------------------------------ */

typedef struct spaced_customer {
    const char *name;
    const char *rate;
    int burst;
    int64_t period_us;
    int backlog;
} spaced_customer;

static const spaced_customer SPACED[] = {
    {"s3", "20", 1, 3000000, 30}, /* one every 3 s */
    {"s5", "12", 1, 5000000, 20}, /* one every 5 s */
    {"b3", "12", 3, 5000000, 20}, /* one every 5 s, bursts of 3 */
};
#define N_SPACED       (sizeof SPACED / sizeof SPACED[0])
#define TICK_ALLOWANCE 3

static void enqueue_backlog(pair_fx *f, PGconn *c, const char *customer, int n)
{
    marker_log *log = &f->acked[PRODUCERS];
    for (int i = 0; i < n; i++) {
        int seq = (int)log->n;
        char payload[64];
        snprintf(payload, sizeof payload, "{\"m\": \"p%d-%d\"}", PRODUCERS, seq);
        const char *params[] = {customer, payload};
        PGresult *r =
            PQexecParams(c, "SELECT pgpace.enqueue($1, $2::jsonb)", 2, NULL, params, NULL, NULL, 0);
        PCHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "enqueue: %s", PQerrorMessage(c));
        PQclear(r);
        log->seq[seq] = seq;
        log->acked_us[seq] = now_us();
        atomic_store(&log->n, (size_t)seq + 1);
    }
}

static void walsender_signal(pair_fx *f, PGconn *primary, int sig)
{
    char *pid = tl_query_str(primary, "SELECT pid FROM pg_stat_replication "
                                      "WHERE application_name = 'standby'");
    PCHECK(atoi(pid) > 0, "no walsender for the standby");
    PCHECK(kill(atoi(pid), sig) == 0, "kill(%s, %d): %s", pid, sig, strerror(errno));
    free(pid);
}

static void run_failover(pair_fx *f)
{
    const char *mode = f->sync ? "sync" : "async";
    /* The pair, its schema, customers and backlogs. */
    char args[64];
    snprintf(args, sizeof args, "%d %d %s", f->port[0], f->port[1], mode);
    replica_script(f, "start", args);
    pgpace_ok(TL_ARGV("--db", f->multi, "migrate"));
    for (size_t i = 0; i < N_SPACED; i++) {
        char burst[8];
        snprintf(burst, sizeof burst, "%d", SPACED[i].burst);
        pair_customer(f, SPACED[i].name, "spaced", SPACED[i].rate, burst);
    }
    pair_customer(f, "tick", "batch", "3", "1");
    pair_customer(f, "flow", "unlimited", "60", "1");
    PGconn *primary = node_conn(f, 0);
    for (size_t i = 0; i < N_SPACED; i++)
        enqueue_backlog(f, primary, SPACED[i].name, SPACED[i].backlog);
    enqueue_backlog(f, primary, "tick", 60);

    /* Instance a leads, b stands by; producers and the sampler run. */
    start_instance(f, 0);
    PCHECK(wait_log(&f->svc[0], "event=leader_elected", 15000), "a did not lead");
    start_instance(f, 1);
    PCHECK(wait_log(&f->svc[1], "event=standby", 15000), "b did not stand by");
    producer_arg pa[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        pa[i] = (producer_arg){f, i};
        assert_int_equal(pthread_create(&f->producer[i], NULL, producer_main, &pa[i]), 0);
    }
    assert_int_equal(pthread_create(&f->sampler, NULL, sampler_main, f), 0);

    /* Running: bursts spent and paced sends under way, two ticks, a stream of enqueues. */
    PCHECK(wait_arrivals(f, "b3", 0, 4, 20000), "b3: fewer than 4 deliveries before the failover");
    PCHECK(wait_arrivals(f, "s5", 0, 2, 20000), "s5: fewer than 2 deliveries");
    PCHECK(wait_arrivals(f, "s3", 0, 2, 20000), "s3: fewer than 2 deliveries");
    PCHECK(wait_arrivals(f, "tick", 0, 2 * TICK_ALLOWANCE, 20000), "tick: fewer than 2 ticks");
    PCHECK(wait_arrivals(f, "flow", 0, 200, 20000), "flow: fewer than 200 deliveries");

    /* The standby lags: its walsender stops for LAG_MS. Synchronous commits wait meanwhile;
     * asynchronous ones return, and what they wrote never reaches the standby. */
    walsender_signal(f, primary, SIGSTOP);
    int64_t lag_us = now_us();
    while (now_us() - lag_us < (int64_t)LAG_MS * 1000) {
        struct timespec pause = {0, 20 * 1000000};
        nanosleep(&pause, NULL); /* the lag's length is the scenario, not a wait for a state */
    }
    /* Promote the standby, then crash the old primary (its stopped walsender first: an
     * immediate stop would wait for it). */
    int64_t fail_us = now_us();
    replica_script(f, "promote", "");
    /* Both ends of the crash are kept: `pg_ctl stop -m immediate` takes a good part of the
     * time to the new leader, so a figure "after the crash" must say which end it counts from. */
    int64_t stop_us = now_us();
    walsender_signal(f, primary, SIGKILL);
    PQfinish(primary);
    replica_script(f, "crash", "");
    int64_t crash_us = now_us();
    atomic_store(&f->crash_us, crash_us);
    PCHECK(wait_sql(f->node[1], "SELECT pg_is_in_recovery()::text", "false", 30000),
           "the standby was not promoted");
    int64_t promoted_us = now_us();
    PCHECK(wait_sql(f->node[1], LEADER_LOCKS, "1", 30000),
           "no instance took the leader lock on the new primary");
    int64_t leader_us = now_us();

    /* Delivering again: an item acknowledged after the crash (so by the new primary) arrives. */
    PGconn *newp = node_conn(f, 1);
    first_wait fw = {f, crash_us, INT64_MAX};
    PCHECK(tl_wait_until(first_after_cond, &fw, 30000),
           "nothing enqueued after the failover was delivered");
    int64_t resume_us = fw.first_us;

    /* Pacing goes on: two more sends of each spaced customer, two more ticks. */
    for (size_t i = 0; i < N_SPACED; i++)
        PCHECK(wait_arrivals(f, SPACED[i].name, crash_us, 2, 40000),
               "%s: fewer than 2 deliveries after the failover", SPACED[i].name);
    PCHECK(wait_arrivals(f, "tick", crash_us, 2 * TICK_ALLOWANCE, 20000),
           "tick: fewer than 2 ticks after the failover");

    /* Producers stop; the stream drains (items in flight at the crash come back after their
     * 10 s lease). */
    atomic_store(&f->stop, true);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(f->producer[i], NULL);
    PCHECK(wait_sql(f->node[1],
                    "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer c "
                    "ON c.id = q.customer_id WHERE c.name = 'flow'",
                    "0", 40000),
           "the stream did not drain on the new primary");
    atomic_store(&f->sampler_stop, true);
    pthread_join(f->sampler, NULL);

    /* One leader: one lock holder on the new primary, never two instances leading at once. */
    assert_int_equal(tl_query_int(newp, LEADER_LOCKS), 1);
    char *holder = tl_query_str(newp, "SELECT a.application_name FROM pg_locks l "
                                      "JOIN pg_stat_activity a ON a.pid = l.pid "
                                      "WHERE l.locktype = 'advisory' AND l.classid = 1885827169 "
                                      "AND l.objid = 2 AND l.granted");
    int max_leaders = atomic_load(&f->max_leaders_after_crash);
    printf("# %s: leader lock on the new primary held by \"%s\"; at most %d instance(s) said "
           "they led at once after the crash (%d samples of both /readyz)\n",
           mode, holder, max_leaders, atomic_load(&f->samples));
    free(holder);
    PCHECK(max_leaders <= 1, "two instances led at once after the failover");

    /* What the new leader knew of the spacing. */
    for (int i = 0; i < 2; i++)
        print_log_line(&f->svc[i], i == 0 ? "a" : "b", "event=frontier_reconstructed");

    /* Timings (printed, not asserted), from the start of the crash (the walsender's SIGKILL,
     * then the immediate stop) and from when `pg_ctl stop` returned. Promotion and the leader
     * lock are seen by polls 20 ms apart; a delivery is the receiver's own timestamp. */
    printf("# %s: pg_ctl promote returned after %.0f ms, the crash took %.0f ms; from the start of "
           "the crash / from when the stop returned: promoted %+.0f / %+.0f ms, leader lock taken "
           "%+.0f / %+.0f ms, first delivery of an item enqueued after the stop returned %+.0f / "
           "%+.0f ms\n",
           mode, (stop_us - fail_us) / 1000.0, (crash_us - stop_us) / 1000.0,
           (promoted_us - stop_us) / 1000.0, (promoted_us - crash_us) / 1000.0,
           (leader_us - stop_us) / 1000.0, (leader_us - crash_us) / 1000.0,
           (resume_us - stop_us) / 1000.0, (resume_us - crash_us) / 1000.0);
    PCHECK(resume_us - crash_us < 20000000, "delivering again took %.1f s after the crash",
           (resume_us - crash_us) / 1e6);

    /* Acknowledged enqueues: delivered, or at least still queued, or lost. */
    tally t = count_markers(f, newp);
    printf("# %s: %zu enqueues acknowledged: %zu delivered (%zu more than once), %zu still queued, "
           "%zu LOST (never delivered, not in the new primary); rows missing from the new "
           "primary: %zu\n",
           mode, t.acked, t.delivered, t.duplicates, t.present_only, t.lost, t.rows_lost);
    if (f->sync) {
        PCHECK(t.lost == 0, "synchronous replication lost %zu acknowledged enqueues", t.lost);
        PCHECK(t.rows_lost == 0, "synchronous replication lost %zu acknowledged rows", t.rows_lost);
    } else {
        PCHECK(t.rows_lost > 0,
               "asynchronous replication lost no row although the standby lagged %d ms: the "
               "scenario did not happen",
               LAG_MS);
    }

    /* Spacing across the failover. */
    int bad = 0;
    for (size_t i = 0; i < N_SPACED; i++) {
        int64_t at[1024];
        size_t n = arrivals(f->rx, SPACED[i].name, at, 1024);
        spacing s = gcra_check(at, n, SPACED[i].period_us, SPACED[i].burst);
        int64_t before = INT64_MIN, after = INT64_MAX;
        for (size_t k = 0; k < n; k++) {
            if (at[k] <= fail_us)
                before = at[k];
            else if (at[k] < after)
                after = at[k];
        }
        printf("# %s: %s (period %.0f s, burst %d): %zu arrivals, gap across the failover "
               "%.3f s, smallest gap %.3f s, %d not conforming to GCRA (worst %.3f s early)\n",
               mode, SPACED[i].name, SPACED[i].period_us / 1e6, SPACED[i].burst, n,
               (after - before) / 1e6, s.min_gap_us / 1e6, s.violations, s.worst_early_us / 1e6);
        bad += s.violations;
    }
    if (f->sync)
        PCHECK(bad == 0, "%d arrivals broke GCRA across the failover", bad);
    else
        printf("# async: %d arrivals broke GCRA (the lag's claims and attempts were lost with "
               "the old primary, so the new leader could not know of those sends)\n",
               bad);

    /* Batch: never more than one allowance per tick (a tick sent twice would show as more). */
    int64_t at[1024];
    size_t n = arrivals(f->rx, "tick", at, 1024);
    int worst = 0, ticks = 0;
    for (size_t k = 0; k < n;) {
        int64_t tick = at[k] / 1000 / TICK_MS;
        int in = 0;
        for (; k < n && at[k] / 1000 / TICK_MS == tick; k++)
            in++;
        ticks++;
        if (in > worst)
            worst = in;
    }
    printf("# %s: tick: %zu arrivals in %d ticks, at most %d in one (allowance %d)\n", mode, n,
           ticks, worst, TICK_ALLOWANCE);
    PCHECK(worst <= TICK_ALLOWANCE, "a batch tick delivered %d items (allowance %d)", worst,
           TICK_ALLOWANCE);
    PQfinish(newp);

    for (int i = 0; i < 2; i++)
        PCHECK(tl_service_signal(&f->svc[i], SIGTERM, 1, 15000) == 0,
               "instance %c did not stop cleanly", 'a' + i);
}

static int pair_setup(void **state)
{
    pair_fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    const char *ports = getenv("PGPACE_FAILOVER_PORTS");
    if (!ports || sscanf(ports, "%d,%d", &f->port[0], &f->port[1]) != 2) {
        f->port[0] = free_port(0);
        f->port[1] = free_port(f->port[0]);
    }
    snprintf(f->dir, sizeof f->dir, "/tmp/pgpace-failover-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->multi, sizeof f->multi,
             "host=127.0.0.1,127.0.0.1 port=%d,%d dbname=pgpace user=postgres "
             "target_session_attrs=read-write",
             f->port[0], f->port[1]);
    for (int i = 0; i < 2; i++)
        snprintf(f->node[i], sizeof f->node[i],
                 "host=127.0.0.1 port=%d dbname=pgpace user=postgres connect_timeout=2",
                 f->port[i]);
    f->rx = receiver_start();
    assert_non_null(f->rx);
    cur_pair = f;
    *state = f;
    return 0;
}

static int pair_teardown(void **state)
{
    pair_fx *f = *state;
    atomic_store(&f->stop, true);
    atomic_store(&f->sampler_stop, true);
    for (int i = 0; i < 2; i++) {
        tl_service_stop(&f->svc[i]);
        if (f->cfg[i]) {
            unlink(f->cfg[i]);
            free(f->cfg[i]);
        }
    }
    receiver_stop(f->rx);
    const char *root = getenv("PGPACE_SOURCE_ROOT");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/tools/pgreplica.sh' stop '%s' >/dev/null 2>&1",
             root ? root : ".", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "pgreplica.sh stop %s failed\n", f->dir);
    free(f);
    cur_pair = NULL;
    return 0;
}

static void failover_synchronous(void **state)
{
    pair_fx *f = *state;
    f->sync = true;
    run_failover(f);
}

static void failover_asynchronous(void **state)
{
    pair_fx *f = *state;
    f->sync = false;
    run_failover(f);
}

/* ==== takeover: the frontier lost under a standby instance ================================== */

static void start_takeover_instance(fx *f, int slot, const char *instance)
{
    run_opts o = {.instance = instance,
                  .lease_seconds = 30, /* nothing A had claimed comes back during the test */
                  .drain_timeout_ms = 2000,
                  .request_timeout_ms = 2000};
    start_service(f, slot, &o);
}

/* The leader sends; the frontier is emptied, as on a promoted standby or after a crash; the
 * leader dies; the standby instance takes over with no GCRA state of its own. Without the floor
 * (frontier_floor.h) it would send both customers' next items at once: `slow` 5 s early, `burst`
 * a second burst of 3. */
static void standby_instance_takes_over_an_empty_frontier(void **state)
{
    fx *f = *state;
    customer_set(f, "slow", "12", TL_ARGV("--burst", "1"));  /* one every 5 s */
    customer_set(f, "burst", "12", TL_ARGV("--burst", "3")); /* one every 5 s, bursts of 3 */
    start_takeover_instance(f, 0, "a");
    CHECK(wait_log(&f->svc[0], "event=leader_elected", 15000), "a did not lead");
    start_takeover_instance(f, 1, "b");
    CHECK(wait_log(&f->svc[1], "event=standby", 15000), "b did not stand by");
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('slow', jsonb_build_object('n', g)), "
                         "pgpace.enqueue('burst', jsonb_build_object('n', g)) "
                         "FROM generate_series(1, 8) g");
    CHECK(rx_wait(f, "burst", 3, 15000) >= 3, "burst: its first burst did not arrive");
    CHECK(rx_wait(f, "slow", 1, 15000) >= 1, "slow: its first item did not arrive");
    /* Emptied while a is between slots (the next ones are 5 s away), then a dies at once. */
    tl_exec(f->db->conn, "TRUNCATE pgpace.frontier");
    int64_t kill_us = now_us();
    assert_int_equal(tl_service_signal(&f->svc[0], SIGKILL, 1, 5000), 128 + SIGKILL);
    CHECK(wait_log(&f->svc[1], "event=leader_elected", 10000), "b did not take over");
    CHECK(rx_wait(f, "slow", 3, 20000) >= 3, "slow: fewer than 3 deliveries");
    CHECK(rx_wait(f, "burst", 5, 20000) >= 5, "burst: fewer than 5 deliveries");

    static const struct {
        const char *name;
        int burst;
    } cs[] = {{"slow", 1}, {"burst", 3}};
    int bad = 0;
    for (size_t i = 0; i < 2; i++) {
        int64_t at[64];
        size_t n = arrivals(f->rx, cs[i].name, at, 64);
        spacing s = gcra_check(at, n, 5000000, cs[i].burst);
        int64_t before = INT64_MIN, after = INT64_MAX;
        for (size_t k = 0; k < n; k++) {
            if (at[k] <= kill_us)
                before = at[k];
            else if (at[k] < after)
                after = at[k];
        }
        printf("# %s (period 5 s, burst %d): %zu arrivals, first after the takeover %.3f s after "
               "the last before it, %d not conforming to GCRA (worst %.3f s early)\n",
               cs[i].name, cs[i].burst, n, (after - before) / 1e6, s.violations,
               s.worst_early_us / 1e6);
        bad += s.violations;
    }
    CHECK(bad == 0,
          "%d arrivals after the takeover broke GCRA: the new leader did not know "
          "the customers had just sent",
          bad);
    CHECK(wait_log(&f->svc[1], "event=frontier_reconstructed", 10000),
          "b did not rebuild the frontier");
    print_log_line(&f->svc[1], "b", "event=frontier_reconstructed");
    assert_int_equal(tl_service_signal(&f->svc[1], SIGTERM, 1, 10000), 0);
}

/* A customer's limit shared by its endpoints (migration 0018) across a takeover: the leader
 * sends, the stored cell of that limit (pgpace.tenant_frontier) and the frontier are emptied, the
 * leader dies, the standby takes over. It must find the customer's latest send in the attempt
 * log and the leased claims: no two of the customer's webhooks, to either endpoint, closer than
 * its period, although each endpoint alone could send 50 times as often. */
static void standby_instance_keeps_a_customers_shared_limit(void **state)
{
    fx *f = *state;
    char url[256];
    receiver_url(f->rx, "/c/shared/e", url, sizeof url);
    tl_exec(f->db->conn, "SELECT pgpace.customer_set('shared', rate_per_minute => 12)");
    tl_exec(f->db->conn, "SELECT pgpace.endpoint_add('shared', 'e1', '%s1', 600)", url);
    tl_exec(f->db->conn, "SELECT pgpace.endpoint_add('shared', 'e2', '%s2', 600)", url);
    start_takeover_instance(f, 0, "a");
    CHECK(wait_log(&f->svc[0], "event=leader_elected", 15000), "a did not lead");
    start_takeover_instance(f, 1, "b");
    CHECK(wait_log(&f->svc[1], "event=standby", 15000), "b did not stand by");
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('shared', jsonb_build_object('n', g)) "
                         "FROM generate_series(1, 8) g");
    CHECK(rx_wait(f, "shared/", 2, 20000) >= 2, "shared: its first two webhooks did not arrive");
    tl_exec(f->db->conn, "TRUNCATE pgpace.tenant_frontier, pgpace.frontier");
    int64_t kill_us = now_us();
    assert_int_equal(tl_service_signal(&f->svc[0], SIGKILL, 1, 5000), 128 + SIGKILL);
    CHECK(wait_log(&f->svc[1], "event=leader_elected", 10000), "b did not take over");
    CHECK(rx_wait(f, "shared/", 4, 30000) >= 4, "shared: fewer than 4 webhooks");
    int64_t at[64];
    size_t n = arrivals(f->rx, "shared/", at, 64);
    spacing sp = gcra_check(at, n, 5000000, 1);
    int64_t before = INT64_MIN, after = INT64_MAX;
    for (size_t k = 0; k < n; k++) {
        if (at[k] <= kill_us)
            before = at[k];
        else if (at[k] < after)
            after = at[k];
    }
    printf("# shared (12/min over two endpoints of 600/min): %zu arrivals, first after the "
           "takeover %.3f s after the last before it, shortest gap %.3f s, %d not conforming\n",
           n, (after - before) / 1e6, sp.min_gap_us / 1e6, sp.violations);
    CHECK(sp.violations == 0,
          "%d webhooks after the takeover broke the customer's limit (worst %.3f s early)",
          sp.violations, sp.worst_early_us / 1e6);
    CHECK(wait_log(&f->svc[1], "event=tenant_limits_resumed", 10000),
          "b did not resume the customer's limit");
    assert_int_equal(tl_service_signal(&f->svc[1], SIGTERM, 1, 10000), 0);
}

/* Limit windows (0019) across a takeover: the leader uses up a 6/10s window at 5/s and dies at
 * once; the standby takes over and must resume the window from the attempt log and the claims
 * still leased: no 7th webhook until the first is ten seconds old, none more than six in any
 * ten seconds. */
static void standby_instance_keeps_limit_windows(void **state)
{
    fx *f = *state;
    char url[256];
    receiver_url(f->rx, "/c/windowed", url, sizeof url);
    tl_exec(f->db->conn,
            "SELECT pgpace.customer_set('windowed', webhook_url => '%s', "
            "signing_secrets => ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], "
            "limits => '{5/s,6/10s}')",
            url);
    start_takeover_instance(f, 0, "a");
    CHECK(wait_log(&f->svc[0], "event=leader_elected", 15000), "a did not lead");
    start_takeover_instance(f, 1, "b");
    CHECK(wait_log(&f->svc[1], "event=standby", 15000), "b did not stand by");
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('windowed', jsonb_build_object('n', g)) "
                         "FROM generate_series(1, 12) g");
    CHECK(rx_wait(f, "windowed", 6, 20000) >= 6, "windowed: its first six did not arrive");
    assert_int_equal(tl_service_signal(&f->svc[0], SIGKILL, 1, 5000), 128 + SIGKILL);
    CHECK(wait_log(&f->svc[1], "event=leader_elected", 10000), "b did not take over");
    CHECK(rx_wait(f, "windowed", 8, 40000) >= 8, "windowed: fewer than 8 webhooks");
    int64_t at[64];
    size_t n = arrivals(f->rx, "windowed", at, 64);
    size_t most = 0;
    for (size_t hi = 0, lo = 0; hi < n; hi++) {
        while (at[lo] <= at[hi] - 10000000)
            lo++;
        if (hi - lo + 1 > most)
            most = hi - lo + 1;
    }
    printf("# windowed (5/s, 6/10s): %zu arrivals, 7th %.3f s after the first, most in any 10 s "
           "%zu\n",
           n, (at[6] - at[0]) / 1e6, most);
    CHECK(most <= 6, "%zu webhooks in 10 s after the takeover: the window was not resumed", most);
    CHECK(at[6] - at[0] >= 10000000, "the 7th webhook came %.3f s after the first",
          (at[6] - at[0]) / 1e6);
    CHECK(wait_log(&f->svc[1], "event=limit_windows_resumed", 10000),
          "b did not resume the windows");
    assert_int_equal(tl_service_signal(&f->svc[1], SIGTERM, 1, 10000), 0);
}

/* Ordered delivery per key (0020) across a kill -9 of the leader: 10 keys of 8 events each, a
 * work queue, every answer 200 ms late so that heads are in flight when the leader dies. The
 * standby takes over; a key whose head died in flight waits for its lease (30 s), then goes on.
 * At the receiver, per key: the accepted sequence numbers never go back (a head the old leader
 * sent and the new one sends again is a repeat, not a regression), every event arrives, and
 * no request of a key starts while another of it is open (requests cut by the kill, never
 * answered, excepted: they were open at the kill only). */
static void standby_instance_keeps_keys_in_order(void **state)
{
    fx *f = *state;
    char url[256];
    receiver_url(f->rx, "/c/keyed", url, sizeof url);
    receiver_on(f->rx, &(receiver_rule){.path_prefix = "/c/keyed",
                                        .action = RECV_RESPOND,
                                        .status = 200,
                                        .delay_ms = 200});
    tl_exec(f->db->conn,
            "SELECT pgpace.customer_set('keyed', webhook_url => '%s', "
            "signing_secrets => ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], "
            "mode => 'unlimited', rate_per_minute => 1)",
            url);
    for (int s = 0; s < 8; s++)
        for (int k = 0; k < 10; k++)
            tl_exec(f->db->conn,
                    "SELECT pgpace.enqueue('keyed', jsonb_build_object('k', %d, 's', %d), "
                    "order_key => 'k%d')",
                    k, s, k);
    start_takeover_instance(f, 0, "a");
    CHECK(wait_log(&f->svc[0], "event=leader_elected", 15000), "a did not lead");
    start_takeover_instance(f, 1, "b");
    CHECK(wait_log(&f->svc[1], "event=standby", 15000), "b did not stand by");
    CHECK(rx_wait(f, "keyed", 25, 30000) >= 25, "keyed: fewer than 25 before the kill");
    int64_t kill_us = now_us();
    assert_int_equal(tl_service_signal(&f->svc[0], SIGKILL, 1, 5000), 128 + SIGKILL);
    CHECK(wait_log(&f->svc[1], "event=leader_elected", 10000), "b did not take over");
    long long done = tl_wait_query_at_least(
        f->db->conn, 80, 90000,
        "SELECT count(DISTINCT item_id) FROM pgpace.delivery_attempt WHERE outcome = 'success'");
    size_t total = receiver_count(f->rx, "/c/keyed");
    int last[10], regressions = 0, overlaps = 0, cut = 0, repeats = 0;
    int64_t open_until[10];
    for (int k = 0; k < 10; k++) {
        last[k] = -1;
        open_until[k] = 0;
    }
    for (size_t i = 0; i < total; i++) {
        receiver_request q;
        if (receiver_get(f->rx, i, &q) != 0)
            break;
        const char *kp = strstr(q.body, "\"k\": "), *sp = strstr(q.body, "\"s\": ");
        int k = kp ? atoi(kp + 5) : -1, sq = sp ? atoi(sp + 5) : -1;
        free(q.body);
        if (strncmp(q.path, "/c/keyed", 8) != 0 || k < 0 || k >= 10)
            continue;
        if (q.at_us < open_until[k])
            overlaps++;
        if (q.answered_us == 0) {
            cut += q.at_us <= kill_us; /* cut by the kill */
            overlaps += q.at_us > kill_us;
            continue;
        }
        open_until[k] = q.answered_us;
        if (sq < last[k])
            regressions++;
        repeats += sq == last[k];
        if (sq > last[k])
            last[k] = sq;
    }
    int complete = 0;
    for (int k = 0; k < 10; k++)
        complete += last[k] == 7;
    printf("# keyed (10 keys x 8, kill -9 mid-run): %lld delivered, %zu requests, %d cut by the "
           "kill, %d repeats, %d regressions, %d overlapping, %d of 10 keys complete\n",
           done, total, cut, repeats, regressions, overlaps, complete);
    CHECK(done >= 80, "only %lld of 80 events delivered", done);
    CHECK(regressions == 0, "%d sequence regressions after the takeover", regressions);
    CHECK(overlaps == 0, "%d requests of a key while another of it was open", overlaps);
    CHECK(complete == 10, "%d of 10 keys complete", complete);
    assert_int_equal(tl_service_signal(&f->svc[1], SIGTERM, 1, 10000), 0);
}

/* A listening socket on 127.0.0.1 that is dead in one of two ways: `drop`: its accept queue is
 * full, so the kernel drops new SYNs (a host that is gone); otherwise it takes connections and
 * never answers (a hung server). Returns the fd; *port gets its port. */
static int dead_host(bool drop, int *port, int fillers[3])
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, drop ? 0 : 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    for (int i = 0; i < 3; i++) {
        fillers[i] = -1;
        if (!drop)
            continue;
        fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        assert_true(fillers[i] >= 0);
        int rc = connect(fillers[i], (struct sockaddr *)&a, sizeof a);
        assert_true(rc == 0 || errno == EINPROGRESS);
    }
    return fd;
}

/* The first host of the conninfo is dead: the instance still reaches the second, bounded by the
 * connection's tcp_user_timeout (SYNs dropped: the kernel gives up on that host and libpq goes
 * on) or by pgconn's per-host deadline (connection taken, never answered: the next attempt
 * starts with the other host). keepalive_idle_s = 1: tcp_user_timeout 4 s, deadline 6 s. */
static void dead_first_host_is_passed_over(void **state)
{
    fx *f = *state;
    int fillers[2][3], port[2], fd[2];
    fd[0] = dead_host(true, &port[0], fillers[0]);
    fd[1] = dead_host(false, &port[1], fillers[1]);
    const char *pgport = getenv("PGPORT") ? getenv("PGPORT") : "5432";
    long long t0 = tl_now_ms();
    for (int i = 0; i < 2; i++) {
        char cfg[1024];
        snprintf(cfg, sizeof cfg,
                 "[database]\nconninfo = host=127.0.0.1,127.0.0.1 port=%d,%s dbname=%s "
                 "target_session_attrs=read-write\n"
                 "[dispatcher]\ninstance_name = %s\nkeepalive_idle_s = 1\nreconnect_max_ms = 500\n"
                 "standby_retry_ms = 200\n"
                 "[delivery]\nallow_cidrs = 127.0.0.0/8\n[http]\nlisten = 127.0.0.1:0\n"
                 "[log]\nlevel = info\n",
                 port[i], pgport, f->db->name, i == 0 ? "dropped" : "hung");
        f->cfg[i] = tl_temp_file(cfg);
        f->svc[i] = tl_service_start(TL_ARGV("--config", f->cfg[i], "run"), NULL);
        assert_true(f->svc[i].pid > 0);
    }
    char needle[64];
    snprintf(needle, sizeof needle, "event=db_connected host=127.0.0.1 port=%s", pgport);
    for (int i = 0; i < 2; i++) {
        CHECK(wait_log(&f->svc[i], needle, 20000), "%s: never reached the second host",
              i == 0 ? "dropped" : "hung");
        printf("# first host %s: connected to the second after %lld ms\n",
               i == 0 ? "dropping SYNs" : "never answering", tl_now_ms() - t0);
    }
    /* The hung host was given up on by the deadline, and the next attempt began elsewhere. */
    print_log_line(&f->svc[1], "hung", "event=db_connect_failed");
    char *log = tl_service_log(&f->svc[1]);
    tl_assert_contains(log, "connection attempt timed out after 6000 ms");
    free(log);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(tl_service_signal(&f->svc[i], SIGTERM, 1, 10000), 0);
        close(fd[i]);
        for (int k = 0; k < 3; k++)
            if (fillers[i][k] >= 0)
                close(fillers[i][k]);
    }
}

int main(int argc, char **argv)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc;
    if (argc > 1 && strcmp(argv[1], "replica") == 0) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(failover_synchronous, pair_setup, pair_teardown),
            cmocka_unit_test_setup_teardown(failover_asynchronous, pair_setup, pair_teardown),
        };
        rc = TL_RUN(tests, NULL, NULL);
    } else {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(standby_instance_takes_over_an_empty_frontier,
                                            svc_setup, svc_teardown),
            cmocka_unit_test_setup_teardown(standby_instance_keeps_a_customers_shared_limit,
                                            svc_setup, svc_teardown),
            cmocka_unit_test_setup_teardown(standby_instance_keeps_limit_windows, svc_setup,
                                            svc_teardown),
            cmocka_unit_test_setup_teardown(standby_instance_keeps_keys_in_order, svc_setup,
                                            svc_teardown),
            cmocka_unit_test_setup_teardown(dead_first_host_is_passed_over, svc_setup,
                                            svc_teardown),
        };
        rc = TL_RUN(tests, NULL, NULL);
    }
    curl_global_cleanup();
    return rc;
}
