/* test_config.c - config loading: defaults, every error message, the example file. */
#include "testlib.h"

#include "config.h"
#include "proxy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Local rather than testlib's tl_assert_contains: the unit tests must not need a database. */
#define assert_contains(hay, needle)                                                               \
    do {                                                                                           \
        if (!strstr((hay), (needle))) {                                                            \
            print_error("expected to find\n  %s\nin\n  %s\n", (needle), (hay) ? (hay) : "(null)"); \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

/* Loads `text` as if it were the file "t.ini"; returns the result code. */
static int load_text(pgp_config *cfg, const char *text, pgp_error *err)
{
    /* fmemopen() refuses a zero-size buffer, and an empty file must be representable. */
    static const char empty[1] = "";
    size_t len = strlen(text);
    FILE *f = len ? fmemopen((void *)(uintptr_t)text, len, "r")
                  : fmemopen((void *)(uintptr_t)empty, 1, "r");
    assert_non_null(f);
    if (!len) {
        /* Skip the single NUL so the stream is really empty. */
        assert_int_equal(fgetc(f), 0);
    }
    int rc = config_load_stream(cfg, f, "t.ini", err);
    fclose(f);
    return rc;
}

/* Expects loading `text` to fail with exactly `msg`. */
static void expect_error(const char *text, const char *msg)
{
    pgp_config cfg;
    pgp_error err = {{0}};
    config_defaults(&cfg);
    int rc = load_text(&cfg, text, &err);
    if (rc != -EINVAL || strcmp(err.msg, msg) != 0) {
        print_error("input:\n%s\nexpected rc %d, message\n  %s\ngot rc %d, message\n  %s\n", text,
                    -EINVAL, msg, rc, err.msg);
        fail();
    }
}

/* Not inlined: GCC 12 at -O3 then mistakes the returned buffer for the local pointer it was
 * written through (a false -Wdangling-pointer). */
__attribute__((noinline)) static char *dump_to_string(const pgp_config *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    config_dump(cfg, f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static char *temp_file(const char *content)
{
    const char *dir = getenv("TMPDIR");
    char *path = NULL;
    assert_true(asprintf(&path, "%s/pgpace-test-XXXXXX", dir && *dir ? dir : "/tmp") > 0);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(content);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
    return path;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&buf, &cap, '\0', f);
    assert_true(n > 0);
    fclose(f);
    return buf;
}

static void test_defaults(void **state)
{
    pgp_config c;
    memset(&c, 0x5a, sizeof c);
    config_defaults(&c);
    assert_string_equal(c.conninfo, "");
    assert_string_equal(c.instance_name, "");
    assert_int_equal(c.lease_seconds, 60);
    assert_int_equal(c.standby_retry_ms, 1000);
    assert_int_equal(c.batch_tick_ms, 60000);
    assert_int_equal(c.backstop_scan_ms, 5000);
    assert_int_equal(c.wake_hot_per_s, 500);
    assert_int_equal(c.claim_batch_max, 1000);
    assert_int_equal(c.claim_ahead, 1000);
    assert_int_equal(c.claim_ahead_ms, 1000);
    assert_int_equal(c.carrier_max_per_round, 100);
    assert_int_equal(c.carrier_max_in_flight, 0);
    assert_int_equal(c.drain_timeout_ms, 30000);
    assert_int_equal(c.retry_base_ms, 1000);
    assert_int_equal(c.retry_cap_ms, 3600000);
    assert_int_equal(c.reconnect_max_ms, 30000);
    assert_int_equal(c.keepalive_idle_s, 10);
    assert_int_equal(c.connect_timeout_ms, 5000);
    assert_int_equal(c.request_timeout_ms, 30000);
    assert_int_equal(c.max_response_bytes, 65536);
    assert_int_equal(c.max_connections, 256);
    assert_int_equal(c.max_host_connections, 16);
    assert_int_equal(c.retry_after_max_s, 3600);
    assert_string_equal(c.allow_cidrs, "");
    assert_true(c.dead_letter_on_4xx);
    assert_int_equal(c.breaker_failures, 5);
    assert_int_equal(c.breaker_cooldown_ms, 30000);
    assert_int_equal(c.breaker_cooldown_max_ms, 600000);
    assert_int_equal(c.attempt_retention_days, 7);
    assert_int_equal(c.dead_letter_retention_days, 30);
    assert_int_equal(c.item_retention_days, 7);
    /* Exactly the doubles the literals give (the table's defaults are parsed from text). */
    assert_true(c.throttle_decrease == 0.8);
    assert_true(c.throttle_increase == 0.003);
    assert_true(c.throttle_floor == 0.05);
    assert_int_equal(c.log_level, LOG_LEVEL_INFO);
    assert_int_equal(c.log_format, LOG_FORMAT_LOGFMT);
    assert_string_equal(c.path, "");
}

static void test_dump(void **state)
{
    pgp_config c;
    config_defaults(&c);
    char *out = dump_to_string(&c);
    assert_contains(out, "database.conninfo = \n");
    assert_contains(out, "database.statement_timeout_ms = 10000\n");
    assert_contains(out, "dispatcher.lease_seconds = 60\n");
    assert_contains(out, "dispatcher.carrier_max_in_flight = 0\n");
    assert_contains(out, "delivery.dead_letter_on_4xx = true\n");
    assert_contains(out, "delivery.item_retention_days = 7\n");
    /* Doubles in their shortest form that reads back the same. */
    assert_contains(out, "delivery.throttle_decrease = 0.8\n");
    assert_contains(out, "delivery.throttle_increase = 0.003\n");
    assert_contains(out, "delivery.throttle_floor = 0.05\n");
    assert_contains(out, "log.level = info\n");
    assert_contains(out, "log.format = logfmt\n");
    /* Durations in the largest unit that divides them. */
    assert_contains(out, "health.disable_after = 5d\n");
    assert_contains(out, "health.breaker_event_after = 15m\n");
    assert_contains(out, "health.check_interval = 1m\n");
    int lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    assert_contains(out, "delivery.ca_file = \n");
    assert_int_equal(lines, 53); /* one per field of pgp_config except path */
    free(out);

    c.log_level = LOG_LEVEL_ERROR;
    c.log_format = LOG_FORMAT_JSON;
    c.dead_letter_on_4xx = false;
    c.throttle_decrease = 0.1 + 0.2; /* 0.30000000000000004: needs all 17 digits */
    c.throttle_increase = 1e-300;
    c.throttle_floor = 1;
    out = dump_to_string(&c);
    assert_contains(out, "log.level = error\n");
    assert_contains(out, "log.format = json\n");
    assert_contains(out, "delivery.dead_letter_on_4xx = false\n");
    assert_contains(out, "delivery.throttle_decrease = 0.30000000000000004\n");
    assert_contains(out, "delivery.throttle_increase = 1e-300\n");
    assert_contains(out, "delivery.throttle_floor = 1\n");
    free(out);
}

/* What config_dump writes for the double keys loads back to the identical values. */
static void test_dump_round_trips_doubles(void **state)
{
    static const double values[][3] = {
        {0.8, 0.003, 0.05},
        {0.1 + 0.2, 1.0 / 3.0, 2.0 / 3.0},
        {0.99999999999999989, 1, 1e-300},
        {4.9406564584124654e-300, 0.12345678901234568, 0.5},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(values); i++) {
        pgp_config c, d;
        config_defaults(&c);
        c.throttle_decrease = values[i][0];
        c.throttle_increase = values[i][1];
        c.throttle_floor = values[i][2];
        char *out = dump_to_string(&c);
        /* "delivery.throttle_decrease = x" lines as an INI file. */
        char text[512];
        int n = snprintf(text, sizeof text, "[delivery]\n");
        for (const char *line = strstr(out, "delivery.throttle_"); line;
             line = strstr(line + 1, "delivery.throttle_"))
            n += snprintf(text + n, sizeof text - (size_t)n, "%.*s\n",
                          (int)(strchr(line, '\n') - line) - 9, line + 9);
        pgp_error err = {{0}};
        int rc = load_text(&d, text, &err);
        if (rc != 0)
            print_error("%s\n%s\n", text, err.msg);
        assert_int_equal(rc, 0);
        assert_memory_equal(&d.throttle_decrease, &c.throttle_decrease, sizeof(double));
        assert_memory_equal(&d.throttle_increase, &c.throttle_increase, sizeof(double));
        assert_memory_equal(&d.throttle_floor, &c.throttle_floor, sizeof(double));
        free(out);
    }
}

static void test_empty_and_comments(void **state)
{
    pgp_config c, d;
    pgp_error err = {{0}};
    config_defaults(&d);
    assert_int_equal(load_text(&c, "", &err), 0);
    assert_string_equal(c.path, "t.ini");
    assert_int_equal(load_text(&c, "# only\n; comments\n\n   \n[log]\n", &err), 0);
    assert_int_equal(c.lease_seconds, d.lease_seconds);
    /* Comment lines may be far longer than the parser's line buffer. */
    char big[6000];
    memset(big, 'x', sizeof big);
    big[0] = '#';
    memcpy(big + sizeof big - 2, "\n", 2);
    assert_int_equal(load_text(&c, big, &err), 0);
}

static void test_full_valid_file(void **state)
{
    const char *text = "\xEF\xBB\xBF# a BOM, CRLF lines, indentation and inline comments\r\n"
                       "[database]\r\n"
                       "conninfo = host=db port=5433 dbname=pgpace application_name=x:y\r\n"
                       "[dispatcher]\n"
                       "  instance_name = node-1 ; inline comment\n"
                       "\tlease_seconds=120\n"
                       "standby_retry_ms = 50\n"
                       "batch_tick_ms = 3600000\n"
                       "backstop_scan_ms = 100\n"
                       "claim_batch_max = 100000\n"
                       "carrier_max_per_round = 1\n"
                       "carrier_max_in_flight = 1000000\n"
                       "drain_timeout_ms = 0\n"
                       "retry_base_ms = 10\n"
                       "retry_cap_ms = 10\n"
                       "reconnect_max_ms = 600000\n"
                       "keepalive_idle_s = 7200\n"
                       "[delivery]\n"
                       "connect_timeout_ms = 100\n"
                       "request_timeout_ms = 3600000\n"
                       "max_response_bytes = 0\n"
                       "max_connections = 65536\n"
                       "max_host_connections = 4096\n"
                       "retry_after_max_s = 604800\n"
                       "allow_cidrs = 10.0.0.0/8, fd00::/8\n"
                       "dead_letter_on_4xx = off\n"
                       "item_retention_days = 3650\n"
                       "breaker_failures = 1000\n"
                       "breaker_cooldown_ms = 86400000\n"
                       "breaker_cooldown_max_ms = 86400000\n"
                       "throttle_decrease = 0.5\n"
                       "throttle_increase = 1\n"
                       "throttle_floor = 5e-2\n"
                       "[log]\n"
                       "level = DEBUG\n"
                       "format = json\n";
    pgp_config c;
    pgp_error err = {{0}};
    int rc = load_text(&c, text, &err);
    if (rc != 0)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_string_equal(c.conninfo, "host=db port=5433 dbname=pgpace application_name=x:y");
    assert_string_equal(c.instance_name, "node-1");
    assert_int_equal(c.lease_seconds, 120);
    assert_int_equal(c.standby_retry_ms, 50);
    assert_int_equal(c.batch_tick_ms, 3600000);
    assert_int_equal(c.backstop_scan_ms, 100);
    assert_int_equal(c.claim_batch_max, 100000);
    assert_int_equal(c.carrier_max_per_round, 1);
    assert_int_equal(c.carrier_max_in_flight, 1000000);
    assert_int_equal(c.drain_timeout_ms, 0);
    assert_int_equal(c.retry_base_ms, 10);
    assert_int_equal(c.retry_cap_ms, 10);
    assert_int_equal(c.reconnect_max_ms, 600000);
    assert_int_equal(c.keepalive_idle_s, 7200);
    assert_int_equal(c.connect_timeout_ms, 100);
    assert_int_equal(c.request_timeout_ms, 3600000);
    assert_int_equal(c.max_response_bytes, 0);
    assert_int_equal(c.max_connections, 65536);
    assert_int_equal(c.max_host_connections, 4096);
    assert_int_equal(c.retry_after_max_s, 604800);
    assert_string_equal(c.allow_cidrs, "10.0.0.0/8, fd00::/8");
    assert_false(c.dead_letter_on_4xx);
    assert_int_equal(c.item_retention_days, 3650);
    assert_int_equal(c.breaker_failures, 1000);
    assert_int_equal(c.breaker_cooldown_ms, 86400000);
    assert_int_equal(c.breaker_cooldown_max_ms, 86400000);
    assert_true(c.throttle_decrease == 0.5);
    assert_true(c.throttle_increase == 1.0);
    assert_true(c.throttle_floor == 0.05);
    assert_int_equal(c.log_level, LOG_LEVEL_DEBUG);
    assert_int_equal(c.log_format, LOG_FORMAT_JSON);
    assert_string_equal(c.path, "t.ini");
}

static void test_bool_spellings(void **state)
{
    static const char *const yes[] = {"true", "TRUE", "yes", "on", "1", "On"};
    static const char *const no[] = {"false", "no", "off", "0", "False", "NO"};
    char text[128];
    pgp_config c;
    pgp_error err = {{0}};
    for (size_t i = 0; i < PGP_ARRAY_LEN(yes); i++) {
        snprintf(text, sizeof text, "[delivery]\ndead_letter_on_4xx = %s\n", no[i]);
        assert_int_equal(load_text(&c, text, &err), 0);
        assert_false(c.dead_letter_on_4xx);
        snprintf(text, sizeof text, "[delivery]\ndead_letter_on_4xx = %s\n", yes[i]);
        assert_int_equal(load_text(&c, text, &err), 0);
        assert_true(c.dead_letter_on_4xx);
    }
}

static void test_unknown_key(void **state)
{
    expect_error("# x\n[database]\nconninf = x\n",
                 "t.ini:3: [database] unknown key 'conninf' (known keys: conninfo, "
                 "statement_timeout_ms)");
    expect_error("[log]\nlevel = info\nlevle = info\n",
                 "t.ini:3: [log] unknown key 'levle' (known keys: level, format)");
    expect_error("[dispatcher]\nlease = 5\n",
                 "t.ini:2: [dispatcher] unknown key 'lease' (known keys: instance_name, "
                 "lease_seconds, standby_retry_ms, batch_tick_ms, backstop_scan_ms, "
                 "wake_hot_per_s, claim_batch_max, max_in_flight, claim_ahead, claim_ahead_ms, "
                 "carrier_max_per_round, carrier_max_in_flight, drain_timeout_ms, retry_base_ms, "
                 "retry_cap_ms, reconnect_max_ms, "
                 "keepalive_idle_s)");
    /* A key of another section is unknown here. */
    expect_error("[database]\nlease_seconds = 5\n",
                 "t.ini:2: [database] unknown key 'lease_seconds' (known keys: conninfo, "
                 "statement_timeout_ms)");
}

static void test_unknown_section(void **state)
{
    /* Reported at the header, even when the section holds no key. */
    expect_error("[database]\n\n\n\n\n\n[dispatch]\n",
                 "t.ini:7: unknown section [dispatch] (known: database, dispatcher, delivery, "
                 "health, log, http)");
    expect_error("[Log]\nlevel = info\n",
                 "t.ini:1: unknown section [Log] (known: database, dispatcher, delivery, "
                 "health, log, http)");
    expect_error("[]\n", "t.ini:1: unknown section [] (known: database, dispatcher, delivery, "
                         "health, log, http)");
}

static void test_malformed_line(void **state)
{
    const char *m = ": malformed line (expected 'key = value' or '[section]')";
    char want[128];
    snprintf(want, sizeof want, "t.ini:2%s", m);
    expect_error("[dispatcher]\nlease_seconds 60\n", want);
    snprintf(want, sizeof want, "t.ini:3%s", m);
    expect_error("[log]\n\n[dispatcher\nlease_seconds = 1\n", want);
    /* The first error in the file wins, whichever part of the parser finds it. */
    snprintf(want, sizeof want, "t.ini:2%s", m);
    expect_error("[dispatcher]\njunk\nlease_seconds = x\n", want);
    expect_error("[dispatcher]\nlease_seconds = x\njunk\n",
                 "t.ini:2: [dispatcher] lease_seconds: expected an integer from 1 to 86400, got "
                 "'x'");
    /* Indented lines are ordinary lines, not continuations of the previous value. */
    snprintf(want, sizeof want, "t.ini:3%s", m);
    expect_error("[dispatcher]\nlease_seconds = 5\n   more\n", want);
}

static void test_line_too_long(void **state)
{
    char text[CONFIG_MAX_LINE * 2];
    int n = snprintf(text, sizeof text, "[dispatcher]\n# ok\ninstance_name = ");
    memset(text + n, 'a', 300);
    memcpy(text + n + 300, "\nlease_seconds = 5\n", 20);
    pgp_config c;
    pgp_error err = {{0}};
    assert_int_equal(load_text(&c, text, &err), -EINVAL);
    assert_contains(err.msg, "t.ini:3: line too long (316 bytes, at most ");

    /* Longer than CONFIG_MAX_LINE too: still one error for the line, not pieces of it. */
    memset(text + n, 'b', CONFIG_MAX_LINE + 10);
    memcpy(text + n + CONFIG_MAX_LINE + 10, "\n", 2);
    assert_int_equal(load_text(&c, text, &err), -EINVAL);
    assert_contains(err.msg, "t.ini:3: line too long (");

    /* The longest line that fits is accepted whole. */
    size_t limit = 0;
    assert_int_equal(sscanf(strstr(err.msg, "at most "), "at most %zu", &limit), 1);
    assert_true(limit >= 150);
    n = snprintf(text, sizeof text, "[database]\nconninfo = ");
    size_t vlen = limit - strlen("conninfo = ");
    memset(text + n, 'c', vlen);
    text[n + (int)vlen] = '\0';
    assert_int_equal(load_text(&c, text, &err), 0);
    assert_int_equal(strlen(c.conninfo), vlen);
    text[n + (int)vlen] = 'c';
    text[n + (int)vlen + 1] = '\0';
    assert_int_equal(load_text(&c, text, &err), -EINVAL);
    assert_contains(err.msg, "t.ini:2: line too long");
}

static void test_bad_int(void **state)
{
    static const char *const bad[] = {
        "abc", "60s", "1.5", "", "0x10", "+5", "6 0", "--1", "99999999999999999999", "-"};
    char text[128], want[256];
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        snprintf(text, sizeof text, "[dispatcher]\n\n\n\n\n\n\n\n\n\n\nlease_seconds = %s\n",
                 bad[i]);
        snprintf(want, sizeof want,
                 "t.ini:12: [dispatcher] lease_seconds: expected an integer from 1 to 86400, got "
                 "'%s'",
                 bad[i]);
        expect_error(text, want);
    }
}

static void test_out_of_range(void **state)
{
    expect_error("[dispatcher]\nlease_seconds = 0\n",
                 "t.ini:2: [dispatcher] lease_seconds: expected an integer from 1 to 86400, got "
                 "'0'");
    expect_error("[dispatcher]\nlease_seconds = 86401\n",
                 "t.ini:2: [dispatcher] lease_seconds: expected an integer from 1 to 86400, got "
                 "'86401'");
    expect_error("[dispatcher]\ncarrier_max_in_flight = -1\n",
                 "t.ini:2: [dispatcher] carrier_max_in_flight: expected an integer from 0 to "
                 "1000000, got '-1'");
    expect_error("[delivery]\nmax_response_bytes = 16777217\n",
                 "t.ini:2: [delivery] max_response_bytes: expected an integer from 0 to 16777216, "
                 "got '16777217'");
    expect_error("[delivery]\nitem_retention_days = 0\n",
                 "t.ini:2: [delivery] item_retention_days: expected an integer from 1 to 3650, "
                 "got '0'");
    expect_error("[delivery]\nitem_retention_days = 3651\n",
                 "t.ini:2: [delivery] item_retention_days: expected an integer from 1 to 3650, "
                 "got '3651'");
    expect_error("[dispatcher]\nstandby_retry_ms = 49\n",
                 "t.ini:2: [dispatcher] standby_retry_ms: expected an integer from 50 to 600000, "
                 "got '49'");
}

static void test_bad_double(void **state)
{
    /* Not a number, NaN, infinity, hex, garbage around it, empty, beyond a double either way,
     * and the exclusive bounds themselves. */
    static const char *const bad[] = {"abc",   "nan",    "NaN", "inf", "-inf", "Infinity", "0x0.8",
                                      "0.5x",  "0,5",    ".",   "e5",  "1e",   "--0.5",    "",
                                      "1e999", "1e-400", "0",   "-0",  "1",    "-0.5",     "1.0"};
    char text[128], want[256];
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        snprintf(text, sizeof text, "[delivery]\n\nthrottle_decrease = %s\n", bad[i]);
        snprintf(want, sizeof want,
                 "t.ini:3: [delivery] throttle_decrease: expected a number greater than 0 and "
                 "less than 1, got '%s'",
                 bad[i]);
        expect_error(text, want);
    }
    /* Rounds to 1. */
    expect_error("[delivery]\nthrottle_decrease = 0.99999999999999999\n",
                 "t.ini:2: [delivery] throttle_decrease: expected a number greater than 0 and "
                 "less than 1, got '0.99999999999999999'");
    /* Inclusive upper bounds: 1 is allowed where the range says "at most 1". */
    expect_error("[delivery]\nthrottle_increase = 0\n",
                 "t.ini:2: [delivery] throttle_increase: expected a number greater than 0 and at "
                 "most 1, got '0'");
    expect_error("[delivery]\nthrottle_increase = 1.0000001\n",
                 "t.ini:2: [delivery] throttle_increase: expected a number greater than 0 and at "
                 "most 1, got '1.0000001'");
    expect_error("[delivery]\nthrottle_floor = 1e308\n",
                 "t.ini:2: [delivery] throttle_floor: expected a number greater than 0 and at most "
                 "1, got '1e308'");
    expect_error("[delivery]\nthrottle_floor = -1e-300\n",
                 "t.ini:2: [delivery] throttle_floor: expected a number greater than 0 and at most "
                 "1, got '-1e-300'");
    pgp_config c;
    pgp_error err = {{0}};
    assert_int_equal(load_text(&c,
                               "[delivery]\nthrottle_increase = 1\nthrottle_floor = 1e0\n"
                               "throttle_decrease = 0.99999999999999989\n",
                               &err),
                     0);
    assert_true(c.throttle_increase == 1.0);
    assert_true(c.throttle_floor == 1.0);
    assert_true(c.throttle_decrease < 1.0 && c.throttle_decrease > 0.9999999999999998);
    /* Blanks around the value are the INI format's, not the number's. */
    assert_int_equal(load_text(&c, "[delivery]\nthrottle_decrease =   0.5 \t\n", &err), 0);
    assert_true(c.throttle_decrease == 0.5);
    /* The smallest normal double is a usable (if silly) value; ".5" is a decimal number. */
    assert_int_equal(load_text(&c, "[delivery]\nthrottle_floor = 2.3e-308\n", &err), 0);
    assert_true(c.throttle_floor == 2.3e-308);
    assert_int_equal(load_text(&c, "[delivery]\nthrottle_floor = .5\n", &err), 0);
    assert_true(c.throttle_floor == 0.5);
    /* Set twice is an error like any other key. */
    expect_error("[delivery]\nthrottle_floor = 0.1\nthrottle_floor = 0.2\n",
                 "t.ini:3: [delivery] throttle_floor: duplicate key (already set on line 2)");
}

static void test_bad_bool(void **state)
{
    expect_error("[delivery]\ndead_letter_on_4xx = maybe\n",
                 "t.ini:2: [delivery] dead_letter_on_4xx: expected true or false (or yes/no, "
                 "on/off, 1/0), got 'maybe'");
    expect_error("[delivery]\ndead_letter_on_4xx =\n",
                 "t.ini:2: [delivery] dead_letter_on_4xx: expected true or false (or yes/no, "
                 "on/off, 1/0), got ''");
}

static void test_bad_enum(void **state)
{
    expect_error("[log]\nlevel = verbose\n",
                 "t.ini:2: [log] level: expected one of debug, info, warn, error, got 'verbose'");
    expect_error("[log]\nformat = xml\n",
                 "t.ini:2: [log] format: expected one of logfmt, json, got 'xml'");
    pgp_config c;
    pgp_error err = {{0}};
    assert_int_equal(load_text(&c, "[log]\nlevel = warn\nformat = JSON\n", &err), 0);
    assert_int_equal(c.log_level, LOG_LEVEL_WARN);
    assert_int_equal(c.log_format, LOG_FORMAT_JSON);
}

static void test_string_too_long(void **state)
{
    char text[256];
    int n = snprintf(text, sizeof text, "[dispatcher]\ninstance_name = ");
    memset(text + n, 'n', 150);
    memcpy(text + n + 150, "\n", 2);
    expect_error(text,
                 "t.ini:2: [dispatcher] instance_name: value too long (150 bytes, at most 127)");
    /* 127 bytes fit. */
    memcpy(text + n + 127, "\n", 2);
    pgp_config c;
    pgp_error err = {{0}};
    assert_int_equal(load_text(&c, text, &err), 0);
    assert_int_equal(strlen(c.instance_name), 127);
}

/* instance_name goes into application_name, which PostgreSQL keeps printable ASCII. */
static void test_instance_name_ascii(void **state)
{
    expect_error("[dispatcher]\ninstance_name = z\xc3\xbcrich-1\n",
                 "t.ini:2: [dispatcher] instance_name: printable ASCII only (byte 0xc3)");
    expect_error("[dispatcher]\ninstance_name = a\x01"
                 "b\n",
                 "t.ini:2: [dispatcher] instance_name: printable ASCII only (byte 0x01)");
    pgp_config c;
    pgp_error err = {{0}};
    assert_int_equal(load_text(&c, "[dispatcher]\ninstance_name = eu-west:node 1~\n", &err), 0);
    assert_string_equal(c.instance_name, "eu-west:node 1~");
}

static void test_duplicate_key(void **state)
{
    expect_error("[dispatcher]\nlease_seconds = 5\n# again\nlease_seconds = 6\n",
                 "t.ini:4: [dispatcher] lease_seconds: duplicate key (already set on line 2)");
    /* Also when the section is opened twice. */
    expect_error("[log]\nlevel = info\n[database]\n[log]\nlevel = warn\n",
                 "t.ini:5: [log] level: duplicate key (already set on line 2)");
    /* Reopening a section with other keys is fine. */
    pgp_config c;
    pgp_error err = {{0}};
    assert_int_equal(load_text(&c, "[log]\nlevel = warn\n[database]\n[log]\nformat = json\n", &err),
                     0);
    /* allow_cidrs is a list: its lines add up (a line holds at most 199 bytes). */
    assert_int_equal(
        load_text(&c, "[delivery]\nallow_cidrs = 10.0.0.0/8\nallow_cidrs = ::1/128\n", &err), 0);
    assert_string_equal(c.allow_cidrs, "10.0.0.0/8, ::1/128");
    /* Stored the same however the entries are spread over lines and separators. */
    assert_int_equal(load_text(&c,
                               "[delivery]\nallow_cidrs = , 127.0.0.1\nallow_cidrs = ,\n"
                               "allow_cidrs = ::1 ,,\t10.0.0.0/8 ,\n",
                               &err),
                     0);
    assert_string_equal(c.allow_cidrs, "127.0.0.1, ::1, 10.0.0.0/8");
    /* A bad entry is refused where it is written, on the first line or a later one, with file
     * and line, by the loader rather than only when `run` starts. */
    expect_error("[delivery]\nallow_cidrs = 10.0.0.0/33\n",
                 "t.ini:2: [delivery] allow_cidrs: allow-list entry \"10.0.0.0/33\": prefix "
                 "length 33 out of range 0-32");
    expect_error("[delivery]\nallow_cidrs = 127.0.0.0/8\n\nallow_cidrs = dead_letter\n",
                 "t.ini:4: [delivery] allow_cidrs: allow-list entry \"dead_letter\": not an IPv4 "
                 "or IPv6 address or CIDR");
}

static void test_key_outside_section(void **state)
{
    expect_error("lease_seconds = 5\n[dispatcher]\n",
                 "t.ini:1: key 'lease_seconds' is outside any section (it belongs under "
                 "[dispatcher])");
    expect_error("# header\nfoo = 1\n",
                 "t.ini:2: key 'foo' is outside any section (sections: database, dispatcher, "
                 "delivery, health, log, http)");
}

static void test_cross_field(void **state)
{
    expect_error("[dispatcher]\nretry_base_ms = 5000\nretry_cap_ms = 1000\n",
                 "t.ini:3: [dispatcher] retry_base_ms (5000) must not be greater than "
                 "retry_cap_ms (1000)");
    /* Only one key set: its line is named. */
    expect_error("[dispatcher]\n\nretry_cap_ms = 999\n",
                 "t.ini:3: [dispatcher] retry_base_ms (1000) must not be greater than "
                 "retry_cap_ms (999)");
    expect_error("[delivery]\nbreaker_cooldown_max_ms = 1000\n\nbreaker_cooldown_ms = 2000\n",
                 "t.ini:4: [delivery] breaker_cooldown_ms (2000) must not be greater than "
                 "breaker_cooldown_max_ms (1000)");
    /* The tenant page's framing origins: the key's line is named. */
    expect_error("[http]\n\nportal_frame_ancestors = https://ok.example javascript:alert(1)\n",
                 "t.ini:3: [http] portal_frame_ancestors: expected origins such as "
                 "https://dashboard.example.com, space separated (at most 8)");
}

static void test_nul_byte(void **state)
{
    static const char text[] = "[log]\nlevel = in\0fo\n";
    FILE *f = fmemopen((void *)(uintptr_t)text, sizeof text - 1, "r");
    assert_non_null(f);
    pgp_config c;
    pgp_error err = {{0}};
    assert_int_equal(config_load_stream(&c, f, "t.ini", &err), -EINVAL);
    fclose(f);
    assert_string_equal(err.msg, "t.ini:2: line contains a NUL byte");
}

static void test_unchanged_on_error(void **state)
{
    static const char *const bad[] = {
        "[dispatcher]\nlease_seconds = 5\nlease_seconds = x\n",
        "[dispatcher]\nlease_seconds = 5\n[nope]\n",
        "[dispatcher]\nlease_seconds = 5\nretry_base_ms = 9999999\nretry_cap_ms = 1\n",
        "[dispatcher]\nlease_seconds = 5\njunk\n",
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        pgp_config c, before;
        memset(&c, 0x5a, sizeof c);
        c.path[0] = '\0';
        memcpy(&before, &c, sizeof c);
        pgp_error err = {{0}};
        assert_int_equal(load_text(&c, bad[i], &err), -EINVAL);
        assert_memory_equal(&c, &before, sizeof c);
    }
    /* Also for a file that cannot be opened. */
    pgp_config c, before;
    memset(&c, 0x33, sizeof c);
    memcpy(&before, &c, sizeof c);
    pgp_error err = {{0}};
    assert_int_equal(config_load(&c, "/nonexistent/pgpace.ini", &err), -ENOENT);
    assert_memory_equal(&c, &before, sizeof c);
}

static void test_load_path(void **state)
{
    char *path = temp_file("[dispatcher]\n\nlease_seconds = 7\nlease_seconds = 8\n");
    pgp_config c;
    config_defaults(&c);
    pgp_error err = {{0}};
    assert_int_equal(config_load(&c, path, &err), -EINVAL);
    char want[1024];
    snprintf(want, sizeof want,
             "%s:4: [dispatcher] lease_seconds: duplicate key (already set on line 3)", path);
    assert_string_equal(err.msg, want);
    assert_string_equal(c.path, "");
    unlink(path);
    free(path);

    path = temp_file("[dispatcher]\nlease_seconds = 7\n");
    assert_int_equal(config_load(&c, path, &err), 0);
    assert_int_equal(c.lease_seconds, 7);
    assert_string_equal(c.path, path);
    unlink(path);

    /* Gone now: the open error names the path and the reason. */
    assert_int_equal(config_load(&c, path, &err), -ENOENT);
    snprintf(want, sizeof want, "cannot open config file '%s': No such file or directory", path);
    assert_string_equal(err.msg, want);
    assert_int_equal(c.lease_seconds, 7);
    free(path);
}

static void test_unreadable(void **state)
{
    pgp_config c;
    config_defaults(&c);
    pgp_error err = {{0}};
    assert_int_equal(config_load(&c, "/nonexistent/dir/pgpace.ini", &err), -ENOENT);
    assert_string_equal(err.msg, "cannot open config file '/nonexistent/dir/pgpace.ini': No such "
                                 "file or directory");
    /* A directory opens but cannot be read. */
    int rc = config_load(&c, "/", &err);
    assert_true(rc < 0);
    assert_string_equal(err.msg, "cannot read config file '/': Is a directory");
    assert_string_equal(c.path, "");
}

static void test_example_file(void **state)
{
    const char *root = getenv("PGPACE_SOURCE_ROOT");
    if (!root || !*root)
        skip();
    char path[1024];
    snprintf(path, sizeof path, "%s/config/pgpace.ini.example", root);
    pgp_config c, d;
    pgp_error err = {{0}};
    config_defaults(&d);
    int rc = config_load(&c, path, &err);
    if (rc != 0)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_string_equal(c.path, path);
    char *got = dump_to_string(&c);
    char *want = dump_to_string(&d);
    assert_string_equal(got, want);

    /* Every key is present in the example, with its default value (not merely defaulted). */
    char *text = read_file(path);
    for (char *line = strtok(want, "\n"); line; line = strtok(NULL, "\n")) {
        const char *key = strchr(line, '.') + 1;
        char needle[256];
        snprintf(needle, sizeof needle, "\n%s\n", key);
        /* "conninfo = " is written without the trailing space. */
        size_t n = strlen(needle);
        if (n >= 3 && needle[n - 2] == ' ')
            memmove(needle + n - 2, "\n", 2);
        assert_contains(text, needle);
    }
    free(text);
    free(got);
    free(want);
}

static void test_durations(void **state)
{
    pgp_config c;
    pgp_error err;
    static const struct {
        const char *text;
        long long ms;
    } ok[] = {{"0", 0},
              {"250ms", 250},
              {"90s", 90000},
              {"15m", 900000},
              {"2h", 7200000},
              {"5d", 432000000},
              {"3650d", 3650LL * 86400000}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char ini[128];
        snprintf(ini, sizeof ini, "[health]\ndisable_after = %s\n", ok[i].text);
        FILE *in = fmemopen(ini, strlen(ini), "r");
        int rc = config_load_stream(&c, in, "t.ini", &err);
        fclose(in);
        if (rc != 0)
            print_error("%s: %s\n", ok[i].text, err.msg);
        assert_int_equal(rc, 0);
        assert_true(c.disable_after_ms == ok[i].ms);
    }
    expect_error("[health]\ndisable_after = 5\n",
                 "t.ini:2: [health] disable_after: expected a duration with a unit (ms, s, m, h, "
                 "d) from 0 to 3650d (0: off), got '5'");
    expect_error("[health]\ndisable_after = 5 d\n",
                 "t.ini:2: [health] disable_after: expected a duration with a unit (ms, s, m, h, "
                 "d) from 0 to 3650d (0: off), got '5 d'");
    expect_error("[health]\ndisable_after = -1d\n",
                 "t.ini:2: [health] disable_after: expected a duration with a unit (ms, s, m, h, "
                 "d) from 0 to 3650d (0: off), got '-1d'");
    expect_error("[health]\ndisable_after = 3651d\n",
                 "t.ini:2: [health] disable_after: expected a duration with a unit (ms, s, m, h, "
                 "d) from 0 to 3650d (0: off), got '3651d'");
    expect_error("[health]\ndisable_after = 99999999999999999d\n",
                 "t.ini:2: [health] disable_after: expected a duration with a unit (ms, s, m, h, "
                 "d) from 0 to 3650d (0: off), got '99999999999999999d'");
    expect_error("[health]\ncheck_interval = 0\n",
                 "t.ini:2: [health] check_interval: expected a duration with a unit (ms, s, m, h, "
                 "d) from 100ms to 1h, got '0'");
    expect_error("[health]\ncheck_interval = 1w\n",
                 "t.ini:2: [health] check_interval: expected a duration with a unit (ms, s, m, h, "
                 "d) from 100ms to 1h, got '1w'");
}

static void test_operator_webhook(void **state)
{
    expect_error("[health]\noperator_webhook_url = https://ops.example/hook\n",
                 "t.ini:2: [health] operator_webhook_url needs operator_webhook_secret (a whsec_ "
                 "secret to sign the events with)");
    expect_error("[health]\n\noperator_webhook_secret = whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
                 "t.ini:3: [health] operator_webhook_secret is set but operator_webhook_url is "
                 "not");
    /* ca_file: a readable file of PEM certificates (the integration test dispatch_mtls loads a
     * real one); /dev/null opens but holds none. */
    expect_error("[delivery]\nca_file = /nonexistent/ca.pem\n",
                 "t.ini:2: [delivery] ca_file: cannot open '/nonexistent/ca.pem': No such file or "
                 "directory");
    expect_error("[delivery]\n\nca_file = /dev/null\n",
                 "t.ini:3: [delivery] ca_file: '/dev/null' holds no PEM certificate (-----BEGIN "
                 "CERTIFICATE-----)");
    expect_error("[health]\noperator_webhook_url = ftp://ops.example/\n"
                 "operator_webhook_secret = whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
                 "t.ini:2: [health] operator_webhook_url: scheme must be http or https, got "
                 "'ftp'");
    expect_error("[health]\noperator_webhook_url = https://ops.example/hook\n"
                 "operator_webhook_secret = hunter2\n",
                 "t.ini:3: [health] operator_webhook_secret: expected whsec_ followed by base64 "
                 "of 24 to 64 bytes");
    /* An Ed25519 secret signs customers' webhooks, not the operator's (HMAC only). */
    expect_error("[health]\noperator_webhook_url = https://ops.example/hook\n"
                 "operator_webhook_secret = whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=\n",
                 "t.ini:3: [health] operator_webhook_secret: expected whsec_ followed by base64 "
                 "of 24 to 64 bytes");
    /* Valid: loaded, and the secret never dumped. */
    char ini[] = "[health]\noperator_webhook_url = https://ops.example/hook\n"
                 "operator_webhook_secret = whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n";
    pgp_config c;
    pgp_error err;
    FILE *in = fmemopen(ini, strlen(ini), "r");
    assert_int_equal(config_load_stream(&c, in, "t.ini", &err), 0);
    fclose(in);
    char *out = dump_to_string(&c);
    assert_contains(out, "health.operator_webhook_url = https://ops.example/hook\n");
    assert_contains(out, "health.operator_webhook_secret = (redacted)\n");
    assert_null(strstr(out, "MfKQ9r8"));
    free(out);
}

/* [delivery] proxy and no_proxy (proxy.h): checked at load with the line, the key and what is
 * wrong; a URL with credentials is refused without being quoted. */
static void test_proxy_keys(void **state)
{
    (void)state;
    expect_error("[delivery]\nproxy = socks5://p.example:1080\n",
                 "t.ini:2: [delivery] proxy: scheme 'socks5' is not supported (https:// and SOCKS "
                 "proxies are not); expected http://HOST:PORT (an HTTP proxy that accepts "
                 "CONNECT)");
    expect_error("[delivery]\nproxy = https://p.example:3128\n",
                 "t.ini:2: [delivery] proxy: scheme 'https' is not supported (https:// and SOCKS "
                 "proxies are not); expected http://HOST:PORT (an HTTP proxy that accepts "
                 "CONNECT)");
    expect_error("[delivery]\nproxy = http://p.example\n",
                 "t.ini:2: [delivery] proxy: the port is required; expected http://HOST:PORT (an "
                 "HTTP proxy that accepts CONNECT)");
    expect_error("[delivery]\nproxy = http://p.example:0\n",
                 "t.ini:2: [delivery] proxy: the port must be a number from 1 to 65535; expected "
                 "http://HOST:PORT (an HTTP proxy that accepts CONNECT)");
    expect_error("[delivery]\nproxy = http://p.example:3128/path\n",
                 "t.ini:2: [delivery] proxy: a proxy URL has no path, query or fragment; expected "
                 "http://HOST:PORT (an HTTP proxy that accepts CONNECT)");
    expect_error("[delivery]\nproxy = http://p.example:31\r28\n",
                 "t.ini:2: [delivery] proxy: contains whitespace, a control character (CR, LF, "
                 "...) or a non-ASCII byte (0x0d at position 20)");
    expect_error("[delivery]\nproxy = http://bad_host:3128\n",
                 "t.ini:2: [delivery] proxy: invalid host 'bad_host'; expected http://HOST:PORT "
                 "(an HTTP proxy that accepts CONNECT)");
    expect_error("[delivery]\nproxy = http://[::1x]:3128\n",
                 "t.ini:2: [delivery] proxy: invalid IPv6 address '::1x'");
    expect_error("[delivery]\nproxy = p.example:3128\n",
                 "t.ini:2: [delivery] proxy: expected http://HOST:PORT (an HTTP proxy that accepts "
                 "CONNECT), got 'p.example:3128'");
    expect_error("[delivery]\nproxy = http://p.example:3128\nproxy = http://q.example:3128\n",
                 "t.ini:3: [delivery] proxy: duplicate key (already set on line 2)");
    /* Credentials: refused, and the message does not repeat them. */
    pgp_config c;
    pgp_error err = {{0}};
    config_defaults(&c);
    assert_int_equal(load_text(&c, "[delivery]\nproxy = http://u:hunter2@p.example:3128\n", &err),
                     -EINVAL);
    assert_string_equal(err.msg, "t.ini:2: [delivery] proxy: credentials (user:password@) in the "
                                 "proxy URL are not supported; expected http://HOST:PORT (an "
                                 "HTTP proxy that accepts CONNECT)");
    assert_null(strstr(err.msg, "hunter2"));

    expect_error("[delivery]\nno_proxy = example.com\nno_proxy = bad_name\n",
                 "t.ini:3: [delivery] no_proxy: entry \"bad_name\": expected a host name "
                 "(\"example.com\" or \".example.com\"), an IP address or a CIDR");
    expect_error("[delivery]\nno_proxy = 10.0.0.0/33\n",
                 "t.ini:2: [delivery] no_proxy: entry \"10.0.0.0/33\": expected a host name, an "
                 "IP address or a CIDR");
    expect_error("[delivery]\nno_proxy = *\n",
                 "t.ini:2: [delivery] no_proxy: entry \"*\": expected a host name "
                 "(\"example.com\" or \".example.com\"), an IP address or a CIDR");

    /* Valid: the lists add up, the dump shows both (nothing secret in them). */
    config_defaults(&c);
    assert_int_equal(load_text(&c,
                               "[delivery]\nproxy = http://[::1]:3128/\n"
                               "no_proxy = .Corp.Example, 10.0.0.0/8\nno_proxy = ::1 localhost\n",
                               &err),
                     0);
    assert_string_equal(c.proxy, "http://[::1]:3128/");
    assert_string_equal(c.no_proxy, ".Corp.Example, 10.0.0.0/8, ::1, localhost");
    char *out = dump_to_string(&c);
    assert_contains(out, "delivery.proxy = http://[::1]:3128/\n");
    assert_contains(out, "delivery.no_proxy = .Corp.Example, 10.0.0.0/8, ::1, localhost\n");
    free(out);

    /* Matching (proxy.h): names and their subdomains, IP literals by CIDR, nothing resolved. */
    proxy_bypass *b = malloc(sizeof *b);
    assert_non_null(b);
    assert_int_equal(proxy_bypass_parse(c.no_proxy, b, &err), 0);
    assert_true(proxy_bypass_match(b, "https://corp.example/hook"));
    assert_true(proxy_bypass_match(b, "https://API.corp.example:8443/hook"));
    assert_false(proxy_bypass_match(b, "https://badcorp.example/hook"));
    assert_false(proxy_bypass_match(b, "https://corp.example.evil.test/hook"));
    assert_true(proxy_bypass_match(b, "http://10.1.2.3:8080/x"));
    assert_false(proxy_bypass_match(b, "http://11.1.2.3:8080/x"));
    assert_true(proxy_bypass_match(b, "http://[::1]:8080/x"));
    assert_true(proxy_bypass_match(b, "http://localhost:8080/x"));
    assert_false(proxy_bypass_match(b, "http://127.0.0.1:8080/x"));
    assert_int_equal(proxy_bypass_parse("", b, &err), 0);
    assert_false(proxy_bypass_match(b, "https://corp.example/hook"));
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_dump),
        cmocka_unit_test(test_empty_and_comments),
        cmocka_unit_test(test_full_valid_file),
        cmocka_unit_test(test_bool_spellings),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_unknown_section),
        cmocka_unit_test(test_malformed_line),
        cmocka_unit_test(test_line_too_long),
        cmocka_unit_test(test_bad_int),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_bad_double),
        cmocka_unit_test(test_dump_round_trips_doubles),
        cmocka_unit_test(test_bad_bool),
        cmocka_unit_test(test_bad_enum),
        cmocka_unit_test(test_string_too_long),
        cmocka_unit_test(test_instance_name_ascii),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_key_outside_section),
        cmocka_unit_test(test_cross_field),
        cmocka_unit_test(test_nul_byte),
        cmocka_unit_test(test_unchanged_on_error),
        cmocka_unit_test(test_load_path),
        cmocka_unit_test(test_unreadable),
        cmocka_unit_test(test_example_file),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_operator_webhook),
        cmocka_unit_test(test_proxy_keys),
    };
    return TL_RUN(tests, NULL, NULL);
}
