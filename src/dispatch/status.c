/* status.c - GET /v1/status, the data of the live status page (README, "The status page"):
 * the instances and the leader, the customers of one page (sorted and filtered by name, state or
 * rates), the carriers, and the totals.
 *
 * Contract:
 * - Bounded: the page (at most STATUS_MAX_LIMIT customers) is chosen in memory, from the
 *   dispatcher's customers, in one pass and a sort of the matches. The leader asks the
 *   database one thing per poll, the instance list (sql/queries/status_instances.sql, pipelined
 *   with the claims); the queue counts (due, delayed, dead, oldest due) are those of its last
 *   queue-gauge refresh (every 15 s, housekeeping.c), never counted per poll: counting 50 deep
 *   backlogs took 1.2 s, a stall of every claim behind it. A standby also asks for the page's
 *   effective rates and latest failures (sql/queries/status_customers.sql: index probes) and
 *   has no counts. At most STATUS_MAX_PENDING requests wait for the database at once (more get
 *   503), so a room full of open pages cannot queue work ahead of the claims.
 * - What only the leader knows (requests per minute, the gaps between requests, requests per
 *   batch tick, in flight, the latest failure, the throttled rate) comes from its memory; a
 *   standby says "live": false, shows the effective rates the leader wrote to the frontier,
 *   and has no count of throttled customers (null); its sorts by effective rate and state use
 *   what it knows itself (configured rates).
 * - Requests per minute are over the part of the last minute this instance observed: since it
 *   began leading, or loaded the customer, when that is less than a minute ago (activity.h);
 *   the count and the window are given beside it, so the figure of a customer sending at its
 *   rate is its rate from the first seconds on, not the count of a partial minute.
 * - Health (health.c, status_health.h): ok, failing (the recorded streak: since when, failures
 *   in a row, and when the health check may disable it at this pace) or disabled (since when);
 *   a recovered customer reads ok again, with when it recovered, for an hour.
 * - Nothing secret: no payload, signing secret, header value, token, certificate, URL or proxy
 *   is read here. Customer and carrier names, modes, rates, counts, states and error classes.
 * - The answer is assembled when the statements' results arrive (or at once without a
 *   database), from the customers as they are then: one removed meanwhile is left out.
 * - Endpoints (migration 0018): the page lists customers; a customer with endpoints is one entry
 *   (sorted, filtered and paged as one: its name or any endpoint's full name matches the
 *   filter; its keys are its limit, the sum of its endpoints' effective rates, requests and
 *   in flight, its endpoints' worst state) whose `endpoints` array holds each endpoint's
 *   figures and health as a customer's (its own receiver first, as "default"; at most
 *   STATUS_MAX_ENDPOINTS, and STATUS_MAX_PAGE_ENDPOINTS over the page: endpoints_total says how
 *   many it has; a standby asks the database for the listed ones), and whose own figures (over
 *   all of its endpoints) sum or take the
 *   worst of theirs (`problems` counts its endpoints per problem). A customer without endpoints
 *   is as before, with "endpoints": []. A customer without a receiver of its own is not a
 *   dispatcher customer: its name, limit and dead letters come from the queue-gauge pass
 *   (status_tenant_note). Without any endpoint the page is chosen exactly as before.
 */
#include "status_internal.h"

#include "log.h"
#include "pgpace_version.h"
#include "status_health.h"
#include "status_query.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- what the dispatcher notes ------------------------------------------------------------- */

static activity *activity_of(customer *c)
{
    if (!c->activity) {
        c->activity = malloc(sizeof *c->activity);
        if (c->activity)
            activity_init(c->activity);
    }
    return c->activity;
}

void status_note_request(dispatcher *d, customer *c)
{
    activity *a = activity_of(c);
    if (!a)
        return; /* no memory: the page just misses this request */
    int64_t tick = c->mode == MODE_BATCH ? batch_tick_at(&d->cfg, now_us()) : -1;
    activity_note(a, timebase_mono_us(), tick);
}

void status_note_failure(customer *c, const char *error_class, int http_status)
{
    activity *a = activity_of(c);
    if (a)
        activity_note_error(a, timebase_mono_us(), error_class, http_status);
}

void status_counts_note(dispatcher *d, const metrics_row *row, int64_t at_us)
{
    customer *c = customer_get(d, row->customer_id);
    if (!c)
        return;
    c->stat_due = (int32_t)row->due; /* at most QUEUE_COUNT_CAP (housekeeping.c) */
    c->stat_delayed = (int32_t)row->delayed;
    c->stat_dead = (int64_t)row->dead;
    c->stat_oldest_due_us = row->due > 0 ? at_us - (int64_t)(row->oldest_due_age_s * 1e6) : 0;
    c->stat_waiting = (int32_t)row->waiting;
    c->stat_blocked_keys = (int64_t)row->blocked_keys;
    c->stat_blocked_since_us =
        row->blocked_keys > 0 ? at_us - (int64_t)(row->oldest_blocked_age_s * 1e6) : 0;
    bool same = c->stat_blocked_key && row->oldest_blocked_key &&
                strcmp(c->stat_blocked_key, row->oldest_blocked_key) == 0;
    if (!same) {
        free(c->stat_blocked_key);
        /* Out of memory: the page shows the count without the key. */
        c->stat_blocked_key = row->oldest_blocked_key ? strdup(row->oldest_blocked_key) : NULL;
    }
    c->stat_at_us = at_us;
}

void status_totals_note(dispatcher *d, double due, double dead, int64_t at_us)
{
    d->status_due = due;
    d->status_dead = dead;
    d->status_totals_us = at_us;
}

void status_tenant_note(dispatcher *d, const metrics_row *row, int64_t pass_us)
{
    if (strchr(row->customer, '/'))
        return; /* an endpoint always has a receiver: not one of these */
    int64_t id = row->customer_id;
    status_tenant *t = hmap_get(&d->status_tenants, &id, sizeof id);
    if (t && strcmp(t->name, row->customer) != 0) {
        free(t->name);
        t->name = NULL;
    }
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t || hmap_put(&d->status_tenants, &id, sizeof id, t) != 0) {
            free(t);
            return; /* no memory: the page names it from its endpoints */
        }
    }
    if (!t->name && !(t->name = strdup(row->customer))) {
        free(hmap_del(&d->status_tenants, &id, sizeof id));
        return;
    }
    t->id = id;
    t->rate = row->rate_per_minute;
    snprintf(t->mode, sizeof t->mode, "%s", row->mode);
    t->dead = (int64_t)row->dead;
    t->seen_us = pass_us;
}

static void tenant_free(status_tenant *t)
{
    if (t)
        free(t->name);
    free(t);
}

void status_tenants_sweep(dispatcher *d, int64_t pass_us)
{
    /* No deleting while iterating (hmap.h): collect first. */
    size_t pos = 0, n = 0;
    status_tenant *t;
    int64_t *gone = d->status_tenants.n ? malloc(d->status_tenants.n * sizeof *gone) : NULL;
    if (!gone)
        return;
    while ((t = hmap_next(&d->status_tenants, &pos)) != NULL)
        if (t->seen_us < pass_us)
            gone[n++] = t->id;
    for (size_t i = 0; i < n; i++)
        tenant_free(hmap_del(&d->status_tenants, &gone[i], sizeof gone[i]));
    free(gone);
}

void status_free(dispatcher *d)
{
    size_t pos = 0;
    status_tenant *t;
    while ((t = hmap_next(&d->status_tenants, &pos)) != NULL)
        tenant_free(t);
    hmap_free(&d->status_tenants);
}

void status_lead_begin(dispatcher *d)
{
    d->lead_mono_us = timebase_mono_us();
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL)
        if (c->activity)
            activity_forget_count(c->activity);
}

/* ---- writing the answer ------------------------------------------------------------------- */

static void put_str(strbuf *j, const char *s)
{
    if (!s) {
        strbuf_puts(j, "null");
        return;
    }
    strbuf_puts(j, "\"");
    strbuf_json_escape(j, s, strlen(s));
    strbuf_puts(j, "\"");
}

/* A number JSON can carry (no NaN or infinity: null then), with up to 6 significant digits
 * past what an integer needs. */
static void put_num(strbuf *j, double v)
{
    if (!isfinite(v)) {
        strbuf_puts(j, "null");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15)
        strbuf_printf(j, "%.0f", v);
    else
        strbuf_printf(j, "%.6g", v);
}

/* "2026-11-24T12:00:00.123Z" */
static void put_time(strbuf *j, int64_t epoch_us)
{
    if (epoch_us <= 0) {
        strbuf_puts(j, "null");
        return;
    }
    time_t secs = (time_t)(epoch_us / 1000000);
    struct tm tm;
    if (!gmtime_r(&secs, &tm)) {
        strbuf_puts(j, "null");
        return;
    }
    char buf[40];
    size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    strbuf_printf(j, "\"%.*s.%03dZ\"", (int)n, buf, (int)((epoch_us / 1000) % 1000));
}

/* The page's customers' database row, by id (NULL when none). */
static int find_row(const PGresult *res, int64_t id)
{
    if (!res)
        return -1;
    for (int i = 0; i < PQntuples(res); i++)
        if (row_i64(res, i, SQL_STATUS_CUSTOMERS_C_CUSTOMER_ID) == id)
            return i;
    return -1;
}

static void put_series(strbuf *j, const uint32_t *v, size_t n)
{
    strbuf_puts(j, "[");
    for (size_t i = 0; i < n; i++)
        strbuf_printf(j, "%s%" PRIu32, i ? "," : "", v[i]);
    strbuf_puts(j, "]");
}

/* How long the page says "recovered at": the leader's memory of the end of a streak. */
#define RECOVERED_SHOWN_US (3600LL * 1000000)

/* The customer's health lifecycle (health.c): ok, failing (its streak recorded: since when, how
 * many failed attempts in a row, and when the health check may disable it at this pace) or
 * disabled (since when), and the end of its latest streak while it reads ok again. A standby
 * has the recorded streak from the database and no count, pace or recovery. */
static void put_health(strbuf *j, const dispatcher *d, const customer *c, const PGresult *res,
                       int row, bool live, int64_t now, int64_t mono)
{
    int64_t since = 0;
    if (live)
        since = is_failing(c) ? customer_health_of(c)->failing_since : 0;
    else if (row >= 0 && !PQgetisnull(res, row, SQL_STATUS_CUSTOMERS_C_FAILING_SINCE_US))
        since = row_i64(res, row, SQL_STATUS_CUSTOMERS_C_FAILING_SINCE_US);
    const char *state = c->disabled ? "disabled" : since > 0 ? "failing" : "ok";
    strbuf_puts(j, ",\"health\":{\"state\":");
    put_str(j, state);
    strbuf_puts(j, ",\"failing_since\":");
    put_time(j, since);
    strbuf_puts(j, ",\"failures_in_a_row\":");
    if (live)
        strbuf_printf(j, "%d", customer_health_of(c)->health_failures);
    else
        strbuf_puts(j, "null");
    strbuf_puts(j, ",\"disabled_at\":");
    put_time(j, c->disabled ? customer_health_of(c)->disabled_at : 0);
    /* Not for a paused customer (the check leaves those alone), nor a held one when the count
     * still has to grow (it sends nothing, so no pace). */
    int64_t expected = 0;
    if (live && since > 0 && !c->disabled && !c->paused_stored) {
        /* Failures are counted since the streak began or this instance loaded the customer. */
        int64_t known = now - (mono - c->known_mono_us);
        status_streak st = {.failing_since_us = since,
                            .failures = customer_health_of(c)->health_failures,
                            .counted_since_us = known > since ? known : since,
                            .disable_after_us = d->cfg.disable_after_ms * 1000,
                            .min_attempts = d->cfg.disable_min_attempts};
        if (!held_reason(c) || st.failures >= st.min_attempts)
            expected = status_disable_estimate(&st, now);
    }
    strbuf_puts(j, ",\"expected_disable_at\":");
    put_time(j, expected);
    strbuf_puts(j, ",\"recovered_at\":");
    bool recovered = live && since == 0 && !c->disabled &&
                     customer_health_of(c)->recovered_at > 0 &&
                     now - customer_health_of(c)->recovered_at < RECOVERED_SHOWN_US;
    put_time(j, recovered ? customer_health_of(c)->recovered_at : 0);
    strbuf_puts(j, "}");
}

/* A customer's latest failure: the leader's own memory of it (an hour at most), else the
 * latest attempt's as the database has it (a standby's row). */
typedef struct last_failure {
    const char *cls;
    int status; /* 0: none */
    int64_t at_us;
    double age_s;
} last_failure;

static bool last_failure_of(const customer *c, const PGresult *res, int row, bool live, int64_t now,
                            int64_t mono, last_failure *out)
{
    const activity *a = c->activity;
    if (live && a && a->error_class[0] && mono - a->error_us < 3600LL * 1000000) {
        *out = (last_failure){.cls = a->error_class,
                              .status = a->error_status > 0 ? a->error_status : 0,
                              .at_us = now - (mono - a->error_us),
                              .age_s = (double)(mono - a->error_us) / 1e6};
        return true;
    }
    if (!live && row >= 0 && !PQgetisnull(res, row, SQL_STATUS_CUSTOMERS_C_LAST_ERROR_CLASS)) {
        double age_s = strtod(PQgetvalue(res, row, SQL_STATUS_CUSTOMERS_C_LAST_ERROR_AGE_S), NULL);
        *out = (last_failure){
            .cls = PQgetvalue(res, row, SQL_STATUS_CUSTOMERS_C_LAST_ERROR_CLASS),
            .status = PQgetisnull(res, row, SQL_STATUS_CUSTOMERS_C_LAST_ERROR_STATUS)
                          ? 0
                          : atoi(PQgetvalue(res, row, SQL_STATUS_CUSTOMERS_C_LAST_ERROR_STATUS)),
            .at_us = now - (int64_t)(age_s * 1e6),
            .age_s = age_s};
        return true;
    }
    return false;
}

/* ,"last_error":{...} or null; with the endpoint's name when given (a customer's entry). */
static void put_last_failure(strbuf *j, const last_failure *f, const char *endpoint)
{
    strbuf_puts(j, ",\"last_error\":");
    if (!f) {
        strbuf_puts(j, "null");
        return;
    }
    strbuf_puts(j, "{\"class\":");
    put_str(j, f->cls);
    strbuf_puts(j, ",\"status\":");
    if (f->status > 0)
        strbuf_printf(j, "%d", f->status);
    else
        strbuf_puts(j, "null");
    strbuf_puts(j, ",\"at\":");
    put_time(j, f->at_us);
    strbuf_puts(j, ",\"age_s\":");
    put_num(j, round(f->age_s * 10) / 10);
    if (endpoint) {
        strbuf_puts(j, ",\"endpoint\":");
        put_str(j, endpoint);
    }
    strbuf_puts(j, "}");
}

/* An endpoint's name within its customer: "crm" of "acme/crm", "default" for its own. */
static const char *endpoint_name(const customer *c)
{
    const char *slash = strchr(c->name, '/');
    return slash ? slash + 1 : "default";
}

/* Its limit windows (limits.c): "limits" as configured ("10/s, 50000/day", "" for none) and,
 * live, each window's sends in its last period ("windows"); its customer's windows over all
 * of its endpoints ("customer_limits"); its host's limit and its share of that host's rate
 * ("host_limit", null for none); the limit its receiver announced (per minute, null for none). */
static void put_window_use(strbuf *j, const slide_limit *l, bool live, int64_t now)
{
    strbuf_puts(j, "[");
    for (int i = 0; i < l->n; i++) {
        char period[32];
        strbuf_printf(j, "%s{\"count\":%" PRId64 ",\"period\":", i ? "," : "", l->w[i].count);
        put_str(j, slide_period_text(l->w[i].period_us, period, sizeof period));
        strbuf_puts(j, ",\"used\":");
        if (live)
            strbuf_printf(j, "%" PRId64, slide_window_used(&l->w[i], now));
        else
            strbuf_puts(j, "null");
        strbuf_puts(j, "}");
    }
    strbuf_puts(j, "]");
}

static void put_limits(strbuf *j, const customer *c, bool live, int64_t now)
{
    char text[256];
    strbuf_puts(j, ",\"limits\":");
    put_str(j, limits_text(customer_limit(c), text, sizeof text));
    strbuf_puts(j, ",\"windows\":");
    put_window_use(j, customer_limit(c), live, now);
    strbuf_puts(j, ",\"customer_limits\":");
    if (c->gate && c->gate->lim.n > 0) {
        put_str(j, limits_text(&c->gate->lim, text, sizeof text));
        strbuf_puts(j, ",\"customer_windows\":");
        put_window_use(j, &c->gate->lim, live, now);
    } else {
        strbuf_puts(j, "\"\",\"customer_windows\":[]");
    }
    const host_limit *hl = c->host ? c->host->limit : NULL;
    strbuf_puts(j, ",\"host_limit\":");
    if (hl && hl->lim.n > 0) {
        strbuf_puts(j, "{\"host\":");
        put_str(j, hl->key);
        strbuf_puts(j, ",\"limits\":");
        put_str(j, limits_text(&hl->lim, text, sizeof text));
        strbuf_puts(j, ",\"share_per_minute\":");
        if (live && customer_thr(c)->host_share > 0)
            put_num(j, round(customer_thr(c)->host_share * 1000) / 1000);
        else
            strbuf_puts(j, "null");
        strbuf_puts(j, "}");
    } else {
        strbuf_puts(j, "null");
    }
    strbuf_puts(j, ",\"announced_rate\":");
    if (live && customer_thr(c)->announced_rate > 0)
        put_num(j, round(customer_thr(c)->announced_rate * 1000) / 1000);
    else
        strbuf_puts(j, "null");
}

/* Receiver hosts with a limit of their own: their windows, sends in each window's last period,
 * the rate divided (after host-wide throttles) and among how many customers. */
static void put_hosts(strbuf *j, dispatcher *d, bool live, int64_t now)
{
    strbuf_puts(j, ",\"hosts\":[");
    size_t pos = 0, m = 0;
    host_limit *hl;
    while ((hl = hmap_next(&d->host_limits, &pos)) != NULL) {
        if (hl->lim.n == 0 && hl->max_connections == 0)
            continue;
        char text[256];
        strbuf_puts(j, m++ ? ",{\"host\":" : "{\"host\":");
        put_str(j, hl->key);
        strbuf_puts(j, ",\"limits\":");
        put_str(j, limits_text(&hl->lim, text, sizeof text));
        strbuf_puts(j, ",\"windows\":");
        put_window_use(j, &hl->lim, live, now);
        strbuf_printf(
            j, ",\"max_connections\":%d,\"rate_per_minute\":", host_limit_connections(d, hl));
        if (live && hl->lim.n > 0)
            put_num(j, round(hl->rate_shared * 1000) / 1000);
        else
            strbuf_puts(j, "null");
        strbuf_printf(j, ",\"customers\":%d,\"throttled\":%s}", live ? hl->active : 0,
                      hl->pace.rate > 0 ? "true" : "false");
    }
    strbuf_puts(j, "]");
}

/* A customer alone (endpoint NULL: then with "endpoints": []), or one endpoint of a customer's
 * entry (its name within the customer as "endpoint"). */
/* Ordered delivery as the last queue-gauge refresh counted it (housekeeping.c): items waiting
 * behind their keys' heads, keys waiting behind a failing head, and of those the longest wait
 * (seconds since its first waiting item's enqueue) and its key. */
#define ORDER_COUNTS_NULL                                                                          \
    "\"waiting\":null,\"blocked_keys\":null,\"blocked_oldest_s\":null,"                            \
    "\"blocked_oldest_key\":null,"
static void put_order_counts(strbuf *j, int64_t waiting, int64_t blocked, int64_t since_us,
                             const char *key, int64_t now)
{
    strbuf_printf(j, ",\"waiting\":%" PRId64 ",\"blocked_keys\":%" PRId64 ",\"blocked_oldest_s\":",
                  waiting, blocked);
    if (blocked > 0 && since_us > 0)
        put_num(j, round((double)(now - since_us) / 1e5) / 10);
    else
        strbuf_puts(j, "null");
    strbuf_puts(j, ",\"blocked_oldest_key\":");
    put_str(j, blocked > 0 ? key : NULL);
}

static void put_customer(strbuf *j, dispatcher *d, const customer *c, const PGresult *res,
                         bool live, int64_t now, int64_t mono, const char *endpoint)
{
    int row = find_row(res, c->id);
    const activity *a = c->activity;
    double eff = effective_rate(c);
    if (!live && row >= 0 && !PQgetisnull(res, row, SQL_STATUS_CUSTOMERS_C_EFFECTIVE_RATE))
        eff = strtod(PQgetvalue(res, row, SQL_STATUS_CUSTOMERS_C_EFFECTIVE_RATE), NULL);
    strbuf_puts(j, "{\"name\":");
    put_str(j, c->name);
    strbuf_puts(j, ",\"mode\":");
    put_str(j, mode_name(c->mode));
    strbuf_puts(j, ",\"rate\":");
    put_num(j, c->rate);
    strbuf_printf(j, ",\"burst\":%d,\"effective_rate\":", c->burst);
    put_num(j, eff);
    strbuf_printf(j, ",\"throttled\":%s",
                  (live ? is_throttled(c, now) : eff < c->rate) ? "true" : "false");
    strbuf_puts(j, ",\"period_ms\":");
    if (c->mode == MODE_SPACED && eff > 0)
        put_num(j, round(60000.0 / eff * 1000) / 1000);
    else
        strbuf_puts(j, "null");
    strbuf_puts(j, ",\"allowance\":");
    if (c->mode == MODE_BATCH)
        put_num(j, c->rate);
    else
        strbuf_puts(j, "null");
    strbuf_printf(j, ",\"max_in_flight\":%d", c->max_in_flight);
    put_limits(j, c, live, now);

    /* Over the window observed, in whole ms: the rate is the count over the window given, so
     * a reader can check one against the other. */
    strbuf_puts(j, ",\"observed_per_minute\":");
    if (live) {
        activity_window w = observed_window(d, c, mono);
        int64_t ms = (w.us + 500) / 1000;
        if (ms >= ACTIVITY_MIN_WINDOW_US / 1000)
            put_num(j, round((double)w.count * 60000.0 / (double)ms * 10) / 10);
        else
            strbuf_puts(j, "null");
        strbuf_printf(j, ",\"observed_count\":%" PRIu64 ",\"observed_window_s\":", w.count);
        put_num(j, (double)ms / 1000);
        strbuf_printf(j, ",\"observed_partial\":%s", w.partial ? "true" : "false");
    } else {
        strbuf_puts(j, "null,\"observed_count\":null,\"observed_window_s\":null,"
                       "\"observed_partial\":null");
    }
    uint32_t series[ACTIVITY_HISTORY];
    strbuf_puts(j, ",\"gaps_ms\":");
    if (live && c->mode != MODE_BATCH)
        put_series(j, series, a ? activity_gaps(a, series, ACTIVITY_HISTORY) : 0);
    else
        strbuf_puts(j, "null");
    strbuf_puts(j, ",\"tick_counts\":");
    if (live && c->mode == MODE_BATCH) {
        int64_t tick = batch_tick_at(&d->cfg, now);
        put_series(j, series, a ? activity_ticks(a, tick, series, ACTIVITY_HISTORY) : 0);
    } else {
        strbuf_puts(j, "null");
    }

    strbuf_puts(j, ",\"in_flight\":");
    if (live)
        strbuf_printf(j, "%d", c->in_flight);
    else
        strbuf_puts(j, "null");
    /* As of the leader's last queue-gauge refresh (counts_at). */
    if (live && c->stat_at_us > 0) {
        strbuf_printf(j, ",\"due\":%" PRId64 ",\"delayed\":%" PRId64 ",\"dead\":%" PRId64,
                      (int64_t)c->stat_due, (int64_t)c->stat_delayed, c->stat_dead);
        strbuf_puts(j, ",\"oldest_due_s\":");
        if (c->stat_oldest_due_us > 0)
            put_num(j, round((double)(now - c->stat_oldest_due_us) / 1e5) / 10);
        else
            strbuf_puts(j, "null");
        put_order_counts(j, c->stat_waiting, c->stat_blocked_keys, c->stat_blocked_since_us,
                         c->stat_blocked_key, now);
        strbuf_puts(j, ",\"counts_at\":");
        put_time(j, c->stat_at_us);
    } else {
        strbuf_puts(
            j,
            ",\"due\":null,\"delayed\":null,\"dead\":null,\"oldest_due_s\":null," ORDER_COUNTS_NULL
            "\"counts_at\":null");
    }

    strbuf_puts(j, ",\"breaker\":");
    put_str(j, breaker_state_name(c->breaker.state));
    strbuf_puts(j, ",\"breaker_open_until\":");
    if (c->breaker.state == BREAKER_OPEN)
        put_time(j, c->breaker.open_until);
    else
        strbuf_puts(j, "null");
    strbuf_printf(j, ",\"paused\":%s,\"disabled\":%s,\"held\":",
                  c->paused_stored && !c->disabled ? "true" : "false",
                  c->disabled ? "true" : "false");
    put_str(j, held_reason(c));
    put_health(j, d, c, res, row, live, now, mono);

    last_failure f;
    put_last_failure(j, last_failure_of(c, res, row, live, now, mono, &f) ? &f : NULL, NULL);
    if (endpoint) {
        strbuf_puts(j, ",\"endpoint\":");
        put_str(j, endpoint);
    } else {
        strbuf_puts(j, ",\"endpoints\":[]");
    }
    strbuf_puts(j, "}");
}

/* Its failing streak's start as the page shows it (put_health), 0 when not failing. */
static int64_t failing_since_of(const customer *c, const PGresult *res, int row, bool live)
{
    if (live)
        return is_failing(c) ? customer_health_of(c)->failing_since : 0;
    if (row >= 0 && !PQgetisnull(res, row, SQL_STATUS_CUSTOMERS_C_FAILING_SINCE_US))
        return row_i64(res, row, SQL_STATUS_CUSTOMERS_C_FAILING_SINCE_US);
    return 0;
}

/* A customer with endpoints (0018): its entry's figures over all of its endpoints' (summed, or
 * the worst of them; what only one endpoint has is null), `problems` counting its endpoints per
 * problem, then `endpoints`, the listed ones each as a customer alone's figures with its name.
 * Endpoints removed while the database answered are left out. */
static void put_group(strbuf *j, dispatcher *d, const page_entry *pe, const PGresult *res,
                      bool live, int64_t now, int64_t mono)
{
    const customer *own = NULL;
    size_t k = 0;
    for (size_t i = 0; i < pe->n_members; i++) {
        customer *c = customer_get(d, pe->members[i]);
        k += c != NULL;
        if (c && c->id == pe->id)
            own = c;
    }
    bool throttled = false, all_paused = k > 0, all_disabled = k > 0, counted = live && k > 0,
         any_partial = false, any_observed = false;
    int in_flight = 0, per[7] = {0};
    int64_t due = 0, delayed = 0, dead = pe->dead, oldest_us = 0, counts_at = 0, since = 0;
    int64_t waiting = 0, blocked = 0, blocked_since = 0;
    const char *blocked_key = NULL;
    uint64_t obs_count = 0;
    int64_t obs_ms = 0;
    double obs_rate = 0;
    breaker_state worst = BREAKER_CLOSED;
    last_failure newest = {0};
    const char *newest_ep = NULL;
    static const unsigned flags[7] = {STATUS_DISABLED,     STATUS_HELD,   STATUS_FAILING,
                                      STATUS_BREAKER_OPEN, STATUS_PAUSED, STATUS_THROTTLED,
                                      STATUS_HALF_OPEN};
    static const char *const flag_names[7] = {"disabled", "held",      "failing",  "breaker_open",
                                              "paused",   "throttled", "half_open"};
    for (size_t i = 0; i < pe->n_members; i++) {
        const customer *c = customer_get(d, pe->members[i]);
        if (!c)
            continue;
        int row = find_row(res, c->id);
        double eff = effective_rate(c);
        if (!live && row >= 0 && !PQgetisnull(res, row, SQL_STATUS_CUSTOMERS_C_EFFECTIVE_RATE))
            eff = strtod(PQgetvalue(res, row, SQL_STATUS_CUSTOMERS_C_EFFECTIVE_RATE), NULL);
        throttled = throttled || (live ? is_throttled(c, now) : eff < c->rate);
        all_paused = all_paused && c->paused_stored && !c->disabled;
        all_disabled = all_disabled && c->disabled;
        in_flight += c->in_flight;
        unsigned pr = problems(c, now, live);
        for (int f = 0; f < 7; f++)
            per[f] += (pr & flags[f]) != 0;
        if (c->breaker.state == BREAKER_OPEN ||
            (c->breaker.state == BREAKER_HALF_OPEN && worst == BREAKER_CLOSED))
            worst = c->breaker.state;
        int64_t fs = failing_since_of(c, res, row, live);
        if (fs > 0 && (since == 0 || fs < since))
            since = fs;
        if (live) {
            activity_window w = observed_window(d, c, mono);
            int64_t ms = (w.us + 500) / 1000;
            obs_count += w.count;
            obs_ms = ms > obs_ms ? ms : obs_ms;
            any_partial = any_partial || w.partial;
            if (ms >= ACTIVITY_MIN_WINDOW_US / 1000) {
                obs_rate += round((double)w.count * 60000.0 / (double)ms * 10) / 10;
                any_observed = true;
            }
        }
        if (c->stat_at_us <= 0)
            counted = false;
        due += c->stat_due;
        delayed += c->stat_delayed;
        dead += c->stat_dead;
        waiting += c->stat_waiting;
        blocked += c->stat_blocked_keys;
        if (c->stat_blocked_since_us > 0 &&
            (blocked_since == 0 || c->stat_blocked_since_us < blocked_since)) {
            blocked_since = c->stat_blocked_since_us;
            blocked_key = c->stat_blocked_key;
        }
        if (c->stat_oldest_due_us > 0 && (oldest_us == 0 || c->stat_oldest_due_us < oldest_us))
            oldest_us = c->stat_oldest_due_us;
        if (counts_at == 0 || c->stat_at_us < counts_at)
            counts_at = c->stat_at_us;
        last_failure f;
        if (last_failure_of(c, res, row, live, now, mono, &f) &&
            (!newest_ep || f.at_us > newest.at_us)) {
            newest = f;
            newest_ep = endpoint_name(c);
        }
    }

    strbuf_puts(j, "{\"name\":");
    put_str(j, pe->name);
    strbuf_puts(j, ",\"mode\":");
    put_str(j, pe->mode[0] ? pe->mode : NULL);
    strbuf_puts(j, ",\"rate\":");
    if (pe->rate > 0)
        put_num(j, pe->rate);
    else
        strbuf_puts(j, "null");
    strbuf_puts(j, ",\"burst\":");
    if (own)
        strbuf_printf(j, "%d", own->burst);
    else
        strbuf_puts(j, "null");
    /* The limit is shared; each endpoint has its own effective rate. */
    strbuf_printf(j,
                  ",\"effective_rate\":null,\"throttled\":%s,\"period_ms\":null,"
                  "\"allowance\":null,\"max_in_flight\":null",
                  throttled ? "true" : "false");
    strbuf_puts(j, ",\"observed_per_minute\":");
    if (live) {
        if (any_observed)
            put_num(j, round(obs_rate * 10) / 10);
        else
            strbuf_puts(j, "null");
        strbuf_printf(j, ",\"observed_count\":%" PRIu64 ",\"observed_window_s\":", obs_count);
        put_num(j, (double)obs_ms / 1000);
        strbuf_printf(j, ",\"observed_partial\":%s", any_partial ? "true" : "false");
    } else {
        strbuf_puts(j, "null,\"observed_count\":null,\"observed_window_s\":null,"
                       "\"observed_partial\":null");
    }
    strbuf_puts(j, ",\"gaps_ms\":null,\"tick_counts\":null,\"in_flight\":");
    if (live)
        strbuf_printf(j, "%d", in_flight);
    else
        strbuf_puts(j, "null");
    if (counted) {
        strbuf_printf(j, ",\"due\":%" PRId64 ",\"delayed\":%" PRId64 ",\"dead\":%" PRId64, due,
                      delayed, dead);
        strbuf_puts(j, ",\"oldest_due_s\":");
        if (oldest_us > 0)
            put_num(j, round((double)(now - oldest_us) / 1e5) / 10);
        else
            strbuf_puts(j, "null");
        put_order_counts(j, waiting, blocked, blocked_since, blocked_key, now);
        strbuf_puts(j, ",\"counts_at\":");
        put_time(j, counts_at);
    } else {
        strbuf_puts(
            j,
            ",\"due\":null,\"delayed\":null,\"dead\":null,\"oldest_due_s\":null," ORDER_COUNTS_NULL
            "\"counts_at\":null");
    }
    strbuf_puts(j, ",\"breaker\":");
    put_str(j, breaker_state_name(worst));
    strbuf_printf(j, ",\"breaker_open_until\":null,\"paused\":%s,\"disabled\":%s,\"held\":null",
                  all_paused ? "true" : "false", all_disabled ? "true" : "false");
    /* The worst of its endpoints' health: disabled (every one), failing (one at least, since
     * the earliest streak), else ok. */
    strbuf_puts(j, ",\"health\":{\"state\":");
    put_str(j, all_disabled ? "disabled" : since > 0 || per[0] > 0 ? "failing" : "ok");
    strbuf_puts(j, ",\"failing_since\":");
    put_time(j, since);
    strbuf_puts(j, ",\"failures_in_a_row\":null,\"disabled_at\":null,"
                   "\"expected_disable_at\":null,\"recovered_at\":null}");
    put_last_failure(j, newest_ep ? &newest : NULL, newest_ep);
    strbuf_puts(j, ",\"problems\":{");
    for (int f = 0; f < 7; f++)
        strbuf_printf(j, "%s\"%s\":%d", f ? "," : "", flag_names[f], per[f]);
    strbuf_printf(j, "},\"endpoints_total\":%zu,\"endpoints\":[", k);
    for (size_t i = 0, listed = 0; i < pe->n_listed; i++) {
        const customer *c = customer_get(d, pe->members[i]);
        if (!c)
            continue;
        if (listed++)
            strbuf_puts(j, ",");
        put_customer(j, d, c, res, live, now, mono, endpoint_name(c));
    }
    strbuf_puts(j, "]}");
}

typedef struct carrier_rank {
    const carrier_state *cs;
} carrier_rank;

static int carrier_cmp(const void *pa, const void *pb)
{
    const carrier_state *a = ((const carrier_rank *)pa)->cs, *b = ((const carrier_rank *)pb)->cs;
    if (a->in_flight != b->in_flight)
        return a->in_flight > b->in_flight ? -1 : 1;
    return strcmp(a->name, b->name);
}

static void put_carriers(strbuf *j, dispatcher *d)
{
    size_t n = d->carriers.n, m = 0, pos = 0;
    carrier_rank *all = n ? malloc(n * sizeof *all) : NULL;
    carrier_state *cs;
    /* "" is the items without a carrier: not a carrier an operator set. */
    while (all && (cs = hmap_next(&d->carriers, &pos)) != NULL && m < n)
        if (cs->name[0])
            all[m++] = (carrier_rank){cs};
    if (m > 1)
        qsort(all, m, sizeof *all, carrier_cmp);
    strbuf_puts(j, ",\"carriers\":[");
    for (size_t i = 0; i < m && i < STATUS_MAX_CARRIERS; i++) {
        const carrier_state *c = all[i].cs;
        strbuf_puts(j, i ? ",{\"name\":" : "{\"name\":");
        put_str(j, c->name);
        strbuf_printf(j, ",\"max_per_round\":%d,\"max_in_flight\":%d,\"in_flight\":%d}",
                      c->max_per_round > 0 ? c->max_per_round : d->cfg.carrier_max_per_round,
                      c->max_in_flight > 0 ? c->max_in_flight : d->cfg.carrier_max_in_flight,
                      c->in_flight);
    }
    /* Without the memory to sort them, none are listed. */
    strbuf_printf(j, "],\"carriers_total\":%zu", m);
    free(all);
}

static void put_instances(strbuf *j, const PGresult *res, const char **leader)
{
    strbuf_puts(j, ",\"instances\":[");
    for (int i = 0; res && i < PQntuples(res); i++) {
        bool leads = PQgetvalue(res, i, SQL_STATUS_INSTANCES_C_LEADER)[0] == 't';
        if (leads && !*leader)
            *leader = PQgetvalue(res, i, SQL_STATUS_INSTANCES_C_INSTANCE);
        strbuf_puts(j, i ? ",{\"instance\":" : "{\"instance\":");
        put_str(j, PQgetvalue(res, i, SQL_STATUS_INSTANCES_C_INSTANCE));
        strbuf_printf(j, ",\"role\":\"%s\",\"pid\":%s,\"client\":", leads ? "leader" : "standby",
                      PQgetvalue(res, i, SQL_STATUS_INSTANCES_C_PID));
        put_str(j, PQgetvalue(res, i, SQL_STATUS_INSTANCES_C_CLIENT));
        strbuf_puts(j, ",\"since\":");
        put_time(j, row_i64(res, i, SQL_STATUS_INSTANCES_C_SINCE_US));
        strbuf_puts(j, "}");
    }
    strbuf_puts(j, "]");
}

/* This instance's name as pgpace.instance shows it: the resolved one (host:pid when
 * instance_name is not set), cut as its application_name is. */
static const char *instance_name(const dispatcher *d)
{
    const char *prefix = "pgpace:";
    return strncmp(d->app_name, prefix, strlen(prefix)) == 0 ? d->app_name + strlen(prefix)
                                                             : d->instance;
}

static void status_answer(status_req *r)
{
    dispatcher *d = r->d;
    int64_t now = now_us(), mono = timebase_mono_us();
    bool live = is_leading(d);
    /* A standby's page also needs the customers' statement (it may have had none to ask). */
    bool db = !r->db_failed && r->instances;
    admin_http_readiness rd;
    admin_readiness(d, &rd);
    strbuf j = {0};
    strbuf_puts(&j, "{\"version\":");
    put_str(&j, PGPACE_VERSION);
    strbuf_puts(&j, ",\"generated_at\":");
    put_time(&j, now);
    strbuf_puts(&j, ",\"instance\":");
    put_str(&j, instance_name(d));
    strbuf_puts(&j, ",\"role\":");
    put_str(&j, rd.role);
    strbuf_printf(&j, ",\"database\":\"%s\",\"live\":%s,\"poll_ms\":%d,\"batch_tick_ms\":%d",
                  db ? "ok" : "unreachable", live ? "true" : "false", STATUS_POLL_MS,
                  d->cfg.batch_tick_ms);
    /* The health check's rule (status_health.h), which expected_disable_at follows. */
    strbuf_puts(&j, ",\"health_rules\":{\"disable_after_s\":");
    if (d->cfg.disable_after_ms > 0)
        put_num(&j, (double)d->cfg.disable_after_ms / 1000);
    else
        strbuf_puts(&j, "null");
    strbuf_printf(
        &j, ",\"disable_min_attempts\":%d,\"check_interval_s\":", d->cfg.disable_min_attempts);
    put_num(&j, (double)d->cfg.health_check_ms / 1000);
    strbuf_puts(&j, "}");
    const char *leader = live ? instance_name(d) : NULL;
    put_instances(&j, db ? r->instances : NULL, &leader);
    strbuf_puts(&j, ",\"leader\":");
    put_str(&j, leader);

    strbuf_printf(&j,
                  ",\"totals\":{\"customers\":%zu,\"endpoints\":%zu,\"matched\":%zu,"
                  "\"paused\":%d,\"disabled\":%d,\"held\":%d,\"breaker_open\":%d,\"throttled\":",
                  r->total, r->endpoints, r->matched, r->paused, r->disabled, r->held,
                  r->breaker_open);
    /* Throttling is the leader's (a standby paces nothing: its own count would be 0), as is
     * what is in flight. */
    if (live)
        strbuf_printf(&j, "%d,\"failing\":%d,\"in_flight\":%d", r->throttled, r->failing,
                      d->in_flight);
    else
        strbuf_puts(&j, "null,\"failing\":null,\"in_flight\":null");
    bool totals = live && d->status_totals_us > 0;
    strbuf_puts(&j, ",\"due\":");
    if (totals)
        put_num(&j, d->status_due);
    else
        strbuf_puts(&j, "null");
    strbuf_puts(&j, ",\"dead_letters\":");
    if (totals)
        put_num(&j, d->status_dead);
    else
        strbuf_puts(&j, "null");
    strbuf_puts(&j, ",\"totals_at\":");
    put_time(&j, totals ? d->status_totals_us : 0);
    strbuf_puts(&j, "}");

    strbuf_printf(&j,
                  ",\"page\":{\"offset\":%ld,\"limit\":%d,\"sort\":\"%s\",\"filter\":", r->q.offset,
                  r->q.limit, status_sort_spelling(r->q.sort, r->q.descending));
    put_str(&j, r->q.filter);
    strbuf_puts(&j, "},\"customers\":[");
    size_t listed = 0;
    for (size_t i = 0; i < r->n_page; i++) {
        const page_entry *pe = &r->page[i];
        customer *c = pe->group ? NULL : customer_get(d, pe->id);
        if (!pe->group && !c)
            continue; /* removed while the database answered */
        if (listed++)
            strbuf_puts(&j, ",");
        if (pe->group)
            put_group(&j, d, pe, db ? r->customers : NULL, live, now, mono);
        else
            put_customer(&j, d, c, db ? r->customers : NULL, live, now, mono, NULL);
    }
    strbuf_puts(&j, "]");
    put_carriers(&j, d);
    put_hosts(&j, d, is_leading(d), now_us());
    strbuf_puts(&j, "}");
    const char *text = strbuf_str(&j);
    if (text && !j.failed)
        admin_http_reply_send(r->reply, 200, text);
    else
        admin_http_reply_send(r->reply, 500, "{\"error\":\"out of memory\"}");
    strbuf_free(&j);
}

static void status_req_free(status_req *r)
{
    if (r->instances)
        PQclear(r->instances);
    if (r->customers)
        PQclear(r->customers);
    for (size_t i = 0; i < r->n_page; i++)
        free(r->page[i].members);
    free(r->page);
    free(r->ids);
    free(r);
}

/* One statement's result: kept until the other's arrives, then the answer. */
static void status_result(status_req *r, PGresult *res, PGresult **slot, int ncols,
                          const char *what)
{
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && rows_shape_ok(res, ncols, what)) {
        pgconn_keep_result(r->d->db);
        *slot = res;
    } else {
        if (res)
            LOG_WARN("status_statement_failed", LOG_S("what", what),
                     LOG_S("error", PQresultErrorMessage(res)));
        r->db_failed = true;
    }
    if (--r->outstanding > 0)
        return;
    r->d->status_pending--;
    status_answer(r);
    status_req_free(r);
}

static void on_status_instances(pgconn *conn, PGresult *res, void *arg)
{
    status_req *r = arg;
    status_result(r, res, &r->instances, SQL_STATUS_INSTANCES_NCOLS, "status instances");
}

static void on_status_customers(pgconn *conn, PGresult *res, void *arg)
{
    status_req *r = arg;
    status_result(r, res, &r->customers, SQL_STATUS_CUSTOMERS_NCOLS, "status customers");
}

/* The page's ids as an int8[] literal. */
static int ids_param(const status_req *r, strbuf *out)
{
    strbuf_puts(out, "{");
    for (size_t i = 0; i < r->n_ids; i++) {
        if (i)
            strbuf_puts(out, ",");
        strbuf_put_i64(out, r->ids[i]);
    }
    strbuf_puts(out, "}");
    return strbuf_str(out) ? 0 : -ENOMEM;
}

void admin_status(void *arg, const char *query, admin_http_reply *reply)
{
    dispatcher *d = arg;
    status_req *r = calloc(1, sizeof *r);
    if (!r) {
        admin_http_reply_send(reply, 500, "{\"error\":\"out of memory\"}");
        return;
    }
    r->d = d;
    r->reply = reply;
    char err[160];
    if (status_query_parse(query, &r->q, err, sizeof err) != 0) {
        strbuf j = {0};
        strbuf_puts(&j, "{\"error\":");
        put_str(&j, err);
        strbuf_puts(&j, "}");
        const char *text = strbuf_str(&j);
        admin_http_reply_send(reply, 400, text && !j.failed ? text : "{\"error\":\"bad query\"}");
        strbuf_free(&j);
        status_req_free(r);
        return;
    }
    if (choose_page(d, r) != 0) {
        admin_http_reply_send(reply, 500, "{\"error\":\"out of memory\"}");
        status_req_free(r);
        return;
    }
    if (!pgconn_ready(d->db)) {
        r->db_failed = true;
        status_answer(r);
        status_req_free(r);
        return;
    }
    if (d->status_pending >= STATUS_MAX_PENDING) {
        admin_http_reply_send(reply, 503, "{\"error\":\"too many status requests at once\"}");
        status_req_free(r);
        return;
    }
    /* The leader has what the page's customers need in memory; a standby asks. */
    bool ask_customers = !is_leading(d) && r->n_ids > 0;
    strbuf ids = {0};
    if (ask_customers && ids_param(r, &ids) != 0) {
        strbuf_free(&ids);
        admin_http_reply_send(reply, 500, "{\"error\":\"out of memory\"}");
        status_req_free(r);
        return;
    }
    r->outstanding = ask_customers ? 2 : 1;
    d->status_pending++;
    if (DSP_QUERY0(d, status_instances, on_status_instances, r, "status instances") != 0) {
        d->status_pending--;
        r->db_failed = true;
        strbuf_free(&ids);
        status_answer(r);
        status_req_free(r);
        return;
    }
    if (ask_customers) {
        const char *params[] = {[SQL_STATUS_CUSTOMERS_P_IDS] = strbuf_str(&ids)};
        if (DSP_QUERY(d, status_customers, params, on_status_customers, r, "status customers") !=
            0) {
            /* The instances' callback will come: it answers, without the customers' rows. */
            r->db_failed = true;
            r->outstanding--;
        }
    }
    strbuf_free(&ids);
}
