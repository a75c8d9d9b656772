/* cli_carrier.c - `pgpace carrier set|list`: per-carrier caps. */
#include "cli.h"
#include "sql_embed.h"
#include "validate.h"

#include <stdio.h>
#include <string.h>

static const char carrier_usage[] =
    "usage: pgpace carrier set NAME [--max-per-round N|default] [--max-in-flight N|default]\n"
    "       pgpace carrier list\n"
    "\n"
    "A carrier is the upstream source or sub-tenant an item concerns (the item's 'carrier').\n"
    "In every claim round no carrier gets more than max-per-round items, and never more than\n"
    "max-in-flight of its deliveries are outstanding. 'default' uses the dispatcher's\n"
    "configured defaults ([dispatcher] carrier_max_per_round / carrier_max_in_flight).\n";

enum { OPT_PER_ROUND = 1, OPT_IN_FLIGHT };

/* Parses N or "default" into *value / *reset. */
static int cap_arg(cli_ctx *ctx, const char *what, const char *arg, const char **value,
                   const char **reset)
{
    if (strcmp(arg, "default") == 0) {
        *reset = "true";
        return CLI_OK;
    }
    long long n;
    pgp_error err;
    if (validate_int(what, arg, 1, 1000000, &n, &err) != 0)
        return cli_usage_error(ctx, "%s (or 'default')", err.msg);
    *value = arg;
    return CLI_OK;
}

static int carrier_set(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"max-per-round", required_argument, NULL, OPT_PER_ROUND},
                                         {"max-in-flight", required_argument, NULL, OPT_IN_FLIGHT},
                                         {NULL, 0, NULL, 0}};
    const char *per_round = NULL, *in_flight = NULL;
    const char *reset_per_round = "false", *reset_in_flight = "false";
    int opt, rc;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(carrier_usage, stdout);
            return CLI_OK;
        case OPT_PER_ROUND:
            if ((rc = cap_arg(ctx, "--max-per-round", optarg, &per_round, &reset_per_round)))
                return rc;
            break;
        case OPT_IN_FLIGHT:
            if ((rc = cap_arg(ctx, "--max-in-flight", optarg, &in_flight, &reset_in_flight)))
                return rc;
            break;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage_error(ctx, "missing carrier NAME");
    const char *name = argv[optind++];
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    pgp_error err;
    if (validate_name("carrier name", name, &err) != 0)
        return cli_usage_error(ctx, "%s", err.msg);
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {name, per_round, in_flight, reset_per_round, reset_in_flight};
    PGresult *res = cli_query(ctx, sql_q_carrier_set, 5, params);
    if (!res)
        return CLI_FAILED;
    printf("%s carrier %s\n", strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? "created" : "updated",
           name);
    PQclear(res);
    return CLI_OK;
}

static int carrier_list(cli_ctx *ctx, int argc, char **argv)
{
    int parsed = cli_parse_plain(ctx, argc, argv, carrier_usage);
    if (parsed != CLI_OK)
        return parsed == CLI_HELP_SHOWN ? CLI_OK : parsed;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    PGresult *res = cli_query(ctx, sql_q_carrier_list, 0, NULL);
    if (!res)
        return CLI_FAILED;
    cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}

int cli_carrier(cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(carrier_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    snprintf(ctx->command_buf, sizeof ctx->command_buf, "carrier %s", argv[1]);
    ctx->command = ctx->command_buf;
    if (strcmp(argv[1], "set") == 0)
        return carrier_set(ctx, argc - 1, argv + 1);
    if (strcmp(argv[1], "list") == 0)
        return carrier_list(ctx, argc - 1, argv + 1);
    ctx->command = "carrier";
    return cli_usage_error(ctx, "unknown subcommand '%s' (set, list)", argv[1]);
}
