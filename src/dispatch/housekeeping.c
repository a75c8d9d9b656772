/* housekeeping.c - the leader's periodic work beside claiming.
 *
 * Owns the backstop and queue-gauge timers and the key purge state:
 * - the backstop scan (run_backstop.sql, every backstop_scan_ms) finds work whose NOTIFY was
 *   lost (they are best effort) and feeds a new leader;
 * - on becoming leader and hourly: partitions for the days ahead, then retention by whole
 *   partitions (attempt log, dead letters, delivered item days); idempotency keys of dropped
 *   item days are deleted afterwards, KEY_PURGE_BATCH per backstop tick, so no statement
 *   deletes millions of rows;
 * - the queue gauges of /metrics, every QUEUE_METRICS_MS;
 * - the expiry sweep (run_expire.sql, every EXPIRE_EVERY_MS): queued rows past their deadline
 *   that no delivery holds (paused customers' included) are dead-lettered as 'expired',
 *   EXPIRE_BATCH per statement, and the next batch follows at once while batches come back
 *   full. One statement at a time; one log line per batch (counts only) and
 *   pgpace_expired_total{customer}. Items on the wire are the dispatcher's (delivery.c).
 */
#include "internal.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>

#define HOUSEKEEPING_EVERY_US (3600LL * 1000000)
#define KEY_PURGE_BATCH       10000
#define QUEUE_METRICS_MS      15000
#define EXPIRE_EVERY_MS       1000
#define EXPIRE_BATCH          1000

static void on_backstop(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_BACKSTOP_NCOLS, "backstop")) {
        LOG_ERROR("backstop_failed", LOG_S("error", PQresultErrorMessage(res)));
        return;
    }
    int64_t now = now_us();
    for (int r = 0; r < PQntuples(res); r++) {
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
}

static void backstop_scan(dispatcher *d)
{
    DSP_QUERY0(d, run_backstop, on_backstop, d, "backstop scan");
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
    backstop_scan(d);
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

static void on_queue_metrics(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_METRICS_NCOLS, "queue metrics"))
        return;
    double due = 0, dead = 0;
    int64_t at = now_us();
    for (int r = 0; r < PQntuples(res); r++) {
        metrics_row row;
        metrics_row_parse(res, r, &row);
        due += row.due;
        dead += row.dead;
        status_counts_note(d, &row, at);
        const char *labels[] = {row.customer};
        metrics_gauge_set(d->obs.m, d->obs.queue_due, labels, row.due);
        metrics_gauge_set(d->obs.m, d->obs.queue_in_flight, labels, row.in_flight);
        metrics_gauge_set(d->obs.m, d->obs.oldest_due_age, labels, row.oldest_due_age_s);
        if (r == 0) { /* the table's vacuum state is on every row */
            metrics_gauge_set(d->obs.m, d->obs.queue_dead_tuples, NULL, row.dead_tuples);
            metrics_gauge_set(d->obs.m, d->obs.queue_vacuum_age, NULL, row.vacuum_age_s);
        }
    }
    status_totals_note(d, due, dead, at);
}

static void on_metrics_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (is_leading(d))
        DSP_QUERY0(d, run_metrics, on_queue_metrics, d, "queue metrics");
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

void housekeeping_restart_timers(dispatcher *d, bool scan_now)
{
    if (!uv_is_active((uv_handle_t *)&d->timers[TIMER_EXPIRE]))
        uv_timer_start(&d->timers[TIMER_EXPIRE], on_expire_timer, EXPIRE_EVERY_MS, EXPIRE_EVERY_MS);
    if (scan_now) {
        backstop_scan(d);
        uv_timer_start(&d->timers[TIMER_METRICS], on_metrics_timer, 0, QUEUE_METRICS_MS);
    }
    uv_timer_start(&d->timers[TIMER_BACKSTOP], on_backstop_timer, (uint64_t)d->cfg.backstop_scan_ms,
                   (uint64_t)d->cfg.backstop_scan_ms);
}
