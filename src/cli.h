/* cli.h - what the `pgpace` subcommands share: the invocation context and its helpers.
 *
 * Contract: each subcommand is `int cli_<name>(cli_ctx *ctx, int argc, char **argv)` returning
 * the process exit status (0 ok, 1 failed, 2 usage error). argv[0] is the subcommand's name.
 * Errors are printed once, to stderr, as "pgpace <cmd>: <message>". cli_connect() loads the
 * configuration lazily and opens ctx->conn; cli_ctx_close() releases everything.
 */
#ifndef PGPACE_CLI_H
#define PGPACE_CLI_H

#include "common.h"
#include "config.h"

#include <getopt.h>
#include <libpq-fe.h>
#include <stdbool.h>

enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

typedef struct cli_ctx {
    const char *db_arg;     /* --db, or NULL */
    const char *config_arg; /* --config, or NULL (then $PGPACE_CONFIG) */
    const char *command;    /* e.g. "customer set", for messages */
    char command_buf[64];   /* storage for a two-word command name */
    pgp_config cfg;
    bool cfg_loaded;
    PGconn *conn;
} cli_ctx;

/* Options every subcommand accepts; place CLI_COMMON_OPTIONS in each long-option table. */
enum { CLI_OPT_DB = 1000, CLI_OPT_CONFIG, CLI_OPT_HELP };
#define CLI_COMMON_OPTIONS                                                                         \
    {"db", required_argument, NULL, CLI_OPT_DB},                                                   \
        {"config", required_argument, NULL, CLI_OPT_CONFIG},                                       \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }

/* Handles --db/--config for option `opt`; returns true when it was one of them. */
bool cli_common_option(cli_ctx *ctx, int opt, const char *arg);

int cli_load_config(cli_ctx *ctx);
int cli_connect(cli_ctx *ctx);
void cli_ctx_close(cli_ctx *ctx);

/* Parses a command that takes only the common options and no arguments. Returns CLI_OK to go
 * on, CLI_USAGE on a usage error (printed), or CLI_HELP_SHOWN after printing `usage`. */
enum { CLI_HELP_SHOWN = -1 };
int cli_parse_plain(cli_ctx *ctx, int argc, char **argv, const char *usage);
/* The same, leaving the positional arguments from optind for the command to read. */
int cli_parse_plain_keep(cli_ctx *ctx, int argc, char **argv, const char *usage);

/* Prints "pgpace <command>: <message>" to stderr; returns `status` for `return cli_fail(...)`. */
int cli_fail(const cli_ctx *ctx, int status, const char *fmt, ...) PGP_PRINTF(3, 4);

/* Usage error: prints the message and a pointer to --help. */
int cli_usage_error(const cli_ctx *ctx, const char *fmt, ...) PGP_PRINTF(2, 3);

/* Runs a parameterised statement; prints the error and returns NULL on failure. */
PGresult *cli_query(cli_ctx *ctx, const char *sql, int nparams, const char *const *params);

/* Prints a result as an aligned table with a header row. */
void cli_print_table(PGresult *res);

int cli_migrate(cli_ctx *ctx, int argc, char **argv);
int cli_customer(cli_ctx *ctx, int argc, char **argv);
int cli_endpoint(cli_ctx *ctx, int argc, char **argv);
int cli_carrier(cli_ctx *ctx, int argc, char **argv);
int cli_host(cli_ctx *ctx, int argc, char **argv);
int cli_token(cli_ctx *ctx, int argc, char **argv);
int cli_portal(cli_ctx *ctx, int argc, char **argv);
int cli_enqueue(cli_ctx *ctx, int argc, char **argv);
int cli_stats(cli_ctx *ctx, int argc, char **argv);
int cli_setting(cli_ctx *ctx, int argc, char **argv);
int cli_run(cli_ctx *ctx, int argc, char **argv);
int cli_status(cli_ctx *ctx, int argc, char **argv);
int cli_dlq(cli_ctx *ctx, int argc, char **argv);
int cli_events(cli_ctx *ctx, int argc, char **argv);
int cli_recover(cli_ctx *ctx, int argc, char **argv);
int cli_shard(cli_ctx *ctx, int argc, char **argv);

#endif
