/* obs.h - the service's metric families (Prometheus names, labels, buckets) in one place.
 *
 * Contract: obs_new() registers every family on a fresh metrics registry; the dispatcher
 * updates them through the ids below with metrics.h calls. Naming follows Prometheus
 * conventions: pgpace_ prefix, base units (seconds), _total for counters. Customer labels are
 * bounded by [http] metrics_customers (see metrics.h).
 */
#ifndef PGPACE_OBS_H
#define PGPACE_OBS_H

#include "common.h"
#include "metrics.h"

typedef struct obs {
    metrics *m;
    int items_claimed;     /* counter {mode} */
    int claim_rounds;      /* counter {round} */
    int claim_seconds;     /* histogram {round}: one claim statement, send to result */
    int claims_pipelined;  /* counter: claims sent while another was in flight */
    int window_items;      /* gauge: items claimed ahead, waiting for a connection */
    int window_given_back; /* counter {reason}: window items given back unsent */
    int deliveries;        /* counter {customer, outcome} */
    int delivery_seconds;  /* histogram {outcome}: one HTTP attempt */
    int lag_seconds;       /* histogram: item created -> first attempt sent */
    int wait_rounds;       /* histogram: scheduled rounds sent while a due customer waited */
    int wait_seconds;      /* histogram: a due customer's wait for its scheduled round */
    int spacing_error;     /* histogram: |actual send - GCRA slot| of spaced customers */
    int dead_letters;      /* counter {customer} */
    int stale_recoveries;  /* counter */
    int lost_ownership;    /* counter */
    int breaker_state;     /* gauge {customer}: 0 closed, 1 open, 2 half open */
    int effective_rate;    /* gauge {customer}: per minute, after receivers' throttling */
    int throttled;         /* counter {customer}: answers that throttled (429, 503) */
    int events;            /* counter {kind}: operator events handled (health.c) */
    int expired;           /* counter {customer}: items dead-lettered past their deadline */
    int limit_holds;       /* counter {customer}: sends held until a limit window had room */
    int host_rate;         /* gauge {host}: a host limit's rate divided, per minute */
    int host_customers;    /* gauge {host}: customers its rate was divided among */
    int announced_rate;    /* gauge {customer}: the limit its receiver announced, per minute */
    int ratelimit_ignored; /* counter {customer, reason}: RateLimit headers not followed */
    int oauth_requests;    /* counter {customer, result}: OAuth2 token requests */
    int leader;            /* gauge */
    int wake_hot;          /* gauge: 1 while producers leave wake-ups for polls (wake.c) */
    int wakeups;           /* counter {via}: wake-ups the leader read, notify or poll */
    int reconnects;        /* counter */
    int clock_offset;      /* gauge, seconds: database server's clock - this host's wall clock */
    int in_flight;         /* gauge: deliveries outstanding in this instance */
    int queue_due;         /* gauge {customer} */
    int queue_in_flight;   /* gauge {customer} */
    int oldest_due_age;    /* gauge {customer}, seconds */
    int order_waiting;     /* gauge {customer}: items parked behind their keys' heads */
    int order_blocked;     /* gauge {customer}: keys waiting behind a failing head */
    int order_blocked_age; /* gauge {customer}, seconds: the longest such wait */
    int queue_dead_tuples; /* gauge */
    int queue_vacuum_age;  /* gauge, seconds since the last (auto)vacuum of pgpace.queue */
    int http_requests;     /* counter {route, status} */
    int http_seconds;      /* histogram {route} */
} obs;

int obs_init(obs *o, int customer_top_n, pgp_error *err) PGP_MUST_CHECK;
void obs_free(obs *o);

#endif
