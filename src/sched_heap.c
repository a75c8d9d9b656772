/* sched_heap.c - binary min-heap with a linear-probing index from customer id to slot. */
#include "sched_heap.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CAP   16
#define NOT_FOUND SIZE_MAX

/* splitmix64's finalizer: customer ids are often sequential, and linear probing needs their
 * low bits scattered. */
static size_t hash_id(int64_t id)
{
    uint64_t x = (uint64_t)id;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (size_t)x;
}

static bool before(const sched_entry *a, const sched_entry *b)
{
    return a->due < b->due || (a->due == b->due && a->customer < b->customer);
}

static size_t map_find(const sched_heap *h, int64_t customer)
{
    if (h->map_cap == 0)
        return NOT_FOUND;
    size_t mask = h->map_cap - 1;
    for (size_t i = hash_id(customer) & mask; h->map[i].pos_plus1 != 0; i = (i + 1) & mask) {
        if (h->map[i].customer == customer)
            return i;
    }
    return NOT_FOUND;
}

/* The caller guarantees room and absence. Returns the slot used. */
static size_t map_insert(sched_slot *map, size_t map_cap, int64_t customer, size_t pos)
{
    size_t mask = map_cap - 1;
    size_t i = hash_id(customer) & mask;
    while (map[i].pos_plus1 != 0)
        i = (i + 1) & mask;
    map[i].customer = customer;
    map[i].pos_plus1 = pos + 1;
    return i;
}

/* Backward-shift deletion: later members of the probe run move up into the hole unless their
 * home slot lies cyclically in (hole, j], so lookups never need tombstones. */
static void map_erase_at(sched_heap *h, size_t hole)
{
    size_t mask = h->map_cap - 1;
    for (size_t j = (hole + 1) & mask; h->map[j].pos_plus1 != 0; j = (j + 1) & mask) {
        size_t home = hash_id(h->map[j].customer) & mask;
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            h->map[hole] = h->map[j];
            h->heap[h->map[hole].pos_plus1 - 1].slot = hole; /* its entry follows it */
            hole = j;
        }
    }
    h->map[hole].pos_plus1 = 0;
}

/* Writes e at pos and points its map slot there (the entry knows its slot: no lookup, which at
 * a million customers was a cache miss per level of every sift). */
static void place(sched_heap *h, size_t pos, sched_entry e)
{
    h->heap[pos] = e;
    h->map[e.slot].pos_plus1 = pos + 1;
}

/* Both sifts carry the moving entry in a hole instead of swapping, halving map updates. */
static void sift_up(sched_heap *h, size_t pos)
{
    sched_entry e = h->heap[pos];
    while (pos > 0) {
        size_t parent = (pos - 1) / 2;
        if (!before(&e, &h->heap[parent]))
            break;
        place(h, pos, h->heap[parent]);
        pos = parent;
    }
    place(h, pos, e);
}

static void sift_down(sched_heap *h, size_t pos)
{
    sched_entry e = h->heap[pos];
    for (;;) {
        size_t child = 2 * pos + 1;
        if (child >= h->size)
            break;
        if (child + 1 < h->size && before(&h->heap[child + 1], &h->heap[child]))
            child++;
        if (!before(&h->heap[child], &e))
            break;
        place(h, pos, h->heap[child]);
        pos = child;
    }
    place(h, pos, e);
}

static void fix(sched_heap *h, size_t pos)
{
    if (pos > 0 && before(&h->heap[pos], &h->heap[(pos - 1) / 2]))
        sift_up(h, pos);
    else
        sift_down(h, pos);
}

static void remove_at(sched_heap *h, size_t pos)
{
    map_erase_at(h, h->heap[pos].slot);
    h->size--;
    if (pos == h->size)
        return;
    place(h, pos, h->heap[h->size]);
    fix(h, pos);
}

static int grow(sched_heap *h, size_t need)
{
    if (need > h->heap_cap) {
        size_t cap = h->heap_cap ? h->heap_cap : MIN_CAP;
        while (cap < need) {
            if (cap > SIZE_MAX / 2 / sizeof(sched_entry))
                return -ENOMEM;
            cap *= 2;
        }
        sched_entry *heap = realloc(h->heap, cap * sizeof *heap);
        if (heap == NULL)
            return -ENOMEM;
        h->heap = heap;
        h->heap_cap = cap;
    }
    /* At most half full keeps probe runs short. */
    if (need > h->map_cap / 2) {
        size_t cap = h->map_cap ? h->map_cap : MIN_CAP;
        while (need > cap / 2) {
            if (cap > SIZE_MAX / 2 / sizeof(sched_slot))
                return -ENOMEM;
            cap *= 2;
        }
        sched_slot *map = calloc(cap, sizeof *map);
        if (map == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < h->size; i++)
            h->heap[i].slot = map_insert(map, cap, h->heap[i].customer, i);
        free(h->map);
        h->map = map;
        h->map_cap = cap;
    }
    return 0;
}

void sched_heap_init(sched_heap *h)
{
    memset(h, 0, sizeof *h);
}

void sched_heap_free(sched_heap *h)
{
    free(h->heap);
    free(h->map);
    sched_heap_init(h);
}

void sched_heap_clear(sched_heap *h)
{
    if (h->map != NULL)
        memset(h->map, 0, h->map_cap * sizeof *h->map);
    h->size = 0;
}

int sched_heap_set(sched_heap *h, int64_t customer, int64_t due)
{
    size_t i = map_find(h, customer);
    if (i != NOT_FOUND) {
        size_t pos = h->map[i].pos_plus1 - 1;
        h->heap[pos].due = due;
        fix(h, pos);
        return 0;
    }
    int rc = grow(h, h->size + 1);
    if (rc < 0)
        return rc;
    h->heap[h->size].slot = map_insert(h->map, h->map_cap, customer, h->size);
    h->heap[h->size].due = due;
    h->heap[h->size].customer = customer;
    h->size++;
    sift_up(h, h->size - 1);
    return 0;
}

bool sched_heap_remove(sched_heap *h, int64_t customer)
{
    size_t i = map_find(h, customer);
    if (i == NOT_FOUND)
        return false;
    remove_at(h, h->map[i].pos_plus1 - 1);
    return true;
}

bool sched_heap_get(const sched_heap *h, int64_t customer, int64_t *due)
{
    size_t i = map_find(h, customer);
    if (i == NOT_FOUND)
        return false;
    if (due != NULL)
        *due = h->heap[h->map[i].pos_plus1 - 1].due;
    return true;
}

bool sched_heap_peek(const sched_heap *h, int64_t *customer, int64_t *due)
{
    if (h->size == 0)
        return false;
    if (customer != NULL)
        *customer = h->heap[0].customer;
    if (due != NULL)
        *due = h->heap[0].due;
    return true;
}

size_t sched_heap_pop_due(sched_heap *h, int64_t now, int64_t *out_ids, size_t max)
{
    if (out_ids == NULL)
        return 0;
    size_t n = 0;
    while (n < max && h->size > 0 && h->heap[0].due <= now) {
        out_ids[n++] = h->heap[0].customer;
        remove_at(h, 0);
    }
    return n;
}

size_t sched_heap_size(const sched_heap *h)
{
    return h->size;
}

bool sched_heap_valid(const sched_heap *h)
{
    if (h->size > h->heap_cap || (h->size > 0 && h->size > h->map_cap / 2))
        return false;
    if (h->map_cap & (h->map_cap - 1))
        return false;
    for (size_t pos = 0; pos < h->size; pos++) {
        if (pos > 0 && before(&h->heap[pos], &h->heap[(pos - 1) / 2]))
            return false;
        size_t i = map_find(h, h->heap[pos].customer);
        if (i == NOT_FOUND || h->map[i].pos_plus1 != pos + 1 || h->heap[pos].slot != i)
            return false;
    }
    size_t used = 0;
    for (size_t i = 0; i < h->map_cap; i++)
        used += h->map[i].pos_plus1 != 0;
    return used == h->size;
}
