/* rows.c - the dispatcher's statements: sending them, and their result rows parsed once into
 * structs.
 *
 * Column positions come from each query's `-- @columns:` line (sql/queries/NAME.sql, turned
 * into SQL_NAME_C_* by embed_sql), so they live with the SQL they index. Strings in the structs
 * point into the PGresult and live as long as it does.
 */
#include "internal.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>

int dsp_query_on(dispatcher *d, pgconn *conn, const char *sql, int n, const char *const *params,
                 pgconn_result_cb cb, void *arg, const char *what)
{
    (void)d;
    int rc = pgconn_query(conn, sql, n, params, cb, arg);
    if (rc != 0)
        LOG_WARN("query_not_sent", LOG_S("what", what), LOG_S("error", strerror(-rc)));
    return rc;
}

int dsp_query(dispatcher *d, const char *sql, int n, const char *const *params, pgconn_result_cb cb,
              void *arg, const char *what)
{
    return dsp_query_on(d, d->db, sql, n, params, cb, arg, what);
}

void dsp_on_ignored(pgconn *conn, PGresult *res, void *arg)
{
    if (res && PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK)
        LOG_WARN("statement_failed", LOG_S("error", PQresultErrorMessage(res)));
}

bool rows_shape_ok(const PGresult *res, int ncols, const char *what)
{
    if (PQnfields(res) == ncols)
        return true;
    LOG_ERROR("result_shape_mismatch", LOG_S("statement", what), LOG_I("columns", PQnfields(res)),
              LOG_I("expected", ncols));
    return false;
}

int64_t row_i64(const PGresult *res, int r, int col)
{
    return strtoll(PQgetvalue(res, r, col), NULL, 10);
}

static int row_int(const PGresult *res, int r, int col)
{
    return atoi(PQgetvalue(res, r, col));
}

static double row_double(const PGresult *res, int r, int col)
{
    return strtod(PQgetvalue(res, r, col), NULL);
}

static bool row_bool(const PGresult *res, int r, int col)
{
    return PQgetvalue(res, r, col)[0] == 't';
}

static bool row_null(const PGresult *res, int r, int col)
{
    return PQgetisnull(res, r, col) != 0;
}

/* claim_row_parse reads both claim statements' rows by run_claim.sql's positions. */
#define SAME_COLUMN(c) ((int)SQL_RUN_CLAIM_C_##c == (int)SQL_RUN_CLAIM_UNLIMITED_C_##c)
_Static_assert((int)SQL_RUN_CLAIM_NCOLS == (int)SQL_RUN_CLAIM_UNLIMITED_NCOLS &&
                   SAME_COLUMN(KIND) && SAME_COLUMN(ITEM_ID) && SAME_COLUMN(CUSTOMER_ID) &&
                   SAME_COLUMN(CARRIER) && SAME_COLUMN(ATTEMPT) && SAME_COLUMN(MAX_ATTEMPTS) &&
                   SAME_COLUMN(STALE) && SAME_COLUMN(PAYLOAD) && SAME_COLUMN(CREATED_US) &&
                   SAME_COLUMN(NEXT_US) && SAME_COLUMN(EXPIRES_IN_US) && SAME_COLUMN(TRACEPARENT) &&
                   SAME_COLUMN(TRACESTATE) && SAME_COLUMN(REC_AT) && SAME_COLUMN(REC_PERIOD_US) &&
                   SAME_COLUMN(MSG_ID),
               "run_claim_unlimited.sql must return run_claim.sql's columns in the same places");
#undef SAME_COLUMN

static bool same_text(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* Whether a text[] literal lists only empty strings (as strbuf_array_text writes them). */
static bool only_empty_strings(const char *a)
{
    if (!a || *a++ != '{')
        return false;
    if (*a == '}')
        return a[1] == '\0';
    for (;;) {
        if (a[0] != '"' || a[1] != '"')
            return false;
        a += 2;
        if (*a == '}')
            return a[1] == '\0';
        if (*a++ != ',')
            return false;
    }
}

void claim_statement(const char *const full[SQL_RUN_CLAIM_NPARAMS], bool recovery_paced,
                     claim_stmt *out)
{
    /* No tick, no frontier row (no spaced customer), no carrier among the pairs, no recovery
     * pace, and the pairs are the customers with their limits: then run_claim.sql's customer
     * join, tick guard, carrier rankings and turns, frontier upsert and recovery cell all change
     * nothing. (The lean statement takes no recovered item of a customer with a recovery pace,
     * and its rows say it has one: the next round is then this one.) */
    bool lean = !recovery_paced && !full[SQL_RUN_CLAIM_P_TICK] &&
                same_text(full[SQL_RUN_CLAIM_P_FR_CUSTOMER], "{}") &&
                same_text(full[SQL_RUN_CLAIM_P_CARRIER], "{}") &&
                only_empty_strings(full[SQL_RUN_CLAIM_P_PAIR_CARRIER]) &&
                same_text(full[SQL_RUN_CLAIM_P_PAIR_CUSTOMER], full[SQL_RUN_CLAIM_P_CUSTOMER]) &&
                same_text(full[SQL_RUN_CLAIM_P_PAIR_LIMIT], full[SQL_RUN_CLAIM_P_CUSTOMER_LIMIT]);
    if (!lean) {
        *out =
            (claim_stmt){.sql = sql_q_run_claim, .nparams = SQL_RUN_CLAIM_NPARAMS, .params = full};
        return;
    }
    *out =
        (claim_stmt){.sql = sql_q_run_claim_unlimited, .nparams = SQL_RUN_CLAIM_UNLIMITED_NPARAMS};
    out->lean[SQL_RUN_CLAIM_UNLIMITED_P_PAIR_CUSTOMER] = full[SQL_RUN_CLAIM_P_PAIR_CUSTOMER];
    out->lean[SQL_RUN_CLAIM_UNLIMITED_P_PAIR_LIMIT] = full[SQL_RUN_CLAIM_P_PAIR_LIMIT];
    out->lean[SQL_RUN_CLAIM_UNLIMITED_P_LEASE_S] = full[SQL_RUN_CLAIM_P_LEASE_S];
    out->lean[SQL_RUN_CLAIM_UNLIMITED_P_TOKEN] = full[SQL_RUN_CLAIM_P_TOKEN];
    out->lean[SQL_RUN_CLAIM_UNLIMITED_P_CLAIMED_BY] = full[SQL_RUN_CLAIM_P_CLAIMED_BY];
    out->params = out->lean;
}

void claim_row_parse(const PGresult *res, int r, claim_row *out)
{
    *out = (claim_row){.customer_id = row_i64(res, r, SQL_RUN_CLAIM_C_CUSTOMER_ID),
                       .carrier = PQgetvalue(res, r, SQL_RUN_CLAIM_C_CARRIER)};
    out->is_item = PQgetvalue(res, r, SQL_RUN_CLAIM_C_KIND)[0] == 'i';
    if (!row_null(res, r, SQL_RUN_CLAIM_C_REC_AT))
        out->rec_at = row_i64(res, r, SQL_RUN_CLAIM_C_REC_AT);
    if (!row_null(res, r, SQL_RUN_CLAIM_C_REC_PERIOD_US))
        out->rec_period_us = row_i64(res, r, SQL_RUN_CLAIM_C_REC_PERIOD_US);
    if (!out->is_item) {
        out->has_next = !row_null(res, r, SQL_RUN_CLAIM_C_NEXT_US);
        if (out->has_next)
            out->next_us = row_i64(res, r, SQL_RUN_CLAIM_C_NEXT_US);
        return;
    }
    out->item_id = row_i64(res, r, SQL_RUN_CLAIM_C_ITEM_ID);
    out->attempt = row_int(res, r, SQL_RUN_CLAIM_C_ATTEMPT);
    out->max_attempts = row_int(res, r, SQL_RUN_CLAIM_C_MAX_ATTEMPTS);
    out->stale = row_bool(res, r, SQL_RUN_CLAIM_C_STALE);
    out->payload = PQgetvalue(res, r, SQL_RUN_CLAIM_C_PAYLOAD);
    out->payload_len = (size_t)PQgetlength(res, r, SQL_RUN_CLAIM_C_PAYLOAD);
    out->created_us = row_i64(res, r, SQL_RUN_CLAIM_C_CREATED_US);
    out->msg_id = row_i64(res, r, SQL_RUN_CLAIM_C_MSG_ID);
    out->ordered =
        !row_null(res, r, SQL_RUN_CLAIM_C_ORDERED) && row_bool(res, r, SQL_RUN_CLAIM_C_ORDERED);
    if (!row_null(res, r, SQL_RUN_CLAIM_C_EXPIRES_IN_US))
        out->expires_in_us = row_i64(res, r, SQL_RUN_CLAIM_C_EXPIRES_IN_US);
    if (!row_null(res, r, SQL_RUN_CLAIM_C_TRACEPARENT))
        out->traceparent = PQgetvalue(res, r, SQL_RUN_CLAIM_C_TRACEPARENT);
    if (!row_null(res, r, SQL_RUN_CLAIM_C_TRACESTATE))
        out->tracestate = PQgetvalue(res, r, SQL_RUN_CLAIM_C_TRACESTATE);
}

/* A text column, NULL when SQL NULL. */
static const char *row_text_or_null(const PGresult *res, int r, int col)
{
    return PQgetisnull(res, r, col) ? NULL : PQgetvalue(res, r, col);
}

void customer_row_parse(const PGresult *res, int r, customer_row *out)
{
    *out = (customer_row){
        .id = row_i64(res, r, SQL_RUN_CUSTOMERS_C_ID),
        .name = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_NAME),
        .mode = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_MODE),
        .url = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_WEBHOOK_URL),
        .secrets = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_SECRETS),
        .headers = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_HEADERS),
        .oauth_token_url = row_text_or_null(res, r, SQL_RUN_CUSTOMERS_C_OAUTH_TOKEN_URL),
        .oauth_client_id = row_text_or_null(res, r, SQL_RUN_CUSTOMERS_C_OAUTH_CLIENT_ID),
        .oauth_client_secret = row_text_or_null(res, r, SQL_RUN_CUSTOMERS_C_OAUTH_CLIENT_SECRET),
        .oauth_scope = row_text_or_null(res, r, SQL_RUN_CUSTOMERS_C_OAUTH_SCOPE),
        .proxy = row_null(res, r, SQL_RUN_CUSTOMERS_C_PROXY)
                     ? NULL
                     : PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_PROXY),
        .client_cert = row_null(res, r, SQL_RUN_CUSTOMERS_C_CLIENT_CERT)
                           ? NULL
                           : PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_CLIENT_CERT),
        .client_key = row_null(res, r, SQL_RUN_CUSTOMERS_C_CLIENT_KEY)
                          ? NULL
                          : PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_CLIENT_KEY),
        .rate = row_double(res, r, SQL_RUN_CUSTOMERS_C_RATE_PER_MINUTE),
        .burst = row_int(res, r, SQL_RUN_CUSTOMERS_C_BURST),
        .max_in_flight = row_int(res, r, SQL_RUN_CUSTOMERS_C_MAX_IN_FLIGHT),
        .connect_timeout_ms = row_int(res, r, SQL_RUN_CUSTOMERS_C_CONNECT_TIMEOUT_MS),
        .request_timeout_ms = row_int(res, r, SQL_RUN_CUSTOMERS_C_REQUEST_TIMEOUT_MS),
        .paused = row_bool(res, r, SQL_RUN_CUSTOMERS_C_PAUSED),
        .disabled = row_bool(res, r, SQL_RUN_CUSTOMERS_C_DISABLED),
        .breaker_state = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_BREAKER_STATE),
        .breaker_failures = row_int(res, r, SQL_RUN_CUSTOMERS_C_BREAKER_FAILURES),
        .breaker_trips = row_int(res, r, SQL_RUN_CUSTOMERS_C_BREAKER_TRIPS),
        .breaker_open_until_us = row_null(res, r, SQL_RUN_CUSTOMERS_C_BREAKER_OPEN_UNTIL_US)
                                     ? 0
                                     : row_i64(res, r, SQL_RUN_CUSTOMERS_C_BREAKER_OPEN_UNTIL_US),
        .throttle_decrease = row_double(res, r, SQL_RUN_CUSTOMERS_C_THROTTLE_DECREASE),
        .throttle_increase = row_double(res, r, SQL_RUN_CUSTOMERS_C_THROTTLE_INCREASE),
        .throttle_floor = row_double(res, r, SQL_RUN_CUSTOMERS_C_THROTTLE_FLOOR),
        .failing_since_us = row_null(res, r, SQL_RUN_CUSTOMERS_C_FAILING_SINCE_US)
                                ? 0
                                : row_i64(res, r, SQL_RUN_CUSTOMERS_C_FAILING_SINCE_US),
        .disabled_at_us = row_null(res, r, SQL_RUN_CUSTOMERS_C_DISABLED_AT_US)
                              ? 0
                              : row_i64(res, r, SQL_RUN_CUSTOMERS_C_DISABLED_AT_US),
        .tenant_id = row_i64(res, r, SQL_RUN_CUSTOMERS_C_TENANT_ID),
        .tenant_rate = row_null(res, r, SQL_RUN_CUSTOMERS_C_TENANT_RATE)
                           ? 0
                           : row_double(res, r, SQL_RUN_CUSTOMERS_C_TENANT_RATE),
        .grouped = row_bool(res, r, SQL_RUN_CUSTOMERS_C_GROUPED),
        .tenant_burst = row_null(res, r, SQL_RUN_CUSTOMERS_C_TENANT_BURST)
                            ? 1
                            : row_int(res, r, SQL_RUN_CUSTOMERS_C_TENANT_BURST),
        .limit_windows = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_LIMIT_WINDOWS),
        .tenant_limit_windows = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_C_TENANT_LIMIT_WINDOWS),
        .ratelimit_headers = row_bool(res, r, SQL_RUN_CUSTOMERS_C_RATELIMIT_HEADERS),
    };
}

void host_row_parse(const PGresult *res, int r, host_row *out)
{
    *out = (host_row){
        .host = PQgetvalue(res, r, SQL_RUN_HOSTS_C_HOST),
        .limit_windows = PQgetvalue(res, r, SQL_RUN_HOSTS_C_LIMIT_WINDOWS),
        .max_connections = row_int(res, r, SQL_RUN_HOSTS_C_MAX_CONNECTIONS),
    };
}

void frontier_row_parse(const PGresult *res, int r, frontier_row *out)
{
    *out = (frontier_row){.customer_id = row_i64(res, r, SQL_RUN_FRONTIER_C_CUSTOMER_ID),
                          .has_tat = !row_null(res, r, SQL_RUN_FRONTIER_C_TAT_US),
                          .has_tick = !row_null(res, r, SQL_RUN_FRONTIER_C_LAST_TICK),
                          .credit = row_double(res, r, SQL_RUN_FRONTIER_C_CREDIT)};
    if (out->has_tat)
        out->tat_us = row_i64(res, r, SQL_RUN_FRONTIER_C_TAT_US);
    if (out->has_tick)
        out->last_tick = row_i64(res, r, SQL_RUN_FRONTIER_C_LAST_TICK);
    if (!row_null(res, r, SQL_RUN_FRONTIER_C_EFFECTIVE_RATE))
        out->effective_rate = row_double(res, r, SQL_RUN_FRONTIER_C_EFFECTIVE_RATE);
}

void backstop_row_parse(const PGresult *res, int r, backstop_row *out)
{
    *out = (backstop_row){.customer_id = row_i64(res, r, SQL_RUN_BACKSTOP_C_CUSTOMER_ID),
                          .carrier = PQgetvalue(res, r, SQL_RUN_BACKSTOP_C_CARRIER),
                          .due = row_bool(res, r, SQL_RUN_BACKSTOP_C_DUE),
                          .has_next = !row_null(res, r, SQL_RUN_BACKSTOP_C_NEXT_US)};
    if (out->has_next)
        out->next_us = row_i64(res, r, SQL_RUN_BACKSTOP_C_NEXT_US);
}

void metrics_row_parse(const PGresult *res, int r, metrics_row *out)
{
    *out = (metrics_row){
        .customer = PQgetvalue(res, r, SQL_RUN_METRICS_C_CUSTOMER),
        .due = row_double(res, r, SQL_RUN_METRICS_C_DUE),
        .in_flight = row_double(res, r, SQL_RUN_METRICS_C_IN_FLIGHT),
        .oldest_due_age_s = row_double(res, r, SQL_RUN_METRICS_C_OLDEST_DUE_AGE_S),
        .dead_tuples = row_double(res, r, SQL_RUN_METRICS_C_DEAD_TUPLES),
        .vacuum_age_s = row_double(res, r, SQL_RUN_METRICS_C_VACUUM_AGE_S),
        .dead = row_double(res, r, SQL_RUN_METRICS_C_DEAD),
        .delayed = row_double(res, r, SQL_RUN_METRICS_C_DELAYED),
        .customer_id = row_i64(res, r, SQL_RUN_METRICS_C_CUSTOMER_ID),
        .receiver = row_bool(res, r, SQL_RUN_METRICS_C_RECEIVER),
        .has_endpoints = row_bool(res, r, SQL_RUN_METRICS_C_HAS_ENDPOINTS),
        /* strtod("") of a NULL rate: 0, none. */
        .rate_per_minute = row_double(res, r, SQL_RUN_METRICS_C_RATE_PER_MINUTE),
        .mode = PQgetvalue(res, r, SQL_RUN_METRICS_C_MODE),
        .waiting = row_double(res, r, SQL_RUN_METRICS_C_WAITING),
        .blocked_keys = row_double(res, r, SQL_RUN_METRICS_C_BLOCKED_KEYS),
        .oldest_blocked_age_s = row_double(res, r, SQL_RUN_METRICS_C_OLDEST_BLOCKED_AGE_S),
        .oldest_blocked_key = PQgetisnull(res, r, SQL_RUN_METRICS_C_OLDEST_BLOCKED_KEY)
                                  ? NULL
                                  : PQgetvalue(res, r, SQL_RUN_METRICS_C_OLDEST_BLOCKED_KEY),
    };
}

void carrier_row_parse(const PGresult *res, int r, carrier_row *out)
{
    *out = (carrier_row){
        .name = PQgetvalue(res, r, SQL_RUN_CARRIERS_C_NAME),
        .max_per_round = row_int(res, r, SQL_RUN_CARRIERS_C_MAX_PER_ROUND),
        .max_in_flight = row_int(res, r, SQL_RUN_CARRIERS_C_MAX_IN_FLIGHT),
    };
}

void event_row_parse(const PGresult *res, int r, event_row *out)
{
    *out = (event_row){
        .id = row_i64(res, r, SQL_RUN_EVENTS_C_ID),
        .kind = PQgetvalue(res, r, SQL_RUN_EVENTS_C_KIND),
        .customer = PQgetvalue(res, r, SQL_RUN_EVENTS_C_CUSTOMER),
        .detail = PQgetvalue(res, r, SQL_RUN_EVENTS_C_DETAIL),
    };
}

bool customer_page_row_parse(const PGresult *res, int r, customer_row *out)
{
    /* What run_customers.sql gives a customer with nothing in another table and no headers,
     * auth, certificate, proxy or windows (run_customers_page.sql; test_queries.c). */
    int64_t id = row_i64(res, r, SQL_RUN_CUSTOMERS_PAGE_C_ID);
    *out = (customer_row){
        .id = id,
        .name = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_PAGE_C_NAME),
        .mode = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_PAGE_C_MODE),
        .url = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_PAGE_C_WEBHOOK_URL),
        .secrets = PQgetvalue(res, r, SQL_RUN_CUSTOMERS_PAGE_C_SECRETS),
        .headers = "",
        .rate = row_double(res, r, SQL_RUN_CUSTOMERS_PAGE_C_RATE_PER_MINUTE),
        .burst = row_int(res, r, SQL_RUN_CUSTOMERS_PAGE_C_BURST),
        .max_in_flight = row_int(res, r, SQL_RUN_CUSTOMERS_PAGE_C_MAX_IN_FLIGHT),
        .connect_timeout_ms = row_int(res, r, SQL_RUN_CUSTOMERS_PAGE_C_CONNECT_TIMEOUT_MS),
        .request_timeout_ms = row_int(res, r, SQL_RUN_CUSTOMERS_PAGE_C_REQUEST_TIMEOUT_MS),
        .paused = row_bool(res, r, SQL_RUN_CUSTOMERS_PAGE_C_PAUSED),
        .disabled = row_bool(res, r, SQL_RUN_CUSTOMERS_PAGE_C_DISABLED),
        .breaker_state = "closed",
        .throttle_decrease = row_double(res, r, SQL_RUN_CUSTOMERS_PAGE_C_THROTTLE_DECREASE),
        .throttle_increase = row_double(res, r, SQL_RUN_CUSTOMERS_PAGE_C_THROTTLE_INCREASE),
        .throttle_floor = row_double(res, r, SQL_RUN_CUSTOMERS_PAGE_C_THROTTLE_FLOOR),
        .disabled_at_us = row_null(res, r, SQL_RUN_CUSTOMERS_PAGE_C_DISABLED_AT_US)
                              ? 0
                              : row_i64(res, r, SQL_RUN_CUSTOMERS_PAGE_C_DISABLED_AT_US),
        .tenant_id = id,
        .tenant_burst = 1,
        .limit_windows = "",
        .tenant_limit_windows = "",
        .ratelimit_headers = row_bool(res, r, SQL_RUN_CUSTOMERS_PAGE_C_RATELIMIT_HEADERS),
    };
    return !row_bool(res, r, SQL_RUN_CUSTOMERS_PAGE_C_WHOLE);
}
