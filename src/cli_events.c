/* cli_events.c - `pgpace events`: the customers' and endpoints' lifecycle events
 * (pgpace.event), newest --limit of them, oldest first. */
#include "cli.h"
#include "sql_embed.h"
#include "validate.h"

#include <stdio.h>
#include <string.h>

static const char events_usage[] =
    "usage: pgpace events [--customer C [--endpoint E]] [--since T] [--until T] [--kind K]\n"
    "                     [--limit N]\n"
    "\n"
    "Lists customers' lifecycle events, oldest first: failing (the breaker opened), recovered\n"
    "(it closed again), breaker_open (open longer than [health] breaker_event_after), disabled\n"
    "(every delivery failed for disable_after; `pgpace customer enable NAME` re-enables),\n"
    "enabled, paused (by an operator or a receiver's 410 Gone), resumed. Each names the\n"
    "customer and the endpoint it happened to ('default': the customer's own receiver).\n"
    "\n"
    "  --customer C   one customer's events, its endpoints' included (by name, also after it\n"
    "                 was deleted)\n"
    "  --endpoint E   (with --customer) one of its endpoints' events; 'default': its own\n"
    "                 receiver's\n"
    "  --since T      --until T: event time range (e.g. 2026-01-31T12:00:00Z, or 'today')\n"
    "  --kind K       one kind of event (api_write: a change made through the management\n"
    "                 API, with the token's name, the method and the path)\n"
    "  --limit N      the latest N events (default 100, 1-1000000)\n"
    "\n"
    "Kept for [delivery] attempt_retention_days, like the attempt log.\n";

enum { OPT_CUSTOMER = 1, OPT_ENDPOINT, OPT_SINCE, OPT_UNTIL, OPT_KIND, OPT_LIMIT };

static const char *const kinds[] = {"failing", "recovered", "breaker_open", "disabled",
                                    "enabled", "paused",    "resumed",      "api_write"};

static bool kind_known(const char *k)
{
    for (size_t i = 0; i < PGP_ARRAY_LEN(kinds); i++)
        if (strcmp(k, kinds[i]) == 0)
            return true;
    return false;
}

int cli_events(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"customer", required_argument, NULL, OPT_CUSTOMER},
                                         {"endpoint", required_argument, NULL, OPT_ENDPOINT},
                                         {"since", required_argument, NULL, OPT_SINCE},
                                         {"until", required_argument, NULL, OPT_UNTIL},
                                         {"kind", required_argument, NULL, OPT_KIND},
                                         {"limit", required_argument, NULL, OPT_LIMIT},
                                         {NULL, 0, NULL, 0}};
    const char *customer = NULL, *endpoint = NULL, *since = NULL, *until = NULL, *kind = NULL,
               *limit = "100";
    pgp_error err;
    long long n;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(events_usage, stdout);
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
        case OPT_KIND:
            if (!kind_known(optarg))
                return cli_usage_error(ctx,
                                       "--kind: expected failing, recovered, breaker_open, "
                                       "disabled, enabled, paused, resumed or api_write, "
                                       "got '%s'",
                                       optarg);
            kind = optarg;
            break;
        case OPT_LIMIT:
            if (validate_int("--limit", optarg, 1, 1000000, &n, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            limit = optarg;
            break;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    if (endpoint && !customer)
        return cli_usage_error(ctx, "--endpoint needs --customer (the customer it belongs to)");
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {
        [SQL_EVENTS_LIST_P_CUSTOMER] = customer, [SQL_EVENTS_LIST_P_SINCE] = since,
        [SQL_EVENTS_LIST_P_UNTIL] = until,       [SQL_EVENTS_LIST_P_KIND] = kind,
        [SQL_EVENTS_LIST_P_LIMIT] = limit,       [SQL_EVENTS_LIST_P_ENDPOINT] = endpoint};
    PGresult *res = cli_query(ctx, sql_q_events_list, PGP_ARRAY_LEN(params), params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) == 0)
        printf("no events match\n");
    else
        cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}
