/* cli_stats.c - `pgpace stats`: per-customer queue statistics. */
#include "cli.h"
#include "sql_embed.h"

#include <stdio.h>

static const char stats_usage[] =
    "usage: pgpace stats [--customer NAME]\n"
    "\n"
    "Per customer: due (may be claimed now), in_flight (claimed, lease running), delayed\n"
    "(scheduled for later or waiting for a retry), dead (dead letters), and the age of the\n"
    "oldest due item in seconds.\n";

int cli_stats(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"customer", required_argument, NULL, 'c'},
                                         {NULL, 0, NULL, 0}};
    const char *customer = NULL;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "hc:", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(stats_usage, stdout);
            return CLI_OK;
        }
        if (opt == 'c') {
            customer = optarg;
            continue;
        }
        return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {customer};
    PGresult *res = cli_query(ctx, sql_q_stats, 1, params);
    if (!res)
        return CLI_FAILED;
    int rows = PQntuples(res);
    if (customer && rows == 0) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "unknown customer '%s'", customer);
    }
    cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}
