/* shard.c - PostgreSQL's hashint8 and Citus's uniform hash ranges (see shard.h).
 *
 * The hash. PostgreSQL's hashint8 (src/backend/access/hash/hashfunc.c) folds the 64-bit value
 * into 32 bits so that equal int2/int4/int8 values hash alike: the low half xor the high half,
 * or xor its complement when the value is negative (then the high half of a value that fits in
 * 32 bits is all ones, and the fold leaves the low half as it is). That word goes through
 * hash_bytes_uint32 (src/common/hashfn.c; hash_uint32 in older releases): Bob Jenkins' lookup3
 * with a = b = c = 0x9e3779b9 + 4 (the key's length in bytes) + 3923095, the word added to a,
 * then lookup3's final() mix, whose c is the hash. The result is a uint32 returned as a Datum and
 * read by SQL and by Citus as an int4: the token.
 *
 * The ranges, from Citus's source (citusdata/citus):
 * - Which hash: a hash-distributed table's hash function is its distribution column type's
 *   default hash support function (GetFunctionInfo(type, HASH_AM_OID, HASHSTANDARD_PROC)),
 *   which for bigint is hashint8; FindShardInterval applies it to the value first.
 * - The split: CreateShardsWithRoundRobinPolicy (operations/create_shards.c) computes
 *   hashTokenIncrement = HASH_TOKEN_COUNT / shardCount in uint64 maths, HASH_TOKEN_COUNT being
 *   2^32 (metadata_utility.h); shard i gets min = INT32_MIN + i * increment and
 *   max = min + increment - 1, except the last shard, whose max is set to INT32_MAX, so the
 *   remainder of 2^32 / shardCount (when shardCount does not divide it) goes to the last shard.
 *   Colocated tables (CreateColocatedShards) copy these min/max values, so every table
 *   distributed by customer_id with the same shard count and colocation puts a customer's rows
 *   in shards of the same index.
 * - The lookup: FindShardIntervalIndex (utils/shardinterval_utils.c), for a table with
 *   uniform hash distribution, computes (uint32)(token - INT32_MIN) / increment and maps the
 *   one value past the end (the last shard's remainder) to shardCount - 1; for other tables it
 *   binary-searches the sorted [min, max] ranges (SearchCachedShardInterval), which for these
 *   ranges finds the same shard. shard_index() is the first form, shard_range() the ranges;
 *   the unit test checks that each agrees with the other.
 * - The limit: MAX_SHARD_COUNT is 64000 (shared_library_init.h).
 * The increment is at least 2^32 / 64000 = 67108, more than the largest remainder (count - 1),
 * so the quotient is at most count and the clamp is the only correction needed.
 */
#include "shard.h"

#include <errno.h>
#include <stdbool.h>

#define SHARD_TOKEN_COUNT (UINT64_C(1) << 32)

static uint32_t rot32(uint32_t x, int k)
{
    return (x << k) | (x >> (32 - k));
}

/* hash_bytes_uint32: lookup3 on a single 32-bit word (only final() runs for one word). */
static uint32_t hash_word(uint32_t k)
{
    uint32_t a, b, c;
    a = b = c = UINT32_C(0x9e3779b9) + (uint32_t)sizeof(uint32_t) + UINT32_C(3923095);
    a += k;
    c ^= b;
    c -= rot32(b, 14);
    a ^= c;
    a -= rot32(c, 11);
    b ^= a;
    b -= rot32(a, 25);
    c ^= b;
    c -= rot32(b, 16);
    a ^= c;
    a -= rot32(c, 4);
    b ^= a;
    b -= rot32(a, 14);
    c ^= b;
    c -= rot32(b, 24);
    return c;
}

int32_t shard_hash_int8(int64_t value)
{
    uint64_t bits = (uint64_t)value;
    uint32_t lo = (uint32_t)bits, hi = (uint32_t)(bits >> 32);
    lo ^= value >= 0 ? hi : ~hi;
    uint32_t h = hash_word(lo);
    /* The uint32 read as int4 (two's complement), without implementation-defined conversion. */
    return h <= (uint32_t)INT32_MAX ? (int32_t)h : -(int32_t)~h - 1;
}

static bool count_ok(int count)
{
    return count >= 1 && count <= SHARD_COUNT_MAX;
}

int shard_index(int32_t token, int count)
{
    if (!count_ok(count))
        return -EINVAL;
    uint64_t increment = SHARD_TOKEN_COUNT / (uint64_t)count;
    uint64_t offset = (uint64_t)((int64_t)token - INT32_MIN); /* 0 .. 2^32 - 1 */
    uint64_t index = offset / increment;
    return index < (uint64_t)count ? (int)index : count - 1;
}

int shard_range(int index, int count, int32_t *min, int32_t *max)
{
    if (!count_ok(count) || index < 0 || index >= count)
        return -EINVAL;
    int64_t increment = (int64_t)(SHARD_TOKEN_COUNT / (uint64_t)count);
    int64_t lo = (int64_t)INT32_MIN + index * increment;
    *min = (int32_t)lo;
    *max = index == count - 1 ? INT32_MAX : (int32_t)(lo + increment - 1);
    return 0;
}

int shard_of(int64_t id, int count)
{
    return shard_index(shard_hash_int8(id), count);
}
