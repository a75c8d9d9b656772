/* leader.c - from connecting to leading: the start-up chain and the election as one state
 * machine (leader_state, internal.h), the notifications that feed it, and the watchdog.
 *
 * Owns dispatcher.state, the standby, retry and watchdog timers, and the leader lock. The
 * leader runs its claims on the connection that holds the session advisory lock, so an
 * instance that lost its connection has lost the lock and cannot claim any more (fencing):
 * a lost connection always returns to LEADER_CONNECTING.
 */
#include "internal.h"

#include "db.h"
#include "frontier_floor.h"
#include "log.h"
#include "migrate.h"
#include "sdnotify.h"
#include "session_check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *leader_state_name(leader_state s)
{
    static const char *const names[] = {"connecting", "loading",  "electing",
                                        "standby",    "frontier", "leading"};
    return (unsigned)s < PGP_ARRAY_LEN(names) ? names[s] : "?";
}

/* How long the session check's second connection may take to get a session and answer: a
 * full session pool makes it wait for good (then the check is inconclusive, not failed). */
#define SESSION_CHECK_TIMEOUT_MS 3000

static bool holds_lock(leader_state s)
{
    return s == LEADER_FRONTIER || s == LEADER_LEADING;
}

static void on_retry_timer(uv_timer_t *t);
static void on_standby_timer(uv_timer_t *t);
static void publish_config(dispatcher *d);

/* A statement of the chain failed while the connection stayed up: retry that step after a
 * pause rather than sit connected, neither leading nor standing by. */
void leader_retry_step(dispatcher *d, const char *step, const PGresult *res)
{
    LOG_ERROR("startup_step_failed", LOG_S("step", step), LOG_S("error", PQresultErrorMessage(res)),
              LOG_I("retry_ms", ERROR_RETRY_MS));
    if (d->stop == STOP_NONE)
        uv_timer_start(&d->timers[TIMER_RETRY], on_retry_timer, ERROR_RETRY_MS, 0);
}

static void retry_step(dispatcher *d, const char *step, const PGresult *res)
{
    leader_retry_step(d, step, res);
}

/* ---- LOADING: schema check, carriers, customers ------------------------------------------- */

static void on_carriers(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_CARRIERS_NCOLS, "carriers"))
        return; /* a reconnect reloads them */
    for (int r = 0; r < PQntuples(res); r++) {
        carrier_row row;
        carrier_row_parse(res, r, &row);
        carrier_apply(d, &row);
    }
}

static void load_carriers(dispatcher *d)
{
    DSP_QUERY0(d, run_carriers, on_carriers, d, "carriers");
    limits_hosts_load(d, NULL);
}

/* The start-up load, in three steps on the one connection: the ids of the customers with state
 * in other tables (run_customers_extra.sql: a breaker or health row, a group of endpoints);
 * pages of every customer from its own row's common columns (run_customers_page.sql), which
 * leave those ids out and mark the customers with headers, auth, a certificate, a proxy or
 * windows; and last the customers listed or marked, read whole by id (run_customers.sql). At
 * 1,000,000 idle customers the whole rows' joins and 36 text columns were most of PostgreSQL's
 * 3 s and of the leader's reading, for nothing on nearly every row. The next statement is
 * always asked for before a result is applied, so PostgreSQL reads it meanwhile. */
static void load_customers(dispatcher *d, int64_t after);
static bool load_extra_send(dispatcher *d);

static void customers_load_done(dispatcher *d)
{
    LOG_INFO("customers_loaded", LOG_I("customers", d->customers_loaded),
             LOG_I("read_whole", (int64_t)(d->n_load_listed + d->n_load_marked)));
    d->n_load_listed = d->n_load_marked = d->load_extra_sent = 0;
    d->load_extra_ready = false;
    if (d->state == LEADER_LOADING && d->stop == STOP_NONE)
        leader_enter(d, LEADER_ELECTING);
}

static bool loading(const dispatcher *d)
{
    return d->state == LEADER_LOADING && d->stop == STOP_NONE;
}

static void on_customers_extra(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    (void)conn;
    if (!res)
        return; /* lost: the reconnect starts over */
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_CUSTOMERS_EXTRA_NCOLS, "customers read whole")) {
        retry_step(d, "load customers", res);
        return;
    }
    size_t n = (size_t)PQntuples(res);
    if (n > d->cap_load_listed) {
        int64_t *v = realloc(d->load_listed, n * sizeof *v);
        if (!v) {
            LOG_ERROR("out_of_memory", LOG_S("where", "customer load"));
            retry_step(d, "load customers", res);
            return;
        }
        d->load_listed = v;
        d->cap_load_listed = n;
    }
    for (size_t i = 0; i < n; i++)
        d->load_listed[i] = row_i64(res, (int)i, SQL_RUN_CUSTOMERS_EXTRA_C_ID);
    d->n_load_listed = n;
    d->n_load_marked = 0;
    d->load_extra_sent = 0;
    d->load_extra_ready = true;
}

static void on_customers_page(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    (void)conn;
    if (!res)
        return;
    /* Its list failed before it (and was retried): this page belongs to that attempt. */
    if (!d->load_extra_ready)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_CUSTOMERS_PAGE_NCOLS, "customers")) {
        d->load_extra_ready = false;
        retry_step(d, "load customers", res);
        return;
    }
    int n = PQntuples(res);
    bool more = n >= CUSTOMER_LOAD_PAGE && loading(d);
    if (more)
        load_customers(d, row_i64(res, n - 1, SQL_RUN_CUSTOMERS_PAGE_C_ID));
    int applied = customers_apply_page(d, res, d->load_listed, d->n_load_listed, &d->load_marked,
                                       &d->n_load_marked, &d->cap_load_marked);
    if (applied < 0) {
        LOG_ERROR("out_of_memory", LOG_S("where", "customer load"));
        d->load_extra_ready = false;
        retry_step(d, "load customers", NULL);
        return;
    }
    d->customers_loaded += applied;
    if (more)
        return;
    /* The last page: those read whole last, the next on its way while one is applied. */
    if (!loading(d) || !load_extra_send(d))
        customers_load_done(d);
}

static void on_customers_extra_loaded(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    (void)conn;
    if (!res || !d->load_extra_ready)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_CUSTOMERS_NCOLS, "customers")) {
        d->load_extra_ready = false;
        retry_step(d, "load customers", res);
        return;
    }
    bool extra_out = loading(d) && load_extra_send(d);
    d->customers_loaded += customers_apply(d, res, false);
    if (!extra_out)
        customers_load_done(d);
}

/* Sends the next batch of the customers read whole; false when none is left. One that cannot
 * be sent starts the load over after a pause (true: the load is not done). */
static bool load_extra_send(dispatcher *d)
{
    size_t total = d->n_load_listed + d->n_load_marked;
    if (d->load_extra_sent >= total)
        return false;
    size_t left = total - d->load_extra_sent;
    size_t n = left < CUSTOMER_LOAD_PAGE ? left : CUSTOMER_LOAD_PAGE;
    strbuf ids = {0};
    strbuf_puts(&ids, "{");
    for (size_t i = d->load_extra_sent; i < d->load_extra_sent + n; i++) {
        if (i > d->load_extra_sent)
            strbuf_puts(&ids, ",");
        strbuf_put_i64(&ids, i < d->n_load_listed ? d->load_listed[i]
                                                  : d->load_marked[i - d->n_load_listed]);
    }
    strbuf_puts(&ids, "}");
    const char *params[] = {[SQL_RUN_CUSTOMERS_P_CUSTOMER_IDS] = strbuf_str(&ids),
                            [SQL_RUN_CUSTOMERS_P_AFTER_ID] = NULL,
                            [SQL_RUN_CUSTOMERS_P_PAGE] = NULL};
    bool sent = params[SQL_RUN_CUSTOMERS_P_CUSTOMER_IDS] &&
                DSP_QUERY(d, run_customers, params, on_customers_extra_loaded, d, "customers") == 0;
    strbuf_free(&ids);
    if (sent) {
        d->load_extra_sent += n;
    } else {
        d->load_extra_ready = false;
        retry_step(d, "load customers", NULL);
    }
    return true;
}

/* The next page of all customers, those with id > after. */
static void load_customers(dispatcher *d, int64_t after)
{
    char after_s[24], page[16];
    snprintf(after_s, sizeof after_s, "%" PRId64, after);
    snprintf(page, sizeof page, "%d", CUSTOMER_LOAD_PAGE);
    const char *params[] = {
        [SQL_RUN_CUSTOMERS_PAGE_P_AFTER_ID] = after_s, [SQL_RUN_CUSTOMERS_PAGE_P_PAGE] = page};
    DSP_QUERY(d, run_customers_page, params, on_customers_page, d, "customers");
}

static void on_schema_version(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        !rows_shape_ok(res, SQL_SCHEMA_VERSION_NCOLS, "schema version")) {
        retry_step(d, "schema version", res);
        return;
    }
    int version = (int)row_i64(res, 0, SQL_SCHEMA_VERSION_C_VERSION);
    int expected = migrate_latest_version();
    if (version != expected) {
        LOG_ERROR(version < expected ? "schema_too_old" : "schema_too_new",
                  LOG_I("database_version", version), LOG_I("expected_version", expected),
                  LOG_S("fix", version < expected ? "run: pgpace migrate" : "upgrade pgpace"));
        dispatcher_fatal(d);
        return;
    }
    /* Same tables, other functions (a binary upgraded without `pgpace migrate`, or a migrate by
     * another version since): running would mix this binary's statements with those functions. */
    const char *digest = PQgetvalue(res, 0, SQL_SCHEMA_VERSION_C_FUNCTIONS_DIGEST);
    if (strcmp(digest, migrate_functions_digest()) != 0) {
        LOG_ERROR("schema_functions_differ", LOG_S("database_digest", digest[0] ? digest : "none"),
                  LOG_S("expected_digest", migrate_functions_digest()),
                  LOG_S("fix", "run: pgpace migrate (with this pgpace)"));
        dispatcher_fatal(d);
        return;
    }
    if (!d->notified_ready) {
        /* Schema checked and the database answers: ready as far as systemd is concerned. */
        d->notified_ready = true;
        if (sdnotify_send("READY=1\nSTATUS=connected; electing a leader") != 0)
            LOG_WARN("sd_notify_failed", LOG_S("state", "READY=1"));
    }
    load_carriers(d);
    tokens_load(d);
    d->customers_loaded = 0;
    d->n_load_listed = d->n_load_marked = d->load_extra_sent = 0;
    d->load_extra_ready = false;
    DSP_QUERY0(d, run_customers_extra, on_customers_extra, d, "customers read whole");
    load_customers(d, INT64_MIN);
}

/* ---- ELECTING and STANDBY: the leader lock ------------------------------------------------- */

static void on_try_lock(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    d->lock_sent_ns = 0;
    if (!res || d->stop != STOP_NONE)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_TRY_LOCK_NCOLS, "leader lock")) {
        retry_step(d, "leader lock", res);
        return;
    }
    if (PQgetvalue(res, 0, SQL_RUN_TRY_LOCK_C_LOCKED)[0] == 't')
        leader_enter(d, LEADER_FRONTIER);
    else if (d->state != LEADER_STANDBY)
        leader_enter(d, LEADER_STANDBY);
    else
        uv_timer_start(&d->timers[TIMER_STANDBY], on_standby_timer,
                       (uint64_t)d->cfg.standby_retry_ms, 0);
}

static void try_lock(dispatcher *d)
{
    char cls[16], key[16];
    snprintf(cls, sizeof cls, "%d", DB_LOCK_CLASS);
    snprintf(key, sizeof key, "%d", DB_LOCK_LEADER);
    const char *params[] = {
        [SQL_RUN_TRY_LOCK_P_LOCK_CLASS] = cls, [SQL_RUN_TRY_LOCK_P_LOCK_KEY] = key};
    if (DSP_QUERY(d, run_try_lock, params, on_try_lock, d, "leader lock") == 0)
        d->lock_sent_ns = uv_hrtime();
}

static void on_standby_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->state == LEADER_STANDBY && d->stop == STOP_NONE)
        try_lock(d);
}

/* ---- FRONTIER: the scheduler's state ------------------------------------------------------- */

/* The frontier is UNLOGGED: empty after a crash restart and on a promoted standby. For the
 * customers it says nothing about, a floor is rebuilt from the attempt log and the leased claims
 * (frontier_floor.h). A claim's spaced sends leave at most LOOKAHEAD_US + COALESCE_US after it
 * by the slots it was given, later only when its answer or the loop was late: FLOOR_LATE_US is
 * the lateness allowed for. FLOOR_CLOCK_SLACK_US covers the database's clock (claimed_at) and
 * the instances' (started_at, ticks) disagreeing. */
#define FLOOR_LATE_US          500000
#define FLOOR_CLOCK_SLACK_US   100000
#define FLOOR_CLAIM_TO_SEND_US (LOOKAHEAD_US + COALESCE_US + FLOOR_LATE_US + FLOOR_CLOCK_SLACK_US)
/* Sends older than this never matter (bursts that take longer to refill are not credible, and
 * the attempt log keeps a week by default); it also keeps now() - horizon a valid timestamp. */
#define FLOOR_HORIZON_MAX_US (30LL * 86400 * 1000000)

typedef struct floor_ctx {
    dispatcher *d;
    uint64_t sent_ns;
    int frontier_rows, without_state;
} floor_ctx;

/* How far back a send of c still bears on its state now: the time its burst takes to refill
 * (plus the claim-to-send bound) for spaced, two ticks for batch; at most FLOOR_HORIZON_MAX_US. */
static int64_t floor_horizon_us(const dispatcher *d, const customer *c)
{
    int64_t h;
    if (c->mode == MODE_BATCH)
        h = 2 * (int64_t)d->cfg.batch_tick_ms * 1000 + FLOOR_CLOCK_SLACK_US;
    else if (__builtin_mul_overflow(c->period_us, (int64_t)(c->burst < 1 ? 1 : c->burst), &h) ||
             __builtin_add_overflow(h, FLOOR_CLAIM_TO_SEND_US, &h))
        h = FLOOR_HORIZON_MAX_US;
    return h < FLOOR_HORIZON_MAX_US ? h : FLOOR_HORIZON_MAX_US;
}

static void on_tenant_frontier(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    (void)conn;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_TENANT_FRONTIER_NCOLS, "tenant frontier")) {
        /* Leading without it could send a tenant's next webhook too soon after the last. */
        retry_step(d, "tenant frontier", res);
        return;
    }
    for (int r = 0; r < PQntuples(res); r++) {
        int64_t id = row_i64(res, r, SQL_RUN_TENANT_FRONTIER_C_CUSTOMER_ID);
        tenant_gate *g = hmap_get(&d->gates, &id, sizeof id);
        if (!g)
            continue;
        int64_t stored = PQgetisnull(res, r, SQL_RUN_TENANT_FRONTIER_C_TAT_US)
                             ? INT64_MIN
                             : row_i64(res, r, SQL_RUN_TENANT_FRONTIER_C_TAT_US);
        frontier_trace t = {0};
        if ((t.has_attempt = !PQgetisnull(res, r, SQL_RUN_TENANT_FRONTIER_C_ATTEMPT_US)))
            t.attempt_us = row_i64(res, r, SQL_RUN_TENANT_FRONTIER_C_ATTEMPT_US);
        if ((t.has_claim = !PQgetisnull(res, r, SQL_RUN_TENANT_FRONTIER_C_CLAIM_US)))
            t.claim_us = row_i64(res, r, SQL_RUN_TENANT_FRONTIER_C_CLAIM_US);
        int64_t last = 0;
        if (!frontier_last_send(&t, FLOOR_CLAIM_TO_SEND_US, &last))
            last = 0;
        tenant_gate_resume(g, stored, last);
    }
    LOG_INFO("tenant_limits_resumed", LOG_I("customers", PQntuples(res)));
    if (d->state == LEADER_FRONTIER)
        limits_history_load(d); /* then LEADER_LEADING */
}

/* The shared tenant limits (tenant.c) resume from the database before the leader claims. */
static void frontier_loaded(dispatcher *d)
{
    if (d->state != LEADER_FRONTIER)
        return;
    strbuf ids = {0};
    int n = 0;
    int64_t horizon = 0;
    size_t pos = 0;
    tenant_gate *g;
    while ((g = hmap_next(&d->gates, &pos)) != NULL) {
        strbuf_puts(&ids, n++ ? "," : "{");
        strbuf_put_i64(&ids, g->id);
        int64_t h;
        if (__builtin_mul_overflow(g->period_us, (int64_t)g->burst, &h) ||
            __builtin_add_overflow(h, FLOOR_CLAIM_TO_SEND_US, &h) || h > FLOOR_HORIZON_MAX_US)
            h = FLOOR_HORIZON_MAX_US;
        if (h > horizon)
            horizon = h;
    }
    if (n == 0) {
        strbuf_free(&ids);
        limits_history_load(d); /* then LEADER_LEADING */
        return;
    }
    strbuf_puts(&ids, "}");
    char hbuf[24];
    snprintf(hbuf, sizeof hbuf, "%" PRId64, horizon);
    const char *params[] = {[SQL_RUN_TENANT_FRONTIER_P_CUSTOMER] = strbuf_str(&ids),
                            [SQL_RUN_TENANT_FRONTIER_P_HORIZON_US] = hbuf};
    bool sent = params[0] && DSP_QUERY(d, run_tenant_frontier, params, on_tenant_frontier, d,
                                       "tenant frontier") == 0;
    strbuf_free(&ids);
    if (!sent && d->stop == STOP_NONE) /* leading without it risks a tenant's burst */
        uv_timer_start(&d->timers[TIMER_RETRY], on_retry_timer, ERROR_RETRY_MS, 0);
}

static void on_frontier_floor(pgconn *conn, PGresult *res, void *arg)
{
    floor_ctx *ctx = arg;
    dispatcher *d = ctx->d;
    floor_ctx info = *ctx;
    free(ctx);
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_FRONTIER_FLOOR_NCOLS, "frontier floor")) {
        /* The retry loads the whole frontier again, then this. */
        retry_step(d, "frontier floor", res);
        return;
    }
    int spaced = 0, batch = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        customer *c = customer_get(d, row_i64(res, r, SQL_RUN_FRONTIER_FLOOR_C_CUSTOMER_ID));
        if (!c)
            continue;
        frontier_trace t = {0};
        if ((t.has_attempt = !PQgetisnull(res, r, SQL_RUN_FRONTIER_FLOOR_C_ATTEMPT_US)))
            t.attempt_us = row_i64(res, r, SQL_RUN_FRONTIER_FLOOR_C_ATTEMPT_US);
        if ((t.has_claim = !PQgetisnull(res, r, SQL_RUN_FRONTIER_FLOOR_C_CLAIM_US)))
            t.claim_us = row_i64(res, r, SQL_RUN_FRONTIER_FLOOR_C_CLAIM_US);
        int64_t last;
        if (c->mode == MODE_SPACED && frontier_last_send(&t, FLOOR_CLAIM_TO_SEND_US, &last)) {
            int64_t tat = frontier_floor_tat(c->tat, last, c->period_us, c->burst);
            spaced += tat != c->tat;
            c->tat = tat;
        } else if (c->mode == MODE_BATCH && frontier_last_send(&t, 0, &last)) {
            batch += frontier_floor_tick(&c->have_tick, &c->last_tick, last, FLOOR_CLOCK_SLACK_US,
                                         d->cfg.batch_tick_ms);
        }
    }
    LOG_INFO("frontier_reconstructed", LOG_I("frontier_rows", info.frontier_rows),
             LOG_I("customers_without_state", info.without_state), LOG_I("traces", PQntuples(res)),
             LOG_I("spaced_floors", spaced), LOG_I("batch_ticks", batch),
             LOG_D("ms", (double)(uv_hrtime() - info.sent_ns) / 1e6));
    frontier_loaded(d);
}

/* Asks for the durable traces of the spaced and batch customers the frontier rows did not
 * cover (ids of those it did: sorted `known`). Returns 1 when the answer will finish the load,
 * 0 when there is nothing to ask, -1 when the statement could not be sent. */
static int load_frontier_floor(dispatcher *d, const int64_t *known, size_t n_known, int rows)
{
    strbuf ids = {0}, horizons = {0};
    int64_t max_horizon = 0;
    int n = 0;
    size_t pos = 0;
    customer *c;
    while ((c = hmap_next(&d->customers, &pos)) != NULL) {
        if (c->mode == MODE_UNLIMITED ||
            bsearch(&c->id, known, n_known, sizeof *known, cmp_i64) != NULL)
            continue;
        int64_t h = floor_horizon_us(d, c);
        if (h > max_horizon)
            max_horizon = h;
        strbuf_puts(&ids, n ? "," : "{");
        strbuf_put_i64(&ids, c->id);
        strbuf_puts(&horizons, n ? "," : "{");
        strbuf_put_i64(&horizons, h);
        n++;
    }
    bool sent = false;
    if (n > 0) {
        strbuf_puts(&ids, "}");
        strbuf_puts(&horizons, "}");
        char maxbuf[24];
        snprintf(maxbuf, sizeof maxbuf, "%" PRId64, max_horizon);
        const char *params[] = {[SQL_RUN_FRONTIER_FLOOR_P_CUSTOMER] = strbuf_str(&ids),
                                [SQL_RUN_FRONTIER_FLOOR_P_HORIZON_US] = strbuf_str(&horizons),
                                [SQL_RUN_FRONTIER_FLOOR_P_MAX_HORIZON_US] = maxbuf};
        floor_ctx *ctx = calloc(1, sizeof *ctx);
        if (!ctx || !params[0] || !params[1]) {
            LOG_ERROR("out_of_memory", LOG_S("where", "frontier floor"));
        } else {
            *ctx = (floor_ctx){
                .d = d, .sent_ns = uv_hrtime(), .frontier_rows = rows, .without_state = n};
            sent = DSP_QUERY(d, run_frontier_floor, params, on_frontier_floor, ctx,
                             "frontier floor") == 0;
        }
        if (!sent)
            free(ctx);
    }
    strbuf_free(&ids);
    strbuf_free(&horizons);
    return n == 0 ? 0 : sent ? 1 : -1;
}

static void on_frontier(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_FRONTIER_NCOLS, "frontier")) {
        /* Leading without a frontier would claim nothing of the existing backlog. */
        retry_step(d, "load frontier", res);
        return;
    }
    throttle_reset_all(d);
    /* The customers whose rows hold their state (a tat for spaced, a tick for batch). */
    int rows = PQntuples(res);
    int64_t *known = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *known);
    size_t n_known = 0;
    for (int r = 0; r < rows; r++) {
        frontier_row row;
        frontier_row_parse(res, r, &row);
        customer *c = customer_get(d, row.customer_id);
        if (!c)
            continue;
        if (row.has_tat)
            c->tat = row.tat_us;
        c->credit = row.credit;
        if (row.has_tick) {
            c->last_tick = row.last_tick;
            c->have_tick = true;
        }
        throttle_resume(d, c, row.effective_rate);
        if (known &&
            ((c->mode == MODE_SPACED && row.has_tat) || (c->mode == MODE_BATCH && row.has_tick)))
            known[n_known++] = c->id;
    }
    int floor = -1;
    if (known) {
        qsort(known, n_known, sizeof *known, cmp_i64);
        floor = load_frontier_floor(d, known, n_known, rows);
        free(known);
    } else {
        LOG_ERROR("out_of_memory", LOG_S("where", "frontier load"));
    }
    if (floor == 0)
        frontier_loaded(d);
    else if (floor < 0 && d->stop == STOP_NONE) /* leading without the floor risks a burst */
        uv_timer_start(&d->timers[TIMER_RETRY], on_retry_timer, ERROR_RETRY_MS, 0);
}

static void load_frontier(dispatcher *d)
{
    DSP_QUERY0(d, run_frontier, on_frontier, d, "frontier");
}

static void on_retry_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->stop != STOP_NONE || !pgconn_ready(d->db))
        return; /* a reconnect reruns the whole chain anyway */
    /* The step that failed, again: the lock statement stays in ELECTING or STANDBY. */
    if (d->state == LEADER_FRONTIER)
        load_frontier(d);
    else if (d->state == LEADER_ELECTING || d->state == LEADER_STANDBY)
        try_lock(d);
    else if (d->state == LEADER_LOADING)
        leader_enter(d, LEADER_LOADING);
}

/* ---- the transition function --------------------------------------------------------------- */

/* Leaving FRONTIER or LEADING for anything but LEADING: the lock went with the connection. */
static void leadership_end(dispatcher *d)
{
    LOG_WARN("leadership_lost", LOG_S("instance", d->instance),
             LOG_S("reason", "database connection lost"));
    metrics_gauge_set(d->obs.m, d->obs.leader, NULL, 0);
    /* Items claimed ahead are not sent by an instance that may no longer lead: given back
     * (written once the connection is back), not left for their leases to expire. */
    window_give_back_all(d, "leadership lost");
    static const int timers[] = {TIMER_METRICS, TIMER_CLAIM, TIMER_TICK, TIMER_BACKSTOP,
                                 TIMER_HEALTH};
    for (size_t i = 0; i < PGP_ARRAY_LEN(timers); i++)
        uv_timer_stop(&d->timers[timers[i]]);
    sched_heap_clear(&d->heap);
    d->tick_queued = -1;
    /* Wait lists and due pairs belong to the leadership that found them; the next one finds its
     * own (backstop scan, notifications). */
    waiters_clear_all(d);
    pairs_clear_all(d);
    wake_end(d);
}

void leader_enter(dispatcher *d, leader_state to)
{
    leader_state from = d->state;
    if (holds_lock(from) && !holds_lock(to))
        leadership_end(d);
    d->state = to;
    if (from != to)
        LOG_DEBUG("leader_state", LOG_S("from", leader_state_name(from)),
                  LOG_S("to", leader_state_name(to)));
    switch (to) {
    case LEADER_CONNECTING:
        uv_timer_stop(&d->timers[TIMER_RETRY]);
        uv_timer_stop(&d->timers[TIMER_STANDBY]);
        break;
    case LEADER_LOADING:
        DSP_QUERY0(d, schema_version, on_schema_version, d, "schema version");
        break;
    case LEADER_ELECTING:
        try_lock(d);
        break;
    case LEADER_STANDBY:
        LOG_INFO("standby", LOG_S("instance", d->instance),
                 LOG_I("retry_ms", d->cfg.standby_retry_ms));
        uv_timer_start(&d->timers[TIMER_STANDBY], on_standby_timer,
                       (uint64_t)d->cfg.standby_retry_ms, 0);
        break;
    case LEADER_FRONTIER:
        uv_timer_stop(&d->timers[TIMER_STANDBY]);
        metrics_gauge_set(d->obs.m, d->obs.leader, NULL, 1);
        LOG_INFO("leader_elected", LOG_S("instance", d->instance));
        housekeeping_begin(d);
        publish_config(d);
        load_frontier(d);
        break;
    case LEADER_LEADING: {
        status_lead_begin(d);
        /* Work noted while the frontier loaded is scheduled now; the backstop finds the rest. */
        size_t pos = 0;
        customer *c;
        while ((c = hmap_next(&d->customers, &pos)) != NULL)
            customer_schedule(d, c);
        housekeeping_restart_timers(d, true);
        health_restart_timer(d, true);
        tick_arm(d, batch_tick_at(&d->cfg, now_us()));
        limits_arm(d);
        wake_begin(d);
        claim_arm(d);
        break;
    }
    }
}

/* ---- events from the connection ------------------------------------------------------------ */

/* What SQL needs of the leader's configuration (pgpace.leader_config): the batch tick, for
 * pgpace.estimate_send_time and the stats' backlog. Written by the leader only, when it takes
 * the lead and on every reload, so it is the tick batch customers are really sent on. */
static void publish_config(dispatcher *d)
{
    char tick[16];
    snprintf(tick, sizeof tick, "%d", d->cfg.batch_tick_ms);
    const char *params[] = {
        [SQL_RUN_PUBLISH_P_BATCH_TICK_MS] = tick, [SQL_RUN_PUBLISH_P_INSTANCE] = d->instance};
    DSP_QUERY(d, run_publish, params, dsp_on_ignored, NULL, "publish configuration");
}

void leader_send_session_settings(dispatcher *d)
{
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%d", d->cfg.statement_timeout_ms);
    const char *params[] = {[SQL_RUN_SESSION_P_STATEMENT_TIMEOUT_MS] = timeout};
    DSP_QUERY(d, run_session, params, dsp_on_ignored, NULL, "session settings");
    if (holds_lock(d->state))
        publish_config(d); /* a reload while leading */
}

/* ---- the session check: CONNECTING -> LOADING ---------------------------------------------- */

/* The lock that fences claims, the LISTENs and the prepared statements all live in the server
 * session, so every new session is checked for a pooler that shares it (session_check.h)
 * before the chain starts. Pooling seen at start-up or on a later reconnect ends the process
 * the same way: nothing has been claimed on that session yet, and running on would claim
 * without fencing and miss notifications. */
/* A new session that may be used: its clock sample first (the time scale before anything is
 * loaded or scheduled; a failover may have reached a server whose clock differs), the session
 * settings, the outcomes waiting to be written, then the start-up chain. */
static void session_ready(dispatcher *d)
{
    clock_start(d);
    leader_send_session_settings(d);
    finalize_arm(d);
    if (d->stop == STOP_NONE && d->state == LEADER_CONNECTING)
        leader_enter(d, LEADER_LOADING);
}

static void on_session_checked(session_check_outcome outcome, const char *detail, void *arg)
{
    dispatcher *d = arg;
    d->session_check = NULL;
    switch (outcome) {
    case SESSION_CHECK_LOST:
        return; /* the reconnect checks its own session */
    case SESSION_CHECK_POOLED:
        LOG_ERROR("database_session_pooling", LOG_S("seen", detail),
                  LOG_S("error",
                        "the database connection does not keep one server session: pgpace "
                        "needs one for its life (the leader's session advisory lock, which "
                        "fences claims; LISTEN for notifications; prepared statements), and "
                        "transaction or statement pooling (e.g. PgBouncer) breaks all three"),
                  LOG_S("fix", "point [database] conninfo at PostgreSQL directly or at a "
                               "PgBouncer pool with pool_mode = session (producers calling "
                               "pgpace.enqueue may use transaction pooling)"));
        dispatcher_fatal(d);
        return;
    case SESSION_CHECK_UNVERIFIED:
    case SESSION_CHECK_FAILED:
        LOG_WARN("database_session_unverified", LOG_S("reason", detail),
                 LOG_S("meaning", "connection pooling could not be ruled out; going on"));
        break;
    case SESSION_CHECK_OWN:
        LOG_DEBUG("database_session_checked", LOG_S("outcome", "one server session of its own"));
        break;
    }
    session_ready(d);
}

static void check_session(dispatcher *d)
{
    int rc =
        session_check_start(d->loop, d->db, d->cfg.conninfo, "pgpace-session-check",
                            SESSION_CHECK_TIMEOUT_MS, on_session_checked, d, &d->session_check);
    if (rc == -ENOTCONN)
        return; /* lost already: the reconnect checks */
    if (rc != 0) {
        LOG_WARN("database_session_unverified", LOG_S("reason", strerror(-rc)));
        session_ready(d);
    }
}

void leader_close(dispatcher *d)
{
    session_check_cancel(d->session_check);
    d->session_check = NULL;
}

void leader_on_db_state(pgconn *conn, pgconn_state state, void *arg)
{
    dispatcher *d = arg;
    leader_close(d); /* a check of a session that is gone (or replaced) would compare two */
    if (state == PGCONN_LOST) {
        metrics_counter_add(d->obs.m, d->obs.reconnects, NULL, 1);
        clock_stop(d);
        leader_enter(d, LEADER_CONNECTING);
        return;
    }
    LOG_INFO("db_ready", LOG_S("instance", d->instance));
    /* The check runs alone on the new session: statements pipelined beside its probes (pending
     * outcomes, the clock, the settings) would keep a pooled server session busy, and hence
     * this client's, between the probes, hiding the pooling (seen once in 10 runs). */
    if (d->stop == STOP_NONE)
        check_session(d);
    else
        session_ready(d);
}

void leader_on_notify(pgconn *conn, const char *channel, const char *payload, void *arg)
{
    dispatcher *d = arg;
    if (d->state < LEADER_ELECTING)
        return; /* the load that follows reads everything anyway */
    if (strcmp(channel, CHANNEL_CUSTOMER) == 0) {
        leader_reload_customer(d, strtoll(payload, NULL, 10));
        return;
    }
    if (strcmp(channel, CHANNEL_CARRIER) == 0) {
        load_carriers(d);
        return;
    }
    if (strcmp(channel, CHANNEL_HOST) == 0) {
        limits_hosts_load(d, payload);
        return;
    }
    if (strcmp(channel, CHANNEL_TOKEN) == 0) {
        tokens_load(d);
        return;
    }
    if (strcmp(channel, CHANNEL_EVENT) == 0) {
        health_on_event_notify(d);
        return;
    }
    if (strcmp(channel, CHANNEL_ENQUEUE) != 0 || !holds_lock(d->state))
        return;
    char *end = NULL;
    int64_t id = strtoll(payload, &end, 10);
    const char *carrier = end && *end == ' ' ? end + 1 : "";
    wake_on_notify(d);
    leader_wake_pair(d, id, carrier, now_us(), true);
}

void leader_wake_pair(dispatcher *d, int64_t id, const char *carrier, int64_t now, bool arm_claim)
{
    customer *c = customer_get(d, id);
    if (!c) {
        leader_reload_customer(d, id); /* its backstop scan entry will follow */
        return;
    }
    /* A pair that had nothing due or out: when its customer waits for a host whose window is
     * full, its first item need not wait for the window to drain (claim.c fresh_pairs), so the
     * customer leaves the wait list (its entry there is skipped) and is considered again. */
    const pair *known = pair_find(c, carrier);
    bool fresh = !known || (known->next_us == PAIR_IDLE && known->in_flight == 0);
    pair_note(c, carrier, now);
    if (fresh && c->waiting && c->host && c->mode != MODE_SPACED &&
        window_fresh_room(&d->cfg, c->host) > 0)
        c->waiting = false;
    customer_schedule(d, c);
    if (arm_claim)
        claim_arm(d);
}

/* A statement unanswered for long means a stalled path that TCP keepalives cannot see (the far
 * side still acknowledges): reset the connection. */
void leader_on_watchdog(uv_timer_t *t)
{
    dispatcher *d = t->data;
    uint64_t now = uv_hrtime();
    uint64_t limit = (uint64_t)d->cfg.lease_seconds * 500000000ull; /* half a lease */
    if (limit < 2000000000ull)
        limit = 2000000000ull;
    uint64_t claim_ns = d->n_claims > 0 ? d->claims[0]->sent_ns : 0;
    const char *stalled = claim_ns && now - claim_ns > limit                   ? "claim"
                          : d->flush_sent_ns && now - d->flush_sent_ns > limit ? "finalize"
                          : d->lock_sent_ns && now - d->lock_sent_ns > limit   ? "leader lock"
                                                                               : NULL;
    if (!stalled || !pgconn_ready(d->db))
        return;
    LOG_ERROR("db_statement_stalled", LOG_S("statement", stalled),
              LOG_I("waited_ms", (long long)(limit / 1000000)),
              LOG_S("action", "resetting the database connection"));
    pgconn_reset(d->db);
}
