/* tenant.c - a customer's limit over all of its endpoints (migration 0018): one GCRA cell per
 * customer, shared by its endpoints beside each endpoint's own limit (the receiver's).
 *
 * Two records keep it exact:
 * - `tat` is GCRA over the slots handed to claimed items. A round asks an endpoint for no more
 *   than the cell's slots up to its horizon, less what claims in flight and the round's other
 *   endpoints already asked (`reserved`, `considering`); when the claim returns, each item gets
 *   a slot no earlier than its own limits would send it nor than the cell's next.
 * - `sent_tat` is GCRA over the sends that actually went out: a send that would break it (the
 *   one before it went late, a window held it) waits in the slot heap (delivery.c).
 * A new leader resumes both from the cell stored with each claim round (pgpace.tenant_frontier,
 * an upper bound of the slots handed out) and the latest send of the customer's endpoints.
 */
#include "internal.h"

#include "gcra.h"
#include "log.h"

#include <stdlib.h>

static int64_t gate_tolerance(const tenant_gate *g)
{
    return gcra_tolerance_us(g->period_us, g->burst);
}

static void gate_set_rate(tenant_gate *g, double rate, int burst)
{
    int64_t period = gcra_period_us(rate);
    g->rate = rate;
    g->burst = burst >= 1 ? burst : 1;
    g->period_us = period > 0 ? period : 60000000;
}

void tenant_gate_attach(dispatcher *d, customer *c, int64_t tenant_id, double rate, int burst)
{
    c->tenant_id = tenant_id;
    if (c->gate && (rate <= 0 || c->gate->id != tenant_id))
        tenant_gate_detach(d, c);
    if (rate <= 0)
        return;
    tenant_gate *g = c->gate;
    if (!g)
        g = hmap_get(&d->gates, &tenant_id, sizeof tenant_id);
    if (!g) {
        g = calloc(1, sizeof *g);
        if (!g || hmap_put(&d->gates, &tenant_id, sizeof tenant_id, g) != 0) {
            free(g);
            /* Without its gate the endpoint would send at its own limit only: held instead. */
            LOG_ERROR("out_of_memory", LOG_S("where", "tenant gate"));
            c->paused = true;
            return;
        }
        g->id = tenant_id;
        g->tat = g->sent_tat = GCRA_TAT_NONE;
    }
    if (g->rate != rate || g->burst != burst)
        gate_set_rate(g, rate, burst);
    if (c->gate != g) {
        c->gate = g;
        g->refs++;
    }
}

void tenant_gate_detach(dispatcher *d, customer *c)
{
    tenant_gate *g = c->gate;
    if (!g)
        return;
    c->gate = NULL;
    if (--g->refs > 0)
        return;
    hmap_del(&d->gates, &g->id, sizeof g->id);
    slide_limit_free(&g->lim);
    free(g);
}

void tenant_gates_free(dispatcher *d)
{
    size_t pos = 0;
    tenant_gate *g;
    while ((g = hmap_next(&d->gates, &pos)) != NULL) {
        slide_limit_free(&g->lim);
        free(g);
    }
    hmap_free(&d->gates);
}

/* The cell as it will be once the claims in flight and the round's other endpoints have their
 * slots: each of those takes one period. */
static int64_t gate_committed(const tenant_gate *g, int64_t now)
{
    int64_t base = g->tat == GCRA_TAT_NONE || g->tat < now ? now : g->tat;
    int64_t ahead = (int64_t)(g->reserved + g->considering) * g->period_us;
    return base > INT64_MAX - ahead ? INT64_MAX : base + ahead;
}

int tenant_gate_allow(const tenant_gate *g, int64_t now, int64_t horizon, int want)
{
    if (want <= 0)
        return 0;
    /* The committed cell with its tolerance restored where nothing is committed (an idle
     * customer may use its burst). */
    int64_t probe = g->reserved + g->considering == 0 ? g->tat : gate_committed(g, now);
    int n = gcra_take(&probe, horizon, g->period_us, g->burst, want);
    return n > 0 ? n : 0;
}

int64_t tenant_gate_slot(tenant_gate *g, int64_t at)
{
    int64_t earliest = gcra_eligible_at(g->tat, g->period_us, g->burst);
    int64_t slot = at > earliest ? at : earliest;
    int64_t base = g->tat == GCRA_TAT_NONE || g->tat < slot ? slot : g->tat;
    g->tat = base > INT64_MAX - g->period_us ? INT64_MAX : base + g->period_us;
    return slot;
}

int64_t tenant_gate_eligible(const tenant_gate *g, int64_t now)
{
    if (g->reserved + g->considering == 0)
        return gcra_eligible_at(g->tat, g->period_us, g->burst);
    int64_t at = gate_committed(g, now) - gate_tolerance(g);
    return at;
}

int64_t tenant_gate_earliest(const tenant_gate *g)
{
    return gcra_eligible_at(g->sent_tat, g->period_us, g->burst);
}

void tenant_gate_sent(tenant_gate *g, int64_t at)
{
    int64_t base = g->sent_tat == GCRA_TAT_NONE || g->sent_tat < at ? at : g->sent_tat;
    g->sent_tat = base > INT64_MAX - g->period_us ? INT64_MAX : base + g->period_us;
    /* The claims' cell never runs behind the sends: a late send moves the next slots too. */
    if (g->tat == GCRA_TAT_NONE || g->tat < g->sent_tat)
        g->tat = g->sent_tat;
}

void tenant_gate_resume(tenant_gate *g, int64_t stored_tat, int64_t last_send)
{
    int64_t tat = stored_tat;
    if (last_send > 0) {
        /* As if the latest send had used the whole burst: the next goes at least a period
         * after it, whatever came just before it. */
        int64_t after = last_send + g->period_us * (int64_t)g->burst;
        if (tat == GCRA_TAT_NONE || after > tat)
            tat = after;
    }
    if (tat == GCRA_TAT_NONE)
        return;
    if (g->tat == GCRA_TAT_NONE || tat > g->tat)
        g->tat = tat;
    if (g->sent_tat == GCRA_TAT_NONE || tat > g->sent_tat)
        g->sent_tat = tat;
}
