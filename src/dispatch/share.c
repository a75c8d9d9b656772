/* share.c - fair division of what customers share: a host's connections, the dispatcher's
 * in-flight room and a claim round's room. Pure: no I/O, no clock, no allocation.
 *
 * Progressive filling (max-min fairness): room is handed out one unit at a time, always to the
 * claimant holding the least per unit of weight ((use + granted) / weight), among those that
 * still want some and whose host has room left. So every claimant gets at least its weighted
 * equal share of what it contends for, a claimant that wants less leaves the rest to the others
 * (work conserving), and a claimant that already holds much (a slow receiver keeps its requests
 * long) gets nothing until the others have caught up. Ties go in an order that rotates from one
 * division to the next, so leftover units do not always fall to the same claimant.
 *
 * A host's room has two parts: connections free now (`room`), and of those the ones not booked
 * by spaced deliveries waiting for their slot (`open_room`). Work-queue claimants (unlimited,
 * batch) send at once and may take only open room; a spaced claimant's connection is needed at
 * its slot, which the booking keeps free for it. Once a host's open room is gone, work-queue
 * claimants may also take its claim-ahead window's room (`ahead`): those items wait locally
 * for a connection (window.c), so a spaced claimant never takes it.
 *
 * Hierarchical division (share_divide_grouped): a customer's endpoints contending for the same
 * pool form one group, divided as one claimant first (their demands and holdings summed), and
 * the group's grant is then divided among them by the same rule. So a customer with 50
 * endpoints on a host gets a customer's share of it, not 50.
 */
#include "internal.h"

#include <stddef.h>
#include <errno.h>
#include <stdlib.h>

static double level(const share_claimant *c)
{
    return ((double)c->use + (double)c->grant) / c->weight;
}

/* Whether claimant a goes before b (a min-heap on level, then on the rotated index). */
static bool before(const share_claimant *v, size_t n, uint64_t rotate, uint32_t a, uint32_t b)
{
    double la = level(&v[a]), lb = level(&v[b]);
    if (la != lb)
        return la < lb;
    return (a + rotate) % n < (b + rotate) % n;
}

static void sift_down(const share_claimant *v, size_t n, uint64_t rotate, uint32_t *heap,
                      size_t len, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < len && before(v, n, rotate, heap[l], heap[m]))
            m = l;
        if (r < len && before(v, n, rotate, heap[r], heap[m]))
            m = r;
        if (m == i)
            return;
        uint32_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

static bool can_take(const share_claimant *c, const share_pool *pools)
{
    if (c->grant >= c->demand)
        return false;
    if (c->pool < 0)
        return true;
    const share_pool *p = &pools[c->pool];
    return c->open_only ? p->open_room > 0 || p->ahead > 0 : p->room > 0;
}

int share_divide(share_claimant *v, size_t n, share_pool *pools, int total, uint64_t rotate,
                 uint32_t *heap)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        v[i].grant = 0;
        if (!(v[i].weight > 0))
            v[i].weight = 1;
        if (v[i].demand > 0)
            heap[len++] = (uint32_t)i;
    }
    for (size_t i = len / 2; i-- > 0;)
        sift_down(v, n, rotate, heap, len, i);
    int given = 0;
    while (len > 0 && given < total) {
        share_claimant *c = &v[heap[0]];
        if (!can_take(c, pools)) {
            /* Satisfied, or its host is full: it leaves the division. */
            heap[0] = heap[--len];
            sift_down(v, n, rotate, heap, len, 0);
            continue;
        }
        c->grant++;
        given++;
        if (c->pool >= 0) {
            share_pool *p = &pools[c->pool];
            if (c->open_only && p->open_room <= 0) {
                p->ahead--;
            } else {
                p->room--;
                p->open_room--;
            }
        }
        sift_down(v, n, rotate, heap, len, 0);
    }
    return given;
}

/* Units of one group's grant to its members, one at a time to the member holding the least per
 * unit of weight (ties in rotated order). Groups are small (a customer's endpoints on a host). */
static void divide_within(share_claimant *v, const uint32_t *members, size_t n_members, int grant,
                          uint64_t rotate)
{
    for (size_t m = 0; m < n_members; m++)
        v[members[m]].grant = 0;
    for (int unit = 0; unit < grant; unit++) {
        share_claimant *best = NULL;
        double best_level = 0;
        for (size_t k = 0; k < n_members; k++) {
            share_claimant *c = &v[members[(k + rotate) % n_members]];
            if (c->grant >= c->demand)
                continue;
            double l = level(c);
            if (!best || l < best_level) {
                best = c;
                best_level = l;
            }
        }
        if (!best)
            return;
        best->grant++;
    }
}

int share_divide_grouped(share_claimant *v, size_t n, const uint32_t *group, size_t n_groups,
                         share_claimant *gv, uint32_t *members, share_pool *pools, int total,
                         uint64_t rotate, uint32_t *heap)
{
    for (size_t g = 0; g < n_groups; g++)
        gv[g] = (share_claimant){.pool = -1};
    for (size_t i = 0; i < n; i++) {
        share_claimant *c = &v[i], *g = &gv[group[i]];
        if (!(c->weight > 0))
            c->weight = 1;
        c->grant = 0;
        g->pool = c->pool;
        g->open_only = c->open_only;
        if (c->demand > 0)
            g->demand += c->demand;
        g->use += c->use;
        if (c->weight > g->weight)
            g->weight = c->weight;
    }
    int given = share_divide(gv, n_groups, pools, total, rotate, heap);
    /* Members of each group in claimant order: a counting sort by group. */
    uint32_t *start = heap; /* free again: n_groups + 1 <= n + 1 entries are needed */
    for (size_t g = 0; g <= n_groups; g++)
        start[g] = 0;
    for (size_t i = 0; i < n; i++)
        start[group[i] + 1]++;
    for (size_t g = 0; g < n_groups; g++)
        start[g + 1] += start[g];
    for (size_t i = 0; i < n; i++)
        members[start[group[i]]++] = (uint32_t)i;
    size_t at = 0;
    for (size_t g = 0; g < n_groups; g++) {
        size_t end = start[g]; /* after the fill, start[g] is where group g ends */
        divide_within(v, members + at, end - at, gv[g].grant, rotate);
        at = end;
    }
    return given;
}

/* Water-filling in order of demand per unit of weight: whoever wants less than its weighted
 * share of what is left gets what it wants, and the rest is divided again among the others. */
typedef struct rate_claim {
    double per_weight, demand, weight;
    size_t i;
} rate_claim;

static int cmp_per_weight(const void *a, const void *b)
{
    double x = ((const rate_claim *)a)->per_weight, y = ((const rate_claim *)b)->per_weight;
    return (x > y) - (x < y);
}

int share_rates(const double *demand, const double *weight, size_t n, double capacity, double *out)
{
    if (n == 0)
        return 0;
    rate_claim *v = malloc(n * sizeof *v);
    if (!v)
        return -ENOMEM;
    double total_weight = 0;
    for (size_t i = 0; i < n; i++) {
        double w = weight[i] > 0 ? weight[i] : 1;
        double dm = demand[i] > 0 ? demand[i] : 0;
        v[i] = (rate_claim){.per_weight = dm / w, .demand = dm, .weight = w, .i = i};
        total_weight += w;
    }
    qsort(v, n, sizeof *v, cmp_per_weight);
    double left = capacity > 0 ? capacity : 0;
    for (size_t k = 0; k < n; k++) {
        double fair = total_weight > 0 ? left * v[k].weight / total_weight : 0;
        double got = v[k].demand < fair ? v[k].demand : fair;
        out[v[k].i] = got;
        left -= got;
        if (left < 0)
            left = 0;
        total_weight -= v[k].weight;
    }
    free(v);
    return 0;
}
