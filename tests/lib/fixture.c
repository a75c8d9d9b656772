/* fixture.c - a running dispatcher for integration tests. */
#include "fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

fx *fx_start(void)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->db = tl_fresh_db(1);
    f->recv = receiver_start();
    assert_non_null(f->recv);
    return f;
}

int fx_setup(void **state)
{
    *state = fx_start();
    return 0;
}

int fx_teardown(void **state)
{
    fx_finish(*state);
    return 0;
}

int64_t fx_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Builds the test config text: defaults merged with extra_ini. */
static void build_config(fx *f, const char *extra_ini, char *ini, size_t size);

void fx_write_config(fx *f, const char *extra_ini)
{
    char ini[4096];
    build_config(f, extra_ini, ini, sizeof ini);
    if (!f->config_path[0]) {
        char *path = tl_temp_file(ini);
        snprintf(f->config_path, sizeof f->config_path, "%s", path);
        free(path);
        return;
    }
    FILE *out = fopen(f->config_path, "w");
    assert_non_null(out);
    fputs(ini, out);
    fclose(out);
}

void fx_run(fx *f, const char *extra_ini)
{
    fx_run_env(f, extra_ini, NULL);
}

void fx_run_env(fx *f, const char *extra_ini, const char *const *env)
{
    fx_write_config(f, extra_ini);
    f->svc = tl_service_start(TL_ARGV("--config", f->config_path, "run"), env);
    f->running = true;
}

static void build_config(fx *f, const char *extra_ini, char *ini, size_t size)
{
    /* Test defaults: short lease, ticks and backoff so behaviour shows within seconds; the
     * loopback receiver allowed explicitly (SSRF protection is on by default). Keys given in
     * extra_ini replace these (the parser refuses a key set twice, so we merge here). */
    static const char *const defaults[][3] = {
        {"dispatcher", "lease_seconds", "5"},       {"dispatcher", "standby_retry_ms", "200"},
        {"dispatcher", "batch_tick_ms", "1000"},    {"dispatcher", "backstop_scan_ms", "1000"},
        {"dispatcher", "retry_base_ms", "100"},     {"dispatcher", "retry_cap_ms", "1000"},
        {"dispatcher", "drain_timeout_ms", "3000"}, {"delivery", "allow_cidrs", "127.0.0.0/8"},
        {"delivery", "request_timeout_ms", "3000"}, {"log", "level", "debug"},
        {"http", "listen", "127.0.0.1:0"},
    };
    const char *extra = extra_ini ? extra_ini : "";
    /* "database.conninfo = ..." in extra_ini replaces the fresh database's (e.g. a proxy). */
    const char *own = strstr(extra, "database.conninfo =");
    size_t len;
    if (own) {
        const char *v = own + strlen("database.conninfo =");
        len = (size_t)snprintf(ini, size, "[database]\nconninfo =%.*s\n", (int)strcspn(v, "\n"), v);
    } else {
        len = (size_t)snprintf(ini, size, "[database]\nconninfo = %s\n", f->db->conninfo);
    }
    const char *sections[] = {"dispatcher", "delivery", "health", "log", "http"};
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        len += (size_t)snprintf(ini + len, size - len, "[%s]\n", sections[s]);
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
            if (strcmp(defaults[i][0], sections[s]) != 0)
                continue;
            char key[80];
            snprintf(key, sizeof key, "%s =", defaults[i][1]);
            if (!strstr(extra, key))
                len += (size_t)snprintf(ini + len, size - len, "%s = %s\n", defaults[i][1],
                                        defaults[i][2]);
        }
        /* Lines of extra_ini that belong to this section: "section.key = value". */
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%s.", sections[s]);
        for (const char *line = extra; *line;) {
            const char *end = strchr(line, '\n');
            size_t n = end ? (size_t)(end - line) : strlen(line);
            if (strncmp(line, prefix, strlen(prefix)) == 0)
                len += (size_t)snprintf(ini + len, size - len, "%.*s\n", (int)(n - strlen(prefix)),
                                        line + strlen(prefix));
            line += n + (end ? 1 : 0);
        }
    }
    assert_true(len < size);
}

void fx_stop_service(fx *f, int timeout_ms)
{
    if (!f->running)
        return;
    int status = tl_service_signal(&f->svc, SIGTERM, 1, timeout_ms);
    f->running = false;
    if (status != 0) {
        char *log = tl_service_log(&f->svc);
        print_error("pgpace run exited %d; log:\n%s\n", status, log);
        free(log);
        fail();
    }
}

void fx_finish(fx *f)
{
    if (!f)
        return;
    tl_service_stop(&f->svc); /* kills it if still running; removes the log file */
    if (f->config_path[0])
        unlink(f->config_path);
    receiver_stop(f->recv);
    tl_drop_db(f->db);
    free(f);
}

void fx_customer(fx *f, const char *name, const char *const *args)
{
    char url[256], path[160];
    snprintf(path, sizeof path, "/c/%s", name);
    receiver_url(f->recv, path, url, sizeof url);
    const char *argv[40] = {"--db", f->db->conninfo, "customer", "set", name, "--url", url};
    size_t n = 7;
    for (; args && *args && n < 39; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    if (p.status != 0)
        fail_msg("customer set %s failed: %s", name, p.err);
    tl_proc_free(&p);
}

void fx_endpoint(fx *f, const char *customer, const char *name, const char *const *args)
{
    if (!f->config_path[0])
        fx_write_config(f, NULL);
    char url[256], path[200];
    snprintf(path, sizeof path, "/e/%s/%s", customer, name);
    receiver_url(f->recv, path, url, sizeof url);
    const char *argv[48] = {"--config", f->config_path, "endpoint", "add",
                            customer,   name,           "--url",    url};
    size_t n = 8;
    for (; args && *args && n < 47; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    tl_proc p = tl_pgpace(argv, NULL, NULL);
    if (p.status != 0)
        fail_msg("endpoint add %s %s failed: %s", customer, name, p.err);
    tl_proc_free(&p);
}

long long fx_enqueue(fx *f, const char *customer, const char *carrier, int n)
{
    long long first = 0;
    for (int i = 0; i < n; i++) {
        long long id = tl_query_int(
            f->db->conn, "SELECT pgpace.enqueue('%s', '{\"n\": %d}', carrier => %s%s%s)", customer,
            i, carrier ? "'" : "", carrier ? carrier : "NULL", carrier ? "'" : "");
        if (i == 0)
            first = id;
    }
    return first;
}

void fx_enqueue_many(fx *f, const char *customer, int n)
{
    tl_exec(f->db->conn,
            "SELECT count(pgpace.enqueue('%s', jsonb_build_object('n', i)))"
            "  FROM generate_series(1, %d) i",
            customer, n);
}

char *fx_log(fx *f)
{
    return tl_service_log(&f->svc);
}

typedef struct log_wait {
    fx *f;
    const char *needle;
} log_wait;

static int log_has(void *arg)
{
    log_wait *w = arg;
    char *log = tl_service_log(&w->f->svc);
    int found = strstr(log, w->needle) != NULL;
    free(log);
    return found;
}

int fx_wait_log(fx *f, const char *needle, int timeout_ms)
{
    log_wait w = {f, needle};
    return tl_wait_until(log_has, &w, timeout_ms);
}

char *fx_metrics(fx *f)
{
    assert_true(fx_wait_log(f, "event=http_listening", 10000));
    char *log = fx_log(f);
    const char *p = strstr(log, "event=http_listening");
    const char *port = p ? strstr(p, " port=") : NULL;
    assert_non_null(port);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port + 6))};
    free(log);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    ssize_t got;
    while (len < cap && (got = read(fd, buf + len, cap - len)) > 0)
        len += (size_t)got;
    close(fd);
    buf[len] = '\0';
    return buf;
}

int fx_admin_port(fx *f)
{
    assert_true(fx_wait_log(f, "event=http_listening", 10000));
    char *log = fx_log(f);
    const char *p = strstr(strstr(log, "event=http_listening"), "port=");
    int port = p ? atoi(p + 5) : 0;
    free(log);
    assert_true(port > 0);
    return port;
}

double fx_metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

typedef struct metric_wait {
    fx *f;
    const char *series;
    double want;
} metric_wait;

static int metric_is(void *arg)
{
    metric_wait *w = arg;
    char *m = fx_metrics(w->f);
    double v = fx_metric(m, w->series);
    free(m);
    return v == w->want;
}

int fx_wait_metric(fx *f, const char *series, double want, int timeout_ms)
{
    metric_wait w = {.f = f, .series = series, .want = want};
    return tl_wait_until(metric_is, &w, timeout_ms);
}
