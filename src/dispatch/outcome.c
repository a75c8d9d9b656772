/* outcome.c - what one delivery attempt's result means. Pure: no I/O, no clock, no state.
 *
 * Owns the mapping from an HTTP result (status, the sender's error class, Retry-After) to an
 * outcome, a retry delay and the error text stored in the attempt log, and the outcomes'
 * spellings (run_finalize.sql and the metrics use them). The rules:
 * - 2xx succeeds; a shutdown abort releases the item (not an attempt as far as the receiver
 *   knows); 410 Gone pauses the customer (a receiver that is gone for good should not be
 *   retried, and pausing loses nothing).
 * - 429, and 503 with a Retry-After, are throttles: the receiver says "later", not "broken".
 *   The item is tried again after the Retry-After (capped by retry_after_max_s; 0 ignores
 *   Retry-After) or, without one, as soon as the customer's lowered pace allows; the attempt is
 *   given back and the breaker is not told. The customer is slowed (pace.c). A 503 without
 *   Retry-After slows the customer too, but is a failure like any other 5xx: a receiver that is
 *   down answers 503 forever, and that must end in the breaker and dead letters.
 * - Network failures, 408, 425, 5xx and anything unexpected are retried after capped
 *   exponential backoff with jitter. On the item's last attempt they are dead-lettered instead.
 * - A destination refused by the SSRF rules will not become acceptable by retrying: dead.
 * - 3xx is dead (redirects are not followed: the webhook URL must answer directly); other 4xx
 *   are dead when dead_letter_on_4xx is set, else retried.
 */
#include "internal.h"

#include "backoff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *outcome_name(delivery_outcome o)
{
    static const char *const names[OUTCOME_COUNT] = {"success", "retry",     "dead",   "release",
                                                     "pause",   "throttled", "expired"};
    return (unsigned)o < OUTCOME_COUNT ? names[o] : "retry";
}

outcome_policy outcome_policy_from(const pgp_config *cfg)
{
    return (outcome_policy){.dead_letter_on_4xx = cfg->dead_letter_on_4xx,
                            .retry_after_max_s = cfg->retry_after_max_s,
                            .retry_base_us = (int64_t)cfg->retry_base_ms * 1000,
                            .retry_cap_us = (int64_t)cfg->retry_cap_ms * 1000};
}

static bool retryable_status(long status)
{
    return status == 408 || status == 425 || status == 429 || status >= 500;
}

void outcome_classify(const http_result *r, int attempt, int max_attempts, const outcome_policy *p,
                      int64_t now_s, double jitter, outcome_decision *out)
{
    *out = (outcome_decision){.outcome = OUTCOME_DEAD, .retry_after_ms = -1};
    const char *cls = r->error_class;
    bool retry = false;
    if (!cls && r->status >= 200 && r->status < 300) {
        out->outcome = OUTCOME_SUCCESS;
        return;
    }
    if (cls && strcmp(cls, "aborted") == 0) {
        out->outcome = OUTCOME_RELEASE;
        out->error_class = cls;
        snprintf(out->error, sizeof out->error, "%s", r->error ? r->error : cls);
        return;
    }
    if (!cls && r->status == 410) {
        out->outcome = OUTCOME_PAUSE;
        out->pause_customer = true;
        snprintf(out->error, sizeof out->error, "410 Gone: customer paused");
        return;
    }
    if (cls) {
        retry = strcmp(cls, "ssrf") != 0;
        out->error_class = cls;
        snprintf(out->error, sizeof out->error, "%s", r->error ? r->error : cls);
    } else if (r->status >= 300 && r->status < 400) {
        snprintf(out->error, sizeof out->error,
                 "redirect not followed (the webhook URL must answer directly)");
    } else {
        retry = retryable_status(r->status) || !(r->status >= 400 && r->status < 500) ||
                !p->dead_letter_on_4xx;
        out->error_class = "http";
        snprintf(out->error, sizeof out->error, "HTTP %ld", r->status);
    }
    int64_t delay_s = -1;
    if (!cls && (r->status == 429 || r->status == 503)) {
        out->slow_customer = true;
        if (r->retry_after && p->retry_after_max_s > 0 &&
            retry_after_parse(r->retry_after, now_s, p->retry_after_max_s, &delay_s) == 0)
            out->retry_after_ms = delay_s * 1000;
        /* A 503 is a throttle only with a Retry-After that asks for a wait ("0" does not). */
        if (r->status == 429 || out->retry_after_ms > 0) {
            out->outcome = OUTCOME_THROTTLED;
            out->delay_ms = out->retry_after_ms > 0 ? out->retry_after_ms : 0;
            return; /* neither an attempt used up nor a failure of the receiver */
        }
    }
    /* Not the receiver's failure: the egress proxy down or refusing (shared by every
     * customer: it must not open all their breakers, nor disable them), or a client
     * certificate pgpace cannot use. Retried all the same. */
    bool not_receivers = cls && (strcmp(cls, "proxy") == 0 || strcmp(cls, "client_cert") == 0);
    out->receiver_failed = retry && !not_receivers;
    out->health_failed = !not_receivers;
    if (!retry)
        return;
    if (attempt >= max_attempts)
        return; /* attempts exhausted: dead (as run_finalize.sql decides it too) */
    out->outcome = OUTCOME_RETRY;
    out->delay_ms = backoff_delay_us(attempt - 1, p->retry_base_us, p->retry_cap_us, jitter) / 1000;
}

/* Invalid sequences become '?', NUL bytes are dropped, and a character cut by the excerpt
 * limit is left out: a peer's bad bytes must never block a finalisation. */
char *text_excerpt(const char *s, size_t n)
{
    if (!s)
        return NULL;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t len = c < 0x80             ? 1
                     : (c & 0xe0) == 0xc0 ? 2
                     : (c & 0xf0) == 0xe0 ? 3
                     : (c & 0xf8) == 0xf0 ? 4
                                          : 0;
        if (c == 0) {
            i++;
            continue;
        }
        if (len == 0 || (len == 2 && c < 0xc2) || (len == 4 && c > 0xf4)) {
            out[o++] = '?';
            i++;
            continue;
        }
        size_t present = i + len > n ? n - i : len;
        bool ok = true;
        for (size_t k = 1; k < present; k++)
            ok = ok && (p[i + k] & 0xc0) == 0x80;
        if (ok && present < len)
            break; /* a character cut by the limit */
        /* Overlong 3/4-byte forms, UTF-16 surrogates and code points above U+10FFFF. */
        if (ok && len == 3)
            ok = !(c == 0xe0 && p[i + 1] < 0xa0) && !(c == 0xed && p[i + 1] >= 0xa0);
        if (ok && len == 4)
            ok = !(c == 0xf0 && p[i + 1] < 0x90) && !(c == 0xf4 && p[i + 1] >= 0x90);
        if (!ok) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, p + i, len);
        o += len;
        i += len;
    }
    out[o] = '\0';
    return out;
}
