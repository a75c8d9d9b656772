/* sched_heap.h - the spaced-mode scheduler's queue of (due time, customer).
 *
 * Contract: a binary min-heap ordered by (due, customer id) in which each customer appears at
 * most once, indexed by an open-addressing hash map from customer id to heap slot, so that
 * setting, changing or removing any customer's time is O(log n) and a customer's entry can be
 * found in O(1). Any int64 is a valid customer id and any int64 a valid due time (the caller
 * picks the clock). Ties on due time go to the lower customer id, which makes every result
 * deterministic. Only sched_heap_set allocates; it returns 0 or -ENOMEM and on failure leaves
 * the heap exactly as it was. Memory grows by doubling and is kept until sched_heap_free (a
 * heap that once held n customers is likely to again). Not thread-safe; no I/O.
 */
#ifndef PGPACE_SCHED_HEAP_H
#define PGPACE_SCHED_HEAP_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sched_entry {
    int64_t due;
    int64_t customer;
    size_t slot; /* its slot in the map: sifts move entries without looking them up */
} sched_entry;

/* pos_plus1 == 0 marks an empty slot, so no customer id has to be given up as a sentinel. */
typedef struct sched_slot {
    int64_t customer;
    size_t pos_plus1;
} sched_slot;

/* Fields are private to sched_heap.c; the struct is public only so callers can embed it. */
typedef struct sched_heap {
    sched_entry *heap;
    size_t size;
    size_t heap_cap;
    sched_slot *map; /* map_cap slots, a power of two, at most half full */
    size_t map_cap;
} sched_heap;

/* An empty heap; allocates nothing (the first set does). */
void sched_heap_init(sched_heap *h);
/* Releases all memory; h is then empty and usable again. */
void sched_heap_free(sched_heap *h);
/* Empties h, keeping its memory. */
void sched_heap_clear(sched_heap *h);

/* Inserts customer with `due`, or moves its existing entry to `due` (earlier or later). */
int sched_heap_set(sched_heap *h, int64_t customer, int64_t due) PGP_MUST_CHECK;
/* Returns whether customer was present. */
bool sched_heap_remove(sched_heap *h, int64_t customer);
/* The customer's due time, if present (due may be NULL). */
bool sched_heap_get(const sched_heap *h, int64_t customer, int64_t *due);
/* The earliest entry; false when empty. Either output may be NULL. */
bool sched_heap_peek(const sched_heap *h, int64_t *customer, int64_t *due);
/* Removes entries with due <= now in (due, customer) order, up to max of them, writing their
 * customer ids to out_ids (which must hold max; NULL pops nothing). Returns the count. */
size_t sched_heap_pop_due(sched_heap *h, int64_t now, int64_t *out_ids, size_t max);
size_t sched_heap_size(const sched_heap *h);

/* Checks every invariant (heap order, map <-> slot agreement, load factor) in O(n); for
 * tests and debug assertions. */
bool sched_heap_valid(const sched_heap *h);

#endif
