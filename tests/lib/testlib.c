/* testlib.c - shared test helpers: per-test databases, running pgpace, queries. */
#include "testlib.h"

#include <openssl/evp.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TEMPLATE_DB "pgpace_test_template"
/* Serialises template creation across test processes running in parallel. */
#define TEMPLATE_LOCK 0x70677474

static PGconn *admin_connect(void)
{
    PGconn *c = PQconnectdb("dbname=postgres");
    if (PQstatus(c) != CONNECTION_OK) {
        fail_msg("cannot reach the test cluster (PGHOST=%s PGPORT=%s): %s", getenv("PGHOST"),
                 getenv("PGPORT"), PQerrorMessage(c));
    }
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

static void ensure_template(PGconn *admin)
{
    tl_exec(admin, "SELECT pg_advisory_lock(%d)", TEMPLATE_LOCK);
    if (tl_query_int(admin, "SELECT count(*) FROM pg_database WHERE datname = '" TEMPLATE_DB "'") ==
        0) {
        tl_exec(admin, "CREATE DATABASE " TEMPLATE_DB " TEMPLATE template0");
        char db_arg[128];
        snprintf(db_arg, sizeof db_arg, "dbname=%s", TEMPLATE_DB);
        tl_proc p = tl_pgpace(TL_ARGV("--db", db_arg, "migrate"), NULL, NULL);
        if (p.status != 0) {
            /* Leave no half-made template and no lock held: other test processes must fail
             * fast with the same message, not wait for the lock. */
            tl_exec(admin, "DROP DATABASE IF EXISTS " TEMPLATE_DB);
            tl_exec(admin, "SELECT pg_advisory_unlock(%d)", TEMPLATE_LOCK);
            fail_msg("migrating the template failed (%d): %s", p.status, p.err);
        }
        tl_proc_free(&p);
    }
    tl_exec(admin, "SELECT pg_advisory_unlock(%d)", TEMPLATE_LOCK);
}

tl_db *tl_fresh_db(int migrated)
{
    static unsigned counter;
    tl_db *db = calloc(1, sizeof *db);
    assert_non_null(db);
    PGconn *admin = admin_connect();
    if (migrated)
        ensure_template(admin);
    snprintf(db->name, sizeof db->name, "t_%d_%u", (int)getpid(), counter++);
    tl_exec(admin, "DROP DATABASE IF EXISTS %s", db->name);
    tl_exec(admin, "CREATE DATABASE %s TEMPLATE %s", db->name,
            migrated ? TEMPLATE_DB : "template0");
    PQfinish(admin);
    snprintf(db->conninfo, sizeof db->conninfo, "dbname=%s", db->name);
    db->conn = PQconnectdb(db->conninfo);
    if (PQstatus(db->conn) != CONNECTION_OK)
        fail_msg("cannot connect to %s: %s", db->name, PQerrorMessage(db->conn));
    PQclear(PQexec(db->conn, "SET client_min_messages = warning"));
    return db;
}

void tl_drop_db(tl_db *db)
{
    if (!db)
        return;
    PQfinish(db->conn);
    PGconn *admin = admin_connect();
    tl_exec(admin, "DROP DATABASE IF EXISTS %s WITH (FORCE)", db->name);
    PQfinish(admin);
    free(db);
}

/* Reads both pipes until EOF without deadlocking on a full pipe. */
static void drain(int out_fd, int err_fd, char **out, char **err)
{
    size_t cap[2] = {4096, 4096}, len[2] = {0, 0};
    char *buf[2] = {malloc(cap[0]), malloc(cap[1])};
    assert_non_null(buf[0]);
    assert_non_null(buf[1]);
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            fail_msg("poll: %s", strerror(errno));
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (cap[i] - len[i] < 1024) {
                cap[i] *= 2;
                buf[i] = realloc(buf[i], cap[i]);
                assert_non_null(buf[i]);
            }
            ssize_t n = read(fds[i].fd, buf[i] + len[i], cap[i] - len[i] - 1);
            if (n <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else {
                len[i] += (size_t)n;
            }
        }
    }
    buf[0][len[0]] = '\0';
    buf[1][len[1]] = '\0';
    *out = buf[0];
    *err = buf[1];
}

tl_proc tl_pgpace(const char *const *argv, const char *input, const char *const *env)
{
    const char *bin = getenv("PGPACE_BIN");
    if (!bin)
        fail_msg("PGPACE_BIN is not set (run the tests through meson test)");
    const char *argv_full[64] = {bin};
    size_t n = 1;
    for (; argv[n - 1] && n < 63; n++)
        argv_full[n] = argv[n - 1];
    argv_full[n] = NULL;

    /* A controlled environment: the libpq variables of the test cluster, PATH, sanitizer
     * options, plus what the test asks for. No PGPACE_CONFIG unless given. */
    const char *keep[] = {"PATH",         "PGHOST",        "PGPORT",      "PGUSER",
                          "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
    char *envp[64];
    size_t e = 0;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        const char *v = getenv(keep[i]);
        size_t klen = strlen(keep[i]);
        for (const char *const *o = env; v && o && *o; o++)
            if (strncmp(*o, keep[i], klen) == 0 && (*o)[klen] == '=')
                v = NULL; /* the test overrides it */
        if (v) {
            size_t len = strlen(keep[i]) + strlen(v) + 2;
            envp[e] = malloc(len);
            assert_non_null(envp[e]);
            snprintf(envp[e++], len, "%s=%s", keep[i], v);
        }
    }
    for (; env && *env && e < 63; env++) {
        envp[e] = strdup(*env);
        assert_non_null(envp[e++]);
    }
    envp[e] = NULL;

    int in_pipe[2], out_pipe[2], err_pipe[2];
    assert_int_equal(pipe2(in_pipe, O_CLOEXEC), 0);
    assert_int_equal(pipe2(out_pipe, O_CLOEXEC), 0);
    assert_int_equal(pipe2(err_pipe, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)(uintptr_t)argv_full, envp);
    posix_spawn_file_actions_destroy(&fa);
    for (size_t i = 0; i < e; i++)
        free(envp[i]);
    if (rc != 0)
        fail_msg("cannot run %s: %s", bin, strerror(rc));
    close(in_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[1]);

    /* Feed stdin from a child writer so a large input cannot deadlock against full pipes. */
    pid_t writer = -1;
    if (input && *input) {
        writer = fork();
        assert_true(writer >= 0);
        if (writer == 0) {
            size_t len = strlen(input), off = 0;
            while (off < len) {
                ssize_t w = write(in_pipe[1], input + off, len - off);
                if (w <= 0)
                    _exit(1);
                off += (size_t)w;
            }
            _exit(0);
        }
    }
    close(in_pipe[1]);

    tl_proc p = {0};
    drain(out_pipe[0], err_pipe[0], &p.out, &p.err);
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (writer > 0)
        while (waitpid(writer, NULL, 0) < 0 && errno == EINTR) {
        }
    p.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    return p;
}

void tl_proc_free(tl_proc *p)
{
    free(p->out);
    free(p->err);
    p->out = p->err = NULL;
}

static PGresult *vquery(PGconn *conn, const char *fmt, va_list ap)
{
    char sql[8192];
    vsnprintf(sql, sizeof sql, fmt, ap);
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        fail_msg("SQL failed: %s\n  %s", sql, PQerrorMessage(conn));
    return res;
}

char *tl_query_str(PGconn *conn, const char *sql, ...)
{
    va_list ap;
    va_start(ap, sql);
    PGresult *res = vquery(conn, sql, ap);
    va_end(ap);
    char *v = strdup(PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "");
    assert_non_null(v);
    PQclear(res);
    return v;
}

long long tl_query_int(PGconn *conn, const char *sql, ...)
{
    va_list ap;
    va_start(ap, sql);
    PGresult *res = vquery(conn, sql, ap);
    va_end(ap);
    if (PQntuples(res) < 1)
        fail_msg("query returned no row: %s", sql);
    long long v = atoll(PQgetvalue(res, 0, 0));
    PQclear(res);
    return v;
}

void tl_exec(PGconn *conn, const char *sql, ...)
{
    va_list ap;
    va_start(ap, sql);
    PQclear(vquery(conn, sql, ap));
    va_end(ap);
}

void tl_expect_sql_error(PGconn *conn, const char *sql, const char *state, const char *needle,
                         const char *secret)
{
    PGresult *res = PQexec(conn, sql);
    const char *got = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorMessage(res);
    const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
    if (PQresultStatus(res) != PGRES_FATAL_ERROR)
        fail_msg("accepted: %s", sql);
    if (!got || strcmp(got, state) != 0)
        fail_msg("%s: SQLSTATE %s (want %s): %s", sql, got ? got : "-", state, msg);
    if (!strstr(msg, needle))
        fail_msg("%s: the message does not say %s: %s", sql, needle, msg);
    if (secret && ((primary && strstr(primary, secret)) || (hint && strstr(hint, secret))))
        fail_msg("%s: the message quotes the secret: %s", sql, msg);
    PQclear(res);
}

long long tl_min_send_gap_us(PGconn *conn, const char *customer, long long *n_gaps)
{
    PGresult *res = PQexecParams(
        conn,
        "SELECT coalesce(min(g), 0), count(g) FROM (SELECT (extract(epoch FROM "
        "a.started_at - lag(a.started_at) OVER (ORDER BY a.started_at)) * 1e6)::bigint "
        "AS g FROM pgpace.delivery_attempt a JOIN pgpace.customer c ON c.id = "
        "a.customer_id WHERE c.name = $1) x",
        1, NULL, (const char *const[]){customer}, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        PQclear(res);
        fail_msg("recorded send gaps of %s: %s", customer, PQerrorMessage(conn));
    }
    long long min = atoll(PQgetvalue(res, 0, 0));
    if (n_gaps)
        *n_gaps = atoll(PQgetvalue(res, 0, 1));
    PQclear(res);
    return min;
}

void tl_assert_contains_(const char *haystack, const char *needle, const char *file, int line)
{
    if (!haystack || !strstr(haystack, needle)) {
        print_error("expected to find \"%s\" in:\n%s\n", needle, haystack ? haystack : "(null)");
        _fail(file, line);
    }
}

char *tl_temp_file(const char *content)
{
    char *path = strdup("/tmp/pgpace-test-XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(content), off = 0;
    while (off < len) {
        ssize_t w = write(fd, content + off, len - off);
        assert_true(w > 0);
        off += (size_t)w;
    }
    close(fd);
    return path;
}

tl_service tl_service_start(const char *const *argv, const char *const *env)
{
    tl_service svc = {0};
    snprintf(svc.log_path, sizeof svc.log_path, "/tmp/pgpace-svc-XXXXXX");
    int fd = mkstemp(svc.log_path);
    assert_true(fd >= 0);
    const char *bin = getenv("PGPACE_BIN");
    if (!bin)
        fail_msg("PGPACE_BIN is not set");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        const char *args[64] = {bin};
        size_t n = 1;
        for (; argv[n - 1] && n < 63; n++)
            args[n] = argv[n - 1];
        args[n] = NULL;
        for (; env && *env; env++)
            putenv((char *)(uintptr_t)*env);
        execv(bin, (char *const *)(uintptr_t)args);
        _exit(127);
    }
    close(fd);
    svc.pid = pid;
    return svc;
}

int tl_service_signal(tl_service *s, int sig, int wait, int timeout_ms)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, sig);
    if (!wait)
        return 0;
    long long deadline = tl_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid) {
            s->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (tl_now_ms() > deadline)
            return -1;
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL); /* polling a child's exit: there is no fd to wait on */
    }
}

char *tl_service_log(const tl_service *s)
{
    FILE *f = fopen(s->log_path, "r");
    if (!f)
        return strdup("");
    size_t cap = 65536, len = 0, n;
    char *buf = malloc(cap);
    assert_non_null(buf);
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

void tl_service_stop(tl_service *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->log_path[0])
        unlink(s->log_path);
    s->log_path[0] = '\0';
}

long long tl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tl_wait_until(int (*cond)(void *arg), void *arg, int timeout_ms)
{
    long long deadline = tl_now_ms() + timeout_ms;
    int v;
    while (!(v = cond(arg)) && tl_now_ms() < deadline) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    return v;
}

long long tl_wait_query_at_least(PGconn *conn, long long want, int timeout_ms, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    long long deadline = tl_now_ms() + timeout_ms;
    long long v;
    while ((v = tl_query_int(conn, "%s", sql)) < want && tl_now_ms() < deadline) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    return v;
}

/* Independent of secret.c: decodes the whsec_ key and computes HMAC-SHA256 with EVP_Q_mac. */
int tl_verify_signature(const char *secret, const char *id, const char *ts, const char *body,
                        const char *header)
{
    unsigned char key[128];
    const char *b64 = secret + 6;
    int keylen = EVP_DecodeBlock(key, (const unsigned char *)b64, (int)strlen(b64));
    if (keylen < 0)
        return 0;
    keylen -= (int)(strlen(b64) > 0 && b64[strlen(b64) - 1] == '=') +
              (int)(strlen(b64) > 1 && b64[strlen(b64) - 2] == '=');
    char msg[4096];
    snprintf(msg, sizeof msg, "%s.%s.%s", id, ts, body);
    unsigned char mac[64];
    size_t maclen = 0;
    if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, (size_t)keylen,
                   (const unsigned char *)msg, strlen(msg), mac, sizeof mac, &maclen))
        return 0;
    char expected[80] = "v1,";
    EVP_EncodeBlock((unsigned char *)expected + 3, mac, (int)maclen);
    /* The header lists one "v1,<sig>" per active secret, space separated. */
    char copy[512];
    snprintf(copy, sizeof copy, "%s", header);
    char *save = NULL;
    for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
        if (strcmp(tok, expected) == 0)
            return 1;
    return 0;
}
