/* wake.c - the leader's side of wake-ups: NOTIFY when cold, polling pgpace.wake when hot.
 *
 * A transaction that notifies holds one database-wide lock across its commit, WAL flush
 * included, so producers that notify commit one at a time (0024_wake.sql). While wake-ups come
 * faster than [dispatcher] wake_hot_per_s, the leader is hot: it writes a lease to
 * pgpace.wake_state, producers see it and append their wake-ups to their backend's row of
 * pgpace.wake instead of notifying, and the leader reads the new entries every WAKE_POLL_MS.
 * When fewer than two fifths of that come in a window it turns cold (pgpace.wake_cold(): the
 * lease ends, and only when no producer is between reading it and committing), polls a last
 * time, empties the table, and wake-ups are NOTIFYs again. When a producer is still between
 * the two, the leader is cooling: the lease stays ended (new producers notify), it polls every
 * WAKE_COOLING_POLL_MS for the open ones and tries again every window. 24_wake.sql has the
 * protocol and why it loses no wake-up.
 *
 * Owns TIMER_WAKE (the next poll when hot, the window's end when cold) and the map of what it
 * has read of each producing backend. A new leader starts as if cooling: what a predecessor
 * that died hot left behind is read first. Every statement goes down the leader's connection
 * between claims; a failed one leaves the state as it was and is tried again by the timer.
 * A wake-up read here does what a NOTIFY does (leader_wake_pair). Entries a producer wrote
 * faster than a poll could read (a row keeps its last 64) start a backstop pass instead.
 */
#include "internal.h"

#include "log.h"
#include "strbuf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How often a hot leader polls: the extra latency of a wake-up while hot. */
#define WAKE_POLL_MS 1
/* How often a cooling one does: its lease is over and new producers notify; it only waits
 * for the rows of those that read the lease before and have not committed. */
#define WAKE_COOLING_POLL_MS 10
/* Windows of this length decide the mode. */
#define WAKE_WINDOW_MS 100
/* Hot from [dispatcher] wake_hot_per_s (default 500/s: 50 in a window), cold again below two
 * fifths of it (200/s): below that, NOTIFY's serialised commits cost producers little. */
static unsigned hot_per_window(const dispatcher *d)
{
    unsigned n = (unsigned)d->cfg.wake_hot_per_s / (1000 / WAKE_WINDOW_MS);
    return n ? n : 1;
}

/* At least 1: a window without any wake-up always ends a hot spell. */
static unsigned cold_per_window(const dispatcher *d)
{
    unsigned n = hot_per_window(d) * 2 / 5;
    return n ? n : 1;
}
/* The lease producers trust, and how often a hot leader renews it. A leader that died hot is
 * cold for producers this long after its last renewal. */
#define WAKE_LEASE_MS 3000
#define WAKE_RENEW_MS 1000

static void wake_timer_arm(dispatcher *d, uint64_t ms);

static const char *wake_mode_name(wake_mode m)
{
    return m == WAKE_HOT ? "hot" : m == WAKE_COOLING ? "cooling" : "cold";
}

static void wake_mode_set(dispatcher *d, wake_mode m)
{
    if (d->wake.mode != m)
        LOG_DEBUG("wake_mode", LOG_S("from", wake_mode_name(d->wake.mode)),
                  LOG_S("to", wake_mode_name(m)));
    d->wake.mode = m;
    metrics_gauge_set(d->obs.m, d->obs.wake_hot, NULL, m == WAKE_COLD ? 0 : 1);
}

static int seen_set(dispatcher *d, int backend, int64_t seq)
{
    for (size_t i = 0; i < d->wake.n_seen; i++)
        if (d->wake.seen[i].backend == backend) {
            if (seq > d->wake.seen[i].seq)
                d->wake.seen[i].seq = seq;
            return 0;
        }
    if (d->wake.n_seen == d->wake.cap_seen) {
        size_t cap = d->wake.cap_seen ? d->wake.cap_seen * 2 : 64;
        wake_seen *p = realloc(d->wake.seen, cap * sizeof *p);
        if (!p)
            return -1;
        d->wake.seen = p;
        d->wake.cap_seen = cap;
    }
    d->wake.seen[d->wake.n_seen++] = (wake_seen){.backend = backend, .seq = seq};
    return 0;
}

/* "{1,2,3}" of the backends or of their seqs: the poll's $2 and $3. NULL when out of memory. */
static char *seen_array(const dispatcher *d, bool seqs)
{
    strbuf b = {0};
    strbuf_puts(&b, "{");
    for (size_t i = 0; i < d->wake.n_seen; i++) {
        if (i)
            strbuf_puts(&b, ",");
        strbuf_put_i64(&b, seqs ? d->wake.seen[i].seq : d->wake.seen[i].backend);
    }
    strbuf_puts(&b, "}");
    if (b.failed) {
        strbuf_free(&b);
        return NULL;
    }
    return b.data; /* the caller frees it */
}

/* ---- statements ---------------------------------------------------------------------------- */

static void on_hot(pgconn *conn, PGresult *res, void *arg)
{
    (void)conn;
    dispatcher *d = arg;
    d->wake.hot_running = false;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        LOG_WARN("wake_hot_failed", LOG_S("error", PQresultErrorMessage(res)));
        d->wake.renewed_us = 0; /* the next poll tries again */
        return;
    }
}

/* Writes the lease (turning hot, or renewing it). */
static void send_hot(dispatcher *d)
{
    if (d->wake.hot_running)
        return;
    char lease[16];
    snprintf(lease, sizeof lease, "%d", WAKE_LEASE_MS);
    const char *params[] = {[SQL_RUN_WAKE_HOT_P_LEASE_MS] = lease};
    if (DSP_QUERY(d, run_wake_hot, params, on_hot, d, "wake lease") == 0) {
        d->wake.hot_running = true;
        d->wake.renewed_us = now_us();
    }
}

static void go_cold(dispatcher *d);
static void send_poll(dispatcher *d);

/* Turns hot: the lease for producers, and polls every WAKE_POLL_MS. */
static void turn_hot(dispatcher *d)
{
    d->wake.in_window = 0;
    d->wake.window_us = now_us();
    wake_mode_set(d, WAKE_HOT);
    send_hot(d);
    wake_timer_arm(d, WAKE_POLL_MS);
}

/* A window ended: hot with few wake-ups tries to turn cold; cooling tries again (its lease is
 * over, so its producers are the ones still open from before). */
static void window_end(dispatcher *d, int64_t now)
{
    unsigned n = d->wake.in_window;
    d->wake.in_window = 0;
    d->wake.window_us = now;
    if ((d->wake.mode == WAKE_HOT && (d->cfg.wake_hot_per_s == 0 || n < cold_per_window(d))) ||
        d->wake.mode == WAKE_COOLING)
        go_cold(d);
}

/* The next poll: every WAKE_POLL_MS when hot, WAKE_COOLING_POLL_MS while cooling. */
static void poll_again(dispatcher *d)
{
    wake_timer_arm(d, d->wake.mode == WAKE_HOT ? WAKE_POLL_MS : WAKE_COOLING_POLL_MS);
}

static void on_poll(pgconn *conn, PGresult *res, void *arg)
{
    (void)conn;
    dispatcher *d = arg;
    d->wake.poll_running = false;
    bool final = d->wake.final_poll;
    d->wake.final_poll = false;
    if (!res || !is_leading(d))
        return; /* connection lost or leadership over: wake_end/wake_begin take it from here */
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_WAKE_POLL_NCOLS, "wake poll")) {
        LOG_WARN("wake_poll_failed", LOG_S("error", PQresultErrorMessage(res)));
        if (final)
            wake_mode_set(d, WAKE_COOLING); /* not cold until the last rows are read */
        wake_timer_arm(d, WAKE_WINDOW_MS);
        return;
    }
    int n = PQntuples(res);
    int64_t now = now_us();
    bool gap = false, woke = false;
    for (int r = 0; r < n; r++) {
        if (PQgetisnull(res, r, SQL_RUN_WAKE_POLL_C_BACKEND)) {
            const char *x = PQgetvalue(res, r, SQL_RUN_WAKE_POLL_C_SNAPSHOT_XMIN);
            snprintf(d->wake.xmin, sizeof d->wake.xmin, "%s", x);
            continue;
        }
        int backend = (int)row_i64(res, r, SQL_RUN_WAKE_POLL_C_BACKEND);
        int64_t seq = row_i64(res, r, SQL_RUN_WAKE_POLL_C_SEQ);
        /* NULL would be a bug of the statement: taken as a gap, so nothing waits for it. */
        if (PQgetisnull(res, r, SQL_RUN_WAKE_POLL_C_GAP) ||
            strcmp(PQgetvalue(res, r, SQL_RUN_WAKE_POLL_C_GAP), "t") == 0)
            gap = true;
        if (seen_set(d, backend, seq) != 0)
            gap = true; /* cannot remember it: the scan finds the work instead */
        const char *entry = PQgetvalue(res, r, SQL_RUN_WAKE_POLL_C_PAIR);
        char *end = NULL;
        int64_t id = strtoll(entry, &end, 10);
        if (end == entry || *end != ' ')
            continue; /* written by pgpace.wake_leader only; not one of its entries */
        leader_wake_pair(d, id, end + 1, now, false);
        woke = true;
        d->wake.in_window++;
        metrics_counter_add(d->obs.m, d->obs.wakeups, (const char *[]){"poll"}, 1);
    }
    if (woke)
        claim_arm(d);
    if (gap) {
        LOG_INFO("wake_gap", LOG_S("action", "backstop scan"));
        housekeeping_scan_soon(d);
    }
    if (final) {
        /* No producer leaves rows any more: the next hot spell starts from an empty table. */
        DSP_QUERY0(d, run_wake_clear, dsp_on_ignored, NULL, "wake clear");
        d->wake.n_seen = 0;
        d->wake.xmin[0] = '\0';
        wake_mode_set(d, WAKE_COLD);
        d->wake.in_window = 0;
        d->wake.window_us = now;
        wake_timer_arm(d, WAKE_WINDOW_MS);
        return;
    }
    if (d->wake.mode == WAKE_HOT && now - d->wake.renewed_us >= (int64_t)WAKE_RENEW_MS * 1000)
        send_hot(d);
    if (now - d->wake.window_us >= (int64_t)WAKE_WINDOW_MS * 1000)
        window_end(d, now);
    if (!d->wake.poll_running) /* window_end may have sent the barrier and its poll */
        poll_again(d);
}

static void send_poll(dispatcher *d)
{
    if (d->wake.poll_running)
        return;
    char *backends = seen_array(d, false), *seqs = seen_array(d, true);
    const char *params[] = {[SQL_RUN_WAKE_POLL_P_AFTER_XMIN] =
                                d->wake.xmin[0] ? d->wake.xmin : NULL,
                            [SQL_RUN_WAKE_POLL_P_BACKENDS] = backends,
                            [SQL_RUN_WAKE_POLL_P_SEQS] = seqs};
    if (backends && seqs && DSP_QUERY(d, run_wake_poll, params, on_poll, d, "wake poll") == 0) {
        d->wake.poll_running = true;
    } else {
        d->wake.final_poll = false; /* a barrier's poll that did not go: cooling tries again */
        if (d->wake.mode != WAKE_HOT)
            wake_mode_set(d, WAKE_COOLING);
        wake_timer_arm(d, WAKE_WINDOW_MS);
    }
    free(backends);
    free(seqs);
}

static void on_cold(pgconn *conn, PGresult *res, void *arg)
{
    (void)conn;
    dispatcher *d = arg;
    d->wake.barrier_out = false;
    if (!res || !is_leading(d))
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        !rows_shape_ok(res, SQL_RUN_WAKE_COLD_NCOLS, "wake cold")) {
        LOG_WARN("wake_cold_failed", LOG_S("error", PQresultErrorMessage(res)));
        wake_mode_set(d, WAKE_COOLING); /* the poll behind it reads on; the window tries again */
        return;
    }
    if (d->wake.mode == WAKE_HOT)
        return; /* hot again since it was sent: its lease came after, and stands */
    if (strcmp(PQgetvalue(res, 0, SQL_RUN_WAKE_COLD_C_COLD), "t") == 0) {
        /* The poll right behind this statement (sent with it) reads the last rows. */
        d->wake.final_poll = true;
        return;
    }
    /* A producer that read the lease has not committed yet. The lease stays ended, so new
     * producers notify; the leader polls on, more slowly, for the ones still open, and tries
     * again every window. */
    LOG_DEBUG("wake_cold_deferred", LOG_S("reason", "a producer that read the lease is open"));
    wake_mode_set(d, WAKE_COOLING);
}

/* Ends the lease behind the barrier of pgpace.wake_cold(), and polls right behind it: a final
 * poll when the barrier held (on_cold says so before the poll's answer comes), else an
 * ordinary one. */
static void go_cold(dispatcher *d)
{
    if (d->wake.poll_running || d->wake.barrier_out) {
        /* A poll out would not be the one behind the barrier, and a barrier out answers
         * first; the next window tries again. */
        wake_timer_arm(d, WAKE_WINDOW_MS);
        return;
    }
    if (DSP_QUERY0(d, run_wake_cold, on_cold, d, "wake cold") != 0) {
        wake_timer_arm(d, WAKE_WINDOW_MS);
        return;
    }
    d->wake.barrier_out = true;
    wake_mode_set(d, WAKE_COOLING);
    send_poll(d);
}

static void on_wake_timer(uv_timer_t *t)
{
    dispatcher *d = t->data;
    if (!is_leading(d))
        return;
    int64_t now = now_us();
    if (d->wake.mode == WAKE_COLD) {
        window_end(d, now);
        wake_timer_arm(d, WAKE_WINDOW_MS);
        return;
    }
    if (d->wake.poll_running)
        return; /* its answer arms the next poll */
    if (now - d->wake.window_us >= (int64_t)WAKE_WINDOW_MS * 1000)
        window_end(d, now); /* cooling: the barrier again, with its poll */
    if (!d->wake.poll_running)
        send_poll(d);
}

static void wake_timer_arm(dispatcher *d, uint64_t ms)
{
    uv_timer_start(&d->timers[TIMER_WAKE], on_wake_timer, ms, 0);
}

/* ---- the interface ------------------------------------------------------------------------- */

void wake_begin(dispatcher *d)
{
    d->wake.in_window = 0;
    d->wake.window_us = now_us();
    d->wake.n_seen = 0;
    d->wake.xmin[0] = '\0';
    d->wake.poll_running = d->wake.hot_running = d->wake.final_poll = d->wake.barrier_out = false;
    /* A predecessor may have died hot: its lease still runs and producers may have left rows.
     * Turning cold reads them (the first poll reads every row) and ends the lease; cooling
     * until it has, so a barrier that could not be sent is tried again. */
    wake_mode_set(d, WAKE_COOLING);
    go_cold(d);
}

void wake_end(dispatcher *d)
{
    uv_timer_stop(&d->timers[TIMER_WAKE]);
    /* The statements out failed with the connection; the lease runs out by itself. */
    d->wake.poll_running = d->wake.hot_running = d->wake.final_poll = d->wake.barrier_out = false;
    wake_mode_set(d, WAKE_COLD);
}

void wake_on_notify(dispatcher *d)
{
    metrics_counter_add(d->obs.m, d->obs.wakeups, (const char *[]){"notify"}, 1);
    d->wake.in_window++;
    /* Producers commit one at a time while they notify this often: hot now. Not while a
     * barrier or the final poll behind it is out: that poll ends by emptying pgpace.wake, and
     * rows written under a new lease must not go with it. The next window decides then. */
    if (d->wake.mode != WAKE_HOT && d->cfg.wake_hot_per_s > 0 && !d->wake.barrier_out &&
        !d->wake.final_poll && d->wake.in_window >= hot_per_window(d) && is_leading(d))
        turn_hot(d);
}

void wake_free(dispatcher *d)
{
    free(d->wake.seen);
    d->wake.seen = NULL;
    d->wake.n_seen = d->wake.cap_seen = 0;
}
