/* cli_endpoint.c - `pgpace endpoint add|set|get|list|pause|resume|enable|disable|delete`.
 *
 * An endpoint is one of a customer's receivers: a row of pgpace.customer under the customer's
 * (migration 0018), named CUSTOMER NAME here and "CUSTOMER/NAME" in the table; NAME 'default'
 * is the customer's own receiver (its row, when it has a webhook URL). Its receiver settings are
 * those of `customer set` (receiver_settings.h) written by the same code (cli_receiver.h) on
 * its full name; its subscription and payload filter go through pgpace.endpoint_add and
 * endpoint_set_routing (16_endpoints.sql); the rest are the functions of
 * 17_endpoint_admin.sql. Unknown customers and endpoints are the SQL's errors (P0002, naming
 * which), so every command names them the same way.
 */
#include "cli.h"
#include "cli_receiver.h"
#include "db.h"
#include "receiver_settings.h"
#include "sql_embed.h"
#include "validate.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char endpoint_usage[] =
    "usage: pgpace endpoint COMMAND CUSTOMER [NAME] [ARGS...]\n"
    "\n"
    "A customer's endpoints are its receivers: each has a URL, its own limit (--rate), secrets,\n"
    "auth and health, and receives the events whose kind its subscription (--events) and\n"
    "payload filter (--filter) match. NAME 'default' is the customer's own receiver (the URL\n"
    "'customer set' gave it).\n"
    "\n"
    "  add CUSTOMER NAME --url URL --rate R [options]\n"
    "                         add an endpoint ('pgpace endpoint add --help' for the options)\n"
    "  set CUSTOMER NAME [options]\n"
    "                         change the given settings (only those)\n"
    "  get CUSTOMER NAME [--show-secrets]\n"
    "  list CUSTOMER          its endpoints: URL, limit, subscription, state, queued deliveries\n"
    "  pause CUSTOMER NAME    stop sending to it (its deliveries wait; nothing is dropped)\n"
    "  resume CUSTOMER NAME\n"
    "  disable CUSTOMER NAME  hold it as health holds a failing one, until 'enable'\n"
    "  enable CUSTOMER NAME   send to it again (after a health or an operator disable)\n"
    "  delete CUSTOMER NAME [--drop-queued]\n"
    "                         refuses while deliveries are queued, unless --drop-queued makes\n"
    "                         them dead letters (endpoint_deleted)\n";

static const char add_usage[] =
    "usage: pgpace endpoint add CUSTOMER NAME --url URL --rate R|--limit W [options]\n"
    "\n"
    "Adds an endpoint to the customer: a receiver of its events with its own limit (--rate\n"
    "and/or --limit windows: the receiver's, beside the customer's own over all of its\n"
    "endpoints), secrets (one is generated unless --secret gives it), auth and health. NAME\n"
    "is 1-128 characters of A-Z a-z 0-9 . _ : @ -, unique within the customer; 'default' is\n"
    "the customer's own receiver.\n"
    "The URL's address is checked against the SSRF rules ([delivery] allow_cidrs) when it is\n"
    "an IP address or localhost. Refused, naming the field, with nothing written: an unknown\n"
    "customer, a name taken, a bad pattern or filter, more endpoints than the\n"
    "max_endpoints_per_customer setting (pgpace setting).\n"
    "\n";

static const char set_usage[] =
    "usage: pgpace endpoint set CUSTOMER NAME [options]\n"
    "\n"
    "Changes the given settings of an endpoint; the others stay. NAME 'default' is the\n"
    "customer's own receiver, whose --rate is also the customer's limit over all of its\n"
    "endpoints. Changes reach a running dispatcher within a second.\n"
    "\n";

enum { OPT_SHOW = 1, OPT_DROP_QUEUED };

/* Reads the common options and `extra` (flags, bit 1 << val in *flags), then CUSTOMER and, when
 * want_name, NAME, checking both are names. CLI_OK, CLI_HELP_SHOWN or the printed error. */
static int parse_args(cli_ctx *ctx, int argc, char **argv, const char *usage,
                      const struct option *extra, int *flags, bool want_name, const char **customer,
                      const char **name)
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
            fputs(usage, stdout);
            return CLI_HELP_SHOWN;
        }
        if (opt == '?' || opt == ':')
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        *flags |= 1 << opt;
    }
    pgp_error err;
    if (optind >= argc)
        return cli_usage_error(ctx, "missing CUSTOMER");
    *customer = argv[optind++];
    if (validate_name("customer name", *customer, &err) != 0)
        return cli_usage_error(ctx, "%s", err.msg);
    if (want_name) {
        if (optind >= argc)
            return cli_usage_error(ctx, "missing endpoint NAME");
        *name = argv[optind++];
        if (validate_name("endpoint name", *name, &err) != 0)
            return cli_usage_error(ctx, "%s", err.msg);
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

/* CUSTOMER NAME after the receiver options (cli_receiver_options left them in argv). */
static int positional(cli_ctx *ctx, int argc, char **argv, const char **customer, const char **name)
{
    pgp_error err;
    if (optind >= argc)
        return cli_usage_error(ctx, "missing CUSTOMER");
    *customer = argv[optind++];
    if (validate_name("customer name", *customer, &err) != 0)
        return cli_usage_error(ctx, "%s", err.msg);
    if (optind >= argc)
        return cli_usage_error(ctx, "missing endpoint NAME");
    *name = argv[optind++];
    if (validate_name("endpoint name", *name, &err) != 0)
        return cli_usage_error(ctx, "%s", err.msg);
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

/* The endpoint's row: its full name (the customer's own for 'default') and current secrets. */
static int resolve(cli_ctx *ctx, const char *customer, const char *name, char *full,
                   size_t full_cap, char *secrets, size_t secrets_cap)
{
    const char *params[] = {
        [SQL_ENDPOINT_RESOLVE_P_CUSTOMER] = customer, [SQL_ENDPOINT_RESOLVE_P_ENDPOINT] = name};
    PGresult *res = cli_query(ctx, sql_q_endpoint_resolve, SQL_ENDPOINT_RESOLVE_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "customer '%s' has no endpoint '%s'", customer, name);
    }
    snprintf(full, full_cap, "%s", PQgetvalue(res, 0, SQL_ENDPOINT_RESOLVE_C_NAME));
    if (secrets)
        snprintf(secrets, secrets_cap, "%s", PQgetvalue(res, 0, SQL_ENDPOINT_RESOLVE_C_SECRETS));
    PQclear(res);
    return CLI_OK;
}

static int begin(cli_ctx *ctx)
{
    pgp_error err;
    if (db_exec_simple(ctx->conn, "BEGIN", &err) != 0)
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    return CLI_OK;
}

static int commit(cli_ctx *ctx)
{
    pgp_error err;
    if (db_exec_simple(ctx->conn, "COMMIT", &err) != 0)
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    return CLI_OK;
}

/* The checks of add and set once the options are read: the rules between them, and the URL's
 * address against the SSRF rules. */
static int check_values(cli_ctx *ctx, rs_values *v)
{
    pgp_error err;
    int rc = rs_check(v, &err);
    if (rc != 0)
        return rc == -EINVAL ? cli_usage_error(ctx, "%s", err.msg)
                             : cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    const char *url = v->param[SQL_CUSTOMER_SET_P_URL];
    return url ? cli_receiver_url_check(ctx, "--url", url) : CLI_OK;
}

static int add_values(cli_ctx *ctx, int argc, char **argv, rs_values *v)
{
    const char *customer = NULL, *name = NULL;
    int status = positional(ctx, argc, argv, &customer, &name);
    if (status != CLI_OK)
        return status;
    if (strcmp(name, "default") == 0)
        return cli_usage_error(ctx,
                               "endpoint name: 'default' is the customer's own receiver "
                               "(pgpace customer set %s --url URL)",
                               customer);
    const char *url = v->param[SQL_CUSTOMER_SET_P_URL];
    const char *rate = v->param[SQL_CUSTOMER_SET_P_RATE];
    if (!url)
        return cli_usage_error(ctx, "--url is required: the endpoint's webhook URL");
    /* Limit windows stand for the rate (their shortest is the pace). */
    if (!rate && v->n_limit_args == 0)
        return cli_usage_error(ctx, "--rate is required: the endpoint's own limit (its "
                                    "receiver's), in items per minute (or --limit windows)");
    status = check_values(ctx, v);
    if (status != CLI_OK)
        return status;
    status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    char secrets[CLI_SECRETS_MAX], fresh[CLI_SECRET_MAX];
    status = cli_receiver_secrets(ctx, v, NULL, secrets, fresh);
    if (status == CLI_OK)
        status = begin(ctx);
    if (status == CLI_OK) {
        const char *params[SQL_ENDPOINT_ADD_NPARAMS] = {
            [SQL_ENDPOINT_ADD_P_CUSTOMER] = customer,
            [SQL_ENDPOINT_ADD_P_ENDPOINT] = name,
            [SQL_ENDPOINT_ADD_P_URL] = url,
            [SQL_ENDPOINT_ADD_P_RATE] = rate,
            [SQL_ENDPOINT_ADD_P_MODE] = v->param[SQL_CUSTOMER_SET_P_MODE],
            [SQL_ENDPOINT_ADD_P_BURST] = v->param[SQL_CUSTOMER_SET_P_BURST],
            [SQL_ENDPOINT_ADD_P_SECRETS] = secrets,
            [SQL_ENDPOINT_ADD_P_EVENTS] = v->events,
            [SQL_ENDPOINT_ADD_P_FILTER] = v->filter,
            [SQL_ENDPOINT_ADD_P_MAX_ATTEMPTS] = v->param[SQL_CUSTOMER_SET_P_MAX_ATTEMPTS],
            [SQL_ENDPOINT_ADD_P_LIMITS] = v->param[SQL_CUSTOMER_SET_P_LIMITS],
        };
        PGresult *res = cli_query(ctx, sql_q_endpoint_add, SQL_ENDPOINT_ADD_NPARAMS, params);
        status = res ? CLI_OK : CLI_FAILED;
        PQclear(res);
    }
    /* The other receiver settings on the new row, by the code `customer set` writes them with;
     * a failure leaves the transaction open and the connection's close rolls it back: nothing
     * is added without what was asked for. */
    char full[300];
    snprintf(full, sizeof full, "%s/%s", customer, name);
    if (status == CLI_OK)
        status = cli_receiver_write(ctx, full, v, NULL, true, NULL);
    if (status == CLI_OK)
        status = commit(ctx);
    if (status == CLI_OK) {
        printf("added endpoint %s (events: %s; filter: %s)\n", full,
               v->events && strcmp(v->events, "{}") != 0 ? v->events_arg : "every kind",
               v->filter ? v->filter : "none");
        cli_receiver_print_public_key(v->secret ? v->secret : fresh);
    }
    OPENSSL_cleanse(fresh, sizeof fresh);
    OPENSSL_cleanse(secrets, sizeof secrets);
    return status;
}

static int endpoint_add(cli_ctx *ctx, int argc, char **argv)
{
    rs_values v = {0};
    int rc = cli_receiver_options(ctx, argc, argv, RS_ENDPOINT_ADD, add_usage, NULL, &v);
    if (rc == CLI_OK)
        rc = add_values(ctx, argc, argv, &v);
    rs_values_free(&v);
    return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
}

static int set_values(cli_ctx *ctx, int argc, char **argv, rs_values *v)
{
    const char *customer = NULL, *name = NULL;
    int status = positional(ctx, argc, argv, &customer, &name);
    if (status == CLI_OK)
        status = check_values(ctx, v);
    if (status == CLI_OK)
        status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    char full[300], current[520];
    status = resolve(ctx, customer, name, full, sizeof full, current, sizeof current);
    if (status != CLI_OK)
        return status;
    if (v->key_type && !v->rotate)
        return cli_usage_error(ctx,
                               "--key-type: endpoint '%s' exists; use it with --rotate-secret to "
                               "add a secret of that kind",
                               full);
    char secrets[CLI_SECRETS_MAX] = "", fresh[CLI_SECRET_MAX] = "";
    if (v->secret || v->rotate || v->retire)
        status = cli_receiver_secrets(ctx, v, current, secrets, fresh);
    OPENSSL_cleanse(current, sizeof current);
    if (status == CLI_OK)
        status = begin(ctx);
    if (status == CLI_OK && (v->events || v->filter || v->no_filter)) {
        const char *params[SQL_ENDPOINT_ROUTING_NPARAMS] = {
            [SQL_ENDPOINT_ROUTING_P_CUSTOMER] = customer,
            [SQL_ENDPOINT_ROUTING_P_ENDPOINT] = name,
            [SQL_ENDPOINT_ROUTING_P_EVENTS] = v->events,
            [SQL_ENDPOINT_ROUTING_P_FILTER] = v->filter,
            [SQL_ENDPOINT_ROUTING_P_CLEAR_FILTER] = v->no_filter ? "true" : "false",
        };
        PGresult *res =
            cli_query(ctx, sql_q_endpoint_routing, SQL_ENDPOINT_ROUTING_NPARAMS, params);
        status = res ? CLI_OK : CLI_FAILED;
        PQclear(res);
    }
    if (status == CLI_OK)
        status = cli_receiver_write(ctx, full, v, secrets, true, NULL);
    if (status == CLI_OK)
        status = commit(ctx);
    if (status == CLI_OK) {
        printf("updated endpoint %s/%s%s\n", customer, name,
               v->rotate ? " (new signing secret added; see: pgpace endpoint get --show-secrets)"
                         : "");
        cli_receiver_print_public_key(v->secret ? v->secret : fresh);
    }
    OPENSSL_cleanse(fresh, sizeof fresh);
    OPENSSL_cleanse(secrets, sizeof secrets);
    return status;
}

static int endpoint_set(cli_ctx *ctx, int argc, char **argv)
{
    rs_values v = {0};
    int rc = cli_receiver_options(ctx, argc, argv, RS_ENDPOINT_SET, set_usage, NULL, &v);
    if (rc == CLI_OK)
        rc = set_values(ctx, argc, argv, &v);
    rs_values_free(&v);
    return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
}

static int endpoint_get(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option extra[] = {{"show-secrets", no_argument, NULL, OPT_SHOW},
                                          {NULL, 0, NULL, 0}};
    static const char usage[] =
        "usage: pgpace endpoint get CUSTOMER NAME [--show-secrets]\n\n"
        "Prints the endpoint's settings, as 'customer get' does a customer's, with its\n"
        "subscription (events: '*' for every kind), payload filter, state and queued\n"
        "deliveries. Secrets, header values, credentials and the client key only with\n"
        "--show-secrets.\n";
    int flags = 0;
    const char *customer = NULL, *name = NULL;
    int status = parse_args(ctx, argc, argv, usage, extra, &flags, true, &customer, &name);
    if (status == CLI_OK)
        status = cli_connect(ctx);
    if (status != CLI_OK)
        return status == CLI_HELP_SHOWN ? CLI_OK : status;
    char full[300];
    status = resolve(ctx, customer, name, full, sizeof full, NULL, 0);
    if (status != CLI_OK)
        return status;
    const char *get_params[] = {full};
    PGresult *res = cli_query(ctx, sql_q_customer_get, 1, get_params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "customer '%s' has no endpoint '%s'", customer, name);
    }
    printf("%-18s %s\n%-18s %s\n", "customer", customer, "endpoint", name);
    static const char *const skip[] = {"endpoints", NULL};
    cli_receiver_print(res, flags & (1 << OPT_SHOW), skip);
    PQclear(res);
    const char *params[] = {
        [SQL_ENDPOINT_GET_P_CUSTOMER] = customer, [SQL_ENDPOINT_GET_P_ENDPOINT] = name};
    res = cli_query(ctx, sql_q_endpoint_get, SQL_ENDPOINT_GET_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    for (int r = 0; r < PQntuples(res); r++)
        for (int c = 0; c < PQnfields(res); c++)
            printf("%-18s %s\n", PQfname(res, c), PQgetvalue(res, r, c));
    PQclear(res);
    return CLI_OK;
}

static int endpoint_list(cli_ctx *ctx, int argc, char **argv)
{
    static const char usage[] =
        "usage: pgpace endpoint list CUSTOMER\n\n"
        "Lists the customer's endpoints, its own receiver ('default') first: URL, mode, rate\n"
        "(the receiver's limit), events ('*': every kind), filter ('-': none), state (active,\n"
        "paused, disabled) and the deliveries queued for each.\n";
    int flags = 0;
    const char *customer = NULL;
    int status = parse_args(ctx, argc, argv, usage, NULL, &flags, false, &customer, NULL);
    if (status == CLI_OK)
        status = cli_connect(ctx);
    if (status != CLI_OK)
        return status == CLI_HELP_SHOWN ? CLI_OK : status;
    const char *params[] = {[SQL_ENDPOINT_LIST_P_CUSTOMER] = customer};
    PGresult *res = cli_query(ctx, sql_q_endpoint_list, SQL_ENDPOINT_LIST_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}

/* pause, resume, disable and enable: one call each, true when it changed something. */
typedef struct state_command {
    const char *name, *usage, *done, *unchanged;
    const char *paused; /* pause/resume: endpoint_pause's third parameter */
} state_command;

static const state_command state_commands[] = {
    {"pause",
     "usage: pgpace endpoint pause CUSTOMER NAME\n\nStops sending to the endpoint: its "
     "deliveries wait (nothing is dropped) and the\ncustomer's other endpoints go on. A "
     "`paused` event is recorded.\n",
     "paused", "was already paused; nothing changed", "true"},
    {"resume", "usage: pgpace endpoint resume CUSTOMER NAME\n", "resumed",
     "was not paused; nothing changed", "false"},
    {"disable",
     "usage: pgpace endpoint disable CUSTOMER NAME\n\nDisables the endpoint as the health check "
     "disables a failing one (reason 'operator'):\nthe dispatcher holds its deliveries (they "
     "wait; nothing is dropped) until 'pgpace\nendpoint enable'. A `disabled` event is "
     "recorded.\n",
     "disabled", "was already disabled; nothing changed", NULL},
    {"enable",
     "usage: pgpace endpoint enable CUSTOMER NAME\n\nRe-enables an endpoint that health or an "
     "operator disabled: its deliveries are\nclaimed again at once and its breaker starts "
     "closed. An `enabled` event is recorded.\nAn endpoint that is also paused stays paused "
     "until 'pgpace endpoint resume'.\n",
     "enabled", "was not disabled; nothing changed", NULL},
};

static int endpoint_state(cli_ctx *ctx, int argc, char **argv, const state_command *cmd)
{
    int flags = 0;
    const char *customer = NULL, *name = NULL;
    int status = parse_args(ctx, argc, argv, cmd->usage, NULL, &flags, true, &customer, &name);
    if (status == CLI_OK)
        status = cli_connect(ctx);
    if (status != CLI_OK)
        return status == CLI_HELP_SHOWN ? CLI_OK : status;
    const char *sql = strcmp(cmd->name, "disable") == 0  ? sql_q_endpoint_disable
                      : strcmp(cmd->name, "enable") == 0 ? sql_q_endpoint_enable
                                                         : sql_q_endpoint_pause;
    const char *params[] = {customer, name, cmd->paused};
    PGresult *res = cli_query(ctx, sql, cmd->paused ? 3 : 2, params);
    if (!res)
        return CLI_FAILED;
    bool changed = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (changed)
        printf("%s endpoint %s/%s\n", cmd->done, customer, name);
    else
        printf("endpoint %s/%s %s\n", customer, name, cmd->unchanged);
    return CLI_OK;
}

static int endpoint_delete(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option extra[] = {{"drop-queued", no_argument, NULL, OPT_DROP_QUEUED},
                                          {NULL, 0, NULL, 0}};
    static const char usage[] =
        "usage: pgpace endpoint delete CUSTOMER NAME [--drop-queued]\n\n"
        "Deletes the endpoint. Refused while it has deliveries queued (nothing changes);\n"
        "--drop-queued makes them dead letters marked endpoint_deleted, kept under the\n"
        "customer (pgpace dlq list). Its dead letters and attempts stay for the record. NAME\n"
        "'default' removes the customer's own receiver (its URL and secrets); the customer\n"
        "and its other endpoints stay.\n";
    int flags = 0;
    const char *customer = NULL, *name = NULL;
    int status = parse_args(ctx, argc, argv, usage, extra, &flags, true, &customer, &name);
    if (status == CLI_OK)
        status = cli_connect(ctx);
    if (status != CLI_OK)
        return status == CLI_HELP_SHOWN ? CLI_OK : status;
    const char *params[] = {[SQL_ENDPOINT_DELETE_P_CUSTOMER] = customer,
                            [SQL_ENDPOINT_DELETE_P_ENDPOINT] = name,
                            [SQL_ENDPOINT_DELETE_P_DROP_QUEUED] =
                                flags & (1 << OPT_DROP_QUEUED) ? "true" : "false"};
    PGresult *res = cli_query(ctx, sql_q_endpoint_delete, SQL_ENDPOINT_DELETE_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    long long dropped = atoll(PQgetvalue(res, 0, SQL_ENDPOINT_DELETE_C_DROPPED));
    PQclear(res);
    if (strcmp(name, "default") == 0)
        printf("removed the own receiver (default) of customer %s", customer);
    else
        printf("deleted endpoint %s/%s", customer, name);
    if (dropped > 0)
        printf(" (%lld queued delivery(ies) made dead letters: endpoint_deleted)", dropped);
    putchar('\n');
    return CLI_OK;
}

int cli_endpoint(cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(endpoint_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    snprintf(ctx->command_buf, sizeof ctx->command_buf, "endpoint %s", sub);
    ctx->command = ctx->command_buf;
    argc--, argv++;
    if (strcmp(sub, "add") == 0)
        return endpoint_add(ctx, argc, argv);
    if (strcmp(sub, "set") == 0)
        return endpoint_set(ctx, argc, argv);
    if (strcmp(sub, "get") == 0)
        return endpoint_get(ctx, argc, argv);
    if (strcmp(sub, "list") == 0)
        return endpoint_list(ctx, argc, argv);
    if (strcmp(sub, "delete") == 0)
        return endpoint_delete(ctx, argc, argv);
    for (size_t i = 0; i < PGP_ARRAY_LEN(state_commands); i++)
        if (strcmp(sub, state_commands[i].name) == 0)
            return endpoint_state(ctx, argc, argv, &state_commands[i]);
    ctx->command = "endpoint";
    return cli_usage_error(ctx,
                           "unknown subcommand '%s' (add, set, get, list, pause, resume, "
                           "enable, disable, delete)",
                           sub);
}
