/* health.c - the leader's side of customers' health lifecycle and operator events.
 *
 * Owns customer.health (the failing streak: failing_since, health_failures, recorded,
 * recovered_at), TIMER_HEALTH and the operator-event pipeline (dispatcher.events_*):
 * - every delivery's verdict updates the customer's failing streak (health_note): once
 *   breaker_failures attempts in a row failed, the streak is recorded (customer_health, the
 *   `failing` event); the next success ends it (`recovered`). Writes happen only at those two
 *   moments, so a flapping receiver costs nothing; a write that fails is made again on the next
 *   verdict;
 * - every [health] check_interval, pgpace.health_check disables customers whose recorded streak
 *   is older than disable_after and confirmed by the attempt log (no success since, at least
 *   disable_min_attempts failed attempts), and records `breaker_open` for breakers open longer
 *   than breaker_event_after (run_health.sql);
 * - events (rows of pgpace.event, written by SQL wherever a lifecycle change happens) are
 *   announced by NOTIFY pgpace_event; the leader then fetches the unhandled ones (at most a
 *   batch at a time), logs and counts each once (pgpace_events_total{kind}), posts it to the
 *   operator webhook when one is configured, and marks it handled; a refused post is tried
 *   again after a backoff kept in the row (so one bad event never holds up the others): at least
 *   once, for a day (run_events.sql). A new leader picks up what the last one left.
 * The operator webhook goes through the deliveries' HTTP sender (same SSRF rules, TLS
 * verification, timeouts, and curl's connection limits) but holds none of the dispatcher's
 * per-host connections, windows or slots.
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

/* Nothing under way any more: fetch again if something asked meanwhile. */
static void events_idle(dispatcher *d)
{
    d->events_busy = false;
    if (d->events_again && is_leading(d)) {
        d->events_again = false;
        events_fetch(d);
    }
}

typedef struct events_mark_ctx {
    dispatcher *d;
    int handled;  /* how many were to be marked handled */
    bool refetch; /* a whole batch went through: more may wait */
} events_mark_ctx;

static void on_events_done(pgconn *conn, PGresult *res, void *arg)
{
    events_mark_ctx *m = arg;
    dispatcher *d = m->d;
    bool all = false;
    if (res && (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
                !rows_shape_ok(res, SQL_RUN_EVENTS_DONE_NCOLS, "events handled")))
        LOG_WARN("events_mark_failed", LOG_S("error", PQresultErrorMessage(res)));
    else if (res)
        all = row_i64(res, 0, SQL_RUN_EVENTS_DONE_C_HANDLED) == m->handled;
    /* Fetch the next batch at once only when this one was marked: never the same rows again. */
    if (m->refetch && all)
        d->events_again = true;
    free(m);
    events_idle(d);
}

/* Writes the outcome of a batch; the pipeline stays busy until the statement's answer. */
static void events_mark(dispatcher *d, const int64_t *handled, int n_handled,
                        const int64_t *refused, int n_refused, bool refetch)
{
    events_mark_ctx *m = calloc(1, sizeof *m);
    if ((n_handled == 0 && n_refused == 0) || d->stop == STOP_CLOSING || !m) {
        free(m);
        events_idle(d);
        return;
    }
    *m = (events_mark_ctx){.d = d, .handled = n_handled, .refetch = refetch};
    strbuf a = {0}, b = {0};
    put_array(&a, handled, n_handled);
    put_array(&b, refused, n_refused);
    const char *params[] = {[SQL_RUN_EVENTS_DONE_P_HANDLED_IDS] = strbuf_str(&a),
                            [SQL_RUN_EVENTS_DONE_P_REFUSED_IDS] = strbuf_str(&b)};
    if (a.failed || b.failed ||
        DSP_QUERY(d, run_events_done, params, on_events_done, m, "events handled") != 0) {
        free(m);
        events_idle(d);
    }
    strbuf_free(&a);
    strbuf_free(&b);
}

/* One fetched batch whose webhooks are in flight; marked when the last one ends. */
typedef struct events_batch {
    dispatcher *d;
    int n, pending, n_ok, n_refused;
    bool full; /* the fetch returned a whole batch: more may wait */
    int64_t *ids, *ok, *refused;
} events_batch;

typedef struct event_post {
    events_batch *batch;
    int index;
    char *body;
    char webhook_id[32];
} event_post;

static void batch_free(events_batch *b)
{
    free(b->ids);
    free(b->ok);
    free(b->refused);
    free(b);
}

static void on_event_posted(const http_result *r, void *arg)
{
    event_post *p = arg;
    events_batch *b = p->batch;
    dispatcher *d = b->d;
    int64_t id = b->ids[p->index];
    if (!r->error_class && r->status >= 200 && r->status < 300) {
        b->ok[b->n_ok++] = id;
    } else if (d->stop == STOP_NONE) {
        /* Not when stopping: an aborted post is no refusal, the next leader posts it. */
        b->refused[b->n_refused++] = id;
        LOG_WARN("operator_webhook_failed", LOG_S("webhook_id", p->webhook_id),
                 LOG_I("status", r->status),
                 LOG_S("error_class", r->error_class ? r->error_class : "http"),
                 LOG_S("error", r->error), LOG_S("retry", "after a backoff (10 s, doubling)"));
    }
    free(p->body);
    free(p);
    if (--b->pending > 0)
        return;
    events_mark(d, b->ok, b->n_ok, b->refused, b->n_refused, b->full);
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
            continue; /* unhandled: fetched again */
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
                            .proxy = egress_proxy(d, NULL, d->cfg.operator_webhook_url),
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
    for (int r = 0; r < n; r++) {
        event_row e;
        event_row_parse(res, r, &e);
        event_log(d, &e);
    }
    bool webhook = d->cfg.operator_webhook_url[0] != '\0';
    if (n == 0 || (webhook && (!d->http || d->stop != STOP_NONE))) {
        /* Nothing to do, or a webhook that cannot be posted now: left unhandled. */
        events_idle(d);
        return;
    }
    events_batch *b = calloc(1, sizeof *b);
    if (b) {
        b->ids = calloc((size_t)n, sizeof *b->ids);
        b->ok = calloc((size_t)n, sizeof *b->ok);
        b->refused = calloc((size_t)n, sizeof *b->refused);
    }
    if (!b || !b->ids || !b->ok || !b->refused) {
        if (b)
            batch_free(b);
        events_idle(d);
        return;
    }
    b->d = d;
    b->n = n;
    b->full = n >= (webhook ? EVENTS_WEBHOOK_BATCH : EVENTS_BATCH);
    for (int r = 0; r < n; r++)
        b->ids[r] = row_i64(res, r, SQL_RUN_EVENTS_C_ID);
    if (!webhook) {
        events_mark(d, b->ids, n, NULL, 0, b->full);
    } else if (post_events(d, b, res) > 0) {
        return; /* the last answer marks them */
    } else {
        events_idle(d);
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

/* ---- the failing streak ------------------------------------------------------------------- */

typedef struct note_ctx {
    dispatcher *d;
    int64_t customer_id;
    int64_t failing_since; /* the streak written; 0 for its end */
    bool failing;
} note_ctx;

static void on_health_noted(pgconn *conn, PGresult *res, void *arg)
{
    note_ctx *n = arg;
    bool ok = res && PQresultStatus(res) == PGRES_TUPLES_OK;
    if (res && !ok)
        LOG_WARN("health_note_failed", LOG_S("error", PQresultErrorMessage(res)));
    customer *c = customer_get(n->d, n->customer_id);
    /* The page shows the streak once it is committed, so it never says failing before
     * `pgpace events` does. A streak not written is written at its next failure. An end not
     * written needs nothing: the health check finds the success in the attempt log. */
    customer_health *h = c ? c->health : NULL;
    if (h && n->failing && h->failing_since == n->failing_since && h->failing_recorded) {
        if (ok)
            h->failing_committed = true;
        else
            h->failing_recorded = false;
    }
    free(n);
}

static void write_note(dispatcher *d, customer *c, bool failing, const char *error)
{
    note_ctx *n = calloc(1, sizeof *n);
    if (!n)
        return;
    *n = (note_ctx){.d = d,
                    .customer_id = c->id,
                    .failing_since = failing ? customer_health_of(c)->failing_since : 0,
                    .failing = failing};
    char id[24], since[24], failures[16];
    snprintf(id, sizeof id, "%" PRId64, c->id);
    snprintf(since, sizeof since, "%" PRId64, customer_health_of(c)->failing_since);
    snprintf(failures, sizeof failures, "%d", customer_health_of(c)->health_failures);
    const char *params[] = {[SQL_RUN_HEALTH_NOTE_P_CUSTOMER_ID] = id,
                            [SQL_RUN_HEALTH_NOTE_P_FAILING] = failing ? "true" : "false",
                            [SQL_RUN_HEALTH_NOTE_P_FAILING_SINCE_US] = failing ? since : NULL,
                            [SQL_RUN_HEALTH_NOTE_P_FAILURES] = failures,
                            [SQL_RUN_HEALTH_NOTE_P_LAST_ERROR] = error};
    if (DSP_QUERY(d, run_health_note, params, on_health_noted, n, "health note") != 0)
        free(n);
}

void health_note(dispatcher *d, customer *c, bool failed, int64_t started_us, const char *error)
{
    customer_health *h = c->health;
    if (!failed) {
        if (!h)
            return; /* never failed: no streak to end */
        bool recorded = h->failing_recorded;
        h->failing_since = 0;
        h->health_failures = 0;
        h->failing_recorded = false;
        h->failing_committed = false;
        if (recorded) {
            h->recovered_at = now_us(); /* for the status page */
            write_note(d, c, false, NULL);
        }
        return;
    }
    if (!h && !(h = c->health = calloc(1, sizeof *c->health))) {
        LOG_ERROR("out_of_memory", LOG_S("where", "failing streak"), LOG_S("customer", c->name));
        return; /* not counted: its breaker still is */
    }
    if (!h->failing_since)
        h->failing_since = started_us > 0 ? started_us : now_us();
    h->health_failures++;
    if (!h->failing_recorded && h->health_failures >= d->cfg.breaker_failures) {
        h->failing_recorded = true;
        write_note(d, c, true, error);
    }
}

void health_reset(dispatcher *d, customer *c)
{
    c->breaker = (breaker){.state = BREAKER_CLOSED};
    const char *labels[] = {c->name};
    metrics_gauge_set(d->obs.m, d->obs.breaker_state, labels, (double)BREAKER_CLOSED);
    if (c->health) {
        c->health->failing_since = 0;
        c->health->health_failures = 0;
        c->health->failing_recorded = false;
        c->health->failing_committed = false;
    }
}
