/* housekeeping.c - the leader's periodic work beside claiming.
 *
 * Owns the backstop, scan and queue-gauge timers, the two sliced passes and the key purge state:
 * - the backstop scan (run_backstop.sql, a pass every backstop_scan_ms) finds work whose NOTIFY
 *   was lost (they are best effort) and feeds a new leader;
 * - the queue gauges of /metrics and the status page's queue counts (run_metrics.sql, a pass
 *   every QUEUE_METRICS_MS); endpoints (0018) are rows like customers, and the pass tells the
 *   metrics registry which customers have endpoints (their own receiver's series then say
 *   endpoint="default", metrics.h) and the status page which have no receiver of their own;
 * - on becoming leader and hourly: partitions for the days ahead, then retention by whole
 *   partitions (attempt log, dead letters, delivered item days); idempotency keys of dropped
 *   item days are deleted afterwards, KEY_PURGE_BATCH per backstop tick, so no statement
 *   deletes millions of rows;
 * - the expiry sweep (run_expire.sql, every EXPIRE_EVERY_MS): queued rows past their deadline
 *   that no delivery holds (paused customers' included) are dead-lettered as 'expired',
 *   EXPIRE_BATCH per statement, and the next batch follows at once while batches come back
 *   full. One statement at a time; one log line per batch (counts only) and
 *   pgpace_expired_total{customer}. Items on the wire are the dispatcher's (delivery.c).
 * - the ordered keys' recheck (run_order_recheck.sql, every ORDER_RECHECK_MS): keys whose head
 *   was deleted while their lock was taken get their next item unparked, and the pairs so made
 *   due are claimed (0020_order_keys.sql: parking).
 *
 * Both passes read every customer (or pair), which at a million customers took seconds in one
 * statement. So a pass is a series of slices, one statement each, continuing from the last row of
 * the slice before; after a slice that took t the next one waits SLICE_PACE x t, so a pass holds
 * at most a tenth of a connection. A new leader's first backstop pass is chained instead (it
 * knows of no work until it has read it). A pass starts its interval after the last one started,
 * or as soon as that one ends when it took longer.
 *
 * The slices go on the leader's read connection (d->read_db, read-only, its own session), not
 * on the claim connection: a slice costs 100-250 ms at 1,000 customers with backlogs, and every
 * claim round sent behind it on one connection waited that long, later than the claim-ahead
 * covers (bench/PACING_PROFILE.md). They only read, so fencing is the claim connection's alone:
 * what they find is used only while leading. While the read connection is down they go on the
 * claim connection as before; a slice lost with the read connection is sent again from the same
 * cursor; a slice of a pass that has since been replaced (a new leadership's) is dropped. A new
 * leader's first backstop pass stays on the claim connection (nothing to delay yet). The read
 * connection is opened when this instance first leads.
 */
#include "internal.h"

#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#define HOUSEKEEPING_EVERY_US (3600LL * 1000000)
#define KEY_PURGE_BATCH       10000
#define QUEUE_METRICS_MS      15000
#define EXPIRE_EVERY_MS       1000
#define EXPIRE_BATCH          1000
/* The ordered keys' recheck: how often, and how many keys per statement. */
#define ORDER_RECHECK_MS   100
#define ORDER_RECHECK_KEYS 1000
/* (customer, carrier) pairs per backstop slice: about 25 ms of the database at 1,000,000. */
#define BACKSTOP_SLICE 5000
/* A paced slice follows the last one after this many times its duration. */
#define SLICE_PACE 9
/* Customers per queue-gauge slice: adapted between these to take about GAUGE_SLICE_TARGET_MS
 * (a customer with a deep queue costs more than one with a few items). */
#define GAUGE_SLICE_FIRST     2000
#define GAUGE_SLICE_MIN       50
#define GAUGE_SLICE_MAX       20000
#define GAUGE_SLICE_TARGET_MS 20
/* A customer's queue is counted up to this many rows per pass (run_metrics.sql). */
#define QUEUE_COUNT_CAP 100000

/* A slice on the wire: whose answer it is (a pass started since makes it void). */
typedef struct slice_ticket {
    dispatcher *d;
    const slice_pass *p;
    uint64_t gen;
} slice_ticket;

/* The connection a slice goes on: the read connection when it is up, else the claim one. */
static pgconn *pass_conn(dispatcher *d)
{
    return d->read_db && pgconn_ready(d->read_db) ? d->read_db : d->db;
}

/* Sends one slice of pass p (run_NAME with params) on conn; 0 when it went, else nothing is
 * out. */
#define SLICE_SEND(d, conn, p, name, params, cb, what)                                             \
    slice_send((d), (conn), (p), sql_q_##name,                                                     \
               (int)sizeof(char[PGP_ARRAY_LEN(params) == sql_q_##name##_nparams ? 1 : -1]) *       \
                   (int)PGP_ARRAY_LEN(params),                                                     \
               (params), (cb), (what))
static int slice_send(dispatcher *d, pgconn *conn, slice_pass *p, const char *sql, int n,
                      const char *const *params, pgconn_result_cb cb, const char *what)
{
    slice_ticket *t = malloc(sizeof *t);
    if (!t) {
        LOG_ERROR("out_of_memory", LOG_S("where", what));
        return -ENOMEM;
    }
    *t = (slice_ticket){.d = d, .p = p, .gen = p->gen};
    p->sent_ns = uv_hrtime();
    int rc = dsp_query_on(d, conn, sql, n, params, cb, t, what);
    if (rc != 0)
        free(t);
    return rc;
}

/* The dispatcher of a slice's answer, or NULL when the answer is void (its pass was replaced).
 * Frees the ticket. */
static dispatcher *slice_answered(void *arg)
{
    slice_ticket *t = arg;
    dispatcher *d = t->gen == t->p->gen ? t->d : NULL;
    free(t);
    return d;
}

/* A slice's answer was lost with its connection. The claim connection's loss ends the
 * leadership (the next one starts passes of its own): the pass ends. The read connection's
 * does not: the same slice again shortly, from the same cursor, on whichever connection is up. */
#define SLICE_RETRY_MS 100
static bool slice_retry(dispatcher *d, pgconn *conn)
{
    return conn != d->db && is_leading(d);
}

/* Milliseconds since the slice out was sent. */
static double slice_ms(const slice_pass *p)
{
    return (double)(uv_hrtime() - p->sent_ns) / 1e6;
}

/* When the next slice of a pass may go: at once when chained, else after SLICE_PACE times the
 * last one's duration (whole milliseconds, at least 1). */
static uint64_t slice_wait_ms(const slice_pass *p, double took_ms)
{
    if (p->chained)
        return 0;
    double ms = took_ms * SLICE_PACE;
    return ms < 1 ? 1 : (uint64_t)ms;
}

/* The pass ended: the next one starts `every_ms` after this one started, or now. */
static uint64_t next_pass_ms(const slice_pass *p, int64_t every_ms)
{
    int64_t left = p->started_us / 1000 + every_ms - now_us() / 1000;
    return left > 0 ? (uint64_t)left : 0;
}

static void backstop_slice(dispatcher *d);
static void backstop_scan(dispatcher *d, bool chained);

static void on_scan_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (is_leading(d) && d->backstop.running)
        backstop_slice(d);
}

static void on_backstop(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = slice_answered(arg);
    if (!d)
        return;
    slice_pass *p = &d->backstop;
    if (!res) {
        if (slice_retry(d, conn))
            uv_timer_start(&d->timers[TIMER_SCAN], on_scan_timer, SLICE_RETRY_MS, 0);
        else
            p->running = false; /* the next leadership starts a pass of its own */
        return;
    }
    double took = slice_ms(p);
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_BACKSTOP_NCOLS, "backstop")) {
        LOG_ERROR("backstop_failed", LOG_S("error", PQresultErrorMessage(res)));
        p->running = false; /* the next pass starts over */
        return;
    }
    int64_t now = now_us();
    int n = PQntuples(res);
    for (int r = 0; r < n; r++) {
        backstop_row row;
        backstop_row_parse(res, r, &row);
        customer *c = customer_get(d, row.customer_id);
        if (!c) {
            leader_reload_customer(d, row.customer_id);
            continue;
        }
        if (!row.due && !row.has_next)
            continue;
        pair_note(c, row.carrier, row.due ? now : row.next_us);
        customer_schedule(d, c);
    }
    claim_arm(d);
    p->slices++;
    p->rows += n;
    if (n < p->slice || !is_leading(d)) {
        /* A new leader's first pass (chained) is worth a line; the periodic ones at debug. */
        if (p->chained)
            LOG_INFO("backstop_pass", LOG_I("pairs", p->rows), LOG_I("slices", p->slices),
                     LOG_I("ms", (now - p->started_us) / 1000));
        else
            LOG_DEBUG("backstop_pass", LOG_I("pairs", p->rows), LOG_I("slices", p->slices),
                      LOG_I("ms", (now - p->started_us) / 1000));
        p->running = false;
        p->chained = false;
        if (p->rerun && is_leading(d)) {
            /* Asked for after this pass had passed the customers it was asked for. */
            p->rerun = false;
            backstop_scan(d, false);
        }
        return;
    }
    /* The next slice starts after this one's last pair. */
    backstop_row last;
    backstop_row_parse(res, n - 1, &last);
    char *carrier = strdup(last.carrier);
    if (!carrier) {
        p->running = false;
        return;
    }
    free(p->after_carrier);
    p->after_carrier = carrier;
    p->after_id = last.customer_id;
    /* Started after claim_arm's timer: a claim for what this slice found goes first. */
    uv_timer_start(&d->timers[TIMER_SCAN], on_scan_timer, slice_wait_ms(p, took), 0);
}

static void backstop_slice(dispatcher *d)
{
    slice_pass *p = &d->backstop;
    char after[24], limit[16];
    snprintf(after, sizeof after, "%" PRId64, p->after_id);
    snprintf(limit, sizeof limit, "%d", p->slice);
    const char *params[] = {[SQL_RUN_BACKSTOP_P_AFTER_CUSTOMER_ID] = after,
                            [SQL_RUN_BACKSTOP_P_AFTER_CARRIER] =
                                p->after_carrier ? p->after_carrier : "",
                            [SQL_RUN_BACKSTOP_P_PAIRS] = limit};
    /* A new leader's first pass on the claim connection: it has nothing to claim yet that the
     * slices could delay, and it must not depend on the read connection to find its work. */
    pgconn *conn = p->chained ? d->db : pass_conn(d);
    if (SLICE_SEND(d, conn, p, run_backstop, params, on_backstop, "backstop scan") != 0)
        p->running = false;
}

/* Starts a backstop pass unless one is under way; chained: its slices follow one another. */
static void backstop_scan(dispatcher *d, bool chained)
{
    slice_pass *p = &d->backstop;
    if (p->running) {
        p->chained = p->chained || chained;
        return;
    }
    free(p->after_carrier);
    *p = (slice_pass){.running = true,
                      .chained = chained,
                      .gen = p->gen + 1,
                      .after_id = INT64_MIN,
                      .slice = BACKSTOP_SLICE,
                      .started_us = now_us()};
    backstop_slice(d);
}

static void on_retention(pgconn *conn, PGresult *res, void *arg)
{
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        !rows_shape_ok(res, SQL_RUN_RETENTION_NCOLS, "retention")) {
        LOG_WARN("retention_failed", LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    long long dropped = row_i64(res, 0, SQL_RUN_RETENTION_C_DROPPED);
    if (dropped > 0)
        LOG_INFO("retention", LOG_I("partitions_dropped", dropped));
}

void housekeeping_begin(dispatcher *d)
{
    d->housekeeping_at_us = now_us();
    DSP_QUERY0(d, run_partitions, dsp_on_ignored, NULL, "partitions");
    char days[16], dead_days[16], item_days[16];
    snprintf(days, sizeof days, "%d", d->cfg.attempt_retention_days);
    snprintf(dead_days, sizeof dead_days, "%d", d->cfg.dead_letter_retention_days);
    snprintf(item_days, sizeof item_days, "%d", d->cfg.item_retention_days);
    const char *params[] = {[SQL_RUN_RETENTION_P_ATTEMPT_DAYS] = days,
                            [SQL_RUN_RETENTION_P_DEAD_LETTER_DAYS] = dead_days,
                            [SQL_RUN_RETENTION_P_ITEM_DAYS] = item_days};
    DSP_QUERY(d, run_retention, params, on_retention, NULL, "retention");
    if (d->key_purge == KEY_PURGE_IDLE)
        d->key_purge = KEY_PURGE_WANTED;
}

static void on_key_purge(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res) {
        d->key_purge = KEY_PURGE_WANTED; /* connection lost: the next tick tries again */
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        !rows_shape_ok(res, SQL_RUN_KEY_PURGE_NCOLS, "key purge")) {
        /* Left for the next housekeeping run rather than retried every tick. */
        d->key_purge = KEY_PURGE_IDLE;
        LOG_WARN("key_purge_failed", LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    long long deleted = row_i64(res, 0, SQL_RUN_KEY_PURGE_C_DELETED);
    d->key_purge = deleted >= KEY_PURGE_BATCH ? KEY_PURGE_WANTED : KEY_PURGE_IDLE;
    if (deleted > 0)
        LOG_INFO("idempotency_keys_purged", LOG_I("keys", deleted));
}

static void on_backstop_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (!is_leading(d))
        return;
    backstop_scan(d, false);
    if (now_us() - d->housekeeping_at_us > HOUSEKEEPING_EVERY_US)
        housekeeping_begin(d);
    if (d->key_purge == KEY_PURGE_WANTED) {
        char batch[16];
        snprintf(batch, sizeof batch, "%d", KEY_PURGE_BATCH);
        const char *params[] = {[SQL_RUN_KEY_PURGE_P_BATCH] = batch};
        if (DSP_QUERY(d, run_key_purge, params, on_key_purge, d, "key purge") == 0)
            d->key_purge = KEY_PURGE_RUNNING;
    }
}

/* Whether the customer's gauges have their own series (cached: it never changes once known). */
static bool gauges_kept(dispatcher *d, customer *c)
{
    if (c->metrics_kept == 0)
        c->metrics_kept = metrics_customer_kept(d->obs.m, c->name) ? 1 : -1;
    return c->metrics_kept > 0;
}

/* The end of a queue-gauge pass: the status page's totals, and the _other series of the
 * per-customer gauges, from every customer's latest counts (one pass over them in memory). The
 * breaker and effective-rate gauges are folded the same way: only the customers with their own
 * series are set as they change (metrics.h, owner_folds). */
static void gauges_totals(dispatcher *d, int64_t at)
{
    double due = 0, dead = 0, o_due = 0, o_in_flight = 0, o_rate = 0, o_breaker = 0;
    double o_waiting = 0, o_blocked = 0;
    int64_t o_oldest = 0, o_blocked_since = 0;
    size_t folded = 0, pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL) {
        due += (double)c->stat_due;
        dead += (double)c->stat_dead;
        if (gauges_kept(d, c))
            continue;
        folded++;
        o_due += (double)c->stat_due;
        o_in_flight += (double)c->stat_in_flight;
        if (c->stat_oldest_due_us > 0 && (o_oldest == 0 || c->stat_oldest_due_us < o_oldest))
            o_oldest = c->stat_oldest_due_us;
        o_waiting += (double)c->stat_waiting;
        o_blocked += (double)c->stat_blocked_keys;
        if (c->stat_blocked_since_us > 0 &&
            (o_blocked_since == 0 || c->stat_blocked_since_us < o_blocked_since))
            o_blocked_since = c->stat_blocked_since_us;
        if (c->mode != MODE_UNLIMITED)
            o_rate += customer_effective_rate(c);
        o_breaker += (double)c->breaker.state;
    }
    status_totals_note(d, due, dead + d->gauges.unloaded_dead, at);
    if (folded == 0)
        return;
    const char *other[] = {METRICS_OTHER_CUSTOMER};
    metrics_gauge_set(d->obs.m, d->obs.queue_due, other, o_due);
    metrics_gauge_set(d->obs.m, d->obs.queue_in_flight, other, o_in_flight);
    metrics_gauge_set(d->obs.m, d->obs.oldest_due_age, other,
                      o_oldest > 0 ? (double)(at - o_oldest) / 1e6 : 0);
    metrics_gauge_set(d->obs.m, d->obs.effective_rate, other, o_rate);
    metrics_gauge_set(d->obs.m, d->obs.breaker_state, other, o_breaker);
    metrics_gauge_set(d->obs.m, d->obs.order_waiting, other, o_waiting);
    metrics_gauge_set(d->obs.m, d->obs.order_blocked, other, o_blocked);
    metrics_gauge_set(d->obs.m, d->obs.order_blocked_age, other,
                      o_blocked_since > 0 ? (double)(at - o_blocked_since) / 1e6 : 0);
}

static void gauges_slice(dispatcher *d);

static void on_metrics_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (!is_leading(d))
        return;
    slice_pass *p = &d->gauges;
    if (!p->running) {
        int slice = p->slice > 0 ? p->slice : GAUGE_SLICE_FIRST; /* kept from the last pass */
        *p = (slice_pass){.running = true,
                          .gen = p->gen + 1,
                          .after_id = INT64_MIN,
                          .slice = slice,
                          .started_us = now_us()};
    }
    gauges_slice(d);
}

static void on_queue_metrics(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = slice_answered(arg);
    if (!d)
        return;
    slice_pass *p = &d->gauges;
    uv_timer_t *t = &d->timers[TIMER_METRICS];
    if (!res) {
        if (slice_retry(d, conn))
            uv_timer_start(t, on_metrics_timer, SLICE_RETRY_MS, 0);
        else
            p->running = false;
        return;
    }
    double took = slice_ms(p);
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_METRICS_NCOLS, "queue metrics")) {
        LOG_WARN("queue_metrics_failed", LOG_S("error", PQresultErrorMessage(res)));
        p->running = false;
        if (is_leading(d))
            uv_timer_start(t, on_metrics_timer, QUEUE_METRICS_MS, 0);
        return;
    }
    int64_t at = now_us();
    int n = PQntuples(res);
    for (int r = 0; r < n; r++) {
        metrics_row row;
        metrics_row_parse(res, r, &row);
        status_counts_note(d, &row, at);
        if (metrics_customer_endpoints(d->obs.m, row.customer, row.has_endpoints) != 0)
            LOG_ERROR("out_of_memory", LOG_S("where", "metrics endpoints"));
        customer *c = customer_get(d, row.customer_id);
        if (c)
            c->stat_in_flight = (int64_t)row.in_flight;
        if (!row.receiver) {
            /* Nothing is ever queued to it (its events are its endpoints' deliveries): no
             * series; its dead letters count in the page's total and its customer's row. */
            p->unloaded_dead += row.dead;
            status_tenant_note(d, &row, p->started_us);
        } else if (!c || gauges_kept(d, c)) {
            const char *labels[] = {row.customer};
            metrics_gauge_set(d->obs.m, d->obs.queue_due, labels, row.due);
            metrics_gauge_set(d->obs.m, d->obs.queue_in_flight, labels, row.in_flight);
            metrics_gauge_set(d->obs.m, d->obs.oldest_due_age, labels, row.oldest_due_age_s);
            metrics_gauge_set(d->obs.m, d->obs.order_waiting, labels, row.waiting);
            metrics_gauge_set(d->obs.m, d->obs.order_blocked, labels, row.blocked_keys);
            metrics_gauge_set(d->obs.m, d->obs.order_blocked_age, labels, row.oldest_blocked_age_s);
        }
        if (r == 0) { /* the table's vacuum state is on every row */
            metrics_gauge_set(d->obs.m, d->obs.queue_dead_tuples, NULL, row.dead_tuples);
            metrics_gauge_set(d->obs.m, d->obs.queue_vacuum_age, NULL, row.vacuum_age_s);
        }
        if (r == n - 1)
            p->after_id = row.customer_id;
    }
    p->slices++;
    p->rows += n;
    bool full = n >= p->slice;
    /* Adapt the slice to about GAUGE_SLICE_TARGET_MS (a full one only: a short last slice says
     * nothing of the rate). */
    if (took > 2 * GAUGE_SLICE_TARGET_MS && p->slice > GAUGE_SLICE_MIN)
        p->slice = p->slice / 2 > GAUGE_SLICE_MIN ? p->slice / 2 : GAUGE_SLICE_MIN;
    else if (full && took < GAUGE_SLICE_TARGET_MS / 2.0 && p->slice < GAUGE_SLICE_MAX)
        p->slice = p->slice * 2 < GAUGE_SLICE_MAX ? p->slice * 2 : GAUGE_SLICE_MAX;
    if (!is_leading(d)) {
        p->running = false;
        return;
    }
    if (full) {
        uv_timer_start(t, on_metrics_timer, slice_wait_ms(p, took), 0);
        return;
    }
    gauges_totals(d, at);
    status_tenants_sweep(d, p->started_us);
    p->running = false;
    LOG_DEBUG("queue_gauges", LOG_I("customers", p->rows), LOG_I("slices", p->slices),
              LOG_I("ms", (at - p->started_us) / 1000), LOG_I("slice", p->slice));
    uv_timer_start(t, on_metrics_timer, next_pass_ms(p, QUEUE_METRICS_MS), 0);
}

static void gauges_slice(dispatcher *d)
{
    slice_pass *p = &d->gauges;
    char after[24], limit[16], cap[16];
    snprintf(after, sizeof after, "%" PRId64, p->after_id);
    snprintf(limit, sizeof limit, "%d", p->slice);
    snprintf(cap, sizeof cap, "%d", QUEUE_COUNT_CAP);
    const char *params[] = {[SQL_RUN_METRICS_P_AFTER_CUSTOMER_ID] = after,
                            [SQL_RUN_METRICS_P_CUSTOMERS] = limit,
                            [SQL_RUN_METRICS_P_COUNT_CAP] = cap};
    if (SLICE_SEND(d, pass_conn(d), p, run_metrics, params, on_queue_metrics, "queue metrics") !=
        0) {
        p->running = false;
        uv_timer_start(&d->timers[TIMER_METRICS], on_metrics_timer, QUEUE_METRICS_MS, 0);
    }
}

static void expire_sweep(dispatcher *d);

static void on_expire(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    d->expire_running = false;
    if (!res)
        return; /* connection lost: the timer tries again */
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_EXPIRE_NCOLS, "expiry sweep")) {
        LOG_WARN("expire_failed", LOG_S("sqlstate", PQresultErrorField(res, PG_DIAG_SQLSTATE)),
                 LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    long long total = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        long long n = row_i64(res, r, SQL_RUN_EXPIRE_C_EXPIRED);
        const char *name = PQgetisnull(res, r, SQL_RUN_EXPIRE_C_CUSTOMER)
                               ? "_unknown"
                               : PQgetvalue(res, r, SQL_RUN_EXPIRE_C_CUSTOMER);
        const char *labels[] = {name};
        metrics_counter_add(d->obs.m, d->obs.expired, labels, (double)n);
        total += n;
    }
    if (total == 0)
        return;
    LOG_INFO("items_expired", LOG_I("items", total), LOG_I("customers", PQntuples(res)),
             LOG_S("meaning", "not sent by their deadline: dead-lettered as 'expired'"));
    if (total >= EXPIRE_BATCH)
        expire_sweep(d); /* more are waiting: the next batch now, not in a second */
}

static void expire_sweep(dispatcher *d)
{
    if (d->expire_running || !is_leading(d))
        return;
    char batch[16];
    snprintf(batch, sizeof batch, "%d", EXPIRE_BATCH);
    const char *params[] = {[SQL_RUN_EXPIRE_P_BATCH] = batch};
    if (DSP_QUERY(d, run_expire, params, on_expire, d, "expiry sweep") == 0)
        d->expire_running = true;
}

static void on_expire_timer(uv_timer_t *t)
{
    expire_sweep(t->data);
}

static void order_recheck(dispatcher *d);

static void on_order_recheck(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    d->order_recheck_running = false;
    if (!res)
        return; /* connection lost: the timer tries again */
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_ORDER_RECHECK_NCOLS, "ordered keys' recheck")) {
        LOG_WARN("order_recheck_failed", LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    int n = PQntuples(res);
    if (n == 0 || !is_leading(d))
        return;
    int64_t now = now_us();
    for (int r = 0; r < n; r++) {
        int64_t id = row_i64(res, r, SQL_RUN_ORDER_RECHECK_C_CUSTOMER_ID);
        customer *c = customer_get(d, id);
        if (!c)
            continue;
        pair_note(c, PQgetvalue(res, r, SQL_RUN_ORDER_RECHECK_C_CARRIER), now);
        customer_schedule(d, c);
    }
    claim_arm(d);
    if (n >= ORDER_RECHECK_KEYS)
        order_recheck(d);
}

static void order_recheck(dispatcher *d)
{
    if (d->order_recheck_running || !is_leading(d))
        return;
    char keys[16];
    snprintf(keys, sizeof keys, "%d", ORDER_RECHECK_KEYS);
    const char *params[] = {[SQL_RUN_ORDER_RECHECK_P_MAX_KEYS] = keys};
    if (DSP_QUERY(d, run_order_recheck, params, on_order_recheck, d, "ordered keys' recheck") == 0)
        d->order_recheck_running = true;
}

static void on_order_timer(uv_timer_t *t)
{
    order_recheck(t->data);
}

void housekeeping_restart_timers(dispatcher *d, bool scan_now)
{
    if (!uv_is_active((uv_handle_t *)&d->timers[TIMER_ORDER]))
        uv_timer_start(&d->timers[TIMER_ORDER], on_order_timer, ORDER_RECHECK_MS, ORDER_RECHECK_MS);
    if (!uv_is_active((uv_handle_t *)&d->timers[TIMER_EXPIRE]))
        uv_timer_start(&d->timers[TIMER_EXPIRE], on_expire_timer, EXPIRE_EVERY_MS, EXPIRE_EVERY_MS);
    if (!d->read_started) {
        /* Opened on first leading: a standby holds no session for passes it does not run, and
         * a session check (leader.c) never waits behind it for a pooler's session. */
        d->read_started = true;
        pgconn_start(d->read_db);
    }
    if (scan_now) {
        /* A new leadership: what a pass of the last one was doing is void (its statements
         * failed with the connection), and this one knows of no work until it has scanned. */
        uv_timer_stop(&d->timers[TIMER_SCAN]);
        d->backstop.running = false;
        d->gauges.running = false;
        d->gauges.gen++; /* a slice still out on the read connection is the last one's */
        backstop_scan(d, true);
        uv_timer_start(&d->timers[TIMER_METRICS], on_metrics_timer, 0, 0);
    }
    uv_timer_start(&d->timers[TIMER_BACKSTOP], on_backstop_timer, (uint64_t)d->cfg.backstop_scan_ms,
                   (uint64_t)d->cfg.backstop_scan_ms);
}

void housekeeping_scan_soon(dispatcher *d)
{
    if (!is_leading(d))
        return;
    if (d->backstop.running)
        d->backstop.rerun = true; /* the pass under way may be past what is missing */
    else
        backstop_scan(d, false);
}

/* The read connection: on every connect its session is made read-only (a pass cannot write,
 * whoever leads) with the claim connection's JIT and statement_timeout settings. */
void housekeeping_read_session(dispatcher *d)
{
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%d", d->cfg.statement_timeout_ms);
    const char *params[] = {[SQL_RUN_SESSION_P_STATEMENT_TIMEOUT_MS] = timeout};
    DSP_QUERY_ON(d, d->read_db, run_session, params, dsp_on_ignored, NULL, "read session settings");
    (void)!dsp_query_on(d, d->read_db, sql_q_run_read_only, 0, NULL, dsp_on_ignored, NULL,
                        "read session read-only");
}

void housekeeping_on_read_db_state(pgconn *conn, pgconn_state state, void *arg)
{
    dispatcher *d = arg;
    if (state == PGCONN_READY) {
        housekeeping_read_session(d);
        return;
    }
    if (is_leading(d))
        LOG_WARN("read_connection_lost",
                 LOG_S("meaning", "the backstop and queue-gauge slices go on the claim "
                                  "connection until it is back"));
}
