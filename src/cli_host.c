/* cli_host.c - `pgpace host set|get|list|delete`: a receiver host's own limit (pgpace.host,
 * migration 0019), over every delivery to it from every customer and endpoint: its limit
 * windows and its connection cap. The host is normalised, and every value checked naming its
 * field, by the SQL (18_limits.sql), so the CLI and SQL callers meet the same rules. */
#include "cli.h"
#include "receiver_settings.h"
#include "sql_embed.h"
#include "validate.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char host_usage[] =
    "usage: pgpace host set HOST[:PORT] [--limit COUNT/PERIOD ...] [--no-limits]\n"
    "                       [--max-connections N | --no-max-connections]\n"
    "       pgpace host get HOST[:PORT]\n"
    "       pgpace host list\n"
    "       pgpace host delete HOST[:PORT]\n"
    "\n"
    "A receiver host's own limit, over every delivery to it from every customer and endpoint\n"
    "(a chat service's webhook host, a partner's API gateway): the host's rate is shared among\n"
    "the receivers waiting for it, each still within its own limits (README, \"Limits\").\n"
    "HOST is a name or address, lower-cased ('[2001:db8::1]' for IPv6), with :PORT when the\n"
    "limit is for that port only; a webhook URL counts against its host:port row first, then\n"
    "its host row (a URL without a port has its scheme's, 443 or 80). A change reaches a\n"
    "running dispatcher within a second.\n"
    "\n"
    "  --limit COUNT/PERIOD   at most COUNT sends to the host in any PERIOD: 100/s, 5000/min,\n"
    "                         1000000/day; repeat it, or separate windows by commas (at most 8,\n"
    "                         one per period); the given ones replace the host's list\n"
    "  --no-limits            remove the host's windows\n"
    "  --max-connections N    at most N connections to the host (1-10000), instead of\n"
    "                         [delivery] max_host_connections\n"
    "  --no-max-connections   back to [delivery] max_host_connections\n";

enum { OPT_LIMIT = 1, OPT_NO_LIMITS, OPT_MAX_CONN, OPT_NO_MAX_CONN };

/* The common options only (cli_parse_plain, which takes no argument), leaving the positional
 * ones from optind. CLI_OK, CLI_HELP_SHOWN or the printed usage error. */
static int plain_options(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(host_usage, stdout);
            return CLI_HELP_SHOWN;
        }
        return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
    }
    return CLI_OK;
}

/* HOST, the one positional argument after the options. */
static int host_arg(cli_ctx *ctx, int argc, char **argv, const char **host)
{
    if (optind >= argc)
        return cli_usage_error(ctx, "missing HOST (a host name or address, optionally :PORT)");
    *host = argv[optind++];
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

static int host_set(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"limit", required_argument, NULL, OPT_LIMIT},
                                         {"no-limits", no_argument, NULL, OPT_NO_LIMITS},
                                         {"max-connections", required_argument, NULL, OPT_MAX_CONN},
                                         {"no-max-connections", no_argument, NULL, OPT_NO_MAX_CONN},
                                         {NULL, 0, NULL, 0}};
    const char *limit_args[2 * RS_LIMITS_MAX];
    size_t n_limits = 0;
    bool no_limits = false, no_max_conn = false;
    const char *max_conn = NULL;
    long long n;
    pgp_error err;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(host_usage, stdout);
            return CLI_OK;
        case OPT_LIMIT:
            if (n_limits == PGP_ARRAY_LEN(limit_args))
                return cli_usage_error(ctx, "--limit: a limit has at most %d windows",
                                       RS_LIMITS_MAX);
            if (optarg[strspn(optarg, " \t,")] == '\0')
                return cli_usage_error(ctx,
                                       "--limit: expected COUNT/PERIOD, e.g. 100/s or 50000/day");
            limit_args[n_limits++] = optarg;
            break;
        case OPT_NO_LIMITS:
            no_limits = true;
            break;
        case OPT_MAX_CONN:
            if (validate_int("--max-connections", optarg, 1, 10000, &n, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            max_conn = optarg;
            break;
        case OPT_NO_MAX_CONN:
            no_max_conn = true;
            break;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    const char *host = NULL;
    int status = host_arg(ctx, argc, argv, &host);
    if (status != CLI_OK)
        return status;
    if (n_limits > 0 && no_limits)
        return cli_usage_error(ctx, "use --limit or --no-limits, not both");
    if (max_conn && no_max_conn)
        return cli_usage_error(ctx, "use --max-connections or --no-max-connections, not both");
    char *limits = NULL;
    if (n_limits > 0 || no_limits) {
        limits = rs_limits_literal(limit_args, n_limits, &err);
        if (!limits)
            return cli_fail(ctx, CLI_FAILED, "out of memory");
        if (!limits[0]) {
            free(limits);
            return cli_usage_error(ctx, "%s", err.msg);
        }
    }
    status = cli_connect(ctx);
    if (status == CLI_OK) {
        const char *params[SQL_HOST_SET_NPARAMS] = {
            [SQL_HOST_SET_P_HOST] = host,
            [SQL_HOST_SET_P_LIMITS] = limits,
            [SQL_HOST_SET_P_MAX_CONNECTIONS] = max_conn,
            [SQL_HOST_SET_P_CLEAR_MAX_CONNECTIONS] = no_max_conn ? "true" : "false",
        };
        PGresult *res = cli_query(ctx, sql_q_host_set, SQL_HOST_SET_NPARAMS, params);
        if (res) {
            printf("%s host %s\n",
                   strcmp(PQgetvalue(res, 0, SQL_HOST_SET_C_CREATED), "t") == 0 ? "created"
                                                                                : "updated",
                   PQgetvalue(res, 0, SQL_HOST_SET_C_HOST));
            PQclear(res);
        } else {
            status = CLI_FAILED;
        }
    }
    free(limits);
    return status;
}

/* `host get|delete HOST`: its options (only --help), its HOST and a connection. CLI_OK, or the
 * status to return (CLI_OK after --help). */
static int host_command(cli_ctx *ctx, int argc, char **argv, const char **host, bool *done)
{
    *done = true;
    int parsed = plain_options(ctx, argc, argv);
    if (parsed != CLI_OK)
        return parsed == CLI_HELP_SHOWN ? CLI_OK : parsed;
    int status = host_arg(ctx, argc, argv, host);
    if (status == CLI_OK)
        status = cli_connect(ctx);
    *done = status != CLI_OK;
    return status;
}

static int host_get(cli_ctx *ctx, int argc, char **argv)
{
    const char *host = NULL;
    bool done;
    int status = host_command(ctx, argc, argv, &host, &done);
    if (done)
        return status;
    const char *params[SQL_HOST_LIST_NPARAMS] = {[SQL_HOST_LIST_P_HOST] = host};
    PGresult *res = cli_query(ctx, sql_q_host_list, SQL_HOST_LIST_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "unknown host '%s' (pgpace host list shows them)", host);
    }
    for (int c = 0; c < PQnfields(res); c++)
        printf("%-18s %s\n", PQfname(res, c), PQgetvalue(res, 0, c));
    PQclear(res);
    return CLI_OK;
}

static int host_list(cli_ctx *ctx, int argc, char **argv)
{
    int parsed = cli_parse_plain(ctx, argc, argv, host_usage);
    if (parsed != CLI_OK)
        return parsed == CLI_HELP_SHOWN ? CLI_OK : parsed;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[SQL_HOST_LIST_NPARAMS] = {NULL};
    PGresult *res = cli_query(ctx, sql_q_host_list, SQL_HOST_LIST_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}

static int host_delete(cli_ctx *ctx, int argc, char **argv)
{
    const char *host = NULL;
    bool done;
    int status = host_command(ctx, argc, argv, &host, &done);
    if (done)
        return status;
    const char *params[SQL_HOST_DELETE_NPARAMS] = {[SQL_HOST_DELETE_P_HOST] = host};
    PGresult *res = cli_query(ctx, sql_q_host_delete, SQL_HOST_DELETE_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    printf("deleted host %s\n", PQgetvalue(res, 0, SQL_HOST_DELETE_C_HOST));
    PQclear(res);
    return CLI_OK;
}

int cli_host(cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(host_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    snprintf(ctx->command_buf, sizeof ctx->command_buf, "host %s", argv[1]);
    ctx->command = ctx->command_buf;
    if (strcmp(argv[1], "set") == 0)
        return host_set(ctx, argc - 1, argv + 1);
    if (strcmp(argv[1], "get") == 0)
        return host_get(ctx, argc - 1, argv + 1);
    if (strcmp(argv[1], "list") == 0)
        return host_list(ctx, argc - 1, argv + 1);
    if (strcmp(argv[1], "delete") == 0)
        return host_delete(ctx, argc - 1, argv + 1);
    ctx->command = "host";
    return cli_usage_error(ctx, "unknown subcommand '%s' (set, get, list, delete)", argv[1]);
}
