/* hmap.h - a hash map from byte-string keys to pointers (open addressing, linear probing).
 *
 * Contract: keys are copied; values are borrowed (the map never frees them). Deletion shifts
 * entries back, so there are no tombstones and lookups stay short. Iteration order is
 * unspecified; do not insert or delete while iterating. Keys of up to 8 bytes (the dispatcher's
 * customer ids) are kept in the slot itself: no allocation per entry and no pointer to follow on
 * a lookup, which at 1,000,000 customers is a cache miss saved on every one and 32 bytes of
 * memory per entry. 8-byte keys hash in runs of 16 consecutive values (hmap.c: the start-up
 * load inserts ids in order). Keys are at most 4 GiB.
 */
#ifndef PGPACE_HMAP_H
#define PGPACE_HMAP_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>

#define HMAP_INLINE_KEY 8

typedef struct hmap_slot {
    union {
        char *ptr;                            /* klen > HMAP_INLINE_KEY: a copy */
        unsigned char bytes[HMAP_INLINE_KEY]; /* klen <= HMAP_INLINE_KEY: the key itself */
    } key;
    uint32_t klen_plus1; /* 0 = empty */
    uint32_t hash;
    void *value;
} hmap_slot;

typedef struct hmap {
    hmap_slot *slots;
    size_t cap; /* power of two, or 0 */
    size_t n;
} hmap;

void hmap_init(hmap *m);
void hmap_free(hmap *m);
void *hmap_get(const hmap *m, const void *key, size_t klen);
/* Inserts or replaces. Returns 0 or -ENOMEM (map unchanged). */
int hmap_put(hmap *m, const void *key, size_t klen, void *value) PGP_MUST_CHECK;
/* Removes the key; returns its value or NULL. */
void *hmap_del(hmap *m, const void *key, size_t klen);
/* Iterates: start with *pos = 0; returns NULL at the end. */
void *hmap_next(const hmap *m, size_t *pos);

#endif
