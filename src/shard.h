/* shard.h - which of N shards a customer lives in, as Citus would place a row whose distribution
 * column is the customer's id (a bigint).
 *
 * Contract: pure integer arithmetic; no I/O, no allocation, no global state. shard_hash_int8()
 * is PostgreSQL's hashint8(): the same 32 bits `SELECT hashint8(x)` returns, read as a signed
 * int32 (Citus's "hash token"). shard_index() and shard_range() are Citus's uniform split of
 * the token space into `count` shards (1..SHARD_COUNT_MAX), see shard.c for the rule and where
 * it comes from. sql/functions/15_shard.sql computes the same index in the database
 * (pgpace.shard_of), with PostgreSQL's own hashint8; the tests hold the two equal.
 */
#ifndef PGPACE_SHARD_H
#define PGPACE_SHARD_H

#include "common.h"

#include <stdint.h>

/* Citus refuses more shards than this (MAX_SHARD_COUNT); so do we. */
#define SHARD_COUNT_MAX 64000

/* PostgreSQL's hashint8(value), as a signed token. */
int32_t shard_hash_int8(int64_t value);

/* The 0-based index of the shard whose token range holds `token` under `count` uniform shards,
 * or -EINVAL when count is not 1..SHARD_COUNT_MAX. */
int shard_index(int32_t token, int count) PGP_MUST_CHECK;

/* Shard `index`'s token range [*min, *max] under `count` uniform shards; -EINVAL (nothing
 * written) when count is not 1..SHARD_COUNT_MAX or index is not 0..count-1. */
int shard_range(int index, int count, int32_t *min, int32_t *max) PGP_MUST_CHECK;

/* shard_index(shard_hash_int8(id), count). */
int shard_of(int64_t id, int count) PGP_MUST_CHECK;

#endif
