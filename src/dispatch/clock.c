/* clock.c - keeps the dispatcher's timebase (src/timebase.h) on the database server's time:
 * samples the server's clock when a connection becomes ready (before anything is loaded or
 * scheduled, so the first sample sets the scale everything is scheduled on) and every
 * TIMEBASE_SAMPLE_MS after, on the instance's one connection.
 *
 * Owns TIMER_CLOCK. A step (the first sample when it differs by more than TIMEBASE_STEP_US
 * from this host's wall clock, or any later large difference) is logged with its size.
 */
#include "internal.h"

#include "log.h"
#include "timebase.h"

#include <stdlib.h>

typedef struct clock_probe {
    dispatcher *d;
    int64_t sent_mono_us;
} clock_probe;

static void on_clock(pgconn *conn, PGresult *res, void *arg)
{
    clock_probe *p = arg;
    int64_t recv = timebase_mono_us();
    dispatcher *d = p->d;
    int64_t sent = p->sent_mono_us;
    free(p);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_CLOCK_NCOLS, "clock") || PQntuples(res) != 1 ||
        PQgetisnull(res, 0, SQL_RUN_CLOCK_C_SERVER_US))
        return; /* lost or failed: the next sample, or the reconnect's, will do */
    int64_t server_us = row_i64(res, 0, SQL_RUN_CLOCK_C_SERVER_US);
    int64_t wall_us = timebase_wall_us();
    int64_t delta = 0;
    tb_sample_result r = timebase_sample(sent, recv, server_us, &delta);
    if (r == TB_SAMPLE_STEPPED && (delta > TIMEBASE_STEP_US || delta < -TIMEBASE_STEP_US))
        LOG_WARN("clock_stepped", LOG_I("by_ms", (long long)(delta / 1000)),
                 LOG_I("server_minus_wall_ms", (long long)((server_us - wall_us) / 1000)),
                 LOG_S("why", "the dispatcher schedules on the database server's time: its "
                              "first sample, or the server's clock changed"));
    else if (r != TB_SAMPLE_IGNORED)
        LOG_DEBUG("clock_sampled", LOG_I("delta_us", (long long)delta),
                  LOG_I("rtt_us", (long long)(recv - sent)),
                  LOG_I("server_minus_wall_ms", (long long)((server_us - wall_us) / 1000)));
    metrics_gauge_set(d->obs.m, d->obs.clock_offset, NULL, (double)(server_us - wall_us) / 1e6);
}

void clock_sample(dispatcher *d)
{
    clock_probe *p = malloc(sizeof *p);
    if (!p)
        return;
    *p = (clock_probe){.d = d, .sent_mono_us = timebase_mono_us()};
    if (DSP_QUERY0(d, run_clock, on_clock, p, "clock") != 0)
        free(p);
}

static void on_clock_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (pgconn_ready(d->db))
        clock_sample(d);
}

void clock_start(dispatcher *d)
{
    clock_sample(d);
    uv_timer_start(&d->timers[TIMER_CLOCK], on_clock_timer, TIMEBASE_SAMPLE_MS, TIMEBASE_SAMPLE_MS);
}

void clock_stop(dispatcher *d)
{
    uv_timer_stop(&d->timers[TIMER_CLOCK]);
}
