/* test_chaos.c - fault injection against `pgpace run`: repeated kill -9 of the leader
 * among three instances, network trouble between pgpace and PostgreSQL through a proxy the test
 * controls (blackhole, reset, refused connections), receiver chaos across 20 customers while a
 * well-behaved customer keeps its spacing and /metrics keeps answering, and statement timeouts
 * forced on the dispatcher's role.
 *
 * Every scenario ends with an exact reconciliation of every enqueued item: delivered (a success
 * attempt, its webhook-id seen by the receiver), dead-lettered with a reason, or still pending in
 * pgpace.queue; none lost, none in two states at once. Requests at the receiver beyond the
 * attempts recorded for an item are duplicates, allowed only for items that were in flight at a
 * crash or partition (at-least-once) and bounded by their number.
 *
 * Scenarios: (1) kill -9 of the leader three times; (3) blackhole / reset / refusal between one
 * instance and PostgreSQL (tcpproxy.h); (4) receiver chaos across 20 customers; (6) statement
 * timeouts on the dispatcher's role, and (6b) a statement error while loading, which must be
 * logged and retried rather than leave the instance connected and idle.
 *
 * Elsewhere: a full disk cannot be made safely on a shared test cluster (filling the volume
 * would break every other test), so dispatch/test_faults.c:database_errors_are_logged_and_retried
 * raises the server's own disk-full error (SQLSTATE 53100) from a trigger, beside a statement
 * timeout behind a lock; PostgreSQL restarts are in dispatch/test_restart.c.
 *
 * Knobs: CHAOS_ONLY=<cmocka filter> runs matching scenarios only (e.g. 'receiver*'),
 * CHAOS_SEED=N replays scenario 4's random receiver rules, CHAOS_KEEP_LOGS=DIR keeps a copy of
 * every instance's log.
 *
 * Nothing here restarts the shared cluster: the role used for statement timeouts is created by
 * this test and dropped at the end, and backends are only terminated inside this test's own
 * database, so the binary can run in parallel with the others. Waits are conditions with
 * deadlines (tl_wait_until, receiver_wait); the only fixed windows are observation windows in
 * which something must NOT happen, and they say so. Timing limits are generous on purpose: the
 * test machine has 2 cores and may be loaded by other tests or benchmarks. */
#include "testlib.h"

#include "receiver.h"
#include "tcpproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- fixture ------------------------------------------------------------------------------- */

#define MAX_INST 8

typedef struct inst {
    char name[16];
    tl_service svc;
    char *cfg;
} inst;

typedef struct fx {
    tl_db *db;
    receiver *rx;  /* the receiver every customer posts to, unless said otherwise */
    receiver *rx2; /* scenario 4: the good customer's own endpoint (another host:port) */
    tcpproxy *proxy;
    inst in[MAX_INST];
    int n;
    char role[64]; /* scenario 6: the dispatcher's own login role, dropped in teardown */
} fx;

static fx *current; /* for dumping service logs when a check fails */

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->db = tl_fresh_db(1);
    f->rx = receiver_start();
    assert_non_null(f->rx);
    current = f;
    *state = f;
    return 0;
}

static PGconn *admin_conn(void)
{
    PGconn *c = PQconnectdb("dbname=postgres");
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("cannot reach the test cluster: %s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

/* CHAOS_KEEP_LOGS=DIR keeps a copy of every instance's log there (for reading afterwards). */
static void keep_logs(fx *f)
{
    static int test_no;
    const char *dir = getenv("CHAOS_KEEP_LOGS");
    test_no++;
    if (!dir)
        return;
    for (int i = 0; i < f->n; i++) {
        if (!f->in[i].svc.log_path[0])
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/test%d-%s.log", dir, test_no, f->in[i].name);
        FILE *out = fopen(path, "w");
        if (!out)
            continue;
        char *log = tl_service_log(&f->in[i].svc);
        fputs(log, out);
        free(log);
        fclose(out);
    }
}

static int teardown(void **state)
{
    fx *f = *state;
    keep_logs(f);
    for (int i = 0; i < f->n; i++) {
        tl_service_stop(&f->in[i].svc);
        if (f->in[i].cfg) {
            unlink(f->in[i].cfg);
            free(f->in[i].cfg);
        }
    }
    if (f->proxy)
        tcpproxy_stop(f->proxy);
    receiver_stop(f->rx);
    if (f->rx2)
        receiver_stop(f->rx2);
    tl_drop_db(f->db);
    if (f->role[0]) {
        /* The database that held its objects (partitions it created) is gone: nothing owned. */
        PGconn *admin = admin_conn();
        tl_exec(admin, "DROP ROLE IF EXISTS %s", f->role);
        PQfinish(admin);
    }
    free(f);
    current = NULL;
    return 0;
}

/* Prints the tail of every instance's log to stderr (TAP reads stdout only). */
static void dump_logs(void)
{
    if (!current)
        return;
    for (int i = 0; i < current->n; i++) {
        if (!current->in[i].svc.log_path[0])
            continue;
        char *log = tl_service_log(&current->in[i].svc);
        size_t len = strlen(log);
        const char *from = len > 5000 ? log + len - 5000 : log;
        fprintf(stderr, "---- log of instance %s (%s), last %zu bytes ----\n%s\n",
                current->in[i].name, current->in[i].svc.log_path, strlen(from), from);
        free(log);
    }
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            dump_logs();                                                                           \
            fail_msg(__VA_ARGS__);                                                                 \
        }                                                                                          \
    } while (0)

/* ---- time ---------------------------------------------------------------------------------- */

/* CLOCK_REALTIME in ms: the clock of the service's log timestamps and the receiver's records. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- instances ----------------------------------------------------------------------------- */

typedef struct run_opts {
    const char *conninfo;   /* NULL: dbname=<test db> (the unix socket of the environment) */
    int lease_seconds;      /* 0: 5 */
    int request_timeout_ms; /* 0: 2000 */
    const char *dispatcher; /* extra [dispatcher] lines, or NULL */
    const char *delivery;   /* extra [delivery] lines, or NULL */
    const char *database;   /* extra [database] lines, or NULL */
} run_opts;

/* Starts `pgpace run` as instance `name`; returns its index in f->in. */
static int start_instance(fx *f, const char *name, const run_opts *o)
{
    CHECK(f->n < MAX_INST, "too many instances");
    char conninfo[256];
    if (o->conninfo)
        snprintf(conninfo, sizeof conninfo, "%s", o->conninfo);
    else
        snprintf(conninfo, sizeof conninfo, "dbname=%s", f->db->name);
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "[database]\nconninfo = %s\n%s"
             "[dispatcher]\ninstance_name = %s\nlease_seconds = %d\nstandby_retry_ms = 200\n"
             "batch_tick_ms = 1000\nbackstop_scan_ms = 1000\nretry_base_ms = 100\n"
             "retry_cap_ms = 1000\ndrain_timeout_ms = 3000\nreconnect_max_ms = 1000\n%s"
             "[delivery]\nallow_cidrs = 127.0.0.0/8\nrequest_timeout_ms = %d\n%s"
             "[http]\nlisten = 127.0.0.1:0\n[log]\nlevel = debug\n",
             conninfo, o->database ? o->database : "", name,
             o->lease_seconds ? o->lease_seconds : 5, o->dispatcher ? o->dispatcher : "",
             o->request_timeout_ms ? o->request_timeout_ms : 2000, o->delivery ? o->delivery : "");
    inst *in = &f->in[f->n];
    snprintf(in->name, sizeof in->name, "%s", name);
    in->cfg = tl_temp_file(cfg);
    in->svc = tl_service_start(TL_ARGV("--config", in->cfg, "run"), NULL);
    CHECK(in->svc.pid > 0, "cannot start instance %s", name);
    return f->n++;
}

static bool alive(const inst *in)
{
    return in->svc.pid > 0 && waitpid(in->svc.pid, NULL, WNOHANG) == 0;
}

/* Position of the first event=NAME at or after `from`, or NULL. */
static const char *find_event(const char *from, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof needle, "event=%s", name);
    size_t len = strlen(needle);
    for (const char *p = strstr(from, needle); p; p = strstr(p + len, needle))
        if (p[len] == ' ' || p[len] == '\n' || p[len] == '\0')
            return p;
    return NULL;
}

static int count_event(const char *log, const char *name)
{
    int n = 0;
    for (const char *p = find_event(log, name); p; p = find_event(p + 1, name))
        n++;
    return n;
}

/* Occurrences of `text` anywhere in the log. */
static int count_text(const char *log, const char *text)
{
    int n = 0;
    for (const char *p = strstr(log, text); p; p = strstr(p + 1, text))
        n++;
    return n;
}

/* The ts= of the line holding position p, in wall-clock ms; -1 when unreadable. */
static int64_t line_ts_ms(const char *log, const char *p)
{
    while (p > log && p[-1] != '\n')
        p--;
    struct tm tm = {0};
    int ms = 0;
    if (sscanf(p, "ts=%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &ms) != 7)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + ms;
}

/* Timestamp of the first (last = false) or last event NAME in the log, -1 if none. */
static int64_t event_ts(const char *log, const char *name, bool last)
{
    const char *hit = NULL;
    for (const char *p = find_event(log, name); p; p = find_event(p + 1, name)) {
        hit = p;
        if (!last)
            break;
    }
    return hit ? line_ts_ms(log, hit) : -1;
}

/* Timestamp of the first event NAME logged at or after wall time `after_ms`, -1 if none. */
static int64_t event_ts_after(const char *log, const char *name, int64_t after_ms)
{
    for (const char *p = find_event(log, name); p; p = find_event(p + 1, name)) {
        int64_t t = line_ts_ms(log, p);
        if (t >= after_ms)
            return t;
    }
    return -1;
}

static int events_of(const inst *in, const char *name)
{
    char *log = tl_service_log(&in->svc);
    int n = count_event(log, name);
    free(log);
    return n;
}

static int64_t ts_of(const inst *in, const char *name, bool last)
{
    char *log = tl_service_log(&in->svc);
    int64_t t = event_ts(log, name, last);
    free(log);
    return t;
}

typedef struct event_wait {
    const inst *in;
    const char *name;
    int n;
} event_wait;

static int event_cond(void *arg)
{
    event_wait *w = arg;
    return events_of(w->in, w->name) >= w->n;
}

/* Waits until the instance logged event NAME at least n times. */
static bool wait_event(const inst *in, const char *name, int n, int timeout_ms)
{
    event_wait w = {in, name, n};
    return tl_wait_until(event_cond, &w, timeout_ms) != 0;
}

/* The port of the admin HTTP server (event=http_listening ... port=N), -1 if not yet. */
static int admin_port(const inst *in)
{
    char *log = tl_service_log(&in->svc);
    const char *p = find_event(log, "http_listening");
    const char *end = p ? strchr(p, '\n') : NULL;
    const char *port = p ? strstr(p, " port=") : NULL;
    int v = port && (!end || port < end) ? atoi(port + 6) : -1;
    free(log);
    return v;
}

static long long q_int(fx *f, const char *sql)
{
    return tl_query_int(f->db->conn, "%s", sql);
}

typedef struct query_wait {
    fx *f;
    const char *sql;
    long long want;
} query_wait;

static int query_eq_cond(void *arg)
{
    query_wait *w = arg;
    return q_int(w->f, w->sql) == w->want;
}

static bool wait_query_eq(fx *f, const char *sql, long long want, int timeout_ms)
{
    query_wait w = {f, sql, want};
    return tl_wait_until(query_eq_cond, &w, timeout_ms) != 0;
}

/* Terminates the backends of instance `name` in this test's database; returns how many. */
static long long terminate_backend(fx *f, const char *name)
{
    return tl_query_int(f->db->conn,
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND application_name = 'pgpace:%s'",
                        name);
}

/* Items instance `name` claimed and has not finalised (its lease running or not): the items
 * that may be delivered twice if it fails now. Their ids are added to the temporary table
 * `suspect` (see dups_outside_suspects); returns how many. */
static long long unfinalised_of(fx *f, const char *name)
{
    tl_exec(f->db->conn, "CREATE TEMP TABLE IF NOT EXISTS suspect (item_id bigint)");
    return tl_query_int(f->db->conn,
                        "WITH s AS (INSERT INTO suspect SELECT item_id FROM pgpace.queue "
                        "WHERE claim_token IS NOT NULL AND claimed_by = '%s' RETURNING 1) "
                        "SELECT count(*) FROM s",
                        name);
}

/* After reconcile(): items the receivers saw more often than their recorded attempts (sent
 * again without a record of the earlier send) that are not suspects. Must be 0: a duplicate is
 * allowed only for an item in flight at a crash or partition. */
static long long dups_outside_suspects(fx *f)
{
    tl_exec(f->db->conn, "CREATE TEMP TABLE IF NOT EXISTS suspect (item_id bigint)");
    return tl_query_int(
        f->db->conn,
        "SELECT count(*) FROM (SELECT item_id, count(*) AS n FROM rx_seen GROUP BY item_id) r "
        "LEFT JOIN (SELECT item_id, count(*) AS n FROM pgpace.delivery_attempt GROUP BY item_id) a "
        "USING (item_id) WHERE r.n > coalesce(a.n, 0) "
        "AND r.item_id NOT IN (SELECT item_id FROM suspect)");
}

/* ---- customers and items ------------------------------------------------------------------- */

static void customer_set_url(fx *f, const char *name, const char *url, const char *rate,
                             const char *const *extra)
{
    const char *argv[40] = {"--db", f->db->conninfo, "customer", "set", name, "--rate",
                            rate,   "--url",         url};
    size_t n = 9;
    for (; extra && *extra && n < 39; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    CHECK(p.status == 0, "customer set %s failed (%d): %s", name, p.status, p.err);
    tl_proc_free(&p);
}

/* Customer NAME posting to /c/NAME on receiver r. */
static void customer_on(fx *f, receiver *r, const char *name, const char *rate,
                        const char *const *extra)
{
    char path[160], url[256];
    snprintf(path, sizeof path, "/c/%.100s", name);
    receiver_url(r, path, url, sizeof url);
    customer_set_url(f, name, url, rate, extra);
}

static void enqueue_n(fx *f, const char *customer, int n)
{
    long long got = tl_query_int(f->db->conn,
                                 "SELECT count(pgpace.enqueue('%s', jsonb_build_object('n', g))) "
                                 "FROM generate_series(1, %d) g",
                                 customer, n);
    assert_int_equal(got, n);
}

static void rule(receiver *r, const char *customer, receiver_action action, int status,
                 const char *retry_after, int delay_ms, int times)
{
    char path[160];
    snprintf(path, sizeof path, "/c/%.100s", customer);
    receiver_rule ru = {.path_prefix = path,
                        .action = action,
                        .status = status,
                        .body = status >= 400 ? "chaos" : "ok",
                        .retry_after = retry_after,
                        .delay_ms = delay_ms,
                        .times = times};
    receiver_on(r, &ru);
}

/* ---- reconciliation ------------------------------------------------------------------------ */

typedef struct recon {
    long long enqueued;
    long long delivered; /* a success attempt */
    long long dead;
    long long dead_without_reason;
    long long pending; /* still in pgpace.queue */
    long long lost;    /* in none of the three */
    long long overlap; /* in more than one */
    long long delivered_unseen;
    long long requests;       /* at the receivers */
    long long distinct_ids;   /* distinct webhook-ids at the receivers */
    long long extra_requests; /* requests beyond the item's recorded attempts */
    long long duplicates;     /* requests - distinct_ids */
    long long foreign_ids;    /* webhook-ids that name no enqueued item */
} recon;

/* Loads the receivers' requests (webhook-id -> count) into a temporary table rx_seen. */
static void load_receiver_ids(fx *f, long long *requests)
{
    tl_exec(f->db->conn, "DROP TABLE IF EXISTS pg_temp.rx_seen");
    tl_exec(f->db->conn, "CREATE TEMP TABLE rx_seen (item_id bigint, n integer)");
    receiver *rs[2] = {f->rx, f->rx2};
    *requests = 0;
    /* Chunks well below the 8 KiB statement buffer of tl_exec. */
    size_t cap = 7000;
    char *sql = malloc(cap);
    assert_non_null(sql);
    for (int k = 0; k < 2; k++) {
        if (!rs[k])
            continue;
        size_t total = receiver_count(rs[k], NULL);
        size_t len = 0;
        for (size_t i = 0; i < total; i++) {
            receiver_request rq;
            if (receiver_get(rs[k], i, &rq) != 0)
                break;
            free(rq.body);
            long long id = -1;
            if (sscanf(rq.webhook_id, "msg_%lld", &id) != 1)
                id = -1;
            (*requests)++;
            if (len == 0)
                len = (size_t)snprintf(sql, cap, "INSERT INTO rx_seen VALUES (%lld, 1)", id);
            else
                len += (size_t)snprintf(sql + len, cap - len, ",(%lld,1)", id);
            if (len > cap - 32 || i + 1 == total) {
                tl_exec(f->db->conn, "%s", sql);
                len = 0;
            }
        }
    }
    free(sql);
}

static recon reconcile(fx *f, const char *label)
{
    recon r = {0};
    load_receiver_ids(f, &r.requests);
    PGconn *c = f->db->conn;
    r.enqueued = tl_query_int(c, "SELECT count(*) FROM pgpace.item");
    r.delivered = tl_query_int(c, "SELECT count(DISTINCT item_id) FROM pgpace.delivery_attempt "
                                  "WHERE outcome = 'success'");
    r.dead = tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter");
    r.dead_without_reason =
        tl_query_int(c, "SELECT count(*) FROM pgpace.dead_letter "
                        "WHERE last_status IS NULL AND coalesce(last_error, '') = ''");
    r.pending = tl_query_int(c, "SELECT count(*) FROM pgpace.queue");
    const char *states =
        "SELECT i.id, "
        "EXISTS (SELECT 1 FROM pgpace.delivery_attempt a WHERE a.item_id = i.id "
        "AND a.outcome = 'success')::int AS s, "
        "EXISTS (SELECT 1 FROM pgpace.dead_letter d WHERE d.item_id = i.id)::int AS d, "
        "EXISTS (SELECT 1 FROM pgpace.queue q WHERE q.item_id = i.id)::int AS q "
        "FROM pgpace.item i";
    r.lost = tl_query_int(c, "SELECT count(*) FROM (%s) x WHERE s + d + q = 0", states);
    r.overlap = tl_query_int(c, "SELECT count(*) FROM (%s) x WHERE s + d + q > 1", states);
    r.delivered_unseen =
        tl_query_int(c, "SELECT count(DISTINCT a.item_id) FROM pgpace.delivery_attempt a "
                        "WHERE a.outcome = 'success' "
                        "AND NOT EXISTS (SELECT 1 FROM rx_seen r WHERE r.item_id = a.item_id)");
    r.distinct_ids = tl_query_int(c, "SELECT count(DISTINCT item_id) FROM rx_seen");
    r.foreign_ids = tl_query_int(c, "SELECT count(*) FROM rx_seen r WHERE NOT EXISTS "
                                    "(SELECT 1 FROM pgpace.item i WHERE i.id = r.item_id)");
    r.extra_requests = tl_query_int(
        c, "SELECT coalesce(sum(greatest(0, r.n - coalesce(a.n, 0))), 0) FROM "
           "(SELECT item_id, count(*) AS n FROM rx_seen GROUP BY item_id) r LEFT JOIN "
           "(SELECT item_id, count(*) AS n FROM pgpace.delivery_attempt GROUP BY item_id) a "
           "USING (item_id)");
    r.duplicates = r.requests - r.distinct_ids;
    if (r.extra_requests > 0) {
        char *detail = tl_query_str(
            c, "SELECT string_agg(name || ': ' || extra || ' (items ' || items || ')', ', ') FROM "
               "(SELECT cu.name, sum(greatest(0, r.n - coalesce(a.n, 0))) AS extra, "
               "count(*) FILTER (WHERE r.n > coalesce(a.n, 0)) AS items FROM "
               "(SELECT item_id, count(*) AS n FROM rx_seen GROUP BY item_id) r "
               "JOIN pgpace.item i ON i.id = r.item_id "
               "JOIN pgpace.customer cu ON cu.id = i.customer_id LEFT JOIN "
               "(SELECT item_id, count(*) AS n FROM pgpace.delivery_attempt GROUP BY item_id) a "
               "USING (item_id) GROUP BY cu.name HAVING sum(greatest(0, r.n - coalesce(a.n, 0))) "
               "> 0 ORDER BY 1) x");
        print_message("# %s: requests without a recorded attempt, per customer: %s\n", label,
                      detail);
        free(detail);
    }
    print_message("# %s reconcile: enqueued=%lld delivered=%lld dead=%lld pending=%lld lost=%lld "
                  "overlap=%lld | receiver requests=%lld distinct_ids=%lld duplicates=%lld "
                  "unattempted_requests=%lld\n",
                  label, r.enqueued, r.delivered, r.dead, r.pending, r.lost, r.overlap, r.requests,
                  r.distinct_ids, r.duplicates, r.extra_requests);
    CHECK(r.lost == 0, "%s: %lld items lost (neither delivered, dead nor pending)", label, r.lost);
    CHECK(r.overlap == 0, "%s: %lld items in two states at once", label, r.overlap);
    CHECK(r.delivered + r.dead + r.pending == r.enqueued,
          "%s: delivered %lld + dead %lld + pending %lld != enqueued %lld", label, r.delivered,
          r.dead, r.pending, r.enqueued);
    CHECK(r.dead_without_reason == 0, "%s: %lld dead letters without a reason", label,
          r.dead_without_reason);
    CHECK(r.delivered_unseen == 0,
          "%s: %lld items finalised as delivered never reached the "
          "receiver",
          label, r.delivered_unseen);
    CHECK(r.foreign_ids == 0, "%s: %lld requests with a webhook-id naming no item", label,
          r.foreign_ids);
    return r;
}

/* ---- 1. kill -9 of the leader, three times ------------------------------------------------- */

/* Index of the one live instance that has led (leader_elected), -1 if none or several. */
static int live_leader(fx *f)
{
    int found = -1;
    for (int i = 0; i < f->n; i++) {
        if (!alive(&f->in[i]) || events_of(&f->in[i], "leader_elected") == 0)
            continue;
        if (found >= 0)
            return -1;
        found = i;
    }
    return found;
}

static int one_live_leader(void *arg)
{
    return live_leader(arg) >= 0;
}

static void kill9_leader_three_times(void **state)
{
    fx *f = *state;
    const int total_items = 4500;
    customer_on(f, f->rx, "bulk", "60", TL_ARGV("--mode", "unlimited"));
    rule(f->rx, "bulk", RECV_RESPOND, 200, NULL, 2, 0);
    enqueue_n(f, "bulk", total_items);
    /* Lease 3 s: the dead leader's unfinalised items come back within the test's budget. */
    run_opts o = {.lease_seconds = 3, .dispatcher = "max_in_flight = 256\nclaim_batch_max = 100\n"};
    const char *names[] = {"a", "b", "c", "d", "e", "f"};
    for (int i = 0; i < 3; i++)
        start_instance(f, names[i], &o);
    CHECK(tl_wait_until(one_live_leader, f, 15000), "no single leader among a, b, c");

    long long orphaned_total = 0;
    int64_t takeover[3];
    for (int k = 0; k < 3; k++) {
        size_t want = (size_t)(k + 1) * 900;
        CHECK(receiver_wait(f->rx, "/c/bulk", want, 60000) >= want,
              "%zu deliveries did not happen before kill %d", want, k + 1);
        int leader = live_leader(f);
        CHECK(leader >= 0, "no single live leader before kill %d", k + 1);
        inst *L = &f->in[leader];
        size_t delivered_at_kill = receiver_count(f->rx, "/c/bulk");
        int64_t t_kill = wall_ms();
        CHECK(tl_service_signal(&L->svc, SIGKILL, 1, 5000) == 128 + SIGKILL,
              "leader %s did not die of SIGKILL", L->name);
        /* What the dead leader claimed and never finalised: the only items that may now be
         * delivered twice. Exact: nothing finalises them until a new leader re-claims them after
         * the 3 s lease, and this is read within milliseconds. */
        long long orphaned = unfinalised_of(f, L->name);
        orphaned_total += orphaned;
        int64_t last_claim_of_dead = ts_of(L, "claimed", true);

        CHECK(tl_wait_until(one_live_leader, f, 10000),
              "no instance took over within 10 s of killing %s", L->name);
        int next = live_leader(f);
        int64_t elected_at = ts_of(&f->in[next], "leader_elected", false);
        takeover[k] = elected_at - t_kill;
        int64_t first_claim_of_new = ts_of(&f->in[next], "claimed", false);
        if (first_claim_of_new < 0) {
            CHECK(wait_event(&f->in[next], "claimed", 1, 10000), "the new leader %s never claimed",
                  f->in[next].name);
            first_claim_of_new = ts_of(&f->in[next], "claimed", false);
        }
        print_message("# kill %d: killed leader %s at %zu delivered (%lld unfinalised); %s led "
                      "after %lld ms (log timestamps), first claim %lld ms after the kill\n",
                      k + 1, L->name, delivered_at_kill, orphaned, f->in[next].name,
                      (long long)takeover[k], (long long)(first_claim_of_new - t_kill));
        /* Never two leaders: the new one was elected after the kill, and its first claim came
         * after the dead leader's last. */
        CHECK(elected_at >= t_kill, "%s was elected %lld ms before the kill", f->in[next].name,
              (long long)(t_kill - elected_at));
        CHECK(first_claim_of_new > last_claim_of_dead,
              "%s claimed (%lld) before the dead leader's last claim (%lld)", f->in[next].name,
              (long long)first_claim_of_new, (long long)last_claim_of_dead);
        /* Standbys retry the lock every 200 ms; the server frees a killed client's session at
         * once (unix socket EOF). 5 s leaves room for a loaded 2-core machine. */
        CHECK(takeover[k] < 5000, "takeover took %lld ms", (long long)takeover[k]);
        start_instance(f, names[3 + k], &o); /* a fresh replacement: three instances again */
    }

    CHECK(wait_query_eq(f, "SELECT count(*) FROM pgpace.queue", 0, 60000),
          "the queue did not drain after three failovers");
    recon r = reconcile(f, "kill -9 x3");
    print_message("# kill -9 x3: takeover %lld / %lld / %lld ms; duplicates %lld (allowed at most "
                  "%lld: unfinalised at the kills)\n",
                  (long long)takeover[0], (long long)takeover[1], (long long)takeover[2],
                  r.duplicates, orphaned_total);
    CHECK(r.delivered == total_items && r.dead == 0 && r.pending == 0, "expected all %d delivered",
          total_items);
    CHECK(r.distinct_ids == total_items, "%lld distinct webhook-ids, expected %d", r.distinct_ids,
          total_items);
    CHECK(r.duplicates <= orphaned_total,
          "%lld duplicates but only %lld items were unfinalised "
          "at the kills",
          r.duplicates, orphaned_total);
    long long outside = dups_outside_suspects(f);
    CHECK(outside == 0, "%lld items sent twice that were not in flight at a kill", outside);
    /* The CAS on the claim token: one success per item, whatever was sent twice. */
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.delivery_attempt "
                              "WHERE outcome = 'success'"),
                     total_items);
    for (int i = 0; i < f->n; i++)
        if (alive(&f->in[i]))
            CHECK(tl_service_signal(&f->in[i].svc, SIGTERM, 1, 10000) == 0,
                  "instance %s did not stop cleanly", f->in[i].name);
}

/* ---- 3. network trouble between pgpace and PostgreSQL -------------------------------------- */

/* Position just after the n-th (1-based) event NAME, or NULL. */
static const char *nth_event(const char *log, const char *name, int n)
{
    const char *p = NULL;
    for (int i = 0; i < n; i++) {
        p = find_event(p ? p + 1 : log, name);
        if (!p)
            return NULL;
    }
    return p;
}

typedef struct seq_wait {
    const inst *in;
    const char *first; /* the (n)-th event of this name ... */
    int n;
    const char *then; /* ... followed later by this one */
} seq_wait;

static int seq_cond(void *arg)
{
    seq_wait *w = arg;
    char *log = tl_service_log(&w->in->svc);
    const char *p = nth_event(log, w->first, w->n);
    int ok = p && find_event(p, w->then) != NULL;
    free(log);
    return ok;
}

/* Waits until the instance logged `then` after its n-th `first`. */
static bool wait_sequence(const inst *in, const char *first, int n, const char *then,
                          int timeout_ms)
{
    seq_wait w = {in, first, n, then};
    return tl_wait_until(seq_cond, &w, timeout_ms) != 0;
}

static void network_trouble_between_pgpace_and_postgres(void **state)
{
    fx *f = *state;
    const char *pgport = getenv("PGPORT");
    CHECK(pgport && atoi(pgport) > 0, "PGPORT is not set");
    /* The test cluster listens on 127.0.0.1 too (tests/tools/pgcluster.sh). */
    f->proxy = tcpproxy_start("127.0.0.1", atoi(pgport));
    CHECK(f->proxy != NULL, "cannot start the proxy");
    /* A spaced customer (claims ahead of each slot) and a work queue with slow answers, so
     * deliveries are in flight whenever the network fails. */
    const int n_paced = 600, n_work = 1500;
    customer_on(f, f->rx, "paced", "3000", TL_ARGV("--burst", "1"));
    customer_on(f, f->rx, "work", "60", TL_ARGV("--mode", "unlimited"));
    rule(f->rx, "work", RECV_RESPOND, 200, NULL, 100, 0);
    enqueue_n(f, "paced", n_paced);
    enqueue_n(f, "work", n_work);

    char via_proxy[256];
    snprintf(via_proxy, sizeof via_proxy, "host=127.0.0.1 port=%d dbname=%s",
             tcpproxy_port(f->proxy), f->db->name);
    /* keepalive_idle_s = 1: TCP keepalives and tcp_user_timeout (4 s) on A's connection. */
    run_opts oa = {.conninfo = via_proxy,
                   .lease_seconds = 5,
                   .dispatcher = "keepalive_idle_s = 1\nmax_in_flight = 64\n"};
    run_opts ob = {.lease_seconds = 5, .dispatcher = "max_in_flight = 64\n"};
    int a = start_instance(f, "a", &oa);
    CHECK(wait_event(&f->in[a], "leader_elected", 1, 15000), "A did not lead");
    int b = start_instance(f, "b", &ob);
    CHECK(wait_event(&f->in[b], "standby", 1, 15000), "B did not become a standby");
    inst *A = &f->in[a], *B = &f->in[b];
    CHECK(receiver_wait(f->rx, "/c/", 300, 30000) >= 300, "A delivered fewer than 300 items");

    /* ---- blackhole: A's connection stops carrying anything, no FIN, no RST ---- */
    assert_int_equal(tcpproxy_set_mode(f->proxy, TCPPROXY_PAUSE), 0);
    int64_t t_pause = wall_ms();
    /* Exact: A can neither finalise nor claim through the paused proxy. */
    long long inflight_at_pause = unfinalised_of(f, "a");
    size_t rx_at_pause = receiver_count(f->rx, NULL);
    /* Observation window (must NOT happen): while A's backend lives it holds the advisory
     * lock, so B stays a standby however long the blackhole lasts. */
    CHECK(!wait_event(B, "leader_elected", 1, 2000),
          "B led while A's session was still alive on the server");
    CHECK(alive(A), "A exited during the blackhole");
    int64_t a_last_claim = ts_of(A, "claimed", true);
    /* Results already past the proxy when it paused may still be logged a moment later; 500 ms
     * covers a loaded machine's scheduling delay. */
    CHECK(a_last_claim < t_pause + 500, "A logged a claim %lld ms after the blackhole began",
          (long long)(a_last_claim - t_pause));
    bool a_noticed = events_of(A, "db_connection_lost") > 0;
    print_message("# blackhole: A's last claim %lld ms before/after the pause (+ = after), %lld "
                  "items unfinalised by A, A noticed by itself within 2 s: %s\n",
                  (long long)(a_last_claim - t_pause), inflight_at_pause,
                  a_noticed ? "yes" : "no (the proxy's kernel acknowledges keepalives)");

    /* The server notices A's session is gone (simulated: its backend is terminated). */
    CHECK(terminate_backend(f, "a") == 1, "A's backend not found in pg_stat_activity");
    int64_t t_term = wall_ms();
    CHECK(wait_event(B, "leader_elected", 1, 10000), "B did not take over after A's session died");
    int64_t b_elected = ts_of(B, "leader_elected", false);
    a_last_claim = ts_of(A, "claimed", true);
    print_message("# blackhole: B led %lld ms after A's backend was terminated; A's last claim "
                  "%lld ms before B's election\n",
                  (long long)(b_elected - t_term), (long long)(b_elected - a_last_claim));
    /* Never two claimers: everything A claimed, it claimed before B led. */
    CHECK(b_elected > a_last_claim, "B led at %lld but A claimed at %lld", (long long)b_elected,
          (long long)a_last_claim);
    CHECK(receiver_wait(f->rx, "/c/", rx_at_pause + 50, 20000) >= rx_at_pause + 50,
          "B did not deliver after taking over");

    /* Heal: A sees its dead session (the server's goodbye or a reset), reconnects, and finds
     * the lock taken: standby. */
    int lost_before = events_of(A, "db_connection_lost");
    assert_int_equal(tcpproxy_set_mode(f->proxy, TCPPROXY_PASS), 0);
    CHECK(wait_event(A, "db_connection_lost", lost_before + 1, 10000),
          "A did not notice its dead connection after the proxy healed");
    CHECK(wait_sequence(A, "db_connection_lost", lost_before + 1, "standby", 15000),
          "A did not become a standby after reconnecting");
    CHECK(events_of(A, "leader_elected") == 1, "A led again while B holds the lock");
    print_message("# heal: A reconnected as standby; lost_ownership logged by A: %d\n",
                  events_of(A, "lost_ownership"));

    /* ---- reset and refusal: B stops, A leads through the proxy, then loses it for good ---- */
    CHECK(tl_service_signal(&B->svc, SIGTERM, 1, 15000) == 0, "B did not stop cleanly");
    CHECK(wait_event(A, "leader_elected", 2, 10000), "A did not lead again after B stopped");
    int a_claims = events_of(A, "claimed");
    CHECK(wait_event(A, "claimed", a_claims + 3, 10000), "A did not claim as leader again");
    lost_before = events_of(A, "db_connection_lost");
    int failed_before = events_of(A, "db_connect_failed");
    int64_t t_drop = wall_ms();
    assert_int_equal(tcpproxy_set_mode(f->proxy, TCPPROXY_DROP), 0);
    assert_int_equal(tcpproxy_set_mode(f->proxy, TCPPROXY_REFUSE), 0);
    long long inflight_at_drop = unfinalised_of(f, "a");
    CHECK(wait_event(A, "db_connection_lost", lost_before + 1, 5000),
          "A did not log db_connection_lost after its connection was reset");
    CHECK(wait_event(A, "db_connect_failed", failed_before + 1, 10000),
          "A did not log a failed reconnection while the proxy refuses");
    char *alog = tl_service_log(&A->svc);
    int64_t a_lost_at = event_ts_after(alog, "db_connection_lost", t_drop - 100);
    free(alog);
    /* The server saw the reset too: the lock is free. A fresh instance C (direct) leads. */
    int c = start_instance(f, "c", &ob);
    inst *C = &f->in[c];
    CHECK(wait_event(C, "leader_elected", 1, 10000), "C did not lead while A is cut off");
    int64_t c_elected = ts_of(C, "leader_elected", false);
    a_last_claim = ts_of(A, "claimed", true);
    print_message("# reset+refuse: A logged db_connection_lost %lld ms after the reset; C led "
                  "%lld ms after the reset; A's last claim %lld ms before C's election; %lld "
                  "items unfinalised by A\n",
                  (long long)(a_lost_at - t_drop), (long long)(c_elected - t_drop),
                  (long long)(c_elected - a_last_claim), inflight_at_drop);
    CHECK(c_elected > a_last_claim, "C led at %lld but A claimed at %lld", (long long)c_elected,
          (long long)a_last_claim);
    CHECK(alive(A), "A exited while its database was unreachable");

    /* Heal again: A reconnects and stays a standby behind C. */
    int standby_before = events_of(A, "standby");
    assert_int_equal(tcpproxy_set_mode(f->proxy, TCPPROXY_PASS), 0);
    CHECK(wait_event(A, "standby", standby_before + 1, 15000),
          "A did not come back as a standby after the proxy healed");
    CHECK(events_of(A, "leader_elected") == 2, "A led again while C holds the lock");

    CHECK(wait_query_eq(f, "SELECT count(*) FROM pgpace.queue", 0, 60000),
          "the queue did not drain after the network trouble");
    recon r = reconcile(f, "network");
    long long allowed = inflight_at_pause + inflight_at_drop;
    print_message("# network: duplicates %lld (allowed at most %lld: unfinalised by A at the "
                  "blackhole %lld and at the reset %lld); proxy accepted %zu connections, reset "
                  "%zu\n",
                  r.duplicates, allowed, inflight_at_pause, inflight_at_drop,
                  tcpproxy_accepted(f->proxy), tcpproxy_reset(f->proxy));
    CHECK(r.delivered == n_paced + n_work && r.dead == 0 && r.pending == 0,
          "expected all %d delivered", n_paced + n_work);
    CHECK(r.duplicates <= allowed, "%lld duplicates, at most %lld allowed", r.duplicates, allowed);
    long long outside = dups_outside_suspects(f);
    CHECK(outside == 0, "%lld items sent twice that were not in flight at a failure", outside);
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.delivery_attempt "
                              "WHERE outcome = 'success'"),
                     n_paced + n_work);
    CHECK(tl_service_signal(&A->svc, SIGTERM, 1, 15000) == 0, "A did not stop cleanly");
    CHECK(tl_service_signal(&C->svc, SIGTERM, 1, 15000) == 0, "C did not stop cleanly");
}

/* ---- 4. receiver chaos across many customers ----------------------------------------------- */

/* GET http://127.0.0.1:port/path within timeout_ms; returns the HTTP status, or -1 when there
 * was no complete answer in time. Reads the whole body (Content-Length); with body_out, hands
 * over the whole answer (headers and body, NUL-terminated; free it). */
static int http_get(int port, const char *path, int timeout_ms, char **body_out)
{
    int64_t deadline = (int64_t)tl_now_ms() + timeout_ms;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int status = -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS)
        goto out;
    struct pollfd pfd = {fd, POLLOUT, 0};
    if (poll(&pfd, 1, timeout_ms) != 1)
        goto out;
    char req[256];
    int rl = snprintf(req, sizeof req,
                      "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    if (send(fd, req, (size_t)rl, MSG_NOSIGNAL) != rl)
        goto out;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        goto out;
    long long body_at = -1, content_length = -1;
    for (;;) {
        int64_t left = deadline - (int64_t)tl_now_ms();
        if (left <= 0)
            break;
        pfd = (struct pollfd){fd, POLLIN, 0};
        if (poll(&pfd, 1, (int)left) != 1)
            break;
        if (cap - len < 4096) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                break;
            buf = nb;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        bool eof = n <= 0;
        if (n > 0)
            len += (size_t)n;
        buf[len] = '\0';
        if (body_at < 0) {
            char *end = strstr(buf, "\r\n\r\n");
            if (end) {
                body_at = end + 4 - buf;
                const char *cl = strcasestr(buf, "\r\ncontent-length:");
                if (cl && cl < end)
                    content_length = atoll(cl + 17);
            }
        }
        if (body_at >= 0 &&
            (content_length >= 0 ? (long long)len >= body_at + content_length : eof)) {
            int st = 0;
            if (sscanf(buf, "HTTP/1.%*d %d", &st) == 1)
                status = st;
            break;
        }
        if (eof)
            break;
    }
    if (body_out && status > 0)
        *body_out = buf;
    else
        free(buf);
out:
    close(fd);
    return status;
}

typedef struct metrics_poller {
    pthread_t thread;
    int port;
    atomic_bool stop;
    /* Written by the poller thread, read after join. */
    int polls, failures;
    int64_t worst_us;
    int first_failure_status;
} metrics_poller;

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* GET /metrics every 100 ms with a 1 s timeout until stopped. */
static void *poll_metrics(void *arg)
{
    metrics_poller *m = arg;
    while (!atomic_load(&m->stop)) {
        int64_t t0 = mono_us();
        int st = http_get(m->port, "/metrics", 1000, NULL);
        int64_t took = mono_us() - t0;
        m->polls++;
        if (st != 200) {
            if (m->failures++ == 0)
                m->first_failure_status = st;
        }
        if (took > m->worst_us)
            m->worst_us = took;
        int64_t next = t0 + 100000 - mono_us();
        if (next > 0) {
            /* The polling period itself, not a wait for an outcome. */
            struct timespec ts = {0, (long)next * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* Sum of the samples of metric `name` (exact name, any labels) whose line contains `with`. */
static double metric_sum(const char *text, const char *name, const char *with)
{
    double sum = 0;
    size_t nlen = strlen(name);
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (strncmp(line, name, nlen) == 0 && (line[nlen] == '{' || line[nlen] == ' ')) {
            char buf[512];
            snprintf(buf, sizeof buf, "%.*s", (int)(len < 511 ? len : 511), line);
            const char *value = strrchr(buf, ' ');
            if (value && (!with || strstr(buf, with)))
                sum += strtod(value + 1, NULL);
        }
        line = end ? end + 1 : NULL;
    }
    return sum;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* A deterministic PRNG for the chaos (seed printed; CHAOS_SEED=N reproduces a run). */
static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

#define N_CHAOS 19

static void receiver_chaos_many_customers(void **state)
{
    fx *f = *state;
    const char *seed_env = getenv("CHAOS_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : 20240611;
    rng_state = seed ? seed : 1;

    /* The good customer's endpoint is its own host:port, as another tenant's would be: libcurl
     * caps connections per host (max_host_connections), and the README documents that
     * endpoints sharing a host:port share that cap. The 19 chaotic customers share one. */
    f->rx2 = receiver_start();
    assert_non_null(f->rx2);
    customer_on(f, f->rx2, "good", "600", TL_ARGV("--burst", "1"));
    const int n_good = 200; /* 20 s at 600/min: 199 gaps, so p99 is not just the worst gap */
    enqueue_n(f, "good", n_good);

    char names[N_CHAOS][16];
    char what[N_CHAOS][64];
    int items[N_CHAOS];
    for (int i = 0; i < N_CHAOS; i++) {
        snprintf(names[i], sizeof names[i], "c%02d", i);
        bool spaced = i % 2 == 0;
        const char *mode[] = {"--mode", spaced ? "spaced" : "unlimited"};
        /* Enough for the chaos to last about as long as the good customer's 20 s. */
        items[i] = spaced ? 120 : 60;
        /* Common to all: give up after 4 attempts (so dead letters happen within the run). */
        const char *args[12] = {mode[0], mode[1], "--max-attempts", "4"};
        size_t na = 4;
        if (i < 2) {
            /* Hanging endpoints: few items, short timeout, a per-customer in-flight limit below
             * the host's connection cap (the README's advice for shared hosts). */
            rule(f->rx, names[i], RECV_HANG, 0, NULL, 0, 0);
            snprintf(what[i], sizeof what[i], "hang");
            items[i] = 6;
            args[na++] = "--request-timeout-ms";
            args[na++] = "1000";
            args[na++] = "--max-in-flight";
            args[na++] = "3";
        } else if (i == 2) {
            rule(f->rx, names[i], RECV_RESET, 0, NULL, 0, 0);
            snprintf(what[i], sizeof what[i], "reset");
        } else if (i == 3) {
            rule(f->rx, names[i], RECV_TRICKLE_HUGE, 0, NULL, 0, 0);
            snprintf(what[i], sizeof what[i], "trickle 1 GiB");
            items[i] = 5;
            args[na++] = "--max-in-flight";
            args[na++] = "2";
        } else if (i == 4) {
            rule(f->rx, names[i], RECV_RESPOND, 410, NULL, 0, 0);
            snprintf(what[i], sizeof what[i], "410 gone");
            items[i] = 5;
        } else if (i == 5) {
            /* Permanent client errors: dead letters at once (dead_letter_on_4xx). */
            rule(f->rx, names[i], RECV_RESPOND, 400, NULL, 0, 3);
            snprintf(what[i], sizeof what[i], "400 x 3");
        } else {
            uint32_t pick = rnd(100);
            if (pick < 30) {
                int status = 500 + (int)rnd(4); /* 500..503 */
                int times = rnd(2) ? 0 : 3 + (int)rnd(10);
                rule(f->rx, names[i], RECV_RESPOND, status, NULL, 0, times);
                if (times)
                    snprintf(what[i], sizeof what[i], "%d x %d", status, times);
                else
                    snprintf(what[i], sizeof what[i], "%d forever", status);
            } else if (pick < 50) {
                int times = 2 + (int)rnd(5);
                rule(f->rx, names[i], RECV_RESPOND, 429, "1", 0, times);
                snprintf(what[i], sizeof what[i], "429 Retry-After 1 x %d", times);
            } else if (pick < 80) {
                int delay = 200 + (int)rnd(601);
                rule(f->rx, names[i], RECV_RESPOND, 200, NULL, delay, 0);
                snprintf(what[i], sizeof what[i], "slow %d ms", delay);
            } else {
                snprintf(what[i], sizeof what[i], "ok");
            }
        }
        args[na] = NULL;
        customer_on(f, f->rx, names[i], "600", args);
        enqueue_n(f, names[i], items[i]);
    }
    for (int i = 0; i < N_CHAOS; i++)
        print_message("# chaos %s (%s): %s, %d items\n", names[i],
                      i % 2 == 0 ? "spaced 600/min" : "unlimited", what[i], items[i]);
    print_message("# chaos seed %llu (CHAOS_SEED reproduces)\n", (unsigned long long)seed);

    /* Breaker short so it opens and closes during the run; request timeout 2 s. */
    run_opts o = {.lease_seconds = 10,
                  .request_timeout_ms = 2000,
                  .delivery = "breaker_failures = 5\nbreaker_cooldown_ms = 500\n"
                              "breaker_cooldown_max_ms = 2000\n"};
    int a = start_instance(f, "a", &o);
    inst *A = &f->in[a];
    CHECK(wait_event(A, "http_listening", 1, 10000), "no http_listening in the log");
    metrics_poller mp = {.port = admin_port(A)};
    CHECK(mp.port > 0, "no admin port in the log");
    atomic_init(&mp.stop, false);
    CHECK(pthread_create(&mp.thread, NULL, poll_metrics, &mp) == 0, "cannot start the poller");

    /* The chaos runs while the good customer's items go out, one every 100 ms. */
    size_t good = receiver_wait(f->rx2, "/c/good", (size_t)n_good, 60000);
    CHECK(good == (size_t)n_good, "the good customer got %zu of %d webhooks", good, n_good);
    long long dead_during = q_int(f, "SELECT count(*) FROM pgpace.dead_letter");
    int breaker_opened = events_of(A, "breaker_opened");
    int paused = events_of(A, "customer_paused");
    char *alog = tl_service_log(&A->svc);
    int empty_claims = count_text(alog, "event=claimed items=0 ");
    free(alog);
    char *metrics = NULL;
    int mst = http_get(mp.port, "/metrics", 2000, &metrics);
    CHECK(mst == 200, "GET /metrics answered %d", mst);
    double rounds = metric_sum(metrics, "pgpace_claim_duration_seconds_count", NULL);
    double within_lead = metric_sum(metrics, "pgpace_claim_duration_seconds_bucket", "le=\"0.05\"");
    double within_25 = metric_sum(metrics, "pgpace_claim_duration_seconds_bucket", "le=\"0.025\"");
    free(metrics);

    /* Then the endpoints recover; retries and cooldowns finish. The 410 customer stays paused
     * (its items wait in the queue by design). */
    receiver_clear_rules(f->rx);
    const char *unfinished = "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer c "
                             "ON c.id = q.customer_id WHERE c.name <> 'c04'";
    bool drained = wait_query_eq(f, unfinished, 0, 40000);
    atomic_store(&mp.stop, true);
    pthread_join(mp.thread, NULL);
    CHECK(drained, "%lld items of recovered customers still queued after 40 s",
          q_int(f, unfinished));
    CHECK(alive(A), "the service exited during the chaos");

    /* The good customer's spacing: |gap - 100 ms| per consecutive pair. */
    size_t total = receiver_count(f->rx2, NULL);
    int64_t *at = calloc(total + 1, sizeof *at), *err = calloc(total + 1, sizeof *err);
    assert_non_null(at);
    assert_non_null(err);
    size_t n_at = 0;
    for (size_t i = 0; i < total; i++) {
        receiver_request rq;
        if (receiver_get(f->rx2, i, &rq) != 0)
            break;
        free(rq.body);
        at[n_at++] = rq.at_us;
    }
    size_t n_gaps = 0;
    for (size_t i = 1; i < n_at; i++) {
        int64_t e = at[i] - at[i - 1] - 100000;
        err[n_gaps++] = e < 0 ? -e : e;
        if (e > 10000 || e < -10000)
            print_message("#   good gap %zu->%zu at +%.3f s: %.1f ms\n", i - 1, i,
                          (at[i] - at[0]) / 1e6, (at[i] - at[i - 1]) / 1000.0);
    }
    int64_t span = n_at > 1 ? at[n_at - 1] - at[0] : 0;
    qsort(err, n_gaps, sizeof *err, cmp_i64);
    int64_t p50 = n_gaps ? err[n_gaps / 2] : 0;
    int64_t p90 = n_gaps ? err[(n_gaps * 90) / 100 < n_gaps ? (n_gaps * 90) / 100 : n_gaps - 1] : 0;
    int64_t p99 = n_gaps ? err[(n_gaps * 99) / 100 < n_gaps ? (n_gaps * 99) / 100 : n_gaps - 1] : 0;
    int64_t worst = n_gaps ? err[n_gaps - 1] : 0;
    free(at);
    free(err);
    /* pgpace's own record of when it sent each of them (delivery_attempt.started_at). */
    long long min_send_gap = tl_min_send_gap_us(f->db->conn, "good", NULL);
    print_message("# good customer beside 19 chaotic ones: %zu gaps over %.2f s (199 x 100 ms = "
                  "19.9 s), |gap - 100 ms| p50 %.1f ms p90 %.1f ms p99 %.1f ms max %.1f ms; "
                  "smallest recorded send gap %.1f ms\n",
                  n_gaps, span / 1e6, p50 / 1000.0, p90 / 1000.0, p99 / 1000.0, worst / 1000.0,
                  min_send_gap / 1000.0);
    print_message("# /metrics: %d polls, %d failed (first status %d), worst latency %.1f ms\n",
                  mp.polls, mp.failures, mp.first_failure_status, mp.worst_us / 1000.0);
    print_message("# chaos: dead letters during the chaos %lld, breaker_opened %d, "
                  "customer_paused %d; claim rounds %.0f (%d claimed nothing), over 25 ms %.0f, "
                  "over 50 ms (the spaced claim lead) %.0f\n",
                  dead_during, breaker_opened, paused, rounds, empty_claims, rounds - within_25,
                  rounds - within_lead);
    /* The good customer keeps its spacing beside the chaos:
     * - never faster: pgpace's record shows no two sends closer than 100 ms less the event
     *   loop's 1 ms timer resolution;
     * - its rate holds: the 200 arrivals span at most 50 % more than 199 periods, the median
     *   gap is within 50 ms of 100 ms and nine in ten within 250 ms: a blocked loop costs
     *   seconds, a busy machine milliseconds.
     * Single receiver-side gaps also carry the loopback request and the receiver thread's
     * wake-up (quiet machine: p99 ~1-7 ms; a loaded 2-core machine has shown stalls of tens of
     * ms), so the tail is reported above rather than held to a bound. A spaced customer is
     * claimed 50 ms ahead of its slot and claims go one at a time on the leader's connection,
     * so a claim round slower than that sends late: the claim-duration figures above show it. */
    CHECK(min_send_gap >= 99000, "two of the good customer's sends %.1f ms apart",
          min_send_gap / 1000.0);
    /* A loop blocked by a bad peer costs a whole request timeout (seconds) per block; a busy
     * machine's lateness costs milliseconds per send (not caught up at burst 1): the bounds
     * sit between the two, the figures on a quiet machine are the ones printed above. */
    CHECK(span <= 199LL * 150000, "the good customer's 200 webhooks took %.2f s, over 29.9 s",
          span / 1e6);
    CHECK(p50 < 50000, "good customer's gap p50 error %.1f ms", p50 / 1000.0);
    CHECK(p90 < 250000, "good customer's gap p90 error %.1f ms", p90 / 1000.0);
    CHECK(mp.polls >= 50, "only %d /metrics polls", mp.polls);
    CHECK(mp.failures == 0, "%d of %d /metrics polls failed", mp.failures, mp.polls);
    /* 900 ms: far above a healthy answer (~1 ms); a blocked event loop shows as seconds. */
    CHECK(mp.worst_us < 900000, "a /metrics poll took %.1f ms", mp.worst_us / 1000.0);
    CHECK(breaker_opened > 0, "no breaker opened despite failing endpoints");
    CHECK(paused > 0, "the 410 customer was not paused");

    recon r = reconcile(f, "receiver chaos");
    long long gone_items = q_int(f, "SELECT count(*) FROM pgpace.queue q JOIN pgpace.customer c "
                                    "ON c.id = q.customer_id WHERE c.name = 'c04'");
    CHECK(r.pending == gone_items && gone_items == items[4],
          "pending %lld, expected exactly the 410 customer's %d items", r.pending, items[4]);
    /* Every dead letter names its cause. */
    char *reasons =
        tl_query_str(f->db->conn, "SELECT coalesce(string_agg(DISTINCT coalesce(last_status::text, "
                                  "'-') || ':' || left(last_error, 40), ' | '), '') "
                                  "FROM pgpace.dead_letter");
    print_message("# dead letter reasons: %s\n", reasons);
    free(reasons);
    CHECK(r.dead >= 3, "%lld dead letters, expected at least the 3 answered 400", r.dead);
    /* No crash, no partition: every request the receivers saw should be an attempt pgpace
     * recorded (a retry is a new attempt, not a duplicate). Two known exceptions, bounded:
     * - c02 (RESET): libcurl resends a request once, transparently, when a reused keep-alive
     *   connection dies before any answer byte; the receiver saw it twice, pgpace recorded one
     *   attempt. At most one extra per recorded attempt.
     * - c04 (410): the 410 answer is finalised as 'release' (attempt given back), which writes
     *   no delivery_attempt row. At most one per item of c04. */
    const char *extra_of =
        "SELECT coalesce(sum(greatest(0, r.n - coalesce(a.n, 0))), 0) FROM "
        "(SELECT item_id, count(*) AS n FROM rx_seen GROUP BY item_id) r "
        "JOIN pgpace.item i ON i.id = r.item_id JOIN pgpace.customer cu ON cu.id = i.customer_id "
        "LEFT JOIN (SELECT item_id, count(*) AS n FROM pgpace.delivery_attempt GROUP BY item_id) a "
        "USING (item_id) WHERE %s";
    long long extra_reset = tl_query_int(f->db->conn, extra_of, "cu.name = 'c02'");
    long long extra_gone = tl_query_int(f->db->conn, extra_of, "cu.name = 'c04'");
    long long extra_other = tl_query_int(f->db->conn, extra_of, "cu.name NOT IN ('c02', 'c04')");
    long long reset_attempts = q_int(f, "SELECT count(*) FROM pgpace.delivery_attempt a JOIN "
                                        "pgpace.customer cu ON cu.id = a.customer_id "
                                        "WHERE cu.name = 'c02'");
    print_message("# unattempted requests: c02 (reset) %lld of %lld attempts, c04 (410) %lld, "
                  "others %lld; duplicate webhook-ids at the receiver %lld (retries included)\n",
                  extra_reset, reset_attempts, extra_gone, extra_other, r.duplicates);
    CHECK(extra_other == 0, "%lld requests reached the receivers without a recorded attempt",
          extra_other);
    CHECK(extra_reset <= reset_attempts, "c02: %lld unrecorded requests for %lld attempts",
          extra_reset, reset_attempts);
    CHECK(extra_gone <= items[4], "c04: %lld unrecorded requests for %d items", extra_gone,
          items[4]);
    CHECK(tl_service_signal(&A->svc, SIGTERM, 1, 15000) == 0, "the service did not stop cleanly");
}

/* ---- 6. statement timeouts on the dispatcher's role ---------------------------------------- */

#define TIMEOUT_TEXT "canceling statement due to statement timeout"

/* Creates the dispatcher's own superuser login role (dropped in teardown), so settings made on
 * it touch no other session of the shared cluster. */
static void create_dispatcher_role(fx *f)
{
    snprintf(f->role, sizeof f->role, "chaos_%d", (int)getpid());
    PGconn *admin = admin_conn();
    tl_exec(admin, "DROP ROLE IF EXISTS %s", f->role);
    tl_exec(admin, "CREATE ROLE %s LOGIN SUPERUSER", f->role);
    PQfinish(admin);
}

/* Lines of instance `in` with event=NAME logged at or after `from_ms` whose text has `text`. */
static int events_since(const inst *in, const char *name, const char *text, int64_t from_ms)
{
    char *log = tl_service_log(&in->svc);
    int n = 0;
    for (const char *p = find_event(log, name); p; p = find_event(p + 1, name)) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *hit = text ? strstr(p, text) : p;
        if (hit && (size_t)(hit - p) < len && line_ts_ms(log, p) >= from_ms)
            n++;
    }
    free(log);
    return n;
}

typedef struct since_wait {
    const inst *in;
    const char *name, *text;
    int64_t from_ms;
    int n;
} since_wait;

static int since_cond(void *arg)
{
    since_wait *w = arg;
    return events_since(w->in, w->name, w->text, w->from_ms) >= w->n;
}

/* Lines at level warn or error logged at or after `from_ms` whose text has `text`. */
static int problems_since(const inst *in, const char *text, int64_t from_ms)
{
    char *log = tl_service_log(&in->svc);
    int n = 0;
    for (const char *line = log; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[4096];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), line);
        if ((strstr(buf, " level=error ") || strstr(buf, " level=warn ")) && strstr(buf, text) &&
            line_ts_ms(buf, buf) >= from_ms)
            n++;
        if (!end)
            break;
        line = end + 1;
    }
    free(log);
    return n;
}

typedef struct problem_wait {
    const inst *in;
    const char *text;
    int64_t from_ms;
    int n;
} problem_wait;

static int problem_cond(void *arg)
{
    problem_wait *w = arg;
    return problems_since(w->in, w->text, w->from_ms) >= w->n;
}

static bool wait_events_since(const inst *in, const char *name, const char *text, int64_t from_ms,
                              int n, int timeout_ms)
{
    since_wait w = {in, name, text, from_ms, n};
    return tl_wait_until(since_cond, &w, timeout_ms) != 0;
}

/* A second connection to the test database (for holding locks). */
static PGconn *side_conn(fx *f)
{
    PGconn *c = PQconnectdb(f->db->conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("cannot connect: %s", PQerrorMessage(c));
    return c;
}

static void statement_timeouts(void **state)
{
    fx *f = *state;
    create_dispatcher_role(f);
    const int n_paced = 300, n_work = 1500;
    customer_on(f, f->rx, "paced", "3000", TL_ARGV("--burst", "1"));
    customer_on(f, f->rx, "work", "60", TL_ARGV("--mode", "unlimited"));
    rule(f->rx, "work", RECV_RESPOND, 200, NULL, 5, 0);
    enqueue_n(f, "paced", n_paced);
    enqueue_n(f, "work", n_work);
    char conninfo[256];
    snprintf(conninfo, sizeof conninfo, "dbname=%s user=%s", f->db->name, f->role);
    /* statement_timeout_ms = 0: the role's statement_timeout, which this test sets, applies. */
    int a = start_instance(f, "a",
                           &(run_opts){.conninfo = conninfo,
                                       .lease_seconds = 5,
                                       .dispatcher = "max_in_flight = 64\nclaim_batch_max = 50\n",
                                       .database = "statement_timeout_ms = 0\n"});
    inst *A = &f->in[a];
    CHECK(wait_event(A, "leader_elected", 1, 15000), "A did not lead");
    CHECK(receiver_wait(f->rx, "/c/", 200, 30000) >= 200, "fewer than 200 deliveries");

    /* ---- phase 1: every statement of the role's sessions times out after 1 ms ---- */
    /* The setting applies to new sessions: A's is terminated and it reconnects with it. */
    tl_exec(f->db->conn, "ALTER ROLE %s SET statement_timeout = '1ms'", f->role);
    long long inflight_1 = unfinalised_of(f, "a");
    int64_t t1 = wall_ms();
    CHECK(terminate_backend(f, "a") == 1, "A's backend not found");
    size_t rx_1 = receiver_count(f->rx, NULL);
    /* What fails first varies (a fresh backend's first statements are the slow ones); any
     * warn/error line naming the timeout counts here. Phase 2 makes claim_failed and
     * finalize_failed deterministic. */
    problem_wait pw = {A, TIMEOUT_TEXT, t1, 2};
    bool saw = tl_wait_until(problem_cond, &pw, 15000) != 0;
    CHECK(alive(A), "A exited under statement timeouts");
    int claim_failed = events_since(A, "claim_failed", TIMEOUT_TEXT, t1);
    int finalize_failed = events_since(A, "finalize_failed", TIMEOUT_TEXT, t1);
    int led = events_since(A, "leader_elected", NULL, t1);
    int loaded = events_since(A, "customers_loaded", NULL, t1);
    int problems = problems_since(A, TIMEOUT_TEXT, t1);
    print_message("# statement_timeout 1ms: after reconnecting: %d warn/error lines naming the "
                  "timeout (claim_failed %d, finalize_failed %d, other %d), customers_loaded %d, "
                  "leader_elected %d, %zu deliveries\n",
                  problems, claim_failed, finalize_failed,
                  problems - claim_failed - finalize_failed, loaded, led,
                  receiver_count(f->rx, NULL) - rx_1);
    CHECK(saw, "fewer than 2 log lines naming the statement timeout within 15 s");

    /* ---- phase 2: statements that wait for a lock time out (300 ms) while running ---- */
    /* 300 ms lets a fresh session load and lead; then the test holds an exclusive lock on the
     * queue, so every claim and finalisation waits and is cancelled: claim_failed and
     * finalize_failed, deterministically. */
    tl_exec(f->db->conn, "ALTER ROLE %s SET statement_timeout = '300ms'", f->role);
    long long inflight_2 = unfinalised_of(f, "a");
    int64_t t2 = wall_ms();
    CHECK(terminate_backend(f, "a") == 1, "A's backend not found");
    CHECK(wait_events_since(A, "leader_elected", NULL, t2, 1, 15000),
          "A did not lead again with a 300 ms statement timeout");
    CHECK(receiver_wait(f->rx, "/c/", receiver_count(f->rx, NULL) + 20, 15000) > 0,
          "no deliveries with a 300 ms statement timeout");
    PGconn *locker = side_conn(f);
    tl_exec(locker, "BEGIN");
    tl_exec(locker, "LOCK TABLE pgpace.queue IN ACCESS EXCLUSIVE MODE");
    int64_t t_lock = wall_ms();
    int lost_before = events_of(A, "db_connection_lost");
    bool claims_failed = wait_events_since(A, "claim_failed", TIMEOUT_TEXT, t_lock, 2, 15000);
    bool finals_failed = wait_events_since(A, "finalize_failed", TIMEOUT_TEXT, t_lock, 1, 15000);
    tl_exec(locker, "COMMIT");
    PQfinish(locker);
    int64_t t_unlock = wall_ms();
    print_message("# lock held %lld ms: claim_failed %d, finalize_failed %d, backstop_failed %d, "
                  "all naming the statement timeout\n",
                  (long long)(t_unlock - t_lock),
                  events_since(A, "claim_failed", TIMEOUT_TEXT, t_lock),
                  events_since(A, "finalize_failed", TIMEOUT_TEXT, t_lock),
                  events_since(A, "backstop_failed", TIMEOUT_TEXT, t_lock));
    CHECK(claims_failed, "no claim_failed naming the statement timeout while the queue was locked");
    CHECK(finals_failed, "no finalize_failed naming the statement timeout while the queue was "
                         "locked");
    CHECK(alive(A), "A exited under statement timeouts");
    /* Without a reconnection: the next claims succeed once the lock is gone. */
    size_t rx_unlock = receiver_count(f->rx, NULL);
    CHECK(receiver_wait(f->rx, "/c/", rx_unlock + 50, 15000) >= rx_unlock + 50,
          "deliveries did not resume after the lock was released");
    CHECK(events_of(A, "db_connection_lost") == lost_before,
          "A dropped its connection over statement errors");

    /* ---- back to normal ---- */
    tl_exec(f->db->conn, "ALTER ROLE %s RESET statement_timeout", f->role);
    long long inflight_3 = unfinalised_of(f, "a");
    CHECK(terminate_backend(f, "a") == 1, "A's backend not found");
    CHECK(wait_query_eq(f, "SELECT count(*) FROM pgpace.queue", 0, 60000),
          "the queue did not drain after the statement timeout was reset");
    CHECK(alive(A), "A exited");
    char *log2 = tl_service_log(&A->svc);
    long long dropped = count_event(log2, "finalize_dropped");
    /* Finalisations given up: those items may be delivered again (at-least-once). */
    tl_exec(f->db->conn, "CREATE TEMP TABLE IF NOT EXISTS suspect (item_id bigint)");
    for (const char *p = find_event(log2, "finalize_dropped"); p;
         p = find_event(p + 1, "finalize_dropped")) {
        const char *item = strstr(p, " item=");
        const char *end = strchr(p, '\n');
        if (item && (!end || item < end))
            tl_exec(f->db->conn, "INSERT INTO suspect VALUES (%lld)", atoll(item + 6));
    }
    int lost_own = count_event(log2, "lost_ownership");
    free(log2);
    recon r = reconcile(f, "statement timeouts");
    /* At-least-once: finalisations given up (finalize_dropped) are delivered again after their
     * lease, and so may items in flight when the session was terminated. */
    long long allowed = dropped + inflight_1 + inflight_2 + inflight_3;
    print_message("# statement timeouts: duplicates %lld (allowed at most %lld: finalize_dropped "
                  "%lld + unfinalised at the terminations %lld + %lld + %lld); lost_ownership "
                  "%d\n",
                  r.duplicates, allowed, dropped, inflight_1, inflight_2, inflight_3, lost_own);
    CHECK(r.delivered == n_paced + n_work && r.dead == 0 && r.pending == 0,
          "expected all %d delivered", n_paced + n_work);
    CHECK(r.duplicates <= allowed, "%lld duplicates, at most %lld allowed", r.duplicates, allowed);
    long long outside = dups_outside_suspects(f);
    CHECK(outside == 0, "%lld items sent twice that were not in flight at a failure", outside);
    CHECK(tl_service_signal(&A->svc, SIGTERM, 1, 15000) == 0, "A did not stop cleanly");
}

/* ---- 6b. a statement error while loading must not wedge the instance ----------------------- */

/* After (re)connecting, the dispatcher checks the schema version, loads customers, then tries
 * the leader lock. When one of those statements fails with an error (not a lost connection), it
 * must be logged and retried: otherwise the instance would stay connected and idle, neither
 * leader nor standby, until its connection dropped. Made deterministic here: a 300 ms
 * statement timeout on the dispatcher's role and an exclusive lock the test holds on
 * pgpace.schema_migration while the instance connects, released once the statement failed. */
static void load_error_is_retried(void **state)
{
    fx *f = *state;
    create_dispatcher_role(f);
    tl_exec(f->db->conn, "ALTER ROLE %s SET statement_timeout = '300ms'", f->role);
    customer_on(f, f->rx, "calm", "600", NULL);
    enqueue_n(f, "calm", 5);
    PGconn *locker = side_conn(f);
    tl_exec(locker, "BEGIN");
    tl_exec(locker, "LOCK TABLE pgpace.schema_migration IN ACCESS EXCLUSIVE MODE");
    char conninfo[256];
    snprintf(conninfo, sizeof conninfo, "dbname=%s user=%s", f->db->name, f->role);
    int a = start_instance(
        f, "a", &(run_opts){.conninfo = conninfo, .database = "statement_timeout_ms = 0\n"});
    inst *A = &f->in[a];
    CHECK(wait_event(A, "db_ready", 1, 15000), "A did not connect");
    /* The schema-version statement waits for the lock and is cancelled after 300 ms; the lock
     * is released once no statement of A's waits any more. */
    CHECK(wait_query_eq(f,
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND application_name = 'pgpace:a' AND wait_event_type = 'Lock'",
                        1, 10000),
          "A's load statement never waited for the lock");
    CHECK(wait_query_eq(f,
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND application_name = 'pgpace:a' AND wait_event_type = 'Lock'",
                        0, 10000),
          "A's load statement was not cancelled by the statement timeout");
    int64_t t_release = wall_ms();
    tl_exec(locker, "COMMIT");
    PQfinish(locker);
    /* Expected: the failure is logged and the load retried, so A leads and delivers. */
    bool led = wait_event(A, "leader_elected", 1, 10000);
    char *log = tl_service_log(&A->svc);
    int errors = count_text(log, "level=error");
    int reconnects = count_event(log, "db_connection_lost");
    free(log);
    print_message("# load error: %d error line(s) logged, leader_elected %s, %d reconnections, "
                  "%lld ms after the lock was released\n",
                  errors, led ? "yes" : "no", reconnects, (long long)(wall_ms() - t_release));
    CHECK(errors > 0, "the failed schema-version statement was not logged");
    CHECK(led, "A never led after its load statement failed once (wedged: connected, idle, "
               "neither leader nor standby)");
    CHECK(receiver_wait(f->rx, "/c/calm", 5, 10000) == 5, "the items were not delivered");
    CHECK(tl_service_signal(&A->svc, SIGTERM, 1, 15000) == 0, "A did not stop cleanly");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(kill9_leader_three_times, setup, teardown),
        cmocka_unit_test_setup_teardown(network_trouble_between_pgpace_and_postgres, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(receiver_chaos_many_customers, setup, teardown),
        cmocka_unit_test_setup_teardown(statement_timeouts, setup, teardown),
        cmocka_unit_test_setup_teardown(load_error_is_retried, setup, teardown),
    };
    /* CHAOS_ONLY=<pattern> runs the matching scenarios only (cmocka's filter, '*' wildcards). */
    if (getenv("CHAOS_ONLY"))
        cmocka_set_test_filter(getenv("CHAOS_ONLY"));
    return TL_RUN(tests, NULL, NULL);
}
