/* test_outcome.c - what a delivery attempt's result means (src/dispatch/outcome.c), without a
 * database or a receiver: the outcome of every HTTP status class and of every sender error
 * class, which failures count against the breaker (receiver_failed), throttles (429 always, 503
 * with a Retry-After: attempt given back, never dead, not the receiver's failure, the customer
 * slowed) and a 503 without Retry-After (a failure that slows the customer), Retry-After on 429
 * and 503 only (delta seconds, HTTP dates, the clamp, 0 = ignored, garbage counting as none), the
 * backoff delay's bounds computed from the rule min(cap, base * 2^(attempt - 1)) * [0.5, 1.5), the
 * last attempt turning a retry into a dead letter (max_attempts below 1 counting as exhausted, as
 * in SQL), the outcomes' SQL spellings, and text_excerpt's repair of a receiver's bytes into valid
 * UTF-8 text without NUL. */
#include "testlib.h"

#include "dispatch/internal.h"

#include <stdlib.h>
#include <string.h>

#define BASE_MS 1000
#define CAP_MS  60000
/* Near the top of the jitter's range [0, 1). */
#define JITTER_TOP 0.999

static const outcome_policy retry_4xx = {.dead_letter_on_4xx = false,
                                         .retry_after_max_s = 3600,
                                         .retry_base_us = BASE_MS * 1000LL,
                                         .retry_cap_us = CAP_MS * 1000LL};
static const outcome_policy dead_4xx = {.dead_letter_on_4xx = true,
                                        .retry_after_max_s = 3600,
                                        .retry_base_us = BASE_MS * 1000LL,
                                        .retry_cap_us = CAP_MS * 1000LL};

/* "Sun, 06 Nov 1994 08:49:37 GMT" (RFC 9110's example) in epoch seconds. */
#define EXAMPLE_DATE   "Sun, 06 Nov 1994 08:49:37 GMT"
#define EXAMPLE_DATE_S 784111777LL

static http_result response(long status)
{
    return (http_result){.status = status, .error = "", .excerpt = "", .retry_after = NULL};
}

static http_result response_retry_after(long status, const char *retry_after)
{
    http_result r = response(status);
    r.retry_after = retry_after;
    return r;
}

static http_result network(const char *cls, const char *error)
{
    return (http_result){.status = 0, .error_class = cls, .error = error, .excerpt = ""};
}

static outcome_decision classify(const http_result *r, int attempt, int max_attempts,
                                 const outcome_policy *p, double jitter)
{
    outcome_decision d;
    memset(&d, 0x5a, sizeof d); /* nothing may be left over from before the call */
    outcome_classify(r, attempt, max_attempts, p, EXAMPLE_DATE_S, jitter, &d);
    return d;
}

/* min(cap, base * 2^(attempt - 1)) in milliseconds: the delay before jitter. */
static int64_t raw_backoff_ms(int attempt)
{
    int64_t d = BASE_MS;
    for (int i = 1; i < attempt && d < CAP_MS; i++)
        d *= 2;
    return d < CAP_MS ? d : CAP_MS;
}

/* A retry whose delay is the backoff's, for any jitter: within [0.5, 1.5) of the raw delay. */
static void assert_backoff_range(const outcome_decision *d, int attempt)
{
    int64_t raw = raw_backoff_ms(attempt);
    assert_int_equal(d->outcome, OUTCOME_RETRY);
    assert_true(2 * d->delay_ms >= raw);
    assert_true(2 * d->delay_ms < 3 * raw);
}

static void assert_retried_http(const outcome_decision *d, long status)
{
    char want[32];
    snprintf(want, sizeof want, "%ld", status);
    assert_int_equal(d->outcome, OUTCOME_RETRY);
    assert_non_null(d->error_class);
    assert_string_equal(d->error_class, "http");
    assert_non_null(strstr(d->error, want));
    assert_true(d->receiver_failed);
    assert_false(d->pause_customer);
}

static void success_2xx(void **state)
{
    static const long statuses[] = {200, 201, 202, 204, 299};
    for (size_t i = 0; i < PGP_ARRAY_LEN(statuses); i++) {
        /* A Retry-After and the last attempt change nothing about a success. */
        http_result r = response_retry_after(statuses[i], "120");
        outcome_decision d = classify(&r, 5, 5, &dead_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_SUCCESS);
        assert_null(d.error_class);
        assert_string_equal(d.error, "");
        assert_int_equal(d.delay_ms, 0);
        assert_false(d.receiver_failed);
        assert_false(d.pause_customer);
    }
}

static void informational_and_unexpected_statuses_retried(void **state)
{
    static const long statuses[] = {100, 101, 199, 0, 600, 999};
    for (size_t i = 0; i < PGP_ARRAY_LEN(statuses); i++) {
        http_result r = response(statuses[i]);
        outcome_decision d = classify(&r, 1, 10, &dead_4xx, 0);
        assert_retried_http(&d, statuses[i]);
        assert_backoff_range(&d, 1);
    }
}

static void redirects_dead(void **state)
{
    static const long statuses[] = {300, 301, 302, 303, 307, 308, 399};
    for (size_t i = 0; i < PGP_ARRAY_LEN(statuses); i++) {
        http_result r = response(statuses[i]);
        /* Dead on the first of many attempts, whatever the 4xx policy. */
        for (int p = 0; p < 2; p++) {
            outcome_decision d = classify(&r, 1, 10, p ? &dead_4xx : &retry_4xx, 0);
            assert_int_equal(d.outcome, OUTCOME_DEAD);
            assert_null(d.error_class);
            assert_non_null(strstr(d.error, "redirect not followed"));
            assert_int_equal(d.delay_ms, 0);
            assert_false(d.pause_customer);
        }
    }
}

static const long client_errors[] = {400, 401, 403, 404, 409, 422, 451, 499};

static void client_errors_retried_unless_dead_letter_on_4xx(void **state)
{
    for (size_t i = 0; i < PGP_ARRAY_LEN(client_errors); i++) {
        http_result r = response(client_errors[i]);
        outcome_decision d = classify(&r, 2, 10, &retry_4xx, 0.3);
        assert_retried_http(&d, client_errors[i]);
        assert_backoff_range(&d, 2);
    }
}

static void client_errors_dead_with_dead_letter_on_4xx(void **state)
{
    for (size_t i = 0; i < PGP_ARRAY_LEN(client_errors); i++) {
        http_result r = response(client_errors[i]);
        outcome_decision d = classify(&r, 1, 10, &dead_4xx, 0);
        char want[32];
        snprintf(want, sizeof want, "%ld", client_errors[i]);
        assert_int_equal(d.outcome, OUTCOME_DEAD);
        assert_non_null(d.error_class);
        assert_string_equal(d.error_class, "http");
        assert_non_null(strstr(d.error, want));
        assert_int_equal(d.delay_ms, 0);
        assert_false(d.pause_customer);
    }
}

static void timeout_and_too_early_always_retried(void **state)
{
    static const long statuses[] = {408, 425};
    for (size_t i = 0; i < PGP_ARRAY_LEN(statuses); i++) {
        http_result r = response(statuses[i]);
        for (int p = 0; p < 2; p++) {
            outcome_decision d = classify(&r, 3, 10, p ? &dead_4xx : &retry_4xx, 0.5);
            assert_retried_http(&d, statuses[i]);
            assert_backoff_range(&d, 3);
        }
    }
}

static void assert_throttled(const outcome_decision *d, int64_t delay_ms, int64_t retry_after_ms)
{
    assert_int_equal(d->outcome, OUTCOME_THROTTLED);
    assert_true(d->slow_customer);
    assert_false(d->receiver_failed);
    assert_false(d->pause_customer);
    assert_int_equal(d->delay_ms, delay_ms);
    assert_int_equal(d->retry_after_ms, retry_after_ms);
    assert_string_equal(d->error_class, "http");
}

/* 429 is the receiver saying "later": a throttle on any attempt (the last one too: it gives
 * its attempt back), under either 4xx policy, due again at once without a Retry-After. */
static void too_many_requests_is_a_throttle(void **state)
{
    http_result r = response(429);
    for (int p = 0; p < 2; p++)
        for (int attempt = 1; attempt <= 12; attempt += 11) {
            outcome_decision d = classify(&r, attempt, 12, p ? &dead_4xx : &retry_4xx, 0.5);
            assert_throttled(&d, 0, -1);
        }
    r = response_retry_after(429, "3");
    outcome_decision d = classify(&r, 5, 5, &retry_4xx, 0.5);
    assert_throttled(&d, 3000, 3000);
    /* retry_after_max_s = 0: Retry-After is ignored. */
    outcome_policy none = retry_4xx;
    none.retry_after_max_s = 0;
    d = classify(&r, 1, 5, &none, 0.5);
    assert_throttled(&d, 0, -1);
}

/* A 503 with a Retry-After is a throttle; without one it is a failure like any 5xx (a receiver
 * that is down answers 503 forever), which still slows the customer. */
static void unavailable_is_a_throttle_only_with_retry_after(void **state)
{
    http_result r = response_retry_after(503, "2");
    outcome_decision d = classify(&r, 10, 10, &retry_4xx, 0.5);
    assert_throttled(&d, 2000, 2000);
    r = response(503);
    d = classify(&r, 1, 10, &retry_4xx, 0);
    assert_int_equal(d.outcome, OUTCOME_RETRY);
    assert_true(d.slow_customer);
    assert_true(d.receiver_failed);
    assert_int_equal(d.retry_after_ms, -1);
    assert_int_equal(d.delay_ms, raw_backoff_ms(1) / 2);
    d = classify(&r, 10, 10, &retry_4xx, 0);
    assert_int_equal(d.outcome, OUTCOME_DEAD);
    assert_true(d.slow_customer);
    /* Other 5xx do not slow the customer. */
    r = response(500);
    d = classify(&r, 1, 10, &retry_4xx, 0);
    assert_false(d.slow_customer);
}

static void server_errors_retried(void **state)
{
    static const long statuses[] = {500, 501, 502, 503, 504, 599}; /* 503: no Retry-After */
    for (size_t i = 0; i < PGP_ARRAY_LEN(statuses); i++) {
        http_result r = response(statuses[i]);
        for (int p = 0; p < 2; p++) {
            outcome_decision d = classify(&r, 1, 10, p ? &dead_4xx : &retry_4xx, 0.9);
            assert_retried_http(&d, statuses[i]);
            assert_backoff_range(&d, 1);
        }
    }
}

static void gone_pauses_the_customer(void **state)
{
    http_result r = response(410);
    /* Neither the 4xx policy nor the last attempt turns a 410 into a dead letter. */
    const outcome_policy *policies[] = {&retry_4xx, &dead_4xx};
    for (size_t p = 0; p < PGP_ARRAY_LEN(policies); p++) {
        for (int attempt = 1; attempt <= 3; attempt += 2) {
            outcome_decision d = classify(&r, attempt, 3, policies[p], 0);
            assert_int_equal(d.outcome, OUTCOME_PAUSE);
            assert_true(d.pause_customer);
            assert_false(d.receiver_failed);
            assert_int_equal(d.delay_ms, 0);
            assert_string_not_equal(d.error, "");
        }
    }
}

static void network_errors_retried_with_the_senders_text(void **state)
{
    static const char *const classes[] = {"dns",   "connect",  "timeout",   "tls",
                                          "reset", "protocol", "too_large", "internal"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(classes); i++) {
        char text[64];
        snprintf(text, sizeof text, "detail of %s #%zu", classes[i], i);
        http_result r = network(classes[i], text);
        for (int p = 0; p < 2; p++) {
            outcome_decision d = classify(&r, 1, 10, p ? &dead_4xx : &retry_4xx, 0);
            assert_int_equal(d.outcome, OUTCOME_RETRY);
            assert_non_null(d.error_class);
            assert_string_equal(d.error_class, classes[i]);
            assert_string_equal(d.error, text);
            assert_true(d.receiver_failed);
            assert_false(d.pause_customer);
            assert_backoff_range(&d, 1);
        }
    }
}

static void long_error_text_truncated_safely(void **state)
{
    char text[2000];
    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    http_result r = network("connect", text);
    outcome_decision d = classify(&r, 1, 10, &retry_4xx, 0);
    assert_int_equal(d.outcome, OUTCOME_RETRY);
    size_t len = strnlen(d.error, sizeof d.error);
    assert_true(len < sizeof d.error);
    assert_true(len > 0);
    assert_memory_equal(d.error, text, len);
}

static void ssrf_refusal_dead_and_not_the_receivers_fault(void **state)
{
    http_result r = network("ssrf", "refused 10.0.0.1 (private address)");
    outcome_decision d = classify(&r, 1, 10, &retry_4xx, 0);
    assert_int_equal(d.outcome, OUTCOME_DEAD);
    assert_non_null(d.error_class);
    assert_string_equal(d.error_class, "ssrf");
    assert_string_equal(d.error, "refused 10.0.0.1 (private address)");
    assert_false(d.receiver_failed);
    assert_false(d.pause_customer);
    assert_int_equal(d.delay_ms, 0);
}

/* The egress proxy (shared by every customer) or a client certificate pgpace cannot use:
 * retried, but no failure of the receiver's (no breaker, no failing streak). A 502 from the
 * proxy arrives as "connect" and counts. */
static void proxy_and_client_cert_failures_not_the_receivers(void **state)
{
    static const char *const mine[] = {"proxy", "client_cert"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(mine); i++) {
        http_result r = network(mine[i], "x");
        outcome_decision d = classify(&r, 1, 10, &retry_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_RETRY);
        assert_string_equal(d.error_class, mine[i]);
        assert_false(d.receiver_failed);
        assert_true(d.delay_ms > 0);
    }
    http_result r = network("connect", "the proxy could not reach the destination: HTTP 502");
    outcome_decision d = classify(&r, 1, 10, &retry_4xx, 0);
    assert_int_equal(d.outcome, OUTCOME_RETRY);
    assert_true(d.receiver_failed);
}

static void aborted_released_even_on_the_last_attempt(void **state)
{
    http_result r = network("aborted", "sender closed");
    for (int attempt = 1; attempt <= 3; attempt++) {
        outcome_decision d = classify(&r, attempt, 3, &dead_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_RELEASE);
        assert_non_null(d.error_class);
        assert_string_equal(d.error_class, "aborted");
        assert_string_equal(d.error, "sender closed");
        assert_false(d.receiver_failed);
        assert_false(d.pause_customer);
        assert_int_equal(d.delay_ms, 0);
    }
}

static void retry_after_delta_seconds(void **state)
{
    /* Jitter at the top of its range: the receiver's delay is used as given. */
    http_result r = response_retry_after(429, "120");
    outcome_decision d = classify(&r, 1, 10, &retry_4xx, JITTER_TOP);
    assert_throttled(&d, 120 * 1000, 120 * 1000);

    r = response_retry_after(503, "7");
    d = classify(&r, 4, 10, &retry_4xx, JITTER_TOP);
    assert_throttled(&d, 7 * 1000, 7 * 1000);

    /* "0" does not ask for a wait: a 429 is a throttle due again at once, a 503 a failure. */
    r = response_retry_after(429, "0");
    d = classify(&r, 4, 10, &retry_4xx, JITTER_TOP);
    assert_throttled(&d, 0, 0);
    r = response_retry_after(503, "0");
    d = classify(&r, 4, 10, &retry_4xx, 0);
    assert_int_equal(d.outcome, OUTCOME_RETRY);
    assert_true(d.receiver_failed);
    assert_true(d.slow_customer);
}

static void retry_after_http_date(void **state)
{
    http_result r = response_retry_after(429, EXAMPLE_DATE);
    outcome_decision d;
    outcome_classify(&r, 1, 10, &retry_4xx, EXAMPLE_DATE_S - 90, JITTER_TOP, &d);
    assert_throttled(&d, 90 * 1000, 90 * 1000);

    r = response_retry_after(503, EXAMPLE_DATE);
    outcome_classify(&r, 1, 10, &retry_4xx, EXAMPLE_DATE_S - 3599, 0, &d);
    assert_throttled(&d, 3599 * 1000LL, 3599 * 1000LL);
}

static void retry_after_clamped_to_the_maximum(void **state)
{
    int64_t max_ms = retry_4xx.retry_after_max_s * 1000LL;
    http_result r = response_retry_after(429, "86400");
    outcome_decision d = classify(&r, 1, 10, &retry_4xx, 0);
    assert_throttled(&d, max_ms, max_ms);

    r = response_retry_after(503, "99999999999999999999999");
    d = classify(&r, 1, 10, &retry_4xx, 0);
    assert_int_equal(d.delay_ms, max_ms);

    r = response_retry_after(503, EXAMPLE_DATE);
    outcome_classify(&r, 1, 10, &retry_4xx, EXAMPLE_DATE_S - 7 * 86400, 0, &d);
    assert_throttled(&d, max_ms, max_ms);

    outcome_policy small = retry_4xx;
    small.retry_after_max_s = 30;
    r = response_retry_after(429, "31");
    d = classify(&r, 1, 10, &small, 0);
    assert_int_equal(d.delay_ms, 30 * 1000);
}

/* A Retry-After that does not parse counts as none: a 429 is a throttle due again at once, a
 * 503 a failure retried after the backoff. */
static void retry_after_garbage_counts_as_none(void **state)
{
    static const char *const garbage[] = {
        "soon", "-5", "1.5", "", "12s", "+3", "Sun, 06 Nov 1994 08:49:37 UTC"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(garbage); i++) {
        http_result r = response_retry_after(429, garbage[i]);
        outcome_decision d = classify(&r, 3, 10, &retry_4xx, 0);
        assert_throttled(&d, 0, -1);
        r = response_retry_after(503, garbage[i]);
        d = classify(&r, 3, 10, &retry_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_RETRY);
        assert_true(d.slow_customer);
        /* Jitter 0: exactly half the raw delay. */
        assert_int_equal(d.delay_ms, raw_backoff_ms(3) / 2);
    }
}

static void retry_after_ignored_on_other_statuses(void **state)
{
    static const long statuses[] = {500, 502, 504, 408, 425, 404};
    for (size_t i = 0; i < PGP_ARRAY_LEN(statuses); i++) {
        http_result r = response_retry_after(statuses[i], "120");
        outcome_decision d = classify(&r, 2, 10, &retry_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_RETRY);
        assert_int_equal(d.delay_ms, raw_backoff_ms(2) / 2);
    }
    /* Nor on a network failure (no response, so no header can count). */
    http_result r = network("timeout", "operation timed out");
    r.retry_after = "120";
    outcome_decision d = classify(&r, 2, 10, &retry_4xx, 0);
    assert_int_equal(d.delay_ms, raw_backoff_ms(2) / 2);
}

static void backoff_within_half_to_one_and_a_half_of_the_capped_delay(void **state)
{
    for (int attempt = 1; attempt <= 12; attempt++) {
        int64_t raw = raw_backoff_ms(attempt);
        http_result r = response(500);
        /* Jitter 0 pins the lower bound exactly. */
        outcome_decision d = classify(&r, attempt, 100, &retry_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_RETRY);
        assert_int_equal(2 * d.delay_ms, raw);
        /* Jitter just below 1 comes within a millisecond of the (excluded) upper bound. */
        d = classify(&r, attempt, 100, &retry_4xx, JITTER_TOP);
        assert_int_equal(d.outcome, OUTCOME_RETRY);
        assert_true(2 * d.delay_ms < 3 * raw);
        assert_true(d.delay_ms >= raw / 2 + (int64_t)(raw * JITTER_TOP) - 1);
        /* Anything in between stays inside, and more jitter never means less delay. */
        int64_t prev = -1;
        for (int k = 0; k < 20; k++) {
            d = classify(&r, attempt, 100, &retry_4xx, k / 20.0);
            assert_backoff_range(&d, attempt);
            assert_true(d.delay_ms >= prev);
            prev = d.delay_ms;
        }
    }
    /* The cap is reached: attempt 7 would be 64 s uncapped. */
    assert_int_equal(raw_backoff_ms(7), CAP_MS);
}

static void last_attempt_dead_but_still_the_receivers_failure(void **state)
{
    http_result failures[] = {response(500), response(503), response(404), response(100),
                              network("timeout", "timed out")};
    for (size_t i = 0; i < PGP_ARRAY_LEN(failures); i++) {
        outcome_decision d = classify(&failures[i], 4, 5, &retry_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_RETRY);
        assert_true(d.receiver_failed);

        d = classify(&failures[i], 5, 5, &retry_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_DEAD);
        assert_true(d.receiver_failed);
        assert_false(d.pause_customer);
        assert_string_not_equal(d.error, "");

        /* Past the limit (the limit was lowered meanwhile): dead too. */
        d = classify(&failures[i], 7, 5, &retry_4xx, 0);
        assert_int_equal(d.outcome, OUTCOME_DEAD);
        assert_true(d.receiver_failed);
    }
    /* A single-attempt item is dead at once. */
    http_result r = response(502);
    outcome_decision d = classify(&r, 1, 1, &retry_4xx, 0);
    assert_int_equal(d.outcome, OUTCOME_DEAD);
}

/* The schema keeps max_attempts in 1..1000; a row that says otherwise is treated as SQL treats
 * it (run_finalize.sql dead-letters a retry with attempt >= max_attempts): no retry forever. */
static void max_attempts_below_one_is_exhausted_at_once(void **state)
{
    http_result r = response(503);
    static const int attempts[] = {1, 5, 1000};
    for (size_t i = 0; i < PGP_ARRAY_LEN(attempts); i++) {
        outcome_decision d = classify(&r, attempts[i], 0, &retry_4xx, JITTER_TOP);
        assert_int_equal(d.outcome, OUTCOME_DEAD);
        assert_true(d.receiver_failed);
    }
}

static void policy_from_config(void **state)
{
    pgp_config cfg = {0};
    cfg.dead_letter_on_4xx = true;
    cfg.retry_after_max_s = 42;
    cfg.retry_base_ms = 250;
    cfg.retry_cap_ms = 3000000; /* 50 minutes: microseconds beyond INT32_MAX */
    outcome_policy p = outcome_policy_from(&cfg);
    assert_true(p.dead_letter_on_4xx);
    assert_int_equal(p.retry_after_max_s, 42);
    assert_int_equal(p.retry_base_us, 250000);
    assert_int_equal(p.retry_cap_us, 3000000000LL);
}

static void outcome_names_are_the_sql_spellings(void **state)
{
    /* run_finalize.sql compares against exactly these. */
    assert_string_equal(outcome_name(OUTCOME_SUCCESS), "success");
    assert_string_equal(outcome_name(OUTCOME_RETRY), "retry");
    assert_string_equal(outcome_name(OUTCOME_DEAD), "dead");
    assert_string_equal(outcome_name(OUTCOME_RELEASE), "release");
    assert_string_equal(outcome_name(OUTCOME_PAUSE), "pause");
    assert_string_equal(outcome_name(OUTCOME_THROTTLED), "throttled");
    /* Every outcome has its own name. */
    for (int a = 0; a < OUTCOME_COUNT; a++)
        for (int b = a + 1; b < OUTCOME_COUNT; b++)
            assert_string_not_equal(outcome_name((delivery_outcome)a),
                                    outcome_name((delivery_outcome)b));
}

/* Runs text_excerpt on n bytes and compares with the expected NUL-terminated text. */
static void assert_excerpt(const char *in, size_t n, const char *want)
{
    char *got = text_excerpt(in, n);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void excerpt_keeps_valid_utf8(void **state)
{
    static const char *const valid[] = {
        "",
        "plain ASCII {\"ok\":true}\r\n\t",
        "caf\xc3\xa9 \xc2\x80 \xdf\xbf",          /* 2 bytes: U+00E9, U+0080, U+07FF */
        "\xe0\xa0\x80 \xe2\x82\xac \xef\xbf\xbf", /* 3 bytes: U+0800, U+20AC, U+FFFF */
        "\xed\x9f\xbf \xee\x80\x80",              /* U+D7FF and U+E000 around the surrogates */
        "\xf0\x90\x80\x80 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf", /* U+10000, U+1F600, U+10FFFF */
        "\x7f",
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(valid); i++)
        assert_excerpt(valid[i], strlen(valid[i]), valid[i]);
    /* Only n bytes are read: the input need not be NUL-terminated. */
    assert_excerpt("abcdef", 3, "abc");
}

static void excerpt_replaces_invalid_bytes(void **state)
{
    /* Stray continuation bytes, bytes that never occur in UTF-8, a lead byte followed by a
     * non-continuation: each invalid byte becomes one '?' and the rest is kept. */
    assert_excerpt("a\x80z", 3, "a?z");
    assert_excerpt("\xbf\xbf", 2, "??");
    assert_excerpt("x\xfey\xffz", 5, "x?y?z");
    assert_excerpt("\xf8\x88\x80\x80\x80", 5, "?????"); /* 5-byte forms do not exist */
    assert_excerpt("\xe2\x28\xa1", 3, "?(?");
    assert_excerpt("\xc3(", 2, "?(");
    /* A lead byte followed by another lead byte: the second starts a character of its own. */
    assert_excerpt("\xc3\xc3\xa9", 3, "?\xc3\xa9");
    assert_excerpt("\xe2\xe2\x82\xac!", 5, "?\xe2\x82\xac!");
    assert_excerpt("\xf5\x80\x80\x80", 4, "????"); /* lead bytes above U+10FFFF */
    /* Latin-1 text, the usual mistake. */
    assert_excerpt("caf\xe9 cr\xe8me", 10, "caf? cr?me");
}

static void excerpt_drops_nul(void **state)
{
    assert_excerpt("a\0b\0\0c", 6, "abc");
    assert_excerpt("\0", 1, "");
    assert_excerpt("\xc3\xa9\0\xc3\xa9", 5, "\xc3\xa9\xc3\xa9");
}

static void excerpt_drops_a_character_cut_at_the_end(void **state)
{
    assert_excerpt("ok\xc3", 3, "ok");
    assert_excerpt("ok\xe2\x82", 4, "ok");
    assert_excerpt("ok\xf0\x9f\x98", 5, "ok");
    assert_excerpt("ok\xf0", 3, "ok");
    /* The same bytes with the character complete are kept. */
    assert_excerpt("ok\xf0\x9f\x98\x80", 6, "ok\xf0\x9f\x98\x80");
    /* A lead byte near the end that no continuation follows is not a cut character: it becomes
     * '?' and the bytes after it are kept. */
    assert_excerpt("ok\xe2(", 4, "ok?(");
    assert_excerpt("ok\xf0"
                   "ab",
                   5, "ok?ab");
    assert_excerpt("caf\xe9.", 5, "caf?.");
}

static void excerpt_replaces_overlong_and_surrogate_forms(void **state)
{
    /* Overlong encodings of '/', U+0000 and U+07FF, and an overlong 4-byte U+FFFF: none of
     * their bytes may start a valid character, so each becomes a '?'. */
    assert_excerpt("\xc0\xaf", 2, "??");
    assert_excerpt("\xc1\xbf", 2, "??");
    assert_excerpt("\xe0\x80\xaf", 3, "???");
    assert_excerpt("\xe0\x9f\xbf", 3, "???");
    assert_excerpt("\xf0\x8f\xbf\xbf", 4, "????");
    /* UTF-16 surrogates U+D800 and U+DFFF, and U+110000 beyond Unicode. */
    assert_excerpt("<\xed\xa0\x80>", 5, "<\?\?\?>");
    assert_excerpt("\xed\xbf\xbf", 3, "???");
    assert_excerpt("\xf4\x90\x80\x80", 4, "????");
    /* Whatever comes out is valid UTF-8 that PostgreSQL takes: no byte >= 0x80 here. */
    char *got = text_excerpt("\xc0\x80\xed\xa0\x80\xf0\x80\x80\x80", 9);
    assert_non_null(got);
    for (const char *p = got; *p; p++)
        assert_true((unsigned char)*p < 0x80);
    free(got);
}

static void excerpt_of_null_is_null(void **state)
{
    assert_null(text_excerpt(NULL, 0));
    assert_null(text_excerpt(NULL, 10));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(success_2xx),
        cmocka_unit_test(informational_and_unexpected_statuses_retried),
        cmocka_unit_test(redirects_dead),
        cmocka_unit_test(client_errors_retried_unless_dead_letter_on_4xx),
        cmocka_unit_test(client_errors_dead_with_dead_letter_on_4xx),
        cmocka_unit_test(timeout_and_too_early_always_retried),
        cmocka_unit_test(too_many_requests_is_a_throttle),
        cmocka_unit_test(unavailable_is_a_throttle_only_with_retry_after),
        cmocka_unit_test(server_errors_retried),
        cmocka_unit_test(gone_pauses_the_customer),
        cmocka_unit_test(network_errors_retried_with_the_senders_text),
        cmocka_unit_test(long_error_text_truncated_safely),
        cmocka_unit_test(ssrf_refusal_dead_and_not_the_receivers_fault),
        cmocka_unit_test(proxy_and_client_cert_failures_not_the_receivers),
        cmocka_unit_test(aborted_released_even_on_the_last_attempt),
        cmocka_unit_test(retry_after_delta_seconds),
        cmocka_unit_test(retry_after_http_date),
        cmocka_unit_test(retry_after_clamped_to_the_maximum),
        cmocka_unit_test(retry_after_garbage_counts_as_none),
        cmocka_unit_test(retry_after_ignored_on_other_statuses),
        cmocka_unit_test(backoff_within_half_to_one_and_a_half_of_the_capped_delay),
        cmocka_unit_test(last_attempt_dead_but_still_the_receivers_failure),
        cmocka_unit_test(max_attempts_below_one_is_exhausted_at_once),
        cmocka_unit_test(policy_from_config),
        cmocka_unit_test(outcome_names_are_the_sql_spellings),
        cmocka_unit_test(excerpt_keeps_valid_utf8),
        cmocka_unit_test(excerpt_replaces_invalid_bytes),
        cmocka_unit_test(excerpt_drops_nul),
        cmocka_unit_test(excerpt_drops_a_character_cut_at_the_end),
        cmocka_unit_test(excerpt_replaces_overlong_and_surrogate_forms),
        cmocka_unit_test(excerpt_of_null_is_null),
    };
    return TL_RUN(tests, NULL, NULL);
}
