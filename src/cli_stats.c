/* cli_stats.c - `pgpace stats`: per-customer (and per-endpoint) rates and queue statistics, and
 * the events of customers with endpoints. */
#include "cli.h"
#include "sql_embed.h"

#include "validate.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static const char stats_usage[] =
    "usage: pgpace stats [--customer NAME] [--watch [SECONDS]]\n"
    "       pgpace stats --unmatched [--customer NAME]\n"
    "\n"
    "Per customer: the configured rate (with its limit windows when it has any:\n"
    "'10/s,50000/day', or '60/min,50000/day' beside a rate) and the effective one, eff_rate\n"
    "(per minute: the pace, the slower of the rate and the shortest window; lower while the\n"
    "receiver answers 429, or 503 with Retry-After), due (may be claimed now),\n"
    "in_flight (claimed, lease running), delayed (scheduled for later or waiting for a retry),\n"
    "dead (dead letters), the age of the oldest due item in seconds, backlog_s (how long the\n"
    "due items take at the customer's pace: due / effective rate, per tick for batch\n"
    "customers; for unlimited ones from the deliveries of the last minute, '-' when none),\n"
    "last_error (the error class and status of the latest attempt of the last hour when it\n"
    "failed: http:503, tls, oauth_http:500, proxy, ...; '-' after a success) and the circuit\n"
    "breaker.\n"
    "\n"
    "Below the table, for customers and endpoints with order keys: waiting (items queued\n"
    "behind an earlier item of their key, counted in neither due nor delayed), blocked_keys\n"
    "(keys whose later items wait behind a head that is failing, or held by its dead letter)\n"
    "and of those the key waiting longest and for how many seconds.\n"
    "\n"
    "A customer with endpoints is a line of the customer (its rate: its limit over all of its\n"
    "endpoints; the counts summed over them; the worst breaker), then its endpoints' lines,\n"
    "indented, each with its own figures ('default': its own receiver). Below the table, for\n"
    "customers whose enqueues fan out to endpoints: the events of the last 24 hours and how\n"
    "many matched no endpoint (kept for `pgpace recover --endpoint`). --customer NAME shows a\n"
    "customer and its endpoints; NAME/ENDPOINT one endpoint.\n"
    "\n"
    "--unmatched lists those events that matched no endpoint (the newest 100 of the last 24\n"
    "hours): each one's id (its webhook-id is msg_ID), customer, kind and enqueue time.\n"
    "\n"
    "--watch refreshes every SECONDS (default 1) until interrupted, showing per customer the\n"
    "configured and effective rate, what was observed (spaced and unlimited: webhooks delivered\n"
    "in the last minute, '/min', or per minute of the time since the customer was created or\n"
    "the leader's session began when that is shorter, with its length: '118.5/min (27 s)';\n"
    "batch: requests sent in the last complete tick against the allowance, e.g. '12 of\n"
    "12/tick', since a batch rate is an allowance per tick of the leader's batch_tick_ms), the\n"
    "last gaps between webhooks, queue depth, in-flight items and breaker/pause state.\n";

int cli_stats(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"customer", required_argument, NULL, 'c'},
                                         {"watch", optional_argument, NULL, 'w'},
                                         {"unmatched", no_argument, NULL, 'u'},
                                         {NULL, 0, NULL, 0}};
    const char *customer = NULL;
    bool unmatched = false;
    long long watch_s = 0;
    pgp_error err;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "hc:w::", opts, NULL)) != -1) {
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
        if (opt == 'u') {
            unmatched = true;
            continue;
        }
        if (opt == 'w') {
            watch_s = 1;
            if (optarg && validate_int("--watch", optarg, 1, 3600, &watch_s, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            continue;
        }
        return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    if (unmatched && watch_s > 0)
        return cli_usage_error(ctx, "--unmatched and --watch do not go together");
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    PGresult *res = cli_query(ctx, sql_q_stats_session, 0, NULL);
    if (!res)
        return CLI_FAILED;
    PQclear(res);
    if (unmatched) {
        const char *un_params[SQL_STATS_UNMATCHED_NPARAMS] = {
            [SQL_STATS_UNMATCHED_P_CUSTOMER] = customer, [SQL_STATS_UNMATCHED_P_LIMIT] = "100"};
        res = cli_query(ctx, sql_q_stats_unmatched, SQL_STATS_UNMATCHED_NPARAMS, un_params);
        if (!res)
            return CLI_FAILED;
        cli_print_table(res);
        PQclear(res);
        return CLI_OK;
    }
    const char *params[] = {customer};
    while (watch_s > 0) {
        res = cli_query(ctx, sql_q_stats_watch, 1, params);
        if (!res)
            return CLI_FAILED;
        time_t now = time(NULL);
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
        if (isatty(STDOUT_FILENO))
            fputs("\033[H\033[2J", stdout);
        printf("pgpace stats --watch  %s  (every %llds; Ctrl-C stops)\n", when, watch_s);
        cli_print_table(res);
        fflush(stdout);
        PQclear(res);
        sleep((unsigned)watch_s);
    }
    res = cli_query(ctx, sql_q_stats, 1, params);
    if (!res)
        return CLI_FAILED;
    int rows = PQntuples(res);
    if (customer && rows == 0) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "unknown customer '%s'", customer);
    }
    cli_print_table(res);
    PQclear(res);
    /* Receiver hosts' own limits: over every customer on them, so apart from the lines above. */
    const char *host_params[SQL_STATS_HOSTS_NPARAMS] = {[SQL_STATS_HOSTS_P_CUSTOMER] = customer};
    res = cli_query(ctx, sql_q_stats_hosts, SQL_STATS_HOSTS_NPARAMS, host_params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) > 0) {
        printf("\nreceiver hosts with a limit (used: sends in each window's last period / its "
               "count)\n");
        cli_print_table(res);
    }
    PQclear(res);
    /* Ordered delivery: what waits behind a key's head (not among the due or delayed above). */
    const char *ord_params[SQL_STATS_ORDER_NPARAMS] = {[SQL_STATS_ORDER_P_CUSTOMER] = customer};
    res = cli_query(ctx, sql_q_stats_order, SQL_STATS_ORDER_NPARAMS, ord_params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) > 0) {
        printf("\nordered keys (waiting: behind an earlier item of their key; blocked_keys: "
               "behind a failing or held head, the longest wait's key and seconds)\n");
        cli_print_table(res);
    }
    PQclear(res);
    /* Events are not deliveries: counted apart, never among the queue's figures above. */
    const char *ev_params[SQL_STATS_EVENTS_NPARAMS] = {[SQL_STATS_EVENTS_P_CUSTOMER] = customer};
    res = cli_query(ctx, sql_q_stats_events, SQL_STATS_EVENTS_NPARAMS, ev_params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) > 0) {
        printf("\nevents of the last 24 hours (unmatched: matched no endpoint, kept for "
               "`pgpace recover --endpoint`)\n");
        cli_print_table(res);
    }
    PQclear(res);
    return CLI_OK;
}
