/* metrics.h - a small registry of counters, gauges and histograms, rendered in the Prometheus
 * text exposition format 0.0.4 (what GET /metrics serves).
 *
 * Contract:
 * - Families are registered once, at start-up, from a metrics_family_def: name, help, type,
 *   0 to METRICS_MAX_LABELS label names and, for histograms, fixed bucket upper bounds. The
 *   returned family id is what the update calls take. Bad definitions (invalid or duplicate
 *   names, "le" on a histogram, unsorted buckets) are -EINVAL.
 * - Updates pass the label values in the order of the family's label names (NULL for a family
 *   without labels). A series is created on its first update; a family without labels has its
 *   one series from registration, so it renders as 0 before anything happened.
 * - Bounded customer cardinality: a label named "customer" keeps its own value for the first
 *   customer_top_n distinct values the registry sees (in any family, in order of first use:
 *   "first N seen keep their own series", never re-ranked, so a series never changes name).
 *   Every later value is folded into customer="_other" (customer names cannot start with "_").
 *   Counters and histograms add into the _other series. A gauge remembers each folded
 *   customer's last value privately and _other shows their sum, so metrics_gauge_set() stays
 *   correct for folded customers too. A gauge family defined with owner_folds keeps nothing of
 *   folded customers (their updates change nothing and return 0): its owner sets the _other
 *   series itself, by passing METRICS_OTHER_CUSTOMER as the customer label value (which any
 *   family accepts, without taking a place among the customers kept). That is for gauges of
 *   every customer (a million customers' private values would cost hundreds of megabytes, and
 *   past max_series they were dropped, leaving _other short).
 * - Endpoints (migration 0018) are customers' receivers with rows of their own named
 *   "<customer>/<endpoint>" (customer names have no '/'), and that is their customer label
 *   value: each takes its own place among the customer_top_n. They render as two labels: a value
 *   "acme/crm" as customer="acme",endpoint="crm", and a value the owner marked with
 *   metrics_customer_endpoints() (a customer's own receiver while the customer has endpoints) as
 *   customer="acme",endpoint="default". Any other renders as customer="acme" alone, as before
 *   endpoints, so a customer without endpoints keeps its series' names. The endpoint label
 *   follows the customer label; a family with a customer label may not name one "endpoint".
 * - At most max_series series per family (folded gauges' private ones included): updates that
 *   would create more return -ENOSPC and change nothing. Existing series always update.
 * - metrics_render() writes families in registration order, HELP and TYPE once each, series in
 *   order of creation; label values escaped (\\ \" \n), histograms as cumulative
 *   _bucket{le="..."} lines ending with le="+Inf", then _sum and _count.
 * - One thread (the loop); no locking. Update calls never log.
 */
#ifndef PGPACE_METRICS_H
#define PGPACE_METRICS_H

#include "common.h"
#include "strbuf.h"

#include <stdbool.h>
#include <stddef.h>

#define METRICS_MAX_LABELS 3
/* The label whose values are bounded by customer_top_n, and the value the rest fold into. */
#define METRICS_CUSTOMER_LABEL "customer"
#define METRICS_OTHER_CUSTOMER "_other"
/* The label an endpoint's series add after the customer label (see the contract). */
#define METRICS_ENDPOINT_LABEL "endpoint"

typedef struct metrics metrics;

typedef enum metrics_type { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM } metrics_type;

typedef struct metrics_options {
    int customer_top_n; /* distinct customer label values kept ([http] metrics_customers) */
    int max_series;     /* per family; 0 = the default, 10000 */
} metrics_options;

typedef struct metrics_family_def {
    const char *name; /* [a-zA-Z_:][a-zA-Z0-9_:]*; counters conventionally end in _total */
    const char *help; /* one line of text (a \ or newline is escaped) */
    metrics_type type;
    const char *labels[METRICS_MAX_LABELS]; /* label names, NULL after the last */
    const double *buckets;                  /* histograms: finite upper bounds, increasing, */
    size_t nbuckets;                        /* without +Inf (always added); 1 to 64 of them */
    bool owner_folds; /* gauges with a customer label: the owner sets _other (see above) */
} metrics_family_def;

int metrics_new(const metrics_options *opts, metrics **out) PGP_MUST_CHECK;
void metrics_free(metrics *m);

/* Registers a family (copied); *family_id is set on success. */
int metrics_register(metrics *m, const metrics_family_def *def, int *family_id) PGP_MUST_CHECK;

/* value >= 0 and finite. */
int metrics_counter_add(metrics *m, int family_id, const char *const *labels, double value);
int metrics_gauge_set(metrics *m, int family_id, const char *const *labels, double value);
int metrics_gauge_add(metrics *m, int family_id, const char *const *labels, double delta);
/* value is not NaN. */
int metrics_histogram_observe(metrics *m, int family_id, const char *const *labels, double value);

/* Appends the exposition text to out. 0, or -ENOMEM when out failed to grow. */
int metrics_render(const metrics *m, strbuf *out) PGP_MUST_CHECK;

/* Marks (has_endpoints) or unmarks the customer label value `customer` as a customer's own
 * receiver beside endpoints: its series render with endpoint="default" while marked (above).
 * Values with a '/' are endpoints already and are not marked. 0, or -ENOMEM. */
int metrics_customer_endpoints(metrics *m, const char *customer, bool has_endpoints);

/* Distinct customer values holding their own series (at most customer_top_n). */
size_t metrics_customers_kept(const metrics *m);
/* Whether this customer value holds its own series: true for one already kept, and for a new one
 * while fewer than customer_top_n are (it is then admitted, as its first update would). Final
 * once it answers false, since the customers kept never change. False on no memory. */
bool metrics_customer_kept(metrics *m, const char *customer);

#endif
