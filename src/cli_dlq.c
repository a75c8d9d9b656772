/* cli_dlq.c - `pgpace dlq list|replay|purge`: look at, retry and drop dead letters. */
#include "cli.h"
#include "sql_embed.h"
#include "validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char dlq_usage[] =
    "usage: pgpace dlq list   [filters] [--limit N]\n"
    "       pgpace dlq replay [filters] [--rate R]\n"
    "       pgpace dlq purge  [filters] [--all]\n"
    "\n"
    "Filters (combine freely):\n"
    "  --customer NAME    the customer's dead letters, its endpoints' included\n"
    "  --endpoint NAME    (with --customer) one of its endpoints; 'default' is its own receiver\n"
    "  --carrier NAME     --error TEXT (substring of the last error, any case)\n"
    "  --since TIMESTAMP  --until TIMESTAMP (when the item failed, e.g. 2026-01-31T12:00:00Z)\n"
    "\n"
    "list:   newest first, at most --limit rows (default 100), with the customer and endpoint\n"
    "        of each ('(deleted)': its endpoint was deleted since).\n"
    "replay: moves matching dead letters back into the queue with their attempts reset, one\n"
    "        becoming due every 60/R seconds (--rate R per minute, default 60), so a replay\n"
    "        trickles in on top of each customer's own rate instead of flooding it. An\n"
    "        endpoint's dead letters go back to that endpoint. Those whose endpoint was deleted\n"
    "        (endpoint_deleted) have no receiver: they are left as they are and counted\n"
    "        (`pgpace recover --customer C --endpoint E --since T` gives their events to an\n"
    "        endpoint that should have them). Exit status 1 when nothing else matched.\n"
    "purge:  deletes matching dead letters and their items for good; without a filter it\n"
    "        needs --all.\n";

enum {
    OPT_CUSTOMER = 1,
    OPT_CARRIER,
    OPT_ERROR,
    OPT_SINCE,
    OPT_UNTIL,
    OPT_ENDPOINT,
    OPT_LIMIT,
    OPT_RATE,
    OPT_ALL
};

int cli_dlq(cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(dlq_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    snprintf(ctx->command_buf, sizeof ctx->command_buf, "dlq %s", sub);
    ctx->command = ctx->command_buf;
    bool list = strcmp(sub, "list") == 0, replay = strcmp(sub, "replay") == 0,
         purge = strcmp(sub, "purge") == 0;
    if (!list && !replay && !purge) {
        ctx->command = "dlq";
        return cli_usage_error(ctx, "unknown subcommand '%s' (list, replay, purge)", sub);
    }
    argc--, argv++;

    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"customer", required_argument, NULL, OPT_CUSTOMER},
                                         {"carrier", required_argument, NULL, OPT_CARRIER},
                                         {"error", required_argument, NULL, OPT_ERROR},
                                         {"since", required_argument, NULL, OPT_SINCE},
                                         {"until", required_argument, NULL, OPT_UNTIL},
                                         {"endpoint", required_argument, NULL, OPT_ENDPOINT},
                                         {"limit", required_argument, NULL, OPT_LIMIT},
                                         {"rate", required_argument, NULL, OPT_RATE},
                                         {"all", no_argument, NULL, OPT_ALL},
                                         {NULL, 0, NULL, 0}};
    const char *f[6] = {NULL}; /* customer, carrier, error, since, until, endpoint */
    const char *limit = "100", *rate = "60";
    bool all = false;
    pgp_error err;
    long long n;
    double r;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(dlq_usage, stdout);
            return CLI_OK;
        case OPT_CUSTOMER:
        case OPT_CARRIER:
        case OPT_ENDPOINT:
            if (validate_name(opt == OPT_CUSTOMER  ? "--customer"
                              : opt == OPT_CARRIER ? "--carrier"
                                                   : "--endpoint",
                              optarg, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            f[opt - OPT_CUSTOMER] = optarg;
            break;
        case OPT_ERROR:
        case OPT_SINCE:
        case OPT_UNTIL:
            f[opt - OPT_CUSTOMER] = optarg;
            break;
        case OPT_LIMIT:
            if (!list)
                return cli_usage_error(ctx, "--limit applies to dlq list");
            if (validate_int("--limit", optarg, 1, 1000000, &n, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            limit = optarg;
            break;
        case OPT_RATE:
            if (!replay)
                return cli_usage_error(ctx, "--rate applies to dlq replay");
            if (validate_rate("--rate", optarg, &r, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            rate = optarg;
            break;
        case OPT_ALL:
            if (!purge)
                return cli_usage_error(ctx, "--all applies to dlq purge");
            all = true;
            break;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    if (f[5] && !f[0])
        return cli_usage_error(ctx, "--endpoint needs --customer (the customer it belongs to)");
    bool filtered = f[0] || f[1] || f[2] || f[3] || f[4];
    if (purge && !filtered && !all)
        return cli_usage_error(ctx, "purge without a filter deletes every dead letter: add a "
                                    "filter, or --all if that is what you mean");
    if (purge && filtered && all)
        return cli_usage_error(ctx, "--all cannot be combined with filters");

    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    PGresult *res;
    if (list) {
        const char *params[SQL_DLQ_LIST_NPARAMS] = {
            [SQL_DLQ_LIST_P_CUSTOMER] = f[0], [SQL_DLQ_LIST_P_CARRIER] = f[1],
            [SQL_DLQ_LIST_P_ERROR] = f[2],    [SQL_DLQ_LIST_P_SINCE] = f[3],
            [SQL_DLQ_LIST_P_UNTIL] = f[4],    [SQL_DLQ_LIST_P_LIMIT] = limit,
            [SQL_DLQ_LIST_P_ENDPOINT] = f[5]};
        res = cli_query(ctx, sql_q_dlq_list, SQL_DLQ_LIST_NPARAMS, params);
    } else if (replay) {
        const char *params[SQL_DLQ_REPLAY_NPARAMS] = {
            [SQL_DLQ_REPLAY_P_CUSTOMER] = f[0], [SQL_DLQ_REPLAY_P_CARRIER] = f[1],
            [SQL_DLQ_REPLAY_P_ERROR] = f[2],    [SQL_DLQ_REPLAY_P_SINCE] = f[3],
            [SQL_DLQ_REPLAY_P_UNTIL] = f[4],    [SQL_DLQ_REPLAY_P_RATE] = rate,
            [SQL_DLQ_REPLAY_P_ENDPOINT] = f[5]};
        res = cli_query(ctx, sql_q_dlq_replay, SQL_DLQ_REPLAY_NPARAMS, params);
    } else {
        const char *params[SQL_DLQ_PURGE_NPARAMS] = {
            [SQL_DLQ_PURGE_P_CUSTOMER] = f[0], [SQL_DLQ_PURGE_P_CARRIER] = f[1],
            [SQL_DLQ_PURGE_P_ERROR] = f[2],    [SQL_DLQ_PURGE_P_SINCE] = f[3],
            [SQL_DLQ_PURGE_P_UNTIL] = f[4],    [SQL_DLQ_PURGE_P_ENDPOINT] = f[5]};
        res = cli_query(ctx, sql_q_dlq_purge, SQL_DLQ_PURGE_NPARAMS, params);
    }
    if (!res)
        return CLI_FAILED;
    if (list) {
        if (PQntuples(res) == 0)
            printf("no dead letters match\n");
        else
            cli_print_table(res);
    } else if (replay) {
        long long replayed = strtoll(PQgetvalue(res, 0, SQL_DLQ_REPLAY_C_REPLAYED), NULL, 10);
        long long refused = strtoll(PQgetvalue(res, 0, SQL_DLQ_REPLAY_C_REFUSED), NULL, 10);
        printf("replayed %lld dead letter(s), one becoming due every %.3g s\n", replayed,
               60.0 / strtod(rate, NULL));
        if (refused > 0) {
            /* Never sent to a customer's own receiver (it was not theirs) nor to none. */
            static const char why[] =
                "dead letter(s) whose endpoint was deleted (endpoint_deleted) were not "
                "replayed: they have no receiver. `pgpace recover --customer C --endpoint E "
                "--since T` gives their events to an endpoint that should have them; `pgpace dlq "
                "purge --error endpoint_deleted` removes them";
            if (replayed == 0)
                status = cli_fail(ctx, CLI_FAILED, "%lld %s", refused, why);
            else
                printf("%lld %s\n", refused, why);
        }
    } else {
        printf("purged %s dead letter(s) and their items\n",
               PQgetvalue(res, 0, SQL_DLQ_PURGE_C_PURGED));
    }
    PQclear(res);
    return status;
}
