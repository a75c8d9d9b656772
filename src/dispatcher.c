/* dispatcher.c - the service: election, claim rounds, deliveries, finalisation, shutdown. */
#include "dispatcher.h"

#include "admin_http.h"
#include "backoff.h"
#include "db.h"
#include "gcra.h"
#include "hmap.h"
#include "http_sender.h"
#include "log.h"
#include "migrate.h"
#include "netcheck.h"
#include "obs.h"
#include "pgconn.h"
#include "sched_heap.h"
#include "sdnotify.h"
#include "sql_embed.h"
#include "strbuf.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

enum customer_mode { MODE_SPACED, MODE_BATCH, MODE_UNLIMITED };
enum breaker_state { BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN };
static const char *const breaker_names[] = {"closed", "open", "half_open"};
enum role { ROLE_STARTING, ROLE_STANDBY, ROLE_LEADER };

/* When a claim or finalisation statement fails (not a lost connection), wait this long before
 * trying again so a persistent error cannot spin the loop. */
#define ERROR_RETRY_MS 1000
/* Most customers handled by one claim round. */
#define ROUND_MAX_CUSTOMERS 4096
#define PARTITIONS_EVERY_US (3600LL * 1000000)
/* Most idempotency keys of dropped item days deleted per statement (one per backstop tick while
 * any are left), so that no statement deletes millions of rows. */
#define KEY_PURGE_BATCH 10000
/* Spaced customers are claimed this much before their slot and sent from a timer exactly at
 * it, so the claim's round trip (and other customers' rounds) never show in the gaps. */
#define LOOKAHEAD_US 50000
/* How often the leader refreshes the queue gauges of /metrics (a count per customer). */
#define QUEUE_METRICS_MS 15000

/* A (customer, carrier) pair that may have due work from next_us on. */
typedef struct pair {
    char *carrier; /* "" = items without a carrier */
    int64_t next_us;
    int64_t served_us; /* last time one of its items was claimed: carriers take turns */
} pair;

/* A receiver host ("scheme://authority" of webhook URLs). libcurl opens at most
 * max_host_connections to one, so claiming more than that for a host would only make items
 * wait locally while their lease runs. */
/* Customers held back by a full host or carrier, woken when one of its deliveries ends. */
typedef struct waiters {
    int64_t *ids;
    size_t n, cap;
} waiters;

typedef struct host_state {
    char *key;
    int in_flight; /* requests on the wire (not ones waiting for their GCRA slot) */
    int reserved;  /* items asked of it in the claim round being built */
    int tick_due;  /* its batch customers with due work, while a tick is being built */
    waiters waiting;
} host_state;

typedef struct customer {
    int64_t id;
    char *name;
    enum customer_mode mode;
    double rate;
    int burst;
    int64_t period_us;
    char *url;
    char *secrets_buf; /* the space-separated list, split in place into secrets[] */
    char *secrets[4];
    size_t n_secrets;
    int max_in_flight; /* 0 = unlimited */
    bool paused;
    int connect_timeout_ms, request_timeout_ms; /* 0 = configured default */
    host_state *host;                           /* owned by dispatcher.hosts */

    /* Circuit breaker (DESIGN §5): after breaker_failures consecutive failures no claims until
     * open_until; then one probe (half open); success closes it, failure reopens it with the
     * cooldown doubled. Expressed as a later eligible time for the scheduler. */
    enum breaker_state breaker;
    int failures;
    int trips;
    int64_t open_until;
    bool probe_in_flight;

    int in_flight;
    int64_t tat; /* GCRA theoretical arrival time, epoch us; GCRA_TAT_NONE when unknown */
    double credit;
    int64_t last_tick;
    bool have_tick;
    /* Batch: items of tick owed_tick's allowance not claimed at the tick because the
     * dispatcher, the host or the customer had no room; claimed in scheduled rounds as room
     * frees, until the next tick (never carried past it: at most one allowance per tick). */
    int owed;
    int64_t owed_tick;
    bool waiting;         /* on a full host's or carrier's wait list: out of the heap */
    int round_slot;       /* index in the claim round in flight, or -1 */
    int64_t last_sent_us; /* spaced: when the latest webhook actually went out */

    pair *pairs;
    size_t n_pairs, cap_pairs;
} customer;

typedef struct carrier_state {
    waiters waiting;
    char *name;
    int max_per_round; /* 0 = configured default */
    int max_in_flight; /* 0 = configured default */
    int in_flight;
} carrier_state;

typedef struct delivery {
    struct dispatcher *d;
    uv_timer_t send_timer; /* used when the send waits for its GCRA slot */
    bool timer_used;
    char *url_copy; /* set while waiting: the customer may change meanwhile */
    char *body;     /* payload copy while waiting */
    size_t body_len;
    int64_t item_id, token, customer_id;
    char *carrier;
    int attempt, max_attempts;
    int64_t started_us;
    bool probe;         /* the one delivery a half-open breaker lets through */
    int64_t planned_us; /* spaced: the GCRA slot it was meant to leave at; 0 otherwise */
    int64_t created_us; /* when the item was enqueued (first attempts feed the lag metric) */
    host_state *host;   /* its receiver host (the customer's URL may change meanwhile) */
    bool host_counted;  /* sent, so counted in host->in_flight */
    struct delivery *prev, *next;
} delivery;

typedef struct final_entry {
    int64_t item_id, token;
    const char *outcome; /* static string */
    int64_t delay_ms;
    int http_status; /* 0 = none */
    char *error_class, *error, *excerpt;
    int64_t started_us;
    double duration_ms;
    int failures; /* finalisation statements that failed with this entry in them */
    /* The carrier whose in-flight count this outcome still holds: a carrier's cap counts an
     * item until its outcome is written, as the queue shows it claimed until then. */
    struct carrier_state *carrier;
} final_entry;

typedef struct final_list {
    final_entry *v;
    size_t n, cap;
} final_list;

/* What a claim round needs back when its result arrives. */
typedef struct claim_round {
    struct dispatcher *d;
    uint64_t sent_ns; /* uv_hrtime() when the statement was sent */
    int64_t token;
    int64_t tick; /* batch tick, or -1 */
    size_t n;
    int64_t ids[ROUND_MAX_CUSTOMERS];
    int64_t base[ROUND_MAX_CUSTOMERS];
    double credit[ROUND_MAX_CUSTOMERS];
    int asked[ROUND_MAX_CUSTOMERS];   /* items asked of each customer */
    int allowed[ROUND_MAX_CUSTOMERS]; /* batch tick: each customer's allowance this tick */
} claim_round;

struct dispatcher {
    uv_loop_t *loop;
    pgp_config cfg;
    char instance[128];
    char app_name[160];
    netcheck_allow allow;
    pgconn *db;
    http_sender *http;
    admin_http *admin; /* NULL when [http] listen is empty */
    obs obs;
    uv_timer_t metrics_timer;
    uv_timer_t retry_timer; /* retries a failed start-up step */
    /* A statement unanswered for long means a stalled path that TCP keepalives cannot see
     * (the far side still acknowledges): the watchdog resets the connection. */
    uv_timer_t watchdog_timer;
    uint64_t claim_sent_ns, flush_sent_ns, lock_sent_ns; /* 0 = none outstanding */
    enum role role;
    bool loaded;
    hmap customers; /* int64 id -> customer* */
    hmap carriers;  /* name -> carrier_state* */
    hmap hosts;     /* "scheme://authority" -> host_state* */
    sched_heap heap;
    uint64_t rng;

    uv_timer_t claim_timer, tick_timer, backstop_timer, standby_timer, flush_timer, drain_timer;
    int open_handles;
    bool claiming, tick_pending;
    int64_t tick_due; /* tick number waiting for the claim in flight */
    int64_t partitions_at_us;
    bool keys_pending;      /* dropped item days may still have idempotency keys */
    bool key_purge_running; /* a run_key_purge statement is outstanding */

    final_list pending; /* outcomes waiting for a finalisation statement */
    final_list sending; /* outcomes of the statement in flight */
    bool flushing;
    size_t solo_left; /* after a failed batch: send this many entries one per statement */
    int flush_errors; /* finalize statements failed in a row for a database-wide reason */
    uint64_t flush_hold_until_ns; /* no finalize statement before this (backoff after one) */
    delivery *deliveries;         /* in flight */
    int in_flight;

    bool shutting_down, draining_aborted, closing;
    bool notified_ready; /* systemd READY=1 sent */
    int exit_status;
    dispatcher_done_cb done;
    void *done_arg;

    /* Counters for logs (metrics come with the observability work). */
    long long claimed, stale_recoveries, lost_ownership;
};

static void arm_claim_timer(dispatcher *d);
static void arm_flush(dispatcher *d);
static void maybe_finish_shutdown(dispatcher *d);
static void try_lock(dispatcher *d);
static void start_load(dispatcher *d);

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* xorshift64*: jitter only, never security. Seeded from OpenSSL's CSPRNG. */
static double rng_double(dispatcher *d)
{
    d->rng ^= d->rng >> 12;
    d->rng ^= d->rng << 25;
    d->rng ^= d->rng >> 27;
    return (double)((d->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int64_t fresh_token(dispatcher *d)
{
    int64_t t;
    if (RAND_bytes((unsigned char *)&t, sizeof t) != 1)
        t = (int64_t)(rng_double(d) * 9.2e18);
    return t & INT64_MAX;
}

/* ---- customers and carriers ---------------------------------------------------------------- */

static customer *customer_get(dispatcher *d, int64_t id)
{
    return hmap_get(&d->customers, &id, sizeof id);
}

static void customer_free(customer *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_pairs; i++)
        free(c->pairs[i].carrier);
    free(c->pairs);
    free(c->name);
    free(c->url);
    free(c->secrets_buf);
    free(c);
}

static carrier_state *carrier_get(dispatcher *d, const char *name)
{
    carrier_state *cs = hmap_get(&d->carriers, name, strlen(name));
    if (cs)
        return cs;
    cs = calloc(1, sizeof *cs);
    if (!cs || !(cs->name = strdup(name)) || hmap_put(&d->carriers, name, strlen(name), cs) != 0) {
        if (cs)
            free(cs->name);
        free(cs);
        return NULL;
    }
    return cs;
}

static host_state *host_for_url(dispatcher *d, const char *url)
{
    const char *auth = strstr(url, "://");
    size_t len = auth ? (size_t)(auth + 3 - url) + strcspn(auth + 3, "/?#") : strlen(url);
    char key[512];
    if (len >= sizeof key)
        len = sizeof key - 1;
    for (size_t i = 0; i < len; i++)
        key[i] = (char)((url[i] >= 'A' && url[i] <= 'Z') ? url[i] + 32 : url[i]);
    key[len] = '\0';
    host_state *h = hmap_get(&d->hosts, key, len);
    if (h)
        return h;
    h = calloc(1, sizeof *h);
    if (!h || !(h->key = strdup(key)) || hmap_put(&d->hosts, key, len, h) != 0) {
        if (h)
            free(h->key);
        free(h);
        return NULL;
    }
    return h;
}

static int host_room(const dispatcher *d, const customer *c)
{
    if (!c->host)
        return d->cfg.max_host_connections;
    int room = d->cfg.max_host_connections - c->host->in_flight - c->host->reserved;
    return room < 0 ? 0 : room;
}

/* Notes that a round asks n items of the customer's host, so later customers of the same host
 * in the round see that much less room (in_flight only counts once the claim answers). */
static void host_reserve(customer *c, int n)
{
    if (c->host && n > 0)
        c->host->reserved += n;
}

/* The round is built (only one claim is in flight at a time): its reservations end. */
static void host_reservations_end(dispatcher *d, const claim_round *r)
{
    for (size_t k = 0; k < r->n; k++) {
        customer *c = customer_get(d, r->ids[k]);
        if (c && c->host)
            c->host->reserved = 0;
    }
}

/* Puts the customer on a wait list (once); it leaves the heap until woken. */
static void wait_on(waiters *w, customer *c)
{
    if (c->waiting)
        return;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 8;
        int64_t *ids = realloc(w->ids, cap * sizeof *ids);
        if (!ids)
            return; /* stays in the heap: retried on its own schedule */
        w->ids = ids;
        w->cap = cap;
    }
    w->ids[w->n++] = c->id;
    c->waiting = true;
}

static void schedule_customer(dispatcher *d, customer *c);

/* A delivery ended: everyone waiting for that room may try again. */
static void wake(dispatcher *d, waiters *w)
{
    size_t n = w->n;
    w->n = 0;
    for (size_t i = 0; i < n; i++) {
        customer *c = customer_get(d, w->ids[i]);
        if (c && c->waiting) {
            c->waiting = false;
            schedule_customer(d, c);
        }
    }
    /* Wakes come from completions and from written outcomes (a carrier's room); only the
     * former re-armed the claim timer, so customers woken by the latter waited for an
     * unrelated event (found with batch customers behind a capped carrier). */
    if (n > 0)
        arm_claim_timer(d);
}

static int carrier_per_round(const dispatcher *d, const carrier_state *cs)
{
    return cs->max_per_round > 0 ? cs->max_per_round : d->cfg.carrier_max_per_round;
}

/* Items this carrier may still get this round: per-round cap and in-flight headroom. */
static int carrier_budget(const dispatcher *d, const carrier_state *cs)
{
    int budget = carrier_per_round(d, cs);
    int max = cs->max_in_flight > 0 ? cs->max_in_flight : d->cfg.carrier_max_in_flight;
    if (max > 0 && max - cs->in_flight < budget)
        budget = max - cs->in_flight;
    return budget < 0 ? 0 : budget;
}

static pair *pair_find(customer *c, const char *carrier)
{
    for (size_t i = 0; i < c->n_pairs; i++)
        if (strcmp(c->pairs[i].carrier, carrier) == 0)
            return &c->pairs[i];
    return NULL;
}

/* Records that (c, carrier) may have due work from next_us on (keeps the earlier time). */
static void pair_note(customer *c, const char *carrier, int64_t next_us)
{
    pair *p = pair_find(c, carrier);
    if (p) {
        if (next_us < p->next_us)
            p->next_us = next_us;
        return;
    }
    if (c->n_pairs == c->cap_pairs) {
        size_t cap = c->cap_pairs ? c->cap_pairs * 2 : 4;
        pair *v = realloc(c->pairs, cap * sizeof *v);
        if (!v)
            return; /* the backstop scan will find it again */
        c->pairs = v;
        c->cap_pairs = cap;
    }
    char *name = strdup(carrier);
    if (!name)
        return;
    c->pairs[c->n_pairs++] = (pair){name, next_us, 0};
}

static void pair_drop(customer *c, const char *carrier)
{
    pair *p = pair_find(c, carrier);
    if (!p)
        return;
    free(p->carrier);
    *p = c->pairs[--c->n_pairs];
}

static bool has_due_pair(const customer *c, int64_t now)
{
    for (size_t i = 0; i < c->n_pairs; i++)
        if (c->pairs[i].next_us <= now)
            return true;
    return false;
}

/* The batch tick the clock is in. */
static int64_t current_tick(const dispatcher *d)
{
    return (now_us() / 1000) / d->cfg.batch_tick_ms;
}

/* What a batch customer may still claim of its latest tick; 0 once the next tick began. */
static int batch_owed(const dispatcher *d, const customer *c)
{
    return c->owed > 0 && c->owed_tick >= current_tick(d) ? c->owed : 0;
}

/* Puts the customer in the heap at its next eligible time, or takes it out. */
static void schedule_customer(dispatcher *d, customer *c)
{
    if (d->role != ROLE_LEADER)
        return;
    bool eligible = !c->paused && !c->waiting && c->n_pairs > 0 &&
                    (c->mode != MODE_BATCH || batch_owed(d, c) > 0) &&
                    !(c->max_in_flight > 0 && c->in_flight >= c->max_in_flight) &&
                    !(c->breaker == BREAKER_HALF_OPEN && c->probe_in_flight);
    if (!eligible) {
        sched_heap_remove(&d->heap, c->id);
        return;
    }
    int64_t earliest = INT64_MAX;
    for (size_t i = 0; i < c->n_pairs; i++)
        if (c->pairs[i].next_us < earliest)
            earliest = c->pairs[i].next_us;
    int64_t due = earliest;
    /* The heap holds when to claim: a spaced customer's GCRA slot minus the lookahead (sent
     * exactly at the slot from a timer), but never before its items are due (a retry waiting
     * for its time is not claimed early; that only made empty claims). */
    if (c->mode == MODE_SPACED) {
        int64_t eligible_at = gcra_eligible_at(c->tat, c->period_us, c->burst);
        if (eligible_at != INT64_MIN && eligible_at - LOOKAHEAD_US > due)
            due = eligible_at - LOOKAHEAD_US;
    }
    if (c->breaker == BREAKER_OPEN && c->open_until > due)
        due = c->open_until;
    if (sched_heap_set(&d->heap, c->id, due) != 0)
        LOG_ERROR("out_of_memory", LOG_S("where", "scheduler heap"));
}

static enum customer_mode parse_mode(const char *s)
{
    return strcmp(s, "batch") == 0       ? MODE_BATCH
           : strcmp(s, "unlimited") == 0 ? MODE_UNLIMITED
                                         : MODE_SPACED;
}

/* Applies one row of run_customers.sql; returns the customer or NULL on allocation failure. */
static customer *customer_apply_row(dispatcher *d, PGresult *res, int r)
{
    int64_t id = strtoll(PQgetvalue(res, r, 0), NULL, 10);
    customer *c = customer_get(d, id);
    bool fresh = !c;
    if (fresh) {
        c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->id = id;
        c->tat = GCRA_TAT_NONE;
        c->round_slot = -1;
    }
    char *name = strdup(PQgetvalue(res, r, 1));
    char *url = strdup(PQgetvalue(res, r, 5));
    char *secrets = strdup(PQgetvalue(res, r, 6));
    if (!name || !url || !secrets || (fresh && hmap_put(&d->customers, &id, sizeof id, c) != 0)) {
        free(name);
        free(url);
        free(secrets);
        if (fresh)
            free(c);
        return NULL;
    }
    free(c->name);
    free(c->url);
    free(c->secrets_buf);
    c->name = name;
    c->url = url;
    c->secrets_buf = secrets;
    c->n_secrets = 0;
    char *save = NULL;
    for (char *tok = strtok_r(c->secrets_buf, " ", &save); tok && c->n_secrets < 4;
         tok = strtok_r(NULL, " ", &save))
        c->secrets[c->n_secrets++] = tok;
    c->mode = parse_mode(PQgetvalue(res, r, 2));
    c->rate = strtod(PQgetvalue(res, r, 3), NULL);
    c->burst = atoi(PQgetvalue(res, r, 4));
    int64_t period = gcra_period_us(c->rate);
    c->period_us = period > 0 ? period : 60000000;
    c->max_in_flight = atoi(PQgetvalue(res, r, 7));
    c->paused = strcmp(PQgetvalue(res, r, 8), "t") == 0;
    c->host = host_for_url(d, c->url);
    c->connect_timeout_ms = atoi(PQgetvalue(res, r, 9));
    c->request_timeout_ms = atoi(PQgetvalue(res, r, 10));
    if (fresh) { /* afterwards the leader's memory is the authority; the table is its record */
        const char *state = PQgetvalue(res, r, 11);
        c->breaker = strcmp(state, "open") == 0        ? BREAKER_OPEN
                     : strcmp(state, "half_open") == 0 ? BREAKER_HALF_OPEN
                                                       : BREAKER_CLOSED;
        c->failures = atoi(PQgetvalue(res, r, 12));
        c->trips = atoi(PQgetvalue(res, r, 13));
        c->open_until = PQgetisnull(res, r, 14) ? 0 : strtoll(PQgetvalue(res, r, 14), NULL, 10);
        if (c->breaker == BREAKER_HALF_OPEN) /* its probe died with the old leader */
            c->breaker = BREAKER_OPEN;
    }
    return c;
}

/* ---- database: load, election -------------------------------------------------------------- */

static void on_retry_timer(uv_timer_t *t);

/* A statement of the start-up chain (schema check, loads, election, frontier) failed while the
 * connection stayed up: try that part again after a pause rather than sit connected, neither
 * leading nor standing by. */
static void restart_chain(dispatcher *d, const char *step, PGresult *res)
{
    LOG_ERROR("startup_step_failed", LOG_S("step", step), LOG_S("error", PQresultErrorMessage(res)),
              LOG_I("retry_ms", ERROR_RETRY_MS));
    if (!d->shutting_down && !d->closing)
        uv_timer_start(&d->retry_timer, on_retry_timer, ERROR_RETRY_MS, 0);
}

static void on_carriers(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        return; /* reconnect will reload */
    for (int r = 0; r < PQntuples(res); r++) {
        carrier_state *cs = carrier_get(d, PQgetvalue(res, r, 0));
        if (!cs)
            continue;
        cs->max_per_round = atoi(PQgetvalue(res, r, 1));
        cs->max_in_flight = atoi(PQgetvalue(res, r, 2));
    }
}

/* Reload of one customer after a change notification (or of all when id is NULL). */
typedef struct reload_ctx {
    dispatcher *d;
    bool all;
    int64_t id;
} reload_ctx;

static void on_customers(pgconn *conn, PGresult *res, void *arg)
{
    reload_ctx *ctx = arg;
    dispatcher *d = ctx->d;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        bool all = ctx->all;
        free(ctx);
        if (res && all)
            restart_chain(d, "load customers", res);
        else if (res)
            LOG_ERROR("customer_load_failed", LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    if (!ctx->all && PQntuples(res) == 0) {
        customer *gone = hmap_del(&d->customers, &ctx->id, sizeof ctx->id);
        if (gone) {
            sched_heap_remove(&d->heap, gone->id);
            LOG_INFO("customer_removed", LOG_S("customer", gone->name));
            customer_free(gone);
        }
    }
    for (int r = 0; r < PQntuples(res); r++) {
        customer *c = customer_apply_row(d, res, r);
        if (!c) {
            LOG_ERROR("out_of_memory", LOG_S("where", "customer load"));
            continue;
        }
        if (!ctx->all)
            LOG_INFO("customer_updated", LOG_S("customer", c->name), LOG_D("rate", c->rate),
                     LOG_I("burst", c->burst), LOG_I("paused", c->paused));
        schedule_customer(d, c);
    }
    if (ctx->all) {
        d->loaded = true;
        LOG_INFO("customers_loaded", LOG_I("customers", PQntuples(res)));
        try_lock(d);
    }
    arm_claim_timer(d);
    free(ctx);
}

/* For statements whose result only matters when it failed. */
static void on_ignored(pgconn *conn, PGresult *res, void *arg)
{
    if (res && PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK)
        LOG_WARN("statement_failed", LOG_S("error", PQresultErrorMessage(res)));
}

static void query_or_log(dispatcher *d, const char *sql, int n, const char *const *params,
                         pgconn_result_cb cb, void *arg, const char *what)
{
    int rc = pgconn_query(d->db, sql, n, params, cb, arg);
    if (rc != 0) {
        LOG_WARN("query_not_sent", LOG_S("what", what), LOG_S("error", strerror(-rc)));
        if (arg && cb == on_customers)
            free(arg);
    }
}

static void send_session_settings(dispatcher *d)
{
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%d", d->cfg.statement_timeout_ms);
    const char *params[] = {timeout};
    query_or_log(d, sql_q_run_session, 1, params, on_ignored, NULL, "session settings");
}

static void reload_customer(dispatcher *d, int64_t id)
{
    reload_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return;
    ctx->d = d;
    ctx->id = id;
    char idbuf[24];
    snprintf(idbuf, sizeof idbuf, "%" PRId64, id);
    const char *params[] = {idbuf};
    query_or_log(d, sql_q_run_customers, 1, params, on_customers, ctx, "customer reload");
}

static void on_schema_version(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res)
        return; /* lost again; the next READY retries */
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        restart_chain(d, "schema version", res);
        return;
    }
    int version = atoi(PQgetvalue(res, 0, 0));
    if (version < migrate_latest_version()) {
        LOG_ERROR("schema_too_old", LOG_I("database_version", version),
                  LOG_I("expected_version", migrate_latest_version()),
                  LOG_S("fix", "run: pgpace migrate"));
        d->exit_status = 1;
        dispatcher_shutdown(d, d->done, d->done_arg);
        return;
    }
    if (version > migrate_latest_version()) {
        LOG_ERROR("schema_too_new", LOG_I("database_version", version),
                  LOG_I("expected_version", migrate_latest_version()),
                  LOG_S("fix", "upgrade pgpace"));
        d->exit_status = 1;
        dispatcher_shutdown(d, d->done, d->done_arg);
        return;
    }
    if (!d->notified_ready) {
        /* Schema checked and the database answers: ready as far as systemd is concerned. */
        d->notified_ready = true;
        if (sdnotify_send("READY=1\nSTATUS=connected; electing a leader") != 0)
            LOG_WARN("sd_notify_failed", LOG_S("state", "READY=1"));
    }
    query_or_log(d, sql_q_run_carriers, 0, NULL, on_carriers, d, "carriers");
    reload_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return;
    ctx->d = d;
    ctx->all = true;
    const char *params[] = {NULL};
    query_or_log(d, sql_q_run_customers, 1, params, on_customers, ctx, "customers");
}

static void start_load(dispatcher *d)
{
    query_or_log(d, sql_q_schema_version, 0, NULL, on_schema_version, d, "schema version");
}

static void on_backstop(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        if (res)
            LOG_ERROR("backstop_failed", LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    int64_t now = now_us();
    for (int r = 0; r < PQntuples(res); r++) {
        int64_t id = strtoll(PQgetvalue(res, r, 0), NULL, 10);
        customer *c = customer_get(d, id);
        if (!c) {
            reload_customer(d, id);
            continue;
        }
        bool due = strcmp(PQgetvalue(res, r, 2), "t") == 0;
        if (!due && PQgetisnull(res, r, 3))
            continue;
        pair_note(c, PQgetvalue(res, r, 1), due ? now : strtoll(PQgetvalue(res, r, 3), NULL, 10));
        schedule_customer(d, c);
    }
    arm_claim_timer(d);
}

static void on_retention(pgconn *conn, PGresult *res, void *arg)
{
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        LOG_WARN("retention_failed", LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    long long dropped = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    if (dropped > 0)
        LOG_INFO("retention", LOG_I("partitions_dropped", dropped));
}

/* Housekeeping, on becoming leader and hourly: days ahead, then retention by whole partitions.
 * Idempotency keys of dropped item days are deleted afterwards, a batch per backstop tick. */
static void run_housekeeping(dispatcher *d)
{
    d->partitions_at_us = now_us();
    query_or_log(d, sql_q_run_partitions, 0, NULL, on_ignored, NULL, "partitions");
    char days[16], dead_days[16], item_days[16];
    snprintf(days, sizeof days, "%d", d->cfg.attempt_retention_days);
    snprintf(dead_days, sizeof dead_days, "%d", d->cfg.dead_letter_retention_days);
    snprintf(item_days, sizeof item_days, "%d", d->cfg.item_retention_days);
    const char *params[] = {days, dead_days, item_days};
    query_or_log(d, sql_q_run_retention, 3, params, on_retention, NULL, "retention");
    d->keys_pending = true;
}

static void on_key_purge(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    d->key_purge_running = false;
    if (!res)
        return; /* connection lost: the next tick tries again */
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        /* Left for the next housekeeping run rather than retried every tick. */
        d->keys_pending = false;
        LOG_WARN("key_purge_failed", LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    long long deleted = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    d->keys_pending = deleted >= KEY_PURGE_BATCH;
    if (deleted > 0)
        LOG_INFO("idempotency_keys_purged", LOG_I("keys", deleted));
}

static void on_backstop_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->role != ROLE_LEADER || d->shutting_down)
        return;
    query_or_log(d, sql_q_run_backstop, 0, NULL, on_backstop, d, "backstop scan");
    if (now_us() - d->partitions_at_us > PARTITIONS_EVERY_US)
        run_housekeeping(d);
    if (d->keys_pending && !d->key_purge_running) {
        char batch[16];
        snprintf(batch, sizeof batch, "%d", KEY_PURGE_BATCH);
        const char *params[] = {batch};
        if (pgconn_query(d->db, sql_q_run_key_purge, 1, params, on_key_purge, d) == 0)
            d->key_purge_running = true;
    }
}

static void on_tick_timer(uv_timer_t *t);

/* Arms the timer for the boundary after tick `after` (the wall-clock multiple of
 * batch_tick_ms). Computed from the tick just handled, not from a fresh clock read: a timer
 * that fires a little early must not make us skip a boundary. */
static void arm_tick_timer(dispatcher *d, int64_t after)
{
    uv_update_time(d->loop);
    int64_t now_ms = now_us() / 1000;
    int64_t next_ms = (after + 1) * d->cfg.batch_tick_ms;
    uv_timer_start(&d->tick_timer, on_tick_timer,
                   next_ms > now_ms ? (uint64_t)(next_ms - now_ms) : 0, 0);
}

static void on_frontier(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        /* Leading without a frontier would claim nothing of the existing backlog. */
        restart_chain(d, "load frontier", res);
        return;
    }
    for (int r = 0; r < PQntuples(res); r++) {
        customer *c = customer_get(d, strtoll(PQgetvalue(res, r, 0), NULL, 10));
        if (!c)
            continue;
        if (!PQgetisnull(res, r, 1))
            c->tat = strtoll(PQgetvalue(res, r, 1), NULL, 10);
        c->credit = strtod(PQgetvalue(res, r, 2), NULL);
        if (!PQgetisnull(res, r, 3)) {
            c->last_tick = strtoll(PQgetvalue(res, r, 3), NULL, 10);
            c->have_tick = true;
        }
    }
    /* Only now is the heap meaningful: find the work. */
    query_or_log(d, sql_q_run_backstop, 0, NULL, on_backstop, d, "backstop scan");
    uv_timer_start(&d->backstop_timer, on_backstop_timer, (uint64_t)d->cfg.backstop_scan_ms,
                   (uint64_t)d->cfg.backstop_scan_ms);
    arm_tick_timer(d, (now_us() / 1000) / d->cfg.batch_tick_ms);
}

/* ---- observability ------------------------------------------------------------------------ */

static void on_queue_metrics(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        return;
    for (int r = 0; r < PQntuples(res); r++) {
        const char *labels[] = {PQgetvalue(res, r, 0)};
        metrics_gauge_set(d->obs.m, d->obs.queue_due, labels, strtod(PQgetvalue(res, r, 1), NULL));
        metrics_gauge_set(d->obs.m, d->obs.queue_in_flight, labels,
                          strtod(PQgetvalue(res, r, 2), NULL));
        metrics_gauge_set(d->obs.m, d->obs.oldest_due_age, labels,
                          strtod(PQgetvalue(res, r, 3), NULL));
        if (r == 0) {
            metrics_gauge_set(d->obs.m, d->obs.queue_dead_tuples, NULL,
                              strtod(PQgetvalue(res, r, 4), NULL));
            metrics_gauge_set(d->obs.m, d->obs.queue_vacuum_age, NULL,
                              strtod(PQgetvalue(res, r, 5), NULL));
        }
    }
}

static void on_metrics_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->role == ROLE_LEADER && !d->shutting_down)
        query_or_log(d, sql_q_run_metrics, 0, NULL, on_queue_metrics, d, "queue metrics");
}

static int http_render_metrics(void *arg, strbuf *out)
{
    dispatcher *d = arg;
    metrics_gauge_set(d->obs.m, d->obs.in_flight, NULL, d->in_flight);
    return metrics_render(d->obs.m, out);
}

static void http_readiness(void *arg, admin_http_readiness *out)
{
    dispatcher *d = arg;
    out->ready = pgconn_ready(d->db) && d->loaded && !d->shutting_down;
    out->role = d->role == ROLE_LEADER    ? "leader"
                : d->role == ROLE_STANDBY ? "standby"
                                          : "starting";
    out->reason = out->ready             ? NULL
                  : d->shutting_down     ? "shutting down"
                  : !pgconn_ready(d->db) ? "database unreachable"
                                         : "loading";
}

static void http_enqueue(void *arg, const char *body, size_t len, admin_http_reply *reply)
{
    dispatcher *d = arg;
    if (admin_http_enqueue_sql(d->db, body, len, admin_http_reply_done, reply) != 0)
        admin_http_reply_send(reply, 503, "{\"error\":\"database unreachable\"}");
}

static void http_request_done(void *arg, const char *route, int status, double seconds)
{
    dispatcher *d = arg;
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    const char *labels[] = {route, code};
    metrics_counter_add(d->obs.m, d->obs.http_requests, labels, 1);
    const char *route_label[] = {route};
    metrics_histogram_observe(d->obs.m, d->obs.http_seconds, route_label, seconds);
}

static void on_watchdog(uv_timer_t *t)
{
    dispatcher *d = t->data;
    uint64_t now = uv_hrtime();
    uint64_t limit = (uint64_t)d->cfg.lease_seconds * 500000000ull; /* half a lease */
    if (limit < 2000000000ull)
        limit = 2000000000ull;
    const char *stalled = d->claim_sent_ns && now - d->claim_sent_ns > limit   ? "claim"
                          : d->flush_sent_ns && now - d->flush_sent_ns > limit ? "finalize"
                          : d->lock_sent_ns && now - d->lock_sent_ns > limit   ? "leader lock"
                                                                               : NULL;
    if (!stalled || !pgconn_ready(d->db))
        return;
    LOG_ERROR("db_statement_stalled", LOG_S("statement", stalled),
              LOG_I("waited_ms", (long long)(limit / 1000000)),
              LOG_S("action", "resetting the database connection"));
    d->claim_sent_ns = d->flush_sent_ns = d->lock_sent_ns = 0;
    pgconn_reset(d->db);
}

static void become_leader(dispatcher *d)
{
    d->role = ROLE_LEADER;
    uv_timer_stop(&d->standby_timer);
    metrics_gauge_set(d->obs.m, d->obs.leader, NULL, 1);
    uv_timer_start(&d->metrics_timer, on_metrics_timer, 0, QUEUE_METRICS_MS);
    LOG_INFO("leader_elected", LOG_S("instance", d->instance));
    run_housekeeping(d);
    query_or_log(d, sql_q_run_frontier, 0, NULL, on_frontier, d, "frontier");
}

static void on_standby_timer(uv_timer_t *t)
{
    try_lock(t->data);
}

static void on_try_lock(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    d->lock_sent_ns = 0;
    if (!res || d->shutting_down)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        restart_chain(d, "leader lock", res);
        return;
    }
    if (strcmp(PQgetvalue(res, 0, 0), "t") == 0) {
        become_leader(d);
        return;
    }
    if (d->role != ROLE_STANDBY)
        LOG_INFO("standby", LOG_S("instance", d->instance),
                 LOG_I("retry_ms", d->cfg.standby_retry_ms));
    d->role = ROLE_STANDBY;
    uv_timer_start(&d->standby_timer, on_standby_timer, (uint64_t)d->cfg.standby_retry_ms, 0);
}

static void try_lock(dispatcher *d)
{
    if (d->shutting_down || d->role == ROLE_LEADER)
        return;
    char cls[16], key[16];
    snprintf(cls, sizeof cls, "%d", DB_LOCK_CLASS);
    snprintf(key, sizeof key, "%d", DB_LOCK_LEADER);
    const char *params[] = {cls, key};
    if (pgconn_query(d->db, sql_q_run_try_lock, 2, params, on_try_lock, d) == 0)
        d->lock_sent_ns = uv_hrtime();
}

static void lose_leadership(dispatcher *d)
{
    if (d->role == ROLE_LEADER)
        LOG_WARN("leadership_lost", LOG_S("instance", d->instance),
                 LOG_S("reason", "database connection lost"));
    d->role = ROLE_STARTING;
    uv_timer_stop(&d->retry_timer);
    metrics_gauge_set(d->obs.m, d->obs.leader, NULL, 0);
    uv_timer_stop(&d->metrics_timer);
    uv_timer_stop(&d->claim_timer);
    uv_timer_stop(&d->tick_timer);
    uv_timer_stop(&d->backstop_timer);
    uv_timer_stop(&d->standby_timer);
    sched_heap_clear(&d->heap);
    d->tick_pending = false;
    /* Wait lists belong to the leadership that built them. */
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL)
        c->waiting = false;
    pos = 0;
    host_state *h;
    while ((h = hmap_next(&d->hosts, &pos)) != NULL)
        h->waiting.n = 0;
    pos = 0;
    carrier_state *cs;
    while ((cs = hmap_next(&d->carriers, &pos)) != NULL)
        cs->waiting.n = 0;
}

static void on_db_state(pgconn *conn, pgconn_state state, void *arg)
{
    dispatcher *d = arg;
    if (state == PGCONN_LOST) {
        metrics_counter_add(d->obs.m, d->obs.reconnects, NULL, 1);
        lose_leadership(d);
        d->loaded = false;
        return;
    }
    LOG_INFO("db_ready", LOG_S("instance", d->instance));
    send_session_settings(d);
    if (d->shutting_down) {
        arm_flush(d);
        return;
    }
    start_load(d);
    arm_flush(d);
}

/* ---- notifications ------------------------------------------------------------------------- */

static void on_notify(pgconn *conn, const char *channel, const char *payload, void *arg)
{
    dispatcher *d = arg;
    if (!d->loaded)
        return;
    if (strcmp(channel, "pgpace_customer") == 0) {
        reload_customer(d, strtoll(payload, NULL, 10));
        return;
    }
    if (strcmp(channel, "pgpace_carrier") == 0) {
        query_or_log(d, sql_q_run_carriers, 0, NULL, on_carriers, d, "carriers");
        return;
    }
    if (strcmp(channel, "pgpace_enqueue") != 0 || d->role != ROLE_LEADER)
        return;
    char *end = NULL;
    int64_t id = strtoll(payload, &end, 10);
    const char *carrier = end && *end == ' ' ? end + 1 : "";
    customer *c = customer_get(d, id);
    if (!c) {
        reload_customer(d, id); /* its backstop scan entry will follow */
        return;
    }
    pair_note(c, carrier, now_us());
    schedule_customer(d, c);
    arm_claim_timer(d);
}

/* ---- circuit breaker ----------------------------------------------------------------------- */

static void breaker_record(dispatcher *d, customer *c, const char *error)
{
    const char *labels[] = {c->name};
    metrics_gauge_set(d->obs.m, d->obs.breaker_state, labels, (double)c->breaker);
    char id[24], failures[16], trips[16], until[24];
    snprintf(id, sizeof id, "%" PRId64, c->id);
    snprintf(failures, sizeof failures, "%d", c->failures);
    snprintf(trips, sizeof trips, "%d", c->trips);
    snprintf(until, sizeof until, "%" PRId64, c->open_until);
    const char *params[] = {id,
                            breaker_names[c->breaker],
                            failures,
                            trips,
                            c->breaker == BREAKER_CLOSED ? NULL : until,
                            error};
    query_or_log(d, sql_q_run_breaker, 6, params, on_ignored, NULL, "breaker state");
}

static void breaker_open(dispatcher *d, customer *c, const char *error)
{
    c->trips++;
    int64_t cooldown = (int64_t)d->cfg.breaker_cooldown_ms * 1000;
    for (int i = 1; i < c->trips && cooldown < (int64_t)d->cfg.breaker_cooldown_max_ms * 1000; i++)
        cooldown *= 2;
    if (cooldown > (int64_t)d->cfg.breaker_cooldown_max_ms * 1000)
        cooldown = (int64_t)d->cfg.breaker_cooldown_max_ms * 1000;
    c->breaker = BREAKER_OPEN;
    c->open_until = now_us() + cooldown;
    LOG_WARN("breaker_opened", LOG_S("customer", c->name), LOG_I("failures", c->failures),
             LOG_I("trips", c->trips), LOG_I("cooldown_ms", cooldown / 1000),
             LOG_S("last_error", error ? error : ""));
    breaker_record(d, c, error);
}

/* Called with every delivery outcome that says something about the receiver's health. */
static void breaker_note(dispatcher *d, customer *c, bool failed, const char *error)
{
    if (!failed) {
        bool was_open = c->breaker != BREAKER_CLOSED;
        c->failures = 0;
        if (was_open) {
            c->breaker = BREAKER_CLOSED;
            c->trips = 0;
            c->open_until = 0;
            LOG_INFO("breaker_closed", LOG_S("customer", c->name));
            breaker_record(d, c, NULL);
        }
        return;
    }
    c->failures++;
    if (c->breaker == BREAKER_HALF_OPEN)
        breaker_open(d, c, error); /* the probe failed: longer cooldown */
    else if (c->breaker == BREAKER_CLOSED && c->failures >= d->cfg.breaker_failures)
        breaker_open(d, c, error);
    /* Already open: failures of deliveries that were in flight when it opened add nothing. */
}

/* At claim time: an open breaker whose cooldown passed lets one probe through. Returns the
 * most items the customer may get now. */
static int breaker_allowance(dispatcher *d, customer *c, int n, int64_t now)
{
    if (c->breaker == BREAKER_CLOSED)
        return n;
    if (c->breaker == BREAKER_OPEN) {
        if (now < c->open_until)
            return 0;
        c->breaker = BREAKER_HALF_OPEN;
        LOG_INFO("breaker_half_open", LOG_S("customer", c->name), LOG_I("trips", c->trips));
        breaker_record(d, c, NULL);
    }
    return c->probe_in_flight ? 0 : (n > 0 ? 1 : 0);
}

/* ---- deliveries ---------------------------------------------------------------------------- */

static void final_push(final_list *l, final_entry e)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        final_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            /* The lease will expire and the item be delivered again: at-least-once holds. */
            LOG_ERROR("out_of_memory", LOG_S("where", "finalisation queue"));
            free(e.error_class);
            free(e.error);
            free(e.excerpt);
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = e;
}

/* The outcome is written (or given up): its carrier has room again. */
static void final_entry_release(dispatcher *d, final_entry *e)
{
    if (e->carrier) {
        e->carrier->in_flight--;
        wake(d, &e->carrier->waiting);
        e->carrier = NULL;
    }
}

static void final_entry_free(final_entry *e)
{
    free(e->error_class);
    free(e->error);
    free(e->excerpt);
}

/* A copy of a receiver's bytes that PostgreSQL will accept as text: valid UTF-8 only (invalid
 * sequences become '?', NUL bytes are dropped, a character cut by the excerpt limit is left
 * out). A peer's bad bytes must never block a finalisation. */
static char *text_excerpt(const char *s, size_t n)
{
    if (!s)
        return NULL;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t len = c < 0x80             ? 1
                     : (c & 0xe0) == 0xc0 ? 2
                     : (c & 0xf0) == 0xe0 ? 3
                     : (c & 0xf8) == 0xf0 ? 4
                                          : 0;
        if (c == 0) {
            i++;
            continue;
        }
        if (len == 0 || (len == 2 && c < 0xc2) || (len == 4 && c > 0xf4)) {
            out[o++] = '?';
            i++;
            continue;
        }
        if (i + len > n)
            break; /* cut by the limit */
        bool ok = true;
        for (size_t k = 1; k < len; k++)
            ok = ok && (p[i + k] & 0xc0) == 0x80;
        /* Overlong 3/4-byte forms, UTF-16 surrogates and code points above U+10FFFF. */
        if (ok && len == 3)
            ok = !(c == 0xe0 && p[i + 1] < 0xa0) && !(c == 0xed && p[i + 1] >= 0xa0);
        if (ok && len == 4)
            ok = !(c == 0xf0 && p[i + 1] < 0x90) && !(c == 0xf4 && p[i + 1] >= 0x90);
        if (!ok) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, p + i, len);
        o += len;
        i += len;
    }
    out[o] = '\0';
    return out;
}

static bool retryable_status(long status)
{
    return status == 408 || status == 425 || status == 429 || status >= 500;
}

static void free_delivery(delivery *dl)
{
    free(dl->carrier);
    free(dl->url_copy);
    free(dl->body);
    free(dl);
}

static void on_send_timer_closed(uv_handle_t *h)
{
    free_delivery(h->data);
}

static void on_delivery_done(const http_result *r, void *arg)
{
    delivery *dl = arg;
    dispatcher *d = dl->d;
    customer *c = customer_get(d, dl->customer_id);

    final_entry e = {.item_id = dl->item_id,
                     .token = dl->token,
                     .http_status = (int)r->status,
                     .started_us = dl->started_us,
                     .duration_ms = r->duration_ms};
    e.excerpt = text_excerpt(r->excerpt, r->excerpt_len);
    const char *cls = r->error_class;
    bool retry = false;
    if (!cls && r->status >= 200 && r->status < 300) {
        e.outcome = "success";
    } else if (cls && strcmp(cls, "aborted") == 0) {
        e.outcome = "release"; /* shutdown: not attempted as far as the receiver is concerned */
    } else if (!cls && r->status == 410) {
        e.outcome = "pause"; /* attempt logged, given back: the item waits for the resume */
        e.error = strdup("410 Gone: customer paused");
        if (c && !c->paused) {
            c->paused = true;
            char idbuf[24];
            snprintf(idbuf, sizeof idbuf, "%" PRId64, c->id);
            const char *params[] = {idbuf};
            query_or_log(d, sql_q_run_pause, 1, params, on_ignored, NULL, "pause on 410");
            LOG_WARN("customer_paused", LOG_S("customer", c->name),
                     LOG_S("reason", "receiver answered 410 Gone"),
                     LOG_S("fix", "pgpace customer resume NAME"));
        }
    } else if (cls) {
        /* A refused destination will not become acceptable by retrying. */
        retry = strcmp(cls, "ssrf") != 0;
    } else if (r->status >= 300 && r->status < 400) {
        e.error = strdup("redirect not followed (the webhook URL must answer directly)");
    } else if (r->status >= 400 && r->status < 500 && !retryable_status(r->status)) {
        retry = !d->cfg.dead_letter_on_4xx;
    } else {
        retry = true; /* 408, 425, 429, 5xx, anything else unexpected */
    }
    if (!e.outcome)
        e.outcome = retry ? "retry" : "dead";
    if (retry) {
        int64_t delay_s = -1;
        if (!cls && (r->status == 429 || r->status == 503) && r->retry_after &&
            retry_after_parse(r->retry_after, now_us() / 1000000, d->cfg.retry_after_max_s,
                              &delay_s) == 0)
            e.delay_ms = delay_s * 1000;
        else
            e.delay_ms = backoff_delay_us(dl->attempt - 1, (int64_t)d->cfg.retry_base_ms * 1000,
                                          (int64_t)d->cfg.retry_cap_ms * 1000, rng_double(d)) /
                         1000;
    }
    if (cls) {
        e.error_class = strdup(cls);
        if (!e.error)
            e.error = strdup(r->error ? r->error : cls);
    } else if (strcmp(e.outcome, "success") != 0 && !e.error) {
        char buf[64];
        snprintf(buf, sizeof buf, "HTTP %ld", r->status);
        e.error = strdup(buf);
        e.error_class = strdup("http");
    }

    if (strcmp(e.outcome, "success") == 0)
        LOG_DEBUG("delivered", LOG_I("item", dl->item_id), LOG_S("customer", c ? c->name : "?"),
                  LOG_S("carrier", dl->carrier), LOG_I("attempt", dl->attempt),
                  LOG_I("status", r->status), LOG_D("duration_ms", r->duration_ms));
    else
        LOG_INFO("delivery_failed", LOG_I("item", dl->item_id),
                 LOG_S("customer", c ? c->name : "?"), LOG_S("carrier", dl->carrier),
                 LOG_I("attempt", dl->attempt), LOG_I("status", r->status),
                 LOG_S("error_class", cls ? cls : "http"), LOG_S("error", e.error ? e.error : ""),
                 LOG_S("outcome", e.outcome), LOG_I("retry_in_ms", e.delay_ms),
                 LOG_D("duration_ms", r->duration_ms));
    const char *outcome = e.outcome;
    int64_t delay_ms = e.delay_ms;
    {
        const char *labels[] = {c ? c->name : "_unknown", outcome};
        metrics_counter_add(d->obs.m, d->obs.deliveries, labels, 1);
        const char *out_label[] = {outcome};
        metrics_histogram_observe(d->obs.m, d->obs.delivery_seconds, out_label,
                                  r->duration_ms / 1000.0);
        if (strcmp(outcome, "dead") == 0)
            metrics_counter_add(d->obs.m, d->obs.dead_letters, labels, 1);
    }
    char breaker_error[128];
    snprintf(breaker_error, sizeof breaker_error, "%s", e.error ? e.error : "");
    final_push(&d->pending, e);

    /* Unlink and release capacity. */
    if (dl->prev)
        dl->prev->next = dl->next;
    else
        d->deliveries = dl->next;
    if (dl->next)
        dl->next->prev = dl->prev;
    d->in_flight--;
    if (dl->host && dl->host_counted) {
        dl->host->in_flight--;
        wake(d, &dl->host->waiting);
    }
    carrier_state *cs = hmap_get(&d->carriers, dl->carrier, strlen(dl->carrier));
    if (cs && d->pending.n > 0 && d->pending.v[d->pending.n - 1].item_id == dl->item_id)
        d->pending.v[d->pending.n - 1].carrier = cs; /* released when the outcome is written */
    else if (cs) {
        cs->in_flight--;
        wake(d, &cs->waiting);
    }
    if (c) {
        c->in_flight--;
        if (dl->probe)
            c->probe_in_flight = false;
        /* Health: a response or a network failure; a shutdown abort or a refused destination
         * says nothing about the receiver. */
        if (strcmp(outcome, "success") == 0)
            breaker_note(d, c, false, NULL);
        else if (strcmp(outcome, "retry") == 0 && !(cls && strcmp(cls, "ssrf") == 0))
            breaker_note(d, c, true, breaker_error);
        /* A retried or released item is due again at a known time: wake its pair then (a
         * dead-lettered or delivered one needs nothing). */
        if (strcmp(outcome, "retry") == 0 || strcmp(outcome, "release") == 0 ||
            strcmp(outcome, "pause") == 0)
            pair_note(c, dl->carrier, now_us() + delay_ms * 1000);
        schedule_customer(d, c);
    }
    if (dl->timer_used)
        uv_close((uv_handle_t *)&dl->send_timer, on_send_timer_closed);
    else
        free_delivery(dl);
    arm_flush(d);
    arm_claim_timer(d);
    maybe_finish_shutdown(d);
}

/* Spaced customers without burst: a send never goes out less than one period after the
 * previous one actually did. Claims plan slots ahead; if a send went out late (a busy loop),
 * the next planned slot moves with it, as GCRA's tat = max(tat, t) + T says. */
static int64_t earliest_send(const customer *c, int64_t planned)
{
    if (!c || c->mode != MODE_SPACED || c->burst > 1 || !c->last_sent_us)
        return planned;
    int64_t min = c->last_sent_us + c->period_us;
    return planned > min ? planned : min;
}

/* Sends now; on a failure to start, completes the delivery at once as a failed attempt. */
static void send_delivery(dispatcher *d, delivery *dl, const char *body, size_t body_len)
{
    customer *c = customer_get(d, dl->customer_id);
    dl->started_us = now_us();
    /* Only requests on the wire use a host's connections; one waiting for its GCRA slot
     * (at most the lookahead) does not. */
    if (dl->host) {
        dl->host->in_flight++;
        dl->host_counted = true;
    }
    if (dl->attempt == 1 && dl->created_us > 0)
        metrics_histogram_observe(d->obs.m, d->obs.lag_seconds, NULL,
                                  (double)(dl->started_us - dl->created_us) / 1e6);
    if (dl->planned_us > 0)
        metrics_histogram_observe(d->obs.m, d->obs.spacing_error, NULL,
                                  (double)llabs(dl->started_us - dl->planned_us) / 1e6);
    if (c && c->mode == MODE_SPACED) {
        c->last_sent_us = dl->started_us;
        if (c->burst == 1 && dl->started_us + c->period_us > c->tat)
            c->tat = dl->started_us + c->period_us;
    }
    int rc = -ENOENT;
    if (c && d->http && !d->draining_aborted) {
        char webhook_id[40];
        snprintf(webhook_id, sizeof webhook_id, "msg_%" PRId64, dl->item_id);
        http_request req = {
            .url = c->url,
            .body = body,
            .body_len = body_len,
            .webhook_id = webhook_id,
            .timestamp_s = dl->started_us / 1000000,
            .secrets = (const char *const *)c->secrets,
            .n_secrets = c->n_secrets,
            .connect_timeout_ms =
                c->connect_timeout_ms > 0 ? c->connect_timeout_ms : d->cfg.connect_timeout_ms,
            .total_timeout_ms =
                c->request_timeout_ms > 0 ? c->request_timeout_ms : d->cfg.request_timeout_ms};
        rc = http_send(d->http, &req, on_delivery_done, dl);
    }
    if (rc != 0) {
        bool gone = !c || !d->http || d->draining_aborted;
        http_result fake = {.error_class = gone ? "aborted" : "internal",
                            .error = gone ? "not sent (customer deleted or shutting down)"
                                          : "could not start the request"};
        on_delivery_done(&fake, dl);
    }
}

static void on_send_timer(uv_timer_t *t)
{
    delivery *dl = t->data;
    /* An earlier send of this customer went out late: keep the gap. */
    int64_t wait_us = earliest_send(customer_get(dl->d, dl->customer_id), 0) - now_us();
    if (wait_us >= 1000) {
        uv_timer_start(&dl->send_timer, on_send_timer, (uint64_t)(wait_us / 1000), 0);
        return;
    }
    char *body = dl->body;
    size_t len = dl->body_len;
    dl->body = NULL;
    send_delivery(dl->d, dl, body, len);
    free(body);
}

static void start_delivery(dispatcher *d, PGresult *res, int r, int64_t token, int64_t send_at)
{
    delivery *dl = calloc(1, sizeof *dl);
    if (!dl || !(dl->carrier = strdup(PQgetvalue(res, r, 3)))) {
        free(dl);
        LOG_ERROR("out_of_memory", LOG_S("where", "delivery"));
        return; /* the lease expires and the item comes back */
    }
    dl->d = d;
    dl->item_id = strtoll(PQgetvalue(res, r, 1), NULL, 10);
    dl->customer_id = strtoll(PQgetvalue(res, r, 2), NULL, 10);
    dl->attempt = atoi(PQgetvalue(res, r, 4));
    dl->max_attempts = atoi(PQgetvalue(res, r, 5));
    dl->token = token;
    dl->created_us = strtoll(PQgetvalue(res, r, 8), NULL, 10);
    customer *c = customer_get(d, dl->customer_id);

    /* Count it in flight before sending: a synchronous failure path still decrements once. */
    dl->next = d->deliveries;
    if (d->deliveries)
        d->deliveries->prev = dl;
    d->deliveries = dl;
    d->in_flight++;
    carrier_state *cs = carrier_get(d, dl->carrier);
    if (cs)
        cs->in_flight++;
    if (c)
        dl->host = c->host; /* counted in flight there once the request is actually sent */
    if (c) {
        c->in_flight++;
        if (c->breaker == BREAKER_HALF_OPEN && !c->probe_in_flight) {
            c->probe_in_flight = true;
            dl->probe = true;
        }
    }

    send_at = earliest_send(c, send_at);
    if (c && c->mode == MODE_SPACED)
        dl->planned_us = send_at;
    int64_t wait_us = send_at - now_us();
    if (wait_us >= 1000 && c) {
        dl->body_len = (size_t)PQgetlength(res, r, 7);
        dl->body = malloc(dl->body_len + 1);
        if (dl->body && uv_timer_init(d->loop, &dl->send_timer) == 0) {
            memcpy(dl->body, PQgetvalue(res, r, 7), dl->body_len + 1);
            dl->timer_used = true;
            dl->send_timer.data = dl;
            uv_update_time(d->loop);
            uv_timer_start(&dl->send_timer, on_send_timer, (uint64_t)(wait_us / 1000), 0);
            return;
        }
        free(dl->body);
        dl->body = NULL;
    }
    send_delivery(d, dl, PQgetvalue(res, r, 7), (size_t)PQgetlength(res, r, 7));
}

/* ---- claim rounds -------------------------------------------------------------------------- */

static void on_claim_timer(uv_timer_t *t);

static void arm_claim_timer(dispatcher *d)
{
    if (d->role != ROLE_LEADER || d->claiming || d->shutting_down)
        return;
    if (d->in_flight >= d->cfg.max_in_flight) {
        /* Full: the next delivery to complete re-arms. */
        uv_timer_stop(&d->claim_timer);
        return;
    }
    int64_t id, due;
    if (!sched_heap_peek(&d->heap, &id, &due)) {
        uv_timer_stop(&d->claim_timer);
        return;
    }
    int64_t wait_us = due - now_us();
    uint64_t delay_ms = wait_us <= 0 ? 0 : (uint64_t)((wait_us + 999) / 1000);
    uv_update_time(d->loop);
    uv_timer_start(&d->claim_timer, on_claim_timer, delay_ms, 0);
}

typedef struct claim_params {
    strbuf pair_cust, pair_carrier, pair_n, cust, cust_n, carrier, carrier_budget;
    strbuf fr_cust, fr_base, fr_period, fr_credit;
} claim_params;

static void claim_params_free(claim_params *p)
{
    strbuf *all[] = {&p->pair_cust, &p->pair_carrier, &p->pair_n,         &p->cust,
                     &p->cust_n,    &p->carrier,      &p->carrier_budget, &p->fr_cust,
                     &p->fr_base,   &p->fr_period,    &p->fr_credit};
    for (size_t i = 0; i < PGP_ARRAY_LEN(all); i++)
        strbuf_free(all[i]);
}

static void sep(strbuf *sb)
{
    strbuf_puts(sb, sb->len ? "," : "{");
}

/* Adds one customer's pairs to the round; returns how many pairs it added. */
static int add_customer(dispatcher *d, claim_params *p, hmap *touched, customer *c, int n,
                        int64_t now)
{
    int added = 0;
    carrier_state *held[16];
    size_t n_held = 0;
    /* Least recently served first: the claim lets the customer's carriers take turns in this
     * order (a small insertion sort: customers have few active carriers). */
    size_t order[64], n_order = 0;
    for (size_t i = 0; i < c->n_pairs && n_order < PGP_ARRAY_LEN(order); i++) {
        size_t j = n_order++;
        while (j > 0 && c->pairs[order[j - 1]].served_us > c->pairs[i].served_us) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (size_t o = 0; o < n_order; o++) {
        pair *pr = &c->pairs[order[o]];
        if (pr->next_us > now)
            continue;
        /* Items without a carrier are not subject to carrier caps. */
        carrier_state *cs = pr->carrier[0] ? carrier_get(d, pr->carrier) : NULL;
        if (pr->carrier[0] && !cs)
            continue;
        int budget = cs ? carrier_budget(d, cs) : n;
        if (budget <= 0) {
            /* Held back; its items stay due and go first when the carrier has room. */
            if (n_held < PGP_ARRAY_LEN(held))
                held[n_held++] = cs;
            continue;
        }
        if (cs && hmap_put(touched, pr->carrier, strlen(pr->carrier), cs) != 0)
            continue;
        sep(&p->pair_cust);
        strbuf_printf(&p->pair_cust, "%" PRId64, c->id);
        sep(&p->pair_carrier);
        strbuf_array_text(&p->pair_carrier, pr->carrier);
        sep(&p->pair_n);
        strbuf_printf(&p->pair_n, "%d", n < budget ? n : budget);
        added++;
    }
    /* Nothing could go: wait for the first of the blocking carriers to have room. */
    if (added == 0)
        for (size_t i = 0; i < n_held; i++)
            wait_on(&held[i]->waiting, c);
    return added;
}

static void on_claim_result(pgconn *conn, PGresult *res, void *arg);

/* Sends one claim statement for the customers in `r` (already chosen, with limits in ns). */
static void send_claim(dispatcher *d, claim_round *r, claim_params *p, hmap *touched)
{
    size_t pos = 0;
    carrier_state *cs;
    /* Every carrier of the round's pairs: an empty list tells the claim that no item names a
     * carrier, which lets it skip its rankings. */
    while ((cs = hmap_next(touched, &pos)) != NULL) {
        sep(&p->carrier);
        strbuf_array_text(&p->carrier, cs->name);
        sep(&p->carrier_budget);
        strbuf_printf(&p->carrier_budget, "%d", carrier_budget(d, cs));
    }
    strbuf *arrays[] = {&p->pair_cust, &p->pair_carrier, &p->pair_n,         &p->cust,
                        &p->cust_n,    &p->carrier,      &p->carrier_budget, &p->fr_cust,
                        &p->fr_base,   &p->fr_period,    &p->fr_credit};
    for (size_t i = 0; i < PGP_ARRAY_LEN(arrays); i++)
        strbuf_puts(arrays[i], arrays[i]->len ? "}" : "{}");

    char default_budget[16], lease[16], token[24], tick[24];
    snprintf(default_budget, sizeof default_budget, "%d", d->cfg.carrier_max_per_round);
    snprintf(lease, sizeof lease, "%d", d->cfg.lease_seconds);
    snprintf(token, sizeof token, "%" PRId64, r->token);
    snprintf(tick, sizeof tick, "%" PRId64, r->tick);
    const char *params[] = {strbuf_str(&p->pair_cust),
                            strbuf_str(&p->pair_carrier),
                            strbuf_str(&p->pair_n),
                            strbuf_str(&p->cust),
                            strbuf_str(&p->cust_n),
                            strbuf_str(&p->carrier),
                            strbuf_str(&p->carrier_budget),
                            default_budget,
                            lease,
                            token,
                            d->instance,
                            strbuf_str(&p->fr_cust),
                            strbuf_str(&p->fr_base),
                            strbuf_str(&p->fr_period),
                            strbuf_str(&p->fr_credit),
                            r->tick >= 0 ? tick : NULL};
    for (size_t i = 0; i < 15; i++) { /* $16 (the tick) is NULL by design outside ticks */
        if (!params[i]) {
            LOG_ERROR("out_of_memory", LOG_S("where", "claim parameters"));
            free(r);
            return;
        }
    }
    r->sent_ns = uv_hrtime();
    if (pgconn_query_prepared(d->db, sql_q_run_claim, 16, params, on_claim_result, r) != 0) {
        free(r);
        return;
    }
    d->claiming = true;
    d->claim_sent_ns = r->sent_ns;
}

static void run_claim_round(dispatcher *d)
{
    if (d->role != ROLE_LEADER || d->claiming || d->shutting_down)
        return;
    int64_t now = now_us();
    int64_t ids[ROUND_MAX_CUSTOMERS];
    size_t n_ids = sched_heap_pop_due(&d->heap, now, ids, ROUND_MAX_CUSTOMERS);
    if (n_ids == 0) {
        arm_claim_timer(d);
        return;
    }
    claim_round *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->d = d;
    r->tick = -1;
    r->token = fresh_token(d);
    claim_params p = {0};
    hmap touched;
    hmap_init(&touched);
    int room = d->cfg.max_in_flight - d->in_flight;
    for (size_t i = 0; i < n_ids; i++) {
        customer *c = customer_get(d, ids[i]);
        if (!c || c->paused || (c->mode == MODE_BATCH && batch_owed(d, c) == 0))
            continue;
        int n;
        int64_t base = 0;
        if (c->mode == MODE_BATCH) {
            n = batch_owed(d, c); /* the rest of this tick's allowance; frontier untouched */
        } else if (c->mode == MODE_SPACED) {
            /* How many conform now; tat itself moves only by what the claim really got. */
            int64_t probe = c->tat;
            n = gcra_take(&probe, now + LOOKAHEAD_US, c->period_us, c->burst, c->burst);
            base = c->tat == GCRA_TAT_NONE || c->tat < now ? now : c->tat;
        } else {
            n = d->cfg.claim_batch_max;
        }
        if (c->max_in_flight > 0 && c->max_in_flight - c->in_flight < n)
            n = c->max_in_flight - c->in_flight;
        if (n > room)
            n = room;
        if (n > host_room(d, c))
            n = host_room(d, c);
        if (n == 0 && host_room(d, c) == 0 && c->host) {
            wait_on(&c->host->waiting, c); /* woken when a request to the host ends */
            continue;
        }
        n = breaker_allowance(d, c, n, now);
        if (n <= 0 || add_customer(d, &p, &touched, c, n, now) == 0) {
            schedule_customer(d, c);
            continue;
        }
        room -= n;
        host_reserve(c, n);
        sep(&p.cust);
        strbuf_printf(&p.cust, "%" PRId64, c->id);
        sep(&p.cust_n);
        strbuf_printf(&p.cust_n, "%d", n);
        if (c->mode == MODE_SPACED) {
            sep(&p.fr_cust);
            strbuf_printf(&p.fr_cust, "%" PRId64, c->id);
            sep(&p.fr_base);
            strbuf_printf(&p.fr_base, "%" PRId64, base);
            sep(&p.fr_period);
            strbuf_printf(&p.fr_period, "%" PRId64, c->period_us);
            sep(&p.fr_credit);
            strbuf_puts(&p.fr_credit, "NULL");
        }
        c->round_slot = (int)r->n;
        r->ids[r->n] = c->id;
        r->base[r->n] = base;
        r->asked[r->n] = n;
        r->n++;
    }
    host_reservations_end(d, r);
    if (r->n == 0) {
        free(r);
        claim_params_free(&p);
        hmap_free(&touched);
        arm_claim_timer(d);
        return;
    }
    send_claim(d, r, &p, &touched);
    claim_params_free(&p);
    hmap_free(&touched);
}

static void on_claim_timer(uv_timer_t *t)
{
    run_claim_round(t->data);
}

static void run_batch_tick(dispatcher *d, int64_t tick)
{
    int64_t now = now_us();
    claim_round *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->d = d;
    r->tick = tick;
    r->token = fresh_token(d);
    claim_params p = {0};
    hmap touched;
    hmap_init(&touched);
    int room = d->cfg.max_in_flight - d->in_flight;
    /* The batch customers with work, taken from a starting point that moves every tick: when
     * max_in_flight cannot hold every allowance, a different customer misses out each time,
     * never the same ones (found by the soak: a fixed subset starved). */
    size_t n_batch = 0, cap_batch = 0, pos = 0;
    customer **batch = NULL, *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL) {
        if (c->mode != MODE_BATCH || c->paused || c->n_pairs == 0)
            continue;
        if (n_batch == cap_batch) {
            size_t cap = cap_batch ? cap_batch * 2 : 64;
            customer **v = realloc(batch, cap * sizeof *v);
            if (!v)
                break;
            batch = v;
            cap_batch = cap;
        }
        batch[n_batch++] = c;
    }
    /* Room and each host's connections are shared out evenly among the customers due this
     * tick (at least 1 each) instead of first come, first served: a customer rarely has its
     * whole allowance due, and what a share leaves unclaimed is owed and claimed as room
     * frees (found by the soak: 31 customers' phantom allowances of 64 used up max_in_flight
     * and the other 22 on the same host were never reached). */
    size_t n_due = 0;
    for (size_t k = 0; k < n_batch; k++) {
        c = batch[k];
        if (!has_due_pair(c, now))
            continue;
        n_due++;
        if (c->host)
            c->host->tick_due++;
    }
    int room_share = n_due > 0 ? room / (int)(n_due < INT_MAX ? n_due : INT_MAX) : room;
    if (room_share < 1)
        room_share = 1;
    for (size_t k = 0; k < n_batch && r->n < ROUND_MAX_CUSTOMERS; k++) {
        c = batch[(k + (size_t)tick) % n_batch];
        if (!has_due_pair(c, now))
            continue;
        int64_t elapsed = c->have_tick ? tick - c->last_tick : 1;
        if (elapsed <= 0)
            continue; /* this tick was already dispatched (by us or a previous leader) */
        if (room <= 0)
            break; /* the rest keep this tick: not marked, they get it next time */
        double credit = c->credit;
        int allowed = batch_allowance(c->rate, &credit, elapsed, batch_default_cap(c->rate));
        int n = allowed;
        if (c->max_in_flight > 0 && c->max_in_flight - c->in_flight < n)
            n = c->max_in_flight - c->in_flight;
        if (n > room_share)
            n = room_share;
        if (n > room)
            n = room;
        if (c->host && c->host->tick_due > 0) {
            int host_share = (d->cfg.max_host_connections - c->host->in_flight) / c->host->tick_due;
            if (n > (host_share < 1 ? 1 : host_share))
                n = host_share < 1 ? 1 : host_share;
        }
        if (n > host_room(d, c))
            n = host_room(d, c);
        n = breaker_allowance(d, c, n, now);
        batch_refund(&credit, 0);
        if (n > 0)
            add_customer(d, &p, &touched, c, n, now);
        room -= n;
        host_reserve(c, n);
        sep(&p.cust);
        strbuf_printf(&p.cust, "%" PRId64, c->id);
        sep(&p.cust_n);
        strbuf_printf(&p.cust_n, "%d", n);
        sep(&p.fr_cust);
        strbuf_printf(&p.fr_cust, "%" PRId64, c->id);
        sep(&p.fr_base);
        strbuf_puts(&p.fr_base, "NULL");
        sep(&p.fr_period);
        strbuf_puts(&p.fr_period, "NULL");
        sep(&p.fr_credit);
        strbuf_printf(&p.fr_credit, "%.17g", credit);
        c->round_slot = (int)r->n;
        r->ids[r->n] = c->id;
        r->credit[r->n] = credit;
        r->asked[r->n] = n;
        r->allowed[r->n] = allowed;
        r->n++;
    }
    for (size_t k = 0; k < n_batch; k++)
        if (batch[k]->host)
            batch[k]->host->tick_due = 0;
    host_reservations_end(d, r);
    if (r->n == 0) {
        free(r);
    } else {
        LOG_DEBUG("batch_tick", LOG_I("tick", tick), LOG_I("customers", r->n));
        send_claim(d, r, &p, &touched);
    }
    claim_params_free(&p);
    hmap_free(&touched);
    free(batch);
}

static void on_tick_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->role != ROLE_LEADER || d->shutting_down)
        return;
    /* The nearest boundary: libuv may fire a few microseconds before it. */
    int64_t tick = (now_us() / 1000 + d->cfg.batch_tick_ms / 2) / d->cfg.batch_tick_ms;
    if (d->claiming) {
        d->tick_pending = true;
        d->tick_due = tick;
    } else {
        run_batch_tick(d, tick);
    }
    arm_tick_timer(d, tick);
}

static void on_claim_result(pgconn *conn, PGresult *res, void *arg)
{
    claim_round *r = arg;
    dispatcher *d = r->d;
    d->claiming = false;
    d->claim_sent_ns = 0;
    int64_t now = now_us();
    bool ok = res && PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok && res)
        LOG_ERROR("claim_failed", LOG_S("sqlstate", PQresultErrorField(res, PG_DIAG_SQLSTATE)),
                  LOG_S("error", PQresultErrorMessage(res)), LOG_I("retry_in_ms", ERROR_RETRY_MS));
    if (ok) {
        const char *round_label[] = {r->tick >= 0 ? "batch_tick" : "scheduled"};
        metrics_counter_add(d->obs.m, d->obs.claim_rounds, round_label, 1);
        metrics_histogram_observe(d->obs.m, d->obs.claim_seconds, round_label,
                                  (double)(uv_hrtime() - r->sent_ns) / 1e9);
    }

    int claimed = 0, stale = 0;
    if (ok) {
        /* Per customer of the round: how many items came back, and how late the latest went
         * out compared with its slot (a cold start sends after the claim's round trip). */
        int counts[ROUND_MAX_CUSTOMERS] = {0};
        int64_t late[ROUND_MAX_CUSTOMERS] = {0};
        for (int i = 0; i < PQntuples(res); i++) {
            int64_t cid = strtoll(PQgetvalue(res, i, 2), NULL, 10);
            customer *c = customer_get(d, cid);
            if (PQgetvalue(res, i, 0)[0] == 'd') {
                if (!c)
                    continue;
                if (PQgetisnull(res, i, 9))
                    pair_drop(c, PQgetvalue(res, i, 3));
                else {
                    pair *p = pair_find(c, PQgetvalue(res, i, 3));
                    if (p)
                        p->next_us = strtoll(PQgetvalue(res, i, 9), NULL, 10);
                }
                continue;
            }
            claimed++;
            if (strcmp(PQgetvalue(res, i, 6), "t") == 0)
                stale++;
            if (c) {
                static const char *const mode_names[] = {"spaced", "batch", "unlimited"};
                const char *mode_label[] = {mode_names[c->mode]};
                metrics_counter_add(d->obs.m, d->obs.items_claimed, mode_label, 1);
            }
            if (c) {
                pair *served = pair_find(c, PQgetvalue(res, i, 3));
                if (served)
                    served->served_us = now;
            }
            if (c && c->round_slot >= 0 && (size_t)c->round_slot < r->n &&
                r->ids[c->round_slot] == cid)
                counts[c->round_slot]++;
            if (d->shutting_down) {
                /* Claimed while a stop began: give it straight back. */
                final_push(&d->pending,
                           (final_entry){.item_id = strtoll(PQgetvalue(res, i, 1), NULL, 10),
                                         .token = r->token,
                                         .outcome = "release"});
                continue;
            }
            /* Spaced: the j-th item of this customer goes at its GCRA slot (never before now);
             * tat then steps from base by one period per item. */
            int64_t send_at = now;
            if (c && c->mode == MODE_SPACED && c->round_slot >= 0) {
                int slot = c->round_slot;
                int64_t at = r->base[slot] + (int64_t)(counts[slot] - 1) * c->period_us -
                             gcra_tolerance_us(c->period_us, c->burst);
                if (at > send_at)
                    send_at = at;
                /* Late only against a slot at or after the round's base: burst slots before it
                 * are early sends the tolerance allows, not lateness. */
                int64_t due = at > r->base[slot] ? at : r->base[slot];
                if (now - due > late[slot])
                    late[slot] = now - due;
            }
            start_delivery(d, res, i, r->token, send_at);
        }
        for (size_t k = 0; k < r->n; k++) {
            customer *c = customer_get(d, r->ids[k]);
            if (!c)
                continue;
            /* Sent late: the next slot moves by as much, so no gap the receiver sees is shorter
             * than the period. On time (the normal case) the schedule does not drift. */
            if (c->mode == MODE_SPACED && counts[k] > 0)
                c->tat = r->base[k] + (int64_t)counts[k] * c->period_us + late[k];
            if (r->tick >= 0) {
                c->credit = r->credit[k];
                c->last_tick = r->tick;
                c->have_tick = true;
                c->owed = r->allowed[k] - counts[k];
                c->owed_tick = r->tick;
            } else if (c->mode == MODE_BATCH) {
                c->owed -= counts[k];
            }
            /* Whatever held items back (no room, a full host, a carrier's cap), the rest of
             * the allowance is owed while some pair still has due items; a drained customer
             * (every pair answered with its next future time) is owed nothing. */
            if (c->mode == MODE_BATCH && (c->owed < 0 || !has_due_pair(c, now)))
                c->owed = 0;
        }
        d->claimed += claimed;
        d->stale_recoveries += stale;
        metrics_counter_add(d->obs.m, d->obs.stale_recoveries, NULL, stale);
        if (stale > 0)
            LOG_INFO("stale_recovered", LOG_I("items", stale), LOG_I("total", d->stale_recoveries));
        LOG_DEBUG("claimed", LOG_I("items", claimed), LOG_I("customers", (long long)r->n),
                  LOG_I("tick", r->tick));
    }
    for (size_t k = 0; k < r->n; k++) {
        customer *c = customer_get(d, r->ids[k]);
        if (!c)
            continue;
        c->round_slot = -1;
        if (!ok) {
            /* Try again later rather than spin on a failing statement. */
            for (size_t i = 0; i < c->n_pairs; i++)
                if (c->pairs[i].next_us < now + ERROR_RETRY_MS * 1000)
                    c->pairs[i].next_us = now + ERROR_RETRY_MS * 1000;
        }
        schedule_customer(d, c);
    }
    /* The round reserved its hosts' room for what it asked; customers that found a host full
     * of those reservations wait for it. The claim may have got fewer (they were not due),
     * so they look again now rather than at the host's next completion, which might be a
     * long way off (a receiver that hangs). */
    for (size_t k = 0; k < r->n; k++) {
        customer *c = customer_get(d, r->ids[k]);
        if (c && c->host && c->host->waiting.n > 0)
            wake(d, &c->host->waiting);
    }
    free(r);
    if (d->tick_pending && d->role == ROLE_LEADER && !d->shutting_down) {
        d->tick_pending = false;
        run_batch_tick(d, d->tick_due);
    }
    arm_claim_timer(d);
    arm_flush(d);
    maybe_finish_shutdown(d);
}

/* ---- finalisation -------------------------------------------------------------------------- */

static void on_finalize(pgconn *conn, PGresult *res, void *arg);

static void on_flush_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->flushing || d->pending.n == 0 || !pgconn_ready(d->db))
        return;
    strbuf a[10] = {{0}};
    size_t take = d->solo_left > 0 ? 1 : d->pending.n;
    bool all_success = true;
    for (size_t i = 0; i < take && all_success; i++)
        all_success = strcmp(d->pending.v[i].outcome, "success") == 0;
    for (size_t i = 0; i < take; i++) {
        final_entry *e = &d->pending.v[i];
        for (int k = 0; k < 10; k++)
            sep(&a[k]);
        strbuf_printf(&a[0], "%" PRId64, e->item_id);
        strbuf_printf(&a[1], "%" PRId64, e->token);
        strbuf_puts(&a[2], e->outcome);
        strbuf_printf(&a[3], "%" PRId64, e->delay_ms);
        if (e->http_status)
            strbuf_printf(&a[4], "%d", e->http_status);
        else
            strbuf_puts(&a[4], "NULL");
        if (e->error_class)
            strbuf_array_text(&a[5], e->error_class);
        else
            strbuf_puts(&a[5], "NULL");
        if (e->error)
            strbuf_array_text(&a[6], e->error);
        else
            strbuf_puts(&a[6], "NULL");
        strbuf_printf(&a[7], "%" PRId64, e->started_us ? e->started_us : now_us());
        strbuf_printf(&a[8], "%.3f", e->duration_ms);
        if (e->excerpt)
            strbuf_array_text(&a[9], e->excerpt);
        else
            strbuf_puts(&a[9], "NULL");
    }
    const char *params[10];
    bool ok = true;
    for (int k = 0; k < 10; k++) {
        strbuf_puts(&a[k], "}");
        params[k] = strbuf_str(&a[k]);
        ok = ok && params[k];
    }
    if (ok && all_success) {
        /* run_finalize_success.sql takes item, token, status, start, duration, excerpt. */
        const char *sp[6] = {params[0], params[1], params[4], params[7], params[8], params[9]};
        ok = pgconn_query_prepared(d->db, sql_q_run_finalize_success, 6, sp, on_finalize, d) == 0;
    } else if (ok) {
        ok = pgconn_query_prepared(d->db, sql_q_run_finalize, 10, params, on_finalize, d) == 0;
    }
    if (ok) {
        d->flushing = true;
        d->flush_sent_ns = uv_hrtime();
        if (take == d->pending.n) {
            d->sending = d->pending;
            d->pending = (final_list){0};
            d->solo_left = 0;
        } else {
            /* The first entry alone; the rest wait for the next statement. */
            final_push(&d->sending, d->pending.v[0]);
            memmove(d->pending.v, d->pending.v + 1, (d->pending.n - 1) * sizeof *d->pending.v);
            d->pending.n--;
            d->solo_left--;
        }
    }
    for (int k = 0; k < 10; k++)
        strbuf_free(&a[k]);
}

static void arm_flush(dispatcher *d)
{
    if (d->flushing || d->pending.n == 0 || !pgconn_ready(d->db) || d->closing)
        return;
    uint64_t now = uv_hrtime();
    uint64_t wait_ms = d->flush_hold_until_ns > now ? (d->flush_hold_until_ns - now) / 1000000 : 0;
    uv_timer_start(&d->flush_timer, on_flush_timer, wait_ms, 0);
}

/* Errors that say nothing about the statement's data but about the database's state: disk
 * full and other resources (53), cancelled or shutting down (57, incl. statement_timeout),
 * system errors (58), lock or serialization conflicts (40, 55P03), read-only (25006), and
 * connection trouble (08). The batch is kept whole and retried with backoff; splitting it
 * and giving entries up would only turn an outage into redeliveries. */
static bool database_wide_error(const PGresult *res)
{
    const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (!code || strlen(code) != 5)
        return false;
    return strncmp(code, "53", 2) == 0 || strncmp(code, "57", 2) == 0 ||
           strncmp(code, "58", 2) == 0 || strncmp(code, "40", 2) == 0 ||
           strncmp(code, "08", 2) == 0 || strcmp(code, "55P03") == 0 || strcmp(code, "25006") == 0;
}

static void on_finalize(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    d->flushing = false;
    d->flush_sent_ns = 0;
    bool ok = res && PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok && res && database_wide_error(res)) {
        /* Keep every entry, in order, and try again later: 0.25 s doubling to 8 s. */
        int shift = d->flush_errors < 5 ? d->flush_errors : 5;
        uint64_t delay_ms = 250u << shift;
        d->flush_errors++;
        d->flush_hold_until_ns = uv_hrtime() + delay_ms * 1000000u;
        const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        LOG_ERROR(
            "finalize_failed", LOG_S("sqlstate", code), LOG_S("error", PQresultErrorMessage(res)),
            LOG_I("items", (long long)d->sending.n), LOG_I("retry_in_ms", (long long)delay_ms),
            LOG_I("failures_in_a_row", d->flush_errors));
        for (size_t i = 0; i < d->pending.n; i++)
            final_push(&d->sending, d->pending.v[i]);
        free(d->pending.v);
        d->pending = d->sending;
        d->sending = (final_list){0};
        arm_flush(d);
        maybe_finish_shutdown(d);
        return;
    }
    if (!ok) {
        if (res)
            LOG_ERROR(
                "finalize_failed", LOG_S("sqlstate", PQresultErrorField(res, PG_DIAG_SQLSTATE)),
                LOG_S("error", PQresultErrorMessage(res)), LOG_I("items", (long long)d->sending.n));
        /* Lost connection: keep them all for after the reconnect. A statement error: split the
         * batch so one bad entry cannot hold back the others; an entry failing on its own is
         * retried once without its attempt-log text, then given up (its lease expires and the
         * item is delivered again: at-least-once still holds). */
        size_t n = d->sending.n;
        for (size_t i = 0; i < n; i++) {
            final_entry *e = &d->sending.v[i];
            if (res && n == 1 && ++e->failures > 1) {
                LOG_ERROR("finalize_dropped", LOG_I("item", e->item_id),
                          LOG_S("outcome", e->outcome),
                          LOG_S("meaning", "the lease expires and the item is delivered again"));
                final_entry_release(d, e);
                final_entry_free(e);
                continue;
            }
            if (res && n == 1) {
                free(e->excerpt);
                free(e->error);
                e->excerpt = NULL;
                e->error = strdup("(attempt text not storable)");
            }
            final_push(&d->pending, *e);
        }
        if (res && n > 1)
            d->solo_left = n;
        free(d->sending.v);
        d->sending = (final_list){0};
        if (res) {
            d->flush_hold_until_ns = uv_hrtime() + ERROR_RETRY_MS * 1000000ull;
            arm_flush(d);
        }
        return;
    }
    d->flush_errors = 0;
    d->flush_hold_until_ns = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        d->lost_ownership++;
        metrics_counter_add(d->obs.m, d->obs.lost_ownership, NULL, 1);
        LOG_WARN("lost_ownership", LOG_S("item", PQgetvalue(res, i, 0)),
                 LOG_S("meaning", "lease expired and the item was claimed again or is gone"));
    }
    for (size_t i = 0; i < d->sending.n; i++) {
        final_entry_release(d, &d->sending.v[i]);
        final_entry_free(&d->sending.v[i]);
    }
    free(d->sending.v);
    d->sending = (final_list){0};
    arm_flush(d);
    maybe_finish_shutdown(d);
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

/* A leader whose frontier load failed loads it again; everyone else redoes the load and the
 * election from the schema check on. */
static void on_retry_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->shutting_down || !pgconn_ready(d->db))
        return; /* a reconnect reruns the whole chain anyway */
    if (d->role == ROLE_LEADER)
        query_or_log(d, sql_q_run_frontier, 0, NULL, on_frontier, d, "frontier");
    else
        start_load(d);
}

int dispatcher_new(uv_loop_t *loop, const pgp_config *cfg, dispatcher **out, pgp_error *err)
{
    *out = NULL;
    dispatcher *d = calloc(1, sizeof *d);
    if (!d)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    d->loop = loop;
    d->cfg = *cfg;
    if (cfg->instance_name[0]) {
        snprintf(d->instance, sizeof d->instance, "%s", cfg->instance_name);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(d->instance, sizeof d->instance, "%.60s:%d", host, (int)getpid());
    }
    snprintf(d->app_name, sizeof d->app_name, "pgpace:%.55s", d->instance);
    int rc = netcheck_parse_allow(cfg->allow_cidrs, &d->allow, err);
    if (rc != 0) {
        free(d);
        return pgp_error_prefix(err, rc, "[delivery] allow_cidrs");
    }
    if (RAND_bytes((unsigned char *)&d->rng, sizeof d->rng) != 1 || d->rng == 0)
        d->rng = (uint64_t)now_us() | 1;
    hmap_init(&d->customers);
    hmap_init(&d->carriers);
    hmap_init(&d->hosts);
    sched_heap_init(&d->heap);
    rc = obs_init(&d->obs, cfg->metrics_customers, err);
    if (rc != 0) {
        free(d);
        return rc;
    }

    static const char *const channels[] = {"pgpace_enqueue", "pgpace_customer", "pgpace_carrier",
                                           NULL};
    pgconn_options po = {.conninfo = cfg->conninfo,
                         .application_name = d->app_name,
                         .keepalive_idle_s = cfg->keepalive_idle_s,
                         .reconnect_min_ms = 100,
                         .reconnect_max_ms = cfg->reconnect_max_ms,
                         .listen = channels,
                         .on_state = on_db_state,
                         .on_notify = on_notify,
                         .arg = d};
    rc = pgconn_new(loop, &po, &d->db);
    if (rc != 0) {
        free(d);
        return pgp_error_set(err, rc, "cannot create the database connection");
    }
    http_sender_options ho = {.max_connections = cfg->max_connections,
                              .max_host_connections = cfg->max_host_connections,
                              .max_response_bytes = (size_t)cfg->max_response_bytes,
                              .excerpt_bytes = 512,
                              .allow = &d->allow};
    rc = http_sender_new(loop, &ho, &d->http);
    if (rc != 0) {
        pgconn_close(d->db, NULL, NULL);
        obs_free(&d->obs);
        free(d);
        return pgp_error_set(err, rc, "cannot create the HTTP sender");
    }
    if (cfg->http_listen[0]) {
        admin_http_options ao = {.listen = cfg->http_listen,
                                 .enqueue_token = cfg->enqueue_token,
                                 .max_body_bytes = (size_t)cfg->max_body_bytes};
        admin_http_callbacks cb = {.render_metrics = http_render_metrics,
                                   .readiness = http_readiness,
                                   .enqueue = http_enqueue,
                                   .request_done = http_request_done,
                                   .arg = d};
        rc = admin_http_new(loop, &ao, &cb, &d->admin, err);
        if (rc != 0) {
            http_sender_close(d->http, NULL, NULL);
            pgconn_close(d->db, NULL, NULL);
            obs_free(&d->obs);
            free(d);
            return rc; /* the message already names [http] listen */
        }
    }
    uv_timer_t *timers[] = {&d->claim_timer,   &d->tick_timer,     &d->backstop_timer,
                            &d->standby_timer, &d->flush_timer,    &d->drain_timer,
                            &d->metrics_timer, &d->watchdog_timer, &d->retry_timer};
    for (size_t i = 0; i < PGP_ARRAY_LEN(timers); i++) {
        uv_timer_init(loop, timers[i]);
        timers[i]->data = d;
        d->open_handles++;
    }
    *out = d;
    return 0;
}

void dispatcher_start(dispatcher *d)
{
    if ((int64_t)d->cfg.lease_seconds * 1000 <=
        (int64_t)d->cfg.connect_timeout_ms + d->cfg.request_timeout_ms)
        LOG_WARN("lease_shorter_than_request",
                 LOG_I("lease_ms", (long long)d->cfg.lease_seconds * 1000),
                 LOG_I("request_timeout_ms", d->cfg.request_timeout_ms),
                 LOG_S("meaning", "a slow but successful delivery may be claimed and sent again; "
                                  "raise [dispatcher] lease_seconds"));
    LOG_INFO("starting", LOG_S("instance", d->instance), LOG_I("lease_s", d->cfg.lease_seconds),
             LOG_I("batch_tick_ms", d->cfg.batch_tick_ms));
    if (d->admin) {
        pgp_error err;
        if (admin_http_start(d->admin, &err) != 0) {
            LOG_ERROR("http_listen_failed", LOG_S("listen", d->cfg.http_listen),
                      LOG_S("error", err.msg));
            d->exit_status = 1;
            dispatcher_shutdown(d, d->done, d->done_arg);
            return;
        }
        LOG_INFO("http_listening", LOG_S("listen", d->cfg.http_listen),
                 LOG_I("port", admin_http_port(d->admin)));
    }
    uv_timer_start(&d->watchdog_timer, on_watchdog, 1000, 1000);
    pgconn_start(d->db);
}

int dispatcher_reload(dispatcher *d, const pgp_config *cfg, pgp_error *err)
{
    netcheck_allow allow;
    int rc = netcheck_parse_allow(cfg->allow_cidrs, &allow, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "[delivery] allow_cidrs");
    if (strcmp(cfg->conninfo, d->cfg.conninfo) != 0)
        LOG_WARN("reload_needs_restart", LOG_S("key", "database.conninfo"));
    if (strcmp(cfg->instance_name, d->cfg.instance_name) != 0)
        LOG_WARN("reload_needs_restart", LOG_S("key", "dispatcher.instance_name"));
    if (strcmp(cfg->http_listen, d->cfg.http_listen) != 0)
        LOG_WARN("reload_needs_restart", LOG_S("key", "http.listen"));
    char conninfo[sizeof d->cfg.conninfo], instance[sizeof d->cfg.instance_name];
    char listen[sizeof d->cfg.http_listen];
    memcpy(conninfo, d->cfg.conninfo, sizeof conninfo);
    memcpy(instance, d->cfg.instance_name, sizeof instance);
    memcpy(listen, d->cfg.http_listen, sizeof listen);
    bool new_timeout = cfg->statement_timeout_ms != d->cfg.statement_timeout_ms;
    d->cfg = *cfg;
    memcpy(d->cfg.conninfo, conninfo, sizeof conninfo);
    memcpy(d->cfg.instance_name, instance, sizeof instance);
    memcpy(d->cfg.http_listen, listen, sizeof listen);
    /* The sender keeps its own copy of the allow-list: update it in place. */
    d->allow = allow;
    if (d->http)
        http_sender_set_allow(d->http, &d->allow);
    if (d->admin && admin_http_set_token(d->admin, cfg->enqueue_token) != 0)
        LOG_ERROR("reload_token_failed", LOG_S("key", "http.enqueue_token"));
    if (new_timeout && pgconn_ready(d->db))
        send_session_settings(d);
    if (d->role == ROLE_LEADER && !d->shutting_down) {
        arm_tick_timer(d, (now_us() / 1000) / d->cfg.batch_tick_ms);
        uv_timer_start(&d->backstop_timer, on_backstop_timer, (uint64_t)d->cfg.backstop_scan_ms,
                       (uint64_t)d->cfg.backstop_scan_ms);
        arm_claim_timer(d);
    }
    LOG_INFO("config_reloaded", LOG_S("path", cfg->path));
    return 0;
}

void dispatcher_on_exit(dispatcher *d, dispatcher_done_cb done, void *arg)
{
    d->done = done;
    d->done_arg = arg;
}

static void free_everything(dispatcher *d)
{
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL)
        customer_free(c);
    hmap_free(&d->customers);
    pos = 0;
    carrier_state *cs;
    while ((cs = hmap_next(&d->carriers, &pos)) != NULL) {
        free(cs->waiting.ids);
        free(cs->name);
        free(cs);
    }
    hmap_free(&d->carriers);
    pos = 0;
    host_state *h;
    while ((h = hmap_next(&d->hosts, &pos)) != NULL) {
        free(h->waiting.ids);
        free(h->key);
        free(h);
    }
    hmap_free(&d->hosts);
    sched_heap_free(&d->heap);
    for (size_t i = 0; i < d->pending.n; i++)
        final_entry_free(&d->pending.v[i]);
    free(d->pending.v);
    for (size_t i = 0; i < d->sending.n; i++)
        final_entry_free(&d->sending.v[i]);
    free(d->sending.v);
}

static void on_part_closed(dispatcher *d)
{
    if (--d->open_handles > 0)
        return;
    dispatcher_done_cb done = d->done;
    void *arg = d->done_arg;
    int status = d->exit_status;
    LOG_INFO("stopped", LOG_S("instance", d->instance), LOG_I("claimed", d->claimed),
             LOG_I("stale_recoveries", d->stale_recoveries),
             LOG_I("lost_ownership", d->lost_ownership));
    free_everything(d);
    obs_free(&d->obs);
    free(d);
    if (done)
        done(arg, status);
}

static void on_timer_closed(uv_handle_t *h)
{
    on_part_closed(h->data);
}

static void on_db_closed(void *arg)
{
    on_part_closed(arg);
}

static void on_http_closed(void *arg)
{
    on_part_closed(arg);
}

static void on_admin_closed(void *arg)
{
    on_part_closed(arg);
}

static void close_all(dispatcher *d)
{
    if (d->closing)
        return;
    d->closing = true;
    if (d->pending.n > 0)
        LOG_WARN("unfinalised_at_exit", LOG_I("items", (long long)d->pending.n),
                 LOG_S("meaning", "their leases expire and they are delivered again"));
    d->open_handles += 1 + (d->http != NULL); /* pgconn, and the sender unless already closing */
    uv_timer_t *timers[] = {&d->claim_timer,   &d->tick_timer,     &d->backstop_timer,
                            &d->standby_timer, &d->flush_timer,    &d->drain_timer,
                            &d->metrics_timer, &d->watchdog_timer, &d->retry_timer};
    for (size_t i = 0; i < PGP_ARRAY_LEN(timers); i++)
        uv_close((uv_handle_t *)timers[i], on_timer_closed);
    /* The admin server first: a pending HTTP enqueue's answer is dropped with it. */
    if (d->admin) {
        d->open_handles++;
        admin_http_close(d->admin, on_admin_closed, d);
        d->admin = NULL;
    }
    if (d->http)
        http_sender_close(d->http, on_http_closed, d);
    d->http = NULL;
    pgconn_close(d->db, on_db_closed, d);
}

static void maybe_finish_shutdown(dispatcher *d)
{
    if (!d->shutting_down || d->closing)
        return;
    if (d->in_flight > 0 || d->claiming)
        return;
    /* Everything delivered or aborted: wait for the outcomes to be written while the database
     * is reachable; if it is not, leases expire by themselves. */
    if ((d->pending.n > 0 || d->flushing) && pgconn_ready(d->db))
        return;
    close_all(d);
}

static void on_drain_timeout(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->closing)
        return;
    if (d->in_flight > 0 && !d->draining_aborted) {
        d->draining_aborted = true;
        LOG_WARN("drain_timeout", LOG_I("in_flight", d->in_flight),
                 LOG_S("action", "aborting and releasing them"));
        /* Closing the sender aborts every request: each comes back as "aborted" -> release. */
        d->open_handles++;
        http_sender *h = d->http;
        d->http = NULL;
        http_sender_close(h, on_http_closed, d);
        /* Give the release statement a moment, then close regardless. */
        uv_timer_start(&d->drain_timer, on_drain_timeout, 5000, 0);
        return;
    }
    close_all(d);
}

void dispatcher_shutdown(dispatcher *d, dispatcher_done_cb done, void *arg)
{
    if (done)
        dispatcher_on_exit(d, done, arg);
    if (d->shutting_down)
        return;
    d->shutting_down = true;
    (void)!sdnotify_send("STOPPING=1");
    LOG_INFO("shutting_down", LOG_S("instance", d->instance), LOG_I("in_flight", d->in_flight),
             LOG_I("drain_timeout_ms", d->cfg.drain_timeout_ms));
    uv_timer_stop(&d->claim_timer);
    uv_timer_stop(&d->tick_timer);
    uv_timer_stop(&d->backstop_timer);
    uv_timer_stop(&d->standby_timer);
    uv_timer_start(&d->drain_timer, on_drain_timeout, (uint64_t)d->cfg.drain_timeout_ms, 0);
    maybe_finish_shutdown(d);
}
