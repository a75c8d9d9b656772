/* config.h - the service configuration: one struct, loaded from an INI file, read-only after.
 *
 * Contract: config_defaults() fills every field with its documented default. config_load()
 * parses an INI file (libinih) on top of the defaults; every key is described once in a table
 * in config.c (section, name, type, default, bounds, help), which also drives `pgpace config`
 * style listings and the docs. Errors name the file, the line and the key:
 *     "pgpace.ini:12: [dispatcher] lease_seconds: expected an integer from 1 to 86400, got 'x'"
 * and leave *out untouched. Unknown sections or keys are errors, as are malformed lines and
 * lines too long for the INI parser's buffer (199 bytes with Debian's libinih; CONFIG_MAX_LINE
 * is only the outer bound). A key set twice is an error, except allow_cidrs and no_proxy,
 * lists whose lines add up.
 */
#ifndef PGPACE_CONFIG_H
#define PGPACE_CONFIG_H

#include "common.h"
#include "validate.h"

#include <stdbool.h>
#include <stdio.h>

#define CONFIG_MAX_LINE 4096

/* The ranges of the throttle settings, shared by the [delivery] keys and the per-customer
 * overrides of `pgpace customer set`; the CHECK constraints of pgpace.customer
 * (sql/migrations/0008_throttle.sql) hold the same. */
extern const double_range config_throttle_decrease_range; /* 0 < x < 1 */
extern const double_range config_throttle_increase_range; /* 0 < x <= 1 */
extern const double_range config_throttle_floor_range;    /* 0 < x <= 1 */

typedef enum log_format { LOG_FORMAT_LOGFMT, LOG_FORMAT_JSON } log_format;
typedef enum log_level {
    LOG_LEVEL_DEBUG,
    LOG_LEVEL_INFO,
    LOG_LEVEL_WARN,
    LOG_LEVEL_ERROR
} log_level;

typedef struct pgp_config {
    /* [database] */
    char conninfo[1024];      /* libpq conninfo or URL; empty: libpq environment variables */
    int statement_timeout_ms; /* the dispatcher session's statement_timeout; 0 = left as the
                                 server or role sets it */

    /* [dispatcher] */
    char instance_name[128];   /* shown in claimed_by and `pgpace status`; empty: host:pid */
    int lease_seconds;         /* how long a claim owns an item before it reappears */
    int standby_retry_ms;      /* how often a standby tries to take the leader lock */
    int batch_tick_ms;         /* batch-mode tick length */
    int backstop_scan_ms;      /* scan for due customers missed by NOTIFY */
    int wake_hot_per_s;        /* wake-ups/s that turn the leader hot (wake.c); 0: never */
    int claim_batch_max;       /* most items claimed in one statement */
    int max_in_flight;         /* most deliveries outstanding at once, all customers */
    int claim_ahead;           /* items claimed per host beyond its free connections (0: none) */
    int claim_ahead_ms;        /* longest a claimed item waits for a connection (capped at a
                                  quarter of the lease) */
    int carrier_max_per_round; /* default per-carrier cap per claim round */
    int carrier_max_in_flight; /* default per-carrier outstanding cap; 0 = unlimited */
    int drain_timeout_ms;      /* SIGTERM: wait this long for in-flight deliveries */
    int retry_base_ms;         /* first retry delay (before jitter) */
    int retry_cap_ms;          /* largest retry delay */
    int reconnect_max_ms;      /* cap of the database reconnect backoff */
    int keepalive_idle_s;      /* TCP keepalive: idle time before probes */

    /* [delivery] */
    int connect_timeout_ms;
    int request_timeout_ms;
    int max_response_bytes;         /* response body kept (and read) at most */
    int max_connections;            /* libcurl total connections */
    int max_host_connections;       /* libcurl connections per host */
    int retry_after_max_s;          /* largest Retry-After honoured; 0 = Retry-After ignored
                                     * (the computed backoff is used) */
    char allow_cidrs[1024];         /* SSRF allow-list, comma separated CIDRs */
    char proxy[256];                /* egress proxy "http://host:port" (proxy.h); empty: none */
    char no_proxy[1024];            /* hosts/CIDRs that go direct (proxy.h), stored "a, b" */
    char ca_file[512];              /* PEM CA bundle receivers are verified with (mutual TLS
                                     * with a private CA); empty: the system's CA bundle */
    bool dead_letter_on_4xx;        /* other 4xx: dead letter at once (else retry) */
    int attempt_retention_days;     /* attempt log kept this many days (whole partitions) */
    int dead_letter_retention_days; /* dead letters kept this many days (whole partitions) */
    int item_retention_days;        /* delivered items kept at least this many days (whole
                                     * partitions, kept while one of the day is pending or dead) */
    int breaker_failures;           /* consecutive failures that open the breaker */
    int breaker_cooldown_ms;        /* first cooldown; doubles on repeated trips */
    int breaker_cooldown_max_ms;
    /* Pacing that listens to the receiver (a customer's own setting overrides each): */
    double throttle_decrease; /* effective rate multiplied by this on a throttled answer
                               * (429, or 503 with Retry-After); 0 < x < 1 */
    double throttle_increase; /* fraction of rate_per_minute regained per successful
                               * delivery, up to rate_per_minute; 0 < x <= 1 */
    double throttle_floor;    /* lowest effective rate, as a fraction of rate_per_minute;
                               * 0 < x <= 1 */

    /* [health] (durations in ms) */
    long long disable_after_ms;        /* every delivery failed this long: disabled; 0 = never */
    int disable_min_attempts;          /* ... and at least this many failed attempts */
    long long breaker_event_after_ms;  /* breaker open this long: an event; 0 = none */
    long long health_check_ms;         /* how often the leader checks */
    char operator_webhook_url[2048];   /* events are posted here; empty: none */
    char operator_webhook_secret[128]; /* whsec_ secret signing them (required with the URL) */

    /* [http] */
    char http_listen[128];   /* "host:port" of the admin HTTP server; empty: off */
    char enqueue_token[256]; /* bearer token for POST /v1/items; empty: endpoint disabled */
    char status_token[256];  /* protects the status page and /v1/status; empty: open */
    int max_body_bytes;      /* largest enqueue body */
    char portal_frame_ancestors[1024]; /* origins that may frame the tenant page; empty: none */
    int metrics_customers; /* customers with their own metric series; the rest: "_other" */

    /* [log] */
    log_level log_level;
    log_format log_format;

    /* Where it came from, for messages. Empty when only defaults were used. */
    char path[512];
} pgp_config;

void config_defaults(pgp_config *cfg);

/* Loads `path` over the defaults. On failure *cfg is left as it was. */
int config_load(pgp_config *cfg, const char *path, pgp_error *err) PGP_MUST_CHECK;

/* Loads from an already-open stream; `name` is used in messages in place of a path. */
int config_load_stream(pgp_config *cfg, FILE *in, const char *name, pgp_error *err) PGP_MUST_CHECK;

/* Writes every key with its current value, one `section.key = value` per line. */
void config_dump(const pgp_config *cfg, FILE *out);

#endif
