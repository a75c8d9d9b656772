/* obs.c - registration of the service's metric families. */
#include "obs.h"

#include <errno.h>

/* Seconds: claim statements and HTTP attempts (1 ms .. 30 s). */
static const double latency_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,    1,     2.5,  5,     10,   30};
/* Enqueue-to-delivery lag: from milliseconds to an hour (retries and run_at make it long). */
static const double lag_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                     2.5,   5,    10,    30,   60,  300,  900, 3600};
/* Spacing error: how far a spaced webhook left from its slot (0.5 ms .. 1 s). */
static const double spacing_buckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025,
                                         0.05,   0.1,   0.25,  0.5,   1};

#define N(a) (sizeof(a) / sizeof((a)[0]))

int obs_init(obs *o, int customer_top_n, pgp_error *err)
{
    *o = (obs){0};
    metrics_options mo = {.customer_top_n = customer_top_n};
    if (metrics_new(&mo, &o->m) != 0)
        return pgp_error_set(err, -ENOMEM, "cannot create the metrics registry");
    const struct {
        int *id;
        metrics_family_def def;
    } families[] = {
        {&o->items_claimed,
         {"pgpace_items_claimed_total",
          "Items claimed, by customer mode.",
          METRICS_COUNTER,
          {"mode"},
          NULL,
          0}},
        {&o->claim_rounds,
         {"pgpace_claim_rounds_total",
          "Claim statements sent: scheduled (spaced and unlimited) or batch_tick.",
          METRICS_COUNTER,
          {"round"},
          NULL,
          0}},
        {&o->claim_seconds,
         {"pgpace_claim_duration_seconds",
          "Claim statement latency, sent to result.",
          METRICS_HISTOGRAM,
          {"round"},
          latency_buckets,
          N(latency_buckets)}},
        {&o->deliveries,
         {"pgpace_deliveries_total",
          "Delivery attempts by outcome (success, retry, dead, release).",
          METRICS_COUNTER,
          {"customer", "outcome"},
          NULL,
          0}},
        {&o->delivery_seconds,
         {"pgpace_delivery_duration_seconds",
          "Duration of one webhook attempt.",
          METRICS_HISTOGRAM,
          {"outcome"},
          latency_buckets,
          N(latency_buckets)}},
        {&o->lag_seconds,
         {"pgpace_enqueue_to_delivery_seconds",
          "From enqueue to the first attempt being sent (includes run_at and rate waits).",
          METRICS_HISTOGRAM,
          {NULL},
          lag_buckets,
          N(lag_buckets)}},
        {&o->spacing_error,
         {"pgpace_spacing_error_seconds",
          "How far a spaced customer's webhook left from its GCRA slot.",
          METRICS_HISTOGRAM,
          {NULL},
          spacing_buckets,
          N(spacing_buckets)}},
        {&o->dead_letters,
         {"pgpace_dead_letters_total",
          "Items moved to the dead-letter table.",
          METRICS_COUNTER,
          {"customer"},
          NULL,
          0}},
        {&o->stale_recoveries,
         {"pgpace_stale_recoveries_total",
          "Items claimed again after an earlier claim's lease expired.",
          METRICS_COUNTER,
          {NULL},
          NULL,
          0}},
        {&o->lost_ownership,
         {"pgpace_lost_ownership_total",
          "Finalisations that found the item claimed again or gone (late finaliser).",
          METRICS_COUNTER,
          {NULL},
          NULL,
          0}},
        {&o->breaker_state,
         {"pgpace_breaker_state",
          "Circuit breaker per customer: 0 closed, 1 open, 2 half open.",
          METRICS_GAUGE,
          {"customer"},
          NULL,
          0}},
        {&o->effective_rate,
         {"pgpace_customer_effective_rate",
          "Rate per minute a spaced or batch customer is paced at: its configured rate, lower "
          "while its receiver throttles (429/503).",
          METRICS_GAUGE,
          {"customer"},
          NULL,
          0}},
        {&o->throttled,
         {"pgpace_throttled_total",
          "Answers that throttled the customer (429, or 503).",
          METRICS_COUNTER,
          {"customer"},
          NULL,
          0}},
        {&o->leader,
         {"pgpace_leader",
          "1 while this instance leads (holds the leader lock).",
          METRICS_GAUGE,
          {NULL},
          NULL,
          0}},
        {&o->reconnects,
         {"pgpace_db_reconnects_total",
          "Database connections lost (each followed by retries).",
          METRICS_COUNTER,
          {NULL},
          NULL,
          0}},
        {&o->in_flight,
         {"pgpace_in_flight",
          "Deliveries outstanding in this instance.",
          METRICS_GAUGE,
          {NULL},
          NULL,
          0}},
        {&o->queue_due,
         {"pgpace_queue_due",
          "Items that may be claimed now (leader, refreshed every 15 s).",
          METRICS_GAUGE,
          {"customer"},
          NULL,
          0}},
        {&o->queue_in_flight,
         {"pgpace_queue_in_flight",
          "Items claimed with a running lease (leader, every 15 s).",
          METRICS_GAUGE,
          {"customer"},
          NULL,
          0}},
        {&o->oldest_due_age,
         {"pgpace_queue_oldest_due_age_seconds",
          "Age of the oldest due item (leader, every 15 s).",
          METRICS_GAUGE,
          {"customer"},
          NULL,
          0}},
        {&o->queue_dead_tuples,
         {"pgpace_queue_dead_tuples",
          "Dead tuples in pgpace.queue (vacuum debt).",
          METRICS_GAUGE,
          {NULL},
          NULL,
          0}},
        {&o->queue_vacuum_age,
         {"pgpace_queue_seconds_since_vacuum",
          "Seconds since pgpace.queue was last (auto)vacuumed.",
          METRICS_GAUGE,
          {NULL},
          NULL,
          0}},
        {&o->http_requests,
         {"pgpace_http_requests_total",
          "Admin HTTP requests by route and status.",
          METRICS_COUNTER,
          {"route", "status"},
          NULL,
          0}},
        {&o->http_seconds,
         {"pgpace_http_request_duration_seconds",
          "Admin HTTP request duration by route.",
          METRICS_HISTOGRAM,
          {"route"},
          latency_buckets,
          N(latency_buckets)}},
    };
    for (size_t i = 0; i < N(families); i++) {
        int rc = metrics_register(o->m, &families[i].def, families[i].id);
        if (rc != 0) {
            metrics_free(o->m);
            o->m = NULL;
            return pgp_error_set(err, rc, "cannot register metric %s", families[i].def.name);
        }
    }
    return 0;
}

void obs_free(obs *o)
{
    metrics_free(o->m);
    o->m = NULL;
}
