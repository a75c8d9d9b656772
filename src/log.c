/* log.c - logfmt / JSON line writer for log.h. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Set at start-up and on reload by main, read by the loop thread only. */
static struct {
    log_level level;
    log_format format;
} log_state = {LOG_LEVEL_INFO, LOG_FORMAT_LOGFMT};

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_setup(log_level level, log_format format)
{
    log_state.level = level;
    log_state.format = format;
}

int log_enabled(log_level level)
{
    return level >= log_state.level;
}

static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* logfmt: bare when safe, else quoted with JSON-style escapes. */
static void put_logfmt_value(FILE *f, const char *s)
{
    int bare = *s != '\0';
    for (const unsigned char *p = (const unsigned char *)s; *p && bare; p++)
        bare = *p > 0x20 && *p != '"' && *p != '=' && *p != '\\' && *p < 0x7f;
    if (bare)
        fputs(s, f);
    else
        put_json_string(f, s);
}

void log_write(log_level level, const char *event, const log_kv *kv, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t len = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + len, sizeof when - len, ".%03ldZ", ts.tv_nsec / 1000000);

    /* One buffered line, written with one call so concurrent processes don't interleave. */
    char buf[4096];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    if (!f)
        return;
    int json = log_state.format == LOG_FORMAT_JSON;
    if (json)
        fprintf(f, "{\"ts\":\"%s\",\"level\":\"%s\",\"event\":", when, level_names[level]);
    else
        fprintf(f, "ts=%s level=%s event=", when, level_names[level]);
    if (json)
        put_json_string(f, event);
    else
        put_logfmt_value(f, event);
    for (size_t i = 0; i < n; i++) {
        if (json) {
            fputc(',', f);
            put_json_string(f, kv[i].key);
            fputc(':', f);
        } else {
            fprintf(f, " %s=", kv[i].key);
        }
        switch (kv[i].type) {
        case LOG_KV_STR:
            if (!kv[i].s)
                fputs(json ? "null" : "\"\"", f);
            else if (json)
                put_json_string(f, kv[i].s);
            else
                put_logfmt_value(f, kv[i].s);
            break;
        case LOG_KV_INT:
            fprintf(f, "%lld", kv[i].i);
            break;
        case LOG_KV_DBL:
            fprintf(f, "%.3f", kv[i].d);
            break;
        }
    }
    if (json)
        fputc('}', f);
    fflush(f);
    long used = ftell(f);
    fclose(f);
    if (used < 0)
        return;
    if ((size_t)used >= sizeof buf - 1)
        used = (long)sizeof buf - 2;
    buf[used] = '\n';
    fwrite(buf, 1, (size_t)used + 1, stderr);
}
