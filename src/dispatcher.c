/* dispatcher.c - `pgpace run`'s public lifecycle: create, start, reload, and the shutdown.
 *
 * Owns the dispatcher struct and every handle it opens: the timers in dispatcher.timers[], the
 * database connection, the HTTP sender, the admin listener, and (through delivery.c) the send
 * timers of deliveries waiting for their slot. close_all() closes every one of them; the struct
 * is freed when the last has closed. The parts of the service are in src/dispatch/ (its
 * internal.h says which file owns what).
 */
#include "dispatcher.h"

#include "dispatch/internal.h"
#include "log.h"
#include "sdnotify.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_db_closed(void *arg)
{
    dispatcher_part_closed(arg);
}

static void on_http_closed(void *arg)
{
    dispatcher_part_closed(arg);
}

static void on_admin_closed(void *arg)
{
    dispatcher_part_closed(arg);
}

static void on_timer_closed(uv_handle_t *h)
{
    dispatcher_part_closed(h->data);
}

/* Frees what dispatcher_new allocated, for a dispatcher whose handles are all closed (or were
 * never opened). */
static void dispatcher_free(dispatcher *d)
{
    state_free(d);
    limits_free(d);
    status_free(d);
    delivery_pool_free(d);
    claim_scratch_free(d);
    wake_free(d);
    final_list_free(&d->pending);
    final_list_free(&d->sending);
    obs_free(&d->obs);
    free(d->no_proxy);
    free(d);
}

static void on_init_timer_closed(uv_handle_t *h)
{
    dispatcher *d = h->data;
    if (--d->open_handles == 0)
        dispatcher_free(d);
}

int dispatcher_new(uv_loop_t *loop, const pgp_config *cfg, dispatcher **out, pgp_error *err)
{
    *out = NULL;
    dispatcher *d = calloc(1, sizeof *d);
    if (!d)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    d->loop = loop;
    d->cfg = *cfg;
    d->tick_queued = -1;
    pgp_list_init(&d->deliveries);
    pgp_list_init(&d->window);
    pgp_list_init(&d->spare);
    hmap_init(&d->customers);
    hmap_init(&d->carriers);
    hmap_init(&d->gates);
    hmap_init(&d->hosts);
    hmap_init(&d->host_limits);
    hmap_init(&d->status_tenants);
    sched_heap_init(&d->heap);
    prng_seed(&d->rng);
    if (cfg->instance_name[0]) {
        snprintf(d->instance, sizeof d->instance, "%s", cfg->instance_name);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(d->instance, sizeof d->instance, "%.60s:%d", host, (int)getpid());
    }
    snprintf(d->app_name, sizeof d->app_name, "pgpace:%.55s", d->instance);

    int rc = netcheck_parse_allow(cfg->allow_cidrs, &d->allow, err);
    if (rc != 0) {
        free(d);
        return pgp_error_prefix(err, rc, "[delivery] allow_cidrs");
    }
    d->no_proxy = malloc(sizeof *d->no_proxy);
    if (!d->no_proxy) {
        free(d);
        return pgp_error_set(err, -ENOMEM, "out of memory");
    }
    if ((rc = proxy_bypass_parse(cfg->no_proxy, d->no_proxy, err)) != 0)
        rc = pgp_error_prefix(err, rc, "[delivery] no_proxy");
    else if (cfg->proxy[0])
        rc = proxy_url_check("[delivery] proxy", cfg->proxy, err);
    if (rc != 0) {
        free(d->no_proxy);
        free(d);
        return rc;
    }
    rc = obs_init(&d->obs, cfg->metrics_customers, err);
    if (rc != 0) {
        free(d);
        return rc;
    }
    static const char *const channels[] = {CHANNEL_ENQUEUE,
                                           CHANNEL_CUSTOMER,
                                           CHANNEL_CARRIER,
                                           CHANNEL_EVENT,
                                           CHANNEL_HOST,
                                           CHANNEL_TOKEN,
                                           NULL};
    pgconn_options po = {.conninfo = cfg->conninfo,
                         .application_name = d->app_name,
                         .keepalive_idle_s = cfg->keepalive_idle_s,
                         .reconnect_min_ms = 100,
                         .reconnect_max_ms = cfg->reconnect_max_ms,
                         .listen = channels,
                         .on_state = leader_on_db_state,
                         .on_notify = leader_on_notify,
                         .arg = d};
    rc = pgconn_new(loop, &po, &d->db);
    if (rc != 0) {
        pgp_error_set(err, rc, "cannot create the database connection");
        goto fail;
    }
    /* The leader's read-only passes (housekeeping.c) on a session of their own, so that claims
     * never queue behind them; started when this instance first leads. */
    snprintf(d->read_app_name, sizeof d->read_app_name, "pgpace-read:%.55s", d->instance);
    pgconn_options rpo = {.conninfo = cfg->conninfo,
                          .application_name = d->read_app_name,
                          .keepalive_idle_s = cfg->keepalive_idle_s,
                          .reconnect_min_ms = 100,
                          .reconnect_max_ms = cfg->reconnect_max_ms,
                          .on_state = housekeeping_on_read_db_state,
                          .arg = d};
    rc = pgconn_new(loop, &rpo, &d->read_db);
    if (rc != 0) {
        pgp_error_set(err, rc, "cannot create the leader's read connection");
        goto fail;
    }
    http_sender_options ho = {.max_connections = cfg->max_connections,
                              .max_host_connections = cfg->max_host_connections,
                              .max_response_bytes = (size_t)cfg->max_response_bytes,
                              .excerpt_bytes = 512,
                              .allow = &d->allow,
                              .ca_file = cfg->ca_file};
    rc = http_sender_new(loop, &ho, &d->http);
    if (rc != 0) {
        pgp_error_set(err, rc, "cannot create the HTTP sender");
        goto fail;
    }
    if (cfg->http_listen[0]) {
        /* Its own session, without LISTEN: API load never queues behind (or ahead of) claims.
         * Not named "pgpace:..." like the instance's own session: pgpace.instance lists those. */
        snprintf(d->api_app_name, sizeof d->api_app_name, "pgpace-api:%.55s", d->instance);
        pgconn_options apo = {.conninfo = cfg->conninfo,
                              .application_name = d->api_app_name,
                              .keepalive_idle_s = cfg->keepalive_idle_s,
                              .reconnect_min_ms = 100,
                              .reconnect_max_ms = cfg->reconnect_max_ms,
                              .on_state = api_on_db_state,
                              .arg = d};
        rc = pgconn_new(loop, &apo, &d->api_db);
        if (rc != 0) {
            pgp_error_set(err, rc, "cannot create the API's database connection");
            goto fail;
        }
        admin_http_options ao = {.listen = cfg->http_listen,
                                 .enqueue_token = cfg->enqueue_token,
                                 .status_token = cfg->status_token,
                                 .max_body_bytes = (size_t)cfg->max_body_bytes,
                                 .portal_frame_ancestors = cfg->portal_frame_ancestors};
        admin_http_callbacks cb = {.render_metrics = admin_render_metrics,
                                   .readiness = admin_readiness,
                                   .enqueue = admin_enqueue,
                                   .status = admin_status,
                                   .api = admin_api,
                                   .request_done = admin_request_done,
                                   .arg = d};
        rc = admin_http_new(loop, &ao, &cb, &d->admin, err);
        if (rc != 0)
            goto fail; /* the message already names [http] listen */
    }
    for (int i = 0; i < TIMER_COUNT; i++) {
        rc = uv_timer_init(loop, &d->timers[i]);
        if (rc != 0) {
            pgp_error_set(err, -EIO, "cannot create a timer: %s", uv_strerror(rc));
            goto fail;
        }
        d->timers[i].data = d;
        d->open_handles++;
    }
    *out = d;
    return 0;

fail:
    /* Nothing has run yet: the parts close without callbacks into the dispatcher, and the
     * timers already initialised free it once they are closed. */
    if (d->admin)
        admin_http_close(d->admin, NULL, NULL);
    if (d->http)
        http_sender_close(d->http, NULL, NULL);
    if (d->db)
        pgconn_close(d->db, NULL, NULL);
    if (d->api_db)
        pgconn_close(d->api_db, NULL, NULL);
    if (d->read_db)
        pgconn_close(d->read_db, NULL, NULL);
    if (d->open_handles == 0) {
        dispatcher_free(d);
    } else {
        int opened = d->open_handles;
        for (int i = 0; i < opened; i++)
            uv_close((uv_handle_t *)&d->timers[i], on_init_timer_closed);
    }
    return rc < 0 ? rc : -EIO;
}

void dispatcher_start(dispatcher *d)
{
    if ((int64_t)d->cfg.lease_seconds * 1000 <=
        (int64_t)d->cfg.connect_timeout_ms + d->cfg.request_timeout_ms)
        LOG_WARN("lease_shorter_than_request",
                 LOG_I("lease_ms", (long long)d->cfg.lease_seconds * 1000),
                 LOG_I("request_timeout_ms", d->cfg.request_timeout_ms),
                 LOG_S("meaning", "a slow but successful delivery may be claimed and sent again; "
                                  "raise [dispatcher] lease_seconds"));
    LOG_INFO("starting", LOG_S("instance", d->instance), LOG_I("lease_s", d->cfg.lease_seconds),
             LOG_I("batch_tick_ms", d->cfg.batch_tick_ms));
    if (d->admin) {
        pgp_error err;
        if (admin_http_start(d->admin, &err) != 0) {
            LOG_ERROR("http_listen_failed", LOG_S("listen", d->cfg.http_listen),
                      LOG_S("error", err.msg));
            dispatcher_fatal(d);
            return;
        }
        LOG_INFO("http_listening", LOG_S("listen", d->cfg.http_listen),
                 LOG_I("port", admin_http_port(d->admin)));
    }
    uv_timer_start(&d->timers[TIMER_WATCHDOG], leader_on_watchdog, 1000, 1000);
    pgconn_start(d->db);
    if (d->api_db)
        pgconn_start(d->api_db);
}

int dispatcher_reload(dispatcher *d, const pgp_config *cfg, pgp_error *err)
{
    netcheck_allow allow;
    int rc = netcheck_parse_allow(cfg->allow_cidrs, &allow, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "[delivery] allow_cidrs");
    /* The loader checked both; parsed here again to swap them in whole. */
    proxy_bypass *no_proxy = malloc(sizeof *no_proxy);
    if (!no_proxy)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    if ((rc = proxy_bypass_parse(cfg->no_proxy, no_proxy, err)) != 0) {
        free(no_proxy);
        return pgp_error_prefix(err, rc, "[delivery] no_proxy");
    }
    if (cfg->proxy[0] && (rc = proxy_url_check("[delivery] proxy", cfg->proxy, err)) != 0) {
        free(no_proxy);
        return rc;
    }
    if (strcmp(cfg->conninfo, d->cfg.conninfo) != 0)
        LOG_WARN("reload_needs_restart", LOG_S("key", "database.conninfo"));
    if (strcmp(cfg->instance_name, d->cfg.instance_name) != 0)
        LOG_WARN("reload_needs_restart", LOG_S("key", "dispatcher.instance_name"));
    if (strcmp(cfg->http_listen, d->cfg.http_listen) != 0)
        LOG_WARN("reload_needs_restart", LOG_S("key", "http.listen"));
    /* The sender's handles have the bundle set once (easy_setup), and a reload must not make
     * kept-alive connections verified under the old anchors look like new ones. */
    if (strcmp(cfg->ca_file, d->cfg.ca_file) != 0)
        LOG_WARN("reload_needs_restart", LOG_S("key", "delivery.ca_file"));
    pgp_config old = d->cfg;
    bool new_timeout = cfg->statement_timeout_ms != old.statement_timeout_ms;
    d->cfg = *cfg;
    memcpy(d->cfg.conninfo, old.conninfo, sizeof old.conninfo);
    memcpy(d->cfg.instance_name, old.instance_name, sizeof old.instance_name);
    memcpy(d->cfg.http_listen, old.http_listen, sizeof old.http_listen);
    memcpy(d->cfg.ca_file, old.ca_file, sizeof old.ca_file);
    /* The sender keeps its own copy of the allow-list: update it in place. Requests in
     * flight copied their proxy URL; the next ones use the new settings. */
    d->allow = allow;
    free(d->no_proxy);
    d->no_proxy = no_proxy;
    if (d->http)
        http_sender_set_allow(d->http, &d->allow);
    if (d->admin && admin_http_set_token(d->admin, cfg->enqueue_token) != 0)
        LOG_ERROR("reload_token_failed", LOG_S("key", "http.enqueue_token"));
    if (d->admin && admin_http_set_status_token(d->admin, cfg->status_token) != 0)
        LOG_ERROR("reload_token_failed", LOG_S("key", "http.status_token"));
    if (new_timeout && pgconn_ready(d->db))
        leader_send_session_settings(d);
    if (new_timeout && pgconn_ready(d->read_db))
        housekeeping_read_session(d);
    if (is_leading(d)) {
        tick_arm(d, batch_tick_at(&d->cfg, now_us()));
        housekeeping_restart_timers(d, false);
        health_restart_timer(d, false);
        claim_arm(d);
    }
    LOG_INFO("config_reloaded", LOG_S("path", cfg->path));
    return 0;
}

void dispatcher_on_exit(dispatcher *d, dispatcher_done_cb done, void *arg)
{
    d->done = done;
    d->done_arg = arg;
}

void dispatcher_fatal(dispatcher *d)
{
    d->exit_status = 1;
    dispatcher_shutdown(d, d->done, d->done_arg);
}

void dispatcher_part_closed(dispatcher *d)
{
    if (--d->open_handles > 0)
        return;
    dispatcher_done_cb done = d->done;
    void *arg = d->done_arg;
    int status = d->exit_status;
    LOG_INFO("stopped", LOG_S("instance", d->instance), LOG_I("claimed", d->claimed),
             LOG_I("stale_recoveries", d->stale_recoveries),
             LOG_I("lost_ownership", d->lost_ownership));
    dispatcher_free(d);
    if (done)
        done(arg, status);
}

static void close_all(dispatcher *d)
{
    if (d->stop == STOP_CLOSING)
        return;
    d->stop = STOP_CLOSING;
    int waiting = deliveries_close_waiting(d);
    if (d->pending.n > 0 || waiting > 0)
        LOG_WARN("unfinalised_at_exit", LOG_I("items", (long long)d->pending.n + waiting),
                 LOG_S("meaning", "their leases expire and they are delivered again"));
    for (int i = 0; i < TIMER_COUNT; i++)
        uv_close((uv_handle_t *)&d->timers[i], on_timer_closed);
    /* The admin server first: a pending HTTP enqueue's answer is dropped with it. */
    if (d->admin) {
        d->open_handles++;
        admin_http_close(d->admin, on_admin_closed, d);
        d->admin = NULL;
    }
    if (d->http) {
        d->open_handles++;
        http_sender *h = d->http;
        d->http = NULL;
        http_sender_close(h, on_http_closed, d);
    }
    /* Before the connection it sends on goes (the check frees itself). */
    leader_close(d);
    if (d->api_db) {
        d->open_handles++;
        pgconn_close(d->api_db, on_db_closed, d);
        d->api_db = NULL;
    }
    /* Its slices' answers come back void (NULL, not leading) before the claim connection's. */
    d->open_handles++;
    pgconn_close(d->read_db, on_db_closed, d);
    d->read_db = NULL;
    d->open_handles++;
    pgconn_close(d->db, on_db_closed, d);
}

void dispatcher_maybe_finish(dispatcher *d)
{
    if (d->stop == STOP_NONE || d->stop == STOP_CLOSING)
        return;
    if (d->in_flight > 0 || d->n_claims > 0)
        return;
    /* Everything delivered or aborted: wait for the outcomes to be written while the database
     * is reachable; if it is not, leases expire by themselves. */
    if ((d->pending.n > 0 || finalize_busy(d)) && pgconn_ready(d->db))
        return;
    close_all(d);
}

static void on_drain_timeout(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (d->stop == STOP_CLOSING)
        return;
    if (d->in_flight > 0 && d->stop == STOP_DRAINING) {
        d->stop = STOP_ABORTING;
        LOG_WARN("drain_timeout", LOG_I("in_flight", d->in_flight),
                 LOG_S("action", "aborting and releasing them"));
        /* Closing the sender aborts every request: each comes back as "aborted" -> release. */
        if (d->http) {
            d->open_handles++;
            http_sender *h = d->http;
            d->http = NULL;
            http_sender_close(h, on_http_closed, d);
        }
        /* Give the release statement a moment, then close regardless. */
        uv_timer_start(&d->timers[TIMER_DRAIN], on_drain_timeout, 5000, 0);
        return;
    }
    close_all(d);
}

void dispatcher_shutdown(dispatcher *d, dispatcher_done_cb done, void *arg)
{
    if (done)
        dispatcher_on_exit(d, done, arg);
    if (d->stop != STOP_NONE)
        return;
    d->stop = STOP_DRAINING;
    (void)!sdnotify_send("STOPPING=1");
    LOG_INFO("shutting_down", LOG_S("instance", d->instance), LOG_I("in_flight", d->in_flight),
             LOG_I("drain_timeout_ms", d->cfg.drain_timeout_ms));
    static const int idle[] = {TIMER_CLAIM,   TIMER_TICK,  TIMER_BACKSTOP,
                               TIMER_STANDBY, TIMER_RETRY, TIMER_HEALTH};
    for (size_t i = 0; i < PGP_ARRAY_LEN(idle); i++)
        uv_timer_stop(&d->timers[idle[i]]);
    uv_timer_start(&d->timers[TIMER_DRAIN], on_drain_timeout, (uint64_t)d->cfg.drain_timeout_ms, 0);
    throttle_flush(d);
    /* Items claimed ahead are not sent now: they go back to the queue for the next leader
     * (last: with nothing else left, giving them back may already close everything). */
    window_give_back_all(d, "shutting down");
    dispatcher_maybe_finish(d);
}
