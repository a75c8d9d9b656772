/* status_client.c - GET /v1/status and / for integration tests (status_client.h). */
#include "status_client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- HTTP ---------------------------------------------------------------------------------- */

/* A growing NUL-terminated text. */
typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void text_add(text *t, const char *data, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *s = realloc(t->s, cap);
        assert_non_null(s);
        t->s = s;
        t->cap = cap;
    }
    memcpy(t->s + t->len, data, n);
    t->len += n;
    t->s[t->len] = '\0';
}

/* The text (owned; "" when nothing came). */
static char *text_take(text *t)
{
    if (!t->s)
        text_add(t, "", 0);
    return t->s;
}

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    text_add(arg, data, size * n);
    return size * n;
}

sc_answer sc_http_get(int port, const char *path, const char *authorization, const char *userpwd)
{
    char url[1024];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    text body = {0}, head = {0};
    struct curl_slist *h = NULL;
    char auth[512];
    if (authorization) {
        snprintf(auth, sizeof auth, "Authorization: %s", authorization);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (userpwd) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERPWD, userpwd);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &head);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    sc_answer a = {0};
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    a.body = text_take(&body);
    a.head = text_take(&head);
    if (rc != CURLE_OK)
        fail_msg("GET %s: %s", path, curl_easy_strerror(rc));
    return a;
}

void sc_answer_free(sc_answer *a)
{
    free(a->body);
    free(a->head);
    a->body = a->head = NULL;
}

const char *sc_header(const sc_answer *a, const char *name, char *buf, size_t len)
{
    buf[0] = '\0';
    size_t n = strlen(name);
    for (const char *line = a->head; line && *line;) {
        const char *end = strstr(line, "\r\n");
        size_t l = end ? (size_t)(end - line) : strlen(line);
        if (l > n && strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            snprintf(buf, len, "%.*s", (int)(l - (size_t)(v - line)), v);
            return buf;
        }
        line = end ? end + 2 : line + l;
    }
    return buf;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

char *sc_dump(const json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    return s ? s : strdup("(none)");
}

json_t *sc_get(const json_t *o, const char *key)
{
    json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    if (!v)
        fail_msg("no field \"%s\" in %s", key, sc_dump(o));
    return v;
}

double sc_num(const json_t *o, const char *key)
{
    json_t *v = sc_get(o, key);
    if (!json_is_number(v))
        fail_msg("\"%s\" is not a number in %s", key, sc_dump(o));
    return json_number_value(v);
}

const char *sc_str(const json_t *o, const char *key)
{
    json_t *v = sc_get(o, key);
    if (!json_is_string(v))
        fail_msg("\"%s\" is not a string in %s", key, sc_dump(o));
    return json_string_value(v);
}

bool sc_bool(const json_t *o, const char *key)
{
    json_t *v = sc_get(o, key);
    if (!json_is_boolean(v))
        fail_msg("\"%s\" is not a boolean in %s", key, sc_dump(o));
    return json_is_true(v);
}

void sc_null(const json_t *o, const char *key)
{
    if (!json_is_null(sc_get(o, key)))
        fail_msg("\"%s\" is not null in %s", key, sc_dump(o));
}

json_t *sc_arr(const json_t *o, const char *key)
{
    json_t *v = sc_get(o, key);
    if (!json_is_array(v))
        fail_msg("\"%s\" is not an array in %s", key, sc_dump(o));
    return v;
}

json_t *sc_find(const json_t *o, const char *key, const char *field, const char *value)
{
    json_t *arr = sc_arr(o, key), *e;
    size_t i;
    json_array_foreach(arr, i, e)
    {
        json_t *v = json_object_get(e, field);
        if (json_is_string(v) && strcmp(json_string_value(v), value) == 0)
            return e;
    }
    return NULL;
}

json_t *sc_customer(const json_t *j, const char *name)
{
    json_t *c = sc_find(j, "customers", "name", name);
    if (!c)
        fail_msg("customer %s is not listed: %s", name, sc_dump(j));
    return c;
}

bool sc_leading_with(const json_t *j, const char *name)
{
    return strcmp(sc_str(j, "role"), "leader") == 0 && sc_bool(j, "live") &&
           sc_find(j, "customers", "name", name) != NULL;
}

bool sc_counted(const json_t *c)
{
    return json_is_string(sc_get(c, "counts_at"));
}

char *sc_names(const json_t *j)
{
    text t = {0};
    json_t *arr = sc_arr(j, "customers"), *e;
    size_t i;
    json_array_foreach(arr, i, e)
    {
        const char *name = sc_str(e, "name");
        text_add(&t, name, strlen(name));
        text_add(&t, "\n", 1);
    }
    return text_take(&t);
}

/* ---- GET /v1/status ------------------------------------------------------------------------ */

json_t *sc_status_get(int port, const char *query)
{
    char path[1024];
    snprintf(path, sizeof path, "/v1/status%s%s", query && *query ? "?" : "", query ? query : "");
    sc_answer a = sc_http_get(port, path, NULL, NULL);
    if (a.status != 200)
        fail_msg("GET %s: %ld %s", path, a.status, a.body);
    json_error_t e;
    json_t *j = json_loads(a.body, 0, &e);
    if (!json_is_object(j))
        fail_msg("GET %s: not a JSON object (%s): %s", path, e.text, a.body);
    sc_answer_free(&a);
    return j;
}

typedef struct status_wait {
    int port;
    const char *query;
    sc_pred pred;
    void *arg;
    json_t *last;
} status_wait;

static int status_wait_cond(void *p)
{
    status_wait *w = p;
    json_decref(w->last);
    w->last = sc_status_get(w->port, w->query);
    return w->pred(w->last, w->arg);
}

json_t *sc_wait_status(int port, const char *query, sc_pred pred, void *arg, int timeout_ms,
                       const char *what)
{
    status_wait w = {port, query, pred, arg, NULL};
    if (!tl_wait_until(status_wait_cond, &w, timeout_ms))
        fail_msg("%s: not within %d ms; the last answer: %s", what, timeout_ms, sc_dump(w.last));
    return w.last;
}

/* ---- time ---------------------------------------------------------------------------------- */

double sc_iso_seconds(const char *s)
{
    struct tm tm = {0};
    const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest)
        fail_msg("not an ISO time: %s", s);
    double frac = 0;
    if (*rest == '.') {
        char *end;
        frac = strtod(rest, &end);
        rest = end;
    }
    if (strcmp(rest, "Z") != 0)
        fail_msg("not a UTC ISO time: %s", s);
    return (double)timegm(&tm) + frac;
}

double sc_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
