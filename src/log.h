/* log.h - structured, level-gated logging: one line per event, logfmt or JSON.
 *
 * Contract: LOG_INFO("event", LOG_S("customer", name), LOG_I("items", n)) writes one line to
 * stderr with a timestamp, the level, the event name and the fields, escaped for the chosen
 * format. Callers pass identifiers and counts only: payloads and secrets never reach a log
 * call (tests grep the output for them). log_setup() is called by main before anything logs
 * and again on a config reload; logging from one thread only (the loop).
 */
#ifndef PGPACE_LOG_H
#define PGPACE_LOG_H

#include "config.h"

#include <stdint.h>

typedef enum log_kv_type { LOG_KV_STR, LOG_KV_INT, LOG_KV_DBL } log_kv_type;

typedef struct log_kv {
    const char *key;
    log_kv_type type;
    const char *s;
    long long i;
    double d;
} log_kv;

#define LOG_S(k, v) ((log_kv){.key = (k), .type = LOG_KV_STR, .s = (v)})
#define LOG_I(k, v) ((log_kv){.key = (k), .type = LOG_KV_INT, .i = (long long)(v)})
#define LOG_D(k, v) ((log_kv){.key = (k), .type = LOG_KV_DBL, .d = (double)(v)})

void log_setup(log_level level, log_format format);
int log_enabled(log_level level);
void log_write(log_level level, const char *event, const log_kv *kv, size_t n);

/* Every call passes at least one field (ISO C needs one argument for "..."). */
#define LOG_AT_(lvl, event, ...)                                                                   \
    do {                                                                                           \
        if (log_enabled(lvl)) {                                                                    \
            const log_kv log_kv_[] = {__VA_ARGS__};                                                \
            log_write(lvl, event, log_kv_, sizeof log_kv_ / sizeof log_kv_[0]);                    \
        }                                                                                          \
    } while (0)
#define LOG_DEBUG(event, ...) LOG_AT_(LOG_LEVEL_DEBUG, event, __VA_ARGS__)
#define LOG_INFO(event, ...)  LOG_AT_(LOG_LEVEL_INFO, event, __VA_ARGS__)
#define LOG_WARN(event, ...)  LOG_AT_(LOG_LEVEL_WARN, event, __VA_ARGS__)
#define LOG_ERROR(event, ...) LOG_AT_(LOG_LEVEL_ERROR, event, __VA_ARGS__)

#endif
