/* test_clock.c - the dispatcher's clock against steps of its host's wall clock and against a
 * host clock that differs from the database server's (src/timebase.h).
 *
 * The dispatcher runs under Debian's libfaketime, on the pgpace process only (LD_PRELOAD, the
 * machine's clock is never touched): FAKETIME_TIMESTAMP_FILE holds the offset ("+0", then
 * "+30s" or "-30s" mid-run, or "+5s"/"-5s" from the start), re-read at every call
 * (FAKETIME_NO_CACHE), and CLOCK_MONOTONIC is left alone (FAKETIME_DONT_FAKE_MONOTONIC), as a
 * real step leaves it. The receiver and PostgreSQL run on the real clock, so arrival times and
 * the server's now() are the truth the assertions use. Each run checks that the step really
 * reached the dispatcher (its log lines' timestamps move by it), so a libfaketime that did
 * nothing would fail the test rather than pass it.
 *
 * What must hold (issue: clock steps): spaced customers neither stall for the step nor send
 * closer than their period; batch ticks are neither skipped nor repeated; breaker cooldowns
 * keep their length; with a host clock 5 s off, delayed items and retries come when the
 * server's clock says and webhook-timestamp is the server's time.
 */
#include "fixture.h"

#include <glob.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MS  1000LL
#define SEC 1000000LL

typedef struct clock_env {
    char file[64];
    char *vars[8];
} clock_env;

/* libfaketime's path (Debian multiarch: /usr/lib/<triplet>/faketime/); the test fails without
 * it (tests/tools/install-deps.sh installs it), it is never skipped. */
static char *faketime_library(void)
{
    glob_t g;
    int rc = glob("/usr/lib/*/faketime/libfaketime.so.1", 0, NULL, &g);
    if (rc != 0 || g.gl_pathc == 0)
        fail_msg("libfaketime not found (Debian package libfaketime)");
    char *path = strdup(g.gl_pathv[0]);
    globfree(&g);
    assert_non_null(path);
    return path;
}

static void set_offset(const clock_env *ce, const char *offset)
{
    FILE *f = fopen(ce->file, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", offset);
    assert_int_equal(fclose(f), 0);
}

static void clock_env_make(clock_env *ce, const char *offset)
{
    snprintf(ce->file, sizeof ce->file, "/tmp/pgpace-faketime-%d-XXXXXX", (int)getpid());
    int fd = mkstemp(ce->file);
    assert_true(fd >= 0);
    close(fd);
    set_offset(ce, offset);
    char *lib = faketime_library();
    const char *asan = getenv("ASAN_OPTIONS");
    int n = 0;
    assert_true(asprintf(&ce->vars[n++], "LD_PRELOAD=%s", lib) > 0);
    assert_true(asprintf(&ce->vars[n++], "FAKETIME_TIMESTAMP_FILE=%s", ce->file) > 0);
    ce->vars[n++] = strdup("FAKETIME_NO_CACHE=1");
    ce->vars[n++] = strdup("FAKETIME_DONT_FAKE_MONOTONIC=1");
    /* Under AddressSanitizer the preloaded library comes before its runtime: allowed here. */
    assert_true(asprintf(&ce->vars[n++], "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
                         asan ? asan : "", asan && *asan ? ":" : "") > 0);
    ce->vars[n] = NULL;
    free(lib);
}

static void clock_env_free(clock_env *ce)
{
    for (int i = 0; ce->vars[i]; i++) {
        free(ce->vars[i]);
        ce->vars[i] = NULL;
    }
    if (ce->file[0])
        unlink(ce->file);
    ce->file[0] = '\0';
}

/* One per test; freed by teardown after the service stopped, also when the test failed. */
static clock_env ce;

static int teardown(void **state)
{
    fx_teardown(state);
    clock_env_free(&ce);
    return 0;
}

/* The dispatcher's wall clock minus the real one, from the timestamp of its latest
 * `config_reloaded` log line after a SIGHUP (the line is written at once, so the real time is
 * known within the wait). */
static int64_t dispatcher_wall_offset_us(fx *f, int reload_no)
{
    int64_t before = fx_now_us();
    assert_int_equal(kill(f->svc.pid, SIGHUP), 0);
    char needle[64];
    int64_t deadline = fx_now_us() + 10 * SEC;
    char *log = NULL, *line = NULL;
    for (;;) {
        free(log);
        log = fx_log(f);
        int seen = 0;
        line = NULL;
        for (char *p = strstr(log, "event=config_reloaded"); p;
             p = strstr(p + 1, "event=config_reloaded")) {
            if (++seen == reload_no)
                line = p;
        }
        if (line || fx_now_us() > deadline)
            break;
        usleep(20000);
    }
    int64_t after = fx_now_us();
    snprintf(needle, sizeof needle, "reload %d", reload_no);
    if (!line)
        fail_msg("no config_reloaded line for %s", needle);
    while (line > log && line[-1] != '\n')
        line--;
    struct tm tm = {0};
    int ms = 0;
    char *end = strptime(line, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    assert_non_null(end);
    assert_int_equal(sscanf(end, ".%3dZ", &ms), 1);
    int64_t at = (int64_t)timegm(&tm) * SEC + ms * MS;
    free(log);
    return at - (before + after) / 2;
}

/* Arrival times (us) of a path prefix's requests, in order; *n their count. */
static int64_t *arrivals(fx *f, const char *prefix, size_t *n)
{
    size_t total = receiver_count(f->recv, NULL);
    int64_t *at = calloc(total + 1, sizeof *at);
    assert_non_null(at);
    size_t k = 0;
    for (size_t i = 0; i < total; i++) {
        receiver_request r;
        if (receiver_get(f->recv, i, &r) != 0)
            continue;
        if (strncmp(r.path, prefix, strlen(prefix)) == 0)
            at[k++] = r.at_us;
        free(r.body);
    }
    *n = k;
    return at;
}

static void customers(fx *f)
{
    /* Spaced, 300/min: one every 200 ms, burst 1. */
    fx_customer(f, "sp", (const char *[]){"--rate", "300", NULL});
    /* Batch, 2 per tick of 1000 ms (the fixture's batch_tick_ms). */
    fx_customer(f, "bt", (const char *[]){"--mode", "batch", "--rate", "2", NULL});
    fx_enqueue_many(f, "sp", 200);
    fx_enqueue_many(f, "bt", 100);
}

/* Spaced at 200 ms: the sends the dispatcher recorded (its clock, delivery_attempt.started_at)
 * are never closer than the period (less 1 ms); at the receiver (the real clock) no gap is
 * shorter than the period by more than HTTP jitter (30 ms: a step's 30 s would show whole) or
 * longer than a stall would make it. */
static void check_spacing(fx *f, const int64_t *at, size_t n, const char *what)
{
    int64_t min_gap = INT64_MAX, max_gap = 0;
    for (size_t i = 1; i < n; i++) {
        int64_t g = at[i] - at[i - 1];
        if (g < min_gap)
            min_gap = g;
        if (g > max_gap)
            max_gap = g;
    }
    long long sends = 0;
    int64_t min_send_gap = tl_min_send_gap_us(f->db->conn, "sp", &sends);
    print_message("# %s: %zu requests, gaps at the receiver min %.1f ms max %.1f ms, recorded "
                  "sends min %.1f ms (period 200 ms)\n",
                  what, n, (double)min_gap / MS, (double)max_gap / MS, (double)min_send_gap / MS);
    if (sends < 10 || min_send_gap < 199 * MS)
        fail_msg("%s: recorded sends %lld gaps, smallest %.1f ms, under the 200 ms period", what,
                 sends, (double)min_send_gap / MS);
    if (min_gap < 170 * MS)
        fail_msg("%s: a gap of %.1f ms at the receiver, under the 200 ms period", what,
                 (double)min_gap / MS);
    /* A stall from a step shows as the step's 30 s; a busy machine delays a send by far less. */
    if (max_gap > 10000 * MS)
        fail_msg("%s: a gap of %.1f ms: stalled", what, (double)max_gap / MS);
}

/* Batch: no whole tick in [from, to) (seconds of the real clock, the server's ticks) has more
 * than its allowance of 2, and all but one at most have it whole: a step that stalled ticks or
 * sent two at once shows, while one tick a busy machine's scheduler made the dispatcher miss
 * (it sends a tick once, never late into the next) does not fail the test. */
static void check_ticks(const int64_t *at, size_t n, int64_t from_s, int64_t to_s, const char *what)
{
    int counts[256] = {0};
    assert_true(to_s - from_s < 256);
    for (size_t i = 0; i < n; i++) {
        /* A tick's requests go out at its boundary: counted from 300 ms before it (a timer
         * that fires a millisecond early) to 700 ms after it. */
        int64_t s = (at[i] + 300 * MS) / SEC;
        if (s >= from_s && s < to_s)
            counts[s - from_s]++;
    }
    char row[512] = "";
    for (int64_t s = 0; s < to_s - from_s; s++)
        snprintf(row + strlen(row), sizeof row - strlen(row), "%d", counts[s]);
    print_message("# %s: requests per tick %s\n", what, row);
    int short_ticks = 0;
    for (int64_t s = 0; s < to_s - from_s; s++) {
        if (counts[s] > 2)
            fail_msg("%s: tick %" PRId64 " of %" PRId64 " had %d requests, allowance 2 (%s)", what,
                     s + 1, to_s - from_s, counts[s], row);
        short_ticks += counts[s] < 2;
    }
    if (short_ticks > 1)
        fail_msg("%s: %d of %" PRId64 " ticks had less than their allowance of 2 (%s)", what,
                 short_ticks, to_s - from_s, row);
}

static void wall_clock_step(fx *f, const char *step, int64_t step_us)
{
    clock_env_make(&ce, "+0");
    customers(f);
    fx_run_env(f, NULL, (const char *const *)ce.vars);
    assert_true(fx_wait_log(f, "event=leader_elected", 15000));
    assert_true(receiver_wait(f->recv, "/c/sp", 10, 15000) >= 10);
    int64_t before_off = dispatcher_wall_offset_us(f, 1);
    int64_t step_at = fx_now_us();
    set_offset(&ce, step);
    /* The step reached the dispatcher: its log's clock moved by it (a second either way). */
    int64_t after_off = dispatcher_wall_offset_us(f, 2);
    print_message("# wall clock offset before %.3f s, after %.3f s (step %s)\n",
                  (double)before_off / SEC, (double)after_off / SEC, step);
    if (llabs(after_off - before_off - step_us) > SEC)
        fail_msg("libfaketime did not step the dispatcher's clock by %s", step);
    /* 6 s more after the step: 30 spaced requests (a stall of the step's 30 s would miss the
     * deadline), 6 ticks. */
    size_t had = receiver_count(f->recv, "/c/sp");
    assert_true(receiver_wait(f->recv, "/c/sp", had + 30, 15000) >= had + 30);
    int64_t end = fx_now_us();
    size_t n;
    int64_t *sp = arrivals(f, "/c/sp", &n);
    check_spacing(f, sp, n, "spaced across the step");
    free(sp);
    int64_t *bt = arrivals(f, "/c/bt", &n);
    /* Whole ticks from the first full one to the last complete one before `end`. */
    check_ticks(bt, n, (bt[0] + 300 * MS) / SEC + 1, (end - 700 * MS) / SEC,
                "batch across the step");
    free(bt);
    print_message("# the step came %.1f s before the end\n", (double)(end - step_at) / SEC);
}

static void wall_clock_steps_forward_30s(void **state)
{
    wall_clock_step(*state, "+30s", 30 * SEC);
}

static void wall_clock_steps_back_30s(void **state)
{
    wall_clock_step(*state, "-30s", -30 * SEC);
}

/* A lease keeps its length across a step. The dispatcher checks what is left of an item's lease
 * before a request that comes after a wait (here an OAuth2 token from an endpoint that answers
 * after `token_delay_ms`): a request that could outlast the lease goes back (another claim would
 * send the item twice), one that fits goes. The step comes while the token is awaited, between
 * the claim and the check: a lease on the wall clock would look 30 s shorter after +30s (the
 * item given back for nothing) or 30 s longer after -30s (sent past its lease). Lease 10 s,
 * request timeout 8 s: a 1 s wait leaves room (9 s < 10 s), a 3 s wait does not (11 s). */
static void lease_across_a_step(fx *f, const char *step, int64_t step_us, int token_delay_ms,
                                bool want_given_back)
{
    clock_env_make(&ce, "+0");
    fx_customer(f, "ls", TL_ARGV("--rate", "600"));
    char url[256];
    receiver_url(f->recv, "/token/ls", url, sizeof url);
    tl_proc p = tl_pgpace(TL_ARGV("--db", f->db->conninfo, "customer", "set", "ls", "--auth",
                                  "oauth2", "--oauth-token-url", url, "--oauth-client-id", "cid",
                                  "--oauth-client-secret-file", "-"),
                          "not-a-real-secret\n", NULL);
    if (p.status != 0)
        fail_msg("customer set --auth oauth2: exit %d: %s", p.status, p.err);
    tl_proc_free(&p);
    receiver_on(f->recv,
                &(receiver_rule){.path_prefix = "/token/ls",
                                 .status = 200,
                                 .body = "{\"access_token\":\"t1\",\"token_type\":\"Bearer\"}",
                                 .delay_ms = token_delay_ms});
    long long item = fx_enqueue(f, "ls", NULL, 1);
    fx_run_env(f, "dispatcher.lease_seconds = 10\ndelivery.request_timeout_ms = 8000\n",
               (const char *const *)ce.vars);
    /* The token request came: the item is claimed and waits for it. Step now. */
    assert_true(receiver_wait(f->recv, "/token/ls", 1, 15000) >= 1);
    int64_t claimed_at = fx_now_us();
    set_offset(&ce, step);
    assert_true(receiver_wait(f->recv, "/c/ls", 1, 30000) >= 1);
    size_t n;
    int64_t *at = arrivals(f, "/c/ls", &n);
    int64_t sent_after = at[0] - claimed_at;
    free(at);
    /* Delivered, once. */
    assert_int_equal(tl_wait_query_at_least(f->db->conn, 1, 15000,
                                            "SELECT count(*) FROM pgpace.delivery_attempt "
                                            "WHERE item_id = %lld AND outcome = 'success'",
                                            item),
                     1);
    assert_int_equal(receiver_count(f->recv, "/c/ls"), 1);
    /* The step reached the dispatcher (its log's clock moved by it). */
    int64_t off = dispatcher_wall_offset_us(f, 1);
    if (llabs(off - step_us) > SEC)
        fail_msg("libfaketime did not step the dispatcher's clock by %s (offset %.3f s)", step,
                 (double)off / SEC);
    char *log = fx_log(f);
    bool given_back = strstr(log, "event=delivery_given_back") != NULL;
    free(log);
    print_message("# lease across %s: token after %d ms, webhook %.0f ms after the claim, "
                  "given back: %s\n",
                  step, token_delay_ms, (double)sent_after / MS, given_back ? "yes" : "no");
    if (given_back != want_given_back)
        fail_msg("lease across %s: a %d ms wait with an 8 s request timeout and a 10 s lease %s "
                 "given back",
                 step, token_delay_ms, want_given_back ? "must be" : "must not be");
    /* Sent once the token came, by this claim or (given back) the next, which finds the token. */
    if (sent_after < token_delay_ms * MS - 100 * MS || sent_after > token_delay_ms * MS + 2 * SEC)
        fail_msg("lease across %s: sent %.0f ms after the claim, the token came after %d ms", step,
                 (double)sent_after / MS, token_delay_ms);
}

static void lease_keeps_its_length_forward_30s(void **state)
{
    lease_across_a_step(*state, "+30s", 30 * SEC, 1000, false);
}

static void lease_keeps_its_length_back_30s(void **state)
{
    lease_across_a_step(*state, "-30s", -30 * SEC, 3000, true);
}

/* A breaker's cooldown keeps its length across a step: always-failing customer, breaker after
 * 2 failures, cooldown 2 s (and at most 2 s): from the third attempt on, one attempt per
 * cooldown, whatever the wall clock did in between. */
static void breaker_cooldown_keeps_its_length(void **state)
{
    fx *f = *state;
    clock_env_make(&ce, "+0");
    fx_customer(f, "br", (const char *[]){"--rate", "600", NULL});
    receiver_on(f->recv,
                &(receiver_rule){.path_prefix = "/c/br", .action = RECV_RESPOND, .status = 500});
    fx_enqueue(f, "br", NULL, 3);
    fx_run_env(f,
               "delivery.breaker_failures = 2\ndelivery.breaker_cooldown_ms = 2000\n"
               "delivery.breaker_cooldown_max_ms = 2000\n",
               (const char *const *)ce.vars);
    assert_true(receiver_wait(f->recv, "/c/br", 4, 20000) >= 4);
    set_offset(&ce, "-30s");
    size_t had = receiver_count(f->recv, "/c/br");
    assert_true(receiver_wait(f->recv, "/c/br", had + 2, 15000) >= had + 2);
    set_offset(&ce, "+0"); /* back: +30 s relative to the last */
    had = receiver_count(f->recv, "/c/br");
    assert_true(receiver_wait(f->recv, "/c/br", had + 2, 15000) >= had + 2);
    size_t n;
    int64_t *at = arrivals(f, "/c/br", &n);
    char row[512] = "";
    for (size_t i = 1; i < n; i++)
        snprintf(row + strlen(row), sizeof row - strlen(row), " %.0f",
                 (double)(at[i] - at[i - 1]) / MS);
    print_message("# breaker: gaps between attempts (ms):%s\n", row);
    /* Attempts 1 and 2 open it; every later gap is one cooldown: never shorter, and not the
     * 30 s of the step longer (a busy machine's lateness is far below that). */
    for (size_t i = 2; i < n; i++) {
        int64_t g = at[i] - at[i - 1];
        if (g < 1950 * MS || g > 10000 * MS)
            fail_msg("breaker: gap %zu of %.0f ms, cooldown 2000 ms (gaps:%s)", i, (double)g / MS,
                     row);
    }
    free(at);
}

/* A host clock 5 s off the server's (a dispatcher on another host): nothing a receiver sees
 * changes. */
static void host_clock_off_by(fx *f, const char *offset)
{
    clock_env_make(&ce, offset);
    fx_customer(f, "sp", (const char *[]){"--rate", "300", NULL});
    fx_customer(f, "bt", (const char *[]){"--mode", "batch", "--rate", "2", NULL});
    fx_customer(f, "dl", (const char *[]){"--rate", "600", NULL});
    fx_customer(f, "ra", (const char *[]){"--rate", "600", NULL});
    /* ra: the first request is throttled with a Retry-After of 2 s. */
    receiver_on(f->recv, &(receiver_rule){.path_prefix = "/c/ra",
                                          .action = RECV_RESPOND,
                                          .status = 503,
                                          .retry_after = "2",
                                          .times = 1});
    fx_enqueue_many(f, "sp", 100);
    fx_enqueue_many(f, "bt", 100);
    fx_run_env(f, NULL, (const char *const *)ce.vars);
    assert_true(fx_wait_log(f, "event=leader_elected", 15000));
    assert_true(receiver_wait(f->recv, "/c/sp", 5, 15000) >= 5);
    /* dl: an item due 3 s from now by the server's clock. */
    int64_t enq = fx_now_us();
    tl_exec(f->db->conn, "SELECT pgpace.enqueue('dl', '{}', run_at => now() + interval '3 s')");
    fx_enqueue(f, "ra", NULL, 1);
    int64_t ra_enq = fx_now_us();
    assert_true(receiver_wait(f->recv, "/c/dl", 1, 15000) >= 1);
    assert_true(receiver_wait(f->recv, "/c/ra", 2, 15000) >= 2);
    size_t have = receiver_count(f->recv, "/c/sp");
    assert_true(receiver_wait(f->recv, "/c/sp", have + 20, 15000) >= have + 20);
    int64_t end = fx_now_us();

    size_t n;
    int64_t *dl = arrivals(f, "/c/dl", &n);
    double dl_s = (double)(dl[0] - enq) / SEC;
    print_message("# host clock %s: the item due in 3 s came after %.3f s\n", offset, dl_s);
    /* The offset's error would be 5 s either way; lateness on a busy machine is not, so the
     * late bound sits halfway. */
    if (dl_s < 2.95 || dl_s > 5.5)
        fail_msg("host clock %s: an item due in 3 s came after %.3f s", offset, dl_s);
    free(dl);
    int64_t *ra = arrivals(f, "/c/ra", &n);
    double ra_s = (double)(ra[1] - ra[0]) / SEC;
    print_message("# host clock %s: Retry-After 2 s: retried after %.3f s\n", offset, ra_s);
    if (ra_s < 1.95 || ra_s > 4.5)
        fail_msg("host clock %s: Retry-After of 2 s, retried after %.3f s", offset, ra_s);
    assert_true(ra[0] - ra_enq < 2500 * MS);
    free(ra);
    int64_t *sp = arrivals(f, "/c/sp", &n);
    check_spacing(f, sp, n, offset);
    free(sp);
    int64_t *bt = arrivals(f, "/c/bt", &n);
    check_ticks(bt, n, (bt[0] + 300 * MS) / SEC + 1, (end - 700 * MS) / SEC, offset);
    free(bt);
    /* webhook-timestamp: the server's time, so within a second of the (real) arrival. */
    size_t total = receiver_count(f->recv, NULL);
    int64_t worst = 0;
    for (size_t i = 0; i < total; i++) {
        receiver_request r;
        assert_int_equal(receiver_get(f->recv, i, &r), 0);
        free(r.body);
        int64_t ts = strtoll(r.webhook_timestamp, NULL, 10);
        int64_t diff = r.at_us / SEC - ts;
        if (llabs(diff) > llabs(worst))
            worst = diff;
    }
    print_message("# host clock %s: arrival - webhook-timestamp at most %" PRId64 " s\n", offset,
                  worst);
    if (llabs(worst) > 1)
        fail_msg("host clock %s: webhook-timestamp %" PRId64 " s off the arrival time", offset,
                 worst);
    /* The dispatcher saw the difference and says so (pgpace_clock_offset_seconds). */
    char *m = fx_metrics(f);
    const char *g = strstr(m, "\npgpace_clock_offset_seconds ");
    assert_non_null(g);
    double off = strtod(g + strlen("\npgpace_clock_offset_seconds "), NULL);
    double want = offset[0] == '+' ? -5.0 : 5.0;
    print_message("# host clock %s: pgpace_clock_offset_seconds %.3f\n", offset, off);
    if (off < want - 0.5 || off > want + 0.5)
        fail_msg("host clock %s: pgpace_clock_offset_seconds %.3f, expected %.0f", offset, off,
                 want);
    free(m);
}

static void host_clock_5s_ahead_of_the_server(void **state)
{
    host_clock_off_by(*state, "+5s");
}

static void host_clock_5s_behind_the_server(void **state)
{
    host_clock_off_by(*state, "-5s");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(wall_clock_steps_forward_30s, fx_setup, teardown),
        cmocka_unit_test_setup_teardown(wall_clock_steps_back_30s, fx_setup, teardown),
        cmocka_unit_test_setup_teardown(lease_keeps_its_length_forward_30s, fx_setup, teardown),
        cmocka_unit_test_setup_teardown(lease_keeps_its_length_back_30s, fx_setup, teardown),
        cmocka_unit_test_setup_teardown(breaker_cooldown_keeps_its_length, fx_setup, teardown),
        cmocka_unit_test_setup_teardown(host_clock_5s_ahead_of_the_server, fx_setup, teardown),
        cmocka_unit_test_setup_teardown(host_clock_5s_behind_the_server, fx_setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
