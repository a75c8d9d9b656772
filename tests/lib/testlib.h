/* testlib.h - helpers shared by every test: TAP output, a fresh database per test, running the
 * pgpace binary, and one-line queries.
 *
 * Integration tests reach the private cluster started by tests/run through the libpq
 * environment (PGHOST, PGPORT, PGUSER). tl_fresh_db() clones a database from a template that
 * the first caller migrates with the binary under test, so each test starts from the current
 * schema and leaves nothing behind (tl_drop_db in teardown).
 */
#ifndef PGPACE_TESTLIB_H
#define PGPACE_TESTLIB_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <libpq-fe.h>

#define PGP_TEST_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* Runs a cmocka group with TAP output (tests/run counts `ok` / `not ok` lines). */
#define TL_RUN(tests, setup, teardown)                                                             \
    (cmocka_set_message_output(CM_OUTPUT_TAP),                                                     \
     cmocka_run_group_tests_name(__FILE__, tests, setup, teardown))

typedef struct tl_db {
    char name[64];      /* database name */
    char conninfo[512]; /* conninfo string reaching it */
    PGconn *conn;       /* open connection, owned */
} tl_db;

/* Creates a fresh database: migrated (from the template) when `migrated`, else empty. */
tl_db *tl_fresh_db(int migrated);
void tl_drop_db(tl_db *db);

/* The result of running a program: exit status (or 128+signal) and its output. */
typedef struct tl_proc {
    int status;
    char *out; /* stdout, NUL-terminated, owned */
    char *err; /* stderr, NUL-terminated, owned */
} tl_proc;

/* Runs the pgpace binary under test (PGPACE_BIN) with argv (NULL-terminated, without argv[0]),
 * feeding `input` (may be NULL) on stdin, with an empty environment except PATH, the libpq
 * variables and those given in `env` (NULL or "K=V" strings, NULL-terminated). */
tl_proc tl_pgpace(const char *const *argv, const char *input, const char *const *env);
void tl_proc_free(tl_proc *p);

/* Convenience: argv as a list. */
#define TL_ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Runs SQL and returns the first column of the first row as a new string ("" when NULL, and
 * fails the test on error). */
char *tl_query_str(PGconn *conn, const char *sql, ...);
long long tl_query_int(PGconn *conn, const char *sql, ...);
/* Runs SQL that must succeed (fails the test otherwise). */
void tl_exec(PGconn *conn, const char *sql, ...);
/* Runs sql (one statement), which must fail with SQLSTATE `state` and a message containing
 * `needle`; when `secret` is given, neither the message nor its hint may quote it (the DETAIL
 * is not looked at: a CHECK violation's "Failing row contains (...)" shows the writer its own
 * row, as PostgreSQL always does). */
void tl_expect_sql_error(PGconn *conn, const char *sql, const char *state, const char *needle,
                         const char *secret);
/* The smallest gap, in microseconds, between consecutive sends pgpace recorded for `customer`
 * (delivery_attempt.started_at, the clock reading that released each request); 0 when there
 * are fewer than two. *n_gaps (if not NULL) gets the number of gaps. */
long long tl_min_send_gap_us(PGconn *conn, const char *customer, long long *n_gaps);

/* Whether `header` (webhook-signature: "v1,<sig>" per secret, space separated) holds the
 * Standard Webhooks signature of id.ts.body under the whsec_ `secret`. Independent of
 * secret.c: decodes the key and computes HMAC-SHA256 with OpenSSL's EVP_Q_mac. */
int tl_verify_signature(const char *secret, const char *id, const char *ts, const char *body,
                        const char *header);

/* Asserts that `haystack` contains `needle`, printing both when it does not. */
#define tl_assert_contains(haystack, needle)                                                       \
    tl_assert_contains_(haystack, needle, __FILE__, __LINE__)
void tl_assert_contains_(const char *haystack, const char *needle, const char *file, int line);

/* A `pgpace run` (or other long-running pgpace command) in the background. */
typedef struct tl_service {
    int pid;
    char log_path[64]; /* its stderr (the structured log) */
} tl_service;

/* Starts pgpace with argv in the background, stderr to a fresh log file. */
tl_service tl_service_start(const char *const *argv, const char *const *env);
/* Sends sig; with wait, waits up to timeout_ms for exit and returns the exit status (or
 * 128+signal), -1 on timeout. */
int tl_service_signal(tl_service *s, int sig, int wait, int timeout_ms);
/* The log so far (owned by the caller). */
char *tl_service_log(const tl_service *s);
/* Kills (SIGKILL) if still running, reaps, removes the log. */
void tl_service_stop(tl_service *s);

/* Polls `cond` every 20 ms until it returns non-zero or timeout_ms passes; returns its last
 * value. The condition-with-deadline replacement for sleeps. */
int tl_wait_until(int (*cond)(void *arg), void *arg, int timeout_ms);
/* Polls an integer query (printf-style) until it reaches at least `want`; returns the last
 * value. */
long long tl_wait_query_at_least(PGconn *conn, long long want, int timeout_ms, const char *sql, ...)
    PGP_TEST_PRINTF(4, 5);

/* Monotonic / wall-clock milliseconds. */
long long tl_now_ms(void);

/* Writes `content` to a new temporary file and returns its path (owned; unlink when done). */
char *tl_temp_file(const char *content);

#endif
