/* test_restart.c - `pgpace run` while the shared PostgreSQL cluster restarts under it:
 * a fast restart in the middle of a run (connection lost, reconnected, every item
 * delivered, the process never exits) and an immediate one, i.e. a crash (the UNLOGGED frontier
 * is emptied by recovery, spacing carries on and no customer gets more than its burst).
 *
 * Restarts the cluster of tests/tools/pgcluster.sh ($PGHOST/data) with pg_ctl, so it must run
 * alone (meson: is_parallel: false). Waits are conditions with deadlines, never sleeps. */
#include "twosvc.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The two-instance fixture: tests/lib/twosvc.h. */

/* ---- customers, items, receiver records ---------------------------------------------------- */

static void enqueue_n(fx *f, const char *customer, int n)
{
    long long got = tl_query_int(f->db->conn,
                                 "SELECT count(pgpace.enqueue('%s', jsonb_build_object('n', g))) "
                                 "FROM generate_series(1, %d) g",
                                 customer, n);
    assert_int_equal(got, n);
}

static long long q_int(fx *f, const char *sql)
{
    return tl_query_int(f->db->conn, "%s", sql);
}

/* ---- restarting the cluster ---------------------------------------------------------------- */

/* The data directory of the cluster started by tests/tools/pgcluster.sh: $PGHOST/data. Skips
 * the test when the cluster is not one this process can restart. */
static void cluster_data_dir(char *buf, size_t len)
{
    const char *host = getenv("PGHOST");
    if (!host || host[0] != '/') {
        printf("# PGHOST is not a socket directory of a pgcluster.sh cluster: skipped\n");
        skip();
    }
    snprintf(buf, len, "%s/data", host);
    char version[600];
    snprintf(version, sizeof version, "%s/PG_VERSION", buf);
    if (access(version, R_OK) != 0) {
        printf("# %s is not readable: cannot restart the cluster, skipped\n", version);
        skip();
    }
}

/* Restarts the shared cluster with pg_ctl in the given shutdown mode (fast or immediate) and
 * waits until it accepts connections again. Runs as the postgres user when we are root. */
static void pg_restart(fx *f, const char *mode)
{
    char data[512];
    cluster_data_dir(data, sizeof data);
    const char *bin = getenv("PGBIN") ? getenv("PGBIN") : "/usr/lib/postgresql/15/bin";
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s'%s/pg_ctl' -D '%s' -l '%s/server.log' -m %s -w -t 60 restart "
             ">/dev/null 2>&1 </dev/null",
             geteuid() == 0 ? "runuser -u postgres -- " : "", bin, data, getenv("PGHOST"), mode);
    int rc = system(cmd);
    CHECK(rc == 0, "pg_ctl restart (-m %s) failed (status %d): %s", mode, rc, cmd);
    /* Our own connection died with the server. */
    PQreset(f->db->conn);
    CHECK(PQstatus(f->db->conn) == CONNECTION_OK, "cannot reconnect after the restart: %s",
          PQerrorMessage(f->db->conn));
    PQclear(PQexec(f->db->conn, "SET client_min_messages = warning"));
}

/* Position of the first event=NAME line at or after `from`, or NULL. */
static const char *find_event(const char *from, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof needle, "event=%s", name);
    size_t len = strlen(needle);
    for (const char *p = strstr(from, needle); p; p = strstr(p + len, needle))
        if (p[len] == ' ' || p[len] == '\n' || p[len] == '\0')
            return p;
    return NULL;
}

/* The log shows connected, lost, connected again, in that order. */
static void assert_reconnected(fx *f)
{
    char *log = tl_service_log(&f->svc[0]);
    const char *first = find_event(log, "db_connected");
    const char *lost = first ? find_event(first, "db_connection_lost") : NULL;
    const char *again = lost ? find_event(lost, "db_connected") : NULL;
    int lost_n = count_event(log, "db_connection_lost");
    free(log);
    CHECK(first && lost && again,
          "expected db_connected, db_connection_lost, db_connected in that order");
    printf("# db_connection_lost logged %d time(s)\n", lost_n);
}

/* Prints the service's final counters (its "stopped" line) as a TAP comment. */
static void print_stopped(const tl_service *s)
{
    char *log = tl_service_log(s);
    const char *p = find_event(log, "stopped");
    if (p) {
        const char *end = strchr(p, '\n');
        printf("# %.*s\n", end ? (int)(end - p) : (int)strlen(p), p);
    }
    free(log);
}

/* ---- 12. a PostgreSQL restart in the middle of a run --------------------------------------- */

static void postgres_restart_mid_run(void **state)
{
    fx *f = *state;
    char data[512];
    cluster_data_dir(data, sizeof data);
    const int n_items = 500;
    customer_set(f, "steady", "6000", NULL); /* spaced, one every 10 ms */
    /* Each answer takes 100 ms, so about 10 deliveries are in flight across the restart and
     * their finalisations must wait for the reconnection (16 connections keep up with the
     * rate: nothing waits for a connection long enough to outlive its lease). */
    receiver_on(f->rx, &(receiver_rule){.path_prefix = "/c/steady",
                                        .action = RECV_RESPOND,
                                        .status = 200,
                                        .body = "ok",
                                        .delay_ms = 100});
    enqueue_n(f, "steady", n_items);
    /* A lease far longer than the outage: nothing may be delivered twice. */
    start_service(f, 0, &(run_opts){"a", 5, 3000, 2000, 0, 0, 0});

    CHECK(rx_wait(f, "steady", 100, 20000) >= 100, "100 deliveries did not happen");
    long long t0 = tl_now_ms();
    pg_restart(f, "fast");
    size_t at_restart = rx_count(f, "steady");
    printf("# fast restart took %lld ms, %zu delivered when it returned\n", tl_now_ms() - t0,
           at_restart);

    CHECK(wait_query_eq(f, QUEUE_EMPTY, 0, 30000), "the queue did not drain after the restart");
    CHECK(alive(&f->svc[0]), "the service exited during the restart");
    assert_reconnected(f);
    CHECK(service_events(&f->svc[0], "leader_elected") >= 2,
          "did not lead again after reconnecting");
    size_t total = 0;
    size_t distinct = distinct_ids(f, "steady", &total);
    printf("# fast restart: %zu requests, %zu distinct webhook-ids, duplicates %zu, run %lld ms\n",
           total, distinct, total - distinct, tl_now_ms() - t0);
    CHECK(distinct == (size_t)n_items, "%zu distinct webhook-ids, expected %d", distinct, n_items);
    CHECK(total == distinct,
          "%zu items delivered twice: finalisations of deliveries in flight across the restart "
          "should have been written after reconnecting, well within the 5 s lease",
          total - distinct);
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.delivery_attempt "
                              "WHERE outcome = 'success'"),
                     n_items);
    assert_int_equal(tl_service_signal(&f->svc[0], SIGTERM, 1, 10000), 0);
    print_stopped(&f->svc[0]);
}

/* ---- 12b. a crash (immediate shutdown): UNLOGGED frontier lost, spacing kept --------------- */

static void postgres_crash_keeps_spacing(void **state)
{
    fx *f = *state;
    char data[512];
    cluster_data_dir(data, sizeof data);
    const int n_items = 12;
    customer_set(f, "paced", "120", TL_ARGV("--burst", "1")); /* one every 500 ms */
    customer_set(f, "idle", "60", NULL);
    /* A frontier row nobody rewrites: it must be gone after crash recovery (UNLOGGED). */
    tl_exec(f->db->conn, "INSERT INTO pgpace.frontier (customer_id, tat) "
                         "SELECT id, now() + interval '1 day' FROM pgpace.customer "
                         "WHERE name = 'idle'");
    enqueue_n(f, "paced", n_items);
    start_service(f, 0, &(run_opts){"a", 3, 3000, 2000, 0, 0, 0});

    CHECK(rx_wait(f, "paced", 4, 20000) >= 4, "4 deliveries did not happen");
    CHECK(wait_query_eq(f,
                        "SELECT count(*) FROM pgpace.frontier f JOIN pgpace.customer c "
                        "ON c.id = f.customer_id WHERE c.name = 'paced' AND f.tat IS NOT NULL",
                        1, 5000),
          "no frontier row for the spaced customer before the crash");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t crash_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    pg_restart(f, "immediate");
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t back_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    printf("# immediate restart took %.0f ms\n", (back_us - crash_us) / 1000.0);
    char *persistence = tl_query_str(f->db->conn, "SELECT relpersistence FROM pg_class "
                                                  "WHERE oid = 'pgpace.frontier'::regclass");
    assert_string_equal(persistence, "u");
    free(persistence);
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.frontier f JOIN pgpace.customer c "
                              "ON c.id = f.customer_id WHERE c.name = 'idle'"),
                     0);

    CHECK(wait_query_eq(f, QUEUE_EMPTY, 0, 30000), "the queue did not drain after the crash");
    CHECK(alive(&f->svc[0]), "the service exited during the crash");
    assert_reconnected(f);
    /* Spacing resumed: the frontier is written again by the claims after the crash. */
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.frontier f JOIN pgpace.customer c "
                              "ON c.id = f.customer_id WHERE c.name = 'paced' "
                              "AND f.tat IS NOT NULL"),
                     1);

    req_list l = requests_of(f, "paced");
    int after = 0;
    int64_t min_gap = INT64_MAX, min_gap_after = INT64_MAX;
    for (size_t i = 1; i < l.n; i++) {
        int64_t gap = l.v[i].at_us - l.v[i - 1].at_us;
        if (gap < min_gap)
            min_gap = gap;
        if (l.v[i - 1].at_us >= back_us) {
            after++;
            if (gap < min_gap_after)
                min_gap_after = gap;
        }
    }
    printf("# crash: %zu requests; smallest gap %.1f ms overall, %.1f ms after the restart "
           "(%d gaps)\n",
           l.n, min_gap / 1000.0, min_gap_after / 1000.0, after);
    for (size_t i = 1; i < l.n; i++)
        printf("#   %s at %+.1f ms from the crash, gap %.1f ms\n", l.v[i].webhook_id,
               (l.v[i].at_us - crash_us) / 1000.0, (l.v[i].at_us - l.v[i - 1].at_us) / 1000.0);
    free(l.v);
    CHECK(after >= 2, "only %d gaps after the restart", after);
    CHECK(min_gap_after >= 470000, "two arrivals %.1f ms apart after the restart (period 500 ms)",
          min_gap_after / 1000.0);
    CHECK(min_gap >= 470000, "two arrivals %.1f ms apart around the crash (period 500 ms)",
          min_gap / 1000.0);
    size_t total = 0;
    size_t distinct = distinct_ids(f, "paced", &total);
    CHECK(distinct == (size_t)n_items, "%zu distinct webhook-ids, expected %d", distinct, n_items);
    assert_int_equal(q_int(f, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    assert_int_equal(tl_service_signal(&f->svc[0], SIGTERM, 1, 10000), 0);
    print_stopped(&f->svc[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(postgres_restart_mid_run, svc_setup, svc_teardown),
        cmocka_unit_test_setup_teardown(postgres_crash_keeps_spacing, svc_setup, svc_teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
