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
 */
#include "internal.h"

#include <stddef.h>

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
