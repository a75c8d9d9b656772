/* admin_enqueue.c - POST /v1/items over pgconn (admin_http.h): refuses a body nested deeper than
 * a payload may be (before the database), runs sql/queries/http_enqueue.sql and turns its
 * result, or the loss of the connection, into the HTTP status and JSON answer. An error the
 * body caused is a 4xx; 503 and 500 are kept for the database's trouble and pgpace's own.
 * Knows nothing of connections: the caller passes the answer on (admin_http_reply_done).
 */
#include "admin_http.h"
#include "admin_http_internal.h"

#include "json_depth.h"
#include "json_dupkey.h"
#include "log.h"
#include "sql_embed.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ERROR_TEXT 512

static void json_error(strbuf *sb, const char *prefix, const char *msg)
{
    /* The primary message only (never DETAIL or CONTEXT, which can quote the body), escaped
     * so it stays one line, and bounded: cut at a UTF-8 character boundary. */
    size_t n = strlen(msg);
    if (n > MAX_ERROR_TEXT) {
        n = MAX_ERROR_TEXT;
        while (n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80)
            n--;
    }
    strbuf_puts(sb, "{\"error\":\"");
    strbuf_json_escape(sb, prefix, strlen(prefix));
    strbuf_json_escape(sb, msg, n);
    strbuf_puts(sb, "\"}");
}

/* The database's trouble, not the body's, and worth a retry (503): out of disk or memory (class
 * 53), a statement or lock timeout (57014, 55P03), a read-only session (25006: connected to a
 * standby after a failover). The answer's text, or NULL for another state. */
static const char *database_trouble(const char *state)
{
    if (strncmp(state, "53", 2) == 0)
        return "database is out of resources, retry later";
    if (strcmp(state, "57014") == 0 || strcmp(state, "55P03") == 0)
        return "database timed out, retry";
    if (strcmp(state, "25006") == 0)
        return "database is read-only, retry";
    return NULL;
}

typedef struct enqueue_call {
    admin_http_enqueue_cb cb;
    void *arg;
} enqueue_call;

int admin_http_enqueue_answer(const PGresult *res, strbuf *json)
{
    if (!res) {
        strbuf_puts(json, "{\"error\":\"database unreachable\"}");
        return 503;
    }
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK) {
        if (PQntuples(res) != 1 || PQnfields(res) != SQL_HTTP_ENQUEUE_NCOLS ||
            PQgetisnull(res, 0, SQL_HTTP_ENQUEUE_C_ID)) {
            LOG_ERROR("http_enqueue_unexpected_result", LOG_I("rows", PQntuples(res)));
            strbuf_puts(json, "{\"error\":\"internal error\"}");
            return 500;
        }
        /* 201 for a new item; 200 when the id is an existing item's: a repeated idempotency
         * key ("duplicate") or a queued item whose payload this one replaced ("superseded").
         * "expired": its deadline had passed, so it went straight to the dead letters.
         * A customer with endpoints: the id is the event's (the webhook-id of each of its
         * deliveries), new also when it superseded (201 with "superseded": it moved an
         * endpoint's queued delivery), and "deliveries" the endpoints it reached. */
        const char *id = PQgetvalue(res, 0, SQL_HTTP_ENQUEUE_C_ID);
        bool created = strcmp(PQgetvalue(res, 0, SQL_HTTP_ENQUEUE_C_CREATED), "t") == 0;
        bool superseded = strcmp(PQgetvalue(res, 0, SQL_HTTP_ENQUEUE_C_SUPERSEDED), "t") == 0;
        bool expired = strcmp(PQgetvalue(res, 0, SQL_HTTP_ENQUEUE_C_EXPIRED), "t") == 0;
        /* A count made by the statement (digits only), or NULL: not an event, or a duplicate. */
        bool has_deliveries = !PQgetisnull(res, 0, SQL_HTTP_ENQUEUE_C_DELIVERIES);
        /* RFC 3339 UTC text made by the statement (digits, '-', ':', '.', 'T', 'Z': nothing
         * to escape), or null: a duplicate, a superseded or expired item, an event (each
         * endpoint has its own pace), or a customer that sends nothing now (paused,
         * disabled). */
        bool has_estimate = !PQgetisnull(res, 0, SQL_HTTP_ENQUEUE_C_ESTIMATED_SEND_AT);
        const char *estimate = PQgetvalue(res, 0, SQL_HTTP_ENQUEUE_C_ESTIMATED_SEND_AT);
        strbuf_printf(json, "{\"id\":%s%s%s%s%s%s,\"estimated_send_at\":%s%s%s}", id,
                      !created && !superseded ? ",\"duplicate\":true" : "",
                      superseded ? ",\"superseded\":true" : "", expired ? ",\"expired\":true" : "",
                      has_deliveries ? ",\"deliveries\":" : "",
                      has_deliveries ? PQgetvalue(res, 0, SQL_HTTP_ENQUEUE_C_DELIVERIES) : "",
                      has_estimate ? "\"" : "", has_estimate ? estimate : "null",
                      has_estimate ? "\"" : "");
        return created ? 201 : 200;
    }
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *context = PQresultErrorField(res, PG_DIAG_CONTEXT);
    if (!state)
        state = "";
    if (!msg)
        msg = "";
    if (strcmp(state, "54001") == 0) {
        /* "stack depth limit exceeded": the body nests deeper than the database parses (the
         * depth check before the query makes this rare: a max_stack_depth far below its
         * default). The hint, about raising that setting, is not the client's business. */
        strbuf_puts(json, "{\"error\":\"body is nested too deeply for the database (stack depth "
                          "limit exceeded)\"}");
        return 400;
    }
    /* What the body caused: bad values (class 22), a rule it breaks (class 23: an unknown
     * customer, a CHECK constraint), a limit (class 54: the payload's size or nesting), or a
     * refusal of pgpace's own raised without a code (P0001). 23505 (a unique key) is not among
     * them: enqueue takes its keys with ON CONFLICT, so one can only be a concurrent call's. */
    bool input = strncmp(state, "22", 2) == 0 ||
                 (strncmp(state, "23", 2) == 0 && strcmp(state, "23505") != 0) ||
                 strncmp(state, "54", 2) == 0 || strcmp(state, "P0001") == 0;
    if (input) {
        /* pgpace.enqueue_json names the field itself; anything else in these classes comes
         * from turning the body into jsonb ($1::jsonb, the encoding check). The context is
         * never copied: for a JSON syntax error it quotes the body. */
        bool from_function = context && strncmp(context, "JSON data", 9) != 0 &&
                             strstr(context, "PL/pgSQL function") != NULL;
        json_error(json, from_function ? "" : "body is not valid JSON: ", msg);
        return 400;
    }
    if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0 ||
        strcmp(state, "53300") == 0) {
        strbuf_puts(json, "{\"error\":\"database unreachable\"}");
        return 503;
    }
    if (strncmp(state, "40", 2) == 0 || strcmp(state, "23505") == 0) {
        strbuf_puts(json, "{\"error\":\"conflict with a concurrent enqueue, retry\"}");
        return 503;
    }
    const char *busy = database_trouble(state);
    if (busy) {
        /* Logged: the client's answer says little. */
        LOG_WARN("http_enqueue_unavailable", LOG_S("sqlstate", state), LOG_S("error", msg));
        strbuf_printf(json, "{\"error\":\"%s\"}", busy);
        return 503;
    }
    LOG_WARN("http_enqueue_failed", LOG_S("sqlstate", state), LOG_S("error", msg));
    strbuf_puts(json, "{\"error\":\"internal error\"}");
    return 500;
}

static void on_enqueue_result(pgconn *db, PGresult *res, void *arg)
{
    enqueue_call *call = arg;
    strbuf json = {0};
    int status = admin_http_enqueue_answer(res, &json);
    const char *text = strbuf_str(&json);
    if (!text) {
        status = 500;
        text = "{\"error\":\"out of memory\"}";
    }
    call->cb(call->arg, status, text);
    strbuf_free(&json);
    free(call);
}

int admin_http_enqueue_sql(pgconn *db, const char *body, size_t len, admin_http_enqueue_cb cb,
                           void *arg)
{
    if (memchr(body, '\0', len))
        return -EINVAL;
    /* The body is the payload's object, one level more. PostgreSQL parses JSON recursively and
     * would fail with 54001 near 13,000 levels; this answers before it, with the limit named,
     * for the price of one pass over the bytes (memchr over strings). */
    size_t body_max = ADMIN_HTTP_PAYLOAD_MAX_DEPTH + 1;
    if (json_depth(body, len, body_max + 1) > body_max) {
        char text[192];
        snprintf(text, sizeof text,
                 "{\"error\":\"body nests arrays and objects more than %zu levels deep (a "
                 "payload may nest at most %d)\"}",
                 body_max, ADMIN_HTTP_PAYLOAD_MAX_DEPTH);
        cb(arg, 400, text);
        return 0;
    }
    /* One reading of a body: PostgreSQL keeps the last of two members with one name, and a
     * gateway in front may have checked the first (json_dupkey.h). */
    char where[160];
    int dk = json_dupkey(body, len, where, sizeof where);
    if (dk == -2)
        return -ENOMEM;
    if (dk == 1) {
        strbuf text = {0};
        char msg[224];
        snprintf(msg, sizeof msg, "%s: an object names it twice (each member is read once)", where);
        json_error(&text, "duplicate member ", msg);
        cb(arg, 400, strbuf_str(&text));
        strbuf_free(&text);
        return 0;
    }
    enqueue_call *call = malloc(sizeof *call);
    if (!call)
        return -ENOMEM;
    call->cb = cb;
    call->arg = arg;
    const char *params[SQL_HTTP_ENQUEUE_NPARAMS] = {[SQL_HTTP_ENQUEUE_P_DOC] = body};
    int rc = pgconn_query(db, sql_q_http_enqueue, SQL_HTTP_ENQUEUE_NPARAMS, params,
                          on_enqueue_result, call);
    if (rc != 0)
        free(call);
    return rc;
}
