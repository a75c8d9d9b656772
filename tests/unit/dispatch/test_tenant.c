/* test_tenant.c - a customer's limit shared by its endpoints (src/dispatch/tenant.c): what a
 * round may ask for (slots within its horizon, less what claims in flight and the round's other
 * endpoints asked), the slots handed out (never before the cell allows, each a period after the
 * last), the bound on actual sends (a late send moves the next), and a new leader's resume from
 * the stored cell and the latest send. */
#include "testlib.h"

#include "dispatch/internal.h"
#include "gcra.h"

#define S 1000000LL /* a second in microseconds */

static tenant_gate gate(double rate, int burst)
{
    tenant_gate g = {
        .id = 1, .rate = rate, .burst = burst, .tat = GCRA_TAT_NONE, .sent_tat = GCRA_TAT_NONE};
    g.period_us = gcra_period_us(rate);
    return g;
}

static void idle_gate_allows_its_burst(void **state)
{
    (void)state;
    int64_t now = 100 * S;
    tenant_gate g = gate(60, 1);
    assert_int_equal(tenant_gate_allow(&g, now, now + 70000, 10), 1);
    g = gate(60, 3);
    assert_int_equal(tenant_gate_allow(&g, now, now + 70000, 10), 3);
    assert_int_equal(tenant_gate_allow(&g, now, now + 70000, 2), 2);
    assert_int_equal(tenant_gate_allow(&g, now, now + 70000, 0), 0);
}

static void asked_slots_are_kept_from_the_next(void **state)
{
    (void)state;
    int64_t now = 100 * S;
    tenant_gate g = gate(60, 1);
    /* One endpoint of the round asked for the one slot: the next endpoint gets none, nor does a
     * round built while that claim is out. */
    g.considering = 1;
    assert_int_equal(tenant_gate_allow(&g, now, now + 70000, 5), 0);
    g.considering = 0;
    g.reserved = 1;
    assert_int_equal(tenant_gate_allow(&g, now, now + 70000, 5), 0);
    /* Its scheduler time: one period after the committed slot. */
    assert_true(tenant_gate_eligible(&g, now) >= now + S - 1);
    /* The claim returns: its item gets the slot, the reservation ends; the next slot is a
     * period later, within the horizon of a round a second later. */
    assert_int_equal(tenant_gate_slot(&g, now), now);
    g.reserved = 0;
    assert_int_equal(tenant_gate_allow(&g, now + 500000, now + 570000, 5), 0);
    assert_int_equal(tenant_gate_allow(&g, now + S - 50000, now + S + 20000, 5), 1);
}

static void slots_are_a_period_apart_and_never_early(void **state)
{
    (void)state;
    int64_t now = 100 * S;
    tenant_gate g = gate(60, 1);
    int64_t a = tenant_gate_slot(&g, now);
    int64_t b = tenant_gate_slot(&g, now);         /* another endpoint, same round */
    int64_t c = tenant_gate_slot(&g, now + 5 * S); /* its own limit sends it later */
    int64_t e = tenant_gate_slot(&g, now);
    assert_int_equal(a, now);
    assert_int_equal(b, now + S);
    assert_int_equal(c, now + 5 * S);
    assert_int_equal(e, now + 6 * S);
    /* Burst 2: two at once after idling, then a period apart. */
    g = gate(60, 2);
    assert_int_equal(tenant_gate_slot(&g, now), now);
    assert_int_equal(tenant_gate_slot(&g, now), now);
    assert_int_equal(tenant_gate_slot(&g, now), now + S);
}

static void a_late_send_moves_the_next(void **state)
{
    (void)state;
    int64_t now = 100 * S;
    tenant_gate g = gate(60, 1);
    assert_int_equal(tenant_gate_earliest(&g), INT64_MIN);
    tenant_gate_slot(&g, now);
    tenant_gate_slot(&g, now);          /* planned at now + 1 s */
    tenant_gate_sent(&g, now + 300000); /* the first went 0.3 s late */
    /* The second may not go at its planned slot: a period after the first actually went. */
    assert_int_equal(tenant_gate_earliest(&g), now + 1300000);
    /* And the claims' cell follows: the next slot is a period after that. */
    assert_int_equal(tenant_gate_slot(&g, now), now + 2 * S);
}

static void resume_takes_the_later_of_the_cell_and_the_last_send(void **state)
{
    (void)state;
    int64_t now = 100 * S;
    tenant_gate g = gate(60, 1);
    tenant_gate_resume(&g, now + 2 * S, now);
    assert_int_equal(g.tat, now + 2 * S);
    assert_int_equal(tenant_gate_earliest(&g), now + 2 * S);
    g = gate(60, 1);
    /* The stored cell is older than a send found in the attempt log. */
    tenant_gate_resume(&g, now - 10 * S, now);
    assert_int_equal(tenant_gate_earliest(&g), now + S);
    /* Burst 3: as if the last send had used the whole burst, the next a period after it. */
    g = gate(60, 3);
    tenant_gate_resume(&g, GCRA_TAT_NONE, now);
    assert_int_equal(tenant_gate_earliest(&g), now + S);
    /* Nothing known: nothing changes. */
    g = gate(60, 1);
    tenant_gate_resume(&g, GCRA_TAT_NONE, 0);
    assert_int_equal(g.tat, GCRA_TAT_NONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(idle_gate_allows_its_burst),
        cmocka_unit_test(asked_slots_are_kept_from_the_next),
        cmocka_unit_test(slots_are_a_period_apart_and_never_early),
        cmocka_unit_test(a_late_send_moves_the_next),
        cmocka_unit_test(resume_takes_the_later_of_the_cell_and_the_last_send),
    };
    return TL_RUN(tests, NULL, NULL);
}
