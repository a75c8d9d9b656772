/* delivery.c - deliveries in flight, from a claimed row to an outcome waiting to be written.
 *
 * Owns dispatcher.deliveries and every delivery on it, including its send timer: a spaced
 * customer's item is claimed up to LOOKAHEAD_US early and sent from that timer exactly at its
 * GCRA slot. Counts a delivery in flight for the dispatcher, its customer and its carrier from
 * the claim on, and for its host only while the request is on the wire. On completion it
 * classifies the result (outcome.c), queues the outcome for finalisation, frees the room it
 * held and tells the breaker and the scheduler.
 */
#include "internal.h"

#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Weight of the latest request in a host's moving average of request times. */
#define LATENCY_WEIGHT 0.05

static void free_delivery(delivery *dl)
{
    free(dl->carrier);
    free(dl->body);
    free(dl);
}

/* A delivery waiting for its slot holds a booking on its host until it is sent or ends. */
static void unbook(delivery *dl)
{
    if (dl->host && dl->host_booked)
        dl->host->booked--;
    dl->host_booked = false;
}

static void on_send_timer_closed(uv_handle_t *h)
{
    free_delivery(h->data);
}

/* The receiver answered 410 Gone: pause the customer (its items wait; nothing is dropped). */
static void pause_customer(dispatcher *d, customer *c)
{
    if (c->paused)
        return;
    c->paused = true;
    char idbuf[24];
    snprintf(idbuf, sizeof idbuf, "%" PRId64, c->id);
    const char *params[] = {[SQL_RUN_PAUSE_P_CUSTOMER_ID] = idbuf};
    DSP_QUERY(d, run_pause, params, dsp_on_ignored, NULL, "pause on 410");
    LOG_WARN("customer_paused", LOG_S("customer", c->name),
             LOG_S("reason", "receiver answered 410 Gone"),
             LOG_S("fix", "pgpace customer resume NAME"));
}

static void log_outcome(const delivery *dl, const customer *c, const http_result *r,
                        const outcome_decision *v)
{
    if (v->outcome == OUTCOME_SUCCESS)
        LOG_DEBUG("delivered", LOG_I("item", dl->item_id), LOG_S("customer", c ? c->name : "?"),
                  LOG_S("carrier", dl->carrier), LOG_I("attempt", dl->attempt),
                  LOG_I("status", r->status), LOG_D("duration_ms", r->duration_ms));
    else
        LOG_INFO("delivery_failed", LOG_I("item", dl->item_id),
                 LOG_S("customer", c ? c->name : "?"), LOG_S("carrier", dl->carrier),
                 LOG_I("attempt", dl->attempt), LOG_I("status", r->status),
                 LOG_S("error_class", v->error_class ? v->error_class : "http"),
                 LOG_S("error", v->error), LOG_S("outcome", outcome_name(v->outcome)),
                 LOG_I("retry_in_ms", v->delay_ms), LOG_D("duration_ms", r->duration_ms));
}

static void count_outcome(dispatcher *d, const customer *c, const http_result *r,
                          delivery_outcome outcome)
{
    const char *labels[] = {c ? c->name : "_unknown", outcome_name(outcome)};
    metrics_counter_add(d->obs.m, d->obs.deliveries, labels, 1);
    const char *out_label[] = {outcome_name(outcome)};
    metrics_histogram_observe(d->obs.m, d->obs.delivery_seconds, out_label,
                              r->duration_ms / 1000.0);
    if (outcome == OUTCOME_DEAD)
        metrics_counter_add(d->obs.m, d->obs.dead_letters, labels, 1);
}

static void on_delivery_done(const http_result *r, void *arg)
{
    delivery *dl = arg;
    dispatcher *d = dl->d;
    customer *c = customer_get(d, dl->customer_id);

    outcome_policy policy = outcome_policy_from(&d->cfg);
    outcome_decision v;
    outcome_classify(r, dl->attempt, dl->max_attempts, &policy, now_us() / 1000000,
                     prng_double(&d->rng), &v);
    if (v.pause_customer && c)
        pause_customer(d, c);
    log_outcome(dl, c, r, &v);
    count_outcome(d, c, r, v.outcome);

    /* A carrier's cap counts the item until its outcome is written, as the queue shows it
     * claimed until then; the entry releases it. */
    carrier_state *cs = hmap_get(&d->carriers, dl->carrier, strlen(dl->carrier));
    final_entry e = {.item_id = dl->item_id,
                     .token = dl->token,
                     .outcome = v.outcome,
                     .delay_ms = v.delay_ms,
                     .http_status = (int)r->status,
                     .started_us = dl->started_us,
                     .duration_ms = r->duration_ms,
                     .carrier = cs,
                     .excerpt = text_excerpt(r->excerpt, r->excerpt_len),
                     .error_class = v.error_class ? strdup(v.error_class) : NULL,
                     .error = v.outcome != OUTCOME_SUCCESS ? strdup(v.error) : NULL};
    if (!final_push(&d->pending, e) && cs) {
        cs->in_flight--;
        wake(d, &cs->waiting);
    }

    pgp_list_remove(&dl->link);
    d->in_flight--;
    unbook(dl);
    if (dl->host && dl->host_counted) {
        dl->host->in_flight--;
        if (dl->spaced)
            dl->host->spaced_in_flight--;
        /* The weights of paced customers on this host follow its request time (claim.c). */
        if (r->duration_ms > 0)
            dl->host->latency_ms += (r->duration_ms - dl->host->latency_ms) * LATENCY_WEIGHT;
        wake(d, &dl->host->waiting);
    }
    if (c) {
        c->in_flight--;
        pair_in_flight_add(c, dl->carrier, -1);
        throttle_note(d, c, dl->started_us, r, &v, now_us());
        if (dl->probe)
            c->breaker.probe_in_flight = false;
        if (v.outcome == OUTCOME_SUCCESS)
            breaker_note(d, c, false, NULL);
        else if (v.receiver_failed)
            breaker_note(d, c, true, v.error);
        /* A retried or released item is due again at a known time: wake its pair then (a
         * dead-lettered or delivered one needs nothing). */
        if (v.outcome == OUTCOME_RETRY || v.outcome == OUTCOME_RELEASE ||
            v.outcome == OUTCOME_PAUSE || v.outcome == OUTCOME_THROTTLED)
            pair_note(c, dl->carrier, now_us() + v.delay_ms * 1000);
        customer_schedule(d, c);
    }
    if (dl->timer_used)
        uv_close((uv_handle_t *)&dl->send_timer, on_send_timer_closed);
    else
        free_delivery(dl);
    finalize_arm(d);
    claim_arm(d);
    dispatcher_maybe_finish(d);
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
     * (at most the lookahead) has only booked one. */
    unbook(dl);
    if (dl->host) {
        dl->host->in_flight++;
        dl->host_counted = true;
        if (c && c->mode == MODE_SPACED) {
            dl->host->spaced_in_flight++;
            dl->spaced = true;
        }
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
    bool can_send = c && d->http && d->stop < STOP_ABORTING;
    int rc = -ENOENT;
    if (can_send) {
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
        http_result failed = {.error_class = can_send ? "internal" : "aborted",
                              .error = can_send ? "could not start the request"
                                                : "not sent (customer deleted or shutting down)"};
        on_delivery_done(&failed, dl);
    }
}

static void on_send_timer(uv_timer_t *t)
{
    delivery *dl = t->data;
    customer *c = customer_get(dl->d, dl->customer_id);
    int64_t now = now_us();
    /* A Retry-After came while it waited: given back, unless the hold ends within the
     * lookahead (then it waits for the end). */
    if (c && c->pace.hold_until_us > now + LOOKAHEAD_US) {
        http_result held = {.error_class = "aborted",
                            .error = "not sent: held by the receiver's Retry-After"};
        on_delivery_done(&held, dl);
        return;
    }
    /* An earlier send of this customer went out late: keep the gap. */
    int64_t at = earliest_send(c, 0);
    if (c && c->pace.hold_until_us > at)
        at = c->pace.hold_until_us;
    int64_t wait_us = at - now;
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

/* Parks the delivery until its slot: keeps a copy of the body (the claim's result is freed when
 * its callback returns). Returns false when it must be sent now instead. */
static bool wait_for_slot(dispatcher *d, delivery *dl, const claim_row *row, int64_t wait_us)
{
    dl->body = malloc(row->payload_len + 1);
    if (!dl->body)
        return false;
    if (uv_timer_init(d->loop, &dl->send_timer) != 0) {
        free(dl->body);
        dl->body = NULL;
        return false;
    }
    memcpy(dl->body, row->payload, row->payload_len + 1);
    dl->body_len = row->payload_len;
    dl->timer_used = true;
    dl->send_timer.data = dl;
    if (dl->host) {
        dl->host->booked++; /* work-queue claims leave its connection free for the slot */
        dl->host_booked = true;
    }
    uv_update_time(d->loop);
    if (uv_timer_start(&dl->send_timer, on_send_timer, (uint64_t)(wait_us / 1000), 0) != 0) {
        /* Cannot happen for an initialised timer with a callback; send now rather than lose it. */
        char *body = dl->body;
        dl->body = NULL;
        send_delivery(d, dl, body, row->payload_len);
        free(body);
    }
    return true;
}

void delivery_start(dispatcher *d, const claim_row *row, int64_t token, int64_t send_at)
{
    delivery *dl = calloc(1, sizeof *dl);
    if (!dl || !(dl->carrier = strdup(row->carrier))) {
        free(dl);
        LOG_ERROR("out_of_memory", LOG_S("where", "delivery"));
        return; /* the lease expires and the item comes back */
    }
    dl->d = d;
    dl->item_id = row->item_id;
    dl->customer_id = row->customer_id;
    dl->attempt = row->attempt;
    dl->max_attempts = row->max_attempts;
    dl->token = token;
    dl->created_us = row->created_us;
    customer *c = customer_get(d, dl->customer_id);

    /* Count it in flight before sending: a synchronous failure path still decrements once. */
    pgp_list_push(&d->deliveries, &dl->link);
    d->in_flight++;
    carrier_state *cs = carrier_get(d, dl->carrier);
    if (cs)
        cs->in_flight++;
    if (c) {
        dl->host = c->host; /* counted in flight there once the request is actually sent */
        c->in_flight++;
        pair_in_flight_add(c, dl->carrier, 1);
        if (c->breaker.state == BREAKER_HALF_OPEN && !c->breaker.probe_in_flight) {
            c->breaker.probe_in_flight = true;
            dl->probe = true;
        }
    }

    send_at = earliest_send(c, send_at);
    if (c && c->mode == MODE_SPACED)
        dl->planned_us = send_at;
    int64_t wait_us = send_at - now_us();
    if (wait_us >= 1000 && c && wait_for_slot(d, dl, row, wait_us))
        return;
    send_delivery(d, dl, row->payload, row->payload_len);
}

static void on_waiting_closed(uv_handle_t *h)
{
    delivery *dl = h->data;
    dispatcher *d = dl->d;
    free_delivery(dl);
    dispatcher_part_closed(d);
}

int deliveries_close_waiting(dispatcher *d)
{
    int n = 0;
    pgp_list *pos, *tmp;
    pgp_list_each_safe(pos, tmp, &d->deliveries)
    {
        delivery *dl = pgp_list_entry(pos, delivery, link);
        if (!dl->timer_used || !uv_is_active((uv_handle_t *)&dl->send_timer))
            continue;
        pgp_list_remove(&dl->link);
        d->in_flight--;
        unbook(dl);
        d->open_handles++;
        uv_close((uv_handle_t *)&dl->send_timer, on_waiting_closed);
        n++;
    }
    return n;
}
