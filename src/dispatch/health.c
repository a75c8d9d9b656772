/* health.c - the leader's side of customers' health lifecycle and operator events.
 *
 * Owns TIMER_HEALTH and the operator-event pipeline (dispatcher.events_*):
 * - every [health] check_interval, pgpace.health_check disables customers whose deliveries
 *   have all failed for disable_after (and disable_min_attempts attempts) and records
 *   `breaker_open` for breakers open longer than breaker_event_after (run_health.sql);
 * - events (rows of pgpace.event, written by SQL wherever a lifecycle change happens) are
 *   announced by NOTIFY pgpace_event; the leader then fetches the unhandled ones (at most
 *   EVENTS_BATCH at a time), logs each once, counts it in pgpace_events_total{kind}, posts it
 *   to the operator webhook when one is configured, and marks it handled. An event whose
 *   webhook failed stays unhandled and is posted again on the next check (or the next event):
 *   at least once, for a day (run_events.sql). A new leader picks up what the last one left.
 * The operator webhook goes through the deliveries' HTTP sender (same SSRF rules, TLS
 * verification, timeouts) but holds none of their host connections or windows: it never waits
 * for them and they never wait for it.
 */
#include "internal.h"

#include "log.h"
#include "strbuf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Events fetched per statement: with a webhook, also the most posted at once. */
#define EVENTS_BATCH         100
#define EVENTS_WEBHOOK_BATCH 16

/* One fetched batch whose webhooks are in flight; marked handled when the last one ends. */
typedef struct events_batch {
    dispatcher *d;
    int n, pending, n_ok;
    bool full; /* the fetch returned a whole batch: more may wait */
    int64_t *ids, *at_us;
    int64_t *ok_ids, *ok_at_us;
} events_batch;

typedef struct event_post {
    events_batch *batch;
    int index;
    char *body;
    char webhook_id[32];
} event_post;

static void events_fetch(dispatcher *d);

static bool event_logged(dispatcher *d, int64_t id)
{
    for (size_t i = 0; i < EVENTS_SEEN; i++)
        if (d->events_seen[i] == id)
            return true;
    d->events_seen[d->events_seen_at++ % EVENTS_SEEN] = id;
    return false;
}

/* Serious changes are warnings; coming back is information. */
static bool event_is_warning(const char *kind)
{
    return strcmp(kind, "failing") == 0 || strcmp(kind, "breaker_open") == 0 ||
           strcmp(kind, "disabled") == 0 || strcmp(kind, "paused") == 0;
}

static void event_log(dispatcher *d, const event_row *e)
{
    if (event_logged(d, e->id))
        return;
    const char *labels[] = {e->kind};
    metrics_counter_add(d->obs.m, d->obs.events, labels, 1);
    if (event_is_warning(e->kind))
        LOG_WARN("customer_event", LOG_I("id", e->id), LOG_S("kind", e->kind),
                 LOG_S("customer", e->customer), LOG_S("detail", e->detail));
    else
        LOG_INFO("customer_event", LOG_I("id", e->id), LOG_S("kind", e->kind),
                 LOG_S("customer", e->customer), LOG_S("detail", e->detail));
}

static void put_array(strbuf *b, const int64_t *v, int n)
{
    strbuf_append(b, "{", 1);
    for (int i = 0; i < n; i++) {
        if (i)
            strbuf_append(b, ",", 1);
        strbuf_put_i64(b, v[i]);
    }
    strbuf_append(b, "}", 1);
}

static void on_events_done(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (res && PQresultStatus(res) != PGRES_TUPLES_OK)
        LOG_WARN("events_mark_failed", LOG_S("error", PQresultErrorMessage(res)));
    d->events_busy = false;
    if (d->events_again && is_leading(d)) {
        d->events_again = false;
        events_fetch(d);
    }
}

/* Marks n events handled; the pipeline is busy until the statement's answer. */
static void events_mark(dispatcher *d, const int64_t *ids, const int64_t *at_us, int n)
{
    if (n == 0 || d->stop == STOP_CLOSING) {
        d->events_busy = false;
        return;
    }
    strbuf a = {0}, b = {0};
    put_array(&a, ids, n);
    put_array(&b, at_us, n);
    const char *params[] = {[SQL_RUN_EVENTS_DONE_P_IDS] = strbuf_str(&a),
                            [SQL_RUN_EVENTS_DONE_P_AT_US] = strbuf_str(&b)};
    if (a.failed || b.failed ||
        DSP_QUERY(d, run_events_done, params, on_events_done, d, "events handled") != 0)
        d->events_busy = false;
    strbuf_free(&a);
    strbuf_free(&b);
}

static void batch_free(events_batch *b)
{
    free(b->ids);
    free(b->at_us);
    free(b->ok_ids);
    free(b->ok_at_us);
    free(b);
}

static void on_event_posted(const http_result *r, void *arg)
{
    event_post *p = arg;
    events_batch *b = p->batch;
    dispatcher *d = b->d;
    if (!r->error_class && r->status >= 200 && r->status < 300) {
        b->ok_ids[b->n_ok] = b->ids[p->index];
        b->ok_at_us[b->n_ok] = b->at_us[p->index];
        b->n_ok++;
    } else if (d->stop != STOP_CLOSING) {
        LOG_WARN("operator_webhook_failed", LOG_S("webhook_id", p->webhook_id),
                 LOG_I("status", r->status),
                 LOG_S("error_class", r->error_class ? r->error_class : "http"),
                 LOG_S("error", r->error), LOG_S("retry", "on the next health check"));
    }
    free(p->body);
    free(p);
    if (--b->pending > 0)
        return;
    /* More may wait behind a full batch that went through; failures wait for the next check. */
    if (b->full && b->n_ok == b->n)
        d->events_again = true;
    events_mark(d, b->ok_ids, b->ok_at_us, b->n_ok);
    batch_free(b);
}

/* Posts every event of the batch; returns how many requests were started. */
static int post_events(dispatcher *d, events_batch *b, const PGresult *res)
{
    int started = 0;
    const char *secrets[] = {d->cfg.operator_webhook_secret};
    for (int r = 0; r < b->n; r++) {
        event_post *p = calloc(1, sizeof *p);
        const char *body = PQgetvalue(res, r, SQL_RUN_EVENTS_C_BODY);
        if (!p || !(p->body = strdup(body))) {
            free(p);
            continue;
        }
        p->batch = b;
        p->index = r;
        snprintf(p->webhook_id, sizeof p->webhook_id, "evt_%" PRId64, b->ids[r]);
        http_request req = {.url = d->cfg.operator_webhook_url,
                            .body = p->body,
                            .body_len = strlen(p->body),
                            .webhook_id = p->webhook_id,
                            .timestamp_s = now_us() / 1000000,
                            .secrets = secrets,
                            .n_secrets = 1,
                            .connect_timeout_ms = d->cfg.connect_timeout_ms,
                            .total_timeout_ms = d->cfg.request_timeout_ms};
        b->pending++; /* before sending: the callback never runs inside http_send */
        if (http_send(d->http, &req, on_event_posted, p) != 0) {
            b->pending--;
            free(p->body);
            free(p);
            LOG_WARN("operator_webhook_failed", LOG_I("event", b->ids[r]),
                     LOG_S("error", "could not start the request"));
            continue;
        }
        started++;
    }
    return started;
}

static void on_events(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res) {
        d->events_busy = false; /* connection lost: the next leader or check fetches again */
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_EVENTS_NCOLS, "events")) {
        LOG_WARN("events_fetch_failed", LOG_S("error", PQresultErrorMessage(res)));
        d->events_busy = false;
        return;
    }
    int n = PQntuples(res);
    events_batch *b = calloc(1, sizeof *b);
    if (b && n > 0) {
        b->ids = calloc((size_t)n, sizeof *b->ids);
        b->at_us = calloc((size_t)n, sizeof *b->at_us);
        b->ok_ids = calloc((size_t)n, sizeof *b->ok_ids);
        b->ok_at_us = calloc((size_t)n, sizeof *b->ok_at_us);
    }
    if (!b || (n > 0 && (!b->ids || !b->at_us || !b->ok_ids || !b->ok_at_us))) {
        if (b)
            batch_free(b);
        d->events_busy = false;
        return;
    }
    b->d = d;
    b->n = n;
    bool webhook = d->cfg.operator_webhook_url[0] && d->http && d->stop == STOP_NONE;
    b->full = n >= (webhook ? EVENTS_WEBHOOK_BATCH : EVENTS_BATCH);
    for (int r = 0; r < n; r++) {
        event_row e;
        event_row_parse(res, r, &e);
        b->ids[r] = e.id;
        b->at_us[r] = e.at_us;
        event_log(d, &e);
    }
    if (webhook && n > 0 && post_events(d, b, res) > 0)
        return; /* the last answer marks the accepted ones */
    if (!webhook) {
        if (b->full)
            d->events_again = true;
        events_mark(d, b->ids, b->at_us, n);
    } else {
        d->events_busy = false;
    }
    batch_free(b);
}

/* Fetches unhandled events unless a fetch, its webhooks or its marking are under way (then
 * once more after them). */
static void events_fetch(dispatcher *d)
{
    if (d->events_busy) {
        d->events_again = true;
        return;
    }
    char limit[16];
    snprintf(limit, sizeof limit, "%d",
             d->cfg.operator_webhook_url[0] ? EVENTS_WEBHOOK_BATCH : EVENTS_BATCH);
    const char *params[] = {[SQL_RUN_EVENTS_P_LIMIT] = limit};
    if (DSP_QUERY(d, run_events, params, on_events, d, "events") == 0)
        d->events_busy = true;
}

void health_on_event_notify(dispatcher *d)
{
    if (is_leading(d))
        events_fetch(d);
}

static void on_health(pgconn *conn, PGresult *res, void *arg)
{
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        !rows_shape_ok(res, SQL_RUN_HEALTH_NCOLS, "health check"))
        LOG_WARN("health_check_failed", LOG_S("error", PQresultErrorMessage(res)));
}

static void on_health_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (!is_leading(d))
        return;
    char after[24], attempts[16], breaker_after[24];
    snprintf(after, sizeof after, "%lld", d->cfg.disable_after_ms);
    snprintf(attempts, sizeof attempts, "%d", d->cfg.disable_min_attempts);
    snprintf(breaker_after, sizeof breaker_after, "%lld", d->cfg.breaker_event_after_ms);
    const char *params[] = {[SQL_RUN_HEALTH_P_DISABLE_AFTER_MS] = after,
                            [SQL_RUN_HEALTH_P_MIN_ATTEMPTS] = attempts,
                            [SQL_RUN_HEALTH_P_BREAKER_EVENT_AFTER_MS] = breaker_after};
    DSP_QUERY(d, run_health, params, on_health, d, "health check");
    /* Also the retry path of operator webhooks that failed, and of events whose NOTIFY came
     * while no one led. */
    events_fetch(d);
}

void health_restart_timer(dispatcher *d, bool check_now)
{
    uint64_t every = (uint64_t)d->cfg.health_check_ms;
    uv_timer_start(&d->timers[TIMER_HEALTH], on_health_timer, check_now ? 0 : every, every);
}
