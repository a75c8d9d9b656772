/* test_ratelimit_header.c - every RateLimit / X-RateLimit-* form, the epoch rule, and the
 * answers that must be ignored (malformed, contradictory, absurd). */
#include "testlib.h"

#include "ratelimit_header.h"

#include <math.h>
#include <string.h>

/* 2025-06-01 13:37:11 UTC: not a midnight, so that nothing can hide behind day alignment. */
#define NOW 1748785031.0
#define MAX 3600.0

static const char *why;

static rl_status parse(const rl_raw *raw, double now, double max, rl_announce *a)
{
    why = "untouched";
    rl_status st = rl_parse(raw, now, max, a, &why);
    if (st == RL_IGNORED)
        assert_non_null(why);
    else
        assert_null(why);
    return st;
}

/* Parses and asserts RL_IGNORED with the given reason. */
static void ignored(const rl_raw *raw, const char *reason)
{
    rl_announce a;
    assert_int_equal(parse(raw, NOW, MAX, &a), RL_IGNORED);
    assert_string_equal(why, reason);
    assert_false(a.have_limit || a.have_remaining || a.have_reset);
}

static void none_without_fields(void **state)
{
    rl_raw raw = {0};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_NONE);
    assert_int_equal(rl_parse(NULL, NOW, MAX, &a, NULL), RL_NONE);
    /* truncated alone (no field) is still none */
    raw.truncated = true;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_NONE);
}

static void ietf_current_single_policy(void **state)
{
    rl_raw raw = {.policy = "\"default\";q=100;w=60", .ratelimit = "\"default\";r=50;t=30"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.have_limit && a.limit == 100 && a.window_s == 60);
    assert_true(a.have_remaining && a.remaining == 50);
    assert_true(a.have_reset && a.reset_s == 30 && !a.reset_clamped);
    assert_int_equal(a.forms, RL_FORM_IETF);
    assert_int_equal(a.n_windows, 1);
    double pm, hold;
    assert_true(rl_rate_per_minute(&a, &pm));
    assert_true(pm == 100);
    assert_false(rl_hold_s(&a, &hold));
    /* Tokens as names, parameters in any order, spaces after ';' and around ','. */
    rl_raw tok = {.policy = "default;w=60; q=100", .ratelimit = "default;t=30;r=0"};
    assert_int_equal(parse(&tok, NOW, MAX, &a), RL_OK);
    assert_true(a.limit == 100 && a.window_s == 60 && a.remaining == 0 && a.reset_s == 30);
    assert_true(rl_hold_s(&a, &hold));
    assert_true(hold == 30);
    assert_false(rl_rate_per_minute(
        &(rl_announce){.have_remaining = true, .have_reset = true, .reset_s = 30}, &pm));
    /* A string name matches the token of the same content, escapes undone. */
    rl_raw esc = {.policy = "\"a\\\"b\";q=10;w=1", .ratelimit = "\"a\\\"b\";r=11"};
    ignored(&esc, "contradictory"); /* r > q of that same policy: it was matched */
}

static void ietf_current_several_policies(void **state)
{
    /* The lowest rate is the limit; the exhausted state with the latest reset is the state. */
    rl_raw raw = {.policy = "\"burst\";q=100;w=60, \"daily\";q=5000;w=86400, "
                            "\"bytes\";q=1;w=1;qu=\"content-bytes\"",
                  .ratelimit = "\"burst\";r=0;t=20, \"daily\";r=0;t=500, \"bytes\";r=0;t=3000"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.limit == 5000 && a.window_s == 86400); /* 3.5/min < 100/min */
    assert_int_equal(a.n_windows, 2);
    assert_true(a.windows[0].limit == 5000 && a.windows[1].limit == 100);
    assert_true(a.remaining == 0 && a.reset_s == 500); /* "bytes" does not apply */
    /* Not exhausted: the fewest remaining. */
    raw.ratelimit = "\"burst\";r=7;t=20, \"daily\";r=900;t=500";
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.remaining == 7 && a.reset_s == 20);
    /* Split over two lines joined by the sender: the same list. */
    raw.policy = "\"burst\";q=100;w=60, \"daily\";q=5000;w=86400";
    raw.ratelimit = "\"daily\";r=900;t=500, \"burst\";r=0;t=20";
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.remaining == 0 && a.reset_s == 20);
    /* Remaining checked against its own policy, not the tightest one: 900 <= 5000. */
    raw.policy = "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400";
    raw.ratelimit = "\"daily\";r=900;t=500";
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.limit == 1000 && a.remaining == 900);
    /* A partition key and unknown parameters are ignored; a policy without w has no rate. */
    rl_raw pk = {.policy = "\"p\";q=10;pk=:cHJvamVjdDEyMw==:;zz=?1"};
    assert_int_equal(parse(&pk, NOW, MAX, &a), RL_OK);
    assert_true(a.have_limit && a.limit == 10 && a.window_s == 0 && a.n_windows == 0);
    double pm;
    assert_false(rl_rate_per_minute(&a, &pm));
    /* Only RateLimit (no policy): remaining and reset give a rate of what is left. */
    rl_raw only = {.ratelimit = "\"x\";r=30;t=60"};
    assert_int_equal(parse(&only, NOW, MAX, &a), RL_OK);
    assert_false(a.have_limit);
    assert_true(rl_rate_per_minute(&a, &pm));
    assert_true(pm == 30);
    /* Every policy in another unit: nothing about requests, as if absent. */
    rl_raw unit = {.policy = "\"c\";q=5;qu=\"concurrent-requests\"", .ratelimit = "\"c\";r=0;t=50"};
    assert_int_equal(parse(&unit, NOW, MAX, &a), RL_NONE);
}

static void ietf_draft07_dictionary(void **state)
{
    rl_raw raw = {.ratelimit = "limit=100, remaining=50, reset=30",
                  .policy = "100;w=60, 10000;w=86400"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_int_equal(a.forms, RL_FORM_IETF07);
    assert_true(a.limit == 100 && a.window_s == 60 && a.remaining == 50 && a.reset_s == 30);
    assert_int_equal(a.n_windows, 2);
    /* Without a policy the window is unknown: the rate is what is left until the reset. */
    raw.policy = NULL;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.window_s == 0);
    double pm;
    assert_true(rl_rate_per_minute(&a, &pm));
    assert_true(pm == 100); /* 50 in 30 s */
    raw.ratelimit = "limit=100, remaining=101, reset=30";
    ignored(&raw, "contradictory");
    raw.ratelimit = "limit=100, remaining=5.5, reset=30";
    ignored(&raw, "malformed");
}

static void ietf_early_drafts(void **state)
{
    rl_raw raw = {.limit = "100", .remaining = "50", .reset = "30"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_int_equal(a.forms, RL_FORM_IETF_EARLY);
    assert_true(a.limit == 100 && a.window_s == 0 && a.remaining == 50 && a.reset_s == 30);
    raw.policy = "100;w=60";
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.window_s == 60);
    /* Drafts up to 04: the policies in RateLimit-Limit itself. */
    rl_raw old = {.limit = "10, 10;w=1, 50;w=60", .remaining = "3", .reset = "1"};
    assert_int_equal(parse(&old, NOW, MAX, &a), RL_OK);
    assert_true(a.limit == 10 && a.window_s == 1 && a.n_windows == 2);
    /* The policy alone. */
    rl_raw pol = {.policy = "50;w=60, 10;w=1"};
    assert_int_equal(parse(&pol, NOW, MAX, &a), RL_OK);
    assert_true(a.limit == 50 && a.window_s == 60);
    rl_raw two = {.limit = "100, 200"};
    ignored(&two, "contradictory");
}

static void x_ratelimit_seconds_and_epoch(void **state)
{
    rl_raw raw = {.x_limit = "5000", .x_remaining = "4999", .x_reset = "30"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_int_equal(a.forms, RL_FORM_X);
    assert_true(a.limit == 5000 && a.remaining == 4999 && a.reset_s == 30);
    /* Epoch seconds (GitHub), with decimals (Discord). */
    raw.x_reset = "1748785091";
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.reset_s == 60);
    raw.x_reset = "1748785031.5";
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.reset_s == 0.5);
    /* Reset-After alone, and beside an agreeing Reset. */
    rl_raw after = {.x_remaining = "0", .x_reset_after = "64.57"};
    assert_int_equal(parse(&after, NOW, MAX, &a), RL_OK);
    assert_true(fabs(a.reset_s - 64.57) < 1e-9);
    double hold;
    assert_true(rl_hold_s(&a, &hold));
    assert_true(fabs(hold - 64.57) < 1e-9);
    after.x_reset = "1748785096";
    assert_int_equal(parse(&after, NOW, MAX, &a), RL_OK);
    assert_true(fabs(a.reset_s - 64.57) < 1e-9); /* the relative one wins */
    after.x_reset = "1748785200";
    ignored(&after, "contradictory");
    /* Just below the epoch threshold: seconds (and clamped). */
    rl_raw big = {.x_remaining = "0", .x_reset = "999999999"};
    assert_int_equal(parse(&big, NOW, MAX, &a), RL_OK);
    assert_true(a.reset_s == MAX && a.reset_clamped);
}

static void epoch_within_a_day_either_way(void **state)
{
    rl_raw raw = {.x_remaining = "0"};
    rl_announce a;
    char v[32];
    /* The day counts from now (13:37:11), not from a midnight. */
    snprintf(v, sizeof v, "%.0f", NOW + 86400);
    raw.x_reset = v;
    assert_int_equal(parse(&raw, NOW, 1e9, &a), RL_OK);
    assert_true(a.reset_s == 86400 && !a.reset_clamped);
    snprintf(v, sizeof v, "%.0f", NOW + 86401);
    ignored(&raw, "absurd");
    snprintf(v, sizeof v, "%.0f", NOW - 86400);
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.reset_s == 0); /* the window has reset */
    snprintf(v, sizeof v, "%.0f", NOW - 86401);
    ignored(&raw, "absurd");
    /* The next UTC midnight (10 h 22 min 49 s away) is just another instant. */
    raw.x_reset = "1748822400";
    assert_int_equal(parse(&raw, NOW, 1e9, &a), RL_OK);
    assert_true(a.reset_s == 1748822400.0 - NOW);
    /* The same rule for the IETF forms' resets. */
    rl_raw ietf = {.ratelimit = "\"d\";r=0;t=1748785061"};
    assert_int_equal(parse(&ietf, NOW, MAX, &a), RL_OK);
    assert_true(a.reset_s == 30);
}

static void clock_steps(void **state)
{
    /* An answer said "reset at E = now + 30". Our clock then steps back 100 s: the same value
     * now reads 130 s away, still within a day, so it holds 130 s (bounded by max). */
    rl_raw raw = {.x_remaining = "0", .x_reset = "1748785061"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW - 100, MAX, &a), RL_OK);
    assert_true(a.reset_s == 130);
    assert_int_equal(parse(&raw, NOW - 100, 60, &a), RL_OK);
    assert_true(a.reset_s == 60 && a.reset_clamped);
    /* Stepped forward past E: the window has reset, no hold. */
    assert_int_equal(parse(&raw, NOW + 31, MAX, &a), RL_OK);
    assert_true(a.reset_s == 0);
    double hold;
    assert_false(rl_hold_s(&a, &hold));
    /* Stepped back more than a day (or the receiver's clock is that far off): not trusted. */
    assert_int_equal(parse(&raw, NOW - 86400, MAX, &a), RL_IGNORED);
    assert_string_equal(why, "absurd");
    /* A clock that is not a number never makes an epoch value usable. */
    assert_int_equal(parse(&raw, NAN, MAX, &a), RL_IGNORED);
    /* Relative values do not depend on the clock at all. */
    rl_raw rel = {.x_remaining = "0", .x_reset = "30"};
    assert_int_equal(parse(&rel, -1e18, MAX, &a), RL_OK);
    assert_true(a.reset_s == 30);
}

static void reset_clamped_to_bound(void **state)
{
    rl_raw raw = {.policy = "\"day\";q=50000;w=86400", .ratelimit = "\"day\";r=0;t=72000"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_true(a.reset_s == MAX && a.reset_clamped);
    double hold, pm;
    assert_true(rl_hold_s(&a, &hold));
    assert_true(hold == MAX);
    /* A clamped reset gives no remaining/reset rate (it would be too fast). */
    rl_raw left = {.ratelimit = "\"day\";r=10;t=72000"};
    assert_int_equal(parse(&left, NOW, MAX, &a), RL_OK);
    assert_false(rl_rate_per_minute(&a, &pm));
    /* A negative or NaN bound holds for nothing. */
    assert_int_equal(parse(&raw, NOW, -5, &a), RL_OK);
    assert_true(a.reset_s == 0 && a.reset_clamped);
    assert_false(rl_hold_s(&a, &hold));
    assert_int_equal(parse(&raw, NOW, NAN, &a), RL_OK);
    assert_true(a.reset_s == 0);
}

static void forms_merged_or_contradictory(void **state)
{
    rl_raw raw = {.policy = "\"d\";q=100;w=60",
                  .x_limit = "100",
                  .x_remaining = "40",
                  .x_reset = "1748785061"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_int_equal(a.forms, RL_FORM_IETF | RL_FORM_X);
    assert_true(a.window_s == 60 && a.remaining == 40 && a.reset_s == 30);
    raw.x_limit = "120";
    ignored(&raw, "contradictory");
    /* Early drafts' fields and X- with the same values: one answer, proxies do this. */
    rl_raw both = {.limit = "10",
                   .remaining = "0",
                   .reset = "5",
                   .x_limit = "10",
                   .x_remaining = "0",
                   .x_reset = "5"};
    assert_int_equal(parse(&both, NOW, MAX, &a), RL_OK);
    both.x_reset = "9";
    ignored(&both, "contradictory");
    both.x_reset = "6"; /* within a second: the same reset, rounded differently */
    assert_int_equal(parse(&both, NOW, MAX, &a), RL_OK);
    assert_true(a.reset_s == 5);
    both.x_remaining = "1";
    ignored(&both, "contradictory");
    /* Repeated lines joined: equal values are one value, different ones contradict. */
    rl_raw rep = {.x_remaining = "7, 7"};
    assert_int_equal(parse(&rep, NOW, MAX, &a), RL_OK);
    assert_true(a.remaining == 7);
    rep.x_remaining = "7, 8";
    ignored(&rep, "contradictory");
    rl_raw over = {.x_limit = "10", .x_remaining = "11"};
    ignored(&over, "contradictory");
}

static void malformed_values(void **state)
{
    static const char *const bad[] = {
        "",       " ",  "abc",   "5x",  "1e3", "+5", "0x10", "5,", ",5", "5,,5", "1234567890123456",
        "1.2345", "1.", "\"5\"", "(5)", "5;",  "?2", "5 5",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rl_raw raw = {.x_remaining = bad[i]};
        print_message("x_remaining '%s'\n", bad[i]);
        ignored(&raw, "malformed");
    }
    static const char *const bad_policy[] = {
        "\"d\";w=60",                /* q is required */
        "\"d\";q=1.5;w=60",          /* q is an integer */
        "\"d;q=1",                   /* unterminated string */
        "\"d\";q=1;w=6.5",           /* w is an integer */
        "\"d\";q=1, 5;w=1",          /* mixed forms */
        "?1",                        /* neither */
        "\"d\";q=1;qu=5",            /* a unit is a string */
        "\"\\x\";q=1",               /* a bad escape */
        "\"d\";Q=1",                 /* keys are lowercase */
        "\"d\";q=1;a;b;c;d;e;f;g;h", /* more parameters than kept */
    };
    for (size_t i = 0; i < sizeof bad_policy / sizeof bad_policy[0]; i++) {
        rl_raw raw = {.policy = bad_policy[i]};
        print_message("policy '%s'\n", bad_policy[i]);
        ignored(&raw, "malformed");
    }
    rl_raw no_r = {.ratelimit = "\"d\";t=5"};
    ignored(&no_r, "malformed");
    rl_raw seventeen = {.policy = "a;q=1,b;q=1,c;q=1,d;q=1,e;q=1,f;q=1,g;q=1,h;q=1,i;q=1,"
                                  "j;q=1,k;q=1,l;q=1,m;q=1,n;q=1,o;q=1,p;q=1,q;q=1"};
    ignored(&seventeen, "malformed");
    rl_raw trunc = {.x_remaining = "5", .truncated = true};
    ignored(&trunc, "malformed");
    /* A good field does not save a bad one beside it. */
    rl_raw mixed = {.x_limit = "100", .x_remaining = "50", .x_reset = "soon"};
    ignored(&mixed, "malformed");
}

static void absurd_values(void **state)
{
    rl_raw neg = {.x_remaining = "-1"};
    ignored(&neg, "absurd");
    rl_raw neg_reset = {.x_reset = "-5"};
    ignored(&neg_reset, "absurd");
    rl_raw zero_limit = {.x_limit = "0"};
    ignored(&zero_limit, "absurd");
    rl_raw w0 = {.policy = "\"d\";q=10;w=0"};
    ignored(&w0, "absurd");
    rl_raw wlong = {.policy = "\"d\";q=10;w=31622401"};
    ignored(&wlong, "absurd");
    rl_raw q0 = {.policy = "\"d\";q=0;w=1"};
    ignored(&q0, "absurd");
    rl_raw wneg = {.policy = "10;w=-1"};
    ignored(&wneg, "absurd");
    /* The longest window allowed is fine. */
    rl_raw wmax = {.policy = "\"y\";q=10;w=31622400"};
    rl_announce a;
    assert_int_equal(parse(&wmax, NOW, MAX, &a), RL_OK);
}

static void many_windows_keep_the_tightest(void **state)
{
    /* Ten policies (rates 1..10 per second, listed loosest first): the 8 tightest are kept. */
    rl_raw raw = {.policy = "a;q=10;w=1,b;q=9;w=1,c;q=8;w=1,d;q=7;w=1,e;q=6;w=1,f;q=5;w=1,"
                            "g;q=4;w=1,h;q=3;w=1,i;q=2;w=1,j;q=1;w=1"};
    rl_announce a;
    assert_int_equal(parse(&raw, NOW, MAX, &a), RL_OK);
    assert_int_equal(a.n_windows, RL_WINDOWS_MAX);
    for (size_t i = 0; i < a.n_windows; i++)
        assert_true(a.windows[i].limit == (double)(i + 1));
    assert_true(a.limit == 1 && a.window_s == 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(none_without_fields),
        cmocka_unit_test(ietf_current_single_policy),
        cmocka_unit_test(ietf_current_several_policies),
        cmocka_unit_test(ietf_draft07_dictionary),
        cmocka_unit_test(ietf_early_drafts),
        cmocka_unit_test(x_ratelimit_seconds_and_epoch),
        cmocka_unit_test(epoch_within_a_day_either_way),
        cmocka_unit_test(clock_steps),
        cmocka_unit_test(reset_clamped_to_bound),
        cmocka_unit_test(forms_merged_or_contradictory),
        cmocka_unit_test(malformed_values),
        cmocka_unit_test(absurd_values),
        cmocka_unit_test(many_windows_keep_the_tightest),
    };
    return TL_RUN(tests, NULL, NULL);
}
