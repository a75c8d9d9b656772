/* limits.c - limits as receivers state them: the COUNT/PERIOD windows (slide.h) of endpoints,
 * of customers over all their endpoints (beside the tenant gate's GCRA cell) and of receiver
 * hosts (pgpace.host), and the division of a host's rate among the customers waiting for it.
 *
 * Three records keep every window exact:
 * - a send is recorded in each window it counts against when it goes on the wire, and none goes
 *   before every window allows it (delivery_send asks limits_send_at; a too-early one waits in
 *   the slot heap);
 * - a round asks no more than the windows' room less what is already claimed and not sent
 *   (`unsent`), asked by claims in flight (`claiming`, the tenant gate's `reserved`) or by the
 *   round's other claimants (`considering`): what is claimed can be sent soon, not in a burst
 *   that would make the windows hold it;
 * - a new leader resumes every window from the attempt log and the claims still leased
 *   (run_limit_history.sql) before it claims, so a failover or a restart frees nothing early.
 *
 * A host's rate (its shortest window's, lowered by host-wide throttles) is divided among its
 * active customers by weighted max-min fairness (share_rates): each gets at least its weighted
 * share, what one cannot use goes to the others, and none more than its own rate. A customer's
 * share bounds its pace (customer_effective_rate), so spaced customers keep even spacing at it;
 * the host's windows stay the bound on the sends themselves.
 */
#include "internal.h"

#include "gcra.h"
#include "log.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How often the host limits' rates are divided again while some have customers. */
#define DIVIDE_EVERY_MS 200
/* Throttles of different customers of one host this close together, with no success from the
 * host between them, are about the host. */
#define HOST_THROTTLE_WINDOW_US 1000000
/* How far back the attempt log is read at takeover: the longest window, never more than this. */
#define HISTORY_MAX_US (7LL * 86400 * 1000000)

const char *limits_text(const slide_limit *l, char *buf, size_t len)
{
    return slide_limit_text(l, buf, len);
}

/* Replaces *l's windows by those of `machine`, keeping what was sent when they differ. */
static void limit_set(slide_limit *l, const char *machine, const char *who, const char *name)
{
    slide_limit next;
    if (slide_limit_parse(machine ? machine : "", &next) != 0) {
        /* The table's constraint refuses such; a newer schema's form an older binary cannot
         * read keeps the windows it had rather than send without them. */
        LOG_ERROR("limit_windows_invalid", LOG_S(who, name), LOG_S("windows", machine),
                  LOG_S("action", "kept the windows it had"));
        return;
    }
    slide_limit_guard(&next);
    if (slide_limit_same(l, &next)) {
        slide_limit_free(&next);
        return;
    }
    slide_limit_carry(&next, l);
    *l = next;
}

const slide_limit *customer_limit(const customer *c)
{
    static const slide_limit none;
    return c->lim ? c->lim : &none;
}

/* A customer's own windows live out of line, made when it has some (a slide_limit is 584 bytes;
 * at 1,000,000 customers without windows, half a gigabyte) and freed when it has none again. */
static void customer_limit_set(customer *c, const char *machine)
{
    if (!c->lim) {
        if (!machine || !*machine)
            return;
        c->lim = calloc(1, sizeof *c->lim);
        if (!c->lim) {
            LOG_ERROR("out_of_memory", LOG_S("where", "limit windows"), LOG_S("customer", c->name),
                      LOG_S("action", "kept the windows it had"));
            return;
        }
    }
    limit_set(c->lim, machine, "customer", c->name);
    if (c->lim->n == 0) {
        slide_limit_free(c->lim);
        free(c->lim);
        c->lim = NULL;
    }
}

void limits_customer_apply(customer *c, const customer_row *row)
{
    customer_limit_set(c, row->limit_windows);
    /* Paced at its shortest window's rate when that is lower than its own (run_customers.sql
     * returns the lower of the two already; this adds the guard, so that sends spaced evenly
     * never wait for the window). */
    double windows_rate = slide_limit_rate(customer_limit(c));
    if (windows_rate > 0 && windows_rate < c->rate) {
        c->rate = windows_rate;
        customer_pace_period(c);
    }
    if (c->gate)
        limit_set(&c->gate->lim, row->tenant_limit_windows, "customer", c->name);
    c->ratelimit_headers = row->ratelimit_headers;
    if (!c->ratelimit_headers && c->thr) {
        c->thr->announced_rate = 0;
        c->thr->announce_reset_max_s = 0;
        c->thr->announced_until_us = 0;
    }
}

static int64_t host_pending(const host_limit *hl)
{
    return (int64_t)hl->unsent + hl->claiming + hl->considering;
}

static int64_t gate_pending(const tenant_gate *g)
{
    return (int64_t)g->unsent + g->reserved + g->considering;
}

/* The limits a send of c to host h counts against, with what is pending against each (claimed
 * or asked, not yet sent): its own windows, its customer's, its host's. Returns how many. */
typedef struct covering {
    const slide_limit *lim;
    int64_t pending;
} covering;

static int covering_limits(const customer *c, const host_state *h, covering out[3])
{
    int n = 0;
    if (c && c->lim && c->lim->n > 0)
        out[n++] = (covering){c->lim, (int64_t)c->unsent + c->claiming};
    if (c && c->gate && c->gate->lim.n > 0)
        out[n++] = (covering){&c->gate->lim, gate_pending(c->gate)};
    const host_limit *hl = h ? h->limit : NULL;
    if (hl && hl->lim.n > 0)
        out[n++] = (covering){&hl->lim, host_pending(hl)};
    return n;
}

int limits_allow(const customer *c, int64_t now, int want)
{
    if (want <= 0)
        return want;
    covering cv[3];
    int n = covering_limits(c, c->host, cv);
    int64_t room = want;
    for (int i = 0; i < n; i++) {
        int64_t r = slide_limit_room(cv[i].lim, now, cv[i].pending);
        if (r < room)
            room = r;
    }
    return (int)room;
}

/* When one more fits on top of `pending`; when pending alone fills a window (it will be sent
 * soon, then the customer looks again), when the window frees one at all. */
static int64_t free_at(const slide_limit *l, int64_t now, int64_t pending)
{
    int64_t at = slide_limit_free_at(l, now, pending, 1);
    if (at != SLIDE_NEVER)
        return at;
    at = slide_limit_free_at(l, now, 0, 1);
    int64_t soon = now + 10000;
    return at != SLIDE_NEVER && at > soon ? at : soon;
}

int64_t limits_due(const customer *c, int64_t now)
{
    covering cv[3];
    int n = covering_limits(c, c->host, cv);
    int64_t at = INT64_MIN;
    for (int i = 0; i < n; i++) {
        int64_t t = free_at(cv[i].lim, now, cv[i].pending);
        if (t > at)
            at = t;
    }
    return at;
}

int64_t limits_send_at(const customer *c, const host_state *h, int64_t now)
{
    covering cv[3];
    int n = covering_limits(c, h, cv);
    int64_t at = now;
    for (int i = 0; i < n; i++) {
        /* Nothing pending counts here: this send is one of them, and goes first if it fits. */
        int64_t t = slide_limit_free_at(cv[i].lim, now, 0, 1);
        if (t > at)
            at = t;
    }
    return at;
}

static void record(slide_limit *l, int64_t at, const char *what)
{
    if (l->n > 0 && slide_limit_record(l, at, 1) != 0)
        LOG_ERROR("out_of_memory", LOG_S("where", what)); /* merged: held a little longer */
}

void limits_sent(customer *c, host_state *h, int64_t at)
{
    if (c) {
        if (c->lim)
            record(c->lim, at, "limit windows");
        if (c->gate)
            record(&c->gate->lim, at, "limit windows");
    }
    if (h && h->limit)
        record(&h->limit->lim, at, "host limit windows");
}

static void add_clamped(int *v, int delta)
{
    *v += delta;
    if (*v < 0)
        *v = 0;
}

void limits_unsent(customer *c, host_state *h, int delta)
{
    if (c) {
        add_clamped(&c->unsent, delta);
        if (c->gate)
            add_clamped(&c->gate->unsent, delta);
    }
    if (h && h->limit)
        add_clamped(&h->limit->unsent, delta);
}

int host_limit_connections(const dispatcher *d, const host_limit *hl)
{
    int max = d->cfg.max_host_connections;
    if (hl && hl->max_connections > 0 && hl->max_connections < max)
        max = hl->max_connections;
    return max;
}

int host_max_connections(const dispatcher *d, const host_state *h)
{
    return host_limit_connections(d, h ? h->limit : NULL);
}

/* ---- hosts: rows, matching ---------------------------------------------------------------- */

/* The lower-case host and port of a host key "scheme://authority" (port from the scheme when
 * the authority has none). false when it does not look like one. */
static bool split_authority(const char *key, char *host, size_t len, int *port)
{
    const char *auth = strstr(key, "://");
    if (!auth)
        return false;
    bool https = auth - key == 5 && strncmp(key, "https", 5) == 0;
    auth += 3;
    const char *colon;
    if (*auth == '[') {
        const char *close = strchr(auth, ']');
        if (!close)
            return false;
        colon = close[1] == ':' ? close + 1 : NULL;
        size_t n = (size_t)(close + 1 - auth);
        if (n >= len)
            return false;
        memcpy(host, auth, n);
        host[n] = '\0';
    } else {
        colon = strchr(auth, ':');
        size_t n = colon ? (size_t)(colon - auth) : strlen(auth);
        if (n >= len)
            return false;
        memcpy(host, auth, n);
        host[n] = '\0';
    }
    *port = colon ? atoi(colon + 1) : https ? 443 : 80;
    return true;
}

void limits_host_match(dispatcher *d, host_state *h)
{
    char host[300], key[320];
    int port;
    h->limit = NULL;
    if (!split_authority(h->key, host, sizeof host, &port))
        return;
    snprintf(key, sizeof key, "%s:%d", host, port);
    host_limit *hl = hmap_get(&d->host_limits, key, strlen(key));
    if (!hl || (hl->lim.n == 0 && hl->max_connections == 0))
        hl = hmap_get(&d->host_limits, host, strlen(host));
    if (hl && (hl->lim.n > 0 || hl->max_connections > 0))
        h->limit = hl;
}

static void match_all(dispatcher *d)
{
    size_t pos = 0;
    host_state *h;
    while ((h = hmap_next(&d->hosts, &pos)) != NULL)
        limits_host_match(d, h);
}

static host_limit *host_limit_get(dispatcher *d, const char *key)
{
    host_limit *hl = hmap_get(&d->host_limits, key, strlen(key));
    if (hl)
        return hl;
    hl = calloc(1, sizeof *hl);
    if (!hl || !(hl->key = strdup(key)) || hmap_put(&d->host_limits, key, strlen(key), hl) != 0) {
        if (hl)
            free(hl->key);
        free(hl);
        return NULL;
    }
    return hl;
}

typedef struct hosts_ctx {
    dispatcher *d;
    char *only; /* the host a NOTIFY named, or NULL: all */
} hosts_ctx;

static void on_hosts(pgconn *conn, PGresult *res, void *arg)
{
    hosts_ctx *ctx = arg;
    dispatcher *d = ctx->d;
    (void)conn;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_HOSTS_NCOLS, "hosts")) {
        if (res)
            LOG_WARN("host_limits_not_loaded", LOG_S("error", PQresultErrorMessage(res)));
        free(ctx->only);
        free(ctx);
        return; /* a reconnect loads them all again */
    }
    /* Rows absent from a full load (or the one named) are gone: emptied. */
    size_t pos = 0;
    host_limit *hl;
    while ((hl = hmap_next(&d->host_limits, &pos)) != NULL) {
        if (ctx->only && strcmp(ctx->only, hl->key) != 0)
            continue;
        bool found = false;
        for (int r = 0; r < PQntuples(res) && !found; r++)
            found = strcmp(PQgetvalue(res, r, SQL_RUN_HOSTS_C_HOST), hl->key) == 0;
        if (!found) {
            limit_set(&hl->lim, "", "host", hl->key);
            hl->max_connections = 0;
        }
    }
    for (int r = 0; r < PQntuples(res); r++) {
        host_row row;
        host_row_parse(res, r, &row);
        hl = host_limit_get(d, row.host);
        if (!hl) {
            LOG_ERROR("out_of_memory", LOG_S("where", "host limit"));
            continue;
        }
        char was[160], now_text[160];
        slide_limit_text(&hl->lim, was, sizeof was);
        limit_set(&hl->lim, row.limit_windows, "host", row.host);
        hl->max_connections = row.max_connections;
        slide_limit_text(&hl->lim, now_text, sizeof now_text);
        if (strcmp(was, now_text) != 0)
            LOG_INFO("host_limit", LOG_S("host", row.host), LOG_S("limit", now_text),
                     LOG_I("max_connections", row.max_connections));
    }
    match_all(d);
    free(ctx->only);
    free(ctx);
    limits_arm(d);
    claim_arm(d);
}

void limits_hosts_load(dispatcher *d, const char *host)
{
    hosts_ctx *ctx = calloc(1, sizeof *ctx);
    strbuf arr = {0};
    if (!ctx) {
        LOG_ERROR("out_of_memory", LOG_S("where", "host limits"));
        return;
    }
    ctx->d = d;
    const char *params[1] = {NULL};
    if (host) {
        if (!(ctx->only = strdup(host))) {
            free(ctx);
            return;
        }
        strbuf_puts(&arr, "{");
        strbuf_array_text(&arr, host); /* a text[] of one element */
        strbuf_puts(&arr, "}");
        params[0] = strbuf_str(&arr);
    }
    if ((host && !params[0]) ||
        DSP_QUERY(d, run_hosts, params, on_hosts, ctx, "host limits") != 0) {
        free(ctx->only);
        free(ctx);
    }
    strbuf_free(&arr);
}

/* ---- the division of a host's rate --------------------------------------------------------- */

/* The rate a host limit divides: its shortest window's, as host-wide throttles left it. */
static double host_rate(const host_limit *hl)
{
    double configured = slide_limit_rate(&hl->lim);
    return pace_rate(&hl->pace, configured);
}

typedef struct divide_scratch {
    customer **who;
    double *demand, *weight, *share;
    size_t n, cap;
} divide_scratch;

static bool scratch_push(divide_scratch *s, customer *c, double demand, double weight)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        customer **who = realloc(s->who, cap * sizeof *who);
        if (who)
            s->who = who;
        double *dm = who ? realloc(s->demand, cap * sizeof *dm) : NULL;
        if (dm)
            s->demand = dm;
        double *wt = dm ? realloc(s->weight, cap * sizeof *wt) : NULL;
        if (wt)
            s->weight = wt;
        double *sh = wt ? realloc(s->share, cap * sizeof *sh) : NULL;
        if (sh)
            s->share = sh;
        if (!sh)
            return false;
        s->cap = cap;
    }
    s->who[s->n] = c;
    s->demand[s->n] = demand;
    s->weight[s->n] = weight;
    s->n++;
    return true;
}

static void set_share(dispatcher *d, customer *c, double share)
{
    double was = customer_thr(c)->host_share;
    if (was == share)
        return;
    throttle_state *t = customer_thr_mut(c);
    if (!t)
        return; /* its share is not applied: paced as before (logged) */
    bool rose = was > 0 && (share == 0 || share > was);
    t->host_share = share;
    throttle_apply(d, c);
    if (rose)
        customer_schedule(d, c);
}

/* The customers on one host_state's lists. */
static void collect(dispatcher *d, host_state *h, host_limit *hl, int64_t now, divide_scratch *s)
{
    for (int list = 0; list < 2; list++) {
        int64_t *ids = list ? h->workq_ids : h->spaced_ids;
        size_t n = list ? h->n_workq : h->n_spaced;
        for (size_t i = 0; i < n; i++) {
            customer *c = customer_get(d, ids[i]);
            if (!c)
                continue;
            /* Held by its own windows (a day's quota used up) for more than a second: it cannot
             * use a share meanwhile, so the others get it. */
            int64_t own_windows =
                c->lim && c->lim->n > 0 ? slide_limit_free_at(c->lim, now, c->unsent, 1) : now;
            if (!customer_active(c, now) || own_windows > now + 1000000) {
                set_share(d, c, 0);
                continue;
            }
            /* What it would send without the host's limit; a work queue: as much as it gets. */
            const throttle_state *t = customer_thr(c);
            double own = c->mode == MODE_UNLIMITED ? INFINITY : pace_rate(&t->pace, c->rate);
            if (t->announced_rate > 0 && t->announced_rate < own)
                own = t->announced_rate;
            if (!scratch_push(s, c, own, claim_weight(c)))
                LOG_ERROR("out_of_memory", LOG_S("where", "host limit division"),
                          LOG_S("host", hl->key));
        }
    }
}

static void divide_host(dispatcher *d, host_limit *hl, int64_t now, divide_scratch *s)
{
    /* A division visits every customer of the host: as often as the hosts' other recounts
     * (internal.h), so a host of 100,000 customers costs about 1 % of a core, not a pass of
     * them five times a second. */
    size_t pos = 0, customers = 0;
    host_state *h;
    while ((h = hmap_next(&d->hosts, &pos)) != NULL)
        if (h->limit == hl)
            customers += h->n_spaced + h->n_workq;
    if (!recount_due(now, hl->divided_us, customers))
        return;
    s->n = 0;
    pos = 0;
    while ((h = hmap_next(&d->hosts, &pos)) != NULL)
        if (h->limit == hl)
            collect(d, h, hl, now, s);
    double rate = host_rate(hl);
    if (share_rates(s->demand, s->weight, s->n, rate, s->share) != 0) {
        /* Not divided this time: each keeps its own pace; the host's windows still hold. */
        LOG_ERROR("out_of_memory", LOG_S("where", "host limit division"), LOG_S("host", hl->key));
        for (size_t i = 0; i < s->n; i++)
            s->share[i] = s->demand[i];
    }
    for (size_t i = 0; i < s->n; i++) {
        customer *c = s->who[i];
        /* Only a bound where it binds: a customer within its share paces at its own rate. */
        double share = s->share[i] < s->demand[i] ? s->share[i] : 0;
        /* A work queue's share is a rate it cannot keep by pacing (it has no GCRA): the host's
         * windows hold its sends, its turn in the window's drain is its weight. */
        if (c->mode == MODE_UNLIMITED)
            share = 0;
        set_share(d, c, share);
    }
    hl->rate_shared = rate;
    hl->active = (int)s->n;
    hl->divided_us = now;
    const char *labels[] = {hl->key};
    metrics_gauge_set(d->obs.m, d->obs.host_rate, labels, rate);
    metrics_gauge_set(d->obs.m, d->obs.host_customers, labels, (double)s->n);
}

void limits_on_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (!is_leading(d))
        return;
    divide_scratch s = {0};
    int64_t now = now_us();
    bool any = false;
    size_t pos = 0;
    host_limit *hl;
    while ((hl = hmap_next(&d->host_limits, &pos)) != NULL) {
        if (hl->lim.n == 0)
            continue;
        any = true;
        divide_host(d, hl, now, &s);
    }
    free(s.who);
    free(s.demand);
    free(s.weight);
    free(s.share);
    if (any)
        uv_timer_start(&d->timers[TIMER_HOSTS], limits_on_timer, DIVIDE_EVERY_MS, 0);
}

void limits_arm(dispatcher *d)
{
    uv_timer_t *t = &d->timers[TIMER_HOSTS];
    if (!is_leading(d) || uv_is_closing((uv_handle_t *)t))
        return;
    if (!uv_is_active((uv_handle_t *)t))
        uv_timer_start(t, limits_on_timer, 0, 0);
}

/* ---- host-wide throttles ------------------------------------------------------------------- */

/* A host's rate follows throttles as a customer's does, by the configured defaults. */
static pace_policy host_policy(const dispatcher *d)
{
    return (pace_policy){.decrease = d->cfg.throttle_decrease,
                         .increase = d->cfg.throttle_increase,
                         .floor = d->cfg.throttle_floor};
}

bool limits_host_throttled(dispatcher *d, customer *c, int64_t sent_us, int64_t now)
{
    host_limit *hl = c->host ? c->host->limit : NULL;
    if (!hl || hl->lim.n == 0)
        return false;
    /* Remember this customer's throttle (the oldest of the four goes). */
    size_t slot = 0;
    for (size_t i = 0; i < PGP_ARRAY_LEN(hl->throttled_ids); i++) {
        if (hl->throttled_ids[i] == c->id) {
            slot = i;
            break;
        }
        if (hl->throttled_at[i] < hl->throttled_at[slot])
            slot = i;
    }
    hl->throttled_ids[slot] = c->id;
    hl->throttled_at[slot] = now;
    int others = 0;
    for (size_t i = 0; i < PGP_ARRAY_LEN(hl->throttled_ids); i++)
        if (hl->throttled_ids[i] != c->id && hl->throttled_at[i] > 0 &&
            now - hl->throttled_at[i] <= HOST_THROTTLE_WINDOW_US &&
            hl->throttled_at[i] > hl->success_at)
            others++;
    if (others == 0)
        return false;
    pace_policy pol = host_policy(d);
    double configured = slide_limit_rate(&hl->lim);
    if (pace_on_throttle(&hl->pace, MODE_SPACED, configured, 0, &pol, sent_us, 0, now)) {
        LOG_WARN("host_throttled", LOG_S("host", hl->key),
                 LOG_D("effective_rate_per_minute", host_rate(hl)),
                 LOG_I("customers_throttled", others + 1));
        limits_arm(d);
    }
    return true;
}

void limits_host_success(dispatcher *d, customer *c)
{
    host_limit *hl = c->host ? c->host->limit : NULL;
    if (!hl || hl->lim.n == 0)
        return;
    hl->success_at = now_us();
    pace_policy pol = host_policy(d);
    if (hl->pace.rate > 0)
        (void)pace_on_success(&hl->pace, MODE_SPACED, slide_limit_rate(&hl->lim), &pol, 0);
}

/* ---- takeover: the windows resume from the durable record of sends ------------------------ */

/* One window to resume: where its rows go, and whose sends count in it. */
typedef struct history_slot {
    slide_window *w;
} history_slot;

typedef struct history_ctx {
    dispatcher *d;
    history_slot *slots;
    size_t n;
} history_ctx;

static void history_done(dispatcher *d)
{
    if (d->state == LEADER_FRONTIER)
        leader_enter(d, LEADER_LEADING);
}

static void on_history(pgconn *conn, PGresult *res, void *arg)
{
    history_ctx *ctx = arg;
    dispatcher *d = ctx->d;
    (void)conn;
    if (!res) {
        free(ctx->slots);
        free(ctx);
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_LIMIT_HISTORY_NCOLS, "limit history")) {
        free(ctx->slots);
        free(ctx);
        /* Leading without it could let a window's sends through again. */
        leader_retry_step(d, "limit history", res);
        return;
    }
    long long sends = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        int64_t slot = row_i64(res, r, SQL_RUN_LIMIT_HISTORY_C_SLOT);
        if (slot < 0 || (size_t)slot >= ctx->n)
            continue;
        int64_t at = row_i64(res, r, SQL_RUN_LIMIT_HISTORY_C_AT_US);
        int64_t n = row_i64(res, r, SQL_RUN_LIMIT_HISTORY_C_SENDS);
        if (slide_window_record(ctx->slots[slot].w, at, n) != 0)
            LOG_ERROR("out_of_memory", LOG_S("where", "limit history"));
        sends += n;
    }
    LOG_INFO("limit_windows_resumed", LOG_I("windows", (long long)ctx->n), LOG_I("sends", sends));
    free(ctx->slots);
    free(ctx);
    history_done(d);
}

typedef struct history_params {
    strbuf slot, lookback, width, member_slot, member;
    int64_t next;
    history_slot *slots;
    size_t n, cap;
    bool ok;
} history_params;

static void params_sep(strbuf *sb)
{
    strbuf_puts(sb, sb->len ? "," : "{");
}

/* A window to resume; its members are added next (add_member). */
static void add_window(history_params *p, slide_window *w, int64_t kept_us)
{
    /* Sends older than the attempt log keeps cannot be resumed: such a window may let through
     * again what was sent before the takeover. Said, once per window per takeover. */
    if (w->period_us > kept_us)
        LOG_WARN("limit_window_longer_than_attempt_log", LOG_I("period_s", w->period_us / 1000000),
                 LOG_I("attempt_retention_days", kept_us / 86400000000LL),
                 LOG_S("fix", "raise [delivery] attempt_retention_days to the longest window"));
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        history_slot *s = realloc(p->slots, cap * sizeof *s);
        if (!s) {
            p->ok = false;
            return;
        }
        p->slots = s;
        p->cap = cap;
    }
    /* Emptied first: what it holds now is this leader's, from before it last led. */
    free(w->ring);
    w->ring = NULL;
    w->head = w->n = w->cap = 0;
    w->used = 0;
    p->slots[p->n].w = w;
    int64_t lookback = w->period_us < HISTORY_MAX_US ? w->period_us : HISTORY_MAX_US;
    params_sep(&p->slot);
    strbuf_put_i64(&p->slot, (int64_t)p->n);
    params_sep(&p->lookback);
    strbuf_put_i64(&p->lookback, lookback);
    params_sep(&p->width);
    strbuf_put_i64(&p->width, w->merge_us > 0 ? w->merge_us : 1);
    p->n++;
}

static void add_member(history_params *p, size_t slot, int64_t customer_id)
{
    params_sep(&p->member_slot);
    strbuf_put_i64(&p->member_slot, (int64_t)slot);
    params_sep(&p->member);
    strbuf_put_i64(&p->member, customer_id);
}

void limits_history_load(dispatcher *d)
{
    history_params p = {.ok = true};
    size_t pos = 0;
    customer *c;
    int64_t kept_us = (int64_t)d->cfg.attempt_retention_days * 86400 * 1000000;
    /* A new leadership: nothing of this instance is claimed or waiting to be sent. */
    while ((c = hmap_next(&d->customers, &pos)) != NULL) {
        c->unsent = 0;
        if (c->thr) {
            c->thr->announced_rate = 0;
            c->thr->announce_reset_max_s = 0;
            c->thr->announced_until_us = 0;
            c->thr->host_share = 0;
        }
        if (c->gate)
            c->gate->unsent = 0;
    }
    host_limit *hl;
    pos = 0;
    while ((hl = hmap_next(&d->host_limits, &pos)) != NULL) {
        hl->unsent = hl->claiming = hl->considering = 0;
        hl->pace = (pace){0};
    }
    pos = 0;
    /* Endpoints' own windows. */
    while ((c = hmap_next(&d->customers, &pos)) != NULL)
        for (int i = 0; c->lim && i < c->lim->n && p.ok; i++) {
            add_window(&p, &c->lim->w[i], kept_us);
            add_member(&p, p.n - 1, c->id);
        }
    /* Customers' windows (all of their endpoints' sends count) and hosts' (all of their
     * customers'): their windows' first slot by the gate's or host limit's address, then one
     * pass over the customers adds each to the windows it counts in. */
    hmap first_slot;
    hmap_init(&first_slot);
    pos = 0;
    tenant_gate *g;
    while ((g = hmap_next(&d->gates, &pos)) != NULL && p.ok)
        if (g->lim.n > 0) {
            p.ok = hmap_put(&first_slot, &g, sizeof g, (void *)(uintptr_t)(p.n + 1)) == 0;
            for (int i = 0; i < g->lim.n && p.ok; i++)
                add_window(&p, &g->lim.w[i], kept_us);
        }
    pos = 0;
    while ((hl = hmap_next(&d->host_limits, &pos)) != NULL && p.ok)
        if (hl->lim.n > 0) {
            p.ok = hmap_put(&first_slot, &hl, sizeof hl, (void *)(uintptr_t)(p.n + 1)) == 0;
            for (int i = 0; i < hl->lim.n && p.ok; i++)
                add_window(&p, &hl->lim.w[i], kept_us);
        }
    pos = 0;
    while ((c = hmap_next(&d->customers, &pos)) != NULL && p.ok) {
        const void *owners[2] = {c->gate, c->host ? c->host->limit : NULL};
        int windows[2] = {c->gate ? c->gate->lim.n : 0,
                          c->host && c->host->limit ? c->host->limit->lim.n : 0};
        for (int o = 0; o < 2; o++) {
            uintptr_t first = owners[o] && windows[o] > 0
                                  ? (uintptr_t)hmap_get(&first_slot, &owners[o], sizeof owners[o])
                                  : 0;
            for (int i = 0; first && i < windows[o]; i++)
                add_member(&p, first - 1 + (size_t)i, c->id);
        }
    }
    hmap_free(&first_slot);
    if (p.n == 0 || !p.ok) {
        if (!p.ok)
            LOG_ERROR("out_of_memory", LOG_S("where", "limit history"));
        free(p.slots);
        history_done(d);
        goto out;
    }
    strbuf *all[] = {&p.slot, &p.lookback, &p.width, &p.member_slot, &p.member};
    for (size_t i = 0; i < PGP_ARRAY_LEN(all); i++)
        strbuf_puts(all[i], all[i]->len ? "}" : "{}");
    history_ctx *ctx = calloc(1, sizeof *ctx);
    const char *params[] = {
        [SQL_RUN_LIMIT_HISTORY_P_SLOTS] = strbuf_str(&p.slot),
        [SQL_RUN_LIMIT_HISTORY_P_LOOKBACK_US] = strbuf_str(&p.lookback),
        [SQL_RUN_LIMIT_HISTORY_P_WIDTH_US] = strbuf_str(&p.width),
        [SQL_RUN_LIMIT_HISTORY_P_MEMBER_SLOTS] = strbuf_str(&p.member_slot),
        [SQL_RUN_LIMIT_HISTORY_P_MEMBERS] = strbuf_str(&p.member),
    };
    bool ready = ctx != NULL;
    for (size_t i = 0; i < PGP_ARRAY_LEN(params); i++)
        ready = ready && params[i];
    if (ready) {
        ctx->d = d;
        ctx->slots = p.slots;
        ctx->n = p.n;
        p.slots = NULL;
    }
    if (!ready || DSP_QUERY(d, run_limit_history, params, on_history, ctx, "limit history") != 0) {
        if (ctx)
            free(ctx->slots);
        free(ctx);
        free(p.slots);
        leader_retry_step(d, "limit history", NULL);
    }
out:
    strbuf_free(&p.slot);
    strbuf_free(&p.lookback);
    strbuf_free(&p.width);
    strbuf_free(&p.member_slot);
    strbuf_free(&p.member);
}

void limits_free(dispatcher *d)
{
    size_t pos = 0;
    host_limit *hl;
    while ((hl = hmap_next(&d->host_limits, &pos)) != NULL) {
        slide_limit_free(&hl->lim);
        free(hl->key);
        free(hl);
    }
    hmap_free(&d->host_limits);
}
