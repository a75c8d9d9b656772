/* test_breaker.c - the per-customer circuit breaker's pure transitions (src/dispatch/breaker.c):
 * breaker_after_attempt opens it after N consecutive failures and not before, a success resets
 * the count and closes an open or half-open breaker (reporting only real state changes), each
 * trip doubles the cooldown up to its maximum, a recovery starts the doubling over, and failures
 * while it is open change nothing; breaker_allows lets everything through a closed breaker,
 * nothing through an open one before its cooldown ends, then turns it half open and lets exactly
 * one probe through. */
#include "testlib.h"

#include "dispatch/internal.h"

#define SEC 1000000LL
#define T0  (1700000000LL * SEC)

#define FAILURES     3
#define COOLDOWN     (10 * SEC)
#define COOLDOWN_MAX (60 * SEC)

static bool note_failure(breaker *b, int64_t now)
{
    return breaker_after_attempt(b, true, FAILURES, COOLDOWN, COOLDOWN_MAX, now);
}

static bool note_success(breaker *b, int64_t now)
{
    return breaker_after_attempt(b, false, FAILURES, COOLDOWN, COOLDOWN_MAX, now);
}

/* Lets the cooldown end and the probe fail: the breaker trips again at `now`. */
static void probe_fails(breaker *b, int64_t now)
{
    bool half_open = false;
    assert_int_equal(breaker_allows(b, 5, now, &half_open), 1);
    assert_true(half_open);
    assert_int_equal(b->state, BREAKER_HALF_OPEN);
    assert_true(note_failure(b, now));
    assert_int_equal(b->state, BREAKER_OPEN);
}

static void opens_after_n_consecutive_failures(void **state)
{
    breaker b = {0};
    for (int i = 1; i < FAILURES; i++) {
        assert_false(note_failure(&b, T0 + i));
        assert_int_equal(b.state, BREAKER_CLOSED);
        assert_int_equal(b.failures, i);
        assert_int_equal(b.open_until, 0);
    }
    int64_t now = T0 + 100;
    assert_true(note_failure(&b, now));
    assert_int_equal(b.state, BREAKER_OPEN);
    assert_int_equal(b.trips, 1);
    assert_int_equal(b.open_until, now + COOLDOWN);

    /* A threshold of one opens on the first failure. */
    breaker one = {0};
    assert_true(breaker_after_attempt(&one, true, 1, COOLDOWN, COOLDOWN_MAX, T0));
    assert_int_equal(one.state, BREAKER_OPEN);
}

static void success_resets_the_consecutive_count(void **state)
{
    breaker b = {0};
    for (int round = 0; round < 5; round++) {
        for (int i = 1; i < FAILURES; i++)
            assert_false(note_failure(&b, T0));
        /* A success while closed is no state change, but the count starts over. */
        assert_false(note_success(&b, T0));
        assert_int_equal(b.failures, 0);
        assert_int_equal(b.state, BREAKER_CLOSED);
    }
}

static void success_closes_an_open_breaker(void **state)
{
    breaker b = {0};
    for (int i = 0; i < FAILURES; i++)
        note_failure(&b, T0);
    assert_int_equal(b.state, BREAKER_OPEN);
    /* A delivery that was in flight when it opened succeeds. */
    assert_true(note_success(&b, T0 + SEC));
    assert_int_equal(b.state, BREAKER_CLOSED);
    assert_int_equal(b.failures, 0);
    assert_int_equal(b.open_until, 0);
    assert_false(note_success(&b, T0 + 2 * SEC));
    assert_int_equal(b.state, BREAKER_CLOSED);
}

static void successful_probe_closes_a_half_open_breaker(void **state)
{
    breaker b = {0};
    for (int i = 0; i < FAILURES; i++)
        note_failure(&b, T0);
    bool half_open = false;
    assert_int_equal(breaker_allows(&b, 5, b.open_until, &half_open), 1);
    assert_int_equal(b.state, BREAKER_HALF_OPEN);
    assert_true(note_success(&b, b.open_until + SEC));
    assert_int_equal(b.state, BREAKER_CLOSED);
    assert_int_equal(b.failures, 0);
    assert_int_equal(b.open_until, 0);
    /* Closed means closed: everything goes through again, failures count from zero. */
    assert_int_equal(breaker_allows(&b, 5, T0, &half_open), 5);
    for (int i = 1; i < FAILURES; i++)
        assert_false(note_failure(&b, T0));
    assert_int_equal(b.state, BREAKER_CLOSED);
}

static void cooldown_doubles_per_trip_up_to_the_maximum(void **state)
{
    breaker b = {0};
    int64_t now = T0;
    for (int i = 0; i < FAILURES; i++)
        note_failure(&b, now);
    assert_int_equal(b.open_until - now, COOLDOWN);
    int64_t expect = COOLDOWN;
    for (int trip = 2; trip <= 8; trip++) {
        now = b.open_until + 1234;
        probe_fails(&b, now);
        expect = expect * 2 < COOLDOWN_MAX ? expect * 2 : COOLDOWN_MAX;
        assert_int_equal(b.trips, trip);
        assert_int_equal(b.open_until - now, expect);
    }
    /* 10 s doubling against a 60 s maximum: 10, 20, 40, then the maximum for good. */
    assert_int_equal(expect, COOLDOWN_MAX);

    /* A maximum below the first cooldown wins too. */
    breaker c = {0};
    assert_true(breaker_after_attempt(&c, true, 1, 30 * SEC, 5 * SEC, T0));
    assert_int_equal(c.open_until, T0 + 5 * SEC);
}

static void recovery_starts_the_cooldown_over(void **state)
{
    breaker b = {0};
    for (int i = 0; i < FAILURES; i++)
        note_failure(&b, T0);
    probe_fails(&b, b.open_until);
    probe_fails(&b, b.open_until);
    assert_int_equal(b.trips, 3);
    bool half_open;
    assert_int_equal(breaker_allows(&b, 1, b.open_until, &half_open), 1);
    assert_true(note_success(&b, b.open_until));
    /* The next trip is a first trip again. */
    int64_t now = T0 + 3600 * SEC;
    for (int i = 1; i < FAILURES; i++)
        assert_false(note_failure(&b, now));
    assert_true(note_failure(&b, now));
    assert_int_equal(b.trips, 1);
    assert_int_equal(b.open_until, now + COOLDOWN);
}

static void failure_while_open_changes_nothing(void **state)
{
    breaker b = {0};
    for (int i = 0; i < FAILURES; i++)
        note_failure(&b, T0);
    int64_t until = b.open_until;
    /* Deliveries in flight when it opened keep failing, also after the cooldown ended. */
    int64_t times[] = {T0 + 1, T0 + COOLDOWN / 2, until, until + COOLDOWN};
    for (size_t i = 0; i < PGP_ARRAY_LEN(times); i++) {
        assert_false(note_failure(&b, times[i]));
        assert_int_equal(b.state, BREAKER_OPEN);
        assert_int_equal(b.trips, 1);
        assert_int_equal(b.open_until, until);
    }
}

static void closed_breaker_allows_everything(void **state)
{
    breaker b = {0};
    bool half_open = true;
    assert_int_equal(breaker_allows(&b, 7, T0, &half_open), 7);
    assert_false(half_open);
    assert_int_equal(breaker_allows(&b, 1, T0, &half_open), 1);
    assert_int_equal(breaker_allows(&b, 0, T0, &half_open), 0);
    assert_int_equal(b.state, BREAKER_CLOSED);
}

static void open_breaker_allows_nothing_until_its_cooldown_ends(void **state)
{
    breaker b = {
        .state = BREAKER_OPEN, .failures = FAILURES, .trips = 1, .open_until = T0 + COOLDOWN};
    bool half_open = true;
    assert_int_equal(breaker_allows(&b, 7, T0, &half_open), 0);
    assert_false(half_open);
    assert_int_equal(b.state, BREAKER_OPEN);
    half_open = true;
    assert_int_equal(breaker_allows(&b, 7, b.open_until - 1, &half_open), 0);
    assert_false(half_open);
    assert_int_equal(b.state, BREAKER_OPEN);
    assert_int_equal(b.open_until, T0 + COOLDOWN);
}

static void cooldown_over_turns_half_open_and_lets_one_probe_through(void **state)
{
    static const int ns[] = {1, 2, 500};
    for (size_t i = 0; i < PGP_ARRAY_LEN(ns); i++) {
        breaker b = {
            .state = BREAKER_OPEN, .failures = FAILURES, .trips = 1, .open_until = T0 + COOLDOWN};
        bool half_open = false;
        assert_int_equal(breaker_allows(&b, ns[i], b.open_until, &half_open), 1);
        assert_true(half_open);
        assert_int_equal(b.state, BREAKER_HALF_OPEN);
        /* Asked again before the probe is out: still the one probe, no new transition. */
        half_open = true;
        assert_int_equal(breaker_allows(&b, ns[i], b.open_until + SEC, &half_open), 1);
        assert_false(half_open);
        /* The probe is out: nothing more. */
        b.probe_in_flight = true;
        assert_int_equal(breaker_allows(&b, ns[i], b.open_until + 2 * SEC, &half_open), 0);
        assert_false(half_open);
        assert_int_equal(b.state, BREAKER_HALF_OPEN);
    }
    /* Long after the cooldown, too. */
    breaker late = {.state = BREAKER_OPEN, .trips = 2, .open_until = T0};
    bool half_open = false;
    assert_int_equal(breaker_allows(&late, 3, T0 + 3600 * SEC, &half_open), 1);
    assert_true(half_open);
}

static void nothing_asked_nothing_allowed(void **state)
{
    bool half_open;
    breaker closed = {0};
    assert_int_equal(breaker_allows(&closed, 0, T0, &half_open), 0);
    breaker half = {.state = BREAKER_HALF_OPEN, .trips = 1, .open_until = T0 - SEC};
    assert_int_equal(breaker_allows(&half, 0, T0, &half_open), 0);
    breaker open = {.state = BREAKER_OPEN, .trips = 1, .open_until = T0 + SEC};
    assert_int_equal(breaker_allows(&open, 0, T0, &half_open), 0);
    breaker over = {.state = BREAKER_OPEN, .trips = 1, .open_until = T0 - SEC};
    assert_int_equal(breaker_allows(&over, 0, T0, &half_open), 0);
}

static void state_names(void **state)
{
    /* Stored in pgpace.breaker and read back by customer_apply. */
    assert_string_equal(breaker_state_name(BREAKER_CLOSED), "closed");
    assert_string_equal(breaker_state_name(BREAKER_OPEN), "open");
    assert_string_equal(breaker_state_name(BREAKER_HALF_OPEN), "half_open");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(opens_after_n_consecutive_failures),
        cmocka_unit_test(success_resets_the_consecutive_count),
        cmocka_unit_test(success_closes_an_open_breaker),
        cmocka_unit_test(successful_probe_closes_a_half_open_breaker),
        cmocka_unit_test(cooldown_doubles_per_trip_up_to_the_maximum),
        cmocka_unit_test(recovery_starts_the_cooldown_over),
        cmocka_unit_test(failure_while_open_changes_nothing),
        cmocka_unit_test(closed_breaker_allows_everything),
        cmocka_unit_test(open_breaker_allows_nothing_until_its_cooldown_ends),
        cmocka_unit_test(cooldown_over_turns_half_open_and_lets_one_probe_through),
        cmocka_unit_test(nothing_asked_nothing_allowed),
        cmocka_unit_test(state_names),
    };
    return TL_RUN(tests, NULL, NULL);
}
