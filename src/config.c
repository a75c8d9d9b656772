/* config.c - the key table, INI loading over defaults with file:line errors, and the dump. */
#include "config.h"

#include "netcheck.h"
#include "proxy.h"
#include "secret.h"
#include "validate.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* KEY_DURATION: a long long of milliseconds, written with a unit (250ms, 90s, 15m, 2h, 5d). */
typedef enum key_type {
    KEY_STRING,
    KEY_INT,
    KEY_BOOL,
    KEY_ENUM,
    KEY_DOUBLE,
    KEY_DURATION
} key_type;

typedef struct config_key {
    const char *section;
    const char *name;
    key_type type;
    size_t offset;
    size_t size;                /* KEY_STRING: buffer size including the NUL */
    const char *def;            /* default, as it would be written in the file */
    long long min, max;         /* KEY_INT bounds */
    const char *const *choices; /* KEY_ENUM: NULL-terminated, index = enum value */
    const double_range *range;  /* KEY_DOUBLE bounds, each inclusive or exclusive */
    /* For listings and docs (a future `pgpace config`); nothing reads it yet. */
    // cppcheck-suppress unusedStructMember
    const char *help;
} config_key;

const double_range config_throttle_decrease_range = {0.0, 1.0, false, false};
const double_range config_throttle_increase_range = {0.0, 1.0, false, true};
const double_range config_throttle_floor_range = {0.0, 1.0, false, true};

/* Enum fields are stored through an int; the enums have only small non-negative values. */
_Static_assert(sizeof(log_level) == sizeof(int), "log_level must be int-sized");
_Static_assert(sizeof(log_format) == sizeof(int), "log_format must be int-sized");

static const char *const level_names[] = {"debug", "info", "warn", "error", NULL};
static const char *const format_names[] = {"logfmt", "json", NULL};

#define STR(sec, key, def, help)                                                                   \
    {                                                                                              \
        sec, #key, KEY_STRING, offsetof(pgp_config, key), sizeof(((pgp_config *)0)->key), def, 0,  \
            0, NULL, NULL, help                                                                    \
    }
/* A string key whose name differs from its field (e.g. [http] listen -> http_listen). */
#define STRN(sec, name, key, def, help)                                                            \
    {                                                                                              \
        sec, name, KEY_STRING, offsetof(pgp_config, key), sizeof(((pgp_config *)0)->key), def, 0,  \
            0, NULL, NULL, help                                                                    \
    }

#define INT(sec, key, def, lo, hi, help)                                                           \
    {                                                                                              \
        sec, #key, KEY_INT, offsetof(pgp_config, key), 0, #def, lo, hi, NULL, NULL, help           \
    }
#define BOOL(sec, key, def, help)                                                                  \
    {                                                                                              \
        sec, #key, KEY_BOOL, offsetof(pgp_config, key), 0, #def, 0, 0, NULL, NULL, help            \
    }
#define ENUM(sec, key, field, def, names, help)                                                    \
    {                                                                                              \
        sec, key, KEY_ENUM, offsetof(pgp_config, field), 0, def, 0, 0, names, NULL, help           \
    }
/* A duration key (KEY_DURATION): def as written ("5d"), lo and hi in ms. */
#define DURATION(sec, name, key, def, lo, hi, help)                                                \
    {                                                                                              \
        sec, name, KEY_DURATION, offsetof(pgp_config, key), 0, def, lo, hi, NULL, NULL, help       \
    }
/* A double key; range: the address of its double_range. */
#define DOUBLE(sec, key, def, range, help)                                                         \
    {                                                                                              \
        sec, #key, KEY_DOUBLE, offsetof(pgp_config, key), 0, #def, 0, 0, NULL, range, help         \
    }

/* The one place where keys, defaults and bounds are defined; config/pgpace.ini.example
 * documents the same keys and a unit test keeps the two in step. */
static const config_key keys[] = {
    STR("database", conninfo, "", "libpq conninfo or URL; empty uses the PG* environment"),
    INT("database", statement_timeout_ms, 10000, 0, 3600000,
        "dispatcher statements cancelled after, ms; 0: server's"),

    STR("dispatcher", instance_name, "", "name in claimed_by and status; empty: host:pid"),
    INT("dispatcher", lease_seconds, 60, 1, 86400, "seconds a claim owns an item"),
    INT("dispatcher", standby_retry_ms, 1000, 50, 600000, "standby leader-lock retry, ms"),
    INT("dispatcher", batch_tick_ms, 60000, 100, 3600000, "batch-mode tick, ms"),
    INT("dispatcher", backstop_scan_ms, 5000, 100, 3600000, "scan for missed due customers, ms"),
    INT("dispatcher", wake_hot_per_s, 500, 0, 1000000,
        "wake-ups/s from which producers stop notifying and the leader polls; 0: never"),
    INT("dispatcher", claim_batch_max, 1000, 1, 100000, "most items claimed per statement"),
    INT("dispatcher", max_in_flight, 2000, 1, 1000000, "most deliveries outstanding at once"),
    INT("dispatcher", claim_ahead, 1000, 0, 100000,
        "items claimed per host beyond its free connections; 0: none"),
    INT("dispatcher", claim_ahead_ms, 1000, 10, 600000,
        "longest a claimed item waits for a connection, ms (at most a quarter of the lease)"),
    INT("dispatcher", carrier_max_per_round, 100, 1, 100000, "per-carrier cap per claim round"),
    INT("dispatcher", carrier_max_in_flight, 0, 0, 1000000, "per-carrier in-flight cap; 0: none"),
    INT("dispatcher", drain_timeout_ms, 30000, 0, 3600000, "SIGTERM wait for in-flight, ms"),
    INT("dispatcher", retry_base_ms, 1000, 1, 3600000, "first retry delay, ms"),
    INT("dispatcher", retry_cap_ms, 3600000, 1, 86400000, "largest retry delay, ms"),
    INT("dispatcher", reconnect_max_ms, 30000, 100, 600000, "database reconnect backoff cap, ms"),
    INT("dispatcher", keepalive_idle_s, 10, 1, 7200, "TCP keepalive idle time, s"),

    INT("delivery", connect_timeout_ms, 5000, 100, 600000, "HTTP connect timeout, ms"),
    INT("delivery", request_timeout_ms, 30000, 100, 3600000, "whole HTTP request timeout, ms"),
    INT("delivery", max_response_bytes, 65536, 0, 16777216, "response body bytes kept"),
    INT("delivery", max_connections, 256, 1, 65536, "total HTTP connections"),
    INT("delivery", max_host_connections, 16, 1, 4096, "HTTP connections per host"),
    INT("delivery", retry_after_max_s, 3600, 0, 604800,
        "largest Retry-After honoured, s; 0: Retry-After ignored (backoff used)"),
    STR("delivery", allow_cidrs, "", "comma-separated CIDRs webhooks may reach"),
    STR("delivery", proxy, "", "egress proxy http://HOST:PORT (CONNECT tunnels); empty: direct"),
    STR("delivery", no_proxy, "", "hosts, domains and CIDRs sent direct, not through the proxy"),
    STR("delivery", ca_file, "",
        "PEM CA bundle verifying receivers' certificates; empty: the system's bundle"),
    BOOL("delivery", dead_letter_on_4xx, true, "other 4xx: dead letter at once"),
    INT("delivery", attempt_retention_days, 7, 1, 3650, "days of attempt log kept"),
    INT("delivery", dead_letter_retention_days, 30, 1, 3650, "days of dead letters kept"),
    INT("delivery", item_retention_days, 7, 1, 3650, "days delivered items are kept at least"),
    INT("delivery", breaker_failures, 5, 1, 1000, "consecutive failures opening the breaker"),
    INT("delivery", breaker_cooldown_ms, 30000, 100, 86400000, "first breaker cooldown, ms"),
    INT("delivery", breaker_cooldown_max_ms, 600000, 100, 86400000, "largest breaker cooldown, ms"),
    DOUBLE("delivery", throttle_decrease, 0.8, &config_throttle_decrease_range,
           "effective rate multiplied by this on a throttled answer"),
    DOUBLE("delivery", throttle_increase, 0.003, &config_throttle_increase_range,
           "fraction of rate_per_minute regained per successful delivery"),
    DOUBLE("delivery", throttle_floor, 0.05, &config_throttle_floor_range,
           "lowest effective rate, as a fraction of rate_per_minute"),

    DURATION("health", "disable_after", disable_after_ms, "5d", 0, 3650LL * 86400000,
             "every delivery failed this long (and disable_min_attempts): disabled; 0: never"),
    INT("health", disable_min_attempts, 20, 1, 1000000,
        "failed attempts needed as well before a customer is disabled"),
    DURATION("health", "breaker_event_after", breaker_event_after_ms, "15m", 0, 30LL * 86400000,
             "breaker open this long: a breaker_open event; 0: none"),
    DURATION("health", "check_interval", health_check_ms, "1m", 100, 3600000,
             "how often the leader checks customers' health"),
    STR("health", operator_webhook_url, "", "lifecycle events are posted here; empty: none"),
    STR("health", operator_webhook_secret, "",
        "whsec_ secret signing the operator webhook (required with the URL)"),

    ENUM("log", "level", log_level, "info", level_names, "debug, info, warn or error"),
    ENUM("log", "format", log_format, "logfmt", format_names, "logfmt or json"),
    STRN("http", "listen", http_listen, "127.0.0.1:9187",
         "admin HTTP address (metrics, health, enqueue); empty: off"),
    STR("http", enqueue_token, "", "bearer token for POST /v1/items; empty: disabled"),
    STR("http", status_token, "", "token for the status page and /v1/status; empty: open"),
    INT("http", max_body_bytes, 1048576, 1024, 67108864, "largest POST /v1/items body"),
    STR("http", portal_frame_ancestors, "",
        "origins that may frame the tenant page (space separated); empty: none"),
    INT("http", metrics_customers, 100, 0, 100000, "customers with their own metric series"),
};

#define NKEYS PGP_ARRAY_LEN(keys)

static void *field(pgp_config *cfg, const config_key *k)
{
    return (char *)cfg + k->offset;
}

static const void *cfield(const pgp_config *cfg, const config_key *k)
{
    return (const char *)cfg + k->offset;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < PGP_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

/* "90s" -> 90000. A number without a unit is refused: "5" could mean any of them. */
static bool parse_duration_ms(const char *s, long long *out)
{
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return true;
    }
    if (!isdigit((unsigned char)*s))
        return false;
    errno = 0;
    char *end = NULL;
    long long n = strtoll(s, &end, 10);
    if (errno || end == s)
        return false;
    for (size_t i = 0; i < PGP_ARRAY_LEN(units); i++) {
        if (strcmp(end, units[i].unit) != 0)
            continue;
        if (n > LLONG_MAX / units[i].ms)
            return false;
        *out = n * units[i].ms;
        return true;
    }
    return false;
}

/* 432000000 -> "5d": the largest unit that divides it. */
static void format_duration_ms(char *buf, size_t n, long long ms)
{
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};
    if (ms == 0) {
        snprintf(buf, n, "0");
        return;
    }
    for (size_t i = 0; i < PGP_ARRAY_LEN(units); i++)
        if (ms % units[i].ms == 0) {
            snprintf(buf, n, "%lld%s", ms / units[i].ms, units[i].unit);
            return;
        }
    snprintf(buf, n, "%lldms", ms);
}

static void join_choices(char *buf, size_t n, const char *const *choices)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; choices[i] && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", choices[i]);
}

/* Sets one key from its text; on failure writes only the reason (the caller adds where). */
static int set_value(pgp_config *cfg, const config_key *k, const char *value, pgp_error *err)
{
    switch (k->type) {
    case KEY_STRING: {
        size_t len = strlen(value);
        if (len >= k->size)
            return pgp_error_set(err, -EINVAL, "value too long (%zu bytes, at most %zu)", len,
                                 k->size - 1);
        memcpy(field(cfg, k), value, len + 1);
        return 0;
    }
    case KEY_INT: {
        long long v;
        if (validate_int(k->name, value, k->min, k->max, &v, NULL) < 0)
            return pgp_error_set(err, -EINVAL, "expected an integer from %lld to %lld, got '%s'",
                                 k->min, k->max, value);
        int iv = (int)v;
        memcpy(field(cfg, k), &iv, sizeof iv);
        return 0;
    }
    case KEY_BOOL: {
        bool b;
        if (!parse_bool(value, &b))
            return pgp_error_set(
                err, -EINVAL, "expected true or false (or yes/no, on/off, 1/0), got '%s'", value);
        memcpy(field(cfg, k), &b, sizeof b);
        return 0;
    }
    case KEY_DOUBLE: {
        double d;
        if (validate_double(k->name, value, k->range, &d, NULL) < 0) {
            char words[128];
            validate_double_range(words, sizeof words, k->range);
            return pgp_error_set(err, -EINVAL, "expected a number %s, got '%s'", words, value);
        }
        memcpy(field(cfg, k), &d, sizeof d);
        return 0;
    }
    case KEY_DURATION: {
        long long ms;
        if (!parse_duration_ms(value, &ms) || ms < k->min || ms > k->max) {
            char lo[32], hi[32];
            format_duration_ms(lo, sizeof lo, k->min);
            format_duration_ms(hi, sizeof hi, k->max);
            return pgp_error_set(
                err, -EINVAL,
                "expected a duration with a unit (ms, s, m, h, d) from %s to %s%s, "
                "got '%s'",
                lo, hi, k->min == 0 ? " (0: off)" : "", value);
        }
        memcpy(field(cfg, k), &ms, sizeof ms);
        return 0;
    }
    case KEY_ENUM:
        for (int i = 0; k->choices[i]; i++) {
            if (strcasecmp(value, k->choices[i]) == 0) {
                memcpy(field(cfg, k), &i, sizeof i);
                return 0;
            }
        }
        char list[256];
        join_choices(list, sizeof list, k->choices);
        return pgp_error_set(err, -EINVAL, "expected one of %s, got '%s'", list, value);
    }
    return pgp_error_set(err, -EINVAL, "internal error: bad key type");
}

void config_defaults(pgp_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NKEYS; i++) {
        int rc = set_value(cfg, &keys[i], keys[i].def, NULL);
        (void)rc; /* the table's defaults are covered by the unit tests */
    }
}

static bool section_known(const char *section)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0)
            return true;
    return false;
}

/* "database, dispatcher, delivery, log": table order, each once. */
static void section_list(char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NKEYS && o < n; i++)
        if (i == 0 || strcmp(keys[i].section, keys[i - 1].section) != 0)
            o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", keys[i].section);
}

static void key_list(char *buf, size_t n, const char *section)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NKEYS && o < n; i++)
        if (strcmp(keys[i].section, section) == 0)
            o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", keys[i].name);
}

typedef struct parse_state {
    const char *name; /* file name for messages */
    FILE *in;
    pgp_config cfg;  /* the copy being filled; published only if everything is valid */
    int lineno;      /* physical line last handed to inih */
    int seen[NKEYS]; /* line where each key was set; 0 = not set */
    int err_line;    /* line of the first error found by us; 0 = none */
    int err_code;
    pgp_error err;
    char *buf; /* getline buffer */
    size_t cap;
} parse_state;

static int fail(parse_state *st, int line, int code, const char *fmt, ...) PGP_PRINTF(4, 5);

static int fail(parse_state *st, int line, int code, const char *fmt, ...)
{
    if (st->err_code)
        return 0;
    char reason[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    /* line < 0: the message is about the file as a whole and names it itself. */
    if (line > 0)
        pgp_error_set(&st->err, code, "%s:%d: %s", st->name, line, reason);
    else if (line == 0)
        pgp_error_set(&st->err, code, "%s: %s", st->name, reason);
    else
        pgp_error_set(&st->err, code, "%s", reason);
    st->err_line = line;
    st->err_code = code;
    return 0;
}

/* inih's line buffer is fixed at build time (INI_MAX_LINE, 200 in Debian) and it splits longer
 * lines into pieces that it then parses as separate lines. Reading whole lines here lets us
 * refuse those instead, count physical lines for messages, and hand inih comment and blank
 * lines of any length as empty lines. Leading blanks are removed because inih would otherwise
 * take an indented line as the continuation of the previous value. */
static char *reader(char *str, int num, void *stream)
{
    parse_state *st = stream;
    if (st->err_code)
        return NULL; /* first error wins: no point reading further */
    errno = 0;
    ssize_t got = getline(&st->buf, &st->cap, st->in);
    if (got < 0) {
        /* getline() reports a failed allocation without setting the stream's error flag. */
        if (ferror(st->in) || errno == ENOMEM) {
            int e = errno ? errno : EIO;
            fail(st, -1, -e, "cannot read config file '%s': %s", st->name, strerror(e));
        }
        return NULL;
    }
    st->lineno++;
    size_t len = (size_t)got;
    char *line = st->buf;
    if (memchr(line, '\0', len)) {
        fail(st, st->lineno, -EINVAL, "line contains a NUL byte");
        return NULL;
    }
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
    if (st->lineno == 1 && len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
        line += 3;
        len -= 3;
    }
    while (len > 0 && isspace((unsigned char)*line)) {
        line++;
        len--;
    }
    if (len == 0 || *line == ';' || *line == '#') {
        str[0] = '\0';
        return str;
    }
    size_t limit = CONFIG_MAX_LINE;
    if (num > 0 && (size_t)num - 1 < limit)
        limit = (size_t)num - 1;
    if (len > limit) {
        fail(st, st->lineno, -EINVAL, "line too long (%zu bytes, at most %zu)", len, limit);
        return NULL;
    }
    if (*line == '[') {
        const char *close = strchr(line, ']');
        if (close) {
            char sec[128];
            size_t slen = (size_t)(close - line) - 1;
            if (slen < sizeof sec) {
                memcpy(sec, line + 1, slen);
                sec[slen] = '\0';
            }
            if (slen >= sizeof sec || !section_known(sec)) {
                char known[256];
                section_list(known, sizeof known);
                fail(st, st->lineno, -EINVAL, "unknown section [%.*s] (known: %s)", (int)slen,
                     line + 1, known);
                return NULL;
            }
        }
    }
    memcpy(str, line, len + 1);
    return str;
}

/* Adds the entries of one line of a list (allow_cidrs, no_proxy) to it, stored as "a, b, c"
 * (entries are separated by commas or blanks, as netcheck and proxy read them; empty ones are
 * dropped, so the stored text is the same however it was spread over lines). The list as it
 * then stands must parse: a bad entry is reported with the file and line that brought it, not
 * when `run` starts. */
static int add_list(parse_state *st, int line, const config_key *k, const char *value)
{
    char *dst = (char *)&st->cfg + k->offset;
    size_t used = strlen(dst);
    for (const char *p = value; *p;) {
        size_t skip = strspn(p, ", \t\n\r\f\v");
        p += skip;
        size_t len = strcspn(p, ", \t\n\r\f\v");
        if (!len)
            break;
        if (used + (used ? 2 : 0) + len >= k->size)
            return fail(st, line, -EINVAL, "[%s] %s: the list is longer than %zu bytes", k->section,
                        k->name, k->size - 1);
        used +=
            (size_t)snprintf(dst + used, k->size - used, "%s%.*s", used ? ", " : "", (int)len, p);
        p += len;
    }
    pgp_error reason;
    int rc;
    if (strcmp(k->name, "no_proxy") == 0) {
        /* Big (a name per entry): on the heap, not on inih's stack. */
        proxy_bypass *b = malloc(sizeof *b);
        if (!b)
            return fail(st, line, -ENOMEM, "out of memory");
        rc = proxy_bypass_parse(dst, b, &reason);
        free(b);
    } else {
        netcheck_allow allow;
        rc = netcheck_parse_allow(dst, &allow, &reason);
    }
    if (rc < 0)
        return fail(st, line, -EINVAL, "[%s] %s: %s", k->section, k->name, reason.msg);
    return 1;
}

/* Lists: keys that may be given on several lines, which add up. */
static bool is_list_key(const config_key *k)
{
    return k->type == KEY_STRING && strcmp(k->section, "delivery") == 0 &&
           (strcmp(k->name, "allow_cidrs") == 0 || strcmp(k->name, "no_proxy") == 0);
}

/* instance_name names the instance in PostgreSQL's application_name, which keeps printable
 * ASCII only (other bytes become '?'): pgpace.instance and the status page would name it
 * differently, or cut a character in two. */
/* 0, or -1 with the error recorded in st. */
static int check_instance_name(parse_state *st, int line, const char *value)
{
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (*p < 0x20 || *p > 0x7e) {
            fail(st, line, -EINVAL,
                 "[dispatcher] instance_name: printable ASCII only (byte 0x%02x)", *p);
            return -1;
        }
    return 0;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
    parse_state *st = user;
    int line = st->lineno;
    char list[1024];
    if (!*section) {
        const char *home = NULL;
        for (size_t i = 0; i < NKEYS && !home; i++)
            if (strcmp(keys[i].name, name) == 0)
                home = keys[i].section;
        if (home)
            return fail(st, line, -EINVAL,
                        "key '%s' is outside any section (it belongs under [%s])", name, home);
        section_list(list, sizeof list);
        return fail(st, line, -EINVAL, "key '%s' is outside any section (sections: %s)", name,
                    list);
    }
    if (!section_known(section)) {
        section_list(list, sizeof list);
        return fail(st, line, -EINVAL, "unknown section [%s] (known: %s)", section, list);
    }
    for (size_t i = 0; i < NKEYS; i++) {
        const config_key *k = &keys[i];
        if (strcmp(k->section, section) != 0 || strcmp(k->name, name) != 0)
            continue;
        /* allow_cidrs and no_proxy are lists: they may be given on several lines, which add
         * up (Debian's inih reads at most 199 bytes per line). Any other key set twice is a
         * mistake. */
        if (is_list_key(k)) {
            st->seen[i] = st->seen[i] ? st->seen[i] : line;
            return add_list(st, line, k, value);
        }
        if (st->seen[i])
            return fail(st, line, -EINVAL, "[%s] %s: duplicate key (already set on line %d)",
                        section, name, st->seen[i]);
        pgp_error reason;
        int rc = set_value(&st->cfg, k, value, &reason);
        if (rc < 0)
            return fail(st, line, rc, "[%s] %s: %s", section, name, reason.msg);
        if (k->offset == offsetof(pgp_config, instance_name) &&
            check_instance_name(st, line, value) != 0)
            return 0;
        char what[64];
        snprintf(what, sizeof what, "[%s] %s", section, name);
        if (strcmp(section, "delivery") == 0 && strcmp(name, "proxy") == 0 && *value &&
            proxy_url_check(what, value, &reason) < 0)
            return fail(st, line, -EINVAL, "%s", reason.msg);
        st->seen[i] = line;
        return 1;
    }
    key_list(list, sizeof list, section);
    return fail(st, line, -EINVAL, "[%s] unknown key '%s' (known keys: %s)", section, name, list);
}

static size_t key_index(const char *section, const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
            return i;
    return NKEYS; /* not reached for names from the table */
}

/* lo must not exceed hi; both are int keys of the same section. */
static int check_order(parse_state *st, const char *section, const char *lo, const char *hi)
{
    size_t a = key_index(section, lo), b = key_index(section, hi);
    if (a >= NKEYS || b >= NKEYS)
        return 0;
    int va, vb;
    memcpy(&va, cfield(&st->cfg, &keys[a]), sizeof va);
    memcpy(&vb, cfield(&st->cfg, &keys[b]), sizeof vb);
    if (va <= vb)
        return 1;
    int line = st->seen[a] > st->seen[b] ? st->seen[a] : st->seen[b];
    return fail(st, line, -EINVAL, "[%s] %s (%d) must not be greater than %s (%d)", section, lo, va,
                hi, vb);
}

/* The operator webhook needs a valid URL and a secret to sign with; a secret alone is a
 * mistake too (it would silently do nothing). */
static int check_operator_webhook(parse_state *st)
{
    size_t iu = key_index("health", "operator_webhook_url");
    size_t is = key_index("health", "operator_webhook_secret");
    const char *url = st->cfg.operator_webhook_url, *secret = st->cfg.operator_webhook_secret;
    pgp_error reason;
    if (*url && validate_url("operator_webhook_url", url, &reason) < 0)
        return fail(st, st->seen[iu], -EINVAL, "[health] %s", reason.msg);
    if (*url && !*secret)
        return fail(st, st->seen[iu], -EINVAL,
                    "[health] operator_webhook_url needs operator_webhook_secret (a whsec_ "
                    "secret to sign the events with)");
    if (*secret && !*url)
        return fail(st, st->seen[is], -EINVAL,
                    "[health] operator_webhook_secret is set but operator_webhook_url is not");
    /* HMAC only: secret.c also signs with whsk_ (Ed25519) secrets, but an operator would have
     * no pgpace command to show the public key, so the operator webhook stays whsec_. */
    char sig[SECRET_SIGNATURE_MAX];
    if (*secret && (strncmp(secret, SECRET_PREFIX, strlen(SECRET_PREFIX)) != 0 ||
                    secret_sign(secret, "check", 0, "", 0, sig, &reason) < 0))
        return fail(st, st->seen[is], -EINVAL,
                    "[health] operator_webhook_secret: expected whsec_ followed by base64 of "
                    "24 to 64 bytes");
    return 1;
}

/* ca_file, when set, must be a readable file of PEM certificates (the bundle the sender trusts
 * instead of the system's): a typo should stop the load here, not fail every HTTPS delivery. */
static int check_ca_file(parse_state *st)
{
    const char *path = st->cfg.ca_file;
    if (!*path)
        return 1;
    int line = st->seen[key_index("delivery", "ca_file")];
    FILE *f = fopen(path, "re");
    if (!f)
        return fail(st, line, -EINVAL, "[delivery] ca_file: cannot open '%s': %s", path,
                    strerror(errno));
    int n = 0;
    X509 *x;
    while ((x = PEM_read_X509(f, NULL, NULL, NULL)) != NULL) {
        X509_free(x);
        n++;
    }
    unsigned long e = ERR_peek_last_error();
    bool at_end = ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE;
    ERR_clear_error();
    bool read_error = ferror(f);
    fclose(f);
    if (read_error)
        return fail(st, line, -EINVAL, "[delivery] ca_file: cannot read '%s'", path);
    if (n == 0)
        return fail(st, line, -EINVAL,
                    "[delivery] ca_file: '%s' holds no PEM certificate (-----BEGIN "
                    "CERTIFICATE-----)",
                    path);
    if (!at_end)
        return fail(st, line, -EINVAL,
                    "[delivery] ca_file: certificate #%d in '%s' does not parse as PEM", n + 1,
                    path);
    return 1;
}

int config_load_stream(pgp_config *cfg, FILE *in, const char *name, pgp_error *err)
{
    if (!cfg || !in)
        return pgp_error_set(err, -EINVAL, "config_load_stream: no config or stream");
    if (!name)
        name = "<config>";
    if (strlen(name) >= sizeof cfg->path)
        return pgp_error_set(err, -ENAMETOOLONG, "config file name too long (at most %zu bytes)",
                             sizeof cfg->path - 1);

    parse_state *st = calloc(1, sizeof *st);
    if (!st)
        return pgp_error_set(err, -ENOMEM, "%s: out of memory", name);
    st->name = name;
    st->in = in;
    config_defaults(&st->cfg);

    int r = ini_parse_stream(reader, st, handler, st);
    /* inih reports the first line it could not parse (no '=' / no ']'); it never calls us for
     * those, so it is the first error only if it comes before the first one we found. */
    if (r > 0 && (st->err_code == 0 || (st->err_line > 0 && r < st->err_line))) {
        st->err_code = 0;
        fail(st, r, -EINVAL, "malformed line (expected 'key = value' or '[section]')");
    } else if (r < 0 && st->err_code == 0) {
        fail(st, 0, -ENOMEM, "out of memory while parsing");
    }
    if (st->err_code == 0)
        check_order(st, "dispatcher", "retry_base_ms", "retry_cap_ms");
    if (st->err_code == 0)
        check_order(st, "delivery", "breaker_cooldown_ms", "breaker_cooldown_max_ms");
    if (st->err_code == 0)
        check_operator_webhook(st);
    if (st->err_code == 0)
        check_ca_file(st);
    if (st->err_code == 0 && !validate_origins(st->cfg.portal_frame_ancestors))
        fail(st, st->seen[key_index("http", "portal_frame_ancestors")], -EINVAL,
             "[http] portal_frame_ancestors: expected origins such as "
             "https://dashboard.example.com, space separated (at most 8)");

    int rc = st->err_code;
    if (rc == 0) {
        memcpy(st->cfg.path, name, strlen(name) + 1);
        *cfg = st->cfg;
    } else {
        pgp_error_set(err, rc, "%s", st->err.msg);
    }
    free(st->buf);
    free(st);
    return rc;
}

int config_load(pgp_config *cfg, const char *path, pgp_error *err)
{
    if (!cfg || !path)
        return pgp_error_set(err, -EINVAL, "config_load: no config or path");
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        return pgp_error_set(err, -e, "cannot open config file '%s': %s", path, strerror(e));
    }
    int rc = config_load_stream(cfg, f, path, err);
    fclose(f);
    return rc;
}

/* The shortest form (15 to 17 significant digits) that reads back as the same double, so a
 * dump loads to the identical value and the defaults print as written ("0.9", not
 * "0.90000000000000002"). */
static void print_double(FILE *out, double d)
{
    char buf[64];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    fprintf(out, "%s\n", buf);
}

void config_dump(const pgp_config *cfg, FILE *out)
{
    for (size_t i = 0; i < NKEYS; i++) {
        const config_key *k = &keys[i];
        const void *p = cfield(cfg, k);
        fprintf(out, "%s.%s = ", k->section, k->name);
        switch (k->type) {
        case KEY_STRING:
            /* A secret is shown as set or not, never printed. */
            if ((strcmp(k->name, "enqueue_token") == 0 || strcmp(k->name, "status_token") == 0 ||
                 strcmp(k->name, "operator_webhook_secret") == 0) &&
                *(const char *)p)
                fprintf(out, "(redacted)\n");
            else
                fprintf(out, "%s\n", (const char *)p);
            break;
        case KEY_INT: {
            int v;
            memcpy(&v, p, sizeof v);
            fprintf(out, "%d\n", v);
            break;
        }
        case KEY_BOOL: {
            bool b;
            memcpy(&b, p, sizeof b);
            fprintf(out, "%s\n", b ? "true" : "false");
            break;
        }
        case KEY_DOUBLE: {
            double d;
            memcpy(&d, p, sizeof d);
            print_double(out, d);
            break;
        }
        case KEY_DURATION: {
            long long ms;
            memcpy(&ms, p, sizeof ms);
            char buf[32];
            format_duration_ms(buf, sizeof buf, ms);
            fprintf(out, "%s\n", buf);
            break;
        }
        case KEY_ENUM: {
            int v;
            memcpy(&v, p, sizeof v);
            int n = 0;
            while (k->choices[n])
                n++;
            fprintf(out, "%s\n", v >= 0 && v < n ? k->choices[v] : "?");
            break;
        }
        }
    }
}
