/* cli_customer.c - `pgpace customer set|get|list|pause|resume|enable|delete`. The receiver
 * settings of `set` are the table of receiver_settings.c, read and written by cli_receiver.c
 * (shared with `pgpace endpoint`). */
#include "cli.h"
#include "cli_receiver.h"
#include "receiver_settings.h"
#include "sql_embed.h"
#include "validate.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char customer_usage[] =
    "usage: pgpace customer COMMAND [ARGS...]\n"
    "\n"
    "  set NAME [options]     create or update a customer (only given options change)\n"
    "  get NAME [--show-secrets]\n"
    "  list                   the customers, and how many endpoints each has\n"
    "  pause NAME             stop dispatching its items (they wait; nothing is dropped)\n"
    "  resume NAME\n"
    "  enable NAME            re-enable a customer health disabled (every delivery failed for\n"
    "                         [health] disable_after): its items are sent again\n"
    "  delete NAME [--force]  refuses while items are pending, unless --force drops them\n"
    "\n"
    "Run 'pgpace customer set --help' for the settings; a customer's endpoints (its receivers\n"
    "besides its own) are managed with 'pgpace endpoint'.\n";

static const char set_usage[] =
    "usage: pgpace customer set NAME [options]\n"
    "\n"
    "Creates the customer or updates the given settings. Creating needs --rate (or --limit);\n"
    "with --url the customer has a receiver of its own (its 'default' endpoint), without it its\n"
    "endpoints receive its events ('pgpace endpoint add'). Changes reach a running dispatcher\n"
    "within a second.\n"
    "\n";

enum { OPT_SHOW = 1, OPT_FORCE };

/* Parses options common to every customer subcommand that takes only a NAME and flags. */
static int parse_name_and_flags(cli_ctx *ctx, int argc, char **argv, const char *usage_text,
                                const struct option *extra, int *flags_seen, const char **name)
{
    struct option opts[8] = {CLI_COMMON_OPTIONS};
    size_t n = 3;
    for (; extra && extra->name && n < 7; extra++)
        opts[n++] = *extra;
    opts[n] = (struct option){NULL, 0, NULL, 0};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(usage_text, stdout);
            return -1;
        }
        if (opt == '?' || opt == ':')
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        *flags_seen |= 1 << opt;
    }
    if (name) {
        if (optind >= argc)
            return cli_usage_error(ctx, "missing customer NAME");
        *name = argv[optind++];
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

/* The work of customer_set once the options are read into v. */
static int customer_set_values(cli_ctx *ctx, int argc, char **argv, rs_values *v)
{
    if (optind >= argc)
        return cli_usage_error(ctx, "missing customer NAME");
    const char *name = argv[optind++];
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    pgp_error err;
    if (validate_name("customer name", name, &err) != 0)
        return cli_usage_error(ctx, "%s", err.msg);
    int rc = rs_check(v, &err);
    if (rc != 0)
        return rc == -EINVAL ? cli_usage_error(ctx, "%s", err.msg)
                             : cli_fail(ctx, CLI_FAILED, "%s", err.msg);

    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *name_param[] = {name};
    PGresult *cur = cli_query(ctx, sql_q_customer_secrets, 1, name_param);
    if (!cur)
        return CLI_FAILED;
    bool exists = PQntuples(cur) == 1;
    char current[520] = "";
    if (exists)
        snprintf(current, sizeof current, "%s", PQgetvalue(cur, 0, 0));
    PQclear(cur);
    const char *rate = v->param[SQL_CUSTOMER_SET_P_RATE];
    /* Limit windows stand for the rate (their shortest is the pace); "{}" is --no-limits. */
    const char *limits = v->param[SQL_CUSTOMER_SET_P_LIMITS];
    bool windows = limits && strcmp(limits, "{}") != 0;
    if (!exists && !rate && !windows)
        return cli_fail(ctx, CLI_FAILED,
                        "customer '%s' does not exist; creating it needs --rate (or --limit) and "
                        "--url (without --url: a customer whose endpoints are its receivers)",
                        name);
    if ((v->rotate || v->retire) && !exists)
        return cli_fail(ctx, CLI_FAILED, "customer '%s' does not exist: nothing to rotate", name);
    /* Its own receiver: it has one (a URL and secrets), gets one now (--url), or has none (its
     * endpoints receive its events); only a receiver has secrets. */
    bool receiver = exists && current[0] != '\0';
    bool new_receiver = !receiver && v->param[SQL_CUSTOMER_SET_P_URL] != NULL;
    if ((v->secret || v->rotate || v->retire) && !receiver && !new_receiver)
        return cli_fail(ctx, CLI_FAILED,
                        "customer '%s' has no webhook URL of its own: no secrets to %s (give "
                        "--url with it; its endpoints have theirs: pgpace endpoint set)",
                        name, v->secret ? "set" : "rotate");
    if (v->key_type && !receiver && !new_receiver)
        return cli_usage_error(ctx,
                               "--key-type: customer '%s' has no webhook URL of its own: no "
                               "secret is generated (give --url with it)",
                               name);
    if (v->key_type && receiver && !v->rotate)
        return cli_usage_error(ctx,
                               "--key-type: customer '%s' exists; use it with "
                               "--rotate-secret to add a secret of that kind",
                               name);
    char secrets[CLI_SECRETS_MAX] = "", fresh[CLI_SECRET_MAX] = "";
    if (receiver || new_receiver || v->secret) {
        status = cli_receiver_secrets(ctx, v, receiver ? current : NULL, secrets, fresh);
        if (status != CLI_OK)
            return status;
    }
    bool created = false;
    status = cli_receiver_write(ctx, name, v, secrets, false, &created);
    if (status == CLI_OK) {
        printf("%s customer %s%s\n", created ? "created" : "updated", name,
               v->rotate ? " (new signing secret added; see: pgpace customer get --show-secrets)"
                         : "");
        /* An Ed25519 secret's public key is what the receiver needs: shown at once. */
        cli_receiver_print_public_key(v->secret ? v->secret : fresh);
    }
    OPENSSL_cleanse(fresh, sizeof fresh);
    OPENSSL_cleanse(secrets, sizeof secrets);
    return status;
}

static int customer_set(cli_ctx *ctx, int argc, char **argv)
{
    rs_values v = {0};
    int rc = cli_receiver_options(ctx, argc, argv, RS_CUSTOMER, set_usage, NULL, &v);
    if (rc == CLI_OK)
        rc = customer_set_values(ctx, argc, argv, &v);
    rs_values_free(&v);
    return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
}

static int customer_get(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option extra[] = {{"show-secrets", no_argument, NULL, OPT_SHOW},
                                          {NULL, 0, NULL, 0}};
    static const char usage[] = "usage: pgpace customer get NAME [--show-secrets]\n\n"
                                "Prints the customer's settings, and its endpoints when it has "
                                "any. Signing secrets,\nextra header values, receiver "
                                "credentials and the client key are shown only with\n"
                                "--show-secrets; the whpk_ public key of each Ed25519 (whsk_) "
                                "secret always\n(receivers verify v1a signatures with it).\n";
    int flags = 0;
    const char *name = NULL;
    int rc = parse_name_and_flags(ctx, argc, argv, usage, extra, &flags, &name);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {name};
    PGresult *res = cli_query(ctx, sql_q_customer_get, 1, params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "unknown customer '%s'", name);
    }
    cli_receiver_print(res, flags & (1 << OPT_SHOW), NULL);
    /* `endpoints` counts its own receiver too: listed when it has others. */
    int endpoints = PQfnumber(res, "endpoints"), url = PQfnumber(res, "webhook_url");
    bool listed = endpoints >= 0 && url >= 0 && strchr(name, '/') == NULL &&
                  atoi(PQgetvalue(res, 0, endpoints)) > (PQgetisnull(res, 0, url) ? 0 : 1);
    PQclear(res);
    if (listed) {
        /* Its endpoints in brief (`pgpace endpoint list` has the rest). */
        res = cli_query(ctx, sql_q_endpoint_list, 1, params);
        if (!res)
            return CLI_FAILED;
        putchar('\n');
        cli_print_table(res);
        PQclear(res);
    }
    return CLI_OK;
}

static int customer_list(cli_ctx *ctx, int argc, char **argv)
{
    int flags = 0;
    int rc =
        parse_name_and_flags(ctx, argc, argv, "usage: pgpace customer list\n", NULL, &flags, NULL);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    PGresult *res = cli_query(ctx, sql_q_customer_list, 0, NULL);
    if (!res)
        return CLI_FAILED;
    cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}

static int customer_pause(cli_ctx *ctx, int argc, char **argv, bool pause)
{
    int flags = 0;
    const char *name = NULL;
    int rc = parse_name_and_flags(
        ctx, argc, argv,
        pause ? "usage: pgpace customer pause NAME\n\nStops dispatching the customer's items; "
                "they stay queued.\n"
              : "usage: pgpace customer resume NAME\n",
        NULL, &flags, &name);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {name, pause ? "true" : "false"};
    PGresult *res = cli_query(ctx, sql_q_customer_pause, 2, params);
    if (!res)
        return CLI_FAILED;
    int found = PQntuples(res);
    PQclear(res);
    if (!found)
        return cli_fail(ctx, CLI_FAILED, "unknown customer '%s'", name);
    printf("%s customer %s\n", pause ? "paused" : "resumed", name);
    return CLI_OK;
}

static int customer_enable(cli_ctx *ctx, int argc, char **argv)
{
    static const char usage[] =
        "usage: pgpace customer enable NAME\n\n"
        "Re-enables a customer that health disabled ([health] disable_after): its items are\n"
        "claimed again at once and its breaker starts closed. An `enabled` event is recorded.\n"
        "A customer that is also paused stays paused until `pgpace customer resume`.\n";
    int flags = 0;
    const char *name = NULL;
    int rc = parse_name_and_flags(ctx, argc, argv, usage, NULL, &flags, &name);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {[SQL_CUSTOMER_ENABLE_P_NAME] = name};
    PGresult *res = cli_query(ctx, sql_q_customer_enable, 1, params);
    if (!res)
        return CLI_FAILED;
    bool enabled = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    printf(enabled ? "enabled customer %s\n" : "customer %s was not disabled; nothing changed\n",
           name);
    return CLI_OK;
}

static int customer_delete(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option extra[] = {{"force", no_argument, NULL, OPT_FORCE},
                                          {NULL, 0, NULL, 0}};
    static const char usage[] =
        "usage: pgpace customer delete NAME [--force]\n\n"
        "Deletes the customer. Refuses while it has pending items; --force deletes them too,\n"
        "with its dead letters.\n";
    int flags = 0;
    const char *name = NULL;
    int rc = parse_name_and_flags(ctx, argc, argv, usage, extra, &flags, &name);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {name, (flags & (1 << OPT_FORCE)) ? "true" : "false"};
    PGresult *res = cli_query(ctx, sql_q_customer_delete, 2, params);
    if (!res)
        return CLI_FAILED;
    printf("deleted customer %s (%s item(s) removed)\n", name, PQgetvalue(res, 0, 0));
    PQclear(res);
    return CLI_OK;
}

int cli_customer(cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(customer_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    snprintf(ctx->command_buf, sizeof ctx->command_buf, "customer %s", sub);
    ctx->command = ctx->command_buf;
    argc--, argv++;
    if (strcmp(sub, "set") == 0)
        return customer_set(ctx, argc, argv);
    if (strcmp(sub, "get") == 0)
        return customer_get(ctx, argc, argv);
    if (strcmp(sub, "list") == 0)
        return customer_list(ctx, argc, argv);
    if (strcmp(sub, "pause") == 0)
        return customer_pause(ctx, argc, argv, true);
    if (strcmp(sub, "resume") == 0)
        return customer_pause(ctx, argc, argv, false);
    if (strcmp(sub, "enable") == 0)
        return customer_enable(ctx, argc, argv);
    if (strcmp(sub, "delete") == 0)
        return customer_delete(ctx, argc, argv);
    ctx->command = "customer";
    return cli_usage_error(
        ctx, "unknown subcommand '%s' (set, get, list, pause, resume, enable, delete)", sub);
}
