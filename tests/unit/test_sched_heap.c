/* test_sched_heap.c - the scheduler heap against a naive model, and its edge cases. */
#include "testlib.h"

#include "sched_heap.h"

#include <limits.h>
#include <stdlib.h>

static void empty_heap(void **state)
{
    sched_heap h;
    sched_heap_init(&h);
    int64_t c = 7, d = 7, out[4];
    assert_false(sched_heap_peek(&h, &c, &d));
    assert_int_equal(c, 7);
    assert_int_equal(sched_heap_size(&h), 0);
    assert_int_equal(sched_heap_pop_due(&h, INT64_MAX, out, 4), 0);
    assert_false(sched_heap_remove(&h, 0));
    assert_false(sched_heap_get(&h, 0, &d));
    assert_true(sched_heap_valid(&h));
    sched_heap_clear(&h);
    sched_heap_free(&h);
    sched_heap_free(&h); /* freeing twice is harmless */
}

static void one_element(void **state)
{
    sched_heap h;
    sched_heap_init(&h);
    int64_t c, d, out[4];
    assert_int_equal(sched_heap_set(&h, 42, 1000), 0);
    assert_true(sched_heap_peek(&h, &c, &d));
    assert_int_equal(c, 42);
    assert_int_equal(d, 1000);
    assert_true(sched_heap_peek(&h, NULL, NULL));
    assert_int_equal(sched_heap_pop_due(&h, 999, out, 4), 0);
    assert_int_equal(sched_heap_size(&h), 1);
    assert_int_equal(sched_heap_pop_due(&h, 1000, out, 4), 1);
    assert_int_equal(out[0], 42);
    assert_int_equal(sched_heap_size(&h), 0);
    assert_false(sched_heap_peek(&h, &c, &d));
    /* Set again after emptying, then remove the only element. */
    assert_int_equal(sched_heap_set(&h, 42, 5), 0);
    assert_true(sched_heap_remove(&h, 42));
    assert_false(sched_heap_remove(&h, 42));
    assert_int_equal(sched_heap_size(&h), 0);
    assert_true(sched_heap_valid(&h));
    sched_heap_free(&h);
}

static void update_moves_both_ways(void **state)
{
    sched_heap h;
    sched_heap_init(&h);
    int64_t c, d;
    for (int64_t i = 1; i <= 10; i++)
        assert_int_equal(sched_heap_set(&h, i, i * 100), 0);
    /* The min moves up (later): the next one takes over. */
    assert_int_equal(sched_heap_set(&h, 1, 5000), 0);
    assert_true(sched_heap_peek(&h, &c, &d));
    assert_int_equal(c, 2);
    assert_int_equal(d, 200);
    assert_true(sched_heap_get(&h, 1, &d));
    assert_int_equal(d, 5000);
    /* A late one moves down (earlier) past the min. */
    assert_int_equal(sched_heap_set(&h, 9, 1), 0);
    assert_true(sched_heap_peek(&h, &c, &d));
    assert_int_equal(c, 9);
    assert_int_equal(d, 1);
    /* Setting the same time again changes nothing. */
    assert_int_equal(sched_heap_set(&h, 9, 1), 0);
    assert_int_equal(sched_heap_size(&h), 10);
    assert_true(sched_heap_valid(&h));
    int64_t out[16];
    assert_int_equal(sched_heap_pop_due(&h, INT64_MAX, out, 16), 10);
    int64_t want[] = {9, 2, 3, 4, 5, 6, 7, 8, 10, 1};
    for (int i = 0; i < 10; i++)
        assert_int_equal(out[i], want[i]);
    sched_heap_free(&h);
}

static void removes_anywhere(void **state)
{
    sched_heap h;
    sched_heap_init(&h);
    for (int64_t i = 0; i < 50; i++)
        assert_int_equal(sched_heap_set(&h, i, 1000 - i), 0);
    /* Entry 0 has the latest time, so it sits in a leaf; removing the array's last slot
     * and the root exercise both ends. */
    assert_true(sched_heap_remove(&h, h.heap[h.size - 1].customer));
    assert_true(sched_heap_remove(&h, 49)); /* the root */
    assert_true(sched_heap_remove(&h, 20));
    assert_true(sched_heap_valid(&h));
    assert_int_equal(sched_heap_size(&h), 47);
    int64_t c;
    assert_true(sched_heap_peek(&h, &c, NULL));
    assert_int_equal(c, 48);
    sched_heap_free(&h);
}

static void extreme_ids_and_times(void **state)
{
    sched_heap h;
    sched_heap_init(&h);
    int64_t ids[] = {0, -1, INT64_MIN, INT64_MAX, 1, -INT64_MAX};
    for (size_t i = 0; i < PGP_ARRAY_LEN(ids); i++)
        assert_int_equal(sched_heap_set(&h, ids[i], 10), 0);
    assert_int_equal(sched_heap_set(&h, INT64_MAX, INT64_MIN), 0);
    assert_int_equal(sched_heap_set(&h, 0, INT64_MAX), 0);
    int64_t d;
    for (size_t i = 0; i < PGP_ARRAY_LEN(ids); i++)
        assert_true(sched_heap_get(&h, ids[i], NULL));
    assert_true(sched_heap_get(&h, 0, &d));
    assert_int_equal(d, INT64_MAX);
    int64_t out[8];
    /* Ties at 10 come out in id order. */
    assert_int_equal(sched_heap_pop_due(&h, 10, out, 8), 5);
    int64_t want[] = {INT64_MAX, INT64_MIN, -INT64_MAX, -1, 1};
    for (int i = 0; i < 5; i++)
        assert_int_equal(out[i], want[i]);
    assert_int_equal(sched_heap_pop_due(&h, INT64_MAX - 1, out, 8), 0);
    assert_int_equal(sched_heap_pop_due(&h, INT64_MAX, out, 8), 1);
    assert_int_equal(out[0], 0);
    sched_heap_free(&h);
}

static void pop_due_respects_max(void **state)
{
    sched_heap h;
    sched_heap_init(&h);
    for (int64_t i = 0; i < 10; i++)
        assert_int_equal(sched_heap_set(&h, i, i), 0);
    int64_t out[10];
    assert_int_equal(sched_heap_pop_due(&h, 100, NULL, 10), 0);
    assert_int_equal(sched_heap_pop_due(&h, 100, out, 0), 0);
    assert_int_equal(sched_heap_pop_due(&h, 100, out, 3), 3);
    assert_int_equal(out[2], 2);
    assert_int_equal(sched_heap_pop_due(&h, 4, out, 10), 2);
    assert_int_equal(out[0], 3);
    assert_int_equal(out[1], 4);
    assert_int_equal(sched_heap_size(&h), 5);
    sched_heap_clear(&h);
    assert_int_equal(sched_heap_size(&h), 0);
    assert_false(sched_heap_get(&h, 7, NULL));
    assert_int_equal(sched_heap_set(&h, 7, 1), 0);
    assert_true(sched_heap_valid(&h));
    assert_int_equal(sched_heap_size(&h), 1);
    sched_heap_free(&h);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void grows_through_many_doublings(void **state)
{
    enum { N = 200000 };
    sched_heap h;
    sched_heap_init(&h);
    uint64_t s = 99;
    int64_t *due = malloc(N * sizeof *due);
    assert_non_null(due);
    /* Ids spaced by a power of two would collide in a table indexed by low bits unhashed. */
    for (int64_t i = 0; i < N; i++) {
        due[i] = (int64_t)(rng_next(&s) % 1000000);
        assert_int_equal(sched_heap_set(&h, i << 20, due[i]), 0);
    }
    assert_int_equal(sched_heap_size(&h), N);
    assert_true(sched_heap_valid(&h));
    for (int64_t i = 0; i < N; i += 2)
        assert_true(sched_heap_remove(&h, i << 20));
    assert_true(sched_heap_valid(&h));
    int64_t *out = malloc(N * sizeof *out);
    assert_non_null(out);
    size_t n = sched_heap_pop_due(&h, INT64_MAX, out, N);
    assert_int_equal(n, N / 2);
    for (size_t i = 0; i < n; i++) {
        int64_t k = out[i] >> 20;
        assert_int_equal(k % 2, 1); /* only odd keys remain */
        if (i > 0) {
            int64_t p = out[i - 1] >> 20;
            int64_t dp = due[p], dk = due[k];
            assert_true(dp < dk || (dp == dk && p < k));
        }
    }
    assert_int_equal(sched_heap_size(&h), 0);
    free(out);
    free(due);
    sched_heap_free(&h);
}

/* The model: an unordered array of entries; every query is a linear scan. */
typedef struct model {
    sched_entry e[1024];
    size_t n;
} model;

static size_t model_find(const model *m, int64_t customer)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].customer == customer)
            return i;
    return SIZE_MAX;
}

static size_t model_min(const model *m)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < m->n; i++) {
        const sched_entry *a = &m->e[i];
        if (best == SIZE_MAX || a->due < m->e[best].due ||
            (a->due == m->e[best].due && a->customer < m->e[best].customer))
            best = i;
    }
    return best;
}

static void model_remove_at(model *m, size_t i)
{
    m->e[i] = m->e[--m->n];
}

static void randomized_against_model(void **state)
{
    enum { IDS = 700, OPS = 100000 };
    int64_t ids[IDS];
    uint64_t s = 20240601;
    ids[0] = 0;
    ids[1] = -1;
    ids[2] = INT64_MIN;
    ids[3] = INT64_MAX;
    for (int i = 4; i < IDS; i++)
        ids[i] = i % 3 == 0 ? (int64_t)rng_next(&s) : i % 3 == 1 ? i : -(int64_t)i * 4096;
    static model m;
    m.n = 0;
    sched_heap h;
    sched_heap_init(&h);
    int64_t out[32];
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rng_next(&s);
        int64_t id = ids[(r >> 8) % IDS];
        unsigned kind = (unsigned)(r % 100);
        /* A narrow range of times makes ties common; the extremes appear now and then. */
        int64_t due = (int64_t)((r >> 32) % 2001) - 1000;
        if ((r >> 20) % 97 == 0)
            due = (r >> 40) & 1 ? INT64_MAX : INT64_MIN;
        if (kind < 45) {
            assert_int_equal(sched_heap_set(&h, id, due), 0);
            size_t i = model_find(&m, id);
            if (i == SIZE_MAX)
                m.e[i = m.n++] = (sched_entry){.customer = id};
            m.e[i].due = due;
        } else if (kind < 65) {
            size_t i = model_find(&m, id);
            assert_int_equal(sched_heap_remove(&h, id), i != SIZE_MAX);
            if (i != SIZE_MAX)
                model_remove_at(&m, i);
        } else if (kind < 80) {
            size_t max = (r >> 50) % 33;
            size_t n = sched_heap_pop_due(&h, due, out, max);
            size_t k = 0;
            for (; k < max; k++) {
                size_t i = model_min(&m);
                if (i == SIZE_MAX || m.e[i].due > due)
                    break;
                assert_true(k < n);
                assert_int_equal(out[k], m.e[i].customer);
                model_remove_at(&m, i);
            }
            assert_int_equal(n, k);
        } else if (kind < 90) {
            int64_t c, d;
            size_t i = model_min(&m);
            assert_int_equal(sched_heap_peek(&h, &c, &d), i != SIZE_MAX);
            if (i != SIZE_MAX) {
                assert_int_equal(c, m.e[i].customer);
                assert_int_equal(d, m.e[i].due);
            }
        } else {
            int64_t d;
            size_t i = model_find(&m, id);
            assert_int_equal(sched_heap_get(&h, id, &d), i != SIZE_MAX);
            if (i != SIZE_MAX)
                assert_int_equal(d, m.e[i].due);
        }
        assert_int_equal(sched_heap_size(&h), m.n);
        if (op % 1000 == 0)
            assert_true(sched_heap_valid(&h));
    }
    assert_true(sched_heap_valid(&h));
    /* Drain: everything comes out in model order. */
    while (m.n > 0) {
        size_t i = model_min(&m);
        assert_int_equal(sched_heap_pop_due(&h, INT64_MAX, out, 1), 1);
        assert_int_equal(out[0], m.e[i].customer);
        model_remove_at(&m, i);
    }
    assert_int_equal(sched_heap_size(&h), 0);
    sched_heap_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_heap),
        cmocka_unit_test(one_element),
        cmocka_unit_test(update_moves_both_ways),
        cmocka_unit_test(removes_anywhere),
        cmocka_unit_test(extreme_ids_and_times),
        cmocka_unit_test(pop_due_respects_max),
        cmocka_unit_test(grows_through_many_doublings),
        cmocka_unit_test(randomized_against_model),
    };
    return TL_RUN(tests, NULL, NULL);
}
