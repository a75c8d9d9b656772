/* api.c - the management API's and the tenant page's requests (admin_http.h, callbacks.api).
 *
 * A webhook_url in the body is judged first, as the sender would judge the address it connects
 * to (netcheck_url_allowed: an IP literal or localhost outside [delivery] allow_cidrs is refused
 * with 400 naming the field; a DNS name is judged after its lookup, at delivery). Then the
 * request runs as sql/queries/api_call.sql on the API's own connection (d->api_db, opened with
 * the admin listener): never the claim connection, so that API polls and tenant pages cannot
 * delay a claim. The database's answer is passed on; losing the connection or the database's
 * own trouble is a 503, anything else unexpected a 500, logged without the body.
 */
#include "internal.h"

#include "log.h"
#include "netcheck.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The API session's statement_timeout. */
#define API_STATEMENT_TIMEOUT "10s"

#define DB_TROUBLE                                                                                 \
    "{\"type\":\"urn:pgpace:problem:unavailable\",\"title\":\"Service Unavailable\","              \
    "\"status\":503,\"detail\":\"the database is unavailable, retry\"}"
#define INTERNAL                                                                                   \
    "{\"type\":\"urn:pgpace:problem:error\",\"title\":\"Internal Server Error\",\"status\":500,"   \
    "\"detail\":\"internal error (see the dispatcher's log)\"}"

/* An answer whose text is made here: problem documents without a field. */
static void answer(admin_http_reply *reply, int status, const char *body)
{
    admin_http_api_answer a = {.status = status, .body = body};
    admin_http_reply_api(reply, &a);
}

/* The database's trouble, worth a retry: connection (08), resources (53), operator
 * intervention (57), a read-only session after a failover (25006), a serialization failure or
 * deadlock (40). */
static bool db_trouble(const char *state)
{
    return strncmp(state, "08", 2) == 0 || strncmp(state, "53", 2) == 0 ||
           strncmp(state, "57", 2) == 0 || strcmp(state, "25006") == 0 ||
           strncmp(state, "40", 2) == 0 || strcmp(state, "55P03") == 0;
}

void api_on_db_state(pgconn *conn, pgconn_state state, void *arg)
{
    (void)arg;
    if (state != PGCONN_READY)
        return;
    /* A request that reads too much (a filter nothing matches, over every customer's items)
     * must not hold the API's one connection: cut it, and say so (57014 below). */
    if (pgconn_query(conn, "SET statement_timeout = '" API_STATEMENT_TIMEOUT "'", 0, NULL,
                     dsp_on_ignored, NULL) != 0)
        LOG_WARN("api_statement_timeout_not_set", LOG_S("meaning", "long requests are not cut"));
}

static void on_api_result(pgconn *conn, PGresult *res, void *arg)
{
    (void)conn;
    admin_http_reply *reply = arg;
    if (!res) {
        answer(reply, 503, DB_TROUBLE);
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        state = state ? state : "";
        if (strcmp(state, "57014") == 0) {
            answer(reply, 503,
                   "{\"type\":\"urn:pgpace:problem:unavailable\",\"title\":\"Service "
                   "Unavailable\",\"status\":503,\"detail\":\"the request took longer "
                   "than " API_STATEMENT_TIMEOUT ": narrow it (customer, since, until, limit)\"}");
            return;
        }
        if (db_trouble(state)) {
            answer(reply, 503, DB_TROUBLE);
            return;
        }
        /* Class 22: a path or query the statement's casts refused (text that is not UTF-8). */
        if (strncmp(state, "22", 2) == 0) {
            answer(reply, 400,
                   "{\"type\":\"urn:pgpace:problem:invalid-request\",\"title\":\"Bad Request\","
                   "\"status\":400,\"detail\":\"the path, query or body is not valid UTF-8 "
                   "JSON\"}");
            return;
        }
        LOG_ERROR("api_failed", LOG_S("sqlstate", state), LOG_S("error", msg ? msg : ""));
        answer(reply, 500, INTERNAL);
        return;
    }
    if (PQntuples(res) != 1 || PQnfields(res) != SQL_API_CALL_NCOLS ||
        PQgetisnull(res, 0, SQL_API_CALL_C_STATUS)) {
        LOG_ERROR("api_unexpected_result", LOG_I("rows", PQntuples(res)));
        answer(reply, 500, INTERNAL);
        return;
    }
#define COL(name) (PQgetisnull(res, 0, name) ? NULL : PQgetvalue(res, 0, name))
    admin_http_api_answer a = {.status = atoi(PQgetvalue(res, 0, SQL_API_CALL_C_STATUS)),
                               .etag = COL(SQL_API_CALL_C_ETAG),
                               .location = COL(SQL_API_CALL_C_LOCATION),
                               .allow = COL(SQL_API_CALL_C_ALLOW),
                               .body = COL(SQL_API_CALL_C_BODY)};
#undef COL
    if (a.status < 200 || a.status > 599)
        a.status = 500;
    admin_http_reply_api(reply, &a);
}

/* 0 when the body has no webhook_url the sender would refuse; else 400 answered. */
static int check_destination(dispatcher *d, const admin_http_api_request *req,
                             admin_http_reply *reply)
{
    if (!req->body)
        return 0;
    json_error_t jerr;
    json_t *doc = json_loadb(req->body, req->body_len, 0, &jerr);
    const char *url =
        doc && json_is_object(doc) ? json_string_value(json_object_get(doc, "webhook_url")) : NULL;
    const char *reason = NULL;
    bool refused = url && !netcheck_url_allowed(url, &d->allow, &reason);
    if (refused) {
        strbuf j = {0};
        strbuf_puts(&j, "{\"type\":\"urn:pgpace:problem:invalid-request\",\"title\":\"Bad "
                        "Request\",\"status\":400,\"field\":\"webhook_url\",\"detail\":\"");
        char detail[300];
        snprintf(detail, sizeof detail,
                 "webhook_url: refused by SSRF protection (%s); [delivery] allow_cidrs re-opens "
                 "a range",
                 reason ? reason : "not a public address");
        strbuf_json_escape(&j, detail, strlen(detail));
        strbuf_puts(&j, "\"}");
        const char *text = strbuf_str(&j);
        answer(reply, text ? 400 : 500, text ? text : INTERNAL);
        strbuf_free(&j);
    }
    json_decref(doc);
    return refused ? -1 : 0;
}

void admin_api(void *arg, const admin_http_api_request *req, admin_http_reply *reply)
{
    dispatcher *d = arg;
    if (check_destination(d, req, reply) != 0)
        return;
    const char *params[SQL_API_CALL_NPARAMS] = {
        [SQL_API_CALL_P_METHOD] = req->method,
        [SQL_API_CALL_P_SEGMENTS] = req->segments,
        [SQL_API_CALL_P_QUERY] = req->query,
        [SQL_API_CALL_P_BODY] = req->body,
        [SQL_API_CALL_P_ACTOR] = req->actor,
        [SQL_API_CALL_P_IF_MATCH] = req->if_match,
        [SQL_API_CALL_P_IDEMPOTENCY_KEY] = req->idempotency_key,
        [SQL_API_CALL_P_PORTAL_TOKEN] = req->portal_token,
    };
    if (!d->api_db || pgconn_query_prepared(d->api_db, sql_q_api_call, SQL_API_CALL_NPARAMS, params,
                                            on_api_result, reply) != 0)
        answer(reply, 503, DB_TROUBLE);
}
