/* prng.c - xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift
 * generators"): small state, fast, and good enough for spreading retries and reconnects. */
#include "prng.h"

#include <stdint.h>
#include <time.h>

#include <openssl/rand.h>

void prng_seed_with(prng *r, uint64_t seed)
{
    r->s = seed ? seed : 0x9e3779b97f4a7c15u;
}

void prng_seed(prng *r)
{
    uint64_t seed = 0;
    if (RAND_bytes((unsigned char *)&seed, sizeof seed) != 1 || seed == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        seed = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
               ((uint64_t)(uintptr_t)r << 17);
    }
    prng_seed_with(r, seed);
}

uint64_t prng_next(prng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ULL;
}

double prng_double(prng *r)
{
    return (double)(prng_next(r) >> 11) * 0x1.0p-53;
}
