/* cli_util.c - shared plumbing of the subcommands: config, connection, errors, tables. */
#include "cli.h"

#include "db.h"
#include "pgpace_version.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_CONFIG_PATH PGPACE_DEFAULT_CONFIG

bool cli_common_option(cli_ctx *ctx, int opt, const char *arg)
{
    switch (opt) {
    case CLI_OPT_DB:
        ctx->db_arg = arg;
        return true;
    case CLI_OPT_CONFIG:
        ctx->config_arg = arg;
        return true;
    default:
        return false;
    }
}

int cli_parse_plain_keep(cli_ctx *ctx, int argc, char **argv, const char *usage)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(usage, stdout);
            return CLI_HELP_SHOWN;
        }
        return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
    }
    return CLI_OK;
}

int cli_parse_plain(cli_ctx *ctx, int argc, char **argv, const char *usage)
{
    int status = cli_parse_plain_keep(ctx, argc, argv, usage);
    if (status == CLI_OK && optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    return status;
}

int cli_fail(const cli_ctx *ctx, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pgpace %s: ", ctx->command);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return status;
}

int cli_usage_error(const cli_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pgpace %s: ", ctx->command);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'pgpace %s --help'.\n", ctx->command);
    va_end(ap);
    return CLI_USAGE;
}

int cli_load_config(cli_ctx *ctx)
{
    if (ctx->cfg_loaded)
        return CLI_OK;
    config_defaults(&ctx->cfg);
    const char *path = ctx->config_arg;
    if (!path || !*path)
        path = getenv("PGPACE_CONFIG");
    if ((!path || !*path) && access(DEFAULT_CONFIG_PATH, F_OK) == 0)
        path = DEFAULT_CONFIG_PATH;
    if (path && *path) {
        pgp_error err;
        if (config_load(&ctx->cfg, path, &err) != 0)
            return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    }
    ctx->cfg_loaded = true;
    return CLI_OK;
}

int cli_connect(cli_ctx *ctx)
{
    if (ctx->conn)
        return CLI_OK;
    int status = cli_load_config(ctx);
    if (status != CLI_OK)
        return status;
    const char *conninfo = "";
    char source[600] = "libpq environment (PGHOST, PGPORT, PGDATABASE, ...)";
    if (ctx->db_arg) {
        conninfo = ctx->db_arg;
        snprintf(source, sizeof source, "--db");
    } else if (ctx->cfg.conninfo[0]) {
        conninfo = ctx->cfg.conninfo;
        snprintf(source, sizeof source, "[database] conninfo in %s", ctx->cfg.path);
    }
    pgp_error err;
    if (db_connect(conninfo, source, &ctx->conn, &err) != 0)
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    return CLI_OK;
}

void cli_ctx_close(cli_ctx *ctx)
{
    if (ctx->conn)
        PQfinish(ctx->conn);
    ctx->conn = NULL;
}

PGresult *cli_query(cli_ctx *ctx, const char *sql, int nparams, const char *const *params)
{
    PGresult *res;
    pgp_error err;
    if (db_exec(ctx->conn, sql, nparams, params, &res, &err) != 0) {
        cli_fail(ctx, CLI_FAILED, "%s", err.msg);
        return NULL;
    }
    return res;
}

void cli_print_table(PGresult *res)
{
    int rows = PQntuples(res), cols = PQnfields(res);
    size_t width[64] = {0};
    if (cols > 64)
        cols = 64;
    for (int c = 0; c < cols; c++) {
        width[c] = strlen(PQfname(res, c));
        for (int r = 0; r < rows; r++) {
            size_t w = (size_t)PQgetlength(res, r, c);
            if (w > width[c])
                width[c] = w;
        }
    }
    for (int c = 0; c < cols; c++)
        printf("%s%-*s", c ? "  " : "", (int)width[c], PQfname(res, c));
    putchar('\n');
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++)
            printf("%s%-*s", c ? "  " : "", (int)width[c], PQgetvalue(res, r, c));
        putchar('\n');
    }
}
