/* twosvc.c - two-instance dispatcher fixture for the fault and restart tests. */
#include "twosvc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- fixture ------------------------------------------------------------------------------- */

static fx *current; /* for dumping service logs when a check fails */

int svc_setup(void **state)
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

int svc_teardown(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 2; i++) {
        tl_service_stop(&f->svc[i]);
        if (f->cfg[i]) {
            unlink(f->cfg[i]);
            free(f->cfg[i]);
        }
    }
    receiver_stop(f->rx);
    tl_drop_db(f->db);
    free(f);
    current = NULL;
    return 0;
}

/* Prints the tail of every running service's log to stderr (TAP reads stdout only). */
void dump_logs(void)
{
    if (!current)
        return;
    for (int i = 0; i < 2; i++) {
        if (!current->svc[i].log_path[0])
            continue;
        char *log = tl_service_log(&current->svc[i]);
        size_t len = strlen(log);
        const char *from = len > 6000 ? log + len - 6000 : log;
        fprintf(stderr, "---- log of service %d (%s), last %zu bytes ----\n%s\n", i,
                current->svc[i].log_path, strlen(from), from);
        free(log);
    }
}

/* ---- the service --------------------------------------------------------------------------- */

void start_service(fx *f, int slot, const run_opts *o)
{
    char extra[128] = "", db_extra[64] = "";
    if (o->statement_timeout_ms > 0)
        snprintf(db_extra, sizeof db_extra, "statement_timeout_ms = %d\n", o->statement_timeout_ms);
    size_t n = 0;
    if (o->max_in_flight > 0)
        n +=
            (size_t)snprintf(extra + n, sizeof extra - n, "max_in_flight = %d\n", o->max_in_flight);
    if (o->claim_batch_max > 0)
        snprintf(extra + n, sizeof extra - n, "claim_batch_max = %d\n", o->claim_batch_max);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "[database]\nconninfo = dbname=%s\n%s"
             "[dispatcher]\ninstance_name = %s\nlease_seconds = %d\nstandby_retry_ms = 200\n"
             "batch_tick_ms = 1000\nbackstop_scan_ms = 1000\nretry_base_ms = 100\n"
             "retry_cap_ms = 1000\ndrain_timeout_ms = %d\nreconnect_max_ms = 1000\n%s"
             "[delivery]\nallow_cidrs = 127.0.0.0/8\nrequest_timeout_ms = %d\n"
             "[http]\nlisten = 127.0.0.1:0\n[log]\nlevel = debug\n",
             f->db->name, db_extra, o->instance, o->lease_seconds, o->drain_timeout_ms, extra,
             o->request_timeout_ms);
    assert_null(f->cfg[slot]);
    f->cfg[slot] = tl_temp_file(cfg);
    f->svc[slot] = tl_service_start(TL_ARGV("--config", f->cfg[slot], "run"), NULL);
    assert_true(f->svc[slot].pid > 0);
}

/* Number of log lines with event=NAME exactly. */
int count_event(const char *log, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof needle, "event=%s", name);
    size_t len = strlen(needle);
    int n = 0;
    for (const char *p = strstr(log, needle); p; p = strstr(p + len, needle)) {
        char after = p[len];
        if (after == ' ' || after == '\n' || after == '\0')
            n++;
    }
    return n;
}

int service_events(const tl_service *s, const char *name)
{
    char *log = tl_service_log(s);
    int n = count_event(log, name);
    free(log);
    return n;
}

size_t rx_count(fx *f, const char *customer)
{
    char path[160];
    snprintf(path, sizeof path, "/c/%s", customer);
    return receiver_count(f->rx, path);
}

size_t rx_wait(fx *f, const char *customer, size_t n, int timeout_ms)
{
    char path[160];
    snprintf(path, sizeof path, "/c/%s", customer);
    return receiver_wait(f->rx, path, n, timeout_ms);
}

/* The requests of one customer, in arrival order (bodies dropped). */

req_list requests_of(fx *f, const char *customer)
{
    char path[160];
    snprintf(path, sizeof path, "/c/%s", customer);
    size_t total = receiver_count(f->rx, NULL);
    req_list l = {calloc(total + 1, sizeof(receiver_request)), 0};
    assert_non_null(l.v);
    for (size_t i = 0; i < total; i++) {
        receiver_request rq;
        if (receiver_get(f->rx, i, &rq) != 0)
            break;
        free(rq.body);
        rq.body = NULL;
        if (strncmp(rq.path, path, strlen(path)) == 0)
            l.v[l.n++] = rq;
    }
    return l;
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp(((const receiver_request *)a)->webhook_id,
                  ((const receiver_request *)b)->webhook_id);
}

/* Distinct webhook-ids among the customer's requests; *total gets the number of requests. */
size_t distinct_ids(fx *f, const char *customer, size_t *total)
{
    req_list l = requests_of(f, customer);
    qsort(l.v, l.n, sizeof *l.v, cmp_id);
    size_t distinct = 0;
    for (size_t i = 0; i < l.n; i++)
        if (i == 0 || strcmp(l.v[i].webhook_id, l.v[i - 1].webhook_id) != 0)
            distinct++;
    *total = l.n;
    free(l.v);
    return distinct;
}

typedef struct query_wait {
    fx *f;
    const char *sql;
    long long want;
} query_wait;

static int query_eq_cond(void *arg)
{
    query_wait *w = arg;
    return tl_query_int(w->f->db->conn, "%s", w->sql) == w->want;
}

/* Waits until an integer query equals `want`. */
bool wait_query_eq(fx *f, const char *sql, long long want, int timeout_ms)
{
    query_wait w = {f, sql, want};
    return tl_wait_until(query_eq_cond, &w, timeout_ms) != 0;
}

/* Whether the child is still running (without reaping anything but it). */
bool alive(const tl_service *s)
{
    if (s->pid <= 0)
        return false;
    return waitpid(s->pid, NULL, WNOHANG) == 0;
}

void customer_set(fx *f, const char *name, const char *rate, const char *const *extra)
{
    char path[160], url[256];
    snprintf(path, sizeof path, "/c/%s", name);
    receiver_url(f->rx, path, url, sizeof url);
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
