/* test_metrics.c - the metrics registry: exact exposition lines, escaping, histograms, the
 * customer top-N fold, bad definitions and updates, and the whole output checked by promtool
 * (`promtool check metrics`; the test fails when promtool is not installed). */
#include "testlib.h"

#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static metrics *new_registry(int top_n, int max_series)
{
    metrics *m = NULL;
    assert_int_equal(
        metrics_new(&(metrics_options){.customer_top_n = top_n, .max_series = max_series}, &m), 0);
    return m;
}

static int reg(metrics *m, metrics_family_def def)
{
    int id = -1;
    assert_int_equal(metrics_register(m, &def, &id), 0);
    return id;
}

/* The rendered text (owned). */
static char *render(const metrics *m)
{
    strbuf sb = {0};
    assert_int_equal(metrics_render(m, &sb), 0);
    char *text = strdup(strbuf_str(&sb));
    assert_non_null(text);
    strbuf_free(&sb);
    return text;
}

/* Asserts that `line` is one whole line of `text`. */
static void assert_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return;
    }
    fail_msg("line not found: '%s'\nin:\n%s", line, text);
}

static void assert_no_line_starting(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
        if (strncmp(p, prefix, n) == 0)
            fail_msg("unexpected line starting '%s' in:\n%s", prefix, text);
    }
}

static size_t count_substr(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Runs `promtool check metrics` on text; returns its exit status, *output its messages. */
static int promtool_check(const char *text, char **output)
{
    if (access("/usr/bin/promtool", X_OK) != 0)
        fail_msg(
            "promtool is not installed (Debian package prometheus; tests/tools/install-deps.sh)");
    char *path = tl_temp_file(text);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/promtool check metrics < %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    strbuf out = {0};
    /* strbuf_str() on a never-written buffer returns it unterminated: write "" first. */
    strbuf_append(&out, "", 0);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        strbuf_append(&out, buf, n);
    int status = pclose(p);
    unlink(path);
    free(path);
    *output = strdup(strbuf_str(&out));
    strbuf_free(&out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static const double latency_buckets[] = {0.005, 0.05, 0.5, 5};

static void counter_gauge_exact_lines(void **state)
{
    metrics *m = new_registry(10, 0);
    int plain = reg(m, (metrics_family_def){.name = "pgpace_claims_total",
                                            .help = "Claim rounds run.",
                                            .type = METRICS_COUNTER});
    int sent = reg(m, (metrics_family_def){.name = "pgpace_deliveries_total",
                                           .help = "Deliveries by outcome.",
                                           .type = METRICS_COUNTER,
                                           .labels = {"customer", "outcome"}});
    int due = reg(m, (metrics_family_def){.name = "pgpace_due_items",
                                          .help = "Items claimable now.",
                                          .type = METRICS_GAUGE,
                                          .labels = {"customer"}});
    char *text = render(m);
    /* A family without labels shows 0 from the start; a labelled one only HELP and TYPE. */
    assert_line(text, "pgpace_claims_total 0");
    assert_line(text, "# HELP pgpace_deliveries_total Deliveries by outcome.");
    assert_line(text, "# TYPE pgpace_deliveries_total counter");
    assert_no_line_starting(text, "pgpace_deliveries_total{");
    free(text);

    assert_int_equal(metrics_counter_add(m, plain, NULL, 3), 0);
    assert_int_equal(metrics_counter_add(m, plain, NULL, 0.5), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"acme", "success"}, 1), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"acme", "success"}, 2), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"acme", "retry"}, 1), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"beta", "success"}, 1e15 + 1),
                     0);
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"acme"}, 12), 0);
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"acme"}, 7), 0);
    assert_int_equal(metrics_gauge_add(m, due, (const char *[]){"beta"}, -2.25), 0);
    text = render(m);
    assert_line(text, "pgpace_claims_total 3.5");
    assert_line(text, "pgpace_deliveries_total{customer=\"acme\",outcome=\"success\"} 3");
    assert_line(text, "pgpace_deliveries_total{customer=\"acme\",outcome=\"retry\"} 1");
    assert_line(text,
                "pgpace_deliveries_total{customer=\"beta\",outcome=\"success\"} 1000000000000001");
    assert_line(text, "pgpace_due_items{customer=\"acme\"} 7");
    assert_line(text, "pgpace_due_items{customer=\"beta\"} -2.25");
    /* HELP and TYPE once per family, families in registration order. */
    assert_int_equal(count_substr(text, "# TYPE pgpace_deliveries_total "), 1);
    assert_int_equal(count_substr(text, "# HELP pgpace_deliveries_total "), 1);
    assert_true(strstr(text, "# HELP pgpace_claims_total") < strstr(text, "# HELP pgpace_due"));
    assert_true(strstr(text, "# HELP pgpace_deliveries_total") < strstr(text, "# HELP pgpace_due"));
    char *out = NULL;
    int rc = promtool_check(text, &out);
    if (rc != 0)
        fail_msg("promtool check metrics: %d: %s\n%s", rc, out, text);
    free(out);
    free(text);
    metrics_free(m);
}

static void escaping(void **state)
{
    metrics *m = new_registry(10, 0);
    int f = reg(m, (metrics_family_def){.name = "pgpace_odd_total",
                                        .help = "Help with a \\ backslash\nand a newline.",
                                        .type = METRICS_COUNTER,
                                        .labels = {"customer", "reason"}});
    assert_int_equal(
        metrics_counter_add(m, f, (const char *[]){"a\"b", "line\nbreak \\ and \"quotes\""}, 1), 0);
    char *text = render(m);
    assert_line(text, "# HELP pgpace_odd_total Help with a \\\\ backslash\\nand a newline.");
    assert_line(text, "pgpace_odd_total{customer=\"a\\\"b\",reason=\"line\\nbreak \\\\ and "
                      "\\\"quotes\\\"\"} 1");
    char *out = NULL;
    int rc = promtool_check(text, &out);
    if (rc != 0)
        fail_msg("promtool check metrics: %d: %s\n%s", rc, out, text);
    free(out);
    free(text);
    metrics_free(m);
}

static void histogram_lines(void **state)
{
    metrics *m = new_registry(10, 0);
    int h = reg(m, (metrics_family_def){.name = "pgpace_delivery_seconds",
                                        .help = "Delivery latency.",
                                        .type = METRICS_HISTOGRAM,
                                        .labels = {"customer"},
                                        .buckets = latency_buckets,
                                        .nbuckets = PGP_ARRAY_LEN(latency_buckets)});
    int bare = reg(m, (metrics_family_def){.name = "pgpace_claim_seconds",
                                           .help = "Claim statement latency.",
                                           .type = METRICS_HISTOGRAM,
                                           .labels = {NULL},
                                           .buckets = latency_buckets,
                                           .nbuckets = 2});
    const double obs[] = {0.001, 0.005, 0.03, 0.2, 0.2, 7};
    for (size_t i = 0; i < PGP_ARRAY_LEN(obs); i++)
        assert_int_equal(metrics_histogram_observe(m, h, (const char *[]){"acme"}, obs[i]), 0);
    assert_int_equal(metrics_histogram_observe(m, bare, NULL, 0.25), 0);
    char *text = render(m);
    assert_line(text, "# TYPE pgpace_delivery_seconds histogram");
    assert_line(text, "pgpace_delivery_seconds_bucket{customer=\"acme\",le=\"0.005\"} 2");
    assert_line(text, "pgpace_delivery_seconds_bucket{customer=\"acme\",le=\"0.05\"} 3");
    assert_line(text, "pgpace_delivery_seconds_bucket{customer=\"acme\",le=\"0.5\"} 5");
    assert_line(text, "pgpace_delivery_seconds_bucket{customer=\"acme\",le=\"5\"} 5");
    assert_line(text, "pgpace_delivery_seconds_bucket{customer=\"acme\",le=\"+Inf\"} 6");
    assert_line(text, "pgpace_delivery_seconds_sum{customer=\"acme\"} 7.436");
    assert_line(text, "pgpace_delivery_seconds_count{customer=\"acme\"} 6");
    assert_line(text, "pgpace_claim_seconds_bucket{le=\"0.005\"} 0");
    assert_line(text, "pgpace_claim_seconds_bucket{le=\"0.05\"} 0");
    assert_line(text, "pgpace_claim_seconds_bucket{le=\"+Inf\"} 1");
    assert_line(text, "pgpace_claim_seconds_sum 0.25");
    assert_line(text, "pgpace_claim_seconds_count 1");
    char *out = NULL;
    int rc = promtool_check(text, &out);
    if (rc != 0)
        fail_msg("promtool check metrics: %d: %s\n%s", rc, out, text);
    free(out);
    free(text);
    metrics_free(m);
}

/* top_n = 2: the first two customers seen (in any family) keep their series; the rest add up
 * in customer="_other", for counters, histograms and (by difference) gauges. */
static void customer_top_n_folds_the_rest(void **state)
{
    metrics *m = new_registry(2, 0);
    int sent = reg(m, (metrics_family_def){.name = "pgpace_sent_total",
                                           .help = "Sent.",
                                           .type = METRICS_COUNTER,
                                           .labels = {"outcome", "customer"}});
    int due = reg(m, (metrics_family_def){.name = "pgpace_due_items",
                                          .help = "Due.",
                                          .type = METRICS_GAUGE,
                                          .labels = {"customer"}});
    int lat = reg(m, (metrics_family_def){.name = "pgpace_latency_seconds",
                                          .help = "Latency.",
                                          .type = METRICS_HISTOGRAM,
                                          .labels = {"customer"},
                                          .buckets = latency_buckets,
                                          .nbuckets = 1});
    int other = reg(m, (metrics_family_def){.name = "pgpace_errors_total",
                                            .help = "No customer label.",
                                            .type = METRICS_COUNTER,
                                            .labels = {"kind"}});
    /* "b" is seen first through the gauge: order of first use across the registry counts. */
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"b"}, 1), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"ok", "a"}, 1), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"ok", "c"}, 2), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"ok", "d"}, 3), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"failed", "d"}, 1), 0);
    assert_int_equal(metrics_counter_add(m, sent, (const char *[]){"ok", "b"}, 1), 0);
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"c"}, 5), 0);
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"d"}, 7), 0);
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"c"}, 1), 0); /* 1 + 7 */
    assert_int_equal(metrics_gauge_add(m, due, (const char *[]){"e"}, 2), 0); /* + 2 */
    assert_int_equal(metrics_histogram_observe(m, lat, (const char *[]){"e"}, 0.001), 0);
    assert_int_equal(metrics_histogram_observe(m, lat, (const char *[]){"c"}, 1), 0);
    /* Labels other than "customer" are never folded. */
    for (int i = 0; i < 5; i++) {
        char kind[8];
        snprintf(kind, sizeof kind, "k%d", i);
        assert_int_equal(metrics_counter_add(m, other, (const char *[]){kind}, 1), 0);
    }
    assert_int_equal(metrics_customers_kept(m), 2);

    char *text = render(m);
    assert_line(text, "pgpace_sent_total{outcome=\"ok\",customer=\"a\"} 1");
    assert_line(text, "pgpace_sent_total{outcome=\"ok\",customer=\"b\"} 1");
    assert_line(text, "pgpace_sent_total{outcome=\"ok\",customer=\"_other\"} 5");
    assert_line(text, "pgpace_sent_total{outcome=\"failed\",customer=\"_other\"} 1");
    assert_line(text, "pgpace_due_items{customer=\"b\"} 1");
    assert_line(text, "pgpace_due_items{customer=\"_other\"} 10");
    assert_line(text, "pgpace_latency_seconds_bucket{customer=\"_other\",le=\"0.005\"} 1");
    assert_line(text, "pgpace_latency_seconds_count{customer=\"_other\"} 2");
    assert_line(text, "pgpace_errors_total{kind=\"k4\"} 1");
    assert_null(strstr(text, "customer=\"c\""));
    assert_null(strstr(text, "customer=\"d\""));
    assert_null(strstr(text, "customer=\"e\""));
    char *out = NULL;
    int rc = promtool_check(text, &out);
    if (rc != 0)
        fail_msg("promtool check metrics: %d: %s\n%s", rc, out, text);
    free(out);
    free(text);
    metrics_free(m);

    /* top_n = 0 folds every customer. */
    m = new_registry(0, 0);
    due = reg(m, (metrics_family_def){.name = "pgpace_due_items",
                                      .help = "Due.",
                                      .type = METRICS_GAUGE,
                                      .labels = {"customer"}});
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"a"}, 3), 0);
    text = render(m);
    assert_line(text, "pgpace_due_items{customer=\"_other\"} 3");
    free(text);
    metrics_free(m);
}

static void bad_definitions(void **state)
{
    metrics *m = new_registry(1, 0);
    int id = -1;
    const double unsorted[] = {1, 0.5};
    const double with_inf[] = {1, INFINITY};
    const metrics_family_def bad[] = {
        {.name = "", .help = "h", .type = METRICS_COUNTER},
        {.name = "9lives", .help = "h", .type = METRICS_COUNTER},
        {.name = "has-dash", .help = "h", .type = METRICS_COUNTER},
        {.name = "ok_total", .help = NULL, .type = METRICS_COUNTER},
        {.name = "ok_total", .help = "h", .type = (metrics_type)7},
        {.name = "ok_total", .help = "h", .type = METRICS_COUNTER, .labels = {"bad-label"}},
        {.name = "ok_total", .help = "h", .type = METRICS_COUNTER, .labels = {"__reserved"}},
        {.name = "ok_total", .help = "h", .type = METRICS_COUNTER, .labels = {"x:y"}},
        {.name = "ok_total", .help = "h", .type = METRICS_COUNTER, .labels = {"a", "a"}},
        {.name = "ok_seconds",
         .help = "h",
         .type = METRICS_HISTOGRAM,
         .labels = {"le"},
         .buckets = latency_buckets,
         .nbuckets = 2},
        {.name = "ok_seconds",
         .help = "h",
         .type = METRICS_HISTOGRAM,
         .labels = {NULL},
         .buckets = NULL,
         .nbuckets = 0},
        {.name = "ok_seconds",
         .help = "h",
         .type = METRICS_HISTOGRAM,
         .labels = {NULL},
         .buckets = unsorted,
         .nbuckets = 2},
        {.name = "ok_seconds",
         .help = "h",
         .type = METRICS_HISTOGRAM,
         .labels = {NULL},
         .buckets = with_inf,
         .nbuckets = 2},
        {.name = "ok_total",
         .help = "h",
         .type = METRICS_COUNTER,
         .labels = {NULL},
         .buckets = latency_buckets,
         .nbuckets = 2},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        if (metrics_register(m, &bad[i], &id) != -EINVAL)
            fail_msg("definition %zu (%s) was accepted", i, bad[i].name);
    }
    int ok = reg(m, (metrics_family_def){.name = "ns:ok_total",
                                         .help = "h",
                                         .type = METRICS_COUNTER,
                                         .labels = {"a", "b", "c"}});
    assert_int_equal(ok, 0);
    assert_int_equal(
        metrics_register(
            m, &(metrics_family_def){.name = "ns:ok_total", .help = "again", .type = METRICS_GAUGE},
            &id),
        -EINVAL);
    metrics_free(m);
    metrics *none = NULL;
    assert_int_equal(metrics_new(&(metrics_options){.customer_top_n = -1}, &none), -EINVAL);
}

static void bad_updates(void **state)
{
    metrics *m = new_registry(1, 3);
    int c = reg(
        m, (metrics_family_def){
               .name = "c_total", .help = "h", .type = METRICS_COUNTER, .labels = {"customer"}});
    int g = reg(m, (metrics_family_def){
                       .name = "g", .help = "h", .type = METRICS_GAUGE, .labels = {"x", "y"}});
    int h = reg(m, (metrics_family_def){.name = "h_seconds",
                                        .help = "h",
                                        .type = METRICS_HISTOGRAM,
                                        .labels = {NULL},
                                        .buckets = latency_buckets,
                                        .nbuckets = 1});
    const char *a[] = {"a"};
    assert_int_equal(metrics_counter_add(m, c, a, -1), -EINVAL);
    assert_int_equal(metrics_counter_add(m, c, a, NAN), -EINVAL);
    assert_int_equal(metrics_counter_add(m, c, a, INFINITY), -EINVAL);
    assert_int_equal(metrics_counter_add(m, c, NULL, 1), -EINVAL);
    assert_int_equal(metrics_counter_add(m, c + 100, a, 1), -EINVAL);
    assert_int_equal(metrics_counter_add(m, -1, a, 1), -EINVAL);
    assert_int_equal(metrics_gauge_set(m, c, a, 1), -EINVAL);   /* wrong type */
    assert_int_equal(metrics_counter_add(m, g, a, 1), -EINVAL); /* wrong type */
    assert_int_equal(metrics_gauge_set(m, g, (const char *[]){"x", NULL}, 1), -EINVAL);
    assert_int_equal(metrics_histogram_observe(m, h, NULL, NAN), -EINVAL);
    assert_int_equal(metrics_histogram_observe(m, h, NULL, INFINITY), 0); /* +Inf bucket only */
    /* max_series = 3: a fourth series is refused, existing ones keep updating. */
    assert_int_equal(metrics_gauge_set(m, g, (const char *[]){"1", "1"}, 1), 0);
    assert_int_equal(metrics_gauge_set(m, g, (const char *[]){"1", "2"}, 1), 0);
    assert_int_equal(metrics_gauge_set(m, g, (const char *[]){"1", "3"}, 1), 0);
    assert_int_equal(metrics_gauge_set(m, g, (const char *[]){"1", "4"}, 1), -ENOSPC);
    assert_int_equal(metrics_gauge_set(m, g, (const char *[]){"1", "3"}, 9), 0);
    char *text = render(m);
    assert_line(text, "g{x=\"1\",y=\"3\"} 9");
    assert_null(strstr(text, "y=\"4\""));
    assert_line(text, "h_seconds_bucket{le=\"0.005\"} 0");
    assert_line(text, "h_seconds_bucket{le=\"+Inf\"} 1");
    assert_line(text, "h_seconds_sum +Inf");
    free(text);
    metrics_free(m);
}

/* The check itself must catch a broken exposition, or the other tests prove nothing. */
static void promtool_rejects_broken_text(void **state)
{
    char *out = NULL;
    int rc = promtool_check("# TYPE x counter\nx{a=\"unterminated} 1\n", &out);
    assert_int_not_equal(rc, 0);
    free(out);
}

/* Many customers and families at once, rendered twice (render does not change anything). */
static void large_render_is_stable_and_valid(void **state)
{
    metrics *m = new_registry(100, 0);
    int sent = reg(m, (metrics_family_def){.name = "pgpace_deliveries_total",
                                           .help = "Deliveries.",
                                           .type = METRICS_COUNTER,
                                           .labels = {"customer", "outcome"}});
    int due = reg(m, (metrics_family_def){.name = "pgpace_due_items",
                                          .help = "Due.",
                                          .type = METRICS_GAUGE,
                                          .labels = {"customer"}});
    int lat = reg(m, (metrics_family_def){.name = "pgpace_delivery_seconds",
                                          .help = "Latency.",
                                          .type = METRICS_HISTOGRAM,
                                          .labels = {"customer"},
                                          .buckets = latency_buckets,
                                          .nbuckets = PGP_ARRAY_LEN(latency_buckets)});
    for (int i = 0; i < 500; i++) {
        char name[32];
        snprintf(name, sizeof name, "customer-%03d", i);
        assert_int_equal(metrics_counter_add(m, sent, (const char *[]){name, "success"}, 1), 0);
        assert_int_equal(metrics_gauge_set(m, due, (const char *[]){name}, i), 0);
        assert_int_equal(metrics_histogram_observe(m, lat, (const char *[]){name}, i / 100.0), 0);
    }
    char *a = render(m);
    char *b = render(m);
    assert_string_equal(a, b);
    assert_line(a, "pgpace_deliveries_total{customer=\"customer-099\",outcome=\"success\"} 1");
    assert_line(a, "pgpace_deliveries_total{customer=\"_other\",outcome=\"success\"} 400");
    /* Sum of 100..499. */
    assert_line(a, "pgpace_due_items{customer=\"_other\"} 119800");
    assert_line(a, "pgpace_delivery_seconds_count{customer=\"_other\"} 400");
    assert_int_equal(count_substr(a, "pgpace_due_items{"), 101);
    char *out = NULL;
    int rc = promtool_check(a, &out);
    if (rc != 0)
        fail_msg("promtool check metrics: %d: %s", rc, out);
    free(out);
    free(a);
    free(b);
    metrics_free(m);
}

/* A gauge of every customer (owner_folds): the customers kept have their series; the folded
 * ones keep nothing, however many (no private series, so max_series never runs out and memory
 * does not grow with them), and _other is what the owner sets. Before owner_folds, folded gauges
 * beyond max_series were dropped and _other summed only the first ones. */
static void owner_folded_gauges_keep_nothing_per_customer(void **state)
{
    metrics *m = new_registry(2, 50);
    int due = reg(m, (metrics_family_def){.name = "pgpace_due_items",
                                          .help = "Due.",
                                          .type = METRICS_GAUGE,
                                          .labels = {"customer"},
                                          .owner_folds = true});
    int plain = reg(m, (metrics_family_def){.name = "pgpace_plain_items",
                                            .help = "Folded by the registry.",
                                            .type = METRICS_GAUGE,
                                            .labels = {"customer"}});
    /* _other takes no place among the customers kept. */
    assert_true(metrics_customer_kept(m, METRICS_OTHER_CUSTOMER));
    assert_int_equal(metrics_customers_kept(m), 0);
    assert_true(metrics_customer_kept(m, "a"));
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"b"}, 2), 0);
    assert_int_equal(metrics_customers_kept(m), 2);
    assert_false(metrics_customer_kept(m, "c"));
    assert_true(metrics_customer_kept(m, "b"));
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){"a"}, 1), 0);
    char name[16];
    for (int i = 0; i < 10000; i++) {
        snprintf(name, sizeof name, "c%d", i);
        assert_int_equal(metrics_gauge_set(m, due, (const char *[]){name}, 3), 0);
        assert_int_equal(metrics_gauge_add(m, due, (const char *[]){name}, 1), 0);
    }
    char *text = render(m);
    assert_line(text, "pgpace_due_items{customer=\"a\"} 1");
    assert_line(text, "pgpace_due_items{customer=\"b\"} 2");
    assert_null(strstr(text, "customer=\"_other\""));
    assert_null(strstr(text, "customer=\"c1\""));
    free(text);
    /* The owner's sum. */
    assert_int_equal(metrics_gauge_set(m, due, (const char *[]){METRICS_OTHER_CUSTOMER}, 40000), 0);
    text = render(m);
    assert_line(text, "pgpace_due_items{customer=\"_other\"} 40000");
    free(text);
    /* A family folded by the registry still keeps a private series per folded customer, and runs
     * out of them at max_series. */
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++) {
        snprintf(name, sizeof name, "c%d", i);
        rc = metrics_gauge_set(m, plain, (const char *[]){name}, 1);
    }
    assert_int_equal(rc, -ENOSPC);
    metrics_free(m);
}

/* Endpoints (0018): an endpoint's value "acme/crm" renders as customer and endpoint labels, a
 * customer's own receiver with endpoint="default" while marked (and as before once unmarked),
 * a customer alone as before; each endpoint takes one place among the customers kept; promtool
 * accepts a family whose series have these label sets side by side. A family with a customer
 * label may not define its own endpoint label. */
static void endpoints_render_customer_and_endpoint(void **state)
{
    (void)state;
    metrics *m = new_registry(3, 0);
    int deliveries = reg(m, (metrics_family_def){.name = "pgpace_deliveries_total",
                                                 .help = "Deliveries.",
                                                 .type = METRICS_COUNTER,
                                                 .labels = {"customer", "outcome"}});
    int due = reg(m, (metrics_family_def){.name = "pgpace_queue_due",
                                          .help = "Due.",
                                          .type = METRICS_GAUGE,
                                          .labels = {"customer"}});
    const char *crm[] = {"acme/crm", "success"}, *own[] = {"acme", "success"},
               *solo[] = {"solo", "success"}, *late[] = {"late/x", "success"};
    assert_int_equal(metrics_counter_add(m, deliveries, crm, 2), 0);
    assert_int_equal(metrics_counter_add(m, deliveries, own, 1), 0);
    assert_int_equal(metrics_counter_add(m, deliveries, solo, 4), 0);
    assert_int_equal(metrics_counter_add(m, deliveries, late, 8), 0); /* the 4th value: folded */
    const char *crm_due[] = {"acme/crm"};
    assert_int_equal(metrics_gauge_set(m, due, crm_due, 5), 0);
    char *text = render(m);
    assert_line(text, "pgpace_deliveries_total{customer=\"acme\",endpoint=\"crm\",outcome="
                      "\"success\"} 2");
    assert_line(text, "pgpace_deliveries_total{customer=\"acme\",outcome=\"success\"} 1");
    assert_line(text, "pgpace_deliveries_total{customer=\"solo\",outcome=\"success\"} 4");
    assert_line(text, "pgpace_deliveries_total{customer=\"_other\",outcome=\"success\"} 8");
    assert_line(text, "pgpace_queue_due{customer=\"acme\",endpoint=\"crm\"} 5");
    char *out = NULL;
    int rc = promtool_check(text, &out);
    if (rc != 0)
        fail_msg("promtool: %s\n%s", out, text);
    free(out);
    free(text);

    /* acme has endpoints: its own receiver is "default"; solo is left alone. */
    assert_int_equal(metrics_customer_endpoints(m, "acme", true), 0);
    assert_int_equal(metrics_customer_endpoints(m, "solo", false), 0);
    assert_int_equal(metrics_customer_endpoints(m, "acme/crm", true), 0); /* no-op */
    text = render(m);
    assert_line(text, "pgpace_deliveries_total{customer=\"acme\",endpoint=\"default\","
                      "outcome=\"success\"} 1");
    assert_line(text, "pgpace_deliveries_total{customer=\"acme\",endpoint=\"crm\",outcome="
                      "\"success\"} 2");
    assert_line(text, "pgpace_deliveries_total{customer=\"solo\",outcome=\"success\"} 4");
    assert_int_equal(count_substr(text, "endpoint=\"default\""), 1);
    rc = promtool_check(text, &out);
    if (rc != 0)
        fail_msg("promtool: %s\n%s", out, text);
    free(out);
    free(text);
    /* Its endpoints gone: as before. */
    assert_int_equal(metrics_customer_endpoints(m, "acme", false), 0);
    text = render(m);
    assert_line(text, "pgpace_deliveries_total{customer=\"acme\",outcome=\"success\"} 1");
    free(text);

    int id = -1;
    assert_int_equal(metrics_register(m,
                                      &(metrics_family_def){.name = "x_total",
                                                            .help = "x",
                                                            .type = METRICS_COUNTER,
                                                            .labels = {"customer", "endpoint"}},
                                      &id),
                     -EINVAL);
    metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counter_gauge_exact_lines),
        cmocka_unit_test(escaping),
        cmocka_unit_test(histogram_lines),
        cmocka_unit_test(customer_top_n_folds_the_rest),
        cmocka_unit_test(endpoints_render_customer_and_endpoint),
        cmocka_unit_test(owner_folded_gauges_keep_nothing_per_customer),
        cmocka_unit_test(bad_definitions),
        cmocka_unit_test(bad_updates),
        cmocka_unit_test(promtool_rejects_broken_text),
        cmocka_unit_test(large_render_is_stable_and_valid),
    };
    return TL_RUN(tests, NULL, NULL);
}
