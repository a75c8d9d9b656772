/* test_schedule.c - the scheduler's pure decisions (src/dispatch/state.c and claim.c), on
 * customers, carriers and hosts built by hand: when a customer may next be claimed for
 * (customer_due_at: paused, waiting, no pairs or only idle ones, a batch customer's owed items,
 * its in-flight limit or a throttled unlimited customer's cap, a half-open breaker's probe, the
 * earliest pair, a spaced customer's GCRA slot less the lookahead, an open breaker's cooldown, a
 * Retry-After hold), how many items a customer's own limits let one claim ask (claim_limit), a
 * batch customer's allowance per tick with its fractional credit at its effective rate
 * (batch_tick_allowance), a carrier's budget for one round (carrier_budget), a receiver host's
 * free connections (host_pool) and what it keeps for its spaced customers (spaced_reserve). */
#include "testlib.h"

#include "dispatch/internal.h"

#include "gcra.h"

#include <math.h>

#define SEC 1000000LL
/* Some wall-clock time, in epoch microseconds. */
#define T0 (1700000000LL * SEC)

static customer make_customer(customer_mode mode, pair *pairs, size_t n_pairs)
{
    customer c = {0};
    c.id = 1;
    c.name = "acme";
    c.mode = mode;
    c.rate = 60;
    c.burst = 1;
    c.period_us = gcra_period_us(60);
    c.tat = GCRA_TAT_NONE;
    c.round_slot = -1;
    c.breaker.state = BREAKER_CLOSED;
    c.pairs = pairs;
    c.n_pairs = n_pairs;
    c.cap_pairs = n_pairs;
    return c;
}

/* A batch customer still owed items of `tick`. */
static customer make_owed_batch(pair *pairs, size_t n_pairs, int64_t tick)
{
    customer c = make_customer(MODE_BATCH, pairs, n_pairs);
    c.owed = 3;
    c.owed_tick = tick;
    return c;
}

#define TICK 28333333LL

static void assert_due(const customer *c, int64_t want)
{
    int64_t due = -1;
    assert_true(customer_due_at(c, TICK, &due));
    assert_int_equal(due, want);
}

static void assert_not_eligible(const customer *c)
{
    int64_t due = -1;
    assert_false(customer_due_at(c, TICK, &due));
}

static void paused_customer_not_eligible(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_UNLIMITED, p, 1);
    assert_due(&c, T0);
    c.paused = true;
    assert_not_eligible(&c);
}

static void waiting_customer_not_eligible(void **state)
{
    pair p[] = {{.carrier = "ups", .next_us = T0}};
    customer c = make_customer(MODE_SPACED, p, 1);
    assert_due(&c, T0);
    c.waiting = true;
    assert_not_eligible(&c);
}

static void customer_without_pairs_not_eligible(void **state)
{
    static const customer_mode modes[] = {MODE_SPACED, MODE_BATCH, MODE_UNLIMITED};
    for (size_t i = 0; i < PGP_ARRAY_LEN(modes); i++) {
        customer c = make_customer(modes[i], NULL, 0);
        c.owed = 5;
        c.owed_tick = TICK;
        assert_not_eligible(&c);
    }
}

static void batch_eligible_only_while_owed_items_of_this_tick(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    /* Nothing owed this tick: the tick itself claims for it, not the scheduler. */
    customer c = make_customer(MODE_BATCH, p, 1);
    c.owed = 0;
    c.owed_tick = TICK;
    assert_int_equal(batch_owed(&c, TICK), 0);
    assert_not_eligible(&c);
    /* Owed for the current tick. */
    c.owed = 3;
    assert_int_equal(batch_owed(&c, TICK), 3);
    assert_due(&c, T0);
    /* Owed for an older tick: never carried past it. */
    c.owed_tick = TICK - 1;
    assert_int_equal(batch_owed(&c, TICK), 0);
    assert_not_eligible(&c);
    c.owed_tick = TICK - 100;
    assert_not_eligible(&c);
    /* Spaced and unlimited customers owe nothing and do not need to. */
    customer s = make_customer(MODE_SPACED, p, 1);
    customer u = make_customer(MODE_UNLIMITED, p, 1);
    assert_due(&s, T0);
    assert_due(&u, T0);
}

static void at_max_in_flight_not_eligible(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_UNLIMITED, p, 1);
    c.max_in_flight = 4;
    c.in_flight = 3;
    assert_due(&c, T0);
    c.in_flight = 4;
    assert_not_eligible(&c);
    c.in_flight = 5; /* the limit was lowered below what is in flight */
    assert_not_eligible(&c);
    /* 0 = no limit. */
    c.max_in_flight = 0;
    c.in_flight = 100000;
    assert_due(&c, T0);
}

static void half_open_breaker_with_probe_out_not_eligible(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_UNLIMITED, p, 1);
    c.breaker.state = BREAKER_HALF_OPEN;
    c.breaker.open_until = T0 - SEC;
    assert_due(&c, T0); /* the probe may go */
    c.breaker.probe_in_flight = true;
    assert_not_eligible(&c);
}

static void due_at_the_earliest_pair(void **state)
{
    pair p[] = {{.carrier = "a", .next_us = T0 + 5 * SEC},
                {.carrier = "b", .next_us = T0 + 3 * SEC},
                {.carrier = "", .next_us = T0 + 9 * SEC}};
    customer u = make_customer(MODE_UNLIMITED, p, 3);
    assert_due(&u, T0 + 3 * SEC);
    customer b = make_owed_batch(p, 3, TICK);
    assert_due(&b, T0 + 3 * SEC);
    customer s = make_customer(MODE_SPACED, p, 3); /* never sent: no GCRA wait */
    assert_due(&s, T0 + 3 * SEC);
    /* The earliest moves when its pair does. */
    p[1].next_us = T0 + 7 * SEC;
    assert_due(&u, T0 + 5 * SEC);
    /* A pair already overdue. */
    p[2].next_us = T0 - 60 * SEC;
    assert_due(&u, T0 - 60 * SEC);
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static void spaced_due_at_its_gcra_slot_less_the_lookahead(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}, {.carrier = "x", .next_us = T0 + 2 * SEC}};
    static const int bursts[] = {1, 3};
    static const int64_t tats[] = {T0 - 10 * SEC,     T0,
                                   T0 + LOOKAHEAD_US, T0 + LOOKAHEAD_US + 1,
                                   T0 + 10 * SEC,     T0 + 3600 * SEC};
    for (size_t b = 0; b < PGP_ARRAY_LEN(bursts); b++) {
        for (size_t t = 0; t < PGP_ARRAY_LEN(tats); t++) {
            customer c = make_customer(MODE_SPACED, p, 2);
            c.burst = bursts[b];
            c.tat = tats[t];
            int64_t slot = gcra_eligible_at(c.tat, c.period_us, c.burst);
            assert_due(&c, max64(T0, slot - LOOKAHEAD_US));
        }
    }
    /* Spot checks of the rule: a slot 10 s out with a burst of 3 (tolerance 2 periods). */
    customer c = make_customer(MODE_SPACED, p, 2);
    c.burst = 3;
    c.tat = T0 + 10 * SEC;
    assert_due(&c, T0 + 8 * SEC - LOOKAHEAD_US);
    /* Never before the items are due, even with the slot long past. */
    c.tat = T0 - 3600 * SEC;
    assert_due(&c, T0);
    /* Other modes do not pace by GCRA. */
    c.tat = T0 + 3600 * SEC;
    c.mode = MODE_UNLIMITED;
    assert_due(&c, T0);
    c = make_owed_batch(p, 2, TICK);
    c.tat = T0 + 3600 * SEC;
    assert_due(&c, T0);
}

static void open_breaker_pushes_due_to_its_end(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_UNLIMITED, p, 1);
    c.breaker.state = BREAKER_OPEN;
    c.breaker.open_until = T0 + 30 * SEC;
    assert_due(&c, T0 + 30 * SEC);
    /* Cooldown over before the items are due: the items decide. */
    c.breaker.open_until = T0 - SEC;
    assert_due(&c, T0);

    /* Spaced: the latest of pair, GCRA slot (less lookahead) and breaker. */
    customer s = make_customer(MODE_SPACED, p, 1);
    s.breaker.state = BREAKER_OPEN;
    s.tat = T0 + 10 * SEC;
    int64_t slot = gcra_eligible_at(s.tat, s.period_us, s.burst) - LOOKAHEAD_US;
    s.breaker.open_until = T0 + 30 * SEC;
    assert_due(&s, T0 + 30 * SEC);
    s.breaker.open_until = T0 + 5 * SEC;
    assert_due(&s, slot);

    /* Batch owed items wait for the breaker too. */
    customer b = make_owed_batch(p, 1, TICK);
    b.breaker.state = BREAKER_OPEN;
    b.breaker.open_until = T0 + 30 * SEC;
    assert_due(&b, T0 + 30 * SEC);
}

typedef struct limit_case {
    customer_mode mode;
    int want, max_in_flight, in_flight, cap, expect;
} limit_case;

/* A throttling receiver's Retry-After holds the customer: due at its end (a spaced customer its
 * lookahead before, to be sent exactly at it), never earlier than its items or its slot. */
static void retry_after_hold_pushes_due(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer u = make_customer(MODE_UNLIMITED, p, 1);
    throttle_state u_thr = {0};
    u.thr = &u_thr;
    u.thr->pace.hold_until_us = T0 + 5 * SEC;
    assert_due(&u, T0 + 5 * SEC);
    customer b = make_owed_batch(p, 1, TICK);
    throttle_state b_thr = {0};
    b.thr = &b_thr;
    b.thr->pace.hold_until_us = T0 + 2 * SEC;
    assert_due(&b, T0 + 2 * SEC);
    customer sp = make_customer(MODE_SPACED, p, 1);
    throttle_state sp_thr = {0};
    sp.thr = &sp_thr;
    sp.thr->pace.hold_until_us = T0 + 3 * SEC;
    assert_due(&sp, T0 + 3 * SEC - LOOKAHEAD_US);
    /* A hold that has passed changes nothing. */
    sp.thr->pace.hold_until_us = T0 - SEC;
    assert_due(&sp, T0);
    /* An item due after the hold is due at its own time. */
    pair later[] = {{.carrier = "", .next_us = T0 + 9 * SEC}};
    customer l = make_customer(MODE_UNLIMITED, later, 1);
    throttle_state l_thr = {0};
    l.thr = &l_thr;
    l.thr->pace.hold_until_us = T0 + 5 * SEC;
    assert_due(&l, T0 + 9 * SEC);
}

/* An unlimited customer at the in-flight cap a throttle left it waits for a delivery to end. */
static void at_throttle_cap_not_eligible(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer u = make_customer(MODE_UNLIMITED, p, 1);
    throttle_state u_thr = {0};
    u.thr = &u_thr;
    u.thr->pace.cap = 2;
    u.in_flight = 2;
    assert_not_eligible(&u);
    u.in_flight = 1;
    assert_due(&u, T0);
}

/* Pairs kept only for their items in flight (nothing due known) make nobody eligible. */
static void idle_pairs_not_eligible(void **state)
{
    pair p[] = {{.carrier = "a", .next_us = PAIR_IDLE, .in_flight = 2},
                {.carrier = "b", .next_us = PAIR_IDLE, .in_flight = 1}};
    customer c = make_customer(MODE_UNLIMITED, p, 2);
    assert_not_eligible(&c);
    p[1].next_us = T0 + SEC;
    assert_due(&c, T0 + SEC);
}

/* A batch customer's allowance follows its effective rate: a rate of 60 a tick lowered to 30 by
 * a throttling receiver gives 30 a tick. */
static void batch_allowance_at_the_effective_rate(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_BATCH, p, 1);
    throttle_state c_thr = {0};
    c.thr = &c_thr;
    c.have_tick = true;
    c.last_tick = 9;
    double credit;
    assert_int_equal(batch_tick_allowance(&c, 10, &credit), 60);
    c.thr->pace.rate = 30;
    int total = 0;
    for (int64_t t = 10; t < 70; t++) {
        c.last_tick = t - 1;
        int n = batch_tick_allowance(&c, t, &credit);
        c.credit = credit;
        total += n;
    }
    assert_int_equal(total, 30 * 60);
}

static void claim_limit_is_the_tightest_own_bound(void **state)
{
    static const limit_case cases[] = {
        {MODE_UNLIMITED, 10, 0, 0, 0, 10},    /* want */
        {MODE_UNLIMITED, 10, 20, 15, 0, 5},   /* the customer's headroom */
        {MODE_UNLIMITED, 10, 0, 5000, 0, 10}, /* max_in_flight 0: no limit */
        {MODE_UNLIMITED, 10, 4, 4, 0, 0},     /* at the limit */
        {MODE_UNLIMITED, 10, 4, 9, 0, 0},     /* above it (lowered): not negative */
        {MODE_UNLIMITED, -2, 0, 0, 0, 0},     /* nothing wanted */
        {MODE_UNLIMITED, 0, 10, 0, 0, 0},     /* nothing wanted */
        {MODE_UNLIMITED, 7, 7, 0, 0, 7},      /* all equal */
        {MODE_UNLIMITED, 10, 0, 2, 5, 3},     /* a throttled unlimited customer's cap */
        {MODE_UNLIMITED, 10, 4, 2, 5, 2},     /* the tighter of cap and max_in_flight */
        {MODE_UNLIMITED, 10, 0, 6, 5, 0},     /* over its cap */
        {MODE_SPACED, 10, 0, 6, 5, 10},       /* a cap is only for unlimited customers */
    };
    pair p[] = {{.carrier = "", .next_us = T0}};
    for (size_t i = 0; i < PGP_ARRAY_LEN(cases); i++) {
        const limit_case *k = &cases[i];
        customer c = make_customer(k->mode, p, 1);
        c.max_in_flight = k->max_in_flight;
        c.in_flight = k->in_flight;
        throttle_state thr = {.pace.cap = k->cap};
        c.thr = &thr;
        int n = claim_limit(k->want, &c);
        assert_int_equal(n, k->expect);
        assert_true(n >= 0);
        assert_true(n == 0 || n <= k->want);
        assert_true(n == 0 || k->max_in_flight == 0 || n <= k->max_in_flight - k->in_flight);
    }
}

/* One tick of a batch customer, feeding the carried credit back as the claim result does. */
static int run_tick(customer *c, int64_t tick)
{
    double credit = -1;
    int n = batch_tick_allowance(c, tick, &credit);
    if (n >= 0) {
        assert_true(credit >= 0 && credit < 1);
        c->credit = credit;
        c->last_tick = tick;
        c->have_tick = true;
    }
    return n;
}

static void first_tick_grants_the_rate(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_BATCH, p, 1);
    c.rate = 5;
    double credit = -1;
    assert_int_equal(batch_tick_allowance(&c, TICK, &credit), 5);
    assert_true(credit == 0);
    c.rate = 2.5;
    assert_int_equal(batch_tick_allowance(&c, TICK, &credit), 2);
    assert_true(fabs(credit - 0.5) < 1e-9);
    /* The tick number does not matter the first time. */
    assert_int_equal(batch_tick_allowance(&c, 0, &credit), 2);
}

static void same_tick_again_grants_nothing(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_BATCH, p, 1);
    c.rate = 10;
    assert_int_equal(run_tick(&c, TICK), 10);
    double credit;
    assert_int_equal(batch_tick_allowance(&c, TICK, &credit), -1);
    /* An older tick (a previous leader's clock ran ahead) is not granted either. */
    assert_int_equal(batch_tick_allowance(&c, TICK - 1, &credit), -1);
    /* A last tick recorded by another leader counts the same. */
    customer d = make_customer(MODE_BATCH, p, 1);
    d.rate = 10;
    d.have_tick = true;
    d.last_tick = TICK;
    assert_int_equal(batch_tick_allowance(&d, TICK, &credit), -1);
    assert_int_equal(batch_tick_allowance(&d, TICK + 1, &credit), 10);
}

static void fractional_rates_carry_credit(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_BATCH, p, 1);
    c.rate = 0.5;
    static const int half[] = {0, 1, 0, 1, 0, 1, 0, 1};
    for (size_t i = 0; i < PGP_ARRAY_LEN(half); i++)
        assert_int_equal(run_tick(&c, TICK + (int64_t)i), half[i]);

    customer d = make_customer(MODE_BATCH, p, 1);
    d.rate = 2.5;
    static const int two_and_a_half[] = {2, 3, 2, 3, 2, 3};
    for (size_t i = 0; i < PGP_ARRAY_LEN(two_and_a_half); i++)
        assert_int_equal(run_tick(&d, TICK + (int64_t)i), two_and_a_half[i]);
}

static void long_run_total_matches_the_rate(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    static const double rates[] = {0.1, 0.7, 1, 2.7, 13.3};
    for (size_t r = 0; r < PGP_ARRAY_LEN(rates); r++) {
        customer c = make_customer(MODE_BATCH, p, 1);
        c.rate = rates[r];
        long total = 0;
        for (int64_t t = 0; t < 1000; t++)
            total += run_tick(&c, TICK + t); /* run_tick checks credit in [0, 1) */
        double exact = rates[r] * 1000;
        assert_true(total <= (long)floor(exact + 1e-6));
        assert_true(total >= (long)floor(exact + 1e-6) - 1);
    }
}

static void gap_grants_at_most_one_ticks_worth(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    customer c = make_customer(MODE_BATCH, p, 1);
    c.rate = 3;
    assert_int_equal(run_tick(&c, TICK), 3);
    /* Ten ticks missed (a failover): one tick's worth, not eleven. */
    assert_int_equal(run_tick(&c, TICK + 11), 3);
    assert_int_equal(run_tick(&c, TICK + 1000000), 3);

    /* The carried fraction is kept on top of the one tick's worth. */
    customer d = make_customer(MODE_BATCH, p, 1);
    d.rate = 2.5;
    d.have_tick = true;
    d.last_tick = TICK;
    d.credit = 0.5;
    double credit;
    assert_int_equal(batch_tick_allowance(&d, TICK + 20, &credit), 3); /* 0.5 + 2.5 */
    assert_true(credit >= 0 && credit < 1e-9);

    /* Below one item per tick, a gap gives at most one item. */
    customer e = make_customer(MODE_BATCH, p, 1);
    e.rate = 0.25;
    e.have_tick = true;
    e.last_tick = TICK;
    assert_int_equal(batch_tick_allowance(&e, TICK + 100, &credit), 1);
    assert_true(credit >= 0 && credit < 1);
}

static void credit_stays_below_one(void **state)
{
    pair p[] = {{.carrier = "", .next_us = T0}};
    /* A carried credit out of range (an older rule, a bad row) never grants whole items. */
    static const double carried[] = {0, 0.999, 1, 1.5, 7, -0.5, NAN};
    for (size_t i = 0; i < PGP_ARRAY_LEN(carried); i++) {
        customer c = make_customer(MODE_BATCH, p, 1);
        c.rate = 0.5;
        c.have_tick = true;
        c.last_tick = TICK;
        c.credit = carried[i];
        double credit = -1;
        int n = batch_tick_allowance(&c, TICK + 1, &credit);
        assert_true(n == 0 || n == 1);
        assert_true(credit >= 0 && credit < 1);
    }
}

static void carrier_budget_per_round_and_in_flight(void **state)
{
    pgp_config cfg = {0};
    cfg.carrier_max_per_round = 100;
    cfg.carrier_max_in_flight = 0;
    carrier_state cs = {0};
    cs.name = "ups";

    /* The configured per-round cap. */
    assert_int_equal(carrier_budget(&cfg, &cs), 100);
    /* The carrier's own cap overrides it, either way. */
    cs.max_per_round = 7;
    assert_int_equal(carrier_budget(&cfg, &cs), 7);
    cs.max_per_round = 250;
    assert_int_equal(carrier_budget(&cfg, &cs), 250);
    cs.max_per_round = 0;

    /* The configured in-flight cap leaves this much headroom. */
    cfg.carrier_max_in_flight = 20;
    cs.in_flight = 15;
    assert_int_equal(carrier_budget(&cfg, &cs), 5);
    /* The carrier's own in-flight cap overrides the configured one, either way. */
    cs.max_in_flight = 50;
    assert_int_equal(carrier_budget(&cfg, &cs), 35);
    cs.max_in_flight = 16;
    assert_int_equal(carrier_budget(&cfg, &cs), 1);
    /* Headroom larger than the round cap: the round cap. */
    cs.max_in_flight = 1000;
    assert_int_equal(carrier_budget(&cfg, &cs), 100);
    cs.max_per_round = 3;
    assert_int_equal(carrier_budget(&cfg, &cs), 3);
    cs.max_per_round = 0;

    /* At or above the cap (lowered meanwhile): nothing, never negative. */
    cs.max_in_flight = 0;
    cs.in_flight = 20;
    assert_int_equal(carrier_budget(&cfg, &cs), 0);
    cs.in_flight = 45;
    assert_int_equal(carrier_budget(&cfg, &cs), 0);
    cs.max_in_flight = 10;
    assert_int_equal(carrier_budget(&cfg, &cs), 0);

    /* An in-flight cap of 0 means no limit. */
    cs.max_in_flight = 0;
    cfg.carrier_max_in_flight = 0;
    cs.in_flight = 1000000;
    assert_int_equal(carrier_budget(&cfg, &cs), 100);
}

static void host_pool_is_what_is_free_and_what_is_not_booked(void **state)
{
    static dispatcher d; /* only its config is read (no spaced customers on the host) */
    d.cfg.max_host_connections = 16;

    /* No host known (its URL could not be keyed): the per-host connection limit. */
    share_pool p = host_pool(&d, NULL, 3, T0);
    assert_int_equal(p.room, 16);
    assert_int_equal(p.open_room, 16);

    host_state h = {0};
    h.key = "https://hooks.example";
    p = host_pool(&d, &h, 3, T0);
    assert_int_equal(p.room, 16);
    assert_int_equal(p.open_room, 16);
    h.in_flight = 5;
    p = host_pool(&d, &h, 3, T0);
    assert_int_equal(p.room, 11);
    assert_int_equal(p.open_room, 11);
    /* Spaced deliveries waiting for their slot keep connections from work-queue claims only. */
    h.booked = 3;
    p = host_pool(&d, &h, 3, T0);
    assert_int_equal(p.room, 11);
    assert_int_equal(p.open_room, 8);
    h.booked = 12;
    p = host_pool(&d, &h, 3, T0);
    assert_int_equal(p.room, 11);
    assert_int_equal(p.open_room, 0);
    /* Over the limit (it was lowered): nothing, never negative. */
    h.in_flight = 20;
    p = host_pool(&d, &h, 3, T0);
    assert_int_equal(p.room, 0);
    assert_int_equal(p.open_room, 0);
}

static void spaced_reserve_is_a_share_or_the_need(void **state)
{
    /* One spaced customer at 10/s on a host answering in 150 ms on average (need 1.5, weight
     * 2.5) beside three flooding work-queue customers on 16 connections: its equal share is 4,
     * its need 1.5 + 2 x 1.22 = 3.95, so 4, plus one: 5; its weighted share 16 x 2.5 / 5.5 = 7.3
     * does not bind. Kept: 5 less what it uses. */
    assert_int_equal(spaced_reserve(0, 1, 1.5, 2.5, 3, 16), 5);
    assert_int_equal(spaced_reserve(2, 1, 1.5, 2.5, 3, 16), 3);
    /* Unlucky with slow requests (5 out): still one free for its next slot, up to its weighted
     * share; beyond that, nothing. */
    assert_int_equal(spaced_reserve(5, 1, 1.5, 2.5, 3, 16), 1);
    assert_int_equal(spaced_reserve(7, 1, 1.5, 2.5, 3, 16), 1);
    assert_int_equal(spaced_reserve(8, 1, 1.5, 2.5, 3, 16), 0);
    assert_int_equal(spaced_reserve(9, 1, 1.5, 2.5, 3, 16), 0);
    /* Request time not known yet (or an idle customer): its equal share. */
    assert_int_equal(spaced_reserve(0, 1, 0, 1, 3, 16), 4);
    /* A need beyond the weighted share gets the weighted share: 100 concurrent requests wanted,
     * weight 2 beside two work-queue customers: 16 x 2 / 4 = 8. */
    assert_int_equal(spaced_reserve(0, 1, 100, 2, 2, 16), 8);
    /* 1,000 spaced customers beside one work-queue customer: all but the one connection every
     * work-queue customer keeps, less what they use. */
    assert_int_equal(spaced_reserve(4, 1000, 0, 1000, 1, 16), 11);
    assert_int_equal(spaced_reserve(0, 1, 0, 1, 1, 1), 0);
    /* No work-queue customer contends, or no spaced customer has work: nothing kept. */
    assert_int_equal(spaced_reserve(0, 1, 1.5, 2.5, 0, 16), 0);
    assert_int_equal(spaced_reserve(0, 0, 0, 0, 3, 16), 0);
    assert_int_equal(spaced_reserve(0, 1, -1, 2.5, 3, 16), 0);
    assert_int_equal(spaced_reserve(0, 1, 1.5, -1, 3, 16), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(paused_customer_not_eligible),
        cmocka_unit_test(waiting_customer_not_eligible),
        cmocka_unit_test(customer_without_pairs_not_eligible),
        cmocka_unit_test(batch_eligible_only_while_owed_items_of_this_tick),
        cmocka_unit_test(at_max_in_flight_not_eligible),
        cmocka_unit_test(half_open_breaker_with_probe_out_not_eligible),
        cmocka_unit_test(due_at_the_earliest_pair),
        cmocka_unit_test(spaced_due_at_its_gcra_slot_less_the_lookahead),
        cmocka_unit_test(open_breaker_pushes_due_to_its_end),
        cmocka_unit_test(retry_after_hold_pushes_due),
        cmocka_unit_test(at_throttle_cap_not_eligible),
        cmocka_unit_test(idle_pairs_not_eligible),
        cmocka_unit_test(batch_allowance_at_the_effective_rate),
        cmocka_unit_test(claim_limit_is_the_tightest_own_bound),
        cmocka_unit_test(first_tick_grants_the_rate),
        cmocka_unit_test(same_tick_again_grants_nothing),
        cmocka_unit_test(fractional_rates_carry_credit),
        cmocka_unit_test(long_run_total_matches_the_rate),
        cmocka_unit_test(gap_grants_at_most_one_ticks_worth),
        cmocka_unit_test(credit_stays_below_one),
        cmocka_unit_test(carrier_budget_per_round_and_in_flight),
        cmocka_unit_test(host_pool_is_what_is_free_and_what_is_not_booked),
        cmocka_unit_test(spaced_reserve_is_a_share_or_the_need),
    };
    return TL_RUN(tests, NULL, NULL);
}
