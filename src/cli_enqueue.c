/* cli_enqueue.c - `pgpace enqueue`: one item from arguments, or many from a JSON-lines file. */
#include "cli.h"
#include "json_dupkey.h"
#include "db.h"
#include "sql_embed.h"
#include "trace_context.h"
#include "validate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char enqueue_usage[] =
    "usage: pgpace enqueue CUSTOMER [PAYLOAD] [options]\n"
    "       pgpace enqueue --file FILE\n"
    "\n"
    "One item: PAYLOAD is JSON (or use --payload-file, or stdin when neither is given).\n"
    "  --carrier NAME          upstream source / sub-tenant, for carrier caps\n"
    "  --kind KIND             free-form type, 1-128 characters\n"
    "  --run-at TIMESTAMP      not before this time (ISO 8601, e.g. 2026-01-31T12:00:00Z)\n"
    "  --idempotency-key KEY   a repeated key for the same customer returns the first id\n"
    "  --priority N            -32767..32767, higher first (default 0; -32768 is reserved\n"
    "                          for items sent again by pgpace recover)\n"
    "  --expires-at TIMESTAMP  never sent after this time: dead-lettered as 'expired' instead\n"
    "                          (already past: dead-lettered at once; must be after --run-at)\n"
    "  --supersede-key KEY     replace the payload of this customer's queued, never claimed\n"
    "                          item with this key (it keeps its id and place)\n"
    "  --order-key KEY         deliver this customer's (each endpoint's) items with the same\n"
    "                          key one at a time, in enqueue order (1-255 characters)\n"
    "  --traceparent V         W3C Trace Context traceparent, sent with the webhook as the\n"
    "                          traceparent header (00-<32 hex>-<16 hex>-<2 hex>)\n"
    "  --tracestate V          W3C tracestate (key=value,...), sent as the tracestate header;\n"
    "                          needs --traceparent\n"
    "  --payload-file FILE     read the payload from FILE\n"
    "Prints the item id (the superseded item's when it superseded one). For a customer with\n"
    "endpoints it is the event's id, new also when it superseded (every delivery of the event\n"
    "is sent with webhook-id msg_<id>).\n"
    "\n"
    "Many items: --file FILE ('-' for stdin), one JSON object per line with the fields\n"
    "customer, payload (required), carrier, kind, run_at, idempotency_key, priority,\n"
    "expires_at, supersede_key, traceparent, tracestate, order_key.\n"
    "All lines are loaded in one transaction: the first bad line is reported by number and\n"
    "nothing is enqueued. A line for a customer with endpoints is an event, fanned out to\n"
    "every endpoint whose subscription and filter match.\n";

enum {
    OPT_CARRIER = 1,
    OPT_KIND,
    OPT_RUN_AT,
    OPT_KEY,
    OPT_PRIORITY,
    OPT_PAYLOAD_FILE,
    OPT_FILE,
    OPT_EXPIRES_AT,
    OPT_SUPERSEDE_KEY,
    OPT_TRACEPARENT,
    OPT_TRACESTATE,
    OPT_ORDER_KEY
};

/* The optional fields of one item, as given on the command line (NULL: not given). */
typedef struct item_args {
    const char *carrier, *kind, *run_at, *key, *priority, *expires_at, *supersede_key;
    const char *traceparent, *tracestate, *order_key;
} item_args;

/* Reads a whole stream into a NUL-terminated buffer; fails on NUL bytes (never valid JSON). */
static char *read_all(FILE *in, size_t *len_out)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, in)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    if (ferror(in)) {
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    *len_out = len;
    return buf;
}

/* Names the field a server-side error concerns, for "a bad enqueue says which field". */
static const char *field_of_error(const char *sqlstate, const char *message)
{
    /* Data exceptions (class 22) come from the casts of $2 (payload) and $5 (run_at; $8,
     * expires_at, was read alone before) or from pgpace.enqueue itself, which names the field;
     * the other fields are validated before sending. "stack depth limit exceeded" (54001) is
     * the cast of a payload nested deeper than the server's parser goes. */
    if (sqlstate && strcmp(sqlstate, "54001") == 0)
        return "payload";
    if (!sqlstate || strncmp(sqlstate, "22", 2) != 0)
        return NULL;
    if (message && strncmp(message, "pgpace.enqueue: ", 16) == 0)
        return NULL;
    if (strcmp(sqlstate, "22007") == 0 || strcmp(sqlstate, "22008") == 0)
        return "run_at";
    if (strcmp(sqlstate, "22023") == 0 || strcmp(sqlstate, "22004") == 0)
        return NULL; /* raised by pgpace.enqueue itself, which names the field */
    return "payload";
}

static int enqueue_one(cli_ctx *ctx, const char *customer, const char *payload, const item_args *a)
{
    /* One reading of a body (json_dupkey.h): PostgreSQL would keep the last of two members
     * with one name, another reader the first. */
    char where[160];
    int dk = json_dupkey(payload, strlen(payload), where, sizeof where);
    if (dk == 1)
        return cli_fail(ctx, CLI_FAILED,
                        "field payload: duplicate member %s: an object names it twice", where);
    if (dk == -2)
        return cli_fail(ctx, CLI_FAILED, "out of memory");
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    if (a->expires_at) {
        /* Both timestamps fail with the same SQLSTATE in the enqueue statement; this one is
         * read alone first so that its error names its field. */
        const char *ts[] = {a->expires_at};
        PGresult *res =
            PQexecParams(ctx->conn, "SELECT $1::timestamptz", 1, NULL, ts, NULL, NULL, 0);
        if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
            pgp_error err;
            db_result_error(res, ctx->conn, &err);
            PQclear(res);
            return cli_fail(ctx, CLI_FAILED, "field expires_at: %s", err.msg);
        }
        PQclear(res);
    }
    const char *params[] = {customer,
                            payload,
                            a->carrier,
                            a->kind,
                            a->run_at,
                            a->key,
                            a->priority ? a->priority : "0",
                            a->expires_at,
                            a->supersede_key,
                            a->traceparent,
                            a->tracestate,
                            a->order_key};
    PGresult *res = PQexecParams(ctx->conn, sql_q_enqueue_one, (int)PGP_ARRAY_LEN(params), NULL,
                                 params, NULL, NULL, 0);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        pgp_error err;
        db_result_error(res, ctx->conn, &err);
        const char *field = res ? field_of_error(PQresultErrorField(res, PG_DIAG_SQLSTATE),
                                                 PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY))
                                : NULL;
        PQclear(res);
        if (field)
            return cli_fail(ctx, CLI_FAILED, "field %s: %s", field, err.msg);
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    }
    printf("%s\n", PQgetvalue(res, 0, 0));
    PQclear(res);
    return CLI_OK;
}

/* Appends `line` to the COPY text-format buffer, escaping what COPY treats specially. */
static int copy_line(PGconn *conn, long long line_no, const char *line, size_t len, char **buf,
                     size_t *cap)
{
    size_t need = len * 2 + 32;
    if (need > *cap) {
        char *bigger = realloc(*buf, need);
        if (!bigger)
            return -ENOMEM;
        *buf = bigger;
        *cap = need;
    }
    char *out = *buf;
    size_t o = (size_t)snprintf(out, *cap, "%lld\t", line_no);
    for (size_t i = 0; i < len; i++) {
        char c = line[i];
        if (c == '\\' || c == '\t' || c == '\r') {
            out[o++] = '\\';
            out[o++] = c == '\\' ? '\\' : c == '\t' ? 't' : 'r';
        } else {
            out[o++] = c;
        }
    }
    out[o++] = '\n';
    return PQputCopyData(conn, out, (int)o) == 1 ? 0 : -EIO;
}

static int enqueue_file(cli_ctx *ctx, const char *path)
{
    FILE *in = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!in)
        return cli_fail(ctx, CLI_FAILED, "cannot open '%s': %s", path, strerror(errno));
    int status = cli_connect(ctx);
    if (status != CLI_OK) {
        if (in != stdin)
            fclose(in);
        return status;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    pgp_error err = {{0}};
    int rc = db_exec_simple(ctx->conn, "BEGIN", &err);
    if (rc == 0)
        rc = db_exec_simple(ctx->conn, sql_q_bulk_stage, &err);
    if (rc == 0) {
        PGresult *res = PQexec(ctx->conn, sql_q_bulk_copy);
        if (!res || PQresultStatus(res) != PGRES_COPY_IN)
            rc = db_result_error(res, ctx->conn, &err);
        PQclear(res);
    }
    char *line = NULL, *buf = NULL;
    size_t line_cap = 0, buf_cap = 0;
    long long line_no = 0;
    bool in_copy = rc == 0;
    while (rc == 0) {
        ssize_t len = getline(&line, &line_cap, in);
        if (len < 0)
            break;
        line_no++;
        if (len > 0 && line[len - 1] == '\n')
            len--;
        if (len > 0 && line[len - 1] == '\r')
            len--;
        if (memchr(line, '\0', (size_t)len)) {
            rc = pgp_error_set(&err, -EINVAL, "line %lld: contains a NUL byte", line_no);
            break;
        }
        char where[160];
        int dk = json_dupkey(line, (size_t)len, where, sizeof where);
        if (dk == 1) {
            rc = pgp_error_set(&err, -EINVAL,
                               "line %lld: duplicate member %s: an object names it twice", line_no,
                               where);
            break;
        }
        if (dk == -2) {
            rc = pgp_error_set(&err, -ENOMEM, "line %lld: out of memory", line_no);
            break;
        }
        if (copy_line(ctx->conn, line_no, line, (size_t)len, &buf, &buf_cap) != 0)
            rc = pgp_error_set(&err, -EIO, "sending line %lld: %s", line_no,
                               PQerrorMessage(ctx->conn));
    }
    if (rc == 0 && ferror(in))
        rc = pgp_error_set(&err, -EIO, "reading '%s': %s", path, strerror(errno));
    free(line);
    free(buf);
    if (in != stdin)
        fclose(in);

    if (in_copy) {
        /* Ending the COPY with an error message aborts it server-side: nothing is loaded. */
        if (PQputCopyEnd(ctx->conn, rc == 0 ? NULL : "client aborted the load") != 1 && rc == 0)
            rc = pgp_error_set(&err, -EIO, "%s", PQerrorMessage(ctx->conn));
        PGresult *res;
        while ((res = PQgetResult(ctx->conn)) != NULL) {
            if (PQresultStatus(res) != PGRES_COMMAND_OK && rc == 0)
                rc = db_result_error(res, ctx->conn, &err);
            PQclear(res);
        }
    }
    long long inserted = 0, duplicates = 0, superseded = 0, expired = 0;
    long long events = 0, deliveries = 0, unmatched = 0;
    if (rc == 0) {
        PGresult *res;
        rc = db_exec(ctx->conn, sql_q_bulk_apply, 0, NULL, &res, &err);
        if (rc == 0) {
            inserted = atoll(PQgetvalue(res, 0, SQL_BULK_APPLY_C_INSERTED));
            duplicates = atoll(PQgetvalue(res, 0, SQL_BULK_APPLY_C_DUPLICATES));
            superseded = atoll(PQgetvalue(res, 0, SQL_BULK_APPLY_C_SUPERSEDED));
            expired = atoll(PQgetvalue(res, 0, SQL_BULK_APPLY_C_EXPIRED));
            events = atoll(PQgetvalue(res, 0, SQL_BULK_APPLY_C_EVENTS));
            deliveries = atoll(PQgetvalue(res, 0, SQL_BULK_APPLY_C_DELIVERIES));
            unmatched = atoll(PQgetvalue(res, 0, SQL_BULK_APPLY_C_UNMATCHED));
            PQclear(res);
        }
    }
    if (rc == 0)
        rc = db_exec_simple(ctx->conn, "COMMIT", &err);
    if (rc != 0) {
        db_rollback(ctx->conn);
        return cli_fail(ctx, CLI_FAILED, "%s: %s; nothing was enqueued", path, err.msg);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("enqueued %lld item(s) from %s in %.2f s (%lld duplicate idempotency key(s) "
           "skipped)",
           inserted, path, secs, duplicates);
    if (superseded > 0)
        printf("; %lld superseded a queued item", superseded);
    if (expired > 0)
        printf("; %lld past their deadline, dead-lettered as expired", expired);
    /* Lines of customers with endpoints: events, counted above too. */
    if (events > 0) {
        printf("; %lld event(s) fanned out to %lld deliveries", events, deliveries);
        if (unmatched > 0)
            printf(", %lld matched no endpoint (kept as events)", unmatched);
    }
    putchar('\n');
    return CLI_OK;
}

int cli_enqueue(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_COMMON_OPTIONS,
        {"carrier", required_argument, NULL, OPT_CARRIER},
        {"kind", required_argument, NULL, OPT_KIND},
        {"run-at", required_argument, NULL, OPT_RUN_AT},
        {"idempotency-key", required_argument, NULL, OPT_KEY},
        {"priority", required_argument, NULL, OPT_PRIORITY},
        {"payload-file", required_argument, NULL, OPT_PAYLOAD_FILE},
        {"file", required_argument, NULL, OPT_FILE},
        {"expires-at", required_argument, NULL, OPT_EXPIRES_AT},
        {"supersede-key", required_argument, NULL, OPT_SUPERSEDE_KEY},
        {"traceparent", required_argument, NULL, OPT_TRACEPARENT},
        {"tracestate", required_argument, NULL, OPT_TRACESTATE},
        {"order-key", required_argument, NULL, OPT_ORDER_KEY},
        {NULL, 0, NULL, 0}};
    item_args a = {0};
    const char *payload_file = NULL, *file = NULL;
    pgp_error err;
    long long n;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(enqueue_usage, stdout);
            return CLI_OK;
        case OPT_CARRIER:
            if (validate_name("--carrier", optarg, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            a.carrier = optarg;
            break;
        case OPT_KIND:
            if (!*optarg || strlen(optarg) > 128)
                return cli_usage_error(ctx, "--kind: must be 1 to 128 characters");
            a.kind = optarg;
            break;
        case OPT_RUN_AT:
            a.run_at = optarg;
            break;
        case OPT_EXPIRES_AT:
            a.expires_at = optarg;
            break;
        case OPT_SUPERSEDE_KEY:
            if (!*optarg || strlen(optarg) > 255)
                return cli_usage_error(ctx, "--supersede-key: must be 1 to 255 characters");
            a.supersede_key = optarg;
            break;
        case OPT_ORDER_KEY:
            /* The length (in characters, not bytes) and control characters are checked by
             * pgpace.order_key_error, whose message names the field. */
            if (!*optarg)
                return cli_usage_error(ctx, "--order-key: must not be empty");
            a.order_key = optarg;
            break;
        case OPT_TRACEPARENT:
            a.traceparent = optarg;
            break;
        case OPT_TRACESTATE:
            a.tracestate = optarg;
            break;
        case OPT_KEY:
            if (!*optarg || strlen(optarg) > 255)
                return cli_usage_error(ctx, "--idempotency-key: must be 1 to 255 characters");
            a.key = optarg;
            break;
        case OPT_PRIORITY:
            /* -32768 is the recovery lane's (pgpace recover), below all live traffic. */
            if (validate_int("--priority", optarg, -32767, 32767, &n, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            a.priority = optarg;
            break;
        case OPT_PAYLOAD_FILE:
            payload_file = optarg;
            break;
        case OPT_FILE:
            file = optarg;
            break;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    int nargs = argc - optind;
    if (file) {
        if (nargs > 0 || a.carrier || a.kind || a.run_at || a.key || a.priority || a.expires_at ||
            a.supersede_key || a.traceparent || a.tracestate || a.order_key || payload_file)
            return cli_usage_error(ctx, "--file takes every field from the file; give no other "
                                        "item arguments");
        return enqueue_file(ctx, file);
    }
    /* Checked together (a tracestate needs a traceparent), after both flags were read. */
    if (trace_context_check("--traceparent", a.traceparent, "--tracestate", a.tracestate, &err) !=
        0)
        return cli_usage_error(ctx, "%s", err.msg);
    if (nargs < 1)
        return cli_usage_error(ctx, "missing CUSTOMER (or --file FILE)");
    if (nargs > 2)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind + 2]);
    const char *customer = argv[optind];
    if (nargs == 2 && payload_file)
        return cli_usage_error(ctx, "give the payload as an argument or --payload-file, not both");
    if (nargs == 2)
        return enqueue_one(ctx, customer, argv[optind + 1], &a);

    FILE *in = payload_file ? fopen(payload_file, "r") : stdin;
    if (!in)
        return cli_fail(ctx, CLI_FAILED, "cannot open '%s': %s", payload_file, strerror(errno));
    size_t len = 0;
    char *payload = read_all(in, &len);
    if (in != stdin)
        fclose(in);
    if (!payload)
        return cli_fail(ctx, CLI_FAILED, "cannot read the payload");
    int status;
    if (strlen(payload) != len)
        status = cli_fail(ctx, CLI_FAILED, "field payload: contains a NUL byte (not JSON)");
    else
        status = enqueue_one(ctx, customer, payload, &a);
    free(payload);
    return status;
}
