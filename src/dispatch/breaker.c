/* breaker.c - the per-customer circuit breaker.
 *
 * Owns customer.breaker. The transitions are pure functions of the state, the attempt's
 * verdict and the time (unit-tested); the wrappers below log each change, set the breaker
 * gauge and record the state in pgpace.breaker so that a new leader resumes it. The scheduler
 * expresses an open breaker as a later eligible time (customer_due_at).
 */
#include "internal.h"

#include "log.h"

#include <inttypes.h>
#include <stdio.h>

const char *breaker_state_name(breaker_state s)
{
    static const char *const names[] = {"closed", "open", "half_open"};
    return (unsigned)s < PGP_ARRAY_LEN(names) ? names[s] : "closed";
}

static void breaker_open(breaker *b, int64_t cooldown_us, int64_t cooldown_max_us, int64_t now)
{
    b->trips++;
    int64_t cooldown = cooldown_us;
    for (int i = 1; i < b->trips && cooldown < cooldown_max_us; i++)
        cooldown *= 2;
    if (cooldown > cooldown_max_us)
        cooldown = cooldown_max_us;
    b->state = BREAKER_OPEN;
    b->open_until = now + cooldown;
}

bool breaker_after_attempt(breaker *b, bool failed, int failures_to_open, int64_t cooldown_us,
                           int64_t cooldown_max_us, int64_t now)
{
    if (!failed) {
        b->failures = 0;
        if (b->state == BREAKER_CLOSED)
            return false;
        b->state = BREAKER_CLOSED;
        b->trips = 0;
        b->open_until = 0;
        return true;
    }
    b->failures++;
    /* A failed probe reopens it with a longer cooldown. Failures of deliveries that were in
     * flight when it opened add nothing. */
    if (b->state == BREAKER_HALF_OPEN ||
        (b->state == BREAKER_CLOSED && b->failures >= failures_to_open)) {
        breaker_open(b, cooldown_us, cooldown_max_us, now);
        return true;
    }
    return false;
}

int breaker_allows(breaker *b, int n, int64_t now, bool *became_half_open)
{
    *became_half_open = false;
    if (b->state == BREAKER_CLOSED)
        return n;
    if (b->state == BREAKER_OPEN) {
        if (now < b->open_until)
            return 0;
        b->state = BREAKER_HALF_OPEN;
        *became_half_open = true;
    }
    return b->probe_in_flight ? 0 : (n > 0 ? 1 : 0);
}

static void breaker_record(dispatcher *d, customer *c, const char *error)
{
    const breaker *b = &c->breaker;
    const char *labels[] = {c->name};
    metrics_gauge_set(d->obs.m, d->obs.breaker_state, labels, (double)b->state);
    char id[24], failures[16], trips[16], until[24];
    snprintf(id, sizeof id, "%" PRId64, c->id);
    snprintf(failures, sizeof failures, "%d", b->failures);
    snprintf(trips, sizeof trips, "%d", b->trips);
    snprintf(until, sizeof until, "%" PRId64, b->open_until);
    const char *params[] = {
        [SQL_RUN_BREAKER_P_CUSTOMER_ID] = id,
        [SQL_RUN_BREAKER_P_STATE] = breaker_state_name(b->state),
        [SQL_RUN_BREAKER_P_FAILURES] = failures,
        [SQL_RUN_BREAKER_P_TRIPS] = trips,
        [SQL_RUN_BREAKER_P_OPEN_UNTIL_US] = b->state == BREAKER_CLOSED ? NULL : until,
        [SQL_RUN_BREAKER_P_LAST_ERROR] = error,
    };
    DSP_QUERY(d, run_breaker, params, dsp_on_ignored, NULL, "breaker state");
}

/* Called with every delivery outcome that says something about the receiver's health. */
void breaker_note(dispatcher *d, customer *c, bool failed, const char *error)
{
    int64_t now = now_us();
    if (!breaker_after_attempt(&c->breaker, failed, d->cfg.breaker_failures,
                               (int64_t)d->cfg.breaker_cooldown_ms * 1000,
                               (int64_t)d->cfg.breaker_cooldown_max_ms * 1000, now))
        return;
    if (c->breaker.state == BREAKER_OPEN)
        LOG_WARN("breaker_opened", LOG_S("customer", c->name),
                 LOG_I("failures", c->breaker.failures), LOG_I("trips", c->breaker.trips),
                 LOG_I("cooldown_ms", (c->breaker.open_until - now) / 1000),
                 LOG_S("last_error", error ? error : ""));
    else
        LOG_INFO("breaker_closed", LOG_S("customer", c->name));
    breaker_record(d, c, failed ? error : NULL);
}

int breaker_allowance(dispatcher *d, customer *c, int n, int64_t now)
{
    bool half_open;
    int allowed = breaker_allows(&c->breaker, n, now, &half_open);
    if (half_open) {
        LOG_INFO("breaker_half_open", LOG_S("customer", c->name), LOG_I("trips", c->breaker.trips));
        breaker_record(d, c, NULL);
    }
    return allowed;
}
