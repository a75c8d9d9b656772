/* test_shard.c - PostgreSQL's hashint8 and Citus's uniform shard ranges (src/shard.c): known
 * vectors, the boundary tokens, one shard, 32 shards, counts that do not divide 2^32, the
 * largest count, and the index agreeing with the ranges everywhere. */
#include "testlib.h"

#include "shard.h"

#include <errno.h>
#include <limits.h>

/* Computed by PostgreSQL 15: `SELECT x, hashint8(x)`, and the shard whose Citus range
 * (min = -2^31 + i * (2^32 / n), max = the next min - 1, the last max 2^31 - 1) holds it for
 * n = 7 and n = 32, found in SQL by BETWEEN over the ranges. */
static const struct {
    int64_t id;
    int32_t token;
    int shard7, shard32;
} vectors[] = {
    {0, -272711505, 3, 13},
    {1, -1905060026, 0, 1},
    {-1, 385747274, 4, 18},
    {2, 1134484726, 5, 24},
    {42, 1509752520, 5, 27},
    {1000, -840720108, 2, 9},
    {123456789012345, 297539683, 3, 18},
    {2147483647, -96758253, 3, 15},
    {2147483648, -1524351049, 1, 4},
    {-2147483648LL, -1524351049, 1, 4},
    {-2147483649LL, -96758253, 3, 15},
    {4294967295LL, 385747274, 4, 18},
    {4294967296LL, -1905060026, 0, 1},
    {-4294967296LL, -272711505, 3, 13},
    {INT64_MAX, -1524351049, 1, 4},
    {INT64_MIN, -96758253, 3, 15},
};

static void hash_matches_postgresql(void **state)
{
    (void)state;
    for (size_t i = 0; i < PGP_ARRAY_LEN(vectors); i++) {
        assert_int_equal(shard_hash_int8(vectors[i].id), vectors[i].token);
        assert_int_equal(shard_of(vectors[i].id, 7), vectors[i].shard7);
        assert_int_equal(shard_of(vectors[i].id, 32), vectors[i].shard32);
        assert_int_equal(shard_of(vectors[i].id, 1), 0);
    }
}

/* hashint8 folds the high half into the low one, complemented for negative values, so that an
 * int8 hashes like the int4 of the same value: -1 (high half all ones, complemented to 0) and
 * 2^32 - 1 (high half 0) fold to the same word, as do 1 and 2^32. A fold without the
 * complement would give -1 the word 0. */
static void hash_folds_by_sign(void **state)
{
    (void)state;
    assert_int_equal(shard_hash_int8(-1), shard_hash_int8(4294967295LL));
    assert_int_equal(shard_hash_int8(1), shard_hash_int8(4294967296LL));
    assert_true(shard_hash_int8(-1) != shard_hash_int8(1));
    assert_true(shard_hash_int8(2) != shard_hash_int8(-2));
}

static void one_shard_holds_everything(void **state)
{
    (void)state;
    int32_t min = 0, max = 0;
    assert_int_equal(shard_range(0, 1, &min, &max), 0);
    assert_int_equal(min, INT32_MIN);
    assert_int_equal(max, INT32_MAX);
    assert_int_equal(shard_index(INT32_MIN, 1), 0);
    assert_int_equal(shard_index(0, 1), 0);
    assert_int_equal(shard_index(INT32_MAX, 1), 0);
}

/* 32 divides 2^32: ranges of exactly 2^27 tokens, the first at -2^31. */
static void thirty_two_shards(void **state)
{
    (void)state;
    for (int i = 0; i < 32; i++) {
        int32_t min = 0, max = 0;
        assert_int_equal(shard_range(i, 32, &min, &max), 0);
        assert_int_equal(min, (int64_t)INT32_MIN + (int64_t)i * 134217728);
        assert_int_equal((int64_t)max - min + 1, 134217728);
        assert_int_equal(shard_index(min, 32), i);
        assert_int_equal(shard_index(max, 32), i);
    }
    assert_int_equal(shard_index(INT32_MIN, 32), 0);
    assert_int_equal(shard_index(-1, 32), 15);
    assert_int_equal(shard_index(0, 32), 16);
    assert_int_equal(shard_index(INT32_MAX, 32), 31);
}

/* 3 does not divide 2^32: increment 1431655765, the last range one token longer. */
static void three_shards_last_takes_the_remainder(void **state)
{
    (void)state;
    static const int32_t want[3][2] = {
        {INT32_MIN, -715827884}, {-715827883, 715827881}, {715827882, INT32_MAX}};
    for (int i = 0; i < 3; i++) {
        int32_t min = 0, max = 0;
        assert_int_equal(shard_range(i, 3, &min, &max), 0);
        assert_int_equal(min, want[i][0]);
        assert_int_equal(max, want[i][1]);
    }
    assert_int_equal(shard_index(-715827884, 3), 0);
    assert_int_equal(shard_index(-715827883, 3), 1);
    assert_int_equal(shard_index(715827881, 3), 1);
    assert_int_equal(shard_index(715827882, 3), 2);
    /* The last token: (2^32 - 1) / 1431655765 = 3, one past the end, clamped to shard 2. */
    assert_int_equal(shard_index(INT32_MAX, 3), 2);
}

/* Citus's limit: increment 67108, a remainder of 55296 tokens that all belong to the last
 * shard although their quotient is 64000. */
static void largest_count(void **state)
{
    (void)state;
    int32_t min = 0, max = 0;
    assert_int_equal(shard_range(63999, 64000, &min, &max), 0);
    assert_int_equal(min, (int64_t)INT32_MIN + 63999LL * 67108);
    assert_int_equal(max, INT32_MAX);
    assert_int_equal((int64_t)max - min + 1, 67108 + 55296);
    assert_int_equal(shard_index(INT32_MAX, 64000), 63999);
    assert_int_equal(shard_index((int32_t)((int64_t)INT32_MIN + 64000LL * 67108), 64000), 63999);
    assert_int_equal(shard_index((int32_t)((int64_t)INT32_MIN + 64000LL * 67108 - 1), 64000),
                     63999);
    assert_int_equal(shard_index((int32_t)((int64_t)INT32_MIN + 63999LL * 67108 - 1), 64000),
                     63998);
}

/* The binary search over [min, max] that Citus falls back to (SearchCachedShardInterval), here
 * over shard_range()'s ranges. */
static int search_ranges(int32_t token, int count)
{
    int lo = 0, hi = count;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int32_t min = 0, max = 0;
        if (shard_range(mid, count, &min, &max) != 0)
            return -1;
        if (token < min)
            hi = mid;
        else if (token <= max)
            return mid;
        else
            lo = mid + 1;
    }
    return -1;
}

/* For many counts: the ranges tile the token space in order, each range's ends map to it, and
 * pseudo-random tokens get the same shard from the division as from the search. */
static void index_agrees_with_ranges(void **state)
{
    (void)state;
    static const int counts[] = {1, 2, 3, 5, 7, 10, 32, 100, 999, 1024, 4095, 30000, 64000};
    uint32_t x = 2463534242u;
    for (size_t c = 0; c < PGP_ARRAY_LEN(counts); c++) {
        int n = counts[c];
        int64_t next = INT32_MIN;
        for (int i = 0; i < n; i++) {
            int32_t min = 0, max = 0;
            assert_int_equal(shard_range(i, n, &min, &max), 0);
            assert_int_equal(min, next);
            assert_true(max >= min);
            assert_int_equal(shard_index(min, n), i);
            assert_int_equal(shard_index(max, n), i);
            next = (int64_t)max + 1;
        }
        assert_int_equal(next, (int64_t)INT32_MAX + 1);
        for (int k = 0; k < 20000; k++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            int32_t token = x <= (uint32_t)INT32_MAX ? (int32_t)x : -(int32_t)~x - 1;
            assert_int_equal(shard_index(token, n), search_ranges(token, n));
        }
    }
}

static void bad_counts_and_indexes(void **state)
{
    (void)state;
    static const int bad[] = {0, -1, 64001, INT_MIN, INT_MAX};
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        assert_int_equal(shard_index(0, bad[i]), -EINVAL);
        assert_int_equal(shard_of(42, bad[i]), -EINVAL);
        int32_t min = 7, max = 9;
        assert_int_equal(shard_range(0, bad[i], &min, &max), -EINVAL);
        assert_int_equal(min, 7);
        assert_int_equal(max, 9);
    }
    int32_t min = 7, max = 9;
    assert_int_equal(shard_range(-1, 4, &min, &max), -EINVAL);
    assert_int_equal(shard_range(4, 4, &min, &max), -EINVAL);
    assert_int_equal(min, 7);
    assert_int_equal(max, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hash_matches_postgresql),
        cmocka_unit_test(hash_folds_by_sign),
        cmocka_unit_test(one_shard_holds_everything),
        cmocka_unit_test(thirty_two_shards),
        cmocka_unit_test(three_shards_last_takes_the_remainder),
        cmocka_unit_test(largest_count),
        cmocka_unit_test(index_agrees_with_ranges),
        cmocka_unit_test(bad_counts_and_indexes),
    };
    return TL_RUN(tests, NULL, NULL);
}
