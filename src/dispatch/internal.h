/* internal.h - what the files of src/dispatch/ share: the dispatcher's state and the calls
 * between its parts. Private to the dispatcher (and its unit tests); the public contract is
 * src/dispatcher.h.
 *
 * Who owns what:
 * - state.c        customers, carriers and receiver hosts (lookup, rows applied, due pairs,
 *                  wait lists, host room, carrier budgets) and when a customer is next
 *                  eligible (the scheduler heap).
 * - breaker.c      the per-customer circuit breaker: pure transitions, plus their record.
 * - outcome.c      what a delivery's result means (pure): outcome, retry delay, error text.
 * - share.c        fair division of host connections and in-flight room (pure).
 * - pace.c         the effective rate (or in-flight cap) a throttling receiver leaves (pure).
 * - throttle.c     throttles applied to customers: their pace, gauge, logs and frontier record.
 * - delivery.c     deliveries in flight: start, the timer of spaced sends waiting for their
 *                  GCRA slot, HTTP completion, giving back what was never sent.
 * - oauth.c        OAuth2 client credentials: customers' access tokens, fetched and cached.
 * - window.c       the claim-ahead window: work-queue items claimed beyond a host's free
 *                  connections, sent fairly as connections free, given back when too old.
 * - finalize.c     outcomes waiting to be written, and the batched finalisation statement.
 * - claim.c        claim rounds (scheduled) and batch ticks, and the claim result.
 * - leader.c       the start-up chain and election as one state machine, notifications, the
 *                  statement watchdog.
 * - housekeeping.c the backstop scan, partitions and retention, key purge, queue gauges, the
 *                  expiry sweep.
 * - rows.c         the dispatcher's statements: sending them, and their result rows parsed
 *                  into structs.
 * - admin.c        what the admin HTTP listener asks: metrics, readiness, HTTP enqueue.
 * - ../dispatcher.c  public lifecycle (new, start, reload) and the shutdown.
 *
 * Every handle is a timer in dispatcher.timers[]: deliveries waiting for their slot share
 * TIMER_SEND (a heap of them by send time), the window's expiry is TIMER_WINDOW.
 * close_all() in dispatcher.c closes the timers and frees deliveries never sent (their leases
 * expire); a delivery already sent ends when its request does, which closing the HTTP sender
 * makes happen at once.
 */
#ifndef PGPACE_DISPATCH_INTERNAL_H
#define PGPACE_DISPATCH_INTERNAL_H

#include "activity.h"
#include "admin_http.h"
#include "config.h"
#include "dispatcher.h"
#include "hmap.h"
#include "http_sender.h"
#include "proxy.h"
#include "list.h"
#include "netcheck.h"
#include "oauth.h"
#include "obs.h"
#include "pgconn.h"
#include "prng.h"
#include "sched_heap.h"
#include "slide.h"
#include "sql_embed.h"
#include "strbuf.h"
#include "timebase.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* When a claim or finalisation statement fails (not a lost connection), wait this long before
 * trying again so a persistent error cannot spin the loop. */
#define ERROR_RETRY_MS 1000
/* Claim statements in flight at once: the next round is built and sent while the one before
 * is still on its way, so a host's window is refilled without waiting for a round trip. */
#define CLAIM_PIPELINE 2
/* Most customers handled by one claim round. */
#define ROUND_MAX_CUSTOMERS 4096
/* Most due (customer, carrier) pairs of one customer in one round. */
#define ROUND_MAX_PAIRS 64
/* Customers per page of the start-up load (run_customers_page.sql, and run_customers.sql for
 * those read whole), and per reload statement (run_customers.sql). */
#define CUSTOMER_LOAD_PAGE 5000
#define RELOAD_BATCH       5000
/* Reload statements out at once: the next is on its way while one is applied. */
#define RELOAD_PIPELINE 2
/* A reload of more customers than this logs one line for them all, not one each. */
#define RELOAD_LOG_EACH 100
/* Scheduled rounds remembered for the claim-wait figures (a longer wait counts as this many). */
#define WAIT_RING 8192
/* The LISTEN channels: enqueue wake-ups, and customer or carrier changes. */
#define CHANNEL_ENQUEUE  "pgpace_enqueue"
#define CHANNEL_CUSTOMER "pgpace_customer"
#define CHANNEL_CARRIER  "pgpace_carrier"
#define CHANNEL_EVENT    "pgpace_event"
#define CHANNEL_HOST     "pgpace_host"
#define CHANNEL_TOKEN    "pgpace_token"
/* Operator events already logged, remembered so a webhook retry does not log them again. */
#define EVENTS_SEEN 256
/* Spaced customers are claimed this much before their slot and sent from a timer exactly at
 * it, so the claim's round trip (and other customers' rounds) never show in the gaps. */
#define LOOKAHEAD_US 50000
/* A claim round also takes the spaced customers due within this much after the first: their
 * sends are timed by their slots anyway, and one round for many customers costs the database
 * far less than a round each (1,000 customers at 60..600/min: 50 rounds/s, not 1,500). */
#define COALESCE_US 20000

/* Sends a statement of sql/queries/NAME.sql with its declared parameters: the array must have
 * exactly the count its @params line declares, or this does not compile. */
#define DSP_QUERY(d, name, params, cb, arg, what)                                                  \
    dsp_query((d), sql_q_##name,                                                                   \
              (int)sizeof(char[PGP_ARRAY_LEN(params) == sql_q_##name##_nparams ? 1 : -1]) *        \
                  (int)PGP_ARRAY_LEN(params),                                                      \
              (params), (cb), (arg), (what))
/* DSP_QUERY on another of the dispatcher's connections. */
#define DSP_QUERY_ON(d, conn, name, params, cb, arg, what)                                         \
    dsp_query_on((d), (conn), sql_q_##name,                                                        \
                 (int)sizeof(char[PGP_ARRAY_LEN(params) == sql_q_##name##_nparams ? 1 : -1]) *     \
                     (int)PGP_ARRAY_LEN(params),                                                   \
                 (params), (cb), (arg), (what))
/* The same for a statement that declares no parameters. */
#define DSP_QUERY0(d, name, cb, arg, what)                                                         \
    dsp_query((d), sql_q_##name, (int)sizeof(char[sql_q_##name##_nparams == 0 ? 1 : -1]) - 1,      \
              NULL, (cb), (arg), (what))

/* ---- wake.c (types) ------------------------------------------------------------------------ */

/* How producers wake the leader (wake.c, 24_wake.sql): NOTIFY while cold, rows it polls while
 * hot; cooling: turning cold, its barrier and last poll out. */
typedef enum wake_mode { WAKE_COLD, WAKE_HOT, WAKE_COOLING } wake_mode;

/* What the leader has read of one producing backend's row of pgpace.wake. */
typedef struct wake_seen {
    int backend;
    int64_t seq;
} wake_seen;

typedef struct wake_state {
    wake_mode mode;
    bool poll_running, hot_running;
    bool final_poll;    /* the poll out is the one behind a cold barrier that held */
    bool barrier_out;   /* a pgpace.wake_cold() statement is out */
    unsigned in_window; /* wake-ups (notified or polled) in this window */
    int64_t window_us;  /* when this window began */
    int64_t renewed_us; /* the lease was last written */
    char xmin[24];      /* the last poll's snapshot xmin, "" before the first */
    wake_seen *seen;    /* per backend, unordered */
    size_t n_seen, cap_seen;
} wake_state;

/* ---- state.c ------------------------------------------------------------------------------- */

typedef enum customer_mode { MODE_SPACED, MODE_BATCH, MODE_UNLIMITED } customer_mode;

typedef enum breaker_state { BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN } breaker_state;

/* Circuit breaker: after `failures_to_open` consecutive failures no claims until open_until;
 * then one probe (half open); success closes it, failure reopens it with the cooldown doubled.
 * Expressed as a later eligible time for the scheduler. */
typedef struct breaker {
    breaker_state state;
    int failures;
    int trips;
    bool probe_in_flight;
    int64_t open_until; /* epoch us; 0 when closed */
} breaker;

/* Customers held back by a full host or carrier, woken when one of its deliveries ends: a ring
 * of n ids from head, in the order they began to wait. A wake takes from the front only as many
 * as the room it waits for could serve (state.c), so a completion costs the few it wakes, not a
 * pass over every customer held back (100,000 customers on one host delivered 50/s when each
 * completion woke them all). */
typedef struct waiters {
    int64_t *ids;
    size_t head, n, cap;
    struct host_state *host;       /* whose room it waits for: a host's, */
    struct carrier_state *carrier; /* or a carrier's */
} waiters;

/* A receiver host ("scheme://authority" of webhook URLs). libcurl opens at most
 * max_host_connections to one, so claiming more than that for a host would only make items
 * wait locally while their lease runs. */
typedef struct host_state {
    char *key;
    int in_flight;     /* requests on the wire (not ones waiting for their GCRA slot) */
    int booked;        /* spaced deliveries claimed and waiting for their slot: work-queue
                          claims leave them a connection (share.c) */
    int pool_slot;     /* its pool in the claim round being built, or -1 (claim.c) */
    double latency_ms; /* moving average of its requests' durations (weights in share.c) */
    waiters waiting;
    /* The claim-ahead window (window.c): its work-queue items claimed beyond its free
     * connections, one FIFO queue per customer, sent as connections free. */
    struct window_queue *wq;
    size_t n_wq, cap_wq;
    int windowed;       /* items in all of its queues */
    int claiming_room;  /* of its connections, those granted to claims in flight */
    int claiming_ahead; /* of its window, the room granted to claims in flight */
    unsigned wq_rotate; /* ties between queues go round */
    /* Its work-queue customers, and the weight of those with work as last counted: a
     * customer's share of its connections in the window's drain. */
    int64_t *workq_ids;
    size_t n_workq, cap_workq;
    double workq_weight;
    int64_t workq_at_us;
    /* Its spaced customers, and the connections work-queue claims leave them (claim.c): the
     * spaced requests on the wire, and the reserve as last computed. */
    int64_t *spaced_ids;
    size_t n_spaced, cap_spaced;
    int spaced_in_flight;
    int spaced_active;
    double spaced_concurrency, spaced_weight;
    int64_t reserve_at_us;
    /* Requests on the wire per customer (tenant) whose endpoints are grouped: int64 tenant id ->
     * count (window.c), so the window's drain compares customers, not endpoints. */
    hmap tenant_out;
    struct host_limit *limit; /* its pgpace.host row's limit, or NULL (limits.c) */
} host_state;

typedef struct carrier_state {
    waiters waiting;
    char *name;
    int max_per_round; /* 0 = configured default */
    int max_in_flight; /* 0 = configured default */
    int in_flight;     /* claimed and not yet finalised */
    int claiming;      /* the budgets of the claims in flight that name it */
} carrier_state;

/* A (customer, carrier) pair that may have due work from next_us on. */
typedef struct pair {
    char *carrier;     /* "" = items without a carrier */
    int64_t next_us;   /* PAIR_IDLE: nothing due known (kept only while items are in flight) */
    int64_t served_us; /* last time one of its items was claimed: carriers take turns */
    int in_flight;     /* its deliveries outstanding: a customer's room is shared among them */
} pair;

#define PAIR_IDLE INT64_MAX

/* What a throttling receiver left of a customer's pace (pace.c). */
typedef struct pace {
    double rate;           /* effective rate per minute; 0 = the configured rate */
    int cap;               /* unlimited: in-flight cap while throttled; 0 = none */
    double cap_credit;     /* successes toward raising the cap by one */
    int64_t lowered_us;    /* last decrease: throttles of requests sent before it do not count */
    int64_t hold_until_us; /* nothing is sent before (Retry-After, or an unlimited backoff) */
    int streak;            /* throttles counted (sent after a decrease) since the last success */
    int64_t logged_us;     /* last time a change was logged */
} pace;

typedef struct pace_policy {
    double decrease, increase, floor;
    int64_t hold_base_us, hold_cap_us; /* unlimited without Retry-After */
} pace_policy;

/* A receiver host's own limit (a pgpace.host row; limits.c), shared by every receiver host whose
 * URL host matches the row (http and https alike): its windows count every send to it from every
 * customer and endpoint, and its rate is divided among the customers waiting for it. Kept until
 * the dispatcher ends (a deleted row is emptied, not freed), so rounds and deliveries may point
 * at one. */
typedef struct host_limit {
    char *key;           /* the row's host: "name" or "name:port" */
    slide_limit lim;     /* n == 0: none (no row, or a row with only max_connections) */
    int max_connections; /* 0: [delivery] max_host_connections */
    int unsent;          /* deliveries claimed for it, not yet sent */
    int claiming;        /* items asked of the claims in flight for it */
    int considering;     /* items asked for it in the round being built */
    /* Host-wide throttles (answers about the host, not one endpoint): its effective rate. */
    pace pace;
    int64_t throttled_ids[4]; /* the latest customers throttled, and when */
    int64_t throttled_at[4];
    int64_t success_at; /* the latest success from it */
    int64_t divided_us; /* last division of its rate among its customers */
    double rate_shared; /* the rate divided, per minute (0 none) */
    int active;         /* customers it was divided among */
    long long holds;    /* sends it held back (metric) */
} host_limit;

/* A customer's limit over all of its endpoints (migration 0018): one GCRA cell that every
 * endpoint of the customer (its own receiver included) takes its sends from, beside its own
 * limit (tenant.c). Shared by the endpoints that point at it; freed with the last. */
typedef struct tenant_gate {
    int64_t id; /* the customer's row id */
    double rate;
    int burst;
    int64_t period_us;
    int64_t tat;      /* GCRA over the slots handed to claimed items (epoch us) */
    int reserved;     /* items asked of the claims in flight: their slots are still to come */
    int considering;  /* items asked by its endpoints in the round being built */
    int64_t sent_tat; /* GCRA over the sends that actually went out: no send breaks it */
    int refs;
    int64_t listed_in; /* the token of the latest round that stores its cell (claim.c) */
    slide_limit lim;   /* the customer's windows over all of its endpoints (limits.c) */
    int unsent;        /* its endpoints' deliveries claimed, not yet sent */
} tenant_gate;

/* A customer (one receiver: a customer's own, or one of its endpoints). Fields are grouped by
 * size, not by topic, so that the struct has no holes: the leader keeps one per customer (at
 * 1,000,000 idle customers every 8 bytes here is 8 MB), and what only some customers use lives
 * out of line (lim, activity, stat_blocked_key). */
/* What throttling and announcing receivers and its host's limit made of a customer's pace, and its
 * own throttle settings: out of line (customer.thr), made when first set, since most customers
 * are never throttled (128 bytes each at 1,000,000 customers). Read through customer_thr. */
typedef struct throttle_state {
    pace pace;
    double throttle_decrease, throttle_increase, throttle_floor; /* 0 = configured default */
    /* Its share of its host's limit (per minute; 0: none), and what the receiver announced in
     * its answers' RateLimit headers (0: nothing, or expired at announced_until_us). */
    double host_share;
    double announced_rate;
    int64_t announced_until_us;
    int64_t announce_logged_us;   /* an ignored announcement was last logged */
    double announce_reset_max_s;  /* windowless announcements: their longest reset lately, */
    int64_t announce_reset_at_us; /* announced then (throttle.c) */
    /* Its recovery pace (`pgpace recover --rate`, pgpace.recovery_pace) as the latest claim
     * rows of it said (0: none), and when its latest recovered item went out under it. */
    int64_t rec_period_us;
    int64_t rec_last_sent_us;
} throttle_state;

/* How a customer's requests are made, where it has anything of its own: out of line
 * (customer.conn), since most customers have none of it (40 bytes each at 1,000,000). */
typedef struct customer_conn {
    /* Extra headers and Authorization, built once per (re)load; requests in flight hold their
     * own references (http_sender.h), so a reload just releases this one. NULL = none. */
    http_headers *headers;
    oauth_cred *oauth; /* OAuth2 client credentials and their token (oauth.h), or NULL */
    char *proxy;       /* its egress proxy: NULL = [delivery] proxy, "direct", or a URL */
    /* Mutual TLS: the certificate and key, built once per (re)load and referenced by requests
     * in flight like the headers; NULL = none. When the stored ones do not parse or match,
     * client_cert is NULL and client_cert_error says why: the customer is then held (as it is
     * once the certificate has expired), rather than send without the certificate the
     * receiver requires. */
    client_cert *client_cert;
    char *client_cert_error;
} customer_conn;

/* Health (health.c): the failing streak, every failed attempt since the last success. Out of
 * line (customer.health), made at a customer's first failure (or loaded disabled): most never
 * fail. */
typedef struct customer_health {
    int64_t failing_since;  /* epoch us of its first failure; 0 = not failing */
    int64_t recovered_at;   /* epoch us: the latest recorded streak ended here; 0 = none seen */
    int64_t disabled_at;    /* epoch us of customer.disabled_at; 0 = not disabled */
    int health_failures;    /* failed attempts in it (since this leader knew it) */
    bool failing_recorded;  /* the `failing` event is written (or being written) */
    bool failing_committed; /* ... and its transaction committed: what the page shows */
} customer_health;

typedef struct customer {
    int64_t id;
    char *name; /* one allocation with url and secrets_buf (state.c) */
    char *url;
    char *secrets_buf; /* its secrets, NUL-separated, n_secrets of them (customer_secrets) */
    /* Its secrets parsed, n_secrets of them: made at its first request after a (re)load (NULL
     * until then, and an entry NULL where one is not parsed yet). */
    secret_key **keys;
    double rate;
    int64_t period_us;
    customer_conn *conn; /* NULL: none of them set (customer_conn_of reads that as all NULL) */
    host_state *host;    /* owned by dispatcher.hosts */
    breaker breaker;
    customer_health *health; /* NULL: never failed (customer_health_of reads that as all zero) */
    int64_t tat; /* GCRA theoretical arrival time, epoch us; GCRA_TAT_NONE when unknown */
    double credit;
    int64_t last_tick;
    /* Batch: items of tick owed_tick's allowance not claimed at the tick because the
     * dispatcher, the host or the customer had no room; claimed in scheduled rounds as room
     * frees, until the next tick (never carried past it: at most one allowance per tick). */
    int64_t owed_tick;
    /* Since when it has been due without a scheduled round taking it (epoch us; 0 = not due, or
     * taken): its wait, in rounds and seconds, is observed when a round takes it (claim.c). */
    int64_t ready_us;
    int64_t last_sent_us; /* spaced: when the latest webhook actually went out */
    throttle_state *thr;  /* NULL: none of it set (customer_thr reads that as all zero) */
    /* Its latest requests, for the status page (status.c): made at its first request, so an
     * idle customer costs nothing; NULL until then. */
    activity *activity;
    /* When this instance loaded it (timebase_mono_us): what it saw of it, on the page and in
     * its failing streak's count, begins no earlier. */
    int64_t known_mono_us;
    /* Its queue as the leader's last queue-gauge refresh counted it (housekeeping.c), for the
     * status page; stat_at_us: when (epoch us), 0 = not counted yet. Its due, delayed, in-flight
     * and waiting counts are below, as int32_t: the refresh counts each up to QUEUE_COUNT_CAP. */
    int64_t stat_dead;
    int64_t stat_oldest_due_us; /* epoch us of its oldest due item then; 0 = none due */
    /* Ordered delivery, as the same refresh counted it: keys waiting behind a failing head,
     * when the first item waiting longest behind one was enqueued (epoch us, 0 = none) and its
     * key (owned, NULL = none). */
    int64_t stat_blocked_keys, stat_blocked_since_us;
    char *stat_blocked_key;
    int64_t stat_at_us;
    pair *pairs; /* &pair0 while it has room for one only (state.c) */
    pair pair0;
    /* Endpoints (migration 0018): the customer (tenant) this row belongs to, its own id for a
     * customer's own receiver; the limit it shares with the tenant's other endpoints, or NULL
     * (tenant.c); when a round last took it while that limit was the tighter one. */
    int64_t tenant_id;
    tenant_gate *gate;
    int64_t gate_served_us;
    /* Its own limit windows (limits.c; NULL: none, customer_limit reads that as no window). */
    slide_limit *lim;

    /* 4 bytes each */
    int burst;
    int max_in_flight;                          /* 0 = unlimited */
    int connect_timeout_ms, request_timeout_ms; /* 0 = configured default */
    uint32_t host_pos; /* its index in its host's spaced_ids or workq_ids (state.c) */
    int in_flight;
    int claiming;   /* items asked of the claims in flight */
    int owed;       /* batch: see owed_tick */
    int round_slot; /* index in the latest claim round it is in while in flight, or -1
                       (only an unlimited customer is ever in two rounds at once) */
    uint32_t n_pairs, cap_pairs;
    int unsent; /* its deliveries claimed but not yet sent: they count against every window
                   they will be sent under (limits.c) */
    /* Of the queue-gauge refresh's counts (stat_dead above): due, delayed (not due yet), in
     * flight, and items parked behind their keys' heads (ordered delivery). */
    int32_t stat_due, stat_delayed, stat_in_flight, stat_waiting;

    /* 1 byte each */
    uint8_t mode; /* a customer_mode */
    /* Claims in flight it is in (more than one only for an unlimited customer: at most
     * CLAIM_PIPELINE). */
    int8_t rounds_in;
    uint8_t n_secrets;
    /* Set at a (re)load, rarely true: one byte for the five. */
    bool secrets_invalid : 1;    /* one did not parse: the customer is held (logged, no value) */
    bool headers_invalid : 1;    /* they did not parse: the customer is held (logged, no values) */
    bool proxy_invalid : 1;      /* the URL did not pass proxy_url_check: the customer is held */
    bool client_cert_warned : 1; /* expiry (or not yet valid) logged since the last load */
    bool client_cert_held : 1;   /* not usable (client_cert_error, or past its dates): held */
    bool paused;                 /* held: paused (operator, 410 Gone) or disabled (health) */
    bool paused_stored;          /* customer.paused as last loaded or written by pause_customer */
    bool disabled; /* disabled by health (customer.disabled_at), until `customer enable` */
    bool have_tick;
    bool waiting; /* on a full host's or carrier's wait list: out of the heap */
    bool woken;   /* woken from a wait list and not claimed since: waits again at its front */
    /* Whether its gauges have their own series in /metrics: 0 not known yet, 1 yes, -1 no (summed
     * into _other by the queue-gauge pass). Final once known (metrics.h). */
    signed char metrics_kept;
    bool ratelimit_headers;
    bool pace_dirty; /* its pace changed since last written to the frontier (throttle.c) */
    bool grouped;    /* one of several endpoints of its customer: shares divide among customers */
} customer;

/* ---- outcome.c ----------------------------------------------------------------------------- */

/* What became of one delivery attempt. Spelled for SQL (run_finalize.sql) and metrics by
 * outcome_name(). */
typedef enum delivery_outcome {
    OUTCOME_SUCCESS, /* 2xx: the item is done */
    OUTCOME_RETRY,   /* failed, tried again after a delay */
    OUTCOME_DEAD,    /* failed for good: dead-lettered */
    OUTCOME_RELEASE, /* not attempted (shutdown): the lease is voided and the attempt given back */
    OUTCOME_PAUSE,   /* 410 Gone: the customer is paused and the item waits for the resume */
    OUTCOME_THROTTLED, /* 429, or 503 with Retry-After: tried again later, the attempt given
                          back (the receiver said "later", not "broken") */
    OUTCOME_EXPIRED,   /* past the item's deadline: dead-lettered as 'expired', never sent late
                          (error class "expired": not sent at all; else its retry would be late) */
} delivery_outcome;

#define OUTCOME_COUNT 7

const char *outcome_name(delivery_outcome o);

/* The settings classification depends on (a copy of the config's fields). */
typedef struct outcome_policy {
    bool dead_letter_on_4xx;
    int retry_after_max_s;
    int64_t retry_base_us, retry_cap_us;
} outcome_policy;

outcome_policy outcome_policy_from(const pgp_config *cfg);

typedef struct outcome_decision {
    delivery_outcome outcome;
    int64_t delay_ms;        /* OUTCOME_RETRY: when to try again */
    const char *error_class; /* the sender's class, "http" for a bad status, NULL on success */
    char error[512];         /* "" on success */
    bool receiver_failed;    /* counts against the breaker: a response or network failure that
                                says the receiver is unwell (not a refused destination, not a
                                shutdown abort) */
    bool health_failed;      /* counts in the customer's failing streak (health.c): every
                                failure, also one that dead-letters (a gone endpoint's 404),
                                but no throttle and none that is not the receiver's */
    bool pause_customer;     /* 410 Gone */
    bool slow_customer;      /* 429 or 503: the customer's pace drops (pace.c) */
    int64_t retry_after_ms;  /* the Retry-After honoured, or -1 */
} outcome_decision;

/* Classifies one attempt. `attempt` is this attempt's number (1 = first) and max_attempts the
 * item's limit (at least 1 in the schema): a retryable failure on the last attempt is
 * OUTCOME_DEAD. now_s feeds a
 * Retry-After date; jitter in [0, 1) spreads the backoff. Pure. */
void outcome_classify(const http_result *r, int attempt, int max_attempts, const outcome_policy *p,
                      int64_t now_s, double jitter, outcome_decision *out);

/* A copy of a receiver's bytes that PostgreSQL accepts as text (valid UTF-8, no NUL); NULL for
 * NULL input or no memory. */
char *text_excerpt(const char *s, size_t n);

/* ---- delivery.c ---------------------------------------------------------------------------- */

/* A claim's result, kept while deliveries point into it (their bodies, carriers and trace
 * contexts): the
 * request body is sent from libpq's memory, never copied. */
typedef struct claim_result {
    PGresult *res;
    int refs;
} claim_result;

typedef enum delivery_stage {
    STAGE_SLOT,   /* waiting for its GCRA slot (or a Retry-After's end): dispatcher.slots */
    STAGE_WINDOW, /* claimed ahead, waiting for a host connection: its host's window */
    STAGE_WIRE,   /* the request is out (or being completed) */
} delivery_stage;

typedef struct delivery {
    struct dispatcher *d;
    pgp_list link;  /* dispatcher.deliveries; the free pool while unused */
    pgp_list qlink; /* STAGE_WINDOW: its customer's queue on its host */
    pgp_list wlink; /* STAGE_WINDOW: dispatcher.window, oldest first */
    delivery_stage stage;
    size_t slot_pos;  /* STAGE_SLOT: its index in dispatcher.slots */
    int64_t due_us;   /* STAGE_SLOT: when it is sent; STAGE_WINDOW: when it is given back */
    claim_result *cr; /* holds body, carrier and trace context */
    const char *body;
    size_t body_len;
    int64_t item_id, token, customer_id;
    int64_t msg_id; /* webhook-id: msg_<msg_id> (the event's id for a delivery of a fan-out) */
    bool ordered;   /* it has an order key (0020): its key's next item waits for its outcome */
    int64_t tenant_counted; /* on the wire, counted in host->tenant_out under this id; 0: not */
    const char *carrier;
    int attempt, max_attempts;
    int64_t started_us;
    bool probe;           /* the one delivery a half-open breaker lets through */
    int64_t planned_us;   /* spaced: the GCRA slot it was meant to leave at; 0 otherwise */
    int64_t created_us;   /* when the item was enqueued (first attempts feed the lag metric) */
    int64_t expires_us;   /* its deadline (epoch us): no request starts at or after it; 0: none */
    int64_t lease_end_us; /* when its claim's lease runs out (taken when claimed) */
    const char *traceparent, *tracestate; /* W3C Trace Context headers (in cr); NULL: none */
    /* A recovered item under its customer's recovery pace: not sent before rec_at, nor less
     * than rec_period_us after the customer's previous such send; 0 otherwise. */
    int64_t rec_at, rec_period_us;
    host_state *host;  /* its receiver host (the customer's URL may change meanwhile) */
    bool host_counted; /* sent, so counted in host->in_flight */
    bool host_booked;  /* waiting for its slot, so counted in host->booked */
    bool spaced;       /* sent for a spaced customer: counted in host->spaced_in_flight */
    bool unsent;       /* claimed, not sent yet: counted in the limits' `unsent` (limits.c) */
    /* OAuth2 (oauth.h): waiting for its customer's token, the token generation it was sent
     * with, and whether it was already sent again after a 401 (once per attempt). */
    oauth_waiter oauth_wait;
    const oauth_cred *oauth_set; /* the set its token came from (compared, never used) */
    uint64_t oauth_gen;
    bool oauth_retried;
} delivery;

/* ---- finalize.c ---------------------------------------------------------------------------- */

typedef struct final_entry {
    int64_t item_id, token;
    delivery_outcome outcome;
    int64_t delay_ms;
    int http_status; /* 0 = none */
    char *error_class, *error, *excerpt;
    int64_t started_us;
    double duration_ms;
    int failures; /* finalisation statements that failed with this entry in them */
    /* The carrier whose in-flight count this outcome still holds: a carrier's cap counts an
     * item until its outcome is written, as the queue shows it claimed until then. */
    carrier_state *carrier;
    /* An item with an order key whose outcome ends its turn (delivered, dead-lettered): once
     * written, its customer's pair is claimed again for the key's next item, which no NOTIFY
     * announces. 0: none. */
    int64_t order_customer;
} final_entry;

typedef struct final_list {
    final_entry *v;
    size_t n, cap;
} final_list;

/* ---- claim.c ------------------------------------------------------------------------------- */

/* What a claim round holds while in flight, so the next round does not give it out again: the
 * connections and window room of a host it was granted, or a carrier's budget. */
typedef struct round_hold {
    host_state *host;       /* or NULL */
    carrier_state *carrier; /* or NULL */
    int room, ahead, budget;
} round_hold;

/* What a claim round needs back when its result arrives. */
typedef struct claim_round {
    struct dispatcher *d;
    uint64_t sent_ns; /* uv_hrtime() when the statement was sent */
    int asked_total;
    round_hold *holds;
    size_t n_holds;
    int64_t token;
    int64_t tick; /* batch tick, or -1 */
    size_t n;
    int64_t ids[ROUND_MAX_CUSTOMERS];
    int64_t base[ROUND_MAX_CUSTOMERS];
    double credit[ROUND_MAX_CUSTOMERS];
    int asked[ROUND_MAX_CUSTOMERS];   /* items asked of each customer */
    int allowed[ROUND_MAX_CUSTOMERS]; /* batch tick: each customer's allowance this tick */
    /* Filled from the result: items each customer got, and how late the latest went out
     * compared with its slot (a cold start sends after the claim's round trip). */
    int got[ROUND_MAX_CUSTOMERS];
    int64_t late[ROUND_MAX_CUSTOMERS];
    /* A pair of the customer has due recovered items its recovery pace held back. */
    bool rec_held[ROUND_MAX_CUSTOMERS];
    bool recovery_paced; /* a customer of the round is known to have a recovery pace */
    bool gated;          /* a customer of the round shares a tenant limit (tenant.c) */
    int64_t gate_of[ROUND_MAX_CUSTOMERS];      /* the tenant gate each customer asked of, or 0 */
    host_limit *limit_of[ROUND_MAX_CUSTOMERS]; /* the host limit each customer asked of */
} claim_round;

/* ---- share.c ------------------------------------------------------------------------------- */

typedef struct share_pool {
    int room;      /* the host's connections free now */
    int open_room; /* of those, not booked by spaced deliveries waiting for their slot */
    int ahead;     /* room in its claim-ahead window: work-queue claimants take it once the
                      open room is gone (their items wait there for a connection) */
} share_pool;

typedef struct share_claimant {
    int demand;     /* most it can take now */
    int use;        /* what it holds already (its deliveries in flight) */
    double weight;  /* its share is weight / the sum of the contenders' weights; <= 0 means 1 */
    int pool;       /* its host in the pools array, or -1 */
    bool open_only; /* work-queue claimant: takes only the host's open room */
    int grant;      /* out: what it gets */
} share_claimant;

/* Divides at most `total` units among the n claimants (see share.c); pools' rooms are used up
 * as units are granted. heap is scratch space for n indices. Returns the units granted. Pure. */
int share_divide(share_claimant *v, size_t n, share_pool *pools, int total, uint64_t rotate,
                 uint32_t *heap);
/* The same, hierarchically: claimant i belongs to group[i] (0 .. n_groups - 1, n_groups <= n;
 * a group's claimants share one pool and open_only). The groups are divided as claimants (each
 * one's demand and use the sums of its members', its weight the largest of theirs), then each
 * group's grant among its members. gv (n_groups entries), members (n) and heap (n + 1) are
 * scratch space. Returns the units granted. Pure. */
/* Divides a rate `capacity` among n claimants that want demand[i] each (INFINITY: all they can
 * get), by weighted max-min fairness: each gets at least its weighted share (weight[i] / the sum,
 * <= 0 counts as 1) of what is left, or its demand if that is less, and what one does not use
 * goes to the others; out[i] is what claimant i gets. -ENOMEM (out untouched) when scratch
 * space could not be had. Pure otherwise. */
int share_rates(const double *demand, const double *weight, size_t n, double capacity,
                double *out) PGP_MUST_CHECK;
int share_divide_grouped(share_claimant *v, size_t n, const uint32_t *group, size_t n_groups,
                         share_claimant *gv, uint32_t *members, share_pool *pools, int total,
                         uint64_t rotate, uint32_t *heap);

/* ---- tenant.c ------------------------------------------------------------------------------ */

/* A request of a grouped endpoint went out (+1) or ended (-1) on host h (window.c). */
void host_tenant_out_add(host_state *h, int64_t tenant, int delta);

/* Points c at its tenant's gate (created when it is the first endpoint to share it, its rate
 * and burst updated when they changed), or at none when rate <= 0. */
void tenant_gate_attach(struct dispatcher *d, customer *c, int64_t tenant_id, double rate,
                        int burst);
/* Lets go of c's gate; the last endpoint to let go frees it. */
void tenant_gate_detach(struct dispatcher *d, customer *c);
/* Frees every gate (the dispatcher's end). */
void tenant_gates_free(struct dispatcher *d);
/* How many of `want` items the gate lets a round being built ask for now (its slots up to
 * `horizon`, less those already asked by claims in flight and by this round). Pure. */
int tenant_gate_allow(const tenant_gate *g, int64_t now, int64_t horizon, int want);
/* The slot of one claimed item that its own limits would send at `at`: never before the
 * gate's next slot; the gate's cell moves past it. */
int64_t tenant_gate_slot(tenant_gate *g, int64_t at);
/* When the gate lets a round ask again (for the scheduler), epoch us. Pure. */
int64_t tenant_gate_eligible(const tenant_gate *g, int64_t now);
/* The earliest a send may actually go out (INT64_MIN: any time), and the record of one that
 * did: together a bound no send breaks, whatever delayed the sends before it. */
int64_t tenant_gate_earliest(const tenant_gate *g);
void tenant_gate_sent(tenant_gate *g, int64_t at);
/* Resumes a gate's cell from what a previous leader left (the stored cell and the latest send
 * of its endpoints it could find): never earlier than either allows. */
void tenant_gate_resume(tenant_gate *g, int64_t stored_tat, int64_t last_send);

/* ---- pace.c -------------------------------------------------------------------------------- */

/* The effective rate per minute (the configured one unless throttled). */
double pace_rate(const pace *p, double configured);
/* A throttled answer to a request sent at sent_us; retry_after_us < 0 when it gave none. Returns
 * whether the rate (or unlimited cap) changed. Pure. */
bool pace_on_throttle(pace *p, customer_mode mode, double configured, int in_flight,
                      const pace_policy *pol, int64_t sent_us, int64_t retry_after_us, int64_t now);
/* A success: the rate (or cap, which is lifted at cap_max) climbs back. Returns whether it
 * changed. Pure. */
bool pace_on_success(pace *p, customer_mode mode, double configured, const pace_policy *pol,
                     int cap_max);

/* ---- rows.c -------------------------------------------------------------------------------- */

/* A row of run_claim.sql. Strings point into the PGresult. */
typedef struct claim_row {
    bool is_item; /* false: a pair that had fewer due items than asked */
    int64_t item_id, customer_id;
    const char *carrier;
    int attempt, max_attempts;
    bool stale; /* re-claimed after an earlier lease expired */
    const char *payload;
    size_t payload_len;
    int64_t created_us;
    int64_t expires_in_us; /* time left to its deadline at the statement's start; 0: none */
    int64_t expires_us;    /* that deadline on this host's clock (take_rows), epoch us; 0: none */
    const char *traceparent, *tracestate; /* W3C Trace Context; NULL: none */
    bool has_next;                        /* drained pair: its next future item's time */
    int64_t next_us;
    int64_t lease_end_us; /* when its lease runs out, on this host's clock (take_rows) */
    /* Recovery pace (`pgpace recover --rate`): an item's slot under it (not sent before), or
     * for a drained pair when its recovered items held back by it may be claimed; 0: none. */
    int64_t rec_at;
    int64_t rec_period_us; /* the customer's recovery pace's period; 0: it has none */
    int64_t msg_id;        /* webhook-id msg_<msg_id>: the event's id, shared by its deliveries */
    bool ordered;          /* it has an order key: its outcome, once written, frees the next */
} claim_row;

typedef struct customer_row {
    int64_t id;
    const char *name, *mode, *url, *secrets;
    const char *headers; /* extra header lines, LF-separated ("" = none); secrets */
    /* OAuth2 client credentials (auth 'oauth2'); token_url NULL for the other schemes. The
     * secret is a secret. */
    const char *oauth_token_url, *oauth_client_id, *oauth_client_secret, *oauth_scope;
    const char *proxy; /* NULL: [delivery] proxy; "direct"; or the customer's proxy URL */
    const char *client_cert, *client_key; /* PEM, both NULL when none; secrets */
    double rate;
    int burst, max_in_flight, connect_timeout_ms, request_timeout_ms;
    bool paused, disabled;
    const char *breaker_state;
    int breaker_failures, breaker_trips;
    int64_t breaker_open_until_us;                               /* 0 when none */
    int64_t failing_since_us;                                    /* 0 when not failing */
    int64_t disabled_at_us;                                      /* 0 when not disabled */
    double throttle_decrease, throttle_increase, throttle_floor; /* 0 = configured default */
    int64_t tenant_id;  /* the customer an endpoint belongs to (its own id for a customer) */
    double tenant_rate; /* that customer's limit over its endpoints; 0: none to share */
    int tenant_burst;
    bool grouped;                                     /* one of several endpoints of its customer */
    const char *limit_windows, *tenant_limit_windows; /* slide_limit_parse's form */
    bool ratelimit_headers;
} customer_row;

typedef struct host_row {
    const char *host, *limit_windows;
    int max_connections;
} host_row;

typedef struct frontier_row {
    int64_t customer_id;
    bool has_tat, has_tick;
    int64_t tat_us, last_tick;
    double credit;
    double effective_rate; /* 0 when none recorded */
} frontier_row;

typedef struct backstop_row {
    int64_t customer_id;
    const char *carrier;
    bool due, has_next;
    int64_t next_us;
} backstop_row;

typedef struct metrics_row {
    const char *customer;
    double due, in_flight, oldest_due_age_s, dead_tuples, vacuum_age_s, dead, delayed;
    int64_t customer_id;
    bool receiver;          /* the row has a webhook URL */
    bool has_endpoints;     /* a customer's row with endpoints (0018) */
    double rate_per_minute; /* the row's rate; 0 when it has none */
    const char *mode;
    double waiting;                 /* items parked behind their keys' heads */
    double blocked_keys;            /* keys waiting behind a failing head */
    double oldest_blocked_age_s;    /* since the first item waiting longest behind one; 0: none */
    const char *oldest_blocked_key; /* that item's key; NULL: none */
} metrics_row;

typedef struct event_row {
    int64_t id;
    const char *kind, *customer, *detail;
} event_row;

typedef struct carrier_row {
    const char *name;
    int max_per_round, max_in_flight;
} carrier_row;

/* Whether a result has the columns its statement declares (a stale binary against a changed
 * query would otherwise read the wrong fields); logs the mismatch. */
bool rows_shape_ok(const PGresult *res, int ncols, const char *what);

/* The statement a claim round sends, chosen from its run_claim.sql parameters. */
typedef struct claim_stmt {
    const char *sql;
    int nparams;
    const char *const *params; /* `full`, or `lean` below */
    const char *lean[SQL_RUN_CLAIM_UNLIMITED_NPARAMS];
} claim_stmt;

/* run_claim_unlimited.sql, with its parameters taken from `full`, when the round uses none of
 * run_claim.sql's frontier, tick, carriers or recovery pace (recovery_paced: a customer of the
 * round is known to have one) and lists one pair per customer with the customer's limit (a
 * round of unlimited customers); run_claim.sql with `full` otherwise. Both return the same
 * columns, which claim_row_parse reads. out->params points at `full` or into `out`. Pure. */
void claim_statement(const char *const full[SQL_RUN_CLAIM_NPARAMS], bool recovery_paced,
                     claim_stmt *out);
void claim_row_parse(const PGresult *res, int r, claim_row *out);
void customer_row_parse(const PGresult *res, int r, customer_row *out);
/* A row of run_customers_page.sql as the customer_row run_customers.sql would give; false when
 * the customer must be read whole instead (its row is then incomplete). */
bool customer_page_row_parse(const PGresult *res, int r, customer_row *out);
void host_row_parse(const PGresult *res, int r, host_row *out);
void frontier_row_parse(const PGresult *res, int r, frontier_row *out);
void backstop_row_parse(const PGresult *res, int r, backstop_row *out);
void metrics_row_parse(const PGresult *res, int r, metrics_row *out);
void carrier_row_parse(const PGresult *res, int r, carrier_row *out);
void event_row_parse(const PGresult *res, int r, event_row *out);
int64_t row_i64(const PGresult *res, int r, int col);

/* ---- clock.c ------------------------------------------------------------------------------- */

/* Samples the server's clock now (the answer adjusts the timebase); clock_start also every
 * TIMEBASE_SAMPLE_MS until clock_stop. */
void clock_sample(struct dispatcher *d);
void clock_start(struct dispatcher *d);
void clock_stop(struct dispatcher *d);

/* ---- leader.c ------------------------------------------------------------------------------ */

/* The instance's role, from start-up to leadership. Every change goes through leader_enter(),
 * which runs what leaving the old state and entering the new one need.
 *
 *   CONNECTING --db ready, session checked--> LOADING --customers loaded--> ELECTING
 *   ELECTING --lock taken--> FRONTIER
 *   ELECTING --lock busy--> STANDBY (the lock is tried again every standby_retry_ms there;
 *   taken: FRONTIER)                                          FRONTIER --loaded--> LEADING
 *   any --db lost--> CONNECTING
 *
 * A failed statement of the chain keeps the state and retries its step after ERROR_RETRY_MS.
 * Claims run only in LEADING: a leader claims nothing before it knows its customers' GCRA
 * state (the frontier). */
typedef enum leader_state {
    LEADER_CONNECTING, /* waiting for the database connection, then its session check */
    LEADER_LOADING,    /* schema check, carriers, customers */
    LEADER_ELECTING,   /* the lock statement is outstanding */
    LEADER_STANDBY,    /* another instance leads: try again every standby_retry_ms */
    LEADER_FRONTIER,   /* the lock is ours: loading the scheduler's state */
    LEADER_LEADING,    /* claiming */
} leader_state;

void leader_enter(struct dispatcher *d, leader_state to);
/* A start-up step failed (res may be NULL): logged, and the step is tried again after
 * ERROR_RETRY_MS. */
void leader_retry_step(struct dispatcher *d, const char *step, const PGresult *res);
const char *leader_state_name(leader_state s);
void leader_on_db_state(pgconn *conn, pgconn_state state, void *arg);
void leader_on_notify(pgconn *conn, const char *channel, const char *payload, void *arg);
void leader_on_watchdog(uv_timer_t *t);
void leader_send_session_settings(struct dispatcher *d);
/* Before the database connection is closed: ends what leader.c runs beside it. */
void leader_close(struct dispatcher *d);
/* Reads a customer again (after a change notification, or work for a customer not known): the
 * ids wait while a reload statement is out and go together in the next, RELOAD_BATCH at most
 * (state.c). */
void leader_reload_customer(struct dispatcher *d, int64_t id);

/* ---- the dispatcher ------------------------------------------------------------------------ */

/* Shutdown progress (dispatcher.c). */
typedef enum stop_state {
    STOP_NONE,     /* running */
    STOP_DRAINING, /* no claims; deliveries finish, outcomes are written */
    STOP_ABORTING, /* drain timeout: the sender is closed, so requests end as released */
    STOP_CLOSING,  /* handles closing; freed when the last one is */
} stop_state;

enum dispatcher_timer {
    TIMER_CLAIM,    /* next scheduled claim round (claim.c) */
    TIMER_TICK,     /* next batch tick boundary (claim.c) */
    TIMER_BACKSTOP, /* backstop scan and housekeeping (housekeeping.c) */
    TIMER_METRICS,  /* queue gauges (housekeeping.c) */
    TIMER_STANDBY,  /* next election attempt (leader.c) */
    TIMER_RETRY,    /* a failed start-up step again (leader.c) */
    TIMER_WATCHDOG, /* stalled statements (leader.c) */
    TIMER_FLUSH,    /* next finalisation statement (finalize.c) */
    TIMER_DRAIN,    /* shutdown deadline (dispatcher.c) */
    TIMER_PACE,     /* next write of effective rates (throttle.c) */
    TIMER_SEND,     /* the earliest spaced send waiting for its slot (delivery.c) */
    TIMER_WINDOW,   /* the oldest window item's give-back time (window.c) */
    TIMER_HEALTH,   /* health check and operator events (health.c) */
    TIMER_EXPIRE,   /* the expiry sweep (housekeeping.c) */
    TIMER_CLOCK,    /* next sample of the server's clock (clock.c) */
    TIMER_SCAN,     /* the backstop scan's next slice (housekeeping.c) */
    TIMER_HOSTS,    /* next division of the host limits' rates (limits.c) */
    TIMER_ORDER,    /* ordered keys to unpark (housekeeping.c) */
    TIMER_WAKE,     /* the next poll of pgpace.wake, or the window's end (wake.c) */
    TIMER_COUNT
};

enum key_purge_state { KEY_PURGE_IDLE, KEY_PURGE_WANTED, KEY_PURGE_RUNNING };

/* A pass over every customer or (customer, carrier) pair in slices, one statement each
 * (housekeeping.c: the backstop scan, the queue gauges). */
typedef struct slice_pass {
    bool running;        /* a slice is out, or the next one is timed */
    bool chained;        /* the next slice follows at once (a new leader's first backstop pass) */
    bool rerun;          /* asked for while running: another pass follows this one */
    int64_t after_id;    /* the cursor: the last customer of the slice before */
    char *after_carrier; /* the backstop's: the last pair's carrier (owned) */
    int slice;           /* rows a slice asks for (the queue gauges adapt it) */
    uint64_t sent_ns;    /* the slice out: when it was sent */
    int64_t started_us;  /* the pass: when it began (epoch us) */
    uint64_t gen;   /* bumped when a pass starts: a slice answered for an older one is dropped */
    int64_t slices; /* of this pass so far */
    int64_t rows;   /* read by them */
    /* The queue gauges': dead letters of rows the dispatcher does not load (customers without a
     * receiver of their own: what their deleted endpoints left). */
    double unloaded_dead;
} slice_pass;

struct dispatcher {
    uv_loop_t *loop;
    pgp_config cfg;
    char instance[128];
    char app_name[160];
    char api_app_name[170];
    char read_app_name[170];
    netcheck_allow allow;
    proxy_bypass *no_proxy; /* [delivery] no_proxy, parsed (big: on the heap) */
    pgconn *db;
    pgconn *api_db;    /* the management API's and tenant pages' statements (api.c), or NULL */
    pgconn *read_db;   /* the leader's read-only passes (housekeeping.c): never the claims' */
    bool read_started; /* read_db started (on first leading, housekeeping.c) */
    http_sender *http; /* NULL once closed (drain timeout or shutdown) */
    admin_http *admin; /* NULL when [http] listen is empty */
    obs obs;
    prng rng;
    uv_timer_t timers[TIMER_COUNT];

    leader_state state;
    stop_state stop;
    bool notified_ready;   /* systemd READY=1 sent */
    uint64_t lock_sent_ns; /* 0 = no lock statement outstanding */
    /* A new session being checked for pooling (leader.c), or NULL. */
    struct session_check *session_check;

    hmap customers;        /* int64 id -> customer* */
    long customers_loaded; /* by the pages of the start-up load so far (leader.c) */
    /* The start-up load's customers read whole (leader.c): those run_customers_extra.sql
     * listed (in id order, skipped by the pages), and those the pages marked; read by id,
     * listed then marked, from load_extra_sent on. */
    int64_t *load_listed, *load_marked;
    size_t n_load_listed, cap_load_listed, n_load_marked, cap_load_marked, load_extra_sent;
    bool load_extra_ready; /* the list is in for this load */
    int64_t *reload_ids;   /* customers to read again: those from reload_head on wait (state.c) */
    size_t reload_head, n_reload, cap_reload;
    int reloads_out;  /* reload statements out (state.c) */
    hmap gates;       /* int64 tenant id -> tenant_gate* (tenant.c) */
    hmap carriers;    /* name -> carrier_state* */
    hmap hosts;       /* "scheme://authority" -> host_state* */
    hmap host_limits; /* pgpace.host's host -> host_limit* (limits.c) */
    sched_heap heap;
    claim_round *claims[CLAIM_PIPELINE]; /* the claim statements in flight, oldest first */
    int n_claims;
    int claiming;        /* items asked of them */
    int64_t tick_queued; /* a batch tick that came while a round was in flight, or -1 */

    int64_t housekeeping_at_us;
    slice_pass backstop, gauges;
    enum key_purge_state key_purge;
    bool expire_running;        /* an expiry sweep statement is out */
    bool order_recheck_running; /* an ordered keys' recheck statement is out */
    wake_state wake;            /* wake.c */

    final_list pending;     /* outcomes waiting for a finalisation statement */
    final_list sending;     /* outcomes of the statement in flight */
    uint64_t flush_sent_ns; /* 0 = no finalisation statement outstanding */
    size_t solo_left;       /* after a failed batch: send this many entries one per statement */
    int flush_errors;       /* finalize statements failed in a row for a database-wide reason */
    uint64_t flush_hold_until_ns; /* no finalize statement before this (backoff after one) */

    pgp_list deliveries; /* delivery.link, in flight */
    int in_flight;
    struct delivery **slots; /* min-heap on due_us of deliveries waiting for their slot */
    size_t n_slots, cap_slots;
    pgp_list window; /* delivery.wlink: every host's window, oldest first */
    int windowed;    /* deliveries in windows */
    pgp_list spare;  /* delivery.link: freed deliveries kept for reuse */
    size_t n_spare;
    struct round_build *spare_build; /* the last round's scratch, reused */

    int open_handles;
    int exit_status;
    dispatcher_done_cb done;
    void *done_arg;

    /* health.c: operator events */
    bool events_busy;                 /* a fetch, its webhooks or their marking under way */
    bool events_again;                /* fetch again when that is done */
    int64_t events_seen[EVENTS_SEEN]; /* ids already logged and counted (a ring) */
    size_t events_seen_at;

    oauth_env oauth; /* what token requests use (oauth.c keeps a pointer while one is out) */

    /* status.c */
    int status_pending;             /* GET /v1/status requests waiting for their statements */
    double status_due, status_dead; /* status_totals_note's sums */
    int64_t status_totals_us;       /* when they were taken (epoch us); 0 = never */
    /* int64 row id -> status_tenant*: the customers without a receiver of their own (0018), as
     * the queue-gauge pass read them (status.c). */
    hmap status_tenants;
    int64_t lead_mono_us; /* when this instance last began leading (timebase_mono_us); 0 = never */

    long long claimed, stale_recoveries, lost_ownership;
    uint64_t rounds; /* claim rounds built: rotates the division's ties */
    /* When the latest scheduled rounds were sent (epoch us, a ring of the last WAIT_RING from
     * sched_sent % WAIT_RING back): how many rounds a customer waited (claim.c). */
    int64_t sched_at[WAIT_RING];
    uint64_t sched_sent;
};

typedef struct dispatcher dispatcher;

/* The dispatcher's time: monotonic, on the database server's scale (src/timebase.h). Every
 * in-process schedule reads this; the wall clock only through timebase_wall_us(). */
static inline int64_t now_us(void)
{
    return timebase_now_us();
}

/* qsort and bsearch order of int64_t ids. */
static inline int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A host's per-customer recounts (claim.c's spaced reserve, window.c's work-queue weight) run at
 * most every RECOUNT_EVERY_US, and at most every RECOUNT_US_PER_CUSTOMER per customer of the
 * list: a recount visits them all, about 0.15 us each, so with 1,000,000 on one host it took the
 * loop most of every 100 ms; so it costs at most about 1 % of a core however many there are
 * (then every 16 s). Whether one is due, the last at last_us (a clock that went back: now). */
#define RECOUNT_EVERY_US        100000
#define RECOUNT_US_PER_CUSTOMER 16
static inline bool recount_due(int64_t now, int64_t last_us, size_t customers)
{
    int64_t every = (int64_t)customers * RECOUNT_US_PER_CUSTOMER;
    if (every < RECOUNT_EVERY_US)
        every = RECOUNT_EVERY_US;
    return now - last_us >= every || now < last_us;
}

static inline bool is_leading(const dispatcher *d)
{
    return d->state == LEADER_LEADING && d->stop == STOP_NONE;
}

/* rows.c: sends a statement; one that cannot be sent is logged (and its callback never runs). */
int dsp_query(dispatcher *d, const char *sql, int n, const char *const *params, pgconn_result_cb cb,
              void *arg, const char *what);
int dsp_query_on(dispatcher *d, pgconn *conn, const char *sql, int n, const char *const *params,
                 pgconn_result_cb cb, void *arg, const char *what);
/* For statements whose result only matters when it failed. */
void dsp_on_ignored(pgconn *conn, PGresult *res, void *arg);
/* Stops the service with exit status 1 (a start-up error it cannot recover from). */
void dispatcher_fatal(dispatcher *d);
/* Closes everything once a shutdown has nothing left to wait for. */
void dispatcher_maybe_finish(dispatcher *d);
/* One of the handles counted in open_handles is closed; the last one frees the dispatcher. */
void dispatcher_part_closed(dispatcher *d);

/* state.c */
customer *customer_get(dispatcher *d, int64_t id);
/* Its throttle state (all zero when it has none), and the same to change, made on first use
 * (NULL: no memory, logged). */
const throttle_state *customer_thr(const customer *c);
/* Its connection settings (all NULL when it has none of its own). */
const customer_conn *customer_conn_of(const customer *c);
/* Its failing streak (all zero when it never failed). */
const customer_health *customer_health_of(const customer *c);
throttle_state *customer_thr_mut(customer *c);
/* The most signing secrets a customer has (more are ignored). */
#define CUSTOMER_SECRETS_MAX 4
/* Its secrets' text into out[] (at most CUSTOMER_SECRETS_MAX); returns how many. */
size_t customer_secrets(const customer *c, const char *out[CUSTOMER_SECRETS_MAX]);
/* The same, with keys[] parsed where not yet (at its first request; see customer_apply). */
void customer_keys(customer *c, const char *text[CUSTOMER_SECRETS_MAX]);
/* Stored settings a reload could not use (headers, proxy, a signing secret, a client
 * certificate, also one expired since): the customer is held until they are set again, and
 * nothing of it is sent without them. */
static inline bool customer_held_invalid(const customer *c)
{
    return c->headers_invalid || c->proxy_invalid || c->secrets_invalid || c->client_cert_held;
}
void customer_free(customer *c);
customer *customer_apply(dispatcher *d, const customer_row *row);
/* Applies rows of run_customers.sql (and schedules them); returns how many were applied. */
int customers_apply(dispatcher *d, const PGresult *res, bool log_each);
/* The same for a page of run_customers_page.sql, less the rows whose id is in skip (n_skip ids
 * in ascending order): the ids of the rows to read whole instead are appended to *whole (an
 * array of *cap_whole). Returns how many were applied, or -ENOMEM (the ids did not fit). */
int customers_apply_page(dispatcher *d, const PGresult *res, const int64_t *skip, size_t n_skip,
                         int64_t **whole, size_t *n_whole, size_t *cap_whole);
void customer_remove(dispatcher *d, int64_t id);
void customer_schedule(dispatcher *d, customer *c);
/* When the customer may next be claimed for (a heap key), or false when it may not be now
 * (paused, waiting for room, nothing due, at its in-flight limit, probe out). Pure. */
bool customer_due_at(const customer *c, int64_t tick, int64_t *due);
carrier_state *carrier_get(dispatcher *d, const char *name);
void carrier_apply(dispatcher *d, const carrier_row *row);
/* Items this carrier may still get in one round: per-round cap and in-flight headroom. Pure. */
int carrier_budget(const pgp_config *cfg, const carrier_state *cs);
host_state *host_for_url(dispatcher *d, const char *url);
/* The proxy a request to `url` goes through: the customer's own choice (its proxy column:
 * "direct" = none, a URL = that proxy, for all its URLs), else [delivery] proxy unless the
 * URL's host is in [delivery] no_proxy. NULL = direct. */
const char *egress_proxy(const dispatcher *d, const char *customer_proxy, const char *url);
void wait_on(waiters *w, customer *c);
void wake(dispatcher *d, waiters *w);
/* Wait lists and due pairs belong to the leadership that built them (leader.c clears them). */
void waiters_clear_all(dispatcher *d);
void pairs_clear_all(dispatcher *d);
const char *mode_name(customer_mode m);
pair *pair_find(customer *c, const char *carrier);
void pair_note(customer *c, const char *carrier, int64_t next_us);
/* Whether one of the customer's pairs is due by `now` with nothing out (claimed, in a window
 * or on the wire): its first item may be claimed past a full window (claim.c). */
bool customer_has_fresh_pair(const customer *c, int64_t now);
void pair_drop(customer *c, const char *carrier);
/* A delivery of the pair started (+1) or ended (-1). */
void pair_in_flight_add(customer *c, const char *carrier, int delta);
bool has_due_pair(const customer *c, int64_t now);
int64_t batch_tick_at(const pgp_config *cfg, int64_t t_us);
/* The rate it is paced at: its configured rate as a throttling receiver, its share of its
 * host's limit and the receiver's announced limit leave it (the lowest). Pure. */
double customer_effective_rate(const customer *c);
/* Sets a spaced customer's GCRA period from its effective rate. */
void customer_pace_period(customer *c);
/* What a batch customer may still claim of its latest tick; 0 once the next tick began. Pure. */
int batch_owed(const customer *c, int64_t tick);
void state_free(dispatcher *d);

/* health.c */
/* A NOTIFY on pgpace_event: fetch, log and post the unhandled events (leader only). */
void health_on_event_notify(dispatcher *d);
/* Starts (or restarts, after a reload) the periodic health check; check_now: one now. */
void health_restart_timer(dispatcher *d, bool check_now);
/* A delivery's verdict on the customer's health: failed (any failure but a throttle) or
 * succeeded; started_us: when its attempt started. Records `failing` once breaker_failures
 * attempts in a row failed, `recovered` at the next success. */
void health_note(dispatcher *d, customer *c, bool failed, int64_t started_us, const char *error);
/* Enabling a disabled customer: its breaker and streak start afresh. */
void health_reset(dispatcher *d, customer *c);

/* breaker.c */
/* Applies one attempt's verdict on the receiver's health; returns whether the state changed.
 * Pure; now and the cooldowns in microseconds. */
bool breaker_after_attempt(breaker *b, bool failed, int failures_to_open, int64_t cooldown_us,
                           int64_t cooldown_max_us, int64_t now);
/* At claim time: how many of n items the breaker lets through now (an open breaker whose
 * cooldown passed turns half open and lets one probe through). Pure. */
int breaker_allows(breaker *b, int n, int64_t now, bool *became_half_open);
const char *breaker_state_name(breaker_state s);
void breaker_note(dispatcher *d, customer *c, bool failed, const char *error);
int breaker_allowance(dispatcher *d, customer *c, int n, int64_t now);

/* delivery.c */
/* Starts the delivery of a claimed row (its body and carrier stay in cr, which it references):
 * sent now, at send_at (a spaced slot or the end of a Retry-After), or, for a work-queue
 * customer with a host, put in the host's window (window_drain sends it). */
void delivery_start(dispatcher *d, const claim_row *row, int64_t token, int64_t send_at,
                    claim_result *cr);
/* Sends a delivery now (its request goes on the wire, or it completes at once as failed). */
void delivery_send(dispatcher *d, delivery *dl);
/* Ends a delivery never sent: its item is given back (due again at once, the attempt not
 * counted) and the room it held freed. */
void delivery_give_back(dispatcher *d, delivery *dl);
void claim_result_unref(claim_result *cr);
/* At close: frees the deliveries never sent (their leases expire). Returns how many. */
int deliveries_close_waiting(dispatcher *d);
void delivery_pool_free(dispatcher *d);
void slots_on_timer(uv_timer_t *t);

/* window.c */
/* The most items a host's window holds: claim_ahead, or fewer for a slow host (about
 * claim_ahead_ms of its requests at its mean request time). Pure. */
int window_cap(const pgp_config *cfg, const host_state *h);
/* How long an item may wait in a window (claim_ahead_ms, at most a quarter of the lease). */
int64_t window_wait_us(const pgp_config *cfg);
/* The window room one claim may take now: half the window at most, and none while more than
 * half of it is full or claimed. So the window is refilled in halves, by up to two claims in
 * flight (CLAIM_PIPELINE), not an item per completion. Pure. */
int window_room(const pgp_config *cfg, const host_state *h);
/* The window room left for first items of pairs with nothing out (claim.c fresh_pairs): up to a
 * quarter of the window beyond its size. Pure. */
int window_fresh_room(const pgp_config *cfg, const host_state *h);
void window_push(dispatcher *d, delivery *dl);
/* Takes a delivery out of its window (it is being sent or given back). */
void window_unlink(dispatcher *d, delivery *dl);
/* Sends window items while the host has open room (what spaced customers' slots and
 * reservations leave), each to the customer with the fewest requests on the wire per unit of
 * weight. Items of a customer that may not send now (breaker open, Retry-After hold, removed)
 * are given back; one at its throttled in-flight cap waits. */
void window_drain(dispatcher *d, host_state *h);
/* Gives back every window item (shutdown, leadership lost). */
void window_give_back_all(dispatcher *d, const char *why);
void window_on_timer(uv_timer_t *t);
void window_free_host(host_state *h);

/* finalize.c */
/* Appends e; on no memory frees e's strings and returns false (the lease expires and the item
 * is delivered again: at-least-once holds). */
bool final_push(final_list *l, final_entry e);
void final_entry_free(final_entry *e);
void final_list_free(final_list *l);
void finalize_arm(dispatcher *d);
bool finalize_busy(const dispatcher *d);

/* claim.c */
void claim_arm(dispatcher *d);
/* Frees the claim rounds' reused scratch (at the dispatcher's end). */
void claim_scratch_free(dispatcher *d);
void claim_on_timer(uv_timer_t *t);
void tick_arm(dispatcher *d, int64_t after);
/* The most of `want` items a customer's own limits let it have now: its max_in_flight, and the
 * in-flight cap a throttling receiver left an unlimited customer. Pure. */
int claim_limit(int want, const customer *c);
/* A host's connections free now, and of those the ones work-queue claims may take: not booked
 * for spaced slots, and not reserved for its spaced customers (spaced_reserve) when n_open
 * work-queue customers contend for it. All of a host's connections when h is NULL. */
share_pool host_pool(dispatcher *d, host_state *h, int n_open, int64_t now);
/* Free connections a host's n_active spaced customers with work keep from work-queue claims, on
 * top of the `used` they hold (on the wire or booked): they are entitled to their equal share
 * beside the n_open work-queue customers, or to what their rates need if that is more (the
 * expected concurrency, rate x request time summed, with a margin of two standard deviations
 * and one more), and always to one free connection each for their next slot, but never to more
 * than their weighted share nor to a work-queue customer's last connection. A request cannot be
 * taken back from a slow receiver, so a spaced customer's next slot is only safe if its connection
 * is kept before it is due. Pure. */
int spaced_reserve(int used, int n_active, double concurrency, double spaced_weight, int n_open,
                   int max_connections);
/* Whether a customer may send soon: not paused, not held by its breaker or a Retry-After, with
 * requests out or an item due within a second. Pure. */
bool customer_active(const customer *c, int64_t now);
/* A customer's weight in the division of its host's connections (share.c). Pure. */
double claim_weight(const customer *c);
/* A batch customer's allowance at `tick` (rate per tick plus carried fractional credit, capped
 * after a gap); *credit gets the credit to carry. -1 when the customer already had this tick
 * (from this leader or a previous one). Pure. */
int batch_tick_allowance(const customer *c, int64_t tick, double *credit);

/* limits.c: limit windows (slide.h) of endpoints, their customers and receiver hosts */
/* The customer's own windows: an empty limit when it has none. */
const slide_limit *customer_limit(const customer *c);
/* A reload's windows for the customer (its own) and its tenant gate (its customer's); a changed
 * limit keeps what was sent. */
void limits_customer_apply(customer *c, const customer_row *row);
/* The most of `want` items every window of the customer, its customer's and its host's lets a
 * round ask for now, less what is claimed or asked already and not yet sent. Pure. */
int limits_allow(const customer *c, int64_t now, int want);
/* Earliest time the customer's windows let one more item be claimed (now when they do;
 * INT64_MIN when it has none). Never "never": when what is pending fills a window, the time the
 * window frees one anyway (the claim limit then asks for none, and it looks again). Pure. */
int64_t limits_due(const customer *c, int64_t now);
/* Earliest time one send of c to host h fits every window (now when it does). Pure. */
int64_t limits_send_at(const customer *c, const host_state *h, int64_t now);
/* A send of c to h went out at `at`: recorded in every window. */
void limits_sent(customer *c, host_state *h, int64_t at);
/* A delivery of c to h was claimed (+1), or was sent or ended unsent (-1). */
void limits_unsent(customer *c, host_state *h, int delta);
/* The host limit a host_state falls under, after its host rows loaded or changed. */
void limits_host_match(dispatcher *d, host_state *h);
/* Loads pgpace.host (all, or the one a NOTIFY named) and applies it. */
void limits_hosts_load(dispatcher *d, const char *host);
/* A host's connections: its row's max_connections, within [delivery] max_host_connections. */
int host_max_connections(const dispatcher *d, const host_state *h);
/* The same for a host limit's row (NULL: the configured default). */
int host_limit_connections(const dispatcher *d, const host_limit *hl);
/* On taking over: every window resumes from the sends the attempt log and the leased claims
 * hold, then the leader enters LEADER_LEADING. */
void limits_history_load(dispatcher *d);
/* A throttled answer from a limited host: whether it is about the host (several of its
 * customers throttled at once, none answered since) rather than the endpoint; if so the host's
 * effective rate was lowered. A success lets it climb back. */
bool limits_host_throttled(dispatcher *d, customer *c, int64_t sent_us, int64_t now);
void limits_host_success(dispatcher *d, customer *c);
/* The division of host limits' rates among their customers (TIMER_HOSTS). */
void limits_on_timer(uv_timer_t *t);
void limits_arm(dispatcher *d);
void limits_free(dispatcher *d);
/* "10/s, 50000/day" of a limit ("" for none). */
const char *limits_text(const slide_limit *l, char *buf, size_t len);

/* throttle.c */
/* A delivery's answer, for the customer's pace: a throttle slows it (a Retry-After holds it), a
 * success lets it climb back. sent_us is when the request went out. */
void throttle_note(dispatcher *d, customer *c, int64_t sent_us, const http_result *r,
                   const outcome_decision *v, int64_t now);
/* The customer's period and gauge after its rate or pace changed. */
void throttle_apply(dispatcher *d, customer *c);
/* A new leadership starts from what the frontier recorded: every pace reset (another leader may
 * have changed them since), then each recorded effective rate resumed. */
void throttle_reset_all(dispatcher *d);
void throttle_resume(dispatcher *d, customer *c, double effective_rate);
/* Writes the effective rates changed since the last write (TIMER_PACE; at shutdown). */
void throttle_flush(dispatcher *d);
void throttle_on_timer(uv_timer_t *t);

/* admin.c: the admin listener's callbacks (admin_http_callbacks) */
int admin_render_metrics(void *arg, strbuf *out);
void admin_readiness(void *arg, admin_http_readiness *out);
void admin_enqueue(void *arg, const char *body, size_t len, admin_http_reply *reply);
void admin_request_done(void *arg, const char *route, int status, double seconds);

/* status.c: GET /v1/status (the live status page's data) */
void admin_status(void *arg, const char *query, admin_http_reply *reply);
/* api.c: a management API or tenant page request (admin_http.h callbacks.api), and the API
 * connection's state callback (sets its statement_timeout on every connect). */
void admin_api(void *arg, const admin_http_api_request *req, admin_http_reply *reply);
void api_on_db_state(pgconn *conn, pgconn_state state, void *arg);
/* A request of the customer went on the wire (its gaps, ticks and rate on the page). */
void status_note_request(dispatcher *d, customer *c);
/* An attempt of the customer failed (not a release): its class and status on the page. */
void status_note_failure(customer *c, const char *error_class, int http_status);
/* One customer's queue counts from the leader's queue-gauge refresh taken at at_us. */
void status_counts_note(dispatcher *d, const metrics_row *row, int64_t at_us);
/* All customers' due items and dead letters, summed by that refresh. */
void status_totals_note(dispatcher *d, double due, double dead, int64_t at_us);
/* A customer without a receiver of its own (row.receiver false; 0018), read by the refresh that
 * began at pass_us: its name, limit and dead letters, which the page shows with its endpoints;
 * status_tenants_sweep forgets those the pass that began at pass_us did not read. */
void status_tenant_note(dispatcher *d, const metrics_row *row, int64_t pass_us);
void status_tenants_sweep(dispatcher *d, int64_t pass_us);
void status_free(dispatcher *d);
/* This instance begins leading: the requests per minute count from now (what was counted
 * while another instance led is not this one's to show). */
void status_lead_begin(dispatcher *d);

/* housekeeping.c */
/* On becoming leader: partitions ahead, then retention; hourly afterwards. */
/* Reads the admin API's tokens into this instance's admin listener (tokens.c). */
void tokens_load(dispatcher *d);
void housekeeping_begin(dispatcher *d);
/* Starts (or restarts, after a reload) the backstop and queue-gauge timers; scan_now also runs
 * the backstop scan at once. */
void housekeeping_restart_timers(dispatcher *d, bool scan_now);
/* Starts a backstop pass now unless one is under way (wake-ups were lost: wake.c). */
void housekeeping_scan_soon(dispatcher *d);

/* wake.c */
/* On leading: reads what a predecessor left and turns cold. */
void wake_begin(dispatcher *d);
/* On leadership's end: the timer stops; the lease runs out by itself. */
void wake_end(dispatcher *d);
/* A NOTIFY on the enqueue channel came (counted towards turning hot). */
void wake_on_notify(dispatcher *d);
void wake_free(dispatcher *d);
/* leader.c: what a wake-up of (customer id, carrier) does, notified or polled; arm_claim
 * arms the claim timer (a caller waking many pairs arms it once). */
void leader_wake_pair(dispatcher *d, int64_t id, const char *carrier, int64_t now, bool arm_claim);
/* The read connection's state callback (its session settings on every connect), and those
 * settings sent again (a reload that changed statement_timeout). */
void housekeeping_on_read_db_state(pgconn *conn, pgconn_state state, void *arg);
void housekeeping_read_session(dispatcher *d);

#endif
