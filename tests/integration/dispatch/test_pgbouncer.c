/* test_pgbouncer.c - pgpace behind Debian's PgBouncer (started here, one per test, with a
 * generated ini): a session pool works; transaction and statement pools are refused at start
 * with an error naming why, before anything is claimed (and so is `pgpace migrate`); producers
 * enqueue through a transaction pool with fewer server connections than clients, and a dispatcher
 * connected directly delivers every item once.
 *
 * PgBouncer refuses to run as root: as root the child becomes the `postgres` user (who owns
 * the test cluster) before exec. It gets SIGKILL if this process dies, and the teardown stops
 * it when a test fails.
 */
#include "fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a PgBouncer of our own ---- */

typedef struct bouncer {
    pid_t pid;
    char dir[64];
    int port;
    char conninfo[256]; /* reaches the test's database through it */
} bouncer;

typedef struct state {
    fx *f;
    bouncer b;
} state;

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void write_file(const char *dir, const char *name, const char *text, uid_t uid, gid_t gid)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    fputs(text, out);
    assert_int_equal(fclose(out), 0);
    if (getuid() == 0)
        assert_int_equal(chown(path, uid, gid), 0);
}

static char *read_text(const char *dir, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *in = fopen(path, "r");
    if (!in)
        return strdup("");
    size_t cap = 1 << 16, len = 0, n;
    char *buf = malloc(cap);
    assert_non_null(buf);
    while ((n = fread(buf + len, 1, cap - len - 1, in)) > 0) {
        len += n;
        if (len + 1 == cap) {
            char *more = realloc(buf, cap *= 2);
            assert_non_null(more);
            buf = more;
        }
    }
    buf[len] = '\0';
    fclose(in);
    return buf;
}

static int pgbouncer_answers(void *arg)
{
    bouncer *b = arg;
    int st;
    if (waitpid(b->pid, &st, WNOHANG) == b->pid) {
        b->pid = 0;
        return -1; /* exited: stops the wait */
    }
    PGconn *c = PQconnectdb(b->conninfo);
    int ok = PQstatus(c) == CONNECTION_OK;
    if (ok) {
        PGresult *r = PQexec(c, "SELECT 1");
        ok = PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
    }
    PQfinish(c);
    return ok;
}

/* Starts pgbouncer in `pool_mode` with `pool_size` server connections for the test's database
 * (on b->port when set, else a free one) and waits until it answers through to PostgreSQL. */
static void bouncer_start(bouncer *b, fx *f, const char *pool_mode, int pool_size)
{
    const char *exe = access("/usr/sbin/pgbouncer", X_OK) == 0 ? "/usr/sbin/pgbouncer" : NULL;
    if (!exe)
        fail_msg("pgbouncer is not installed (Debian package pgbouncer: "
                 "tests/tools/install-deps.sh installs it)");
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (uid == 0) {
        const struct passwd *pw = getpwnam("postgres");
        if (!pw)
            fail_msg("running as root and there is no postgres user to run pgbouncer as");
        uid = pw->pw_uid;
        gid = pw->pw_gid;
    }
    snprintf(b->dir, sizeof b->dir, "/tmp/pgpace-pgb-XXXXXX");
    assert_non_null(mkdtemp(b->dir));
    if (getuid() == 0)
        assert_int_equal(chown(b->dir, uid, gid), 0);
    if (!b->port)
        b->port = free_port(); /* else: restarted on the port its clients know */
    const char *user = PQuser(f->db->conn);
    char users[160], ini[2048];
    snprintf(users, sizeof users, "\"%s\" \"\"\n", user);
    snprintf(ini, sizeof ini,
             "[databases]\n"
             "%s = host=%s port=%s\n"
             "[pgbouncer]\n"
             "listen_addr = 127.0.0.1\n"
             "listen_port = %d\n"
             "unix_socket_dir =\n"
             "auth_type = trust\n"
             "auth_file = %s/users.txt\n"
             "pool_mode = %s\n"
             "default_pool_size = %d\n"
             "max_client_conn = 200\n"
             "logfile = %s/pgbouncer.log\n",
             f->db->name, PQhost(f->db->conn), PQport(f->db->conn), b->port, b->dir, pool_mode,
             pool_size, b->dir);
    write_file(b->dir, "users.txt", users, uid, gid);
    write_file(b->dir, "pgbouncer.ini", ini, uid, gid);
    snprintf(b->conninfo, sizeof b->conninfo, "host=127.0.0.1 port=%d dbname=%s user=%s", b->port,
             f->db->name, user);

    char ini_path[128], out_path[128];
    snprintf(ini_path, sizeof ini_path, "%s/pgbouncer.ini", b->dir);
    snprintf(out_path, sizeof out_path, "%s/stderr.log", b->dir);
    pid_t parent = getpid();
    b->pid = fork();
    assert_true(b->pid >= 0);
    if (b->pid == 0) {
        /* Credentials first: changing them would clear the parent-death signal. */
        if (getuid() == 0 && (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0))
            _exit(126);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(126);
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execl(exe, "pgbouncer", ini_path, (char *)NULL);
        _exit(127);
    }
    if (tl_wait_until(pgbouncer_answers, b, 15000) != 1) {
        char *err = read_text(b->dir, "stderr.log");
        char *log = read_text(b->dir, "pgbouncer.log");
        fail_msg("pgbouncer (%s mode, port %d) did not answer within 15 s\nstderr:\n%s\nlog:\n%s",
                 pool_mode, b->port, err, log);
    }
}

static void bouncer_stop(bouncer *b)
{
    if (b->pid > 0) {
        kill(b->pid, SIGTERM);
        long long deadline = tl_now_ms() + 5000;
        int st;
        while (waitpid(b->pid, &st, WNOHANG) == 0) {
            if (tl_now_ms() > deadline) {
                kill(b->pid, SIGKILL);
                waitpid(b->pid, &st, 0);
                break;
            }
            struct timespec ts = {0, 10 * 1000000};
            nanosleep(&ts, NULL); /* polling a child's exit: there is no fd to wait on */
        }
        b->pid = 0;
    }
    if (b->dir[0]) {
        static const char *const files[] = {"pgbouncer.ini", "users.txt", "pgbouncer.log",
                                            "stderr.log"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            char path[128];
            snprintf(path, sizeof path, "%s/%s", b->dir, files[i]);
            unlink(path);
        }
        rmdir(b->dir);
        b->dir[0] = '\0';
    }
}

static int setup(void **st)
{
    state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->f = fx_start();
    *st = s;
    return 0;
}

static int teardown(void **st)
{
    state *s = *st;
    tl_service_stop(&s->f->svc); /* before pgbouncer: its connection would only be retried */
    bouncer_stop(&s->b);
    fx_finish(s->f);
    free(s);
    return 0;
}

/* pgpace run through the bouncer, with `more` test config lines (or NULL). */
static void run_through(state *s, const char *more)
{
    char extra[512];
    snprintf(extra, sizeof extra, "database.conninfo = %s\n%s", s->b.conninfo, more ? more : "");
    fx_run(s->f, extra);
}

static void customer_unlimited(fx *f)
{
    fx_customer(f, "p", TL_ARGV("--mode", "unlimited", "--rate", "1"));
}

static void assert_bouncer_used(state *s)
{
    char *log = read_text(s->b.dir, "pgbouncer.log");
    char needle[96];
    snprintf(needle, sizeof needle, "login attempt: db=%s", s->f->db->name);
    tl_assert_contains(log, needle);
    free(log);
}

/* Every recorded request has a distinct webhook-id; returns how many there are. */
static size_t distinct_deliveries(receiver *r)
{
    size_t n = receiver_count(r, "/c/p");
    char(*ids)[128] = calloc(n ? n : 1, sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(r, i, &rq), 0);
        free(rq.body);
        for (size_t j = 0; j < i; j++)
            if (strcmp(ids[j], rq.webhook_id) == 0)
                fail_msg("%s delivered twice", rq.webhook_id);
        snprintf(ids[i], sizeof ids[i], "%s", rq.webhook_id);
    }
    free(ids);
    return n;
}

/* ---- session pooling: works ---- */

static void session_pool_works(void **st)
{
    state *s = *st;
    fx *f = s->f;
    bouncer_start(&s->b, f, "session", 3);
    customer_unlimited(f);
    fx_enqueue(f, "p", NULL, 5);
    run_through(s, NULL);
    assert_true(fx_wait_log(f, "event=leader_elected", 15000));
    assert_int_equal(receiver_wait(f->recv, "/c/p", 5, 15000), 5);
    /* Work enqueued while it leads: the wake-up comes through its LISTEN on the pooled
     * session, the claims run as prepared statements there. */
    fx_enqueue(f, "p", NULL, 5);
    assert_int_equal(receiver_wait(f->recv, "/c/p", 10, 15000), 10);
    assert_int_equal(distinct_deliveries(f->recv), 10);

    char *log = fx_log(f);
    tl_assert_contains(log, "event=database_session_checked");
    assert_null(strstr(log, "event=database_session_pooling"));
    assert_null(strstr(log, "event=database_session_unverified"));
    free(log);
    assert_bouncer_used(s);
    fx_stop_service(f, 15000);

    tl_proc m = tl_pgpace(TL_ARGV("--db", s->b.conninfo, "migrate"), NULL, NULL);
    assert_int_equal(m.status, 0);
    tl_assert_contains(m.out, "schema is up to date");
    assert_string_equal(m.err, "");
    tl_proc_free(&m);
}

/* A session pool with one server connection: the check's second connection waits for a
 * session that never frees. The check gives up after its timeout, warns and goes on. */
static void full_session_pool_is_unverified_not_refused(void **st)
{
    state *s = *st;
    fx *f = s->f;
    bouncer_start(&s->b, f, "session", 1);
    customer_unlimited(f);
    fx_enqueue(f, "p", NULL, 3);
    run_through(s, NULL);
    assert_true(fx_wait_log(f, "event=database_session_unverified", 15000));
    assert_true(fx_wait_log(f, "event=leader_elected", 15000));
    assert_int_equal(receiver_wait(f->recv, "/c/p", 3, 15000), 3);
    char *log = fx_log(f);
    tl_assert_contains(log, "got no session within 3000 ms");
    assert_null(strstr(log, "event=database_session_pooling"));
    free(log);
    fx_stop_service(f, 15000);
}

/* SIGTERM while the check's second connection waits (a full session pool): the check is
 * abandoned with the connection it runs on, and the exit is clean (under the sanitizers too:
 * nothing freed is touched, nothing leaks). */
static void stop_during_the_check(void **st)
{
    state *s = *st;
    fx *f = s->f;
    bouncer_start(&s->b, f, "session", 1);
    run_through(s, NULL);
    assert_true(fx_wait_log(f, "event=db_ready", 15000));
    long long t0 = tl_now_ms();
    int status = tl_service_signal(&f->svc, SIGTERM, 1, 15000);
    f->running = false;
    long long took = tl_now_ms() - t0;
    char *log = fx_log(f);
    if (status != 0)
        fail_msg("exit status %d after SIGTERM during the check; log:\n%s", status, log);
    /* Abandoned, not finished: neither outcome was logged, nothing came after it. */
    assert_null(strstr(log, "event=database_session_unverified"));
    assert_null(strstr(log, "event=database_session_checked"));
    assert_null(strstr(log, "event=customers_loaded"));
    free(log);
    print_message("# stopped during the check in %lld ms (the check waits up to 3000)\n", took);
}

/* ---- transaction and statement pooling: refused at start ---- */

static void refused(state *s, const char *pool_mode, int pool_size)
{
    fx *f = s->f;
    bouncer_start(&s->b, f, pool_mode, pool_size);
    customer_unlimited(f);
    fx_enqueue(f, "p", NULL, 5);
    long long t0 = tl_now_ms();
    run_through(s, NULL);
    int status = tl_service_signal(&f->svc, 0, 1, 20000);
    f->running = false;
    char *log = fx_log(f);
    if (status != 1)
        fail_msg("pgpace run through a %s pool: exit status %d, expected 1; log:\n%s", pool_mode,
                 status, log);
    print_message("# %s pool of %d: refused, exit 1 after %lld ms\n", pool_mode, pool_size,
                  tl_now_ms() - t0);
    tl_assert_contains(log, "level=error event=database_session_pooling");
    tl_assert_contains(log, "session advisory lock");
    tl_assert_contains(log, "LISTEN");
    tl_assert_contains(log, "prepared statements");
    tl_assert_contains(log, "pool_mode = session");
    assert_null(strstr(log, "event=customers_loaded"));
    assert_null(strstr(log, "event=leader_elected"));
    free(log);
    assert_bouncer_used(s);

    /* Nothing claimed, nothing sent, no leader lock taken in this database. */
    PGconn *db = f->db->conn;
    assert_int_equal(tl_query_int(db, "SELECT count(*) FROM pgpace.queue"), 5);
    assert_int_equal(
        tl_query_int(db, "SELECT count(*) FROM pgpace.queue WHERE claimed_by IS NOT NULL"), 0);
    assert_int_equal(tl_query_int(db, "SELECT count(*) FROM pgpace.delivery_attempt"), 0);
    assert_int_equal(tl_query_int(db, "SELECT count(*) FROM pg_locks l JOIN pg_database d "
                                      "ON d.oid = l.database WHERE l.locktype = 'advisory' "
                                      "AND d.datname = current_database()"),
                     0);
    assert_int_equal(receiver_count(f->recv, NULL), 0);

    /* `pgpace migrate` takes a session advisory lock too: refused the same way. */
    tl_proc m = tl_pgpace(TL_ARGV("--db", s->b.conninfo, "migrate"), NULL, NULL);
    assert_int_equal(m.status, 1);
    tl_assert_contains(m.err, "does not keep one server session");
    tl_assert_contains(m.err, "pool_mode = session");
    tl_proc_free(&m);
}

static void transaction_pool_is_refused(void **st)
{
    refused(*st, "transaction", 2);
}

static void transaction_pool_of_one_is_refused(void **st)
{
    refused(*st, "transaction", 1);
}

static void statement_pool_is_refused(void **st)
{
    refused(*st, "statement", 3);
}

/* The pooler behind a running instance becomes a transaction pool (restarted on its port):
 * the reconnect's check sees it, and the instance exits before it leads on that session. */
static void pooling_after_a_reconnect_ends_the_process(void **st)
{
    state *s = *st;
    fx *f = s->f;
    bouncer_start(&s->b, f, "session", 3);
    customer_unlimited(f);
    fx_enqueue(f, "p", NULL, 2);
    /* Reconnect attempts at most 1 s apart: the new pooler is found soon after it listens. */
    run_through(s, "dispatcher.reconnect_max_ms = 1000\n");
    assert_true(fx_wait_log(f, "event=leader_elected", 15000));
    assert_int_equal(receiver_wait(f->recv, "/c/p", 2, 15000), 2);

    int port = s->b.port;
    bouncer_stop(&s->b);
    fx_enqueue(f, "p", NULL, 3);
    s->b.port = port;
    bouncer_start(&s->b, f, "transaction", 3);
    int status = tl_service_signal(&f->svc, 0, 1, 30000);
    f->running = false;
    char *log = fx_log(f);
    if (status != 1)
        fail_msg("after the switch to transaction pooling: exit status %d, expected 1; log:\n%s",
                 status, log);
    tl_assert_contains(log, "event=db_connection_lost");
    tl_assert_contains(log, "level=error event=database_session_pooling");
    /* Led once, on the first session only. */
    const char *elected = strstr(log, "event=leader_elected");
    assert_non_null(elected);
    assert_null(strstr(elected + 1, "event=leader_elected"));
    free(log);
    assert_int_equal(receiver_count(f->recv, NULL), 2);
    PGconn *db = f->db->conn;
    assert_int_equal(tl_query_int(db, "SELECT count(*) FROM pgpace.queue WHERE claimed_by IS NULL"),
                     3);
    assert_int_equal(tl_query_int(db, "SELECT count(*) FROM pg_locks l JOIN pg_database d "
                                      "ON d.oid = l.database WHERE l.locktype = 'advisory' "
                                      "AND d.datname = current_database()"),
                     0);
}

/* ---- producers through a transaction pool ---- */

#define PRODUCERS    12
#define TXNS         10
#define BULK_EVERY   5 /* every 5th transaction also loads two items with pgpace.enqueue_bulk */
#define POOL_SERVERS 2
/* Item kinds of one transaction: enqueue, enqueue_json, and the two bulk lines. */
enum { K_ENQUEUE, K_JSON, K_BULK1, K_BULK2, KINDS };
#define EXPECTED (PRODUCERS * TXNS * 2 + PRODUCERS * (TXNS / BULK_EVERY) * 2)

typedef struct producer {
    int n;
    const char *conninfo;
    pthread_barrier_t *connected, *go;
    long long ids[TXNS * 2]; /* what enqueue and enqueue_json returned */
    int n_ids;
    char error[512]; /* the first failure, "" if none */
} producer;

static int exec_ok(producer *p, PGconn *c, const char *sql, int n, const char *const *params,
                   PGresult **out)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        if (!p->error[0])
            snprintf(p->error, sizeof p->error, "producer %d: %s: %s", p->n, sql,
                     PQresultErrorMessage(r));
        PQclear(r);
        return 0;
    }
    if (out)
        *out = r;
    else
        PQclear(r);
    return 1;
}

/* The first column of the one row of `sql` ($1 = a, or no parameter when a is NULL). */
static long long exec_id(producer *p, PGconn *c, const char *sql, const char *a)
{
    PGresult *r;
    const char *params[] = {a};
    if (!exec_ok(p, c, sql, a ? 1 : 0, a ? params : NULL, &r))
        return -1;
    long long id = PQntuples(r) == 1 ? atoll(PQgetvalue(r, 0, 0)) : -1;
    PQclear(r);
    return id;
}

/* One transaction: enqueue + enqueue_json (+ a bulk load of two lines), committed together.
 * Every statement is PQexecParams (unnamed), which transaction pooling carries. */
static int produce_one(producer *p, PGconn *c, int t)
{
    char tag[KINDS][48];
    for (int k = 0; k < KINDS; k++)
        snprintf(tag[k], sizeof tag[k], "{\"tag\": \"c%d-t%d-k%d\"}", p->n, t, k);
    if (!exec_ok(p, c, "BEGIN", 0, NULL, NULL))
        return 0;
    long long a = exec_id(p, c, "SELECT pgpace.enqueue('p', $1::jsonb)", tag[K_ENQUEUE]);
    char doc[128];
    snprintf(doc, sizeof doc, "{\"customer\": \"p\", \"payload\": %s}", tag[K_JSON]);
    long long b = exec_id(p, c, "SELECT id FROM pgpace.enqueue_json($1::jsonb)", doc);
    if (a < 0 || b < 0)
        return 0;
    p->ids[p->n_ids++] = a;
    p->ids[p->n_ids++] = b;
    if (t % BULK_EVERY == 0) {
        char l1[128], l2[128];
        snprintf(l1, sizeof l1, "{\"customer\": \"p\", \"payload\": %s}", tag[K_BULK1]);
        snprintf(l2, sizeof l2, "{\"customer\": \"p\", \"payload\": %s}", tag[K_BULK2]);
        const char *lines[] = {l1, l2};
        if (!exec_ok(p, c,
                     "CREATE TEMP TABLE pgpace_bulk (line_no bigint NOT NULL, doc text NOT NULL) "
                     "ON COMMIT DROP",
                     0, NULL, NULL) ||
            !exec_ok(p, c, "INSERT INTO pgpace_bulk VALUES (1, $1), (2, $2)", 2, lines, NULL) ||
            exec_id(p, c, "SELECT inserted FROM pgpace.enqueue_bulk()", NULL) != 2)
            return 0;
    }
    return exec_ok(p, c, "COMMIT", 0, NULL, NULL);
}

static void *producer_main(void *arg)
{
    producer *p = arg;
    PGconn *c = PQconnectdb(p->conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        snprintf(p->error, sizeof p->error, "producer %d: %s", p->n, PQerrorMessage(c));
    pthread_barrier_wait(p->connected); /* all clients connected at once ... */
    pthread_barrier_wait(p->go);        /* ... while the main thread counted server sessions */
    for (int t = 0; t < TXNS && !p->error[0]; t++)
        if (!produce_one(p, c, t))
            break;
    PQfinish(c);
    return NULL;
}

typedef struct queue_wait {
    PGconn *db;
} queue_wait;

static int queue_empty(void *arg)
{
    queue_wait *w = arg;
    return tl_query_int(w->db, "SELECT count(*) FROM pgpace.queue") == 0;
}

static void producers_through_transaction_pool(void **st)
{
    state *s = *st;
    fx *f = s->f;
    bouncer_start(&s->b, f, "transaction", POOL_SERVERS);
    customer_unlimited(f);
    fx_run(f, NULL); /* the dispatcher connects directly */
    assert_true(fx_wait_log(f, "event=leader_elected", 15000));

    pthread_barrier_t connected, go;
    pthread_barrier_init(&connected, NULL, PRODUCERS + 1);
    pthread_barrier_init(&go, NULL, PRODUCERS + 1);
    producer *ps = calloc(PRODUCERS, sizeof *ps);
    pthread_t th[PRODUCERS];
    assert_non_null(ps);
    for (int i = 0; i < PRODUCERS; i++) {
        ps[i] = (producer){.n = i, .conninfo = s->b.conninfo, .connected = &connected, .go = &go};
        assert_int_equal(pthread_create(&th[i], NULL, producer_main, &ps[i]), 0);
    }
    pthread_barrier_wait(&connected);
    /* Every client is connected; PostgreSQL sees at most the pool's server connections (and
     * the dispatcher's and this test's own, which are not the bouncer's). */
    long long servers =
        tl_query_int(f->db->conn, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                  "current_database() AND pid <> pg_backend_pid() "
                                  "AND backend_type = 'client backend' "
                                  "AND application_name NOT LIKE 'pgpace%%'");
    pthread_barrier_wait(&go);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&connected);
    pthread_barrier_destroy(&go);
    print_message("# %d producers through a transaction pool of %d: %lld server sessions while "
                  "all were connected\n",
                  PRODUCERS, POOL_SERVERS, servers);
    for (int i = 0; i < PRODUCERS; i++)
        if (ps[i].error[0])
            fail_msg("%s", ps[i].error);
    assert_true(servers <= POOL_SERVERS);

    /* Every item delivered once: wait until the queue is empty (everything finalised, so no
     * delivery can still come), then compare. */
    queue_wait w = {f->db->conn};
    assert_true(tl_wait_until(queue_empty, &w, 60000));
    assert_int_equal(tl_query_int(f->db->conn, "SELECT count(*) FROM pgpace.dead_letter"), 0);
    assert_int_equal(distinct_deliveries(f->recv), EXPECTED);

    /* Each tag once, and the ids the producers were given are the webhook-ids sent. */
    static unsigned char seen[PRODUCERS][TXNS][KINDS];
    memset(seen, 0, sizeof seen);
    char **ids = calloc(EXPECTED, sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < EXPECTED; i++) {
        receiver_request rq;
        assert_int_equal(receiver_get(f->recv, i, &rq), 0);
        int c = -1, t = -1, k = -1;
        const char *at = strstr(rq.body, "\"c");
        if (!at || sscanf(at + 1, "c%d-t%d-k%d", &c, &t, &k) != 3 || c < 0 || c >= PRODUCERS ||
            t < 0 || t >= TXNS || k < 0 || k >= KINDS)
            fail_msg("unexpected body %s", rq.body);
        seen[c][t][k]++;
        ids[i] = strdup(rq.webhook_id);
        free(rq.body);
    }
    for (int c = 0; c < PRODUCERS; c++)
        for (int t = 0; t < TXNS; t++)
            for (int k = 0; k < KINDS; k++) {
                int want = k < K_BULK1 || t % BULK_EVERY == 0;
                if (seen[c][t][k] != want)
                    fail_msg("c%d-t%d-k%d delivered %d times, expected %d", c, t, k, seen[c][t][k],
                             want);
            }
    for (int c = 0; c < PRODUCERS; c++) {
        assert_int_equal(ps[c].n_ids, TXNS * 2);
        for (int i = 0; i < ps[c].n_ids; i++) {
            char want[40];
            snprintf(want, sizeof want, "msg_%lld", ps[c].ids[i]);
            size_t j = 0;
            while (j < EXPECTED && strcmp(ids[j], want) != 0)
                j++;
            if (j == EXPECTED)
                fail_msg("item %s (producer %d) was not delivered", want, c);
        }
    }
    for (size_t i = 0; i < EXPECTED; i++)
        free(ids[i]);
    free(ids);
    free(ps);
    assert_bouncer_used(s);
    fx_stop_service(f, 15000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(session_pool_works, setup, teardown),
        cmocka_unit_test_setup_teardown(full_session_pool_is_unverified_not_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stop_during_the_check, setup, teardown),
        cmocka_unit_test_setup_teardown(transaction_pool_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(transaction_pool_of_one_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(statement_pool_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(pooling_after_a_reconnect_ends_the_process, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(producers_through_transaction_pool, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
