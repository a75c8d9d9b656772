/* cli_run.c - `pgpace run` (the service) and `pgpace status` (who leads). */
#include "cli.h"
#include "dispatcher.h"
#include "log.h"
#include "sdnotify.h"
#include "sql_embed.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static const char run_usage[] =
    "usage: pgpace run [--db CONNINFO] [--config FILE]\n"
    "\n"
    "Runs the dispatcher. Every instance runs the same command: one leads (it holds a session\n"
    "advisory lock and claims on that connection), the others stand by and take over when it\n"
    "goes. SIGTERM or SIGINT: stop claiming, finish in-flight deliveries up to\n"
    "[dispatcher] drain_timeout_ms, release the rest, exit 0. A second signal exits at once.\n"
    "SIGHUP rereads the config file (a bad new file is refused and logged; the old one stays).\n"
    "Under systemd (Type=notify) it reports READY=1 once the schema was checked.\n"
    "Logs go to stderr, one structured line per event ([log] format, level).\n";

static const char status_usage[] =
    "usage: pgpace status [--db CONNINFO] [--config FILE]\n"
    "\n"
    "Lists the running pgpace instances connected to the database and which one leads\n"
    "(also: SELECT * FROM pgpace.instance / pgpace.leader).\n";

typedef struct run_state {
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    cli_ctx *ctx;
    dispatcher *d;
    int signals;
    int status;
    bool stopped;
} run_state;

static void on_stopped(void *arg, int status)
{
    run_state *rs = arg;
    rs->status = status;
    rs->stopped = true;
    /* Already exiting: a late signal must not turn a clean exit into death by signal. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    uv_close((uv_handle_t *)&rs->sigterm, NULL);
    uv_close((uv_handle_t *)&rs->sigint, NULL);
    uv_close((uv_handle_t *)&rs->sighup, NULL);
}

/* SIGHUP: reread the config file; a bad new file is refused and the running config kept. */
static void on_sighup(uv_signal_t *h, int signum)
{
    run_state *rs = h->data;
    if (!rs->ctx->cfg.path[0]) {
        LOG_WARN("config_reload_skipped", LOG_S("reason", "started without a config file"));
        return;
    }
    (void)!sdnotify_send("RELOADING=1");
    pgp_config cfg;
    config_defaults(&cfg);
    pgp_error err;
    char path[sizeof cfg.path];
    snprintf(path, sizeof path, "%s", rs->ctx->cfg.path);
    if (config_load(&cfg, path, &err) != 0) {
        LOG_ERROR("config_reload_failed", LOG_S("error", err.msg),
                  LOG_S("action", "keeping the running configuration"));
    } else {
        if (rs->ctx->db_arg)
            snprintf(cfg.conninfo, sizeof cfg.conninfo, "%s", rs->ctx->db_arg);
        if (dispatcher_reload(rs->d, &cfg, &err) != 0) {
            LOG_ERROR("config_reload_failed", LOG_S("error", err.msg),
                      LOG_S("action", "keeping the running configuration"));
        } else {
            rs->ctx->cfg = cfg;
            log_setup(cfg.log_level, cfg.log_format);
        }
    }
    (void)!sdnotify_send("READY=1");
}

static void on_signal(uv_signal_t *h, int signum)
{
    run_state *rs = h->data;
    if (++rs->signals > 1) {
        LOG_WARN("exit_now", LOG_S("reason", "second signal"), LOG_I("signal", signum));
        _exit(1);
    }
    LOG_INFO("signal", LOG_I("signal", signum), LOG_S("action", "draining"));
    dispatcher_shutdown(rs->d, on_stopped, rs);
}

int cli_run(cli_ctx *ctx, int argc, char **argv)
{
    int parsed = cli_parse_plain(ctx, argc, argv, run_usage);
    if (parsed != CLI_OK)
        return parsed == CLI_HELP_SHOWN ? CLI_OK : parsed;
    int status = cli_load_config(ctx);
    if (status != CLI_OK)
        return status;
    pgp_config cfg = ctx->cfg;
    if (ctx->db_arg)
        snprintf(cfg.conninfo, sizeof cfg.conninfo, "%s", ctx->db_arg);
    log_setup(cfg.log_level, cfg.log_format);

    run_state *rs = calloc(1, sizeof *rs);
    if (!rs)
        return cli_fail(ctx, CLI_FAILED, "out of memory");
    if (uv_loop_init(&rs->loop) != 0) {
        free(rs);
        return cli_fail(ctx, CLI_FAILED, "cannot create the event loop");
    }
    pgp_error err;
    if (dispatcher_new(&rs->loop, &cfg, &rs->d, &err) != 0) {
        /* A failure after the database connection and the HTTP sender were made (a bad
         * [http] listen) closes them with uv_close: run the loop so that finishes and frees. */
        uv_run(&rs->loop, UV_RUN_DEFAULT);
        uv_loop_close(&rs->loop);
        free(rs);
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    }
    rs->ctx = ctx;
    uv_signal_t *signals[] = {&rs->sigterm, &rs->sigint, &rs->sighup};
    for (size_t i = 0; i < PGP_ARRAY_LEN(signals); i++) {
        int rc = uv_signal_init(&rs->loop, signals[i]);
        if (rc != 0) {
            /* Without its signals the service could not be stopped cleanly: do not start it. */
            for (size_t k = 0; k < i; k++)
                uv_close((uv_handle_t *)signals[k], NULL);
            dispatcher_shutdown(rs->d, NULL, NULL);
            uv_run(&rs->loop, UV_RUN_DEFAULT);
            uv_loop_close(&rs->loop);
            free(rs);
            return cli_fail(ctx, CLI_FAILED, "cannot watch signals: %s", uv_strerror(rc));
        }
    }
    dispatcher_on_exit(rs->d, on_stopped, rs);
    rs->sigterm.data = rs->sigint.data = rs->sighup.data = rs;
    uv_signal_start(&rs->sigterm, on_signal, SIGTERM);
    uv_signal_start(&rs->sigint, on_signal, SIGINT);
    uv_signal_start(&rs->sighup, on_sighup, SIGHUP);

    dispatcher_start(rs->d);
    uv_run(&rs->loop, UV_RUN_DEFAULT);
    status = rs->stopped ? rs->status : CLI_FAILED;
    if (uv_loop_close(&rs->loop) != 0)
        LOG_WARN("loop_not_closed", LOG_S("meaning", "a handle was left open"));
    free(rs);
    return status;
}

int cli_status(cli_ctx *ctx, int argc, char **argv)
{
    int parsed = cli_parse_plain(ctx, argc, argv, status_usage);
    if (parsed != CLI_OK)
        return parsed == CLI_HELP_SHOWN ? CLI_OK : parsed;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    PGresult *res = cli_query(ctx, sql_q_status, 0, NULL);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) == 0)
        printf("no pgpace instance is connected\n");
    else
        cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}
