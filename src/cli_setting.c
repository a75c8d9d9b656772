/* cli_setting.c - `pgpace setting list|get|set`: database-wide settings. */
#include "cli.h"
#include "sql_embed.h"

#include <stdio.h>
#include <string.h>

static const char setting_usage[] =
    "usage: pgpace setting list\n"
    "       pgpace setting get NAME\n"
    "       pgpace setting set NAME VALUE\n"
    "\n"
    "Settings stored in the database, so every enqueue path (SQL, CLI, HTTP) agrees:\n"
    "  max_payload_bytes           largest accepted payload, in bytes of its JSON text\n"
    "                              (default 262144)\n"
    "  max_endpoints_per_customer  most endpoints one customer may have (default 100)\n"
    "  portal_show_payloads        on: tenant pages show their own events' payloads (default\n"
    "                              off)\n";

int cli_setting(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
    int opt;
    opterr = 0;
    /* "+": stop at the first argument, so a VALUE such as -5 is not taken for an option. */
    while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(setting_usage, stdout);
            return CLI_OK;
        }
        return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
    }
    int nargs = argc - optind;
    char **args = argv + optind;
    /* Options parsing stopped at the subcommand (so values may start with '-'); still honour
     * a trailing --help such as `pgpace setting list --help`. */
    for (int i = 0; i < nargs; i++) {
        if (strcmp(args[i], "--help") == 0 || strcmp(args[i], "-h") == 0) {
            fputs(setting_usage, stdout);
            return CLI_OK;
        }
    }
    if (nargs < 1)
        return cli_usage_error(ctx, "missing subcommand (list, get, set)");
    const char *sub = args[0];
    int expected = strcmp(sub, "list") == 0  ? 1
                   : strcmp(sub, "get") == 0 ? 2
                   : strcmp(sub, "set") == 0 ? 3
                                             : -1;
    if (expected < 0)
        return cli_usage_error(ctx, "unknown subcommand '%s' (list, get, set)", sub);
    if (nargs != expected)
        return cli_usage_error(ctx, "'setting %s' takes %d argument(s)", sub, expected - 1);
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    PGresult *res;
    if (expected == 3) {
        const char *params[] = {args[1], args[2]};
        res = cli_query(ctx, sql_q_setting_set, 2, params);
        if (!res)
            return CLI_FAILED;
        int found = PQntuples(res);
        PQclear(res);
        if (!found)
            return cli_fail(ctx, CLI_FAILED, "unknown setting '%s' (see pgpace setting list)",
                            args[1]);
        printf("%s = %s\n", args[1], args[2]);
        return CLI_OK;
    }
    const char *params[] = {expected == 2 ? args[1] : NULL};
    res = cli_query(ctx, sql_q_setting_list, 1, params);
    if (!res)
        return CLI_FAILED;
    if (expected == 2 && PQntuples(res) == 0) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "unknown setting '%s' (see pgpace setting list)", args[1]);
    }
    for (int r = 0; r < PQntuples(res); r++)
        printf("%s = %s\n", PQgetvalue(res, r, 0), PQgetvalue(res, r, 1));
    PQclear(res);
    return CLI_OK;
}
