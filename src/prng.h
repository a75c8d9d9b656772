/* prng.h - the one pseudo-random generator of the service, for jitter (never for security).
 *
 * Contract: xorshift64* on caller-owned state; no allocation, no locks. prng_seed() takes its
 * seed from OpenSSL's CSPRNG and falls back to the clock and the state's address, so separate
 * processes (and separate generators in one process) jitter differently. Secrets and tokens
 * that must not be guessed use RAND_bytes directly, not this.
 */
#ifndef PGPACE_PRNG_H
#define PGPACE_PRNG_H

#include <stdint.h>

typedef struct prng {
    uint64_t s; /* never 0 */
} prng;

void prng_seed(prng *r);

/* Seeds with a fixed value (tests); 0 is replaced by a non-zero constant. */
void prng_seed_with(prng *r, uint64_t seed);

uint64_t prng_next(prng *r);

/* Uniform in [0, 1), 53 bits. */
double prng_double(prng *r);

#endif
