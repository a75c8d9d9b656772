/* test_pgconn.c - the asynchronous connection against a real server: pipelined queries in
 * order, errors isolated per statement, LISTEN/NOTIFY, loss and reconnection (backend killed,
 * server unreachable, pgconn_reset), closing with work in flight, and reading ahead from inside
 * a callback. Every test drives its own uv loop under a deadline timer and ends with
 * uv_loop_close() == 0. */
#include "testlib.h"

#include "pgconn.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_MS 10000
#define NPIPELINED  1000

/* One test's world: its loop, database, connection and what the callbacks saw. */
typedef struct t_ctx {
    uv_loop_t loop;
    uv_timer_t deadline;
    tl_db *db;
    pgconn *c;
    char app[64];       /* application_name of the connection under test */
    char events[256];   /* one letter per event, in order (see each test) */
    int ready, lost;    /* on_state counts */
    int closed;         /* closed_cb runs */
    int done;           /* results seen by the test's own callbacks */
    int next;           /* next expected sequence number */
    int nulls[8];       /* NULL deliveries per query index */
    int notified;       /* notifications seen */
    int backend_pid[2]; /* before and after a reconnect */
    uint64_t lost_at[16];
    int nlost_at;
} t_ctx;

static void event(t_ctx *t, char e)
{
    size_t n = strlen(t->events);
    assert_true(n + 1 < sizeof t->events);
    t->events[n] = e;
    t->events[n + 1] = '\0';
}

static void deadline_cb(uv_timer_t *timer)
{
    t_ctx *t = timer->data;
    fail_msg("deadline of %d ms passed; events so far: '%s'", DEADLINE_MS, t->events);
}

static void t_init(t_ctx *t)
{
    memset(t, 0, sizeof *t);
    assert_int_equal(uv_loop_init(&t->loop), 0);
    assert_int_equal(uv_timer_init(&t->loop, &t->deadline), 0);
    t->deadline.data = t;
    assert_int_equal(uv_timer_start(&t->deadline, deadline_cb, DEADLINE_MS, 0), 0);
    t->db = tl_fresh_db(0);
    snprintf(t->app, sizeof t->app, "pgconn_test_%d", (int)getpid());
}

static void closed_cb(void *arg)
{
    t_ctx *t = arg;
    t->closed++;
    event(t, 'C');
    t->c = NULL;
    uv_close((uv_handle_t *)&t->deadline, NULL);
}

/* Runs the loop until the test closed everything, then checks nothing was left open. */
static void t_run(t_ctx *t)
{
    assert_int_equal(uv_run(&t->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(t->closed, 1);
    assert_int_equal(uv_loop_close(&t->loop), 0);
    tl_drop_db(t->db);
}

static pgconn *t_open(t_ctx *t, const char *conninfo, const char *const *listen,
                      pgconn_state_cb on_state, pgconn_notify_cb on_notify)
{
    pgconn_options o = {
        .conninfo = conninfo,
        .application_name = t->app,
        .keepalive_idle_s = 10,
        .reconnect_min_ms = 20,
        .reconnect_max_ms = 200,
        .listen = listen,
        .on_state = on_state,
        .on_notify = on_notify,
        .arg = t,
    };
    pgconn *c = NULL;
    assert_int_equal(pgconn_new(&t->loop, &o, &c), 0);
    assert_non_null(c);
    t->c = c;
    /* Nothing is accepted before READY. */
    assert_false(pgconn_ready(c));
    assert_int_equal(pgconn_query(c, "SELECT 1", 0, NULL, NULL, NULL), -ENOTCONN);
    pgconn_start(c);
    return c;
}

/* The test database over TCP, so keepalives and tcp_user_timeout are really applied. */
static const char *tcp_conninfo(t_ctx *t)
{
    static char buf[600];
    snprintf(buf, sizeof buf, "host=127.0.0.1 %s", t->db->conninfo);
    return buf;
}

static void query_ok(pgconn *c, const char *sql, int n, const char *const *params,
                     pgconn_result_cb cb, void *arg)
{
    assert_int_equal(pgconn_query(c, sql, n, params, cb, arg), 0);
}

static void assert_value(PGresult *res, const char *want)
{
    assert_non_null(res);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("expected rows, got %s: %s", PQresStatus(PQresultStatus(res)),
                 PQresultErrorMessage(res));
    assert_int_equal(PQntuples(res), 1);
    assert_string_equal(PQgetvalue(res, 0, 0), want);
}

static void assert_sqlstate(PGresult *res, const char *sqlstate)
{
    assert_non_null(res);
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), sqlstate);
}

/* ---- 1. results, parameters and order of many pipelined statements ---- */

static void t1_one(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_int_equal(t->next++, 0);
    assert_value(res, "1");
}

static void t1_params(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_int_equal(t->next++, 1);
    assert_non_null(res);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(res, 0, 0), "ab'cd");
    assert_string_equal(PQgetvalue(res, 0, 1), "t"); /* a NULL parameter is SQL NULL */
}

static t_ctx *t1_ctx;

static void t1_each(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = t1_ctx;
    int i = (int)(intptr_t)arg;
    char want[16];
    snprintf(want, sizeof want, "%d", i);
    assert_int_equal(t->next, i + 2); /* in sending order, after the first two */
    t->next++;
    assert_value(res, want);
    assert_int_equal(pgconn_pending(c), (size_t)(NPIPELINED - 1 - i));
    if (i == NPIPELINED - 1)
        pgconn_close(c, closed_cb, t);
}

static void t1_state(pgconn *c, pgconn_state s, void *arg)
{
    t_ctx *t = arg;
    assert_int_equal(s, PGCONN_READY);
    assert_true(pgconn_ready(c));
    assert_int_equal(t->ready++, 0);
    query_ok(c, "SELECT 1", 0, NULL, t1_one, t);
    const char *p[] = {"ab", "'cd", NULL};
    query_ok(c, "SELECT $1::text || $2::text, $3::text IS NULL", 3, p, t1_params, t);
    t1_ctx = t;
    for (int i = 0; i < NPIPELINED; i++) {
        char v[16];
        snprintf(v, sizeof v, "%d", i);
        const char *pv[] = {v};
        query_ok(c, "SELECT $1::int", 1, pv, t1_each, (void *)(intptr_t)i);
    }
    assert_int_equal(pgconn_pending(c), NPIPELINED + 2);
}

static void test_pipelined_queries(void **state)
{
    t_ctx t;
    t_init(&t);
    t_open(&t, t.db->conninfo, NULL, t1_state, NULL);
    t_run(&t);
    assert_int_equal(t.next, NPIPELINED + 2);
    assert_int_equal(t.ready, 1);
    assert_int_equal(t.lost, 0);
}

/* Several hosts: the first refuses, so libpq moves to another socket while connecting. */
static void t1b_port(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_value(res, getenv("PGPORT"));
    pgconn_close(c, closed_cb, t);
}

static void t1b_state(pgconn *c, pgconn_state s, void *arg)
{
    t_ctx *t = arg;
    assert_int_equal(s, PGCONN_READY);
    assert_int_equal(t->ready++, 0);
    query_ok(c, "SELECT inet_server_port()", 0, NULL, t1b_port, t);
}

static void test_host_fallback(void **state)
{
    t_ctx t;
    t_init(&t);
    char conninfo[700];
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1,127.0.0.1 port=1,%s %s", getenv("PGPORT"),
             t.db->conninfo);
    t_open(&t, conninfo, NULL, t1b_state, NULL);
    t_run(&t);
    assert_int_equal(t.ready, 1);
}

/* ---- 2. an error in the middle of the pipeline affects only its own statement ---- */

typedef struct t2_case {
    t_ctx *t;
    int index;
} t2_case;

static void t2_check(pgconn *c, PGresult *res, void *arg)
{
    t2_case *k = arg;
    t_ctx *t = k->t;
    assert_int_equal(t->next++, k->index);
    switch (k->index) {
    case 0:
        assert_value(res, "1");
        break;
    case 1:
        assert_sqlstate(res, "22012"); /* division_by_zero */
        break;
    case 2:
        assert_sqlstate(res, "22P02"); /* invalid_text_representation */
        break;
    case 3:
        assert_sqlstate(res, "42601"); /* syntax_error */
        break;
    case 4:
        assert_value(res, "5");
        pgconn_close(c, closed_cb, t);
        break;
    default:
        fail();
    }
}

static void t2_state(pgconn *c, pgconn_state s, void *arg)
{
    static t2_case cases[5];
    t_ctx *t = arg;
    assert_int_equal(s, PGCONN_READY);
    for (int i = 0; i < 5; i++)
        cases[i] = (t2_case){t, i};
    const char *bad[] = {"not a number"};
    const char *five[] = {"5"};
    query_ok(c, "SELECT 1", 0, NULL, t2_check, &cases[0]);
    query_ok(c, "SELECT 1/0", 0, NULL, t2_check, &cases[1]);
    query_ok(c, "SELECT $1::int", 1, bad, t2_check, &cases[2]);
    query_ok(c, "SELEC 4", 0, NULL, t2_check, &cases[3]);
    query_ok(c, "SELECT $1::int", 1, five, t2_check, &cases[4]);
}

static void test_error_isolated(void **state)
{
    t_ctx t;
    t_init(&t);
    t_open(&t, t.db->conninfo, NULL, t2_state, NULL);
    t_run(&t);
    assert_int_equal(t.next, 5);
}

/* ---- 2b. prepared statements: prepared once, executed by name, errors reported as such ---- */

static const char T2B_SQL[] = "SELECT $1::int * 2";
static const char T2B_BAD[] = "SELEC $1::int";
static const char T2B_PREPARED[] =
    "SELECT count(*) FROM pg_prepared_statements WHERE statement = 'SELECT $1::int * 2'";

/* One step at a time, each sent from the previous one's callback, so that each call sees
 * the cache state the previous result left. */
static void t2b_step(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    int i = t->next++;
    switch (i) {
    case 0:
        assert_value(res, "2");
        break;
    case 1:
        assert_value(res, "4");
        break;
    case 2:
    case 8:
        assert_value(res, "1"); /* one prepared statement, executed by name */
        break;
    case 3:
    case 4:
        /* The Prepare's own error (not "pipeline aborted"), each time: not cached. */
        assert_sqlstate(res, "42601");
        break;
    case 5:
        assert_non_null(res);
        assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK); /* DEALLOCATE ALL */
        break;
    case 6:
        assert_sqlstate(res, "26000"); /* the server forgot it: reported once... */
        break;
    case 7:
        assert_value(res, "14"); /* ...then prepared again under a new name */
        break;
    default:
        fail();
    }
    const char *v[] = {"1", "2", "", "3", "3", "", "3", "7"}; /* by step */
    switch (i + 1) {
    case 1:
    case 7:
        assert_int_equal(pgconn_query_prepared(c, T2B_SQL, 1, &v[i + 1], t2b_step, t), 0);
        break;
    case 2:
    case 8:
        query_ok(c, T2B_PREPARED, 0, NULL, t2b_step, t);
        break;
    case 3:
    case 4:
        assert_int_equal(pgconn_query_prepared(c, T2B_BAD, 1, &v[i + 1], t2b_step, t), 0);
        break;
    case 5:
        query_ok(c, "DEALLOCATE ALL", 0, NULL, t2b_step, t);
        break;
    case 6:
        assert_int_equal(pgconn_query_prepared(c, T2B_SQL, 1, &v[i + 1], t2b_step, t), 0);
        break;
    default:
        pgconn_close(c, closed_cb, t);
    }
}

static void t2b_state(pgconn *c, pgconn_state s, void *arg)
{
    assert_int_equal(s, PGCONN_READY);
    const char *v[] = {"1"};
    assert_int_equal(pgconn_query_prepared(c, T2B_SQL, 1, v, t2b_step, arg), 0);
}

static void test_prepared(void **state)
{
    t_ctx t;
    t_init(&t);
    t_open(&t, t.db->conninfo, NULL, t2b_state, NULL);
    t_run(&t);
    assert_int_equal(t.next, 9);
}

/* ---- 3. LISTEN before READY; notifications delivered with channel and payload ---- */

static void t3_channels(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_value(res, "Mixed \"Case\",pgconn_t3");
    event(t, 'Q');
    pgconn_close(c, closed_cb, t);
}

static void t3_notify(pgconn *c, const char *channel, const char *payload, void *arg)
{
    t_ctx *t = arg;
    event(t, 'N');
    if (t->notified++ == 0) {
        assert_string_equal(channel, "pgconn_t3");
        assert_string_equal(payload, "hello");
    } else {
        assert_string_equal(channel, "Mixed \"Case\"");
        assert_string_equal(payload, "wörld, with 'quotes'");
        query_ok(c, "SELECT string_agg(ch, ',' ORDER BY ch) FROM pg_listening_channels() ch", 0,
                 NULL, t3_channels, t);
    }
}

static void t3_state(pgconn *c, pgconn_state s, void *arg)
{
    t_ctx *t = arg;
    assert_int_equal(s, PGCONN_READY);
    event(t, 'R');
    /* NOTIFY reaches only sessions listening when it commits: had READY come before the
     * LISTENs completed, these would be lost and the test would hit its deadline. The first
     * one, on a channel not listened to, must not be delivered. */
    tl_exec(t->db->conn, "SELECT pg_notify('not_listened', 'x'), pg_notify('pgconn_t3', "
                         "'hello'), pg_notify('Mixed \"Case\"', 'wörld, with ''quotes''')");
}

static void test_listen_notify(void **state)
{
    t_ctx t;
    t_init(&t);
    const char *const listen[] = {"pgconn_t3", "Mixed \"Case\"", NULL};
    t_open(&t, t.db->conninfo, listen, t3_state, t3_notify);
    t_run(&t);
    assert_string_equal(t.events, "RNNQC");
}

/* ---- 4. the backend is killed: pending gets NULL, LOST, READY again, LISTEN again ---- */

static void t4_sleep(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_null(res);
    event(t, 'S');
    assert_int_equal(pgconn_query(c, "SELECT 1", 0, NULL, NULL, NULL), -ENOTCONN);
}

static void t4_secret(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_sqlstate(res, "22P02");
    event(t, 'E');
}

static void t4_after(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_value(res, "42");
    event(t, 'Q');
    pgconn_close(c, closed_cb, t);
}

static void t4_notify(pgconn *c, const char *channel, const char *payload, void *arg)
{
    t_ctx *t = arg;
    assert_string_equal(channel, "t4chan");
    assert_string_equal(payload, "after");
    event(t, 'N');
    query_ok(c, "SELECT 42", 0, NULL, t4_after, t);
}

/* Blocks (test only) until the backend runs pg_sleep, so the kill hits a running statement.
 * No sleeping: each check is a round trip, bounded by a clock. */
static void wait_active_sleep(PGconn *admin, int pid)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (tl_query_int(admin,
                         "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND state = "
                         "'active' AND query LIKE 'SELECT pg_sleep%%'",
                         pid) == 1)
            return;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 5)
            fail_msg("backend %d never started pg_sleep", pid);
    }
}

static void t4_pid(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_non_null(res);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    int pid = atoi(PQgetvalue(res, 0, 0));
    PGconn *admin = t->db->conn;
    if (t->ready == 1) {
        t->backend_pid[0] = pid;
        /* The session is found by the application_name we set. */
        assert_int_equal(tl_query_int(admin,
                                      "SELECT pid FROM pg_stat_activity WHERE "
                                      "application_name = '%s'",
                                      t->app),
                         pid);
        /* A failing statement whose error quotes a parameter: it must not reach the log. */
        const char *secret[] = {"pgconn-secret-param"};
        query_ok(c, "SELECT $1::int", 1, secret, t4_secret, t);
        query_ok(c, "SELECT pg_sleep(5)", 0, NULL, t4_sleep, t);
        wait_active_sleep(admin, pid);
        assert_int_equal(tl_query_int(admin, "SELECT pg_terminate_backend(%d)::int", pid), 1);
        event(t, 'K');
    } else {
        t->backend_pid[1] = pid;
        assert_int_not_equal(t->backend_pid[0], pid);
        tl_exec(admin, "SELECT pg_notify('t4chan', 'after')");
    }
}

static void t4_state(pgconn *c, pgconn_state s, void *arg)
{
    t_ctx *t = arg;
    if (s == PGCONN_LOST) {
        event(t, 'L');
        t->lost++;
        assert_false(pgconn_ready(c));
        assert_int_equal(pgconn_pending(c), 0);
        assert_true(strlen(pgconn_last_error(c)) > 0);
        return;
    }
    event(t, 'R');
    t->ready++;
    query_ok(c, "SELECT pg_backend_pid()", 0, NULL, t4_pid, t);
}

/* Collects what the module logs to stderr during a test. */
typedef struct capture {
    int saved;
    char path[64];
} capture;

static void capture_start(capture *cap)
{
    snprintf(cap->path, sizeof cap->path, "/tmp/pgconn_log_XXXXXX");
    int fd = mkstemp(cap->path);
    assert_true(fd >= 0);
    fflush(stderr);
    cap->saved = dup(2);
    assert_true(cap->saved >= 0);
    assert_true(dup2(fd, 2) >= 0);
    close(fd);
}

static char *capture_end(capture *cap)
{
    fflush(stderr);
    assert_true(dup2(cap->saved, 2) >= 0);
    close(cap->saved);
    FILE *f = fopen(cap->path, "r");
    assert_non_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(cap->path);
    fputs(buf, stderr); /* still visible in the test output */
    return buf;
}

static void test_backend_killed(void **state)
{
    t_ctx t;
    t_init(&t);
    const char *const listen[] = {"t4chan", NULL};
    capture cap = {0};
    capture_start(&cap);
    t_open(&t, tcp_conninfo(&t), listen, t4_state, t4_notify);
    t_run(&t);
    char *log = capture_end(&cap);
    /* Kill, the secret's error and the sleep's NULL, LOST, reconnected, notified, queried. */
    assert_string_equal(t.events, "RKESLRNQC");
    assert_int_equal(t.ready, 2);
    assert_int_equal(t.lost, 1);
    tl_assert_contains(log, "event=db_connection_lost");
    tl_assert_contains(log, "host=127.0.0.1");
    tl_assert_contains(log, "administrator command");
    tl_assert_contains(log, "event=db_reconnecting");
    tl_assert_contains(log, "event=db_connected");
    if (strstr(log, "pgconn-secret-param"))
        fail_msg("a query parameter reached the log");
}

/* ---- 5. the server is unreachable: refused, retried with growing delays, closable ---- */

static void t5_state(pgconn *c, pgconn_state s, void *arg)
{
    t_ctx *t = arg;
    assert_int_equal(s, PGCONN_LOST);
    assert_false(pgconn_ready(c));
    assert_int_equal(pgconn_query(c, "SELECT 1", 0, NULL, NULL, NULL), -ENOTCONN);
    tl_assert_contains(pgconn_last_error(c), "127.0.0.1");
    t->lost_at[t->nlost_at++] = uv_now(&t->loop);
    if (t->nlost_at == 6)
        pgconn_close(c, closed_cb, t);
}

static void test_unreachable(void **state)
{
    t_ctx t;
    t_init(&t);
    pgconn_options o = {
        .conninfo = "host=127.0.0.1 port=1 dbname=postgres",
        .application_name = t.app,
        .keepalive_idle_s = 10,
        .reconnect_min_ms = 20,
        .reconnect_max_ms = 100,
        .on_state = t5_state,
        .arg = &t,
    };
    assert_int_equal(pgconn_new(&t.loop, &o, &t.c), 0);
    assert_int_equal(pgconn_query(t.c, "SELECT 1", 0, NULL, NULL, NULL), -ENOTCONN);
    assert_string_equal(pgconn_last_error(t.c), "");
    pgconn_start(t.c);
    t_run(&t);
    assert_int_equal(t.nlost_at, 6);
    /* Attempt k waits max(min, min(max, min * 2^k) * (0.5 + jitter)) capped at max:
     * [20,30], [20,60], [40,100], [50,100], [50,100]. */
    uint64_t gap[5];
    for (int i = 0; i < 5; i++)
        gap[i] = t.lost_at[i + 1] - t.lost_at[i];
    assert_true(gap[0] >= 20);
    assert_true(gap[3] >= 50 && gap[4] >= 50);
    assert_true(gap[3] > gap[0] && gap[4] > gap[0]);
    for (int i = 0; i < 5; i++)
        assert_true(gap[i] < 1000); /* capped at 100 ms, plus scheduling slack */
}

/* ---- 6. closing with statements in flight ---- */

typedef struct t6_slot {
    t_ctx *t;
    int index;
} t6_slot;

static void t6_result(pgconn *c, PGresult *res, void *arg)
{
    t6_slot *s = arg;
    t_ctx *t = s->t;
    assert_int_equal(t->next++, s->index);
    t->nulls[s->index]++;
    assert_null(res);
    assert_int_equal(t->closed, 0); /* before closed_cb */
    /* Refused while closing; a second close is harmless. */
    assert_int_equal(pgconn_query(c, "SELECT 1", 0, NULL, NULL, NULL), -ENOTCONN);
    pgconn_close(c, closed_cb, t);
}

static void t6_state(pgconn *c, pgconn_state s, void *arg)
{
    static t6_slot slots[4];
    t_ctx *t = arg;
    assert_int_equal(s, PGCONN_READY);
    for (int i = 0; i < 4; i++) {
        slots[i] = (t6_slot){t, i};
        query_ok(c, i == 3 ? "SELECT 1" : "SELECT pg_sleep(5)", 0, NULL, t6_result, &slots[i]);
    }
    assert_int_equal(pgconn_pending(c), 4);
    pgconn_close(c, closed_cb, t);
    assert_int_equal(t->next, 4); /* all failed inside pgconn_close, in order */
    assert_int_equal(pgconn_pending(c), 0);
}

static void t6_no_state(pgconn *c, pgconn_state s, void *arg)
{
    fail_msg("no state change expected after close (got %d)", (int)s);
}

static void test_close_pending(void **state)
{
    t_ctx t;
    t_init(&t);
    t_open(&t, t.db->conninfo, NULL, t6_state, NULL);
    t_run(&t);
    for (int i = 0; i < 4; i++)
        assert_int_equal(t.nulls[i], 1);
    assert_int_equal(t.lost, 0);
}

/* Closed from inside a result callback while more results are on the way. */
static void t6b_result(pgconn *c, PGresult *res, void *arg)
{
    t6_slot *s = arg;
    t_ctx *t = s->t;
    assert_int_equal(t->next++, s->index);
    if (s->index == 0) {
        assert_value(res, "1");
        pgconn_close(c, closed_cb, t);
        assert_int_equal(t->next, 3); /* the two others got NULL inside the close */
    } else {
        assert_null(res);
        t->nulls[s->index]++;
    }
}

static void t6b_state(pgconn *c, pgconn_state s, void *arg)
{
    static t6_slot slots[3];
    t_ctx *t = arg;
    assert_int_equal(s, PGCONN_READY);
    const char *sql[] = {"SELECT 1", "SELECT pg_sleep(5)", "SELECT 3"};
    for (int i = 0; i < 3; i++) {
        slots[i] = (t6_slot){t, i};
        query_ok(c, sql[i], 0, NULL, t6b_result, &slots[i]);
    }
}

static void test_close_from_callback(void **state)
{
    t_ctx t;
    t_init(&t);
    t_open(&t, t.db->conninfo, NULL, t6b_state, NULL);
    t_run(&t);
    assert_int_equal(t.next, 3);
    assert_int_equal(t.nulls[1], 1);
    assert_int_equal(t.nulls[2], 1);
}

/* Closed before start, right after start, and while connecting. */
static void test_close_early(void **state)
{
    t_ctx t;
    t_init(&t);
    pgconn_options o = {
        .conninfo = t.db->conninfo,
        .keepalive_idle_s = 10,
        .reconnect_min_ms = 20,
        .reconnect_max_ms = 100,
        .on_state = t6_no_state,
        .arg = &t,
    };
    pgconn *c[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pgconn_new(&t.loop, &o, &c[i]), 0);
    pgconn_close(c[0], NULL, NULL);
    pgconn_start(c[1]);
    pgconn_close(c[1], NULL, NULL);
    pgconn_start(c[2]);
    /* One turn of the loop: the attempt starts and waits for the socket. */
    assert_int_equal(uv_run(&t.loop, UV_RUN_NOWAIT), 1);
    pgconn_close(c[2], closed_cb, &t);
    t_run(&t);

    /* Invalid options are refused up front. */
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    pgconn *x = NULL;
    pgconn_options bad = o;
    bad.conninfo = "host=x =oops";
    assert_int_equal(pgconn_new(&loop, &bad, &x), -EINVAL);
    bad = o;
    bad.reconnect_max_ms = 10;
    assert_int_equal(pgconn_new(&loop, &bad, &x), -EINVAL);
    bad = o;
    bad.keepalive_idle_s = 0;
    assert_int_equal(pgconn_new(&loop, &bad, &x), -EINVAL);
    assert_null(x);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- 7. pgconn_reset drops the session like a loss and reconnects ---- */

static void t7_sleep(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_null(res);
    event(t, 'S');
}

static void t7_pid(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    assert_non_null(res);
    int pid = atoi(PQgetvalue(res, 0, 0));
    if (t->ready == 1) {
        t->backend_pid[0] = pid;
        query_ok(c, "SELECT pg_sleep(5)", 0, NULL, t7_sleep, t);
        /* Reset from inside a result callback, with a statement in flight. */
        pgconn_reset(c);
        event(t, 'X');
        assert_false(pgconn_ready(c));
        assert_string_equal(pgconn_last_error(c), "connection reset by the application");
    } else {
        t->backend_pid[1] = pid;
        assert_int_not_equal(t->backend_pid[0], pid);
        event(t, 'Q');
        pgconn_close(c, closed_cb, t);
    }
}

static void t7_state(pgconn *c, pgconn_state s, void *arg)
{
    t_ctx *t = arg;
    if (s == PGCONN_LOST) {
        t->lost++;
        event(t, 'L');
        return;
    }
    t->ready++;
    event(t, 'R');
    query_ok(c, "SELECT pg_backend_pid()", 0, NULL, t7_pid, t);
}

static void test_reset(void **state)
{
    t_ctx t;
    t_init(&t);
    const char *const listen[] = {"t7chan", NULL};
    t_open(&t, tcp_conninfo(&t), listen, t7_state, NULL);
    t_run(&t);
    assert_string_equal(t.events, "RSLXRQC");
    assert_int_equal(t.lost, 1);
}

/* ---- read ahead: the next result comes off the socket while a callback works ---- */

#define RA_ROWS 100000 /* of 100 bytes: 10 MB, far more than a socket's buffer */

static void ra_third(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    event(t, '3');
    assert_value(res, "3");
    pgconn_close(c, closed_cb, t);
}

static void ra_second(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    event(t, '2');
    assert_non_null(res);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), RA_ROWS);
}

/* Inside the first result's callback, the second statement's backend finishes sending only if
 * the callback reads ahead: otherwise it waits on a full socket (ClientWrite) until we return. */
static void ra_first(pgconn *c, PGresult *res, void *arg)
{
    t_ctx *t = arg;
    event(t, '1');
    assert_non_null(res);
    assert_int_equal(PQntuples(res), RA_ROWS);
    PGconn *admin = PQconnectdb(t->db->conninfo);
    assert_int_equal(PQstatus(admin), CONNECTION_OK);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT state FROM pg_stat_activity WHERE application_name = '%s' "
             "AND pid <> pg_backend_pid()",
             t->app);
    bool idle = false;
    for (int i = 0; i < 500 && !idle; i++) {
        pgconn_read_ahead(c);
        PGresult *r = PQexec(admin, sql);
        assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
        idle = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "idle") == 0;
        PQclear(r);
        if (!idle)
            usleep(10000);
    }
    PQfinish(admin);
    assert_true(idle);
}

static void ra_state(pgconn *c, pgconn_state s, void *arg)
{
    t_ctx *t = arg;
    assert_int_equal(s, PGCONN_READY);
    char big[128];
    snprintf(big, sizeof big, "SELECT repeat('x', 100) FROM generate_series(1, %d)", RA_ROWS);
    query_ok(c, big, 0, NULL, ra_first, t);
    query_ok(c, big, 0, NULL, ra_second, t);
    query_ok(c, "SELECT 3", 0, NULL, ra_third, t);
}

static void test_read_ahead(void **state)
{
    t_ctx t;
    t_init(&t);
    t_open(&t, t.db->conninfo, NULL, ra_state, NULL);
    t_run(&t);
    assert_string_equal(t.events, "123C");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipelined_queries),
        cmocka_unit_test(test_host_fallback),
        cmocka_unit_test(test_error_isolated),
        cmocka_unit_test(test_prepared),
        cmocka_unit_test(test_listen_notify),
        cmocka_unit_test(test_backend_killed),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_close_pending),
        cmocka_unit_test(test_close_from_callback),
        cmocka_unit_test(test_close_early),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_read_ahead),
    };
    return TL_RUN(tests, NULL, NULL);
}
