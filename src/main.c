/* main.c - the `pgpace` command: parses global options and dispatches to a subcommand. */
#include "cli.h"
#include "migrate.h"
#include "pgpace_version.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "pgpace - a fair-queuing, rate-limited webhook dispatcher on PostgreSQL\n"
    "\n"
    "usage: pgpace [--db CONNINFO] [--config FILE] COMMAND [ARGS...]\n"
    "\n"
    "commands:\n"
    "  run                     run the dispatcher (one instance leads, others stand by)\n"
    "  status                  which instances run and which one leads\n"
    "  migrate                 apply the schema migrations (safe to run twice)\n"
    "  customer set|get|list|pause|resume|enable|delete\n"
    "                          manage customers (tenants), their rates and webhooks\n"
    "  endpoint add|set|get|list|pause|resume|enable|disable|delete\n"
    "                          manage a customer's endpoints: its receivers, their limits and\n"
    "                          subscriptions to event kinds\n"
    "  host set|get|list|delete\n"
    "                          a receiver host's own limit, over all of its customers\n"
    "  carrier set|list        manage per-carrier caps\n"
    "  token create|list|revoke\n"
    "                          tokens for the admin API, with scopes\n"
    "  portal-link             a signed, expiring link to a customer's tenant page\n"
    "  enqueue                 enqueue one item, or many from a JSON-lines file\n"
    "  stats                   per-customer queue statistics\n"
    "  dlq list|replay|purge   dead letters: look, retry at a trickle, or drop\n"
    "  events                  customers' lifecycle events (failing, disabled, paused, ...)\n"
    "  recover                 send a customer's items of a time range again\n"
    "  shard                   which of N shards a customer lives in (Citus's hash)\n"
    "  setting get|set|list    database-wide settings (e.g. max_payload_bytes)\n"
    "  version                 print the version\n"
    "\n"
    "connection: --db (a libpq conninfo string or URL), else [database] conninfo in the config\n"
    "file (--config, $PGPACE_CONFIG, or " PGPACE_DEFAULT_CONFIG "), else the usual libpq\n"
    "environment variables (PGHOST, PGPORT, PGDATABASE, PGUSER, ...).\n"
    "Run 'pgpace COMMAND --help' for a command's options.\n";

static int cli_version(cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: pgpace version\n\nPrints the version and the schema version it expects.\n");
        return CLI_OK;
    }
    if (argc > 1)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[1]);
    printf("pgpace %s (schema version %d)\n", PGPACE_VERSION, migrate_latest_version());
    return CLI_OK;
}

static const struct {
    const char *name;
    int (*run)(cli_ctx *, int, char **);
} commands[] = {
    {"migrate", cli_migrate},
    {"customer", cli_customer},
    {"endpoint", cli_endpoint},
    {"carrier", cli_carrier},
    {"enqueue", cli_enqueue},
    {"stats", cli_stats},
    {"setting", cli_setting},
    {"version", cli_version},
    {"run", cli_run},
    {"status", cli_status},
    {"dlq", cli_dlq},
    {"events", cli_events},
    {"recover", cli_recover},
    {"shard", cli_shard},
    {"host", cli_host},
    {"token", cli_token},
    {"portal-link", cli_portal},
};

int main(int argc, char **argv)
{
    /* A peer closing a socket must be an error return, not a process kill. */
    signal(SIGPIPE, SIG_IGN);
    /* libuv's thread pool (4 threads unless set before its first use) resolves the
     * destinations of proxied webhooks: with 4, two receivers whose DNS never answers would
     * hold up every proxied customer. The operator's own setting wins. */
    setenv("UV_THREADPOOL_SIZE", "32", 0);

    cli_ctx ctx = {.command = "", .cfg_loaded = false};
    static const struct option opts[] = {
        CLI_COMMON_OPTIONS, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        if (cli_common_option(&ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(usage, stdout);
            return CLI_OK;
        }
        if (opt == 'V') {
            printf("pgpace %s\n", PGPACE_VERSION);
            return CLI_OK;
        }
        fprintf(stderr, "pgpace: unknown or incomplete option '%s'\n%s", argv[optind - 1], usage);
        return CLI_USAGE;
    }
    if (optind >= argc) {
        fputs(usage, stderr);
        return CLI_USAGE;
    }
    const char *name = argv[optind];
    for (size_t i = 0; i < PGP_ARRAY_LEN(commands); i++) {
        if (strcmp(name, commands[i].name) == 0) {
            ctx.command = name;
            int sub_argc = argc - optind;
            char **sub_argv = argv + optind;
            /* glibc: optind = 0 fully re-initialises getopt for the subcommand's own parse. */
            optind = 0;
            int status = commands[i].run(&ctx, sub_argc, sub_argv);
            cli_ctx_close(&ctx);
            return status;
        }
    }
    fprintf(stderr, "pgpace: unknown command '%s'\n%s", name, usage);
    return CLI_USAGE;
}
