/* metrics.c - counters, gauges and histograms in Prometheus text format 0.0.4 (metrics.h). */
#include "metrics.h"

#include "hmap.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_SERIES 10000
#define MAX_BUCKETS        64

/* One labelled time series (or, for a histogram, one set of buckets). */
typedef struct series {
    const char *values[METRICS_MAX_LABELS]; /* label values, pointing into the same allocation */
    double value;                           /* counter or gauge value; histogram sum */
    uint64_t count;                         /* histogram: observations */
    uint64_t *buckets;                      /* histogram: per-bucket counts, not cumulative */
    struct series *fold; /* a folded customer's private gauge: the _other series it adds to */
} series;

typedef struct family {
    char *name;
    char *help;
    metrics_type type;
    int nlabels;
    char *labels[METRICS_MAX_LABELS];
    int customer_label; /* index of the "customer" label, or -1 */
    bool owner_folds;   /* folded customers' gauges are the owner's to sum into _other */
    double *bounds;     /* histogram upper bounds (without +Inf) */
    size_t nbounds;
    series **series; /* in order of creation (private gauge series included, not rendered) */
    size_t nseries, capseries;
    hmap index;   /* label-value key -> visible series */
    hmap private; /* gauges: label-value key (with the real customer) -> private series */
} family;

struct metrics {
    int customer_top_n;
    size_t max_series;
    family *families;
    size_t nfamilies, capfamilies;
    hmap customers;      /* customer values that keep their own series (value: non-NULL marker) */
    hmap with_endpoints; /* customer values rendered with endpoint="default" (marker) */
};

int metrics_new(const metrics_options *opts, metrics **out)
{
    if (opts->customer_top_n < 0 || opts->max_series < 0)
        return -EINVAL;
    metrics *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->customer_top_n = opts->customer_top_n;
    m->max_series = opts->max_series ? (size_t)opts->max_series : DEFAULT_MAX_SERIES;
    hmap_init(&m->customers);
    hmap_init(&m->with_endpoints);
    *out = m;
    return 0;
}

static void family_free(family *f)
{
    for (size_t i = 0; i < f->nseries; i++) {
        free(f->series[i]->buckets);
        free(f->series[i]);
    }
    free(f->series);
    hmap_free(&f->index);
    hmap_free(&f->private);
    free(f->name);
    free(f->help);
    for (int i = 0; i < f->nlabels; i++)
        free(f->labels[i]);
    free(f->bounds);
}

void metrics_free(metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nfamilies; i++)
        family_free(&m->families[i]);
    free(m->families);
    hmap_free(&m->customers);
    hmap_free(&m->with_endpoints);
    free(m);
}

static bool valid_name(const char *s, bool colon)
{
    if (!s || !*s)
        return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (colon && c == ':') || (p != s && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

static int check_def(const metrics *m, const metrics_family_def *def, int *nlabels)
{
    if (!valid_name(def->name, true) || !def->help)
        return -EINVAL;
    if (def->type != METRICS_COUNTER && def->type != METRICS_GAUGE &&
        def->type != METRICS_HISTOGRAM)
        return -EINVAL;
    for (size_t i = 0; i < m->nfamilies; i++)
        if (strcmp(m->families[i].name, def->name) == 0)
            return -EINVAL;
    int n = 0;
    while (n < METRICS_MAX_LABELS && def->labels[n])
        n++;
    for (int i = 0; i < n; i++) {
        /* Names starting with __ are reserved for Prometheus itself. */
        if (!valid_name(def->labels[i], false) || strncmp(def->labels[i], "__", 2) == 0)
            return -EINVAL;
        if (def->type == METRICS_HISTOGRAM && strcmp(def->labels[i], "le") == 0)
            return -EINVAL;
        for (int j = 0; j < i; j++)
            if (strcmp(def->labels[i], def->labels[j]) == 0)
                return -EINVAL;
    }
    /* The endpoint label is rendered from the customer label's value: never a family's own. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (strcmp(def->labels[i], METRICS_CUSTOMER_LABEL) == 0 &&
                strcmp(def->labels[j], METRICS_ENDPOINT_LABEL) == 0)
                return -EINVAL;
    if (def->type == METRICS_HISTOGRAM) {
        if (!def->buckets || def->nbuckets < 1 || def->nbuckets > MAX_BUCKETS)
            return -EINVAL;
        for (size_t i = 0; i < def->nbuckets; i++) {
            if (!isfinite(def->buckets[i]) || (i > 0 && def->buckets[i] <= def->buckets[i - 1]))
                return -EINVAL;
        }
    } else if (def->buckets || def->nbuckets) {
        return -EINVAL;
    }
    *nlabels = n;
    return 0;
}

/* Key of a label-value tuple in a family's index: the values, each followed by a NUL byte.
 * Writes into buf when it fits, else allocates (*heap is then to be freed). */
static char *series_key(const family *f, const char *const *values, char *buf, size_t bufsize,
                        size_t *klen, char **heap)
{
    size_t len = 0;
    for (int i = 0; i < f->nlabels; i++)
        len += strlen(values[i]) + 1;
    char *key = buf;
    *heap = NULL;
    if (len > bufsize) {
        key = malloc(len);
        if (!key)
            return NULL;
        *heap = key;
    }
    size_t o = 0;
    for (int i = 0; i < f->nlabels; i++) {
        size_t n = strlen(values[i]) + 1;
        memcpy(key + o, values[i], n);
        o += n;
    }
    *klen = len;
    return key;
}

/* Finds or creates the series with exactly these label values in `index` (one of f's). */
static int series_get(metrics *m, family *f, hmap *index, const char *const *values, series **out)
{
    char buf[512];
    size_t klen;
    char *heap;
    char *key = series_key(f, values, buf, sizeof buf, &klen, &heap);
    if (!key)
        return -ENOMEM;
    series *s = hmap_get(index, key, klen);
    int rc = 0;
    if (s)
        goto done;
    if (f->nseries >= m->max_series) {
        rc = -ENOSPC;
        goto done;
    }
    if (f->nseries == f->capseries) {
        size_t cap = f->capseries ? f->capseries * 2 : 16;
        series **grown = realloc(f->series, cap * sizeof *grown);
        if (!grown) {
            rc = -ENOMEM;
            goto done;
        }
        f->series = grown;
        f->capseries = cap;
    }
    /* The series and copies of its label values in one allocation. */
    s = calloc(1, sizeof *s + klen);
    if (!s) {
        rc = -ENOMEM;
        goto done;
    }
    char *copy = (char *)(s + 1);
    memcpy(copy, key, klen);
    for (int i = 0; i < f->nlabels; i++) {
        s->values[i] = copy;
        copy += strlen(copy) + 1;
    }
    if (f->type == METRICS_HISTOGRAM) {
        s->buckets = calloc(f->nbounds, sizeof *s->buckets);
        if (!s->buckets) {
            free(s);
            rc = -ENOMEM;
            goto done;
        }
    }
    if (hmap_put(index, key, klen, s) != 0) {
        free(s->buckets);
        free(s);
        rc = -ENOMEM;
        goto done;
    }
    f->series[f->nseries++] = s;
done:
    free(heap);
    *out = rc == 0 ? s : NULL;
    return rc;
}

int metrics_register(metrics *m, const metrics_family_def *def, int *family_id)
{
    int nlabels;
    int rc = check_def(m, def, &nlabels);
    if (rc != 0)
        return rc;
    if (m->nfamilies == m->capfamilies) {
        size_t cap = m->capfamilies ? m->capfamilies * 2 : 16;
        family *grown = realloc(m->families, cap * sizeof *grown);
        if (!grown)
            return -ENOMEM;
        m->families = grown;
        m->capfamilies = cap;
    }
    family *f = &m->families[m->nfamilies];
    *f = (family){.type = def->type,
                  .nlabels = nlabels,
                  .customer_label = -1,
                  .owner_folds = def->owner_folds && def->type == METRICS_GAUGE};
    hmap_init(&f->index);
    hmap_init(&f->private);
    f->name = strdup(def->name);
    f->help = strdup(def->help);
    bool ok = f->name && f->help;
    for (int i = 0; i < nlabels; i++) {
        f->labels[i] = strdup(def->labels[i]);
        ok = ok && f->labels[i];
        if (strcmp(def->labels[i], METRICS_CUSTOMER_LABEL) == 0)
            f->customer_label = i;
    }
    if (ok && def->type == METRICS_HISTOGRAM) {
        f->bounds = malloc(def->nbuckets * sizeof *f->bounds);
        if (f->bounds) {
            memcpy(f->bounds, def->buckets, def->nbuckets * sizeof *f->bounds);
            f->nbounds = def->nbuckets;
        }
        ok = f->bounds != NULL;
    }
    series *only;
    if (ok && nlabels == 0)
        ok = series_get(m, f, &f->index, NULL, &only) == 0;
    if (!ok) {
        family_free(f);
        return -ENOMEM;
    }
    *family_id = (int)m->nfamilies++;
    return 0;
}

int metrics_customer_endpoints(metrics *m, const char *customer, bool has_endpoints)
{
    size_t len = strlen(customer);
    if (strchr(customer, '/'))
        return 0;
    if (!has_endpoints) {
        hmap_del(&m->with_endpoints, customer, len);
        return 0;
    }
    if (hmap_get(&m->with_endpoints, customer, len))
        return 0;
    /* The map needs a non-NULL value to tell "present" from "absent"; any pointer will do. */
    return hmap_put(&m->with_endpoints, customer, len, m);
}

size_t metrics_customers_kept(const metrics *m)
{
    return m->customers.n;
}

/* Whether this customer value keeps its own series; admits it while there is room. _other
 * addresses its own series directly. */
static int customer_kept(metrics *m, const char *customer, bool *kept)
{
    if (strcmp(customer, METRICS_OTHER_CUSTOMER) == 0) {
        *kept = true;
        return 0;
    }
    size_t len = strlen(customer);
    if (hmap_get(&m->customers, customer, len)) {
        *kept = true;
        return 0;
    }
    if (m->customers.n >= (size_t)m->customer_top_n) {
        *kept = false;
        return 0;
    }
    /* The map needs a non-NULL value to tell "present" from "absent"; any pointer will do. */
    int rc = hmap_put(&m->customers, customer, len, m);
    *kept = rc == 0;
    return rc;
}

bool metrics_customer_kept(metrics *m, const char *customer)
{
    bool kept = false;
    return customer_kept(m, customer, &kept) == 0 && kept;
}

/* Resolves an update's target: the series to change and, for a folded customer's gauge, its
 * private series (whose change is mirrored into *target). */
static int resolve(metrics *m, int family_id, const char *const *labels, metrics_type type,
                   family **fout, series **target, series **private_gauge)
{
    if (family_id < 0 || (size_t)family_id >= m->nfamilies)
        return -EINVAL;
    family *f = &m->families[family_id];
    if (f->type != type)
        return -EINVAL;
    for (int i = 0; i < f->nlabels; i++)
        if (!labels || !labels[i])
            return -EINVAL;
    *fout = f;
    *private_gauge = NULL;
    bool kept = true;
    if (f->customer_label >= 0) {
        int rc = customer_kept(m, labels[f->customer_label], &kept);
        if (rc != 0)
            return rc;
    }
    if (kept)
        return series_get(m, f, &f->index, labels, target);

    if (f->owner_folds) {
        *target = NULL; /* its value reaches _other through the owner */
        return 0;
    }
    const char *folded[METRICS_MAX_LABELS];
    for (int i = 0; i < f->nlabels; i++)
        folded[i] = i == f->customer_label ? METRICS_OTHER_CUSTOMER : labels[i];
    if (type != METRICS_GAUGE)
        return series_get(m, f, &f->index, folded, target);

    /* A gauge is set per customer, so each folded customer keeps its own (private, unrendered)
     * value and _other moves by the difference. */
    series *other, *own;
    int rc = series_get(m, f, &f->index, folded, &other);
    if (rc == 0)
        rc = series_get(m, f, &f->private, labels, &own);
    if (rc != 0)
        return rc;
    own->fold = other;
    *target = other;
    *private_gauge = own;
    return 0;
}

int metrics_counter_add(metrics *m, int family_id, const char *const *labels, double value)
{
    if (!(value >= 0) || !isfinite(value))
        return -EINVAL;
    family *f;
    series *s, *priv;
    int rc = resolve(m, family_id, labels, METRICS_COUNTER, &f, &s, &priv);
    if (rc != 0)
        return rc;
    s->value += value;
    return 0;
}

int metrics_gauge_set(metrics *m, int family_id, const char *const *labels, double value)
{
    family *f;
    series *s, *priv;
    int rc = resolve(m, family_id, labels, METRICS_GAUGE, &f, &s, &priv);
    if (rc != 0 || !s)
        return rc;
    if (priv) {
        /* _other is the sum of the folded customers' values. */
        s->value += value - priv->value;
        priv->value = value;
    } else {
        s->value = value;
    }
    return 0;
}

int metrics_gauge_add(metrics *m, int family_id, const char *const *labels, double delta)
{
    family *f;
    series *s, *priv;
    int rc = resolve(m, family_id, labels, METRICS_GAUGE, &f, &s, &priv);
    if (rc != 0 || !s)
        return rc;
    if (priv)
        priv->value += delta;
    s->value += delta;
    return 0;
}

int metrics_histogram_observe(metrics *m, int family_id, const char *const *labels, double value)
{
    if (isnan(value))
        return -EINVAL;
    family *f;
    series *s, *priv;
    int rc = resolve(m, family_id, labels, METRICS_HISTOGRAM, &f, &s, &priv);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < f->nbounds; i++) {
        if (value <= f->bounds[i]) {
            s->buckets[i]++;
            break;
        }
    }
    s->count++;
    s->value += value;
    return 0;
}

/* A sample value as Prometheus parses it (Go's ParseFloat): the shortest of %.15g / %.17g that
 * reads back exactly, and +Inf, -Inf, NaN spelled out. */
static void put_double(strbuf *sb, double v)
{
    if (isnan(v)) {
        strbuf_puts(sb, "NaN");
        return;
    }
    if (isinf(v)) {
        strbuf_puts(sb, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, sizeof buf, "%.17g", v);
    strbuf_puts(sb, buf);
}

/* Escapes for HELP text (\\ and \n) or, with quote, for label values (also \"). */
static void put_escaped_n(strbuf *sb, const char *s, size_t n, bool quote)
{
    const char *run = s, *end = s + n;
    for (; s < end; s++) {
        const char *esc = *s == '\\'           ? "\\\\"
                          : *s == '\n'         ? "\\n"
                          : quote && *s == '"' ? "\\\""
                                               : NULL;
        if (!esc)
            continue;
        strbuf_append(sb, run, (size_t)(s - run));
        strbuf_puts(sb, esc);
        run = s + 1;
    }
    strbuf_append(sb, run, (size_t)(s - run));
}

static void put_escaped(strbuf *sb, const char *s, bool quote)
{
    put_escaped_n(sb, s, strlen(s), quote);
}

/* label="value", of the value's first n bytes, escaped. */
static void put_label(strbuf *sb, const char *name, const char *value, size_t n)
{
    strbuf_puts(sb, name);
    strbuf_append(sb, "=\"", 2);
    put_escaped_n(sb, value, n, true);
    strbuf_append(sb, "\"", 1);
}

/* A series' customer label: customer="acme",endpoint="crm" for the value "acme/crm" (an
 * endpoint), customer="acme",endpoint="default" for a customer's own receiver beside endpoints
 * (metrics_customer_endpoints), else customer="acme". */
static void put_customer_label(strbuf *sb, const metrics *m, const char *value)
{
    const char *slash = strchr(value, '/');
    size_t len = strlen(value);
    if (slash) {
        put_label(sb, METRICS_CUSTOMER_LABEL, value, (size_t)(slash - value));
        strbuf_append(sb, ",", 1);
        put_label(sb, METRICS_ENDPOINT_LABEL, slash + 1, strlen(slash + 1));
        return;
    }
    put_label(sb, METRICS_CUSTOMER_LABEL, value, len);
    if (hmap_get(&m->with_endpoints, value, len))
        strbuf_puts(sb, "," METRICS_ENDPOINT_LABEL "=\"default\"");
}

/* name{a="x",b="y"[,le="..."]} */
static void put_series_name(strbuf *sb, const metrics *m, const family *f, const char *suffix,
                            const series *s, const double *le)
{
    strbuf_puts(sb, f->name);
    strbuf_puts(sb, suffix);
    if (f->nlabels == 0 && !le)
        return;
    strbuf_append(sb, "{", 1);
    for (int i = 0; i < f->nlabels; i++) {
        if (i > 0)
            strbuf_append(sb, ",", 1);
        if (i == f->customer_label) {
            put_customer_label(sb, m, s->values[i]);
            continue;
        }
        strbuf_puts(sb, f->labels[i]);
        strbuf_append(sb, "=\"", 2);
        put_escaped(sb, s->values[i], true);
        strbuf_append(sb, "\"", 1);
    }
    if (le) {
        strbuf_puts(sb, f->nlabels ? ",le=\"" : "le=\"");
        put_double(sb, *le);
        strbuf_append(sb, "\"", 1);
    }
    strbuf_append(sb, "}", 1);
}

static void put_sample(strbuf *sb, const metrics *m, const family *f, const char *suffix,
                       const series *s, const double *le, double v)
{
    put_series_name(sb, m, f, suffix, s, le);
    strbuf_append(sb, " ", 1);
    put_double(sb, v);
    strbuf_append(sb, "\n", 1);
}

static const char *const type_names[] = {"counter", "gauge", "histogram"};

int metrics_render(const metrics *m, strbuf *out)
{
    for (size_t i = 0; i < m->nfamilies; i++) {
        const family *f = &m->families[i];
        strbuf_printf(out, "# HELP %s ", f->name);
        put_escaped(out, f->help, false);
        strbuf_printf(out, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
        for (size_t j = 0; j < f->nseries; j++) {
            const series *s = f->series[j];
            if (s->fold)
                continue; /* a folded customer's private gauge: shown through _other */
            if (f->type != METRICS_HISTOGRAM) {
                put_sample(out, m, f, "", s, NULL, s->value);
                continue;
            }
            uint64_t cumulative = 0;
            for (size_t b = 0; b < f->nbounds; b++) {
                cumulative += s->buckets[b];
                put_sample(out, m, f, "_bucket", s, &f->bounds[b], (double)cumulative);
            }
            double inf = INFINITY;
            put_sample(out, m, f, "_bucket", s, &inf, (double)s->count);
            put_sample(out, m, f, "_sum", s, NULL, s->value);
            put_sample(out, m, f, "_count", s, NULL, (double)s->count);
        }
    }
    return out->failed ? -ENOMEM : 0;
}
