/* cli_migrate.c - `pgpace migrate`: apply or report schema migrations. */
#include "cli.h"
#include "migrate.h"
#include "session_check.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char migrate_usage[] =
    "usage: pgpace migrate [--status] [--db CONNINFO] [--config FILE]\n"
    "\n"
    "Applies the schema migrations this binary carries, in order, each in its own transaction,\n"
    "under an advisory lock (concurrent runs wait for each other). Then re-applies, in one more\n"
    "transaction, the function files (functions and views) that differ from those the database\n"
    "last had: each one that changed, or all after a migration. Running it again is a no-op.\n"
    "A migration that was edited after it was applied is an error and nothing is applied.\n"
    "\n"
    "  --status   only report the database's schema version and the one this binary expects,\n"
    "             and whether the database's functions are this binary's\n";

int cli_migrate(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_COMMON_OPTIONS, {"status", no_argument, NULL, 's'}, {NULL, 0, NULL, 0}};
    bool status_only = false;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(migrate_usage, stdout);
            return CLI_OK;
        case 's':
            status_only = true;
            break;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;

    pgp_error err;
    int version = 0;
    if (status_only) {
        char digest[65];
        if (migrate_db_state(ctx->conn, &version, digest, &err) != 0)
            return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
        bool same = strcmp(digest, migrate_functions_digest()) == 0;
        printf("database schema version %d; this binary expects %d; functions %s%s\n", version,
               migrate_latest_version(),
               same        ? "up to date"
               : digest[0] ? "differ from this binary's"
                           : "not recorded",
               version < migrate_latest_version() || !same ? " (run: pgpace migrate)" : "");
        return CLI_OK;
    }
    /* The migration lock is a session advisory lock and the last migration's transaction spans
     * the function files: a pooler that shares the session (transaction or statement pooling)
     * could keep the lock on a server session it hands to others, or break the transaction. */
    char why[256];
    switch (session_check_run(ctx->conn, ctx->db_arg ? ctx->db_arg : ctx->cfg.conninfo,
                              "pgpace-session-check", 3000, why, sizeof why)) {
    case SESSION_CHECK_POOLED:
        return cli_fail(ctx, CLI_FAILED,
                        "the database connection does not keep one server session (%s): "
                        "migrate holds a session advisory lock and keeps a transaction open "
                        "across statements, which transaction or statement pooling (e.g. "
                        "PgBouncer) breaks; run it against PostgreSQL directly or through a "
                        "PgBouncer pool with pool_mode = session",
                        why);
    case SESSION_CHECK_UNVERIFIED:
    case SESSION_CHECK_FAILED:
        fprintf(stderr, "pgpace migrate: warning: connection pooling could not be ruled out (%s)\n",
                why);
        break;
    default:
        break;
    }
    migrate_result done;
    if (migrate_run(ctx->conn, &done, stdout, &err) != 0)
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    if (done.migrations == 0 && done.functions == 0)
        printf("schema is up to date at version %d\n", migrate_latest_version());
    else
        printf("applied %d migration(s) and %d function file(s); schema is at version %d\n",
               done.migrations, done.functions, migrate_latest_version());
    return CLI_OK;
}
