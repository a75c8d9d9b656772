/* test_frontier_floor.c - the state a lost frontier is rebuilt to: the last send bounded from the
 * attempt log and the leased claims, the GCRA floor (the sends before and after a failover
 * together never exceed the burst, which the state "never sent" does) and the batch tick. */
#include "testlib.h"

#include "frontier_floor.h"
#include "gcra.h"

#include <stdlib.h>

#define SEC 1000000LL

static void last_send_from_traces(void **state)
{
    int64_t out = 42;
    frontier_trace none = {0};
    assert_false(frontier_last_send(&none, SEC, &out));
    assert_int_equal(out, 42);
    assert_false(frontier_last_send(NULL, SEC, &out));

    frontier_trace attempt = {.has_attempt = true, .attempt_us = 100 * SEC};
    assert_true(frontier_last_send(&attempt, SEC, &out));
    assert_int_equal(out, 100 * SEC);

    /* A claim's sends follow it by up to claim_to_send_us. */
    frontier_trace claim = {.has_claim = true, .claim_us = 100 * SEC};
    assert_true(frontier_last_send(&claim, 570000, &out));
    assert_int_equal(out, 100 * SEC + 570000);

    /* Both: the later bound wins either way. */
    frontier_trace both = {
        .has_attempt = true, .attempt_us = 101 * SEC, .has_claim = true, .claim_us = 100 * SEC};
    assert_true(frontier_last_send(&both, 570000, &out));
    assert_int_equal(out, 101 * SEC);
    both.attempt_us = 100 * SEC + 1;
    assert_true(frontier_last_send(&both, 570000, &out));
    assert_int_equal(out, 100 * SEC + 570000);

    /* Negative slack counts as none; saturation at the top. */
    assert_true(frontier_last_send(&claim, -5, &out));
    assert_int_equal(out, 100 * SEC);
    frontier_trace huge = {.has_claim = true, .claim_us = INT64_MAX - 3};
    assert_true(frontier_last_send(&huge, SEC, &out));
    assert_int_equal(out, INT64_MAX);
}

static void floor_tat_is_burst_periods_after_last_send(void **state)
{
    int64_t s = 1700000000LL * SEC;
    assert_int_equal(frontier_floor_tat(GCRA_TAT_NONE, s, 5 * SEC, 1), s + 5 * SEC);
    assert_int_equal(frontier_floor_tat(GCRA_TAT_NONE, s, 5 * SEC, 3), s + 15 * SEC);
    /* A later known tat stays; an earlier one is raised. */
    assert_int_equal(frontier_floor_tat(s + 20 * SEC, s, 5 * SEC, 3), s + 20 * SEC);
    assert_int_equal(frontier_floor_tat(s + 1, s, 5 * SEC, 3), s + 15 * SEC);
    /* Clamps and saturation. */
    assert_int_equal(frontier_floor_tat(GCRA_TAT_NONE, s, 0, 0), s + 1);
    assert_int_equal(frontier_floor_tat(GCRA_TAT_NONE, s, GCRA_PERIOD_MAX_US, 1000000), INT64_MAX);
    assert_int_equal(frontier_floor_tat(GCRA_TAT_NONE, INT64_MAX - 10, 5 * SEC, 1), INT64_MAX);
}

/* A reference GCRA (virtual scheduling) over a whole sequence of send times: the number of sends
 * that did not conform to (period, burst), each with `jitter` of slack. */
static int violations(const int64_t *at, int n, int64_t period, int burst, int64_t jitter)
{
    int64_t tat = GCRA_TAT_NONE, tau = (int64_t)(burst - 1) * period;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (tat != GCRA_TAT_NONE && tat - tau > at[i] + jitter)
            bad++;
        tat = (tat == GCRA_TAT_NONE || at[i] > tat ? at[i] : tat) + period;
    }
    return bad;
}

/* Sends greedily from `from` to `until` (each as early as GCRA allows, woken at eligibility);
 * appends their times to at[]. */
static int send_greedy(int64_t *tat, int64_t from, int64_t until, int64_t period, int burst,
                       int64_t *at, int n, int cap)
{
    int64_t now = from;
    while (now < until && n < cap) {
        int got = gcra_take(tat, now, period, burst, 1);
        assert_true(got >= 0);
        if (got == 1) {
            at[n++] = now;
            continue;
        }
        now = gcra_eligible_at(*tat, period, burst);
    }
    return n;
}

/* The old leader sends greedily, a failover at a random moment loses its frontier, and the new
 * leader starts after a random outage from (a) the floor rebuilt from the last send, or (b) no
 * state at all. (a) never exceeds the burst across the failover; (b) does, which is what the
 * floor is for. The last send is known either from its attempt (exact) or only from its claim,
 * made up to the lookahead before it. */
static void floor_keeps_the_merged_sequence_conforming(void **state)
{
    srand(20240611);
    enum { CAP = 4096 };
    int64_t *at = malloc(CAP * sizeof *at);
    assert_non_null(at);
    int naive_bad_runs = 0;
    for (int run = 0; run < 2000; run++) {
        int burst = 1 + rand() % 5;
        int64_t period = (1 + rand() % 20) * 250000; /* 0.25 .. 5 s */
        int64_t start = 1700000000LL * SEC + rand() % SEC;
        int64_t failover = start + (int64_t)(rand() % 60) * SEC + rand() % SEC;
        int64_t outage = (int64_t)(rand() % 8000) * 1000; /* 0 .. 8 s */
        int64_t tat = GCRA_TAT_NONE;
        int n = send_greedy(&tat, start, failover, period, burst, at, 0, CAP);
        assert_true(n > 0);
        int64_t last = at[n - 1];
        /* Known from its claim only: claimed up to 70 ms ahead of the send (lookahead and
         * coalescing), and the floor allows 570 ms from claim to send. */
        frontier_trace trace =
            rand() % 2 ? (frontier_trace){.has_attempt = true, .attempt_us = last}
                       : (frontier_trace){.has_claim = true, .claim_us = last - rand() % 70000};
        int64_t bound;
        assert_true(frontier_last_send(&trace, 570000, &bound));
        assert_true(bound >= last);

        int64_t floor_tat = frontier_floor_tat(GCRA_TAT_NONE, bound, period, burst);
        int m = send_greedy(&floor_tat, failover + outage, failover + outage + 30 * SEC, period,
                            burst, at, n, CAP);
        assert_int_equal(violations(at, m, period, burst, 0), 0);

        int64_t none = GCRA_TAT_NONE;
        m = send_greedy(&none, failover + outage, failover + outage + 30 * SEC, period, burst, at,
                        n, CAP);
        naive_bad_runs += violations(at, m, period, burst, 0) > 0;
    }
    free(at);
    /* Without the floor, every failover shorter than the time its burst takes to refill breaks
     * spacing: most of these runs. */
    assert_true(naive_bad_runs > 500);
}

static void batch_tick_floor(void **state)
{
    bool have = false;
    int64_t last = 0;
    /* Tick 2000 ms: 1700000001.5 s is in tick 850000000. */
    int64_t t = 1700000001500000LL;
    assert_true(frontier_floor_tick(&have, &last, t, 0, 2000));
    assert_true(have);
    assert_int_equal(last, 850000000);
    /* The same or an earlier tick changes nothing. */
    assert_false(frontier_floor_tick(&have, &last, t - 1000000, 0, 2000));
    assert_int_equal(last, 850000000);
    /* The slack for clocks that disagree can move it to the next tick (a claim made just after
     * a boundary by the old leader's clock, stamped just before it by the database's). */
    assert_true(frontier_floor_tick(&have, &last, 1700000001950000LL, 100000, 2000));
    assert_int_equal(last, 850000001);
    /* A later known tick stays. */
    have = true;
    last = 900000000;
    assert_false(frontier_floor_tick(&have, &last, t, 0, 2000));
    assert_int_equal(last, 900000000);
    /* Nothing for bad arguments or times before the epoch. */
    have = false;
    assert_false(frontier_floor_tick(&have, &last, t, 0, 0));
    assert_false(frontier_floor_tick(&have, &last, -5000000, 0, 1000));
    assert_false(have);
    assert_false(frontier_floor_tick(NULL, &last, t, 0, 1000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(last_send_from_traces),
        cmocka_unit_test(floor_tat_is_burst_periods_after_last_send),
        cmocka_unit_test(floor_keeps_the_merged_sequence_conforming),
        cmocka_unit_test(batch_tick_floor),
    };
    return TL_RUN(tests, NULL, NULL);
}
