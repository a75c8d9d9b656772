/* throttle.c - a throttling receiver's answers applied to its customer.
 *
 * Owns the customers' pace (the rules are pace.c's): lowering and raising the effective rate
 * (spaced customers' GCRA period follows it, batch allowances use it), the Retry-After hold
 * (a spaced customer's GCRA time is pushed past it), the effective-rate gauge and log lines,
 * and writing effective rates to pgpace.frontier (at most once a second, TIMER_PACE) so that
 * `pgpace stats` shows them and a new leader resumes them instead of flooding a receiver that
 * just said "slower".
 */
#include "internal.h"

#include "gcra.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* How often a rate still climbing back is logged. */
#define PACE_LOG_EVERY_US (10 * 1000000LL)
/* Effective rates are written this long after a change (changes meanwhile go along). */
#define PACE_FLUSH_MS 1000

static pace_policy policy_for(const dispatcher *d, const customer *c)
{
    int64_t cap = (int64_t)d->cfg.retry_cap_ms * 1000;
    const throttle_state *t = customer_thr(c);
    return (pace_policy){
        .decrease = t->throttle_decrease > 0 ? t->throttle_decrease : d->cfg.throttle_decrease,
        .increase = t->throttle_increase > 0 ? t->throttle_increase : d->cfg.throttle_increase,
        .floor = t->throttle_floor > 0 ? t->throttle_floor : d->cfg.throttle_floor,
        .hold_base_us = (int64_t)d->cfg.retry_base_ms * 1000,
        .hold_cap_us = cap < 60000000 ? cap : 60000000};
}

void throttle_apply(dispatcher *d, customer *c)
{
    customer_pace_period(c);
    if (c->mode == MODE_UNLIMITED)
        return;
    const char *labels[] = {c->name};
    metrics_gauge_set(d->obs.m, d->obs.effective_rate, labels, customer_effective_rate(c));
}

static void mark_all_dirty(dispatcher *d)
{
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL)
        if (c->mode != MODE_UNLIMITED)
            c->pace_dirty = true;
}

static void arm(dispatcher *d)
{
    uv_timer_t *t = &d->timers[TIMER_PACE];
    if (!uv_is_active((uv_handle_t *)t) && !uv_is_closing((uv_handle_t *)t))
        uv_timer_start(t, throttle_on_timer, PACE_FLUSH_MS, 0);
}

/* A write that failed is done again in full: which of its rows landed is not known. */
static void on_pace_written(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (res && PQresultStatus(res) == PGRES_COMMAND_OK)
        return;
    if (res)
        LOG_WARN("effective_rates_not_written", LOG_S("error", PQresultErrorMessage(res)),
                 LOG_I("retry_in_ms", PACE_FLUSH_MS));
    mark_all_dirty(d);
    if (d->state == LEADER_LEADING)
        arm(d);
}

void throttle_on_timer(uv_timer_t *t)
{
    throttle_flush(t->data);
}

void throttle_flush(dispatcher *d)
{
    /* Also while a shutdown drains: the last changes are what the next leader resumes. */
    if (d->state != LEADER_LEADING || d->stop >= STOP_CLOSING)
        return;
    strbuf ids = {0}, rates = {0};
    size_t pos = 0, n = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL) {
        if (!c->pace_dirty)
            continue;
        c->pace_dirty = false;
        double rate = customer_thr(c)->pace.rate;
        strbuf_printf(&ids, "%s%" PRId64, n ? "," : "{", c->id);
        if (c->mode != MODE_UNLIMITED && rate > 0 && rate < c->rate)
            strbuf_printf(&rates, "%s%.17g", n ? "," : "{", rate);
        else
            strbuf_puts(&rates, n ? ",NULL" : "{NULL");
        n++;
    }
    if (n > 0) {
        strbuf_puts(&ids, "}");
        strbuf_puts(&rates, "}");
        const char *params[] = {[SQL_RUN_PACE_P_CUSTOMER] = strbuf_str(&ids),
                                [SQL_RUN_PACE_P_EFFECTIVE_RATE] = strbuf_str(&rates)};
        if (!params[0] || !params[1]) {
            LOG_ERROR("out_of_memory", LOG_S("where", "effective rates"));
            mark_all_dirty(d);
            arm(d);
        } else if (DSP_QUERY(d, run_pace, params, on_pace_written, d, "effective rates") != 0) {
            mark_all_dirty(d); /* not sent (connection lost): the next leadership loads them */
        }
    }
    strbuf_free(&ids);
    strbuf_free(&rates);
}

static void changed(dispatcher *d, customer *c)
{
    throttle_apply(d, c);
    c->pace_dirty = true;
    arm(d);
}

static void log_change(const customer *c, const char *event, int status, int64_t retry_after_ms)
{
    if (c->mode == MODE_UNLIMITED)
        LOG_INFO(event, LOG_S("customer", c->name),
                 LOG_I("in_flight_cap", customer_thr(c)->pace.cap), LOG_I("status", status),
                 LOG_I("retry_after_ms", retry_after_ms));
    else
        LOG_INFO(event, LOG_S("customer", c->name),
                 LOG_D("effective_rate", pace_rate(&customer_thr(c)->pace, c->rate)),
                 LOG_D("rate_per_minute", c->rate), LOG_I("status", status),
                 LOG_I("retry_after_ms", retry_after_ms));
}

/* An announcement is followed this long after the answer that made it, at least: a receiver
 * that stops announcing (or a proxy that strips the fields) gets the configured pace back. */
#define ANNOUNCED_FOR_US (60 * 1000000LL)
/* The longest reset of windowless announcements stands for their window this long after it was
 * last announced. */
#define ANNOUNCE_RESET_KEEP_US (5 * 60 * 1000000LL)
/* Ignored announcements are logged at most this often per customer (every one is counted). */
#define ANNOUNCE_LOG_EVERY_US (60 * 1000000LL)

/* What the receiver announced in the answer's RateLimit / X-RateLimit-* fields (pacing before
 * the 429): its rate bounds the customer's effective rate (never above the configured one:
 * customer_effective_rate takes the lowest), and "none remaining" holds the customer until
 * the reset (never longer than retry_after_max_s: rl_parse clamps it). An answer that is
 * malformed, contradictory or absurd is counted and otherwise ignored. */
static void note_announcement(dispatcher *d, customer *c, const http_result *r, int64_t now)
{
    if (c->thr && c->thr->announced_rate > 0 && now >= c->thr->announced_until_us) {
        c->thr->announced_rate = 0; /* not repeated: expired */
        throttle_apply(d, c);
        metrics_gauge_set(d->obs.m, d->obs.announced_rate, (const char *[]){c->name}, 0);
    }
    if (!c->ratelimit_headers || !r->ratelimit || c->mode == MODE_UNLIMITED)
        return;
    rl_announce a;
    const char *why = NULL;
    rl_status st =
        rl_parse(r->ratelimit, (double)now / 1e6, (double)d->cfg.retry_after_max_s, &a, &why);
    if (st == RL_NONE)
        return;
    throttle_state *t = customer_thr_mut(c);
    if (!t)
        return; /* what it announced is not followed (logged) */
    if (st == RL_IGNORED) {
        const char *labels[] = {c->name, why ? why : "malformed"};
        metrics_counter_add(d->obs.m, d->obs.ratelimit_ignored, labels, 1);
        if (now - t->announce_logged_us >= ANNOUNCE_LOG_EVERY_US) {
            t->announce_logged_us = now;
            LOG_WARN("ratelimit_headers_ignored", LOG_S("customer", c->name),
                     LOG_S("reason", why ? why : "malformed"), LOG_I("status", (int)r->status));
        }
        return;
    }
    double per_minute = 0;
    bool have_rate;
    if (a.window_s <= 0 && a.have_limit && a.have_reset && a.reset_s > 0 && !a.reset_clamped) {
        /* No window stated (X-RateLimit-*, RateLimit-Limit without a policy): the longest reset
         * announced lately stands for it: a fixed window's length, or the time a token bucket
         * takes to fill from empty. Its limit over that is the receiver's steady rate; what
         * remains spread until each reset would swing with every answer (a bucket's reset is
         * short while it is full). */
        if (a.reset_s > t->announce_reset_max_s ||
            now - t->announce_reset_at_us > ANNOUNCE_RESET_KEEP_US) {
            t->announce_reset_max_s = a.reset_s;
            t->announce_reset_at_us = now;
        }
        per_minute = a.limit * 60.0 / t->announce_reset_max_s;
        have_rate = true;
        a.window_s = t->announce_reset_max_s;
    } else {
        have_rate = rl_rate_per_minute(&a, &per_minute);
    }
    if (have_rate && per_minute > 0) {
        int64_t keep = a.window_s > 0 ? (int64_t)(a.window_s * 2e6) : 0;
        t->announced_until_us = now + (keep > ANNOUNCED_FOR_US ? keep : ANNOUNCED_FOR_US);
        if (per_minute != t->announced_rate) {
            bool first = t->announced_rate == 0;
            t->announced_rate = per_minute;
            throttle_apply(d, c);
            metrics_gauge_set(d->obs.m, d->obs.announced_rate, (const char *[]){c->name},
                              per_minute);
            if (first && per_minute < c->rate)
                LOG_INFO("pace_announced", LOG_S("customer", c->name),
                         LOG_D("announced_per_minute", per_minute),
                         LOG_D("rate_per_minute", c->rate));
        }
    }
    double hold_s;
    if (rl_hold_s(&a, &hold_s) && hold_s > 0) {
        int64_t until = now + (int64_t)(hold_s * 1e6);
        if (until > t->pace.hold_until_us) {
            t->pace.hold_until_us = until;
            /* As after a Retry-After: the next slot is after the hold, one item there. */
            if (c->mode == MODE_SPACED) {
                int64_t at = until + gcra_tolerance_us(c->period_us, c->burst);
                if (c->tat == GCRA_TAT_NONE || c->tat < at)
                    c->tat = at;
            }
            customer_schedule(d, c);
        }
    }
}

void throttle_note(dispatcher *d, customer *c, int64_t sent_us, const http_result *r,
                   const outcome_decision *v, int64_t now)
{
    pace_policy pol = policy_for(d, c);
    note_announcement(d, c, r, now);
    if (v->slow_customer) {
        const char *labels[] = {c->name};
        metrics_counter_add(d->obs.m, d->obs.throttled, labels, 1);
        throttle_state *t = customer_thr_mut(c);
        if (!t)
            return; /* not slowed (logged): the receiver throttles it again */
        int64_t held_before = t->pace.hold_until_us;
        int64_t retry_after_us = v->retry_after_ms >= 0 ? v->retry_after_ms * 1000 : -1;
        bool lowered = false;
        /* About the host (several of its customers throttled at once): the host's rate is
         * lowered (limits.c), not this endpoint's; its Retry-After still holds the endpoint. */
        if (limits_host_throttled(d, c, sent_us, now)) {
            if (retry_after_us > 0 && now + retry_after_us > t->pace.hold_until_us)
                t->pace.hold_until_us = now + retry_after_us;
        } else {
            lowered = pace_on_throttle(&t->pace, c->mode, c->rate, c->in_flight, &pol, sent_us,
                                       retry_after_us, now);
        }
        if (lowered) {
            changed(d, c);
            t->pace.logged_us = now;
            log_change(c, "pace_lowered", (int)r->status, v->retry_after_ms);
        }
        /* A spaced customer's next slot is after the hold, and only one item conforms there
         * (no burst the moment a receiver lets traffic through again). */
        if (c->mode == MODE_SPACED && t->pace.hold_until_us > held_before) {
            int64_t at = t->pace.hold_until_us + gcra_tolerance_us(c->period_us, c->burst);
            if (c->tat == GCRA_TAT_NONE || c->tat < at)
                c->tat = at;
        }
        return;
    }
    if (v->outcome != OUTCOME_SUCCESS)
        return;
    limits_host_success(d, c);
    int cap_max = c->max_in_flight > 0 && c->max_in_flight < d->cfg.max_host_connections
                      ? c->max_in_flight
                      : d->cfg.max_host_connections;
    /* A customer never throttled has nothing to restore (pace_on_success on a zero pace only
     * zeroes its streak, already zero). */
    throttle_state *t = c->thr;
    if (!t || !pace_on_success(&t->pace, c->mode, c->rate, &pol, cap_max))
        return;
    changed(d, c);
    bool restored = c->mode == MODE_UNLIMITED ? t->pace.cap == 0 : t->pace.rate == 0;
    if (restored || now - t->pace.logged_us >= PACE_LOG_EVERY_US) {
        t->pace.logged_us = now;
        log_change(c, restored ? "pace_restored" : "pace_rising", (int)r->status, -1);
    }
}

void throttle_reset_all(dispatcher *d)
{
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL) {
        if (c->thr)
            c->thr->pace = (pace){0};
        throttle_apply(d, c);
    }
}

void throttle_resume(dispatcher *d, customer *c, double effective_rate)
{
    if (c->mode == MODE_UNLIMITED || !(effective_rate > 0) || effective_rate >= c->rate)
        return;
    throttle_state *t = customer_thr_mut(c);
    if (!t)
        return; /* resumes at its configured rate (logged) */
    t->pace.rate = effective_rate;
    throttle_apply(d, c);
    LOG_INFO("pace_resumed", LOG_S("customer", c->name), LOG_D("effective_rate", effective_rate),
             LOG_D("rate_per_minute", c->rate));
}
