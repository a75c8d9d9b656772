/* test_share.c - fair division (src/dispatch/share.c): equal shares among equal claimants, the
 * unused share of one going to the others, nothing more for a claimant that already holds its
 * share (a slow receiver's), weights, host pools used up (work-queue claimants only from room
 * not booked for spaced slots), the total, rotating ties, and every grant within its bounds
 * over random cases. */
#include "testlib.h"

#include <math.h>

#include "dispatch/internal.h"

#include <stdlib.h>

static share_claimant claimant(int demand, int use, double weight, int pool, bool open_only)
{
    return (share_claimant){
        .demand = demand, .use = use, .weight = weight, .pool = pool, .open_only = open_only};
}

static int divide(share_claimant *v, size_t n, share_pool *pools, int total, uint64_t rotate)
{
    uint32_t heap[64];
    assert_true(n <= 64);
    return share_divide(v, n, pools, total, rotate, heap);
}

static void equal_claimants_get_equal_shares(void **state)
{
    share_claimant v[4];
    for (int i = 0; i < 4; i++)
        v[i] = claimant(1000, 0, 1, 0, true);
    share_pool pool = {.room = 16, .open_room = 16};
    assert_int_equal(divide(v, 4, &pool, 1000, 0), 16);
    for (int i = 0; i < 4; i++)
        assert_int_equal(v[i].grant, 4);
    assert_int_equal(pool.room, 0);
    assert_int_equal(pool.open_room, 0);
}

static void unused_share_goes_to_the_others(void **state)
{
    share_claimant v[] = {claimant(1, 0, 1, 0, false), claimant(1000, 0, 1, 0, true),
                          claimant(1000, 0, 1, 0, true)};
    share_pool pool = {.room = 16, .open_room = 16};
    assert_int_equal(divide(v, 3, &pool, 1000, 0), 16);
    assert_int_equal(v[0].grant, 1);
    assert_int_equal(v[1].grant + v[2].grant, 15); /* 7 and 8 */
    assert_true(abs(v[1].grant - v[2].grant) <= 1);
}

static void what_is_held_counts(void **state)
{
    /* A slow receiver's tenant holds 6 of the host's 8: the 2 free go to the others first, and
     * the newly due one (holding nothing) is served first of all. */
    share_claimant v[] = {claimant(1000, 6, 1, 0, true), claimant(1000, 1, 1, 0, true),
                          claimant(1, 0, 1, 0, false)};
    share_pool pool = {.room = 2, .open_room = 2};
    assert_int_equal(divide(v, 3, &pool, 1000, 0), 2);
    assert_int_equal(v[0].grant, 0);
    assert_int_equal(v[1].grant, 1);
    assert_int_equal(v[2].grant, 1);
}

static void weights_scale_shares(void **state)
{
    share_claimant v[] = {claimant(1000, 0, 3, 0, true), claimant(1000, 0, 1, 0, true)};
    share_pool pool = {.room = 16, .open_room = 16};
    assert_int_equal(divide(v, 2, &pool, 1000, 0), 16);
    assert_int_equal(v[0].grant, 12);
    assert_int_equal(v[1].grant, 4);
    /* A weight <= 0 (or NaN) counts as 1. */
    share_claimant w[] = {claimant(1000, 0, 0, 0, true), claimant(1000, 0, -1, 0, true)};
    pool = (share_pool){.room = 10, .open_room = 10};
    divide(w, 2, &pool, 1000, 0);
    assert_int_equal(w[0].grant, 5);
    assert_int_equal(w[1].grant, 5);
}

static void booked_room_is_for_spaced_slots(void **state)
{
    /* 4 free connections, 3 of them booked by spaced deliveries waiting for their slot: a
     * work-queue claimant gets 1 however much it wants; a spaced one may still be claimed. */
    share_claimant v[] = {claimant(1000, 0, 1, 0, true), claimant(2, 0, 1, 0, false)};
    share_pool pool = {.room = 4, .open_room = 1};
    assert_int_equal(divide(v, 2, &pool, 1000, 0), 3);
    assert_int_equal(v[0].grant, 1);
    assert_int_equal(v[1].grant, 2);
}

static void pools_and_total_bound_the_grants(void **state)
{
    share_claimant v[] = {claimant(1000, 0, 1, 0, true), claimant(1000, 0, 1, 1, true),
                          claimant(1000, 0, 1, -1, true)};
    share_pool pools[] = {{.room = 2, .open_room = 2}, {.room = 100, .open_room = 100}};
    /* Host 0 is full at 2; the total (30) is shared by the other two. */
    assert_int_equal(divide(v, 3, pools, 30, 0), 30);
    assert_int_equal(v[0].grant, 2);
    assert_int_equal(v[1].grant, 14);
    assert_int_equal(v[2].grant, 14);
    assert_int_equal(pools[0].room, 0);
    assert_int_equal(pools[1].room, 86);
    /* Nothing to give. */
    share_claimant w[] = {claimant(5, 0, 1, -1, true)};
    assert_int_equal(divide(w, 1, NULL, 0, 0), 0);
    assert_int_equal(w[0].grant, 0);
    /* Nothing wanted. */
    share_claimant z[] = {claimant(0, 0, 1, -1, true), claimant(-3, 0, 1, -1, true)};
    assert_int_equal(divide(z, 2, NULL, 10, 0), 0);
}

static void ties_rotate(void **state)
{
    /* One unit, three equal claimants: who gets it moves with the rotation. */
    int got[3] = {0};
    for (uint64_t r = 0; r < 3; r++) {
        share_claimant v[3];
        for (int i = 0; i < 3; i++)
            v[i] = claimant(5, 0, 1, -1, true);
        assert_int_equal(divide(v, 3, NULL, 1, r), 1);
        for (int i = 0; i < 3; i++)
            got[i] += v[i].grant;
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(got[i], 1);
}

static void random_divisions_stay_within_bounds(void **state)
{
    srand(12345);
    for (int round = 0; round < 2000; round++) {
        size_t n = 1 + (size_t)(rand() % 20);
        share_claimant v[20];
        share_pool pools[3], before[3];
        for (int p = 0; p < 3; p++) {
            pools[p].room = rand() % 20;
            pools[p].open_room = pools[p].room - rand() % (pools[p].room + 1);
            pools[p].ahead = rand() % 3 == 0 ? rand() % 10 : 0; /* a claim-ahead window's room */
            before[p] = pools[p];
        }
        for (size_t i = 0; i < n; i++)
            v[i] =
                claimant(rand() % 30, rand() % 10, 1 + rand() % 3, rand() % 4 - 1, rand() % 2 == 0);
        int total = rand() % 60;
        int given = divide(v, n, pools, total, (uint64_t)round);
        assert_true(given >= 0 && given <= total);
        int sum = 0, per_pool[3] = {0}, spaced_per_pool[3] = {0};
        for (size_t i = 0; i < n; i++) {
            assert_true(v[i].grant >= 0);
            assert_true(v[i].grant <= (v[i].demand > 0 ? v[i].demand : 0));
            sum += v[i].grant;
            if (v[i].pool >= 0) {
                per_pool[v[i].pool] += v[i].grant;
                if (!v[i].open_only)
                    spaced_per_pool[v[i].pool] += v[i].grant;
            }
        }
        assert_int_equal(sum, given);
        for (int p = 0; p < 3; p++) {
            /* The window's room is extra, and only work-queue claimants take it: spaced ones
             * never get more than the connections free now. */
            assert_true(per_pool[p] <= before[p].room + before[p].ahead);
            assert_true(spaced_per_pool[p] <= before[p].room);
            assert_int_equal(pools[p].room + pools[p].ahead,
                             before[p].room + before[p].ahead - per_pool[p]);
            assert_true(pools[p].ahead >= 0 && pools[p].ahead <= before[p].ahead);
        }
        /* Work conserving: when something was left, every claimant that got less than it wanted
         * was stopped by its host. */
        if (given < total)
            for (size_t i = 0; i < n; i++)
                if (v[i].grant < v[i].demand)
                    assert_true(v[i].pool >= 0 &&
                                (v[i].open_only ? pools[v[i].pool].open_room <= 0 &&
                                                      pools[v[i].pool].ahead <= 0
                                                : pools[v[i].pool].room <= 0));
    }
}

/* Grouped (a customer's endpoints): the groups divide as claimants, then each group's grant is
 * divided among its members. 50 endpoints of one customer beside one of another on 8
 * connections: 4 and 4, not 8/51 each. */
static void grouped_divides_customers_first(void **state)
{
    (void)state;
    enum { N = 51 };
    share_claimant v[N], gv[N];
    uint32_t group[N], members[N], heap[N + 1];
    for (int i = 0; i < N; i++) {
        v[i] = claimant(100, 0, 1, 0, true);
        group[i] = i < 50 ? 0 : 1;
    }
    share_pool pool = {.room = 8, .open_room = 8};
    assert_int_equal(share_divide_grouped(v, N, group, 2, gv, members, &pool, 1000, 0, heap), 8);
    int many = 0;
    for (int i = 0; i < 50; i++) {
        assert_true(v[i].grant <= 1); /* spread over the customer's endpoints */
        many += v[i].grant;
    }
    assert_int_equal(many, 4);
    assert_int_equal(v[50].grant, 4);
    /* What a group holds counts as one customer's: endpoints with requests out get less. */
    for (int i = 0; i < N; i++)
        v[i] = claimant(100, i < 4 ? 1 : 0, 1, 0, true);
    pool = (share_pool){.room = 8, .open_room = 8};
    share_divide_grouped(v, N, group, 2, gv, members, &pool, 1000, 0, heap);
    many = 0;
    for (int i = 0; i < 50; i++)
        many += v[i].grant;
    assert_int_equal(many, 2);        /* 4 out + 2 = 6 */
    assert_int_equal(v[50].grant, 6); /* 0 out + 6 = 6 */
    for (int i = 0; i < 4; i++)
        assert_int_equal(v[i].grant, 0); /* the ones with requests out wait */
}

/* A host's rate divided by weighted max-min fairness: the one that wants less than its share
 * gets what it wants, the rest is divided by weight, nobody gets more than it wants, and the
 * whole is never exceeded. */
static void rates_max_min(void **state)
{
    (void)state;
    double demand[] = {600, 600, 120}, weight[] = {1, 1, 1}, out[3];
    assert_int_equal(share_rates(demand, weight, 3, 600, out), 0);
    assert_true(out[2] == 120);
    assert_true(out[0] == 240 && out[1] == 240);
    /* Weights: 2:1 between the two big ones once the small one is served. */
    double w2[] = {2, 1, 1};
    assert_int_equal(share_rates(demand, w2, 3, 600, out), 0);
    assert_true(out[2] == 120);
    assert_true(fabs(out[0] - 320) < 1e-9 && fabs(out[1] - 160) < 1e-9);
    /* More than enough: everyone gets its demand; a work queue (infinite) takes the rest. */
    double d3[] = {60, INFINITY, 120};
    assert_int_equal(share_rates(d3, weight, 3, 6000, out), 0);
    assert_true(out[0] == 60 && out[2] == 120 && out[1] == 6000 - 180);
    /* Nothing to divide, and nobody. */
    assert_int_equal(share_rates(demand, weight, 3, 0, out), 0);
    assert_true(out[0] == 0 && out[1] == 0 && out[2] == 0);
    assert_int_equal(share_rates(demand, weight, 0, 600, out), 0);
    /* Random cases: within the capacity, within each demand, and max-min: whoever got less
     * than it wanted got at least as much per weight as anyone else. */
    srand(3);
    for (int round = 0; round < 2000; round++) {
        enum { N = 12 };
        double d[N], w[N], o[N], cap = (double)(rand() % 5000);
        size_t n = (size_t)(rand() % N) + 1;
        for (size_t i = 0; i < n; i++) {
            d[i] = rand() % 7 == 0 ? INFINITY : (double)(rand() % 2000);
            w[i] = 1 + rand() % 4;
        }
        assert_int_equal(share_rates(d, w, n, cap, o), 0);
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(o[i] >= 0 && o[i] <= d[i] + 1e-9);
            sum += o[i];
        }
        assert_true(sum <= cap + 1e-6);
        for (size_t i = 0; i < n; i++)
            if (o[i] < d[i] - 1e-6)
                for (size_t k = 0; k < n; k++)
                    assert_true(o[i] / w[i] >= o[k] / w[k] - 1e-6);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(equal_claimants_get_equal_shares),
        cmocka_unit_test(unused_share_goes_to_the_others),
        cmocka_unit_test(what_is_held_counts),
        cmocka_unit_test(weights_scale_shares),
        cmocka_unit_test(booked_room_is_for_spaced_slots),
        cmocka_unit_test(pools_and_total_bound_the_grants),
        cmocka_unit_test(ties_rotate),
        cmocka_unit_test(random_divisions_stay_within_bounds),
        cmocka_unit_test(grouped_divides_customers_first),
        cmocka_unit_test(rates_max_min),
    };
    return TL_RUN(tests, NULL, NULL);
}
