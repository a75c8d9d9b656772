/* fuzz_enqueue_http.c - POST /v1/items end to end against a real PostgreSQL: the admin server
 * (src/admin_http*.c) with the dispatcher's enqueue callback (admin_http_enqueue_sql, as
 * src/dispatch/admin.c wires it) on its own libuv loop thread, connected to a fresh database
 * that this process creates (pgpace_fuzz_<pid>, from the libpq environment: PGHOST, PGPORT,
 * PGUSER; run.sh starts a throw-away cluster when none is set), migrates and drops at exit.
 *
 * Input: byte 0 chooses the request, the rest is the body's material.
 *   bits 0-1  0: the rest is the body; 1: it is the payload of {"customer":"acme",
 *             "payload":...}; 2: it is the fields after {"customer":"acme","payload":{},;
 *             3: field values (below), so that most bodies are valid JSON and reach the
 *             checks of the fields, the keys' lookups and the queue
 *   bit 2     send the body chunked (in pieces of up to 7 bytes)
 *   bit 3     with "Expect: 100-continue"
 *   bit 4     amplify: three bytes (little-endian) give a count R, then the material is split
 *             at 0x01 bytes into H, P, M, S, T and becomes H, P x R, M, S x R, T (deep nesting,
 *             long strings, many keys: beyond libFuzzer's -max_len), at most 1 MiB
 *   bit 5     Content-Type "application/json; charset=utf-8" (else "application/json")
 * Field values (mode 3): the material, split at 0x02 bytes, gives customer, payload, carrier,
 * kind, run_at, idempotency_key, priority, expires_at, supersede_key, traceparent, tracestate
 * in that order. An empty value leaves the field out (but the customer's is "acme", the
 * payload's {}). A value that
 * starts with 0x03 goes in as the JSON text after that byte; otherwise the customer's first
 * byte picks one of the five customers below, run_at's and expires_at's one of the times
 * below, priority's first two bytes are an int16 in decimal, and any other value becomes a JSON
 * string of its bytes (quote and backslash escaped, control bytes and bytes from 0x80 as
 * \u00XX, NUL as '0'). Most such bodies are valid, so they reach the checks of the fields, the
 * keys' lookups, superseding, deadlines and the queue.
 *
 * Invariants, beyond "no crash, no sanitizer report" in the server:
 *   - every request gets an answer: "HTTP/1.1 " and 200, 201, 400 or 413; never a 5xx (the
 *     body cannot cause one: the database is up) and never another status;
 *   - a 400's body is {"error":"..."} on one line;
 *   - a 2xx names an item that is really there: 201 a new item with this body's customer and
 *     payload, queued (or dead-lettered when the answer says "expired"); 200 "superseded" a
 *     queued item now holding this payload; 200 "duplicate" an existing item of the customer.
 * A failed invariant prints the status, the answer's body and the request's body (cut).
 */
#include "fuzz_util.h"
#include "fuzz_net.h"

#include "admin_http.h"
#include "db.h"
#include "migrate.h"
#include "pgconn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#define TOKEN    "fuzz-enqueue-token"
#define MAX_BODY (1u << 20)
/* The material's cap: room for the wrappers, so that an amplified body stays within MAX_BODY:
 * 413 is fuzz_admin_http's business. */
#define MAX_MATERIAL (MAX_BODY - 256)

static char dbname[64];
static PGconn *check_conn; /* the harness's own session: setup, checks, drop */
static int server_port;
static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;

/* ---- the server (its own loop thread) ------------------------------------------------------- */

static pgconn *db_conn;
static admin_http *server;

static void enqueue_cb(void *arg, const char *body, size_t len, admin_http_reply *reply)
{
    (void)arg;
    /* As src/dispatch/admin.c does. */
    if (admin_http_enqueue_sql(db_conn, body, len, admin_http_reply_done, reply) != 0)
        admin_http_reply_send(reply, 503, "{\"error\":\"database unreachable\"}");
}

static void on_db_state(pgconn *c, pgconn_state s, void *arg)
{
    uv_loop_t *loop = arg;
    (void)c;
    if (s != PGCONN_READY) {
        fprintf(stderr, "fuzz_enqueue_http: lost the database connection: %s\n",
                pgconn_last_error(db_conn));
        return;
    }
    if (server)
        return;
    admin_http_options o = {.listen = "127.0.0.1:0",
                            .enqueue_token = TOKEN,
                            .max_body_bytes = MAX_BODY,
                            .idle_timeout_ms = 5000};
    admin_http_callbacks cb = {.enqueue = enqueue_cb};
    pgp_error err = {{0}};
    if (admin_http_new(loop, &o, &cb, &server, &err) != 0 || admin_http_start(server, &err) != 0) {
        fprintf(stderr, "fuzz_enqueue_http: cannot start the server: %s\n", err.msg);
        abort();
    }
    pthread_mutex_lock(&ready_lock);
    server_port = admin_http_port(server);
    pthread_cond_signal(&ready_cond);
    pthread_mutex_unlock(&ready_lock);
}

static void *server_thread(void *arg)
{
    (void)arg;
    static uv_loop_t loop;
    uv_loop_init(&loop);
    char conninfo[128];
    snprintf(conninfo, sizeof conninfo, "dbname=%s", dbname);
    pgconn_options o = {.conninfo = conninfo,
                        .application_name = "fuzz_enqueue_http",
                        .keepalive_idle_s = 10,
                        .reconnect_min_ms = 50,
                        .reconnect_max_ms = 500,
                        .on_state = on_db_state,
                        .arg = &loop};
    if (pgconn_new(&loop, &o, &db_conn) != 0)
        abort();
    pgconn_start(db_conn);
    uv_run(&loop, UV_RUN_DEFAULT); /* for the life of the process */
    return NULL;
}

/* ---- setup: a fresh, migrated database with customers --------------------------------------- */

static void exec_or_die(PGconn *conn, const char *sql)
{
    pgp_error err;
    if (db_exec_simple(conn, sql, &err) != 0) {
        fprintf(stderr, "fuzz_enqueue_http: %s: %s\n", sql, err.msg);
        abort();
    }
}

/* Answers by status, printed at exit: a run that never reached the database would show. */
static unsigned long answers[5]; /* 200, 201, 400, 413, all */

static void drop_database(void)
{
    fprintf(stderr, "fuzz_enqueue_http: %lu answers: 200 %lu, 201 %lu, 400 %lu, 413 %lu\n",
            answers[4], answers[0], answers[1], answers[2], answers[3]);
    if (!check_conn)
        return;
    PQfinish(check_conn);
    check_conn = NULL;
    PGconn *admin = NULL;
    pgp_error err;
    if (db_connect("dbname=postgres", "libpq environment", &admin, &err) == 0) {
        char sql[128];
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", dbname);
        PGresult *res = PQexec(admin, sql);
        PQclear(res);
    }
    PQfinish(admin);
}

static void setup(void)
{
    if (!getenv("PGHOST") && !getenv("PGPORT")) {
        fprintf(stderr, "fuzz_enqueue_http: needs PostgreSQL: set PGHOST, PGPORT and PGUSER "
                        "(tests/fuzz/run.sh starts a private cluster when they are not set)\n");
        abort();
    }
    snprintf(dbname, sizeof dbname, "pgpace_fuzz_%d", (int)getpid());
    PGconn *admin = NULL;
    pgp_error err;
    if (db_connect("dbname=postgres", "libpq environment", &admin, &err) != 0) {
        fprintf(stderr, "fuzz_enqueue_http: %s\n", err.msg);
        abort();
    }
    char sql[160];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", dbname);
    exec_or_die(admin, sql);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", dbname);
    exec_or_die(admin, sql);
    PQfinish(admin);
    char conninfo[128];
    snprintf(conninfo, sizeof conninfo, "dbname=%s", dbname);
    if (db_connect(conninfo, "libpq environment", &check_conn, &err) != 0) {
        fprintf(stderr, "fuzz_enqueue_http: %s\n", err.msg);
        abort();
    }
    atexit(drop_database);
    migrate_result mr;
    if (migrate_run(check_conn, &mr, NULL, &err) != 0) {
        fprintf(stderr, "fuzz_enqueue_http: migrate: %s\n", err.msg);
        abort();
    }
    /* One customer per mode and state the estimate distinguishes, and one with a max_age so
     * that deadlines pass at once. None is ever sent to: no dispatcher runs. */
    exec_or_die(check_conn,
                "SELECT pgpace.customer_set('acme', rate_per_minute => 60, "
                "webhook_url => 'http://127.0.0.1:9/hook');"
                "SELECT pgpace.customer_set('batchy', mode => 'batch', rate_per_minute => 600, "
                "webhook_url => 'http://127.0.0.1:9/hook');"
                "SELECT pgpace.customer_set('free', mode => 'unlimited', rate_per_minute => 60, "
                "webhook_url => 'http://127.0.0.1:9/hook');"
                "SELECT pgpace.customer_set('paused', rate_per_minute => 1, paused => true, "
                "webhook_url => 'http://127.0.0.1:9/hook');"
                "SELECT pgpace.customer_set('aged', rate_per_minute => 60, "
                "webhook_url => 'http://127.0.0.1:9/hook');"
                "SELECT pgpace.customer_set_max_age('aged', '1 microsecond');"
                "UPDATE pgpace.setting SET value = '65536' WHERE name = 'max_payload_bytes'");
    pthread_t thread;
    if (pthread_create(&thread, NULL, server_thread, NULL) != 0)
        abort();
    pthread_mutex_lock(&ready_lock);
    while (!server_port)
        pthread_cond_wait(&ready_cond, &ready_lock);
    pthread_mutex_unlock(&ready_lock);
}

/* ---- one request ------------------------------------------------------------------------ */

typedef struct buf {
    char *data;
    size_t len, cap;
} buf;

static void put(buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            abort();
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void puts_buf(buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static const char *const customers[] = {"acme", "batchy", "free", "paused", "aged"};
static const char *const times[] = {"now",
                                    "2000-01-01T00:00:00Z",
                                    "2030-01-01T00:00:00Z",
                                    "2030-01-01T00:00:01Z",
                                    "tomorrow",
                                    "yesterday",
                                    "epoch",
                                    "294276-12-31T23:59:59Z",
                                    "294277-01-01",
                                    "4714-11-24 BC",
                                    "4714-11-23 BC",
                                    "infinity",
                                    "-infinity",
                                    "2024-02-29T12:00:00+14:00",
                                    "J2451187",
                                    "2024-13-01"};
static const char *const fields[] = {"customer",      "payload",         "carrier",   "kind",
                                     "run_at",        "idempotency_key", "priority",  "expires_at",
                                     "supersede_key", "traceparent",     "tracestate"};

/* A JSON string of n bytes: quote and backslash escaped, control bytes and bytes from 0x80 as
 * \u00XX, NUL as '0' (valid UTF-8 and no \u0000 in the end: those are the other modes'). */
static void put_string(buf *b, const char *p, size_t n)
{
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c == 0) {
            put(b, "0", 1); /* \u0000 ends every request at the jsonb input: the raw modes try it */
        } else if (c < 0x20 || c >= 0x80) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            put(b, e, 6);
        } else {
            put(b, &p[i], 1);
        }
    }
    put(b, "\"", 1);
}

/* Mode 3: an object of the fields whose values the material gives (see the top). */
static void field_body(const char *m, size_t len, buf *out)
{
    put(out, "{", 1);
    bool first = true;
    for (size_t f = 0; f < PGP_ARRAY_LEN(fields); f++) {
        const char *sep = f + 1 < PGP_ARRAY_LEN(fields) ? memchr(m, 2, len) : NULL;
        size_t n = sep ? (size_t)(sep - m) : len;
        if (n > 0 || f <= 1) {
            if (!first)
                put(out, ",", 1);
            first = false;
            put(out, "\"", 1);
            puts_buf(out, fields[f]);
            put(out, "\":", 2);
            unsigned char first_byte = n ? (unsigned char)m[0] : 0;
            if (n > 0 && first_byte == 3) {
                put(out, m + 1, n - 1);
            } else if (f == 1 && n == 0) {
                put(out, "{}", 2);
            } else if (f == 0) {
                put_string(out, customers[first_byte % PGP_ARRAY_LEN(customers)],
                           strlen(customers[first_byte % PGP_ARRAY_LEN(customers)]));
            } else if (strcmp(fields[f], "run_at") == 0 || strcmp(fields[f], "expires_at") == 0) {
                const char *t = times[first_byte % PGP_ARRAY_LEN(times)];
                put_string(out, t, strlen(t));
            } else if (strcmp(fields[f], "priority") == 0) {
                char num[16];
                int16_t v =
                    (int16_t)(uint16_t)(first_byte | (n > 1 ? (unsigned char)m[1] << 8 : 0));
                snprintf(num, sizeof num, "%d", v);
                puts_buf(out, num);
            } else {
                put_string(out, m, n);
            }
        }
        /* Past the last separator the remaining fields get empty values. */
        m += sep ? n + 1 : n;
        len -= sep ? n + 1 : n;
    }
    put(out, "}", 1);
}

/* The body's material: as given, or amplified (mode bit 4): three bytes (little-endian) give a
 * count R, and the rest, split at 0x01 bytes into H, P, M, S, T (missing parts are empty),
 * becomes H, P x R, M, S x R, T, cut to cap bytes by lowering R. */
static void material(const uint8_t *data, size_t size, bool amplify, size_t cap, buf *out)
{
    if (!amplify) {
        put(out, data, size);
        return;
    }
    size_t r = (size_t)fuzz_take_u64(&data, &size, 3);
    const uint8_t *part[5];
    size_t plen[5];
    for (int i = 0; i < 5; i++) {
        const uint8_t *sep = i < 4 ? memchr(data, 1, size) : NULL;
        size_t n = sep ? (size_t)(sep - data) : size;
        part[i] = data;
        plen[i] = n;
        data += sep ? n + 1 : n;
        size -= sep ? n + 1 : n;
    }
    size_t fixed = plen[0] + plen[2] + plen[4], unit = plen[1] + plen[3];
    if (fixed > cap)
        r = 0;
    else if (unit > 0 && r > (cap - fixed) / unit)
        r = (cap - fixed) / unit;
    put(out, part[0], plen[0]);
    for (size_t i = 0; unit > 0 && i < r; i++)
        put(out, part[1], plen[1]);
    put(out, part[2], plen[2]);
    for (size_t i = 0; unit > 0 && i < r; i++)
        put(out, part[3], plen[3]);
    put(out, part[4], plen[4]);
}

static int connect_server(void)
{
    int fd = fuzz_connect_loopback(server_port, 10);
    FUZZ_CHECK(fd >= 0, "cannot connect to the server: %s", strerror(errno));
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the server may answer and close early (413): read what it said */
        p += w;
        n -= (size_t)w;
    }
}

/* What the database answered is invisible to libFuzzer's coverage (only this process's code is
 * instrumented). Turn the kind of answer into coverage: the status, the flags of a 2xx, and the
 * error text up to its first value (a quote or a digit) pick one of 256 branches, so that an
 * input reaching a new error in the SQL functions is kept and mutated further. */
static volatile unsigned feature_sink;

#define FEATURE1(n)                                                                                \
    case (n):                                                                                      \
        feature_sink = (n);                                                                        \
        break;
#define FEATURE4(n)  FEATURE1(n) FEATURE1((n) + 1) FEATURE1((n) + 2) FEATURE1((n) + 3)
#define FEATURE16(n) FEATURE4(n) FEATURE4((n) + 4) FEATURE4((n) + 8) FEATURE4((n) + 12)
#define FEATURE64(n) FEATURE16(n) FEATURE16((n) + 16) FEATURE16((n) + 32) FEATURE16((n) + 48)

static void answer_feature(int status, const char *answer)
{
    uint32_t h = 2166136261u ^ (uint32_t)status;
    for (size_t i = 0; answer[i] && i < 64; i++) {
        char c = answer[i];
        if (i > 10 && (c == '\'' || c == '\\' || (c >= '0' && c <= '9')))
            break; /* values (names, numbers, quoted input) would make every answer new */
        h = (h ^ (uint8_t)c) * 16777619u;
    }
    switch (h & 255) {
        FEATURE64(0)
        FEATURE64(64)
        FEATURE64(128)
        FEATURE64(192)
    }
}

/* The item checks, on the harness's own session. */
static void check_item(int status, const char *answer, const buf *body)
{
    const char *p = strstr(answer, "{\"id\":");
    FUZZ_CHECK(p == answer, "%d without an id: %s", status, answer);
    char *end;
    long long id = strtoll(p + 6, &end, 10);
    FUZZ_CHECK(id > 0 && (*end == ',' || *end == '}'), "%d with a bad id: %s", status, answer);
    bool expired = strstr(answer, "\"expired\":true") != NULL;
    bool superseded = strstr(answer, "\"superseded\":true") != NULL;
    bool duplicate = strstr(answer, "\"duplicate\":true") != NULL;
    FUZZ_CHECK(status == 201 ? !superseded && !duplicate : superseded != duplicate,
               "%d with flags that do not match it: %s", status, answer);
    char idtext[24];
    snprintf(idtext, sizeof idtext, "%lld", id);
    const char *params[] = {idtext, body->data};
    /* The item, its customer as the body names it, whether its payload is the body's, and
     * where it is now. The body parses: the server's statement parsed it. */
    PGresult *res = PQexecParams(
        check_conn,
        "SELECT c.name = ($2::jsonb ->> 'customer'), i.payload = ($2::jsonb -> 'payload'), "
        "       EXISTS (SELECT 1 FROM pgpace.queue q WHERE q.item_id = i.id), "
        "       EXISTS (SELECT 1 FROM pgpace.dead_letter d WHERE d.item_id = i.id) "
        "  FROM pgpace.item i JOIN pgpace.customer c ON c.id = i.customer_id WHERE i.id = $1",
        2, NULL, params, NULL, NULL, 0);
    FUZZ_CHECK(PQresultStatus(res) == PGRES_TUPLES_OK, "checking item %lld: %s", id,
               PQresultErrorMessage(res));
    FUZZ_CHECK(PQntuples(res) == 1, "%d %s: item %lld is not in pgpace.item", status, answer, id);
    bool same_customer = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    bool same_payload = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    bool queued = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    bool dead = strcmp(PQgetvalue(res, 0, 3), "t") == 0;
    PQclear(res);
    FUZZ_CHECK(same_customer, "%d %s: item %lld belongs to another customer", status, answer, id);
    if (!duplicate)
        FUZZ_CHECK(same_payload, "%d %s: item %lld does not hold this payload", status, answer, id);
    if (status == 201 && !expired)
        FUZZ_CHECK(queued && !dead, "201 %s: item %lld is not queued (queued %d, dead %d)", answer,
                   id, queued, dead);
    if (expired)
        FUZZ_CHECK(dead && !queued, "%d %s: item %lld is not dead-lettered as expired", status,
                   answer, id);
    if (superseded && !expired)
        FUZZ_CHECK(queued, "200 %s: superseded item %lld is not queued", answer, id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!server_port)
        setup();
    unsigned mode = (unsigned)fuzz_take_u64(&data, &size, 1);
    buf mat = {0}, body = {0}, req = {0};
    /* Mode 3 escapes bytes into up to six: its material is kept to a sixth. */
    material(data, size, (mode & 0x10) != 0, (mode & 3) == 3 ? MAX_MATERIAL / 6 : MAX_MATERIAL,
             &mat);
    switch (mode & 3) {
    case 1:
        puts_buf(&body, "{\"customer\":\"acme\",\"payload\":");
        put(&body, mat.data, mat.len);
        puts_buf(&body, "}");
        break;
    case 2:
        puts_buf(&body, "{\"customer\":\"acme\",\"payload\":{},");
        put(&body, mat.data, mat.len);
        puts_buf(&body, "}");
        break;
    case 3:
        field_body(mat.data, mat.len, &body);
        break;
    default:
        put(&body, mat.data, mat.len);
        break;
    }
    free(mat.data);
    bool chunked = (mode & 4) != 0;
    char head[512];
    snprintf(head, sizeof head,
             "POST /v1/items HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer " TOKEN "\r\n"
             "Content-Type: application/json%s\r\n%s%s\r\n",
             (mode & 0x20) ? "; charset=utf-8" : "", (mode & 8) ? "Expect: 100-continue\r\n" : "",
             chunked ? "Transfer-Encoding: chunked\r\n" : "");
    puts_buf(&req, head);
    if (chunked) {
        for (size_t off = 0; off < body.len;) {
            size_t n = body.len - off < 7 ? body.len - off : 7;
            char line[16];
            snprintf(line, sizeof line, "%zx\r\n", n);
            puts_buf(&req, line);
            put(&req, body.data + off, n);
            puts_buf(&req, "\r\n");
            off += n;
        }
        puts_buf(&req, "0\r\n\r\n");
    } else {
        snprintf(head, sizeof head, "Content-Length: %zu\r\n\r\n", body.len);
        /* Content-Length goes among the headers: drop the blank line just written. */
        req.len -= 2;
        puts_buf(&req, head);
        put(&req, body.data, body.len);
    }
    /* Make sure body is a C string for the checks (a NUL inside is answered before them). */
    put(&body, "", 0);

    int fd = connect_server();
    send_all(fd, req.data, req.len);
    shutdown(fd, SHUT_WR);
    buf ans = {0};
    put(&ans, "", 0);
    char chunk[4096];
    for (;;) {
        ssize_t r = recv(fd, chunk, sizeof chunk, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        put(&ans, chunk, (size_t)r);
    }
    close(fd);
    free(req.data);

    /* Skip an interim "100 Continue". */
    const char *a = ans.data;
    if (strncmp(a, "HTTP/1.1 100 ", 13) == 0) {
        const char *e = strstr(a, "\r\n\r\n");
        a = e ? e + 4 : a + strlen(a);
    }
    FUZZ_CHECK(strlen(a) >= 12 && strncmp(a, "HTTP/1.1 ", 9) == 0,
               "no HTTP answer (%zu bytes: %s) to the body %s", ans.len, fuzz_show(ans.data),
               fuzz_show(body.data));
    int status = atoi(a + 9);
    const char *sep = strstr(a, "\r\n\r\n");
    const char *answer = sep ? sep + 4 : "";
    FUZZ_CHECK(status < 500, "server error %d %s for the body (%zu bytes) %s", status, answer,
               body.len, fuzz_show(body.data));
    FUZZ_CHECK(status == 200 || status == 201 || status == 400 || status == 413,
               "unexpected status %d %s for the body %s", status, answer, fuzz_show(body.data));
    answer_feature(status, status == 400           ? answer
                           : strstr(answer, ",\"") ? strstr(answer, ",\"")
                                                   : "");
    answers[status == 200 ? 0 : status == 201 ? 1 : status == 400 ? 2 : 3]++;
    answers[4]++;
    if (status == 400) {
        size_t n = strlen(answer);
        FUZZ_CHECK(strncmp(answer, "{\"error\":\"", 10) == 0 && n > 12 &&
                       strcmp(answer + n - 2, "\"}") == 0 && !strchr(answer, '\n'),
                   "400 without a one-line JSON error: %s", fuzz_show(answer));
    }
    if (status == 200 || status == 201)
        check_item(status, answer, &body);
    free(ans.data);
    free(body.data);
    return 0;
}
