/* finalize.c - writing delivery outcomes back, many per statement.
 *
 * Owns dispatcher.pending (outcomes waiting), .sending (the statement in flight) and the flush
 * timer. Every outcome is a compare-and-swap on its claim token (run_finalize.sql; the cheaper
 * run_finalize_success.sql when a batch is all successes): rows come back only for items this
 * leader no longer owned, which are counted as lost ownership. One statement is in flight at a
 * time; outcomes that arrive meanwhile go in the next. Failures:
 * - database-wide (disk full, timeouts, conflicts, read-only, connection): the batch is kept
 *   whole, in order, and retried with backoff (0.25 s doubling to 8 s); splitting it would only
 *   turn an outage into redeliveries;
 * - a statement error: the batch is split, one entry per statement, so one bad entry cannot hold
 *   back the others; an entry failing alone is retried once without its attempt-log text, then
 *   given up (its lease expires and the item is delivered again: at-least-once holds);
 * - a lost connection: everything is kept for after the reconnect.
 */
#include "internal.h"

#include "log.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

bool final_push(final_list *l, final_entry e)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        final_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            LOG_ERROR("out_of_memory", LOG_S("where", "finalisation queue"));
            final_entry_free(&e);
            return false;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = e;
    return true;
}

void final_entry_free(final_entry *e)
{
    free(e->error_class);
    free(e->error);
    free(e->excerpt);
    e->error_class = e->error = e->excerpt = NULL;
}

void final_list_free(final_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        final_entry_free(&l->v[i]);
    free(l->v);
    *l = (final_list){0};
}

/* The outcome is written (or given up): its carrier has room again. */
static void final_entry_release(dispatcher *d, final_entry *e)
{
    if (e->order_customer) {
        customer *c = customer_get(d, e->order_customer);
        if (c) {
            pair_note(c, e->carrier ? e->carrier->name : "", now_us());
            customer_schedule(d, c);
            claim_arm(d);
        }
        e->order_customer = 0;
    }
    if (e->carrier) {
        e->carrier->in_flight--;
        wake(d, &e->carrier->waiting);
        e->carrier = NULL;
    }
}

bool finalize_busy(const dispatcher *d)
{
    return d->flush_sent_ns != 0;
}

static void on_finalize(pgconn *conn, PGresult *res, void *arg);

static void array_sep(strbuf *sb)
{
    strbuf_puts(sb, sb->len ? "," : "{");
}

static void array_text_or_null(strbuf *sb, const char *s)
{
    if (s)
        strbuf_array_text(sb, s);
    else
        strbuf_puts(sb, "NULL");
}

/* Sends the first `take` pending outcomes as one statement; returns whether it was sent. */
static bool send_finalize(dispatcher *d, size_t take)
{
    strbuf a[SQL_RUN_FINALIZE_NPARAMS] = {{0}};
    bool all_success = true;
    for (size_t i = 0; i < take && all_success; i++)
        all_success = d->pending.v[i].outcome == OUTCOME_SUCCESS;
    for (size_t i = 0; i < take; i++) {
        final_entry *e = &d->pending.v[i];
        for (size_t k = 0; k < PGP_ARRAY_LEN(a); k++)
            array_sep(&a[k]);
        strbuf_put_i64(&a[SQL_RUN_FINALIZE_P_ITEM], e->item_id);
        strbuf_put_i64(&a[SQL_RUN_FINALIZE_P_TOKEN], e->token);
        strbuf_puts(&a[SQL_RUN_FINALIZE_P_OUTCOME], outcome_name(e->outcome));
        strbuf_put_i64(&a[SQL_RUN_FINALIZE_P_DELAY_MS], e->delay_ms);
        if (e->http_status)
            strbuf_put_i64(&a[SQL_RUN_FINALIZE_P_HTTP_STATUS], e->http_status);
        else
            strbuf_puts(&a[SQL_RUN_FINALIZE_P_HTTP_STATUS], "NULL");
        array_text_or_null(&a[SQL_RUN_FINALIZE_P_ERROR_CLASS], e->error_class);
        array_text_or_null(&a[SQL_RUN_FINALIZE_P_ERROR], e->error);
        strbuf_put_i64(&a[SQL_RUN_FINALIZE_P_STARTED_US], e->started_us ? e->started_us : now_us());
        strbuf_put_fixed3(&a[SQL_RUN_FINALIZE_P_DURATION_MS], e->duration_ms);
        array_text_or_null(&a[SQL_RUN_FINALIZE_P_EXCERPT], e->excerpt);
    }
    const char *p[SQL_RUN_FINALIZE_NPARAMS];
    bool ok = true;
    for (size_t k = 0; k < PGP_ARRAY_LEN(a); k++) {
        strbuf_puts(&a[k], "}");
        p[k] = strbuf_str(&a[k]);
        ok = ok && p[k];
    }
    if (!ok) {
        LOG_ERROR("out_of_memory", LOG_S("where", "finalisation parameters"));
    } else if (all_success) {
        const char *sp[] = {
            [SQL_RUN_FINALIZE_SUCCESS_P_ITEM] = p[SQL_RUN_FINALIZE_P_ITEM],
            [SQL_RUN_FINALIZE_SUCCESS_P_TOKEN] = p[SQL_RUN_FINALIZE_P_TOKEN],
            [SQL_RUN_FINALIZE_SUCCESS_P_HTTP_STATUS] = p[SQL_RUN_FINALIZE_P_HTTP_STATUS],
            [SQL_RUN_FINALIZE_SUCCESS_P_STARTED_US] = p[SQL_RUN_FINALIZE_P_STARTED_US],
            [SQL_RUN_FINALIZE_SUCCESS_P_DURATION_MS] = p[SQL_RUN_FINALIZE_P_DURATION_MS],
            [SQL_RUN_FINALIZE_SUCCESS_P_EXCERPT] = p[SQL_RUN_FINALIZE_P_EXCERPT],
        };
        _Static_assert(PGP_ARRAY_LEN(sp) == SQL_RUN_FINALIZE_SUCCESS_NPARAMS, "parameter count");
        ok = pgconn_query_prepared(d->db, sql_q_run_finalize_success, (int)PGP_ARRAY_LEN(sp), sp,
                                   on_finalize, d) == 0;
    } else {
        ok = pgconn_query_prepared(d->db, sql_q_run_finalize, (int)PGP_ARRAY_LEN(p), p, on_finalize,
                                   d) == 0;
    }
    for (size_t k = 0; k < PGP_ARRAY_LEN(a); k++)
        strbuf_free(&a[k]);
    return ok;
}

static void on_flush_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (finalize_busy(d) || d->pending.n == 0 || !pgconn_ready(d->db))
        return;
    size_t take = d->solo_left > 0 ? 1 : d->pending.n;
    if (take == 1 && d->pending.n > 1 && d->sending.cap == 0) {
        /* The solo path moves one entry into `sending`: make room before sending, so the
         * entry cannot be lost to an allocation failure once its statement is out. */
        d->sending.v = malloc(sizeof *d->sending.v);
        if (!d->sending.v)
            return;
        d->sending.cap = 1;
    }
    if (!send_finalize(d, take))
        return;
    d->flush_sent_ns = uv_hrtime();
    if (take == d->pending.n) {
        free(d->sending.v);
        d->sending = d->pending;
        d->pending = (final_list){0};
        d->solo_left = 0;
    } else {
        /* The first entry alone; the rest wait for the next statement. */
        d->sending.v[0] = d->pending.v[0];
        d->sending.n = 1;
        memmove(d->pending.v, d->pending.v + 1, (d->pending.n - 1) * sizeof *d->pending.v);
        d->pending.n--;
        d->solo_left--;
    }
}

void finalize_arm(dispatcher *d)
{
    if (finalize_busy(d) || d->pending.n == 0 || !pgconn_ready(d->db) || d->stop == STOP_CLOSING)
        return;
    uint64_t now = uv_hrtime();
    uint64_t wait_ms = d->flush_hold_until_ns > now ? (d->flush_hold_until_ns - now) / 1000000 : 0;
    uv_timer_start(&d->timers[TIMER_FLUSH], on_flush_timer, wait_ms, 0);
}

/* Errors that say nothing about the statement's data but about the database's state: disk
 * full and other resources (53), cancelled or shutting down (57, incl. statement_timeout),
 * system errors (58), lock or serialization conflicts (40, 55P03), read-only (25006), and
 * connection trouble (08). */
static bool database_wide_error(const PGresult *res)
{
    const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (!code || strlen(code) != 5)
        return false;
    return strncmp(code, "53", 2) == 0 || strncmp(code, "57", 2) == 0 ||
           strncmp(code, "58", 2) == 0 || strncmp(code, "40", 2) == 0 ||
           strncmp(code, "08", 2) == 0 || strcmp(code, "55P03") == 0 || strcmp(code, "25006") == 0;
}

/* Puts the batch back in front of what arrived meanwhile, in order, and retries later. */
static void keep_batch(dispatcher *d, const PGresult *res)
{
    int shift = d->flush_errors < 5 ? d->flush_errors : 5;
    uint64_t delay_ms = 250u << shift;
    d->flush_errors++;
    d->flush_hold_until_ns = uv_hrtime() + delay_ms * 1000000u;
    LOG_ERROR("finalize_failed", LOG_S("sqlstate", PQresultErrorField(res, PG_DIAG_SQLSTATE)),
              LOG_S("error", PQresultErrorMessage(res)), LOG_I("items", (long long)d->sending.n),
              LOG_I("retry_in_ms", (long long)delay_ms),
              LOG_I("failures_in_a_row", d->flush_errors));
    for (size_t i = 0; i < d->pending.n; i++)
        final_push(&d->sending, d->pending.v[i]);
    free(d->pending.v);
    d->pending = d->sending;
    d->sending = (final_list){0};
}

/* A statement error or a lost connection (res NULL). */
static void split_batch(dispatcher *d, const PGresult *res)
{
    if (res)
        LOG_ERROR("finalize_failed", LOG_S("sqlstate", PQresultErrorField(res, PG_DIAG_SQLSTATE)),
                  LOG_S("error", PQresultErrorMessage(res)),
                  LOG_I("items", (long long)d->sending.n));
    size_t n = d->sending.n;
    for (size_t i = 0; i < n; i++) {
        final_entry *e = &d->sending.v[i];
        if (res && n == 1 && ++e->failures > 1) {
            LOG_ERROR("finalize_dropped", LOG_I("item", e->item_id),
                      LOG_S("outcome", outcome_name(e->outcome)),
                      LOG_S("meaning", "the lease expires and the item is delivered again"));
            final_entry_release(d, e);
            final_entry_free(e);
            continue;
        }
        if (res && n == 1) {
            free(e->excerpt);
            free(e->error);
            e->excerpt = NULL;
            e->error = strdup("(attempt text not storable)");
        }
        if (!final_push(&d->pending, *e))
            final_entry_release(d, e);
    }
    if (res && n > 1)
        d->solo_left = n;
    free(d->sending.v);
    d->sending = (final_list){0};
    if (res)
        d->flush_hold_until_ns = uv_hrtime() + ERROR_RETRY_MS * 1000000ull;
}

static void on_finalize(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    d->flush_sent_ns = 0;
    bool ok = res && PQresultStatus(res) == PGRES_TUPLES_OK &&
              rows_shape_ok(res, SQL_RUN_FINALIZE_NCOLS, "finalize");
    if (!ok && res && database_wide_error(res)) {
        keep_batch(d, res);
    } else if (!ok) {
        split_batch(d, res);
        if (!res)
            return; /* the reconnect arms the next flush */
    } else {
        d->flush_errors = 0;
        d->flush_hold_until_ns = 0;
        for (int i = 0; i < PQntuples(res); i++) {
            d->lost_ownership++;
            metrics_counter_add(d->obs.m, d->obs.lost_ownership, NULL, 1);
            LOG_WARN("lost_ownership", LOG_I("item", row_i64(res, i, SQL_RUN_FINALIZE_C_ITEM_ID)),
                     LOG_S("meaning", "lease expired and the item was claimed again or is gone"));
        }
        for (size_t i = 0; i < d->sending.n; i++)
            final_entry_release(d, &d->sending.v[i]);
        final_list_free(&d->sending);
    }
    finalize_arm(d);
    dispatcher_maybe_finish(d);
}
