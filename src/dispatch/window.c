/* window.c - the claim-ahead window: work-queue items claimed beyond a host's free connections.
 *
 * A claim round costs a database round trip; claiming only what a host's free connections can
 * take at once would bound a fast host's throughput by those round trips. So claims for
 * unlimited and batch customers may take up to window_cap() items more per host, which wait
 * here, one queue per customer (a lane per carrier, in turns), and go out as connections free
 * (window_drain), always to the customer with the fewest requests on the wire per unit of weight,
 * so the window is shared as fairly as the claims were. The window is bounded in items
 * (claim_ahead, fewer for a slow host) and in time: an item that waited window_wait_us() is given
 * back to the queue (due again at once, the attempt not counted), far inside its lease. On shutdown
 * and when leadership is lost every item still here is given back at once, not left for its lease
 * to expire.
 *
 * Owns each host's queues (host_state.wq), dispatcher.window (every window item, oldest first)
 * and TIMER_WINDOW.
 */
#include "internal.h"

#include "log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A customer's items of one carrier in the window, in claim order. */
typedef struct window_lane {
    pgp_list items; /* delivery.qlink */
    int n;
} window_lane;

/* A customer's items in the window: one lane per carrier, which take turns (as the carriers
 * of a customer take turns in its claims), so a carrier with a few items does not wait behind
 * the window's worth another carrier of the customer was claimed (a replay). */
typedef struct window_queue {
    int64_t customer_id;
    int n; /* in all its lanes */
    window_lane *lanes;
    size_t n_lanes, cap_lanes;
    size_t next_lane; /* the lane that sends next */
} window_queue;

int window_cap(const pgp_config *cfg, const host_state *h)
{
    int cap = cfg->claim_ahead;
    if (cap <= 0)
        return 0;
    /* A host whose request time is not known yet gets one round of its connections ahead. */
    if (!(h->latency_ms > 0))
        return cap < cfg->max_host_connections ? cap : cfg->max_host_connections;
    double in_time = (double)cfg->max_host_connections * (double)window_wait_us(cfg) / 1000.0 /
                     h->latency_ms / 2;
    if (in_time < (double)cap)
        cap = in_time < 1 ? 1 : (int)in_time;
    return cap;
}

int64_t window_wait_us(const pgp_config *cfg)
{
    int64_t us = (int64_t)cfg->claim_ahead_ms * 1000;
    int64_t quarter = (int64_t)cfg->lease_seconds * 250000;
    return us < quarter ? us : quarter;
}

int window_room(const pgp_config *cfg, const host_state *h)
{
    int cap = window_cap(cfg, h);
    int free_items = cap - h->windowed - h->claiming_ahead, half = (cap + 1) / 2;
    if (free_items <= 0 || (2 * free_items < cap && h->windowed + h->claiming_ahead > 0))
        return 0;
    return free_items < half ? free_items : half;
}

int window_fresh_room(const pgp_config *cfg, const host_state *h)
{
    int cap = window_cap(cfg, h);
    if (cap <= 0)
        return 0;
    int extra = cap / 4 > 1 ? cap / 4 : 1;
    int room = cap + extra - h->windowed - h->claiming_ahead;
    return room > 0 ? room : 0;
}

static window_queue *queue_of(host_state *h, int64_t customer_id)
{
    for (size_t i = 0; i < h->n_wq; i++)
        if (h->wq[i].customer_id == customer_id)
            return &h->wq[i];
    return NULL;
}

/* Lists move with their heads: a head copied to another place is re-anchored there. */
static void list_move_head(pgp_list *to, pgp_list *from)
{
    if (pgp_list_empty(from)) {
        pgp_list_init(to);
        return;
    }
    *to = *from;
    to->next->prev = to;
    to->prev->next = to;
}

static delivery *lane_head(const window_lane *l)
{
    return pgp_list_entry(l->items.next, delivery, qlink);
}

static bool same_carrier(const delivery *a, const delivery *b)
{
    return strcmp(a->carrier ? a->carrier : "", b->carrier ? b->carrier : "") == 0;
}

/* The lane of dl's carrier in q; NULL when it has none. A customer has few carriers in the
 * window at once, so its lanes are scanned in order. */
static window_lane *lane_of(window_queue *q, const delivery *dl)
{
    for (size_t i = 0; i < q->n_lanes; i++)
        if (same_carrier(lane_head(&q->lanes[i]), dl))
            return &q->lanes[i];
    return NULL;
}

static window_lane *lane_add(window_queue *q)
{
    if (q->n_lanes == q->cap_lanes) {
        size_t cap = q->cap_lanes ? q->cap_lanes * 2 : 1;
        window_lane *v = malloc(cap * sizeof *v);
        if (!v)
            return NULL;
        for (size_t i = 0; i < q->n_lanes; i++) {
            v[i].n = q->lanes[i].n;
            list_move_head(&v[i].items, &q->lanes[i].items);
        }
        free(q->lanes);
        q->lanes = v;
        q->cap_lanes = cap;
    }
    window_lane *l = &q->lanes[q->n_lanes++];
    l->n = 0;
    pgp_list_init(&l->items);
    return l;
}

/* An emptied lane is replaced by the last. */
static void lane_drop(window_queue *q, window_lane *l)
{
    size_t i = (size_t)(l - q->lanes), last = q->n_lanes - 1;
    if (i != last) {
        q->lanes[i].n = q->lanes[last].n;
        list_move_head(&q->lanes[i].items, &q->lanes[last].items);
    }
    q->n_lanes--;
}

/* The queue's next item to send: its lanes take turns. */
static delivery *queue_next(window_queue *q)
{
    return lane_head(&q->lanes[q->next_lane++ % q->n_lanes]);
}

/* One of the queue's items (when it gives all of them back). */
static delivery *queue_head(window_queue *q)
{
    return lane_head(&q->lanes[0]);
}

/* The queues live in an array; an emptied one is replaced by the last (its lanes are an
 * allocation of their own, so nothing is re-anchored). */
static void queue_drop(host_state *h, window_queue *q)
{
    size_t i = (size_t)(q - h->wq), last = h->n_wq - 1;
    free(q->lanes);
    if (i != last)
        h->wq[i] = h->wq[last];
    h->n_wq--;
}

static window_queue *queue_add(host_state *h, int64_t customer_id)
{
    if (h->n_wq == h->cap_wq) {
        size_t cap = h->cap_wq ? h->cap_wq * 2 : 8;
        window_queue *v = realloc(h->wq, cap * sizeof *v);
        if (!v)
            return NULL;
        h->wq = v;
        h->cap_wq = cap;
    }
    window_queue *q = &h->wq[h->n_wq++];
    *q = (window_queue){.customer_id = customer_id};
    return q;
}

static void window_arm(dispatcher *d)
{
    uv_timer_t *t = &d->timers[TIMER_WINDOW];
    if (pgp_list_empty(&d->window) || d->stop == STOP_CLOSING) {
        uv_timer_stop(t);
        return;
    }
    delivery *oldest = pgp_list_entry(d->window.next, delivery, wlink);
    int64_t wait_us = oldest->due_us - now_us();
    uv_update_time(d->loop);
    uv_timer_start(t, window_on_timer, wait_us > 0 ? (uint64_t)(wait_us + 999) / 1000 : 0, 0);
}

void window_push(dispatcher *d, delivery *dl)
{
    host_state *h = dl->host;
    window_queue *q = queue_of(h, dl->customer_id);
    bool new_queue = !q;
    if (!q && !(q = queue_add(h, dl->customer_id))) {
        delivery_send(d, dl); /* no memory for a queue: sent now (curl queues it) */
        return;
    }
    window_lane *l = lane_of(q, dl);
    if (!l && !(l = lane_add(q))) {
        if (new_queue)
            queue_drop(h, q);
        delivery_send(d, dl);
        return;
    }
    bool first = pgp_list_empty(&d->window);
    dl->stage = STAGE_WINDOW;
    dl->due_us = now_us() + window_wait_us(&d->cfg);
    pgp_list_push_tail(&l->items, &dl->qlink);
    pgp_list_push_tail(&d->window, &dl->wlink);
    l->n++;
    q->n++;
    h->windowed++;
    d->windowed++;
    if (first)
        window_arm(d);
}

void window_unlink(dispatcher *d, delivery *dl)
{
    host_state *h = dl->host;
    window_queue *q = queue_of(h, dl->customer_id);
    window_lane *l = q ? lane_of(q, dl) : NULL; /* found while dl is still in it */
    pgp_list_remove(&dl->qlink);
    pgp_list_remove(&dl->wlink);
    if (l && --l->n == 0)
        lane_drop(q, l);
    if (q && --q->n == 0)
        queue_drop(h, q);
    h->windowed--;
    d->windowed--;
}

/* Whether the customer's window items must go back to the queue: it cannot send for a while
 * (paused, held by a Retry-After, breaker open), or is gone. */
static bool must_give_back(const customer *c, int64_t now)
{
    return !c || c->paused || customer_thr(c)->pace.hold_until_us > now ||
           c->breaker.state == BREAKER_OPEN;
}

/* The sum of the weights of the host's work-queue customers with work (customer_active),
 * recounted when recount_due (internal.h). */
static double workq_weight(dispatcher *d, host_state *h, int64_t now)
{
    if (!recount_due(now, h->workq_at_us, h->n_workq))
        return h->workq_weight;
    double w = 0;
    /* A customer's endpoints count as one customer: the largest weight of them (share.c). */
    hmap tenants;
    hmap_init(&tenants);
    bool flat = true;
    for (size_t i = 0; i < h->n_workq; i++) {
        customer *c = customer_get(d, h->workq_ids[i]);
        if (!c || !customer_active(c, now))
            continue;
        double cw = claim_weight(c);
        if (!c->grouped) {
            w += cw; /* a customer of its own */
            continue;
        }
        flat = false;
        double *seen = hmap_get(&tenants, &c->tenant_id, sizeof c->tenant_id);
        if (seen) {
            if (cw > *seen) {
                w += cw - *seen;
                *seen = cw;
            }
            continue;
        }
        double *slot = malloc(sizeof *slot);
        if (!slot || hmap_put(&tenants, &c->tenant_id, sizeof c->tenant_id, slot) != 0) {
            free(slot);
            w += cw;
            continue;
        }
        *slot = cw;
        w += cw;
    }
    if (!flat) {
        size_t pos = 0;
        double *v;
        while ((v = hmap_next(&tenants, &pos)) != NULL)
            free(v);
    }
    hmap_free(&tenants);
    h->workq_weight = w;
    h->workq_at_us = now;
    return w;
}

/* A customer's endpoints on the host, as the drain sees them: what they have out, their weight
 * (the largest of theirs) and the best of their queues. */
typedef struct drain_group {
    int64_t tenant;
    int out;
    double weight;
    window_queue *best;
    double best_level;
} drain_group;

/* The queue to send from next when some customer has several endpoints here: the customer with
 * the fewest requests out per unit of weight (and under its weighted share of the connections)
 * first, then its endpoint with the fewest. NULL: nobody may send now. eligible[k] says whether
 * queue k may send at all and out[k] what its customer has out. */
static window_queue *pick_grouped(dispatcher *d, host_state *h, const bool *eligible,
                                  const int *out, double total_weight)
{
    size_t n = h->n_wq, n_groups = 0;
    drain_group *g = calloc(n, sizeof *g);
    if (!g)
        return NULL;
    for (size_t k = 0; k < n; k++) {
        window_queue *q = &h->wq[(k + h->wq_rotate) % n];
        customer *c = customer_get(d, q->customer_id);
        if (!c)
            continue;
        size_t i = 0;
        while (i < n_groups && g[i].tenant != c->tenant_id)
            i++;
        if (i == n_groups)
            g[n_groups++] = (drain_group){.tenant = c->tenant_id};
        size_t at = (k + h->wq_rotate) % n;
        /* A grouped customer's requests out are all of its endpoints' here, also those with
         * nothing left in the window. */
        if (c->grouped)
            g[i].out = (int)(intptr_t)hmap_get(&h->tenant_out, &c->tenant_id, sizeof c->tenant_id);
        else
            g[i].out += out[at];
        double w = claim_weight(c);
        if (w > g[i].weight)
            g[i].weight = w;
        if (!eligible[at])
            continue;
        double level = (double)out[at] / w;
        if (!g[i].best || level < g[i].best_level) {
            g[i].best = q;
            g[i].best_level = level;
        }
    }
    window_queue *best = NULL;
    double best_level = 0;
    for (size_t i = 0; i < n_groups; i++) {
        if (!g[i].best)
            continue;
        double share = total_weight > g[i].weight
                           ? ceil((double)d->cfg.max_host_connections * g[i].weight / total_weight)
                           : d->cfg.max_host_connections;
        if (g[i].out >= share)
            continue;
        double level = (double)g[i].out / g[i].weight;
        if (!best || level < best_level) {
            best = g[i].best;
            best_level = level;
        }
    }
    free(g);
    return best;
}

void window_drain(dispatcher *d, host_state *h)
{
    if (!h || h->windowed == 0 || !is_leading(d))
        return; /* a window outlives neither the leadership nor the service (given back) */
    int64_t now = now_us();
    while (h->n_wq > 0) {
        /* However many work-queue customers have items here, the host's spaced customers keep
         * their connections: the drain refills a freed connection before any claim round could
         * give it to them. */
        int n_open = (int)h->n_wq, most = d->cfg.max_host_connections - h->spaced_active;
        if (n_open > most)
            n_open = most > 1 ? most : 1;
        share_pool p = host_pool(d, h, n_open, now);
        if (p.open_room <= 0)
            return;
        /* The queue whose customer has the fewest requests out per unit of weight, and fewer
         * than its weighted share of the connections: a slow tenant's items wait rather than
         * take the connections another tenant's next claim would get. */
        double total_weight = workq_weight(d, h, now);
        window_queue *best = NULL;
        double best_level = 0;
        size_t n = h->n_wq;
        bool gave_back = false, grouped = false;
        /* Per queue (by index): may it send, and what it has out; for pick_grouped. */
        bool *eligible = NULL;
        int *outs = NULL;
        for (size_t k = 0; k < n && !grouped; k++) {
            customer *c = customer_get(d, h->wq[k].customer_id);
            grouped = c && c->grouped;
        }
        if (grouped) {
            eligible = calloc(n, sizeof *eligible);
            outs = calloc(n, sizeof *outs);
            if (!eligible || !outs) {
                free(eligible);
                free(outs);
                eligible = NULL;
                outs = NULL;
                grouped = false; /* divided flat: fair among endpoints, not customers */
            }
        }
        for (size_t k = 0; k < n && !gave_back; k++) {
            window_queue *q = &h->wq[(k + h->wq_rotate) % n];
            customer *c = customer_get(d, q->customer_id);
            if (must_give_back(c, now)) {
                /* All its items; the queue goes with the last one, so the scan starts over. */
                for (int left = q->n; left > 0; left--)
                    delivery_give_back(d, queue_head(q));
                gave_back = true;
                continue;
            }
            int out = c->in_flight - q->n; /* its requests on the wire (or waiting for a slot) */
            if (grouped)
                outs[(k + h->wq_rotate) % n] = out;
            if (c->mode == MODE_UNLIMITED && customer_thr(c)->pace.cap > 0 &&
                out >= customer_thr(c)->pace.cap)
                continue; /* throttled to fewer requests at once: its items wait (or expire) */
            if (grouped) {
                eligible[(k + h->wq_rotate) % n] = true;
                continue;
            }
            double weight = claim_weight(c);
            double share = total_weight > weight
                               ? ceil((double)d->cfg.max_host_connections * weight / total_weight)
                               : d->cfg.max_host_connections;
            if (out >= share)
                continue;
            double level = (double)out / weight;
            if (!best || level < best_level) {
                best = q;
                best_level = level;
            }
        }
        if (grouped && !gave_back)
            best = pick_grouped(d, h, eligible, outs, total_weight);
        free(eligible);
        free(outs);
        if (gave_back)
            continue;
        if (!best)
            return; /* nobody may send now */
        h->wq_rotate++;
        delivery_send(d, queue_next(best));
    }
}

static void count_given_back(dispatcher *d, const char *reason, int n)
{
    const char *label[] = {reason};
    metrics_counter_add(d->obs.m, d->obs.window_given_back, label, n);
}

void window_give_back_all(dispatcher *d, const char *why)
{
    int n = 0;
    while (!pgp_list_empty(&d->window)) {
        delivery_give_back(d, pgp_list_entry(d->window.next, delivery, wlink));
        n++;
    }
    if (n > 0) {
        LOG_INFO("window_given_back", LOG_I("items", n), LOG_S("reason", why));
        count_given_back(d, d->stop != STOP_NONE ? "shutdown" : "leadership_lost", n);
    }
    window_arm(d);
}

void window_on_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    int64_t now = now_us();
    int n = 0;
    while (!pgp_list_empty(&d->window)) {
        delivery *dl = pgp_list_entry(d->window.next, delivery, wlink);
        if (dl->due_us > now)
            break;
        delivery_give_back(d, dl);
        n++;
    }
    if (n > 0) {
        LOG_INFO("window_expired", LOG_I("items", n),
                 LOG_S("meaning", "claimed ahead but no connection freed in time; given back"));
        count_given_back(d, "expired", n);
    }
    window_arm(d);
}

void host_tenant_out_add(host_state *h, int64_t tenant, int delta)
{
    intptr_t n = (intptr_t)hmap_get(&h->tenant_out, &tenant, sizeof tenant) + delta;
    if (n <= 0) {
        hmap_del(&h->tenant_out, &tenant, sizeof tenant);
        return;
    }
    if (hmap_put(&h->tenant_out, &tenant, sizeof tenant, (void *)n) != 0)
        LOG_ERROR("out_of_memory", LOG_S("where", "tenant requests out"));
}

void window_free_host(host_state *h)
{
    hmap_free(&h->tenant_out);
    for (size_t i = 0; i < h->n_wq; i++)
        free(h->wq[i].lanes);
    free(h->wq);
    h->wq = NULL;
    h->n_wq = h->cap_wq = 0;
}
