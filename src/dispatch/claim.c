/* claim.c - claim rounds and batch ticks: which items to claim, and what the claim returned.
 *
 * Owns dispatcher.round (the one claim statement in flight), the claim and tick timers and
 * the queued tick. Each round is one run_claim.sql statement for every customer it takes:
 * - scheduled rounds take the customers the scheduler heap says are due: spaced customers as
 *   many items as GCRA lets through (sent at their slots), unlimited customers up to
 *   claim_batch_max, batch customers what they are still owed of their tick;
 * - batch ticks, on aligned multiples of batch_tick_ms, grant every batch customer with due
 *   work its allowance (rate per tick with fractional credit, once per tick across leader
 *   failovers), sharing the dispatcher's room and each host's connections evenly among the
 *   customers due, starting from a point that moves every tick so that when room is short a
 *   different customer misses out each time.
 * Every round respects max_in_flight, each customer's max_in_flight, each host's free
 * connections (reserved within the round), carrier budgets and the breaker.
 */
#include "internal.h"

#include "gcra.h"
#include "log.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

static void run_claim_round(dispatcher *d);
static void on_claim_result(pgconn *conn, PGresult *res, void *arg);

void claim_on_timer(uv_timer_t *t)
{
    run_claim_round(t->data);
}

/* Arms the claim timer for the scheduler heap's earliest customer (or stops it). */
void claim_arm(dispatcher *d)
{
    uv_timer_t *t = &d->timers[TIMER_CLAIM];
    /* A batch tick waits for the claims in flight: no new round until it ran. */
    if (!is_leading(d) || d->n_claims >= CLAIM_PIPELINE || d->tick_queued >= 0)
        return;
    int64_t id, due;
    /* At max_in_flight the next delivery to complete re-arms. */
    if (d->in_flight + d->claiming >= d->cfg.max_in_flight ||
        !sched_heap_peek(&d->heap, &id, &due)) {
        uv_timer_stop(t);
        return;
    }
    int64_t wait_us = due - now_us();
    uint64_t delay_ms = wait_us <= 0 ? 0 : (uint64_t)((wait_us + 999) / 1000);
    uv_update_time(d->loop);
    uv_timer_start(t, claim_on_timer, delay_ms, 0);
}

int claim_limit(int want, const customer *c)
{
    int n = want, held = c->in_flight + c->claiming;
    if (c->max_in_flight > 0 && c->max_in_flight - held < n)
        n = c->max_in_flight - held;
    if (c->mode == MODE_UNLIMITED && customer_thr(c)->pace.cap > 0 &&
        customer_thr(c)->pace.cap - held < n)
        n = customer_thr(c)->pace.cap - held;
    return n < 0 ? 0 : n;
}

int spaced_reserve(int used, int n_active, double concurrency, double spaced_weight, int n_open,
                   int max_connections)
{
    if (n_active <= 0 || n_open <= 0 || !(spaced_weight > 0) || !(concurrency >= 0))
        return 0;
    double weighted = ceil((double)max_connections * spaced_weight / (spaced_weight + n_open));
    double equal = ceil((double)max_connections * n_active / (n_active + n_open));
    double need = ceil(concurrency + 2 * sqrt(concurrency)) + 1;
    double target = need > equal ? need : equal;
    /* However unlucky they were with slow requests, a free connection for each one's next slot. */
    if (target < (double)used + n_active)
        target = (double)used + n_active;
    if (target > weighted)
        target = weighted;
    /* Every work-queue customer keeps at least one connection. */
    if (target > max_connections - n_open)
        target = max_connections - n_open;
    int keep = (int)target - used;
    return keep > 0 ? keep : 0;
}

/* A spaced customer keeps connections only if it may send within this long. */
#define RESERVE_HORIZON_US 1000000

bool customer_active(const customer *c, int64_t now)
{
    int64_t soon = now + RESERVE_HORIZON_US;
    if (c->paused || customer_thr(c)->pace.hold_until_us > soon ||
        (c->breaker.state == BREAKER_OPEN && c->breaker.open_until > soon))
        return false;
    return c->in_flight > 0 || has_due_pair(c, soon);
}

static void spaced_recount(dispatcher *d, host_state *h, int64_t now)
{
    h->spaced_active = 0;
    h->spaced_weight = 0;
    h->spaced_concurrency = 0;
    for (size_t i = 0; i < h->n_spaced; i++) {
        customer *c = customer_get(d, h->spaced_ids[i]);
        if (!c || !customer_active(c, now))
            continue;
        h->spaced_active++;
        h->spaced_weight += claim_weight(c);
        h->spaced_concurrency += customer_effective_rate(c) / 60.0 * h->latency_ms / 1000.0;
    }
}

share_pool host_pool(dispatcher *d, host_state *h, int n_open, int64_t now)
{
    int max = host_max_connections(d, h);
    int room = max - (h ? h->in_flight + h->claiming_room : 0);
    if (room < 0)
        room = 0;
    int open = room - (h ? h->booked : 0);
    if (h && n_open > 0 && h->n_spaced > 0) {
        if (recount_due(now, h->reserve_at_us, h->n_spaced)) { /* (internal.h) */
            spaced_recount(d, h, now);
            h->reserve_at_us = now;
        }
        open -= spaced_reserve(h->spaced_in_flight + h->booked, h->spaced_active,
                               h->spaced_concurrency, h->spaced_weight, n_open, max);
    }
    return (share_pool){
        .room = room, .open_room = open < 0 ? 0 : open, .ahead = h ? window_room(&d->cfg, h) : 0};
}

double claim_weight(const customer *c)
{
    if (c->mode == MODE_UNLIMITED || !c->host)
        return 1;
    /* A paced customer needs rate x request time connections to keep its rate: one more than
     * that is its weight, so a slow host does not push it below its rate. */
    return 1 + customer_effective_rate(c) / 60.0 * c->host->latency_ms / 1000.0;
}

int batch_tick_allowance(const customer *c, int64_t tick, double *credit)
{
    int64_t elapsed = c->have_tick ? tick - c->last_tick : 1;
    *credit = c->credit;
    if (elapsed <= 0)
        return -1; /* this tick was already dispatched (by us or a previous leader) */
    double rate = customer_effective_rate(c); /* throttles, host share, announcement */
    int allowed = batch_allowance(rate, credit, elapsed, batch_default_cap(rate));
    return allowed < 0 ? 0 : allowed;
}

/* The statement's array parameters, built while customers are added to the round. */
typedef struct claim_params {
    strbuf a[SQL_RUN_CLAIM_NPARAMS]; /* only the array parameters are used */
} claim_params;

static void claim_params_free(claim_params *p)
{
    for (size_t i = 0; i < PGP_ARRAY_LEN(p->a); i++)
        strbuf_free(&p->a[i]);
}

/* Empties the arrays for the next round, keeping their memory. */
static void claim_params_reset(claim_params *p)
{
    for (size_t i = 0; i < PGP_ARRAY_LEN(p->a); i++) {
        if (p->a[i].failed)
            strbuf_free(&p->a[i]);
        else
            strbuf_reset(&p->a[i]);
    }
}

static strbuf *arr(claim_params *p, int param)
{
    strbuf *sb = &p->a[param];
    strbuf_puts(sb, sb->len ? "," : "{");
    return sb;
}

/* Items a customer's due pairs could take now: their carriers' budgets (carriers without room
 * are listed in held, so the customer can wait for them when none has room). */
static int pairs_demand(dispatcher *d, customer *c, int want, int64_t now, carrier_state **held,
                        size_t *n_held, size_t held_cap)
{
    int demand = 0;
    *n_held = 0;
    size_t seen = 0; /* the same window of due pairs as add_pairs */
    for (size_t i = 0; i < c->n_pairs && demand < want && seen < ROUND_MAX_PAIRS; i++) {
        pair *pr = &c->pairs[i];
        if (pr->next_us > now)
            continue;
        seen++;
        /* Items without a carrier are not subject to carrier caps. */
        carrier_state *cs = pr->carrier[0] ? carrier_get(d, pr->carrier) : NULL;
        if (pr->carrier[0] && !cs)
            continue;
        int budget = cs ? carrier_budget(&d->cfg, cs) : want;
        if (budget <= 0 && *n_held < held_cap)
            held[(*n_held)++] = cs;
        demand += budget > 0 ? budget : 0;
    }
    return demand < want ? demand : want;
}

/* Adds one customer's due pairs (n items at most each, within its carrier's budget), least
 * recently served first. The claim gives the carriers turns, each pair's items in flight
 * counting as turns it already had: least in flight first, so a carrier whose items are slow
 * cannot hold the customer's whole room. Returns how many pairs it added. */
static int add_pairs(dispatcher *d, claim_params *p, hmap *touched, customer *c, int n, int64_t now)
{
    size_t order[ROUND_MAX_PAIRS], n_order = 0; /* insertion sort: few carriers are active */
    for (size_t i = 0; i < c->n_pairs && n_order < ROUND_MAX_PAIRS; i++) {
        if (c->pairs[i].next_us > now)
            continue; /* idle or later: not in this round's window */
        size_t j = n_order++;
        while (j > 0 && c->pairs[order[j - 1]].served_us > c->pairs[i].served_us) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    int added = 0;
    for (size_t o = 0; o < n_order; o++) {
        pair *pr = &c->pairs[order[o]];
        if (pr->next_us > now)
            continue;
        carrier_state *cs = pr->carrier[0] ? carrier_get(d, pr->carrier) : NULL;
        if (pr->carrier[0] && !cs)
            continue;
        int budget = cs ? carrier_budget(&d->cfg, cs) : n;
        if (budget <= 0)
            continue; /* held back; its items stay due and go first when the carrier has room */
        if (cs && hmap_put(touched, pr->carrier, strlen(pr->carrier), cs) != 0)
            continue;
        strbuf_put_i64(arr(p, SQL_RUN_CLAIM_P_PAIR_CUSTOMER), c->id);
        strbuf_array_text(arr(p, SQL_RUN_CLAIM_P_PAIR_CARRIER), pr->carrier);
        strbuf_put_i64(arr(p, SQL_RUN_CLAIM_P_PAIR_LIMIT), n < budget ? n : budget);
        strbuf_put_i64(arr(p, SQL_RUN_CLAIM_P_PAIR_IN_FLIGHT), pr->in_flight);
        added++;
    }
    return added;
}

/* Scheduled rounds sent after `since` (epoch us), as far as the ring remembers. */
static uint64_t rounds_since(const dispatcher *d, int64_t since)
{
    uint64_t known = d->sched_sent < WAIT_RING ? d->sched_sent : WAIT_RING;
    uint64_t lo = 0, hi = known; /* how many of the latest `known` were sent after since */
    while (lo < hi) {
        uint64_t mid = (lo + hi + 1) / 2; /* is the mid-th latest after since? */
        if (d->sched_at[(d->sched_sent - mid) % WAIT_RING] > since)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* A scheduled round takes the customer: how long it waited since it was due, in rounds sent
 * meanwhile and in seconds. */
static void observe_wait(dispatcher *d, customer *c, int64_t now)
{
    if (c->ready_us <= 0)
        return;
    int64_t since = c->ready_us;
    c->ready_us = 0;
    metrics_histogram_observe(d->obs.m, d->obs.wait_rounds, NULL, (double)rounds_since(d, since));
    metrics_histogram_observe(d->obs.m, d->obs.wait_seconds, NULL,
                              since < now ? (double)(now - since) / 1e6 : 0);
}

/* Adds the customer to the round with n items asked; frontier columns by mode. */
static void add_customer(claim_round *r, claim_params *p, customer *c, int n, int64_t base,
                         double credit, int allowed)
{
    strbuf_put_i64(arr(p, SQL_RUN_CLAIM_P_CUSTOMER), c->id);
    strbuf_put_i64(arr(p, SQL_RUN_CLAIM_P_CUSTOMER_LIMIT), n);
    if (r->tick >= 0 || c->mode == MODE_SPACED) {
        strbuf_printf(arr(p, SQL_RUN_CLAIM_P_FR_CUSTOMER), "%" PRId64, c->id);
        if (r->tick >= 0) {
            strbuf_puts(arr(p, SQL_RUN_CLAIM_P_FR_BASE), "NULL");
            strbuf_puts(arr(p, SQL_RUN_CLAIM_P_FR_PERIOD), "NULL");
            strbuf_printf(arr(p, SQL_RUN_CLAIM_P_FR_CREDIT), "%.17g", credit);
        } else {
            strbuf_printf(arr(p, SQL_RUN_CLAIM_P_FR_BASE), "%" PRId64, base);
            strbuf_printf(arr(p, SQL_RUN_CLAIM_P_FR_PERIOD), "%" PRId64, c->period_us);
            strbuf_puts(arr(p, SQL_RUN_CLAIM_P_FR_CREDIT), "NULL");
        }
    }
    c->round_slot = (int)r->n;
    c->woken = false; /* its turn is taken */
    r->ids[r->n] = c->id;
    r->base[r->n] = base;
    r->credit[r->n] = credit;
    r->asked[r->n] = n;
    r->allowed[r->n] = allowed;
    r->got[r->n] = 0;
    r->late[r->n] = 0;
    r->rec_held[r->n] = false;
    r->gate_of[r->n] = 0;
    r->limit_of[r->n] = c->host ? c->host->limit : NULL;
    if (r->limit_of[r->n])
        r->limit_of[r->n]->claiming += n; /* sent, or not, once the claim returns */
    if (c->gate) {
        c->gate->reserved += n; /* its slots are handed out when the claim returns */
        r->gate_of[r->n] = c->gate->id;
        r->gated = true;
    }
    if (customer_thr(c)->rec_period_us > 0)
        r->recovery_paced = true; /* its recovered items need run_claim.sql's recovery cell */
    r->asked_total += n;
    r->n++;
}

/* A round in flight holds what it asked for: its items of the dispatcher's and each customer's
 * room, its hosts' connections and window room, its carriers' budgets (sign +1), until its
 * result arrives (sign -1). */
static void round_hold_apply(dispatcher *d, claim_round *r, int sign)
{
    d->claiming += sign * r->asked_total;
    for (size_t k = 0; k < r->n; k++) {
        customer *c = customer_get(d, r->ids[k]);
        if (c) {
            c->claiming += sign * r->asked[k];
            c->rounds_in += sign;
        }
    }
    for (size_t i = 0; i < r->n_holds; i++) {
        round_hold *h = &r->holds[i];
        if (h->host) {
            h->host->claiming_room += sign * h->room;
            h->host->claiming_ahead += sign * h->ahead;
        }
        if (h->carrier)
            h->carrier->claiming += sign * h->budget;
    }
}

static void round_free(claim_round *r)
{
    free(r->holds);
    free(r);
}

/* The slots the round's endpoints asked of their tenants' limits: handed out once its result
 * is in, or free again when it failed or was never sent. By the gate's id: an endpoint may have
 * moved or gone meanwhile. */
static void round_gates_release(dispatcher *d, claim_round *r)
{
    /* Host limits are never freed while the dispatcher runs (limits.c). */
    for (size_t k = 0; k < r->n; k++) {
        host_limit *hl = r->limit_of[k];
        if (hl) {
            hl->claiming -= r->asked[k];
            if (hl->claiming < 0)
                hl->claiming = 0;
            r->limit_of[k] = NULL;
        }
    }
    for (size_t k = 0; r->gated && k < r->n; k++) {
        tenant_gate *g =
            r->gate_of[k] ? hmap_get(&d->gates, &r->gate_of[k], sizeof r->gate_of[k]) : NULL;
        if (g) {
            g->reserved -= r->asked[k];
            if (g->reserved < 0)
                g->reserved = 0;
        }
    }
}

/* Sends the round's statement. On failure the round is freed and the customers rescheduled. */
static void send_claim(dispatcher *d, claim_round *r, claim_params *p, hmap *touched)
{
    size_t pos = 0;
    carrier_state *cs;
    size_t n_carriers = 0;
    while (hmap_next(touched, &pos) != NULL)
        n_carriers++;
    if (n_carriers > 0) {
        round_hold *v = realloc(r->holds, (r->n_holds + n_carriers) * sizeof *v);
        if (v)
            r->holds = v;
        else
            n_carriers = 0; /* its carriers' budgets are not held: the next round may take them */
    }
    /* Every carrier of the round's pairs: an empty list tells the claim that no item names a
     * carrier, which lets it skip its rankings. */
    pos = 0;
    while ((cs = hmap_next(touched, &pos)) != NULL) {
        int budget = carrier_budget(&d->cfg, cs);
        strbuf_array_text(arr(p, SQL_RUN_CLAIM_P_CARRIER), cs->name);
        strbuf_printf(arr(p, SQL_RUN_CLAIM_P_CARRIER_BUDGET), "%d", budget);
        if (n_carriers > 0)
            r->holds[r->n_holds++] = (round_hold){.carrier = cs, .budget = budget};
    }
    static const int arrays[] = {SQL_RUN_CLAIM_P_PAIR_CUSTOMER,  SQL_RUN_CLAIM_P_PAIR_CARRIER,
                                 SQL_RUN_CLAIM_P_PAIR_LIMIT,     SQL_RUN_CLAIM_P_CUSTOMER,
                                 SQL_RUN_CLAIM_P_CUSTOMER_LIMIT, SQL_RUN_CLAIM_P_CARRIER,
                                 SQL_RUN_CLAIM_P_CARRIER_BUDGET, SQL_RUN_CLAIM_P_FR_CUSTOMER,
                                 SQL_RUN_CLAIM_P_FR_BASE,        SQL_RUN_CLAIM_P_FR_PERIOD,
                                 SQL_RUN_CLAIM_P_FR_CREDIT,      SQL_RUN_CLAIM_P_PAIR_IN_FLIGHT};
    const char *params[SQL_RUN_CLAIM_NPARAMS] = {0};
    bool ok = true;
    for (size_t i = 0; i < PGP_ARRAY_LEN(arrays); i++) {
        strbuf *sb = &p->a[arrays[i]];
        strbuf_puts(sb, sb->len ? "}" : "{}");
        params[arrays[i]] = strbuf_str(sb);
        ok = ok && params[arrays[i]];
    }
    char default_budget[16], lease[16], token[24], tick[24], rec_ahead[24];
    snprintf(default_budget, sizeof default_budget, "%d", d->cfg.carrier_max_per_round);
    snprintf(lease, sizeof lease, "%d", d->cfg.lease_seconds);
    snprintf(token, sizeof token, "%" PRId64, r->token);
    snprintf(tick, sizeof tick, "%" PRId64, r->tick);
    /* Recovered items are claimed as far ahead of their recovery slot as spaced items of
     * theirs (a round may take a customer COALESCE_US before it is due): the dispatcher holds
     * them until the slot. */
    snprintf(rec_ahead, sizeof rec_ahead, "%d", LOOKAHEAD_US + COALESCE_US);
    params[SQL_RUN_CLAIM_P_DEFAULT_CARRIER_BUDGET] = default_budget;
    params[SQL_RUN_CLAIM_P_LEASE_S] = lease;
    params[SQL_RUN_CLAIM_P_TOKEN] = token;
    params[SQL_RUN_CLAIM_P_CLAIMED_BY] = d->instance;
    params[SQL_RUN_CLAIM_P_TICK] = r->tick >= 0 ? tick : NULL; /* NULL: not a batch tick */
    params[SQL_RUN_CLAIM_P_REC_AHEAD_US] = rec_ahead;
    /* Each tenant limit of the round, once: its cell as it will be when the round's slots are
     * handed out, for a new leader (pgpace.tenant_frontier). */
    int64_t gate_now = now_us();
    for (size_t k = 0; r->gated && k < r->n; k++) {
        tenant_gate *g =
            r->gate_of[k] ? hmap_get(&d->gates, &r->gate_of[k], sizeof r->gate_of[k]) : NULL;
        if (!g || g->listed_in == r->token)
            continue;
        g->listed_in = r->token;
        strbuf_put_i64(arr(p, SQL_RUN_CLAIM_P_GATE_CUSTOMER), g->id);
        int64_t base = g->tat == INT64_MIN || g->tat < gate_now ? gate_now : g->tat;
        strbuf_put_i64(arr(p, SQL_RUN_CLAIM_P_GATE_TAT),
                       base + LOOKAHEAD_US + COALESCE_US + (int64_t)g->reserved * g->period_us);
    }
    static const int gate_arrays[] = {SQL_RUN_CLAIM_P_GATE_CUSTOMER, SQL_RUN_CLAIM_P_GATE_TAT};
    for (size_t i = 0; i < PGP_ARRAY_LEN(gate_arrays); i++) {
        strbuf *sb = &p->a[gate_arrays[i]];
        strbuf_puts(sb, sb->len ? "}" : "{}");
        params[gate_arrays[i]] = strbuf_str(sb);
        ok = ok && params[gate_arrays[i]];
    }
    if (!ok)
        LOG_ERROR("out_of_memory", LOG_S("where", "claim parameters"));
    r->sent_ns = uv_hrtime();
    claim_stmt st; /* run_claim.sql, or its lean form for a round of unlimited customers */
    claim_statement(params, r->recovery_paced || r->gated, &st);
    if (ok &&
        pgconn_query_prepared(d->db, st.sql, st.nparams, st.params, on_claim_result, r) == 0) {
        if (d->n_claims > 0)
            metrics_counter_add(d->obs.m, d->obs.claims_pipelined, NULL, 1);
        if (r->tick < 0)
            d->sched_at[d->sched_sent++ % WAIT_RING] = now_us();
        d->claims[d->n_claims++] = r;
        round_hold_apply(d, r, +1);
        /* An unlimited customer may be in the next round too, for what the room it was not
         * granted here still allows (the pipeline's second claim). */
        for (size_t k = 0; k < r->n; k++) {
            customer *c = customer_get(d, r->ids[k]);
            if (c && c->mode == MODE_UNLIMITED)
                customer_schedule(d, c);
        }
        return;
    }
    round_gates_release(d, r);
    for (size_t k = 0; k < r->n; k++) {
        customer *c = customer_get(d, r->ids[k]);
        if (c) {
            c->round_slot = -1;
            customer_schedule(d, c);
        }
    }
    round_free(r);
}

/* A customer considered for a round, before the division. */
typedef struct candidate {
    customer *c;
    int64_t base;
    double credit;
    int allowed;
} candidate;

/* A round being built: the round itself, its statement's arrays, the carriers it touches, the
 * dispatcher's room not yet given out, and the customers considered with what they want of
 * their hosts' connections (one pool per host, share.c). */
typedef struct round_build {
    claim_round *r;
    claim_params p;
    hmap touched;
    int room;
    size_t n, n_pools;
    candidate cand[ROUND_MAX_CUSTOMERS];
    share_claimant cl[ROUND_MAX_CUSTOMERS];
    share_pool pools[ROUND_MAX_CUSTOMERS];
    share_pool before[ROUND_MAX_CUSTOMERS]; /* each pool before the division */
    host_state *pool_host[ROUND_MAX_CUSTOMERS];
    uint32_t heap[ROUND_MAX_CUSTOMERS + 1];
    /* Hierarchical division (tenant_groups): each claimant's group, the groups, their members. */
    uint32_t group[ROUND_MAX_CUSTOMERS];
    share_claimant groups[ROUND_MAX_CUSTOMERS];
    uint32_t members[ROUND_MAX_CUSTOMERS];
} round_build;

/* A round's scratch is large (its arrays hold ROUND_MAX_CUSTOMERS entries) and only the first
 * n entries are ever read: the last round's is reused without clearing it. */
static round_build *round_begin(dispatcher *d, int64_t tick)
{
    round_build *b = d->spare_build;
    d->spare_build = NULL;
    if (!b && (b = malloc(sizeof *b)) != NULL)
        memset(&b->p, 0, sizeof b->p);
    claim_round *r = malloc(sizeof *r);
    if (!b || !r) {
        if (b)
            claim_params_free(&b->p);
        free(b);
        free(r);
        LOG_ERROR("out_of_memory", LOG_S("where", "claim round"));
        return NULL;
    }
    b->r = r;
    b->n = b->n_pools = 0;
    r->d = d;
    r->tick = tick;
    r->n = 0;
    r->asked_total = 0;
    r->holds = NULL;
    r->n_holds = 0;
    r->recovery_paced = false;
    r->gated = false;
    /* Tokens are unguessable so that no other writer can finalise an item it did not claim;
     * without the CSPRNG there is no round (its customers wait for the next). */
    uint64_t token;
    if (RAND_bytes((unsigned char *)&token, sizeof token) != 1) {
        LOG_ERROR("random_failed", LOG_S("where", "claim token"));
        free(b->r);
        d->spare_build = b;
        return NULL;
    }
    b->r->token = (int64_t)(token & INT64_MAX);
    hmap_init(&b->touched);
    b->room = d->cfg.max_in_flight - d->in_flight - d->claiming;
    return b;
}

/* Considers customer c for the round with `demand` items (already within its own limits, its
 * carriers' budgets and its breaker). */
static void consider(dispatcher *d, round_build *b, customer *c, int demand, int64_t base,
                     double credit, int allowed)
{
    int pool = -1;
    if (c->host) {
        if (c->host->pool_slot < 0) {
            c->host->pool_slot = (int)b->n_pools;
            b->pool_host[b->n_pools++] = c->host;
        }
        pool = c->host->pool_slot;
    }
    /* What it asks is kept from the tenant's other endpoints considered after it, and from
     * the other customers of a limited host. */
    if (c->gate)
        c->gate->considering += demand;
    if (c->host && c->host->limit)
        c->host->limit->considering += demand;
    b->cand[b->n] = (candidate){.c = c, .base = base, .credit = credit, .allowed = allowed};
    b->cl[b->n] = (share_claimant){.demand = demand,
                                   .use = c->in_flight + c->claiming,
                                   .weight = claim_weight(c),
                                   .pool = pool,
                                   .open_only = c->mode != MODE_SPACED};
    b->n++;
}

/* Fairness is hierarchical: what customers share (a host's connections, the round's room) is
 * divided among customers first, then among a customer's endpoints (share_divide_grouped).
 * Groups the claimants by (customer, pool, open_only) into b->group; returns the number of
 * groups, or 0 when every group would have one claimant (no customer has two endpoints in the
 * round): then the plain division is the same and cheaper. */
static size_t tenant_groups(round_build *b)
{
    bool endpoints = false;
    for (size_t k = 0; k < b->n && !endpoints; k++)
        endpoints = b->cand[k].c->grouped;
    if (!endpoints)
        return 0;
    hmap groups;
    hmap_init(&groups);
    struct {
        int64_t tenant;
        int32_t pool;
        int32_t open_only;
    } key;
    memset(&key, 0, sizeof key);
    size_t n_groups = 0;
    bool shared = false;
    for (size_t k = 0; k < b->n; k++) {
        key.tenant = b->cand[k].c->tenant_id;
        key.pool = b->cl[k].pool;
        key.open_only = b->cl[k].open_only;
        uintptr_t g = (uintptr_t)hmap_get(&groups, &key, sizeof key);
        if (g == 0) {
            g = ++n_groups; /* stored one up: 0 is "absent" */
            if (hmap_put(&groups, &key, sizeof key, (void *)g) != 0) {
                LOG_ERROR("out_of_memory", LOG_S("where", "tenant groups"));
                hmap_free(&groups);
                return 0; /* divided flat: fair among endpoints, not customers */
            }
        } else {
            shared = true;
        }
        b->group[k] = (uint32_t)(g - 1);
    }
    hmap_free(&groups);
    return shared ? n_groups : 0;
}

/* A work-queue customer left out because its host's window is full still gets one item when one
 * of its due pairs has nothing out: a carrier's (or a new customer's) first item would otherwise
 * wait until the window has drained to half, behind what another carrier was claimed (a
 * replay), hundreds of milliseconds on a slow host. Such items may take the window past its
 * size by window_fresh_room(), and each pair only one, as then it has an item out (and none while
 * a round of its customer is out). */
static void fresh_pairs(dispatcher *d, round_build *b, int64_t now)
{
    for (size_t k = 0; k < b->n && b->room > 0; k++) {
        share_claimant *cl = &b->cl[k];
        int pool = cl->pool;
        if (cl->grant > 0 || cl->demand <= 0 || pool < 0 || !cl->open_only ||
            b->pools[pool].open_room + b->pools[pool].ahead > 0)
            continue;
        host_state *h = b->pool_host[pool];
        int granted = b->before[pool].ahead - b->pools[pool].ahead;
        /* Not while a round of the customer is out: its pairs' counts are not known yet (the
         * one that got the previous such item would look fresh again). */
        customer *c = b->cand[k].c;
        if (c->rounds_in > 0 || granted >= window_fresh_room(&d->cfg, h) ||
            !customer_has_fresh_pair(c, now))
            continue;
        cl->grant = 1;
        b->pools[pool].ahead--; /* held by the round like the rest of its window room */
    }
}

/* Divides the room among the customers considered and adds each to the round with its share.
 * One that got nothing because its host is full waits for the host; a batch tick lists every
 * customer considered, with nothing asked, so its tick is recorded (what it is owed is claimed
 * as room frees). */
static void divide(dispatcher *d, round_build *b, int64_t now)
{
    /* Each host's room, once it is known how many work-queue customers contend for it. */
    for (size_t i = 0; i < b->n_pools; i++)
        b->pools[i].open_room = 0;
    for (size_t k = 0; k < b->n; k++)
        if (b->cl[k].pool >= 0 && b->cl[k].open_only && b->cl[k].demand > 0)
            b->pools[b->cl[k].pool].open_room++;
    for (size_t i = 0; i < b->n_pools; i++)
        b->before[i] = b->pools[i] = host_pool(d, b->pool_host[i], b->pools[i].open_room, now);
    size_t n_groups = tenant_groups(b);
    if (n_groups > 0) {
        share_divide_grouped(b->cl, b->n, b->group, n_groups, b->groups, b->members, b->pools,
                             b->room > 0 ? b->room : 0, d->rounds, b->heap);
    } else
        share_divide(b->cl, b->n, b->pools, b->room > 0 ? b->room : 0, d->rounds, b->heap);
    fresh_pairs(d, b, now);
    for (size_t k = 0; k < b->n; k++) {
        customer *c = b->cand[k].c;
        if (c->host && c->host->limit) {
            c->host->limit->considering -= b->cl[k].demand;
            if (c->host->limit->considering < 0)
                c->host->limit->considering = 0;
        }
        if (c->gate) {
            c->gate->considering -= b->cl[k].demand;
            if (c->gate->considering < 0)
                c->gate->considering = 0;
            if (b->cl[k].grant > 0)
                c->gate_served_us = now; /* its tenant's other endpoints go first next time */
        }
    }
    d->rounds++;
    /* What the round holds of each host while in flight (send_claim applies it). */
    b->r->holds = b->n_pools ? malloc(b->n_pools * sizeof *b->r->holds) : NULL;
    for (size_t i = 0; b->r->holds && i < b->n_pools; i++) {
        int room = b->before[i].room - b->pools[i].room;
        int ahead = b->before[i].ahead - b->pools[i].ahead;
        if (room > 0 || ahead > 0)
            b->r->holds[b->r->n_holds++] =
                (round_hold){.host = b->pool_host[i], .room = room, .ahead = ahead};
    }
    for (size_t k = 0; k < b->n; k++) {
        candidate *cd = &b->cand[k];
        customer *c = cd->c;
        int n = b->cl[k].grant;
        if (n > 0 && add_pairs(d, &b->p, &b->touched, c, n, now) == 0)
            n = 0;
        if (n == 0 && b->r->tick < 0) {
            int pool = b->cl[k].pool;
            bool host_full = pool >= 0 && b->cl[k].demand > 0 &&
                             (b->cl[k].open_only ? b->pools[pool].open_room + b->pools[pool].ahead
                                                 : b->pools[pool].room) <= 0;
            if (host_full)
                wait_on(&c->host->waiting, c); /* woken when a request to the host ends */
            else
                customer_schedule(d, c);
            continue;
        }
        b->room -= n;
        if (b->r->tick < 0)
            observe_wait(d, c, now);
        add_customer(b->r, &b->p, c, n, cd->base, cd->credit, cd->allowed);
    }
    for (size_t i = 0; i < b->n_pools; i++)
        b->pool_host[i]->pool_slot = -1;
}

void claim_scratch_free(dispatcher *d)
{
    if (!d->spare_build)
        return;
    claim_params_free(&d->spare_build->p);
    free(d->spare_build);
    d->spare_build = NULL;
}

/* Sends the round if it has customers; frees what building it took. */
static void round_finish(dispatcher *d, round_build *b)
{
    if (b->r->n == 0) {
        round_free(b->r);
    } else {
        if (b->r->tick >= 0)
            LOG_DEBUG("batch_tick", LOG_I("tick", b->r->tick),
                      LOG_I("customers", (long long)b->r->n));
        send_claim(d, b->r, &b->p, &b->touched);
    }
    claim_params_reset(&b->p);
    hmap_free(&b->touched);
    if (d->spare_build) {
        claim_params_free(&b->p);
        free(b);
    } else {
        d->spare_build = b;
    }
    claim_arm(d);
}

/* At most what the customer's tenant limit, shared with the tenant's other endpoints, lets a
 * round ask for now (tenant.c): its slots within the lookahead and coalescing window. */
static int gate_limit(const customer *c, int64_t now, int want)
{
    if (!c->gate)
        return want;
    return tenant_gate_allow(c->gate, now, now + LOOKAHEAD_US + COALESCE_US, want);
}

/* What a customer asks of a scheduled round before the division, within its own limits, its
 * carriers' budgets and its breaker; 0 when it asks nothing now (it is then rescheduled, or
 * waits for a carrier). */
static int round_demand(dispatcher *d, customer *c, int64_t now, int64_t tick, int64_t *base)
{
    int want;
    *base = 0;
    if (c->mode == MODE_BATCH) {
        want = batch_owed(c, tick); /* the rest of this tick's allowance */
    } else if (c->mode == MODE_SPACED) {
        /* How many conform now; tat itself moves only by what the claim really got. */
        int64_t probe = c->tat;
        want =
            gcra_take(&probe, now + LOOKAHEAD_US + COALESCE_US, c->period_us, c->burst, c->burst);
        *base = c->tat == GCRA_TAT_NONE || c->tat < now ? now : c->tat;
    } else {
        want = d->cfg.claim_batch_max;
    }
    /* Held by a Retry-After: a spaced customer may be claimed its lookahead before the end. */
    if (customer_thr(c)->pace.hold_until_us > now + (c->mode == MODE_SPACED ? LOOKAHEAD_US : 0))
        return 0;
    want = limits_allow(c, now, gate_limit(c, now, claim_limit(want, c)));
    carrier_state *held[16];
    size_t n_held = 0;
    int demand = want > 0 ? pairs_demand(d, c, want, now, held, &n_held, PGP_ARRAY_LEN(held)) : 0;
    if (want > 0 && demand == 0 && n_held > 0) {
        for (size_t i = 0; i < n_held; i++)
            wait_on(&held[i]->waiting, c); /* woken when the carrier's room frees */
        return -1;
    }
    return breaker_allowance(d, c, demand, now);
}

/* Considers a customer the scheduler heap gave a scheduled round, or puts it back. */
static void round_take(dispatcher *d, round_build *b, customer *c, int64_t now, int64_t tick)
{
    if (c->paused || (c->mode == MODE_BATCH && batch_owed(c, tick) == 0))
        return;
    /* Spaced and batch customers are in one round at a time (their slots and allowance
     * follow from its result, which reschedules them). */
    if (c->rounds_in > 0 && c->mode != MODE_UNLIMITED)
        return;
    /* Only spaced customers are taken before they are due (COALESCE_US). */
    int64_t due;
    if (c->mode != MODE_SPACED && customer_due_at(c, tick, &due) && due > now) {
        customer_schedule(d, c);
        return;
    }
    int64_t base;
    int demand = round_demand(d, c, now, tick, &base);
    if (demand < 0)
        return; /* waits for a carrier */
    if (demand == 0) {
        customer_schedule(d, c);
        return;
    }
    consider(d, b, c, demand, base, 0, 0);
}

static int cmp_gate_served(const void *a, const void *b)
{
    int64_t x = (*(customer *const *)a)->gate_served_us,
            y = (*(customer *const *)b)->gate_served_us;
    if (x != y)
        return x < y ? -1 : 1;
    int64_t i = (*(customer *const *)a)->id, j = (*(customer *const *)b)->id;
    return (i > j) - (i < j);
}

static void run_claim_round(dispatcher *d)
{
    if (!is_leading(d) || d->n_claims >= CLAIM_PIPELINE || d->tick_queued >= 0)
        return;
    int64_t now = now_us();
    int64_t tick = batch_tick_at(&d->cfg, now);
    int64_t ids[ROUND_MAX_CUSTOMERS];
    size_t n_ids = sched_heap_pop_due(&d->heap, now + COALESCE_US, ids, ROUND_MAX_CUSTOMERS);
    if (n_ids == 0) {
        claim_arm(d);
        return;
    }
    round_build *b = round_begin(d, -1);
    if (!b) {
        for (size_t i = 0; i < n_ids; i++) {
            customer *c = customer_get(d, ids[i]);
            if (c)
                customer_schedule(d, c);
        }
        return;
    }
    /* Endpoints that share a tenant limit come after the others, least recently served first:
     * when the limit is the tighter one, the tenant's endpoints take turns at it. */
    customer *gated[ROUND_MAX_CUSTOMERS];
    size_t n_gated = 0;
    for (size_t i = 0; i < n_ids; i++) {
        customer *c = customer_get(d, ids[i]);
        if (c && c->gate)
            gated[n_gated++] = c;
        else if (c)
            round_take(d, b, c, now, tick);
    }
    if (n_gated > 1)
        qsort(gated, n_gated, sizeof *gated, cmp_gate_served);
    for (size_t i = 0; i < n_gated; i++)
        round_take(d, b, gated[i], now, tick);
    divide(d, b, now);
    round_finish(d, b);
}

/* The batch customers with work, in an order that starts at a point moving every tick. */
static customer **batch_customers(dispatcher *d, size_t *n_out)
{
    size_t n = 0, cap = 0, pos = 0;
    customer **v = NULL, *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL) {
        if (c->mode != MODE_BATCH || c->paused || c->n_pairs == 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            customer **nv = realloc(v, ncap * sizeof *nv);
            if (!nv)
                break;
            v = nv;
            cap = ncap;
        }
        v[n++] = c;
    }
    *n_out = n;
    return v;
}

/* A batch tick: every batch customer with due work gets its allowance (at its effective rate),
 * and the room and each host's connections are divided among them (share.c); what a share
 * leaves unclaimed is owed and claimed as room frees. A customer held by a Retry-After gets
 * its allowance but claims it only when the hold ends (and not after this tick). */
static void run_batch_tick(dispatcher *d, int64_t tick)
{
    int64_t now = now_us();
    round_build *b = round_begin(d, tick);
    if (!b)
        return;
    size_t n_batch = 0;
    customer **batch = batch_customers(d, &n_batch);
    for (size_t k = 0; k < n_batch && b->n < ROUND_MAX_CUSTOMERS; k++) {
        customer *c = batch[(k + (size_t)tick) % n_batch];
        if (!has_due_pair(c, now))
            continue;
        double credit;
        int allowed = batch_tick_allowance(c, tick, &credit);
        if (allowed < 0)
            continue;
        int demand = 0;
        if (customer_thr(c)->pace.hold_until_us <= now) {
            carrier_state *held[16];
            size_t n_held = 0;
            demand = pairs_demand(d, c,
                                  limits_allow(c, now, gate_limit(c, now, claim_limit(allowed, c))),
                                  now, held, &n_held, PGP_ARRAY_LEN(held));
            demand = breaker_allowance(d, c, demand, now);
        }
        batch_refund(&credit, 0);
        consider(d, b, c, demand, 0, credit, allowed);
    }
    free(batch);
    divide(d, b, now);
    round_finish(d, b);
}

static void on_tick_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (!is_leading(d))
        return;
    /* The nearest boundary: libuv may fire a few microseconds before it. */
    int64_t tick = (now_us() / 1000 + d->cfg.batch_tick_ms / 2) / d->cfg.batch_tick_ms;
    if (d->n_claims > 0)
        d->tick_queued = tick;
    else
        run_batch_tick(d, tick);
    tick_arm(d, tick);
}

/* Arms the timer for the boundary after tick `after`. Computed from the tick just handled, not
 * from a fresh clock read: a timer that fires a little early must not skip a boundary. */
void tick_arm(dispatcher *d, int64_t after)
{
    uv_update_time(d->loop);
    int64_t now_ms = now_us() / 1000;
    int64_t next_ms = (after + 1) * d->cfg.batch_tick_ms;
    uv_timer_start(&d->timers[TIMER_TICK], on_tick_timer,
                   next_ms > now_ms ? (uint64_t)(next_ms - now_ms) : 0, 0);
}

/* A pair that returned fewer items than asked: sleep until its next item, or until its
 * recovery pace lets its held-back recovered items go (claimed as spaced items are, their
 * lookahead before), or drop it. */
static void note_drained(customer *c, const claim_row *row)
{
    int64_t next = row->has_next ? row->next_us : PAIR_IDLE;
    if (row->rec_at > 0 && row->rec_at - LOOKAHEAD_US < next)
        next = row->rec_at - LOOKAHEAD_US;
    if (next == PAIR_IDLE) {
        pair_drop(c, row->carrier);
        return;
    }
    pair *p = pair_find(c, row->carrier);
    if (p)
        p->next_us = next;
    else
        pair_note(c, row->carrier, next);
}

/* The customer's index in the round, or -1. */
static int round_slot_of(const claim_round *r, const customer *c, int64_t customer_id)
{
    return c && c->round_slot >= 0 && (size_t)c->round_slot < r->n &&
                   r->ids[c->round_slot] == customer_id
               ? c->round_slot
               : -1;
}

/* One claimed item: count it, and start its delivery (at its GCRA slot for spaced customers:
 * the j-th item of the round goes at base + (j - 1) * T less the burst tolerance, never before
 * now), or give it straight back when a stop began meanwhile. */
static void take_item(dispatcher *d, claim_round *r, customer *c, const claim_row *row, int64_t now,
                      claim_result *cr)
{
    if (c) {
        const char *mode_label[] = {mode_name(c->mode)};
        metrics_counter_add(d->obs.m, d->obs.items_claimed, mode_label, 1);
        pair *served = pair_find(c, row->carrier);
        if (served)
            served->served_us = now;
    }
    int slot = round_slot_of(r, c, row->customer_id);
    if (slot >= 0)
        r->got[slot]++;
    /* A stop began, or a Retry-After came while the claim was out: given straight back (a
     * spaced customer's item whose slot is within the lookahead of the hold's end waits). */
    bool held = c && customer_thr(c)->pace.hold_until_us >
                         now + (c->mode == MODE_SPACED ? LOOKAHEAD_US : 0);
    if (d->stop != STOP_NONE || held) {
        final_push(
            &d->pending,
            (final_entry){.item_id = row->item_id, .token = r->token, .outcome = OUTCOME_RELEASE});
        if (held)
            pair_note(c, row->carrier, customer_thr(c)->pace.hold_until_us);
        return;
    }
    int64_t send_at =
        c && customer_thr(c)->pace.hold_until_us > now ? customer_thr(c)->pace.hold_until_us : now;
    if (c && c->mode == MODE_SPACED && slot >= 0) {
        int64_t at = r->base[slot] + (int64_t)(r->got[slot] - 1) * c->period_us -
                     gcra_tolerance_us(c->period_us, c->burst);
        if (at > send_at)
            send_at = at;
        /* Late only against a slot at or after the round's base: burst slots before it are
         * early sends the tolerance allows, not lateness. */
        int64_t due = at > r->base[slot] ? at : r->base[slot];
        if (now - due > r->late[slot])
            r->late[slot] = now - due;
    }
    /* A recovered item under its customer's recovery pace: not before its slot there. */
    if (row->rec_at > send_at)
        send_at = row->rec_at;
    /* An endpoint sharing its tenant's limit: not before the tenant's next slot either. */
    if (c && c->gate)
        send_at = tenant_gate_slot(c->gate, send_at);
    delivery_start(d, row, r->token, send_at, cr);
}

/* What the round's customers keep once their items are known. */
static void settle_customers(dispatcher *d, const claim_round *r, int64_t now)
{
    for (size_t k = 0; k < r->n; k++) {
        customer *c = customer_get(d, r->ids[k]);
        if (!c)
            continue;
        /* Sent late: the next slot moves by as much, so no gap the receiver sees is shorter
         * than the period. On time (the normal case) the schedule does not drift. */
        if (c->mode == MODE_SPACED && r->got[k] > 0) {
            int64_t tat = r->base[k] + (int64_t)r->got[k] * c->period_us + r->late[k];
            if (tat > c->tat) /* a Retry-After meanwhile may have pushed it further */
                c->tat = tat;
        }
        if (r->tick >= 0) {
            c->credit = r->credit[k];
            c->last_tick = r->tick;
            c->have_tick = true;
            c->owed = r->allowed[k] - r->got[k];
            c->owed_tick = r->tick;
        } else if (c->mode == MODE_BATCH) {
            c->owed -= r->got[k];
        }
        /* Whatever held items back (no room, a full host, a carrier's cap), the rest of the
         * allowance is owed while some pair still has due items, or recovered items its
         * recovery pace holds back (claimed at its slots, within this tick); a drained
         * customer (every pair answered with its next future time) is owed nothing. */
        if (c->mode == MODE_BATCH && (c->owed < 0 || (!has_due_pair(c, now) && !r->rec_held[k])))
            c->owed = 0;
    }
}

static void take_rows(dispatcher *d, claim_round *r, claim_result *cr, int64_t now)
{
    const PGresult *res = cr->res;
    int claimed = 0, stale = 0;
    /* Deadlines come as time left from the statement's start, which was after it was sent:
     * counted from the send on this host's clock, they err early by at most the round trip,
     * whatever this clock's offset from the database's (an item is never sent late). */
    int64_t sent_us = now_us() - (int64_t)((uv_hrtime() - r->sent_ns) / 1000);
    for (int i = 0; i < PQntuples(res); i++) {
        claim_row row;
        claim_row_parse(res, i, &row);
        if (row.expires_in_us > 0)
            row.expires_us = sent_us + row.expires_in_us;
        /* The lease, likewise from the send: it ran from the statement's start. */
        row.lease_end_us = sent_us + (int64_t)d->cfg.lease_seconds * 1000000;
        customer *c = customer_get(d, row.customer_id);
        /* Every row of a customer names its pace (kept out of line: most never have one). */
        if (c && (row.rec_period_us != 0 || c->thr)) {
            throttle_state *t = customer_thr_mut(c);
            if (t)
                t->rec_period_us = row.rec_period_us;
        }
        if (!row.is_item) {
            if (c) {
                note_drained(c, &row);
                int slot = round_slot_of(r, c, row.customer_id);
                if (slot >= 0 && row.rec_at > 0)
                    r->rec_held[slot] = true;
            }
            continue;
        }
        claimed++;
        stale += row.stale;
        take_item(d, r, c, &row, now, cr);
    }
    settle_customers(d, r, now);
    /* The round's work-queue items wait in their hosts' windows: out now, fairly. */
    for (size_t k = 0; k < r->n; k++) {
        customer *c = customer_get(d, r->ids[k]);
        if (c && c->host && c->host->windowed > 0)
            window_drain(d, c->host);
    }
    d->claimed += claimed;
    d->stale_recoveries += stale;
    metrics_counter_add(d->obs.m, d->obs.stale_recoveries, NULL, stale);
    if (stale > 0)
        LOG_INFO("stale_recovered", LOG_I("items", stale), LOG_I("total", d->stale_recoveries));
    LOG_DEBUG("claimed", LOG_I("items", claimed), LOG_I("customers", (long long)r->n),
              LOG_I("tick", r->tick));
}

static void on_claim_result(pgconn *conn, PGresult *res, void *arg)
{
    claim_round *r = arg;
    dispatcher *d = r->d;
    /* Results come in sending order: this is the oldest round. */
    for (int i = 0; i < d->n_claims; i++)
        if (d->claims[i] == r) {
            for (int j = i; j + 1 < d->n_claims; j++)
                d->claims[j] = d->claims[j + 1];
            d->n_claims--;
            break;
        }
    round_hold_apply(d, r, -1);
    int64_t now = now_us();
    bool ok = res && PQresultStatus(res) == PGRES_TUPLES_OK &&
              rows_shape_ok(res, SQL_RUN_CLAIM_NCOLS, "claim");
    bool took = false;
    if (!ok && res)
        LOG_ERROR("claim_failed", LOG_S("sqlstate", PQresultErrorField(res, PG_DIAG_SQLSTATE)),
                  LOG_S("error", PQresultErrorMessage(res)), LOG_I("retry_in_ms", ERROR_RETRY_MS));
    if (ok) {
        const char *round_label[] = {r->tick >= 0 ? "batch_tick" : "scheduled"};
        metrics_counter_add(d->obs.m, d->obs.claim_rounds, round_label, 1);
        metrics_histogram_observe(d->obs.m, d->obs.claim_seconds, round_label,
                                  (double)(uv_hrtime() - r->sent_ns) / 1e9);
        /* Deliveries send their bodies from the result: it is kept while they reference it. */
        claim_result *cr = malloc(sizeof *cr);
        took = cr != NULL;
        if (cr) {
            pgconn_keep_result(conn);
            *cr = (claim_result){.res = res, .refs = 1};
            take_rows(d, r, cr, now); /* drains the windows of its customers' hosts */
            claim_result_unref(cr);
        } else {
            LOG_ERROR("out_of_memory", LOG_S("where", "claim result"));
        }
    }
    /* Nothing taken: the connections it held are free again for its hosts' windows. */
    if (!ok || !took)
        for (size_t i = 0; i < r->n_holds; i++)
            if (r->holds[i].host && r->holds[i].host->windowed > 0)
                window_drain(d, r->holds[i].host);
    round_gates_release(d, r);
    for (size_t k = 0; k < r->n; k++) {
        customer *c = customer_get(d, r->ids[k]);
        if (!c)
            continue;
        c->round_slot = -1;
        if (!ok) {
            /* Try again later rather than spin on a failing statement. */
            int64_t later = now + (int64_t)ERROR_RETRY_MS * 1000;
            for (size_t i = 0; i < c->n_pairs; i++)
                if (c->pairs[i].next_us < later)
                    c->pairs[i].next_us = later;
        }
        customer_schedule(d, c);
    }
    /* The round reserved its hosts' room for what it asked; customers that found a host full of
     * those reservations wait for it. The claim may have got fewer (they were not due), so they
     * look again now rather than at the host's next completion, which might be a long way off
     * (a receiver that hangs). Once per host: each wake takes as many as its room serves. */
    for (size_t i = 0; i < r->n_holds; i++) {
        host_state *h = r->holds[i].host;
        if (h && h->waiting.n > 0)
            wake(d, &h->waiting);
    }
    round_free(r);
    if (d->tick_queued >= 0 && d->n_claims == 0 && is_leading(d)) {
        int64_t tick = d->tick_queued;
        d->tick_queued = -1;
        run_batch_tick(d, tick);
    }
    claim_arm(d);
    finalize_arm(d);
    dispatcher_maybe_finish(d);
}
