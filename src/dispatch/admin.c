/* admin.c - what the admin HTTP listener asks of the dispatcher: metrics, readiness, the HTTP
 * enqueue, and request accounting. The listener itself is src/admin_http.c.
 */
#include "internal.h"

#include <stdio.h>

int admin_render_metrics(void *arg, strbuf *out)
{
    dispatcher *d = arg;
    metrics_gauge_set(d->obs.m, d->obs.in_flight, NULL, d->in_flight);
    metrics_gauge_set(d->obs.m, d->obs.window_items, NULL, d->windowed);
    return metrics_render(d->obs.m, out);
}

void admin_readiness(void *arg, admin_http_readiness *out)
{
    dispatcher *d = arg;
    bool loaded = d->state >= LEADER_ELECTING;
    bool db = pgconn_ready(d->db);
    out->ready = db && loaded && d->stop == STOP_NONE;
    out->role = d->state == LEADER_LEADING || d->state == LEADER_FRONTIER ? "leader"
                : d->state == LEADER_STANDBY                              ? "standby"
                                                                          : "starting";
    out->reason = out->ready             ? NULL
                  : d->stop != STOP_NONE ? "shutting down"
                  : !db                  ? "database unreachable"
                                         : "loading";
}

void admin_enqueue(void *arg, const char *body, size_t len, admin_http_reply *reply)
{
    dispatcher *d = arg;
    if (admin_http_enqueue_sql(d->db, body, len, admin_http_reply_done, reply) != 0)
        admin_http_reply_send(reply, 503, "{\"error\":\"database unreachable\"}");
}

void admin_request_done(void *arg, const char *route, int status, double seconds)
{
    dispatcher *d = arg;
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    const char *labels[] = {route, code};
    metrics_counter_add(d->obs.m, d->obs.http_requests, labels, 1);
    const char *route_label[] = {route};
    metrics_histogram_observe(d->obs.m, d->obs.http_seconds, route_label, seconds);
}
