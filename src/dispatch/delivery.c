/* delivery.c - deliveries in flight, from a claimed row to an outcome waiting to be written.
 *
 * Owns dispatcher.deliveries and every delivery on it, the heap of deliveries waiting for
 * their GCRA slot (dispatcher.slots, one timer for all: TIMER_SEND) and the pool of spare
 * delivery structs. A spaced customer's item is claimed up to LOOKAHEAD_US early and sent
 * from that timer exactly at its slot; a work-queue item goes to its host's window (window.c).
 * A delivery counts in flight for the dispatcher, its customer and its carrier from the claim
 * on, and for its host only while the request is on the wire. Its body and carrier point into
 * the claim's PGresult, which it references until it ends. On completion it classifies the
 * result (outcome.c), queues the outcome for finalisation, frees the room it held and tells the
 * breaker and the scheduler; one never sent is given back (OUTCOME_RELEASE) without a trace in
 * the attempt log or the delivery metrics.
 *
 * OAuth2 customers (oauth.c): right before its request a delivery takes its customer's access
 * token, or waits (still on the wire for the counts) for the one token request in flight; a
 * failed token request fails the attempt with its class (oauth_http, oauth_response,
 * oauth_transport, ssrf), retried as usual. A 401 from the receiver drops the token it was sent
 * with and sends the delivery again at once with a fresh one, once per attempt: the attempt
 * log records only the second answer.
 *
 * Deadlines: an item may wait after its claim (for its slot, in a window, or for a retry), so
 * its deadline is checked right before its request would start: past it, no request is made and
 * the item is finalised as OUTCOME_EXPIRED (dead-lettered, the attempt given back). A failed
 * attempt whose retry would start at or after the deadline is OUTCOME_EXPIRED at once too,
 * rather than waiting for the sweep. Judged on this host's clock (the claim and the sweep judge
 * on the database's).
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
/* Spare delivery structs kept for reuse (each is small; a burst's worth). */
#define SPARE_MAX 4096

void claim_result_unref(claim_result *cr)
{
    if (cr && --cr->refs == 0) {
        PQclear(cr->res);
        free(cr);
    }
}

static delivery *delivery_alloc(dispatcher *d)
{
    if (!pgp_list_empty(&d->spare)) {
        pgp_list *n = d->spare.next;
        pgp_list_remove(n);
        d->n_spare--;
        delivery *dl = pgp_list_entry(n, delivery, link);
        memset(dl, 0, sizeof *dl);
        return dl;
    }
    return calloc(1, sizeof(delivery));
}

static void delivery_free(dispatcher *d, delivery *dl)
{
    claim_result_unref(dl->cr);
    dl->cr = NULL;
    if (d->n_spare >= SPARE_MAX) {
        free(dl);
        return;
    }
    pgp_list_push(&d->spare, &dl->link);
    d->n_spare++;
}

void delivery_pool_free(dispatcher *d)
{
    pgp_list *pos, *tmp;
    pgp_list_each_safe(pos, tmp, &d->spare)
    {
        pgp_list_remove(pos);
        free(pgp_list_entry(pos, delivery, link));
    }
    d->n_spare = 0;
    free(d->slots);
    d->slots = NULL;
    d->n_slots = d->cap_slots = 0;
}

/* ---- deliveries waiting for their slot: a binary min-heap on due_us ----------------------- */

static void slot_place(dispatcher *d, size_t i, delivery *dl)
{
    d->slots[i] = dl;
    dl->slot_pos = i;
}

static void slot_up(dispatcher *d, size_t i)
{
    delivery *dl = d->slots[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (d->slots[parent]->due_us <= dl->due_us)
            break;
        slot_place(d, i, d->slots[parent]);
        i = parent;
    }
    slot_place(d, i, dl);
}

static void slot_down(dispatcher *d, size_t i)
{
    delivery *dl = d->slots[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = l;
        if (l >= d->n_slots)
            break;
        if (r < d->n_slots && d->slots[r]->due_us < d->slots[l]->due_us)
            m = r;
        if (d->slots[m]->due_us >= dl->due_us)
            break;
        slot_place(d, i, d->slots[m]);
        i = m;
    }
    slot_place(d, i, dl);
}

static bool slot_push(dispatcher *d, delivery *dl)
{
    if (d->n_slots == d->cap_slots) {
        size_t cap = d->cap_slots ? d->cap_slots * 2 : 64;
        delivery **v = realloc(d->slots, cap * sizeof *v);
        if (!v)
            return false;
        d->slots = v;
        d->cap_slots = cap;
    }
    d->slots[d->n_slots++] = dl;
    slot_up(d, d->n_slots - 1);
    return true;
}

static void slot_remove(dispatcher *d, delivery *dl)
{
    size_t i = dl->slot_pos;
    delivery *last = d->slots[--d->n_slots];
    if (i == d->n_slots)
        return;
    slot_place(d, i, last);
    slot_up(d, i);
    slot_down(d, last->slot_pos);
}

/* Arms TIMER_SEND for the earliest waiting send (whole milliseconds, rounded down: it may fire
 * up to a millisecond early, and a send less than a millisecond early goes). */
static void slots_arm(dispatcher *d)
{
    uv_timer_t *t = &d->timers[TIMER_SEND];
    if (d->n_slots == 0 || d->stop == STOP_CLOSING) {
        uv_timer_stop(t);
        return;
    }
    int64_t wait_us = d->slots[0]->due_us - now_us();
    uv_update_time(d->loop);
    uv_timer_start(t, slots_on_timer, wait_us > 0 ? (uint64_t)(wait_us / 1000) : 0, 0);
}

/* ---- ending a delivery -------------------------------------------------------------------- */

/* A delivery waiting for its slot holds a booking on its host until it is sent or ends. */
static void unbook(delivery *dl)
{
    if (dl->host && dl->host_booked)
        dl->host->booked--;
    dl->host_booked = false;
}

/* Takes the delivery off whatever it waits in (slot heap, window). */
static void unqueue(dispatcher *d, delivery *dl)
{
    if (dl->stage == STAGE_SLOT && dl->slot_pos < d->n_slots && d->slots[dl->slot_pos] == dl)
        slot_remove(d, dl);
    if (dl->stage == STAGE_WINDOW)
        window_unlink(d, dl);
    dl->stage = STAGE_WIRE;
    unbook(dl);
}

/* Sent, or ended without being sent: no longer pending against the limit windows. */
static void unsent_done(dispatcher *d, delivery *dl, customer *c)
{
    if (!dl->unsent)
        return;
    dl->unsent = false;
    limits_unsent(c, dl->host, -1);
}

/* A delivery ends, first part: the room it held (dispatcher, host, customer, pair) is freed. */
static void delivery_unhold(dispatcher *d, delivery *dl, customer *c)
{
    unsent_done(d, dl, c);
    pgp_list_remove(&dl->link);
    d->in_flight--;
    unqueue(d, dl);
    if (dl->host && dl->host_counted) {
        dl->host->in_flight--;
        if (dl->spaced)
            dl->host->spaced_in_flight--;
        if (dl->tenant_counted) {
            host_tenant_out_add(dl->host, dl->tenant_counted, -1);
            dl->tenant_counted = 0;
        }
    }
    if (c) {
        c->in_flight--;
        pair_in_flight_add(c, dl->carrier, -1);
        if (dl->probe)
            c->breaker.probe_in_flight = false;
    }
}

/* Second part: its customer is rescheduled (its item due again at `again_us` when it was not
 * delivered or dead-lettered, else 0), the struct recycled, and the connection it freed goes to
 * the host's window first, then to the customers waiting for the host. */
static void delivery_finish(dispatcher *d, delivery *dl, customer *c, int64_t again_us)
{
    if (c) {
        if (again_us > 0)
            pair_note(c, dl->carrier, again_us);
        customer_schedule(d, c);
    }
    host_state *h = dl->host;
    bool was_on_wire = dl->host_counted;
    delivery_free(d, dl);
    if (h && was_on_wire) {
        window_drain(d, h);
        if (h->waiting.n > 0 &&
            (h->in_flight < d->cfg.max_host_connections || window_room(&d->cfg, h) > 0))
            wake(d, &h->waiting);
    }
    finalize_arm(d);
    claim_arm(d);
    dispatcher_maybe_finish(d);
}

/* Queues the outcome; on no memory the carrier's count is freed here (the lease expires and
 * the item is delivered again: at-least-once holds). */
static void push_outcome(dispatcher *d, final_entry e)
{
    carrier_state *cs = e.carrier;
    if (!final_push(&d->pending, e) && cs) {
        cs->in_flight--;
        wake(d, &cs->waiting);
    }
}

void delivery_give_back(dispatcher *d, delivery *dl)
{
    customer *c = customer_get(d, dl->customer_id);
    carrier_state *cs = hmap_get(&d->carriers, dl->carrier, strlen(dl->carrier));
    push_outcome(d, (final_entry){.item_id = dl->item_id,
                                  .token = dl->token,
                                  .outcome = OUTCOME_RELEASE,
                                  .carrier = cs});
    delivery_unhold(d, dl, c);
    delivery_finish(d, dl, c, now_us());
}

/* The receiver answered 410 Gone: pause the customer (its items wait; nothing is dropped). */
static void pause_customer(dispatcher *d, customer *c)
{
    /* The stored pause decides, not c->paused: a customer held in memory (a certificate past
     * its dates, a disable) must still be paused for good, or the next reload would resume
     * sending to the endpoint that is Gone. */
    if (c->paused_stored)
        return;
    c->paused_stored = true;
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

/* An item dead-lettered as expired by this instance (the sweep counts its own). */
static void count_expired(dispatcher *d, const customer *c, const delivery *dl, const char *why)
{
    const char *labels[] = {c ? c->name : "_unknown"};
    metrics_counter_add(d->obs.m, d->obs.expired, labels, 1);
    LOG_INFO("item_expired", LOG_I("item", dl->item_id), LOG_S("customer", c ? c->name : "?"),
             LOG_S("carrier", dl->carrier), LOG_I("attempt", dl->attempt), LOG_S("why", why));
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

static void transmit(dispatcher *d, delivery *dl);
static bool still_sendable(dispatcher *d, delivery *dl, customer *c);

static void on_delivery_done(const http_result *r, void *arg)
{
    delivery *dl = arg;
    dispatcher *d = dl->d;
    customer *c = customer_get(d, dl->customer_id);

    /* The receiver refused the OAuth2 token: drop it (unless a newer one replaced it already)
     * and send again with a fresh one, once. The second answer is the attempt's. */
    if (!r->error_class && r->status == 401 && c && customer_conn_of(c)->oauth &&
        !dl->oauth_retried && d->http && d->stop < STOP_ABORTING) {
        dl->oauth_retried = true;
        /* (A token of credentials replaced meanwhile is gone already: the new set's is fresh.) */
        if (dl->oauth_set == customer_conn_of(c)->oauth)
            oauth_invalidate(customer_conn_of(c)->oauth, dl->oauth_gen);
        LOG_DEBUG("oauth_token_refused", LOG_I("item", dl->item_id), LOG_S("customer", c->name),
                  LOG_S("action", "sent again with a fresh token"));
        if (still_sendable(d, dl, c))
            transmit(d, dl);
        return;
    }

    outcome_policy policy = outcome_policy_from(&d->cfg);
    outcome_decision v;
    /* A Retry-After date is compared with the server's time too (now_us): a receiver sees the
     * same delays from a dispatcher whose host clock is off as from one whose clock is right. */
    outcome_classify(r, dl->attempt, dl->max_attempts, &policy, now_us() / 1000000,
                     prng_double(&d->rng), &v);
    if (v.pause_customer && c)
        pause_customer(d, c);
    if ((v.outcome == OUTCOME_RETRY || v.outcome == OUTCOME_THROTTLED) && dl->expires_us > 0 &&
        now_us() + v.delay_ms * 1000 >= dl->expires_us) {
        /* Its retry would start at or after the deadline: dead-lettered now, not later. The
         * attempt was made and keeps its error class, status and excerpt in the attempt log. */
        v.outcome = OUTCOME_EXPIRED;
        v.delay_ms = 0;
        count_expired(d, c, dl, "its retry would come after its deadline");
    }
    log_outcome(dl, c, r, &v);
    count_outcome(d, c, r, v.outcome);

    /* A carrier's cap counts the item until its outcome is written, as the queue shows it
     * claimed until then; the entry releases it. */
    carrier_state *cs = hmap_get(&d->carriers, dl->carrier, strlen(dl->carrier));
    push_outcome(d, (final_entry){.item_id = dl->item_id,
                                  .token = dl->token,
                                  .outcome = v.outcome,
                                  .delay_ms = v.delay_ms,
                                  .http_status = (int)r->status,
                                  .started_us = dl->started_us,
                                  .duration_ms = r->duration_ms,
                                  .carrier = cs,
                                  .excerpt = text_excerpt(r->excerpt, r->excerpt_len),
                                  .error_class = v.error_class ? strdup(v.error_class) : NULL,
                                  .error = v.outcome != OUTCOME_SUCCESS ? strdup(v.error) : NULL,
                                  .order_customer = dl->ordered && (v.outcome == OUTCOME_SUCCESS ||
                                                                    v.outcome == OUTCOME_DEAD ||
                                                                    v.outcome == OUTCOME_EXPIRED)
                                                        ? dl->customer_id
                                                        : 0});

    /* The weights of paced customers on this host follow its request time (claim.c); the
     * first request sets it, so a slow host is known as slow at once. */
    if (dl->host && dl->host_counted && r->duration_ms > 0)
        dl->host->latency_ms =
            dl->host->latency_ms > 0
                ? dl->host->latency_ms + (r->duration_ms - dl->host->latency_ms) * LATENCY_WEIGHT
                : r->duration_ms;
    delivery_unhold(d, dl, c);
    int64_t again_us = 0;
    if (c) {
        throttle_note(d, c, dl->started_us, r, &v, now_us());
        if (v.outcome != OUTCOME_SUCCESS && v.outcome != OUTCOME_RELEASE)
            status_note_failure(c, v.error_class, (int)r->status);
        if (v.outcome == OUTCOME_SUCCESS)
            breaker_note(d, c, false, NULL);
        else if (v.receiver_failed)
            breaker_note(d, c, true, v.error);
        if (v.outcome == OUTCOME_SUCCESS)
            health_note(d, c, false, dl->started_us, NULL);
        else if (v.health_failed)
            health_note(d, c, true, dl->started_us, v.error);
        /* A retried or released item is due again at a known time: wake its pair then (a
         * dead-lettered or delivered one needs nothing). */
        if (v.outcome == OUTCOME_RETRY || v.outcome == OUTCOME_RELEASE ||
            v.outcome == OUTCOME_PAUSE || v.outcome == OUTCOME_THROTTLED)
            again_us = now_us() + v.delay_ms * 1000;
    }
    delivery_finish(d, dl, c, again_us);
}

/* A recovered item under its customer's recovery pace (`pgpace recover --rate`) goes neither
 * before its slot there nor less than the pace's period after the customer's previous recovered
 * send actually went out (a late send moves the next, as below). 0 for any other delivery. */
static int64_t recovery_earliest(const customer *c, const delivery *dl)
{
    if (dl->rec_period_us <= 0)
        return 0;
    int64_t min = dl->rec_at;
    int64_t rec_last = c ? customer_thr(c)->rec_last_sent_us : 0;
    if (rec_last > 0 && rec_last + dl->rec_period_us > min)
        min = rec_last + dl->rec_period_us;
    return min;
}

/* Spaced customers without burst: a send never goes out less than one period after the
 * previous one actually did. Claims plan slots ahead; if a send went out late (a busy loop),
 * the next planned slot moves with it, as GCRA's tat = max(tat, t) + T says. Recovered items
 * also keep their recovery pace (recovery_earliest). */
static int64_t earliest_send(const customer *c, const delivery *dl, int64_t planned)
{
    int64_t rec = recovery_earliest(c, dl);
    if (rec > planned)
        planned = rec;
    /* Its tenant's limit over the sends that went out (tenant.c). */
    int64_t gate = c && c->gate ? tenant_gate_earliest(c->gate) : INT64_MIN;
    if (gate > planned)
        planned = gate;
    /* Every limit window it counts against (limits.c). */
    if (c) {
        int64_t windows = limits_send_at(c, dl->host, planned);
        if (windows > planned)
            planned = windows;
    }
    if (!c || c->mode != MODE_SPACED || c->burst > 1 || !c->last_sent_us)
        return planned;
    int64_t min = c->last_sent_us + c->period_us;
    return planned > min ? planned : min;
}

/* Puts a delivery (from a window, or sent too soon) in the slot heap until `at`, booking its
 * host's connection as a spaced slot does. false: no memory for the heap. */
static bool defer_until(dispatcher *d, delivery *dl, int64_t at)
{
    unqueue(d, dl);
    dl->stage = STAGE_SLOT;
    dl->due_us = at;
    if (!slot_push(d, dl)) {
        dl->stage = STAGE_WIRE;
        return false;
    }
    if (dl->host) {
        dl->host->booked++;
        dl->host_booked = true;
    }
    if (d->slots[0] == dl)
        slots_arm(d);
    return true;
}

/* The deadline passed before the request started: dead-lettered as expired, nothing sent, the
 * attempt given back (error class "expired" tells run_finalize.sql so). The slot, connection or
 * window place it held goes to the next item. */
static void delivery_expire(dispatcher *d, delivery *dl, customer *c)
{
    count_expired(d, c, dl, "not sent before its deadline");
    carrier_state *cs = hmap_get(&d->carriers, dl->carrier, strlen(dl->carrier));
    push_outcome(d, (final_entry){.item_id = dl->item_id,
                                  .token = dl->token,
                                  .outcome = OUTCOME_EXPIRED,
                                  .started_us = now_us(),
                                  .carrier = cs,
                                  .error_class = strdup("expired"),
                                  .error = strdup("not sent before its deadline"),
                                  .order_customer = dl->ordered ? dl->customer_id : 0});
    delivery_unhold(d, dl, c);
    delivery_finish(d, dl, c, 0);
}

/* Whether c's client certificate (if any) can be presented at now_s. One that expired since the
 * customer was loaded holds it from now on (logged once), as state.c holds one loaded so. */
static bool client_cert_ok(customer *c, int64_t now_s)
{
    char why[192];
    const customer_conn *cc = customer_conn_of(c);
    if (!cc->client_cert_error &&
        (!cc->client_cert || client_cert_usable(cc->client_cert, now_s, why, sizeof why)))
        return true;
    /* Not valid yet (a clock a little behind the issuer's): the delivery goes back and the
     * customer is not held, since the certificate becomes valid by itself. */
    bool early = !cc->client_cert_error && cc->client_cert &&
                 now_s < client_cert_get_info(cc->client_cert)->not_before_s;
    if (!early) {
        c->client_cert_held = true;
        c->paused = true;
    }
    if (!c->client_cert_warned && !cc->client_cert_error) {
        c->client_cert_warned = true;
        LOG_ERROR("customer_client_cert_unusable", LOG_S("customer", c->name), LOG_S("error", why),
                  LOG_S("action", early ? "its deliveries wait until the certificate is valid"
                                        : "held until a valid client certificate is set"));
    }
    return false;
}

void delivery_send(dispatcher *d, delivery *dl)
{
    customer *c = customer_get(d, dl->customer_id);
    if (dl->expires_us > 0 && now_us() >= dl->expires_us) {
        delivery_expire(d, dl, c);
        return;
    }
    /* A reload found headers, a proxy or a signing secret it cannot use (state.c holds the
     * customer): a delivery claimed before goes back rather than out without them. */
    if (c && customer_held_invalid(c)) {
        delivery_give_back(d, dl);
        return;
    }
    /* The recovery pace is a bound on sends: a recovered item never goes out before it allows,
     * however it got here (a window, a timer up to a millisecond early). It waits in the slot
     * heap until a millisecond past that time, or goes back if there is no room to wait. */
    int64_t rec_min = recovery_earliest(c, dl);
    if (rec_min > 0 && now_us() < rec_min) {
        if (!defer_until(d, dl, rec_min + 1000))
            delivery_give_back(d, dl);
        return;
    }
    /* The tenant's limit likewise (tenant.c): over the sends that actually went out, so one
     * that went late does not let the next go early. */
    int64_t gate_min = c && c->gate ? tenant_gate_earliest(c->gate) : INT64_MIN;
    if (gate_min != INT64_MIN && now_us() < gate_min) {
        if (!defer_until(d, dl, gate_min + 1000))
            delivery_give_back(d, dl);
        return;
    }
    /* No window of its own, its customer's or its host's is ever exceeded (limits.c): a send
     * that does not fit yet waits in the slot heap until the exact time it does. */
    int64_t windows_at = c ? limits_send_at(c, dl->host, now_us()) : 0;
    if (c && windows_at > now_us()) {
        metrics_counter_add(d->obs.m, d->obs.limit_holds, (const char *[]){c->name}, 1);
        if (!defer_until(d, dl, windows_at))
            delivery_give_back(d, dl);
        return;
    }
    unqueue(d, dl);
    dl->started_us = now_us();
    unsent_done(d, dl, c);
    limits_sent(c, dl->host, dl->started_us);
    /* Only requests on the wire use a host's connections; one waiting for its GCRA slot
     * (at most the lookahead) has only booked one. */
    if (dl->host) {
        dl->host->in_flight++;
        dl->host_counted = true;
        if (c && c->grouped) {
            host_tenant_out_add(dl->host, c->tenant_id, +1);
            dl->tenant_counted = c->tenant_id;
        }
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
    if (c && dl->rec_period_us > 0) {
        throttle_state *t = customer_thr_mut(c);
        if (t)
            t->rec_last_sent_us = dl->started_us;
    }
    if (c && c->gate)
        tenant_gate_sent(c->gate, dl->started_us);
    transmit(d, dl);
}

/* "msg_<id>" into buf (at least 25 bytes: an int64 has at most 20 digits and a sign), without
 * snprintf, which was 0.5 % of the dispatcher's CPU per delivery (perf). */
static void webhook_id_of(char *buf, int64_t id)
{
    char digits[20];
    size_t n = 0;
    uint64_t u = id < 0 ? (uint64_t)0 - (uint64_t)id : (uint64_t)id;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    memcpy(buf, "msg_", 4);
    char *p = buf + 4;
    if (id < 0)
        *p++ = '-';
    while (n)
        *p++ = digits[--n];
    *p = '\0';
}

/* The request, with the customer's extra headers (and its OAuth2 token, `headers` then). */
static void request(dispatcher *d, delivery *dl, customer *c, http_headers *headers)
{
    bool can_send = c && d->http && d->stop < STOP_ABORTING;
    /* A receiver that requires the customer's certificate would refuse the request without it
     * (or one past its dates) anyway: the delivery goes back and the customer waits for a
     * valid one, its items kept. */
    if (can_send && !client_cert_ok(c, dl->started_us / 1000000)) {
        delivery_give_back(d, dl);
        return;
    }
    int rc = -ENOENT;
    if (can_send) {
        char webhook_id[40];
        /* The event's id: every endpoint a fan-out reached gets the same webhook-id. */
        webhook_id_of(webhook_id, dl->msg_id > 0 ? dl->msg_id : dl->item_id);
        const char *secrets[CUSTOMER_SECRETS_MAX];
        customer_keys(c, secrets);
        http_request req = {
            .url = c->url,
            .body = dl->body,
            .body_len = dl->body_len,
            .webhook_id = webhook_id,
            .traceparent = dl->traceparent,
            .tracestate = dl->tracestate,
            .timestamp_s = dl->started_us / 1000000,
            .secrets = secrets,
            .keys = (const secret_key *const *)c->keys,
            .n_secrets = c->n_secrets,
            .headers = headers,
            .proxy = egress_proxy(d, customer_conn_of(c)->proxy, c->url),
            .client_cert = customer_conn_of(c)->client_cert,
            .connect_timeout_ms =
                c->connect_timeout_ms > 0 ? c->connect_timeout_ms : d->cfg.connect_timeout_ms,
            .total_timeout_ms =
                c->request_timeout_ms > 0 ? c->request_timeout_ms : d->cfg.request_timeout_ms};
        rc = http_send(d->http, &req, on_delivery_done, dl);
        if (rc == 0)
            status_note_request(d, c);
    }
    if (rc != 0) {
        http_result failed = {.error_class = can_send ? "internal" : "aborted",
                              .error = can_send ? "could not start the request"
                                                : "not sent (customer deleted or shutting down)"};
        on_delivery_done(&failed, dl);
    }
}

/* Before a request that comes after a wait (a token, or the resend after a 401): past its
 * deadline it is dead-lettered as expired; one whose lease could run out before the request
 * ends goes back (another claim would send it twice). Returns whether it may go. */
static bool still_sendable(dispatcher *d, delivery *dl, customer *c)
{
    int64_t now = now_us();
    /* A reload during the wait found settings it cannot use: held, as in delivery_send. */
    if (c && customer_held_invalid(c)) {
        delivery_give_back(d, dl);
        return false;
    }
    if (dl->expires_us > 0 && now >= dl->expires_us) {
        delivery_expire(d, dl, c);
        return false;
    }
    long total_ms =
        c && c->request_timeout_ms > 0 ? c->request_timeout_ms : d->cfg.request_timeout_ms;
    if (now + (int64_t)total_ms * 1000 >= dl->lease_end_us) {
        /* Worth a line: a slow token endpoint eating the leases delays every item by a claim. */
        LOG_INFO("delivery_given_back", LOG_I("item", dl->item_id),
                 LOG_S("customer", c ? c->name : "?"),
                 LOG_S("why", "its lease would end before the request could"),
                 LOG_I("lease_left_ms", (dl->lease_end_us - now) / 1000),
                 LOG_I("request_timeout_ms", total_ms));
        delivery_give_back(d, dl);
        return false;
    }
    return true;
}

/* The customer's token request ended: sent with the token, or failed with its class. A
 * delivery whose customer no longer has that set (its credentials changed meanwhile, or it no
 * longer uses OAuth2) starts over with what the customer has now, also after a failure (of
 * credentials that are gone). */
static void on_token(oauth_waiter *w, http_headers *headers, uint64_t gen,
                     const http_result *failure)
{
    delivery *dl = pgp_list_entry(w, delivery, oauth_wait);
    dispatcher *d = dl->d;
    customer *c = customer_get(d, dl->customer_id);
    if (c && customer_conn_of(c)->oauth != dl->oauth_set &&
        !(failure && strcmp(failure->error_class, "aborted") == 0)) {
        if (still_sendable(d, dl, c))
            transmit(d, dl);
        return;
    }
    if (failure) {
        on_delivery_done(failure, dl);
        return;
    }
    if (!still_sendable(d, dl, c))
        return;
    dl->oauth_gen = gen;
    request(d, dl, c, headers);
}

/* Sends the delivery's request; an OAuth2 customer's takes its token first (see the top). */
static void transmit(dispatcher *d, delivery *dl)
{
    customer *c = customer_get(d, dl->customer_id);
    if (!c || !customer_conn_of(c)->oauth || !d->http || d->stop >= STOP_ABORTING) {
        request(d, dl, c, c ? customer_conn_of(c)->headers : NULL);
        return;
    }
    d->oauth =
        (oauth_env){.http = d->http, .m = d->obs.m, .requests_metric = d->obs.oauth_requests};
    http_headers *headers = NULL;
    http_result failure;
    dl->oauth_set = customer_conn_of(c)->oauth;
    dl->oauth_wait.cb = on_token;
    switch (
        oauth_acquire(customer_conn_of(c)->oauth, &d->oauth,
                      egress_proxy(d, customer_conn_of(c)->proxy,
                                   oauth_cred_token_url(customer_conn_of(c)->oauth)),
                      c->connect_timeout_ms > 0 ? c->connect_timeout_ms : d->cfg.connect_timeout_ms,
                      c->request_timeout_ms > 0 ? c->request_timeout_ms : d->cfg.request_timeout_ms,
                      &dl->oauth_wait, &headers, &dl->oauth_gen, &failure)) {
    case OAUTH_READY:
        request(d, dl, c, headers);
        break;
    case OAUTH_WAITING:
        break; /* on_token */
    case OAUTH_FAILED:
        on_delivery_done(&failure, dl);
        break;
    }
}

/* A send whose slot came: given back if a Retry-After came while it waited (unless the hold
 * ends within the lookahead: then it waits for the end), or moved if an earlier send of its
 * customer went out late; sent otherwise. */
static void slot_due(dispatcher *d, delivery *dl, int64_t now)
{
    customer *c = customer_get(d, dl->customer_id);
    if (c && customer_thr(c)->pace.hold_until_us > now + LOOKAHEAD_US) {
        delivery_give_back(d, dl);
        return;
    }
    int64_t at = earliest_send(c, dl, 0);
    if (c && customer_thr(c)->pace.hold_until_us > at)
        at = customer_thr(c)->pace.hold_until_us;
    if (at - now >= 1000) {
        dl->due_us = at;
        slot_remove(d, dl);
        if (slot_push(d, dl))
            return;
        dl->stage = STAGE_WIRE; /* no memory for the heap: sent now rather than lost */
    }
    delivery_send(d, dl);
}

void slots_on_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    int64_t now = now_us();
    /* Sends less than a millisecond early go now: the timer has millisecond resolution. */
    while (d->n_slots > 0 && d->slots[0]->due_us - now < 1000) {
        delivery *dl = d->slots[0];
        slot_due(d, dl, now);
        if (d->n_slots > 0 && d->slots[0] == dl)
            break; /* moved to a later time within the millisecond: next timer */
    }
    slots_arm(d);
}

void delivery_start(dispatcher *d, const claim_row *row, int64_t token, int64_t send_at,
                    claim_result *cr)
{
    delivery *dl = delivery_alloc(d);
    if (!dl) {
        LOG_ERROR("out_of_memory", LOG_S("where", "delivery"));
        return; /* the lease expires and the item comes back */
    }
    pgp_list_init(&dl->qlink);
    pgp_list_init(&dl->wlink);
    dl->d = d;
    dl->stage = STAGE_WIRE;
    dl->cr = cr;
    cr->refs++;
    dl->body = row->payload;
    dl->body_len = row->payload_len;
    dl->carrier = row->carrier;
    dl->item_id = row->item_id;
    dl->msg_id = row->msg_id;
    dl->ordered = row->ordered;
    dl->customer_id = row->customer_id;
    dl->attempt = row->attempt;
    dl->max_attempts = row->max_attempts;
    dl->token = token;
    dl->created_us = row->created_us;
    dl->expires_us = row->expires_us;
    dl->lease_end_us = row->lease_end_us > 0 ? row->lease_end_us
                                             : now_us() + (int64_t)d->cfg.lease_seconds * 1000000;
    dl->traceparent = row->traceparent;
    dl->tracestate = row->tracestate;
    if (row->rec_at > 0 && row->rec_period_us > 0) {
        dl->rec_at = row->rec_at;
        dl->rec_period_us = row->rec_period_us;
    }
    customer *c = customer_get(d, dl->customer_id);

    /* Count it in flight before sending: a synchronous failure path still decrements once. */
    pgp_list_push(&d->deliveries, &dl->link);
    d->in_flight++;
    carrier_state *cs = carrier_get(d, dl->carrier);
    if (cs)
        cs->in_flight++;
    if (c) {
        dl->host = c->host; /* counted in flight there once the request is actually sent */
        dl->unsent = true;
        limits_unsent(c, dl->host, +1);
        c->in_flight++;
        pair_in_flight_add(c, dl->carrier, 1);
        if (c->breaker.state == BREAKER_HALF_OPEN && !c->breaker.probe_in_flight) {
            c->breaker.probe_in_flight = true;
            dl->probe = true;
        }
    }

    send_at = earliest_send(c, dl, send_at);
    if (c && c->mode == MODE_SPACED)
        dl->planned_us = send_at;
    int64_t now = now_us();
    if (send_at - now >= 1000 && c) {
        dl->stage = STAGE_SLOT;
        dl->due_us = send_at;
        if (slot_push(d, dl)) {
            if (dl->host) {
                dl->host->booked++; /* work-queue claims leave its connection free for the slot */
                dl->host_booked = true;
            }
            if (d->slots[0] == dl)
                slots_arm(d);
            return;
        }
        dl->stage = STAGE_WIRE; /* no memory for the heap: sent now rather than lost */
    } else if (c && c->host && c->mode != MODE_SPACED) {
        window_push(d, dl); /* the claim drains the host's window once all its rows are in */
        return;
    }
    delivery_send(d, dl);
}

int deliveries_close_waiting(dispatcher *d)
{
    int n = 0;
    pgp_list *pos, *tmp;
    pgp_list_each_safe(pos, tmp, &d->deliveries)
    {
        delivery *dl = pgp_list_entry(pos, delivery, link);
        if (dl->stage == STAGE_WIRE)
            continue;
        pgp_list_remove(&dl->link);
        d->in_flight--;
        unqueue(d, dl);
        delivery_free(d, dl);
        n++;
    }
    return n;
}
