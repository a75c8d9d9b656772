/* cli_recover.c - `pgpace recover`: send a customer's (or one of its endpoints') items of a
 * time range again, and back-fill an endpoint with the events it has no delivery of.
 *
 * A thin front of pgpace.recover and pgpace.recover_endpoint (sql/functions/12_recover.sql),
 * where the rules live so that SQL callers get the same: this file checks the flags (exit 2
 * naming the flag), reads each timestamp as PostgreSQL does so that one that does not parse
 * names its flag, maps the functions' errors about their inputs back to the flags, and prints
 * what was done.
 */
#include "cli.h"
#include "db.h"
#include "sql_embed.h"
#include "validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char recover_usage[] =
    "usage: pgpace recover --customer NAME [--endpoint NAME] --since TIMESTAMP\n"
    "                      [--until TIMESTAMP] [--failed | --all] [--rate R] [--dry-run]\n"
    "\n"
    "Sends the customer's items that were enqueued (created) in [--since, --until) again, with\n"
    "their original webhook-id, in a lane behind the customer's live traffic: every live item\n"
    "of the customer goes first, the recovered ones fill the rest of its rate.\n"
    "\n"
    "  --endpoint NAME   one endpoint of the customer instead (default: its own receiver): its\n"
    "                    deliveries of the range as above, and a back-fill: every event of the\n"
    "                    customer in the range that the endpoint's subscription and filter match\n"
    "                    but that has no delivery for it (the endpoint came later, or matched\n"
    "                    nothing then) gets one, in the same lane, with the event's webhook-id.\n"
    "                    Without --endpoint, a customer without a webhook URL of its own has\n"
    "                    nothing to recover\n"
    "  --since, --until  ISO 8601 timestamps (e.g. 2026-01-31T12:00:00Z); --until defaults to\n"
    "                    now; --since must be before --until and not in the future\n"
    "  --failed          only the dead-lettered items of the window (the default); their dead\n"
    "                    letters are removed, as dlq replay does\n"
    "  --all             every item of the window that is not queued now: delivered and\n"
    "                    dead-lettered ones\n"
    "  --rate R          never faster than R per minute: no two recovered items of the\n"
    "                    customer are sent less than 60/R seconds apart, nor faster than its\n"
    "                    own rate, and its live items still go first (so they may go slower);\n"
    "                    one becomes due every 60/R seconds, oldest first. The pace covers\n"
    "                    all its recovered items still queued (a later --rate replaces it;\n"
    "                    without --rate it stays while they are queued). Default: all due at\n"
    "                    once, sent at the customer's own rate behind its live traffic\n"
    "  --dry-run         count what would be sent, change nothing\n"
    "\n"
    "Items still queued are skipped and counted. Days of the window whose items are no longer\n"
    "kept (dropped by retention) are listed with the item ids the attempt log or the dead\n"
    "letters still know of them. Attempts start again at 0.\n";

enum {
    OPT_CUSTOMER = 1,
    OPT_ENDPOINT,
    OPT_SINCE,
    OPT_UNTIL,
    OPT_FAILED,
    OPT_ALL,
    OPT_RATE,
    OPT_DRY_RUN
};

/* Prints the pace the recovered items of a row (a customer's own, or an endpoint's: its full
 * name "acme/crm") are sent at, as the database has it now (pgpace.recovery_pace; rate NULL when
 * there is none); `who` says whose rate it is. Returns CLI_OK or CLI_FAILED. */
static int print_pace(cli_ctx *ctx, const char *row, const char *who, const char *lead)
{
    const char *params[SQL_RECOVER_PACE_NPARAMS] = {[SQL_RECOVER_PACE_P_CUSTOMER] = row};
    PGresult *res = PQexecParams(ctx->conn, sql_q_recover_pace, SQL_RECOVER_PACE_NPARAMS, NULL,
                                 params, NULL, NULL, 0);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        pgp_error err;
        db_result_error(res, ctx->conn, &err);
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    }
    if (PQntuples(res) == 0) {
        printf("%s at the %s's own rate, behind its live traffic\n", lead, who);
    } else {
        double rate = strtod(PQgetvalue(res, 0, SQL_RECOVER_PACE_C_RATE_PER_MINUTE), NULL);
        printf("%s never faster than %.6g/min (at least %.3f s between two recovered sends), nor "
               "faster than the %s's own rate, behind its live traffic\n",
               lead, rate, 60.0 / rate, who);
    }
    PQclear(res);
    return CLI_OK;
}

/* Reads one timestamp flag the way the server will; a value that does not parse is a usage
 * error naming the flag. Returns CLI_OK, CLI_USAGE or CLI_FAILED (printed). */
static int check_time(cli_ctx *ctx, const char *flag, const char *value)
{
    const char *params[SQL_RECOVER_TIME_NPARAMS] = {[SQL_RECOVER_TIME_P_VALUE] = value};
    PGresult *res = PQexecParams(ctx->conn, sql_q_recover_time, SQL_RECOVER_TIME_NPARAMS, NULL,
                                 params, NULL, NULL, 0);
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK) {
        PQclear(res);
        return CLI_OK;
    }
    pgp_error err;
    db_result_error(res, ctx->conn, &err);
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    bool bad_value = state && strncmp(state, "22", 2) == 0;
    PQclear(res);
    if (bad_value)
        return cli_usage_error(ctx, "%s: %s", flag, err.msg);
    return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
}

/* The flag an error of pgpace.recover is about, from its message ("pgpace.recover: since ...",
 * or pgpace.endpoint_row's "unknown customer ..." / "customer 'acme' has no endpoint ..."), or
 * NULL when it is not about one input. */
static const char *flag_of_error(const char *state, const char *msg)
{
    static const struct {
        const char *field, *flag;
    } fields[] = {{"since", "--since"}, {"until", "--until"}, {"rate_per_minute", "--rate"}};
    if (!state || !msg)
        return NULL;
    if (strcmp(state, "23503") == 0)
        return "--customer";
    if (strcmp(state, "P0002") == 0)
        return strstr(msg, "has no endpoint") ? "--endpoint" : "--customer";
    if (strcmp(state, "22023") != 0)
        return NULL;
    const char *p = strstr(msg, "pgpace.recover: ");
    if (!p)
        return NULL;
    p += strlen("pgpace.recover: ");
    for (size_t i = 0; i < PGP_ARRAY_LEN(fields); i++) {
        size_t n = strlen(fields[i].field);
        if (strncmp(p, fields[i].field, n) == 0 && p[n] == ' ')
            return fields[i].flag;
    }
    return NULL;
}

int cli_recover(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"customer", required_argument, NULL, OPT_CUSTOMER},
                                         {"endpoint", required_argument, NULL, OPT_ENDPOINT},
                                         {"since", required_argument, NULL, OPT_SINCE},
                                         {"until", required_argument, NULL, OPT_UNTIL},
                                         {"failed", no_argument, NULL, OPT_FAILED},
                                         {"all", no_argument, NULL, OPT_ALL},
                                         {"rate", required_argument, NULL, OPT_RATE},
                                         {"dry-run", no_argument, NULL, OPT_DRY_RUN},
                                         {NULL, 0, NULL, 0}};
    const char *customer = NULL, *endpoint = NULL, *since = NULL, *until = NULL, *rate = NULL;
    bool failed = false, all = false, dry_run = false;
    pgp_error err;
    double r;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(recover_usage, stdout);
            return CLI_OK;
        case OPT_CUSTOMER:
            if (validate_name("--customer", optarg, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            customer = optarg;
            break;
        case OPT_ENDPOINT:
            if (validate_name("--endpoint", optarg, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            endpoint = optarg;
            break;
        case OPT_SINCE:
            since = optarg;
            break;
        case OPT_UNTIL:
            until = optarg;
            break;
        case OPT_FAILED:
            failed = true;
            break;
        case OPT_ALL:
            all = true;
            break;
        case OPT_RATE:
            if (validate_rate("--rate", optarg, &r, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            if (r < 0.0001)
                return cli_usage_error(ctx,
                                       "--rate: expected at least 0.0001 per minute (one item a "
                                       "week), got '%s'",
                                       optarg);
            rate = optarg;
            break;
        case OPT_DRY_RUN:
            dry_run = true;
            break;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    if (!customer)
        return cli_usage_error(ctx, endpoint ? "--endpoint needs --customer (the customer it "
                                               "belongs to)"
                                             : "--customer is required");
    if (!since)
        return cli_usage_error(ctx, "--since is required");
    if (failed && all)
        return cli_usage_error(ctx, "--failed and --all exclude each other (--failed: only dead "
                                    "letters, the default; --all: every item of the window)");

    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    if ((status = check_time(ctx, "--since", since)) != CLI_OK ||
        (until && (status = check_time(ctx, "--until", until)) != CLI_OK))
        return status;

    const char *failed_only = all ? "false" : "true", *dry = dry_run ? "true" : "false";
    PGresult *res;
    if (endpoint) {
        const char *params[SQL_RECOVER_ENDPOINT_NPARAMS] = {
            [SQL_RECOVER_ENDPOINT_P_CUSTOMER] = customer,
            [SQL_RECOVER_ENDPOINT_P_ENDPOINT] = endpoint,
            [SQL_RECOVER_ENDPOINT_P_SINCE] = since,
            [SQL_RECOVER_ENDPOINT_P_UNTIL] = until,
            [SQL_RECOVER_ENDPOINT_P_FAILED_ONLY] = failed_only,
            [SQL_RECOVER_ENDPOINT_P_RATE] = rate,
            [SQL_RECOVER_ENDPOINT_P_DRY_RUN] = dry,
        };
        res = PQexecParams(ctx->conn, sql_q_recover_endpoint, SQL_RECOVER_ENDPOINT_NPARAMS, NULL,
                           params, NULL, NULL, 0);
    } else {
        const char *params[SQL_RECOVER_NPARAMS] = {
            [SQL_RECOVER_P_CUSTOMER] = customer, [SQL_RECOVER_P_SINCE] = since,
            [SQL_RECOVER_P_UNTIL] = until,       [SQL_RECOVER_P_FAILED_ONLY] = failed_only,
            [SQL_RECOVER_P_RATE] = rate,         [SQL_RECOVER_P_DRY_RUN] = dry,
        };
        res = PQexecParams(ctx->conn, sql_q_recover, SQL_RECOVER_NPARAMS, NULL, params, NULL, NULL,
                           0);
    }
    /* Both answer (category, day, items) alike: one reading below. */
    _Static_assert((int)SQL_RECOVER_NCOLS == (int)SQL_RECOVER_ENDPOINT_NCOLS &&
                       (int)SQL_RECOVER_C_ITEMS == (int)SQL_RECOVER_ENDPOINT_C_ITEMS &&
                       (int)SQL_RECOVER_C_DAY == (int)SQL_RECOVER_ENDPOINT_C_DAY,
                   "recover and recover_endpoint answer alike");
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        db_result_error(res, ctx->conn, &err);
        const char *flag = res ? flag_of_error(PQresultErrorField(res, PG_DIAG_SQLSTATE),
                                               PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY))
                               : NULL;
        PQclear(res);
        if (flag) {
            /* The function's message without its "pgpace.recover: " prefix, after the flag. */
            const char *m = strstr(err.msg, "pgpace.recover: ");
            return cli_usage_error(ctx, "%s: %s", flag,
                                   m ? m + strlen("pgpace.recover: ") : err.msg);
        }
        /* "pgpace recover: customer 'acme' has no receiver ...", not "...: pgpace.recover: ". */
        const char *m = strstr(err.msg, "pgpace.recover: ");
        return cli_fail(ctx, CLI_FAILED, "%s",
                        m == err.msg ? m + strlen("pgpace.recover: ") : err.msg);
    }
    /* Rows: sent, still queued, past deadline, (with --endpoint) back-filled, then days. */
    int fixed = endpoint ? 4 : 3;
    if (PQnfields(res) != SQL_RECOVER_NCOLS || PQntuples(res) < fixed) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "unexpected answer from pgpace.recover");
    }
    const char *what = all ? "item(s)" : "dead-lettered item(s)";
    const char *n_send = PQgetvalue(res, 0, SQL_RECOVER_C_ITEMS);
    const char *n_queued = PQgetvalue(res, 1, SQL_RECOVER_C_ITEMS);
    if (dry_run) {
        printf("dry run: %s %s to send; nothing was changed\n", n_send, what);
    } else {
        printf("recovered %s %s", n_send, what);
        if (rate)
            printf(", one becoming due every %.3g s", 60.0 / strtod(rate, NULL));
        putchar('\n');
        if (endpoint)
            printf("back-filled %s event(s) that had no delivery for endpoint %s\n",
                   PQgetvalue(res, 3, SQL_RECOVER_C_ITEMS), endpoint);
        /* What the dispatcher will hold them to: the pace the run left (a rate given now, or
         * one an earlier recovery set that still covers queued items), else the row's own. */
        bool child = endpoint && strcmp(endpoint, "default") != 0;
        char row[2 * 128 + 2];
        snprintf(row, sizeof row, "%s%s%s", customer, child ? "/" : "", child ? endpoint : "");
        if ((status = print_pace(ctx, row, endpoint ? "endpoint" : "customer", "sent:")) !=
            CLI_OK) {
            PQclear(res);
            return status;
        }
    }
    if (dry_run && endpoint)
        printf("dry run: %s event(s) to back-fill (no delivery for endpoint %s yet)\n",
               PQgetvalue(res, 3, SQL_RECOVER_C_ITEMS), endpoint);
    printf("still queued (skipped, they are sent anyway): %s\n", n_queued);
    printf("past their own deadline (expires_at; skipped, never sent late): %s\n",
           PQgetvalue(res, 2, SQL_RECOVER_C_ITEMS));
    int days = PQntuples(res) - fixed;
    if (days > 0)
        printf("days no longer kept (dropped by retention; their items cannot be sent): %d\n",
               days);
    for (int i = fixed; i < PQntuples(res); i++)
        printf("  %s: %s item id(s) known from the attempt log or dead letters\n",
               PQgetvalue(res, i, SQL_RECOVER_C_DAY), PQgetvalue(res, i, SQL_RECOVER_C_ITEMS));
    PQclear(res);
    return CLI_OK;
}
