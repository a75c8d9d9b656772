/* claimbench.c - the C driver of bench/run: sends pgpace's real claim and finalize statements
 * (sql/queries/run_claim.sql, run_finalize*.sql) and the naive baselines, and prints timings.
 *
 * Built by bench/run with the system compiler and pkg-config (cc -O2 ... -lpq -lpthread).
 * Statements are sent the way the dispatcher sends them (src/pgconn.c): prepared once per
 * session and executed by name with text parameters (plan_cache_mode left at its default),
 * one Sync (= one transaction) per statement, on a session with jit = off
 * (sql/queries/run_session.sql).
 *
 *   claimbench unlimited CONNINFO CLAIM_SQL SUCCESS_SQL --customers 1,2 --batch N --seconds S
 *       One thread and connection per customer; each loops in pipeline mode: claim N items of
 *       its customer (unlimited mode; given run_claim.sql, the statement the dispatcher sends
 *       for such a round instead, run_claim_unlimited.sql beside it: see claim_statement() in
 *       src/dispatch/rows.c), finalize the previous round's items as success
 *       (SUCCESS_SQL: sql/queries/run_finalize_success.sql, which the dispatcher sends when a
 *       batch holds only successes) in the same pipeline.
 *       Prints "items <n> seconds <s> items_per_s <r> rounds <k> dry <0|1>".
 *   claimbench round CONNINFO CLAIM_SQL FINALIZE_SQL --mode spaced|batch|carriers|nocarriers
 *              --customers LIST --rounds R [--limit N] [--carriers c0,c1,..] [--budget B]
 *       R claim rounds, each timed alone (autocommit, as the dispatcher), then released with
 *       the finalize statement's 'release' outcome (untimed) so every round sees the same data.
 *       nocarriers is a round of unlimited customers: sent as in the unlimited workload.
 *       Prints one line per round: "round <i> ms <latency> items <claimed>".
 *   claimbench naive-delay CONNINFO --seconds S --max N
 *       The naive delay claim repeated (one item per statement) for S seconds or N statements,
 *       each timed; afterwards the rows are restored (untimed). Prints "stmt <i> ms <l> items <k>".
 *   claimbench naive-batch CONNINFO --rounds R
 *       The naive RANK() batch dispatcher, each round timed and then restored (untimed).
 */
#define _GNU_SOURCE
#include <libpq-fe.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "claimbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n)
        die("cannot read %s", path);
    s[n] = 0;
    fclose(f);
    return s;
}

/* A growable string. */
typedef struct sb {
    char *s;
    size_t len, cap;
} sb;

static void sb_printf(sb *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            die("vsnprintf");
        if (b->s && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        b->s = realloc(b->s, cap);
        if (!b->s)
            die("out of memory");
        b->cap = cap;
        if (b->len == 0)
            b->s[0] = 0;
    }
}

static void sb_reset(sb *b)
{
    b->len = 0;
    if (b->s)
        b->s[0] = 0;
}

/* Appends "{" or "," then the formatted element. */
static void sb_elem(sb *b, const char *fmt, ...)
{
    sb_printf(b, "%s", b->len ? "," : "{");
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_printf(b, "%s", tmp);
}

static const char *sb_close(sb *b)
{
    if (b->len == 0)
        sb_printf(b, "{}");
    else
        sb_printf(b, "}");
    return b->s;
}

static PGconn *connect_db(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        die("connect: %s", PQerrorMessage(c));
    /* As the dispatcher's session (sql/queries/run_session.sql). */
    PGresult *r = PQexec(c, "SELECT set_config('jit', 'off', false)");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("session: %s", PQerrorMessage(c));
    PQclear(r);
    return c;
}

static PGresult *exec_params(PGconn *c, const char *sql, int n, const char *const *p,
                             ExecStatusType want)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != want)
        die("statement failed: %s", PQerrorMessage(c));
    return r;
}

/* Prepares `sql` as statement `name` on the session, as src/pgconn.c does on first use. */
static void prepare(PGconn *c, const char *name, const char *sql, int n)
{
    PGresult *r = PQprepare(c, name, sql, n, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        die("prepare %s: %s", name, PQerrorMessage(c));
    PQclear(r);
}

static PGresult *exec_prepared(PGconn *c, const char *name, int n, const char *const *p,
                               ExecStatusType want)
{
    PGresult *r = PQexecPrepared(c, name, n, p, NULL, NULL, 0);
    if (PQresultStatus(r) != want)
        die("statement %s failed: %s", name, PQerrorMessage(c));
    return r;
}

static int parse_list(const char *s, char ***out)
{
    char *dup = strdup(s);
    int n = 0, cap = 16;
    char **v = malloc(sizeof *v * (size_t)cap);
    for (char *tok = strtok(dup, ","); tok; tok = strtok(NULL, ",")) {
        if (n == cap)
            v = realloc(v, sizeof *v * (size_t)(cap *= 2));
        v[n++] = strdup(tok);
    }
    free(dup);
    *out = v;
    return n;
}

/* "2-1000" or "1,2,5" into ids */
static int parse_ids(const char *s, long **out)
{
    const char *dash = strchr(s, '-');
    if (dash && !strchr(s, ',')) {
        long a = atol(s), b = atol(dash + 1);
        long *v = malloc(sizeof *v * (size_t)(b - a + 1));
        for (long i = a; i <= b; i++)
            v[i - a] = i;
        *out = v;
        return (int)(b - a + 1);
    }
    char **parts;
    int n = parse_list(s, &parts);
    long *v = malloc(sizeof *v * (size_t)n);
    for (int i = 0; i < n; i++)
        v[i] = atol(parts[i]);
    *out = v;
    return n;
}

/* ---- a query's shape ----------------------------------------------------------------------- */

/* The names of a query's parameters and columns, from its "-- @params:" and "-- @columns:"
 * lines (see src/tools/embed_sql.c), so that the driver binds by name, as the dispatcher does
 * through SQL_<NAME>_P_*, and a parameter added to the query stops the driver instead of
 * shifting every value after it. */
typedef struct shape {
    char **params, **columns;
    int nparams, ncolumns;
} shape;

static void shape_add(char ***v, int *n, const char *line)
{
    char *dup = strdup(line), *save = NULL; /* strtok_r: the workers parse at the same time */
    for (char *tok = strtok_r(dup, " \t\r\n,", &save); tok;
         tok = strtok_r(NULL, " \t\r\n,", &save)) {
        *v = realloc(*v, sizeof **v * (size_t)(*n + 1));
        if (!*v)
            die("out of memory");
        (*v)[(*n)++] = strdup(tok);
    }
    free(dup);
}

static shape shape_of(const char *sql)
{
    shape sh = {0};
    for (const char *line = sql; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[1024];
        if (len >= sizeof buf)
            len = sizeof buf - 1;
        memcpy(buf, line, len);
        buf[len] = 0;
        if (!strncmp(buf, "-- @params:", 11))
            shape_add(&sh.params, &sh.nparams, buf + 11);
        else if (!strncmp(buf, "-- @columns:", 12))
            shape_add(&sh.columns, &sh.ncolumns, buf + 12);
        line = nl ? nl + 1 : line + len;
    }
    if (sh.nparams == 0 || sh.ncolumns == 0)
        die("the query declares no @params / @columns");
    return sh;
}

static int shape_column(const shape *sh, const char *name)
{
    for (int i = 0; i < sh->ncolumns; i++)
        if (!strcmp(sh->columns[i], name))
            return i;
    die("the query has no column %s", name);
    return -1;
}

/* A named value the driver knows; a query's parameters are looked up among them. */
typedef struct named {
    const char *name, *value; /* value NULL: SQL NULL */
} named;

/* Fills p[] (sh->nparams entries) from `known`; a parameter the driver does not know is fatal. */
static void shape_bind(const shape *sh, const named *known, size_t nknown, const char **p)
{
    for (int i = 0; i < sh->nparams; i++) {
        size_t k = 0;
        while (k < nknown && strcmp(known[k].name, sh->params[i]) != 0)
            k++;
        if (k == nknown)
            die("the query has a parameter the driver does not know: %s", sh->params[i]);
        p[i] = known[k].value;
    }
}

/* ---- finalize ------------------------------------------------------------------------------ */

typedef struct claimed {
    long *ids;
    long *tokens;
    int n, cap;
} claimed;

static void claimed_add(claimed *c, long id, long token)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->ids = realloc(c->ids, sizeof *c->ids * (size_t)c->cap);
        c->tokens = realloc(c->tokens, sizeof *c->tokens * (size_t)c->cap);
    }
    c->ids[c->n] = id;
    c->tokens[c->n] = token;
    c->n++;
}

/* The finalize statement's 10 array parameters for every item of `c` with one outcome. */
static void finalize_params(const claimed *c, const char *outcome, sb a[10], const char *p[10])
{
    for (int k = 0; k < 10; k++)
        sb_reset(&a[k]);
    int64_t t = now_us();
    for (int i = 0; i < c->n; i++) {
        sb_elem(&a[0], "%ld", c->ids[i]);
        sb_elem(&a[1], "%ld", c->tokens[i]);
        sb_elem(&a[2], "%s", outcome);
        sb_elem(&a[3], "0");
        sb_elem(&a[4], strcmp(outcome, "success") == 0 ? "200" : "NULL");
        sb_elem(&a[5], "NULL");
        sb_elem(&a[6], "NULL");
        sb_elem(&a[7], "%lld", (long long)t);
        sb_elem(&a[8], "1.000");
        sb_elem(&a[9], "NULL");
    }
    for (int k = 0; k < 10; k++)
        p[k] = sb_close(&a[k]);
}

/* Appends "{" or "," then the n bytes of s. */
static void sb_elem_raw(sb *b, const char *s, size_t n)
{
    if (b->len + n + 2 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 2)
            cap *= 2;
        b->s = realloc(b->s, cap);
        if (!b->s)
            die("out of memory");
        b->cap = cap;
    }
    b->s[b->len] = b->len ? ',' : '{';
    b->len++;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

/* Appends "{" or "," then v in decimal. */
static void sb_elem_i64(sb *b, int64_t v)
{
    char tmp[24], *e = tmp + sizeof tmp, *q = e;
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
    do
        *--q = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--q = '-';
    sb_elem_raw(b, q, (size_t)(e - q));
}

/* run_finalize_success.sql's 6 array parameters: item, token, status, start, duration, excerpt.
 * Formatted without printf: this runs for every item, and the driver's CPU is taken from the
 * server's on a small machine (pgbench's client formats nothing: it passes the ids it read). */
static void success_params(const claimed *c, sb a[6], const char *p[6])
{
    for (int k = 0; k < 6; k++)
        sb_reset(&a[k]);
    int64_t t = now_us();
    for (int i = 0; i < c->n; i++) {
        sb_elem_i64(&a[0], c->ids[i]);
        sb_elem_i64(&a[1], c->tokens[i]);
        sb_elem_raw(&a[2], "200", 3);
        sb_elem_i64(&a[3], t);
        sb_elem_raw(&a[4], "1.000", 5);
        sb_elem_raw(&a[5], "NULL", 4);
    }
    for (int k = 0; k < 6; k++)
        p[k] = sb_close(&a[k]);
}

/* ---- unlimited: claim + ack throughput ------------------------------------------------------ */

typedef struct worker {
    const char *conninfo, *claim_sql, *success_sql;
    long customer;
    int batch, index;
    double seconds;
    long items, rounds;
    double elapsed;
    bool dry;
    pthread_barrier_t *barrier;
} worker;

static void pipe_send(PGconn *c, const char *name, int n, const char *const *p)
{
    if (!PQsendQueryPrepared(c, name, n, p, NULL, NULL, 0) || !PQpipelineSync(c))
        die("send: %s", PQerrorMessage(c));
}

/* Reads one statement's result (and its Sync) in pipeline mode. */
static PGresult *pipe_result(PGconn *c)
{
    PGresult *r, *keep = NULL;
    while ((r = PQgetResult(c)) != NULL) {
        ExecStatusType st = PQresultStatus(r);
        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
            die("pipeline statement: %s", PQresultErrorMessage(r));
        if (keep)
            PQclear(keep);
        keep = r;
    }
    r = PQgetResult(c);
    if (!r || PQresultStatus(r) != PGRES_PIPELINE_SYNC)
        die("pipeline: expected a sync");
    PQclear(r);
    return keep;
}

static void *unlimited_thread(void *arg)
{
    worker *w = arg;
    PGconn *c = connect_db(w->conninfo);
    shape sh = shape_of(w->claim_sql);
    prepare(c, "claim", w->claim_sql, sh.nparams);
    prepare(c, "success", w->success_sql, 6);
    int col_kind = shape_column(&sh, "kind"), col_item = shape_column(&sh, "item_id");
    const char **p = calloc((size_t)sh.nparams, sizeof *p);
    if (PQenterPipelineMode(c) != 1)
        die("pipeline mode");
    char cust[32], n[16], tokbuf[32], claimed_by[32];
    snprintf(cust, sizeof cust, "{%ld}", w->customer);
    snprintf(n, sizeof n, "{%d}", w->batch);
    snprintf(claimed_by, sizeof claimed_by, "claimbench:%d", w->index);
    /* What the dispatcher sends for a round of one unlimited customer without carriers. */
    const named known[] = {{"pair_customer", cust},
                           {"pair_carrier", "{\"\"}"},
                           {"pair_limit", n},
                           {"pair_in_flight", "{0}"},
                           {"customer", cust},
                           {"customer_limit", n},
                           {"carrier", "{}"},
                           {"carrier_budget", "{}"},
                           {"default_carrier_budget", "100"},
                           {"lease_s", "60"},
                           {"token", tokbuf},
                           {"claimed_by", claimed_by},
                           {"fr_customer", "{}"},
                           {"fr_base", "{}"},
                           {"fr_period", "{}"},
                           {"fr_credit", "{}"},
                           {"tick", NULL},
                           /* no recovery pace, no tenant gate (run_claim.sql $18-$20) */
                           {"rec_ahead_us", NULL},
                           {"gate_customer", "{}"},
                           {"gate_tat", "{}"}};
    shape_bind(&sh, known, sizeof known / sizeof known[0], p);
    sb fa[6] = {{0}};
    const char *fp[6];
    claimed prev = {0}, cur = {0};
    long token = ((long)w->index + 1) << 48 | (now_us() & 0xffffffffffL);
    pthread_barrier_wait(w->barrier);
    double start = mono_s(), deadline = start + w->seconds;
    bool have_prev = false;
    for (;;) {
        bool last = mono_s() >= deadline;
        if (!last) {
            snprintf(tokbuf, sizeof tokbuf, "%ld", ++token);
            pipe_send(c, "claim", sh.nparams, p); /* p[] points at tokbuf */
        }
        if (have_prev) {
            success_params(&prev, fa, fp);
            pipe_send(c, "success", 6, fp);
        }
        if (last && !have_prev)
            break;
        if (PQflush(c) != 0)
            die("flush");
        cur.n = 0;
        if (!last) {
            PGresult *r = pipe_result(c);
            for (int i = 0; i < PQntuples(r); i++)
                if (PQgetvalue(r, i, col_kind)[0] == 'i')
                    claimed_add(&cur, atol(PQgetvalue(r, i, col_item)), token);
            PQclear(r);
            if (cur.n < w->batch)
                w->dry = true;
            w->rounds++;
        }
        if (have_prev) {
            PGresult *r = pipe_result(c);
            if (PQntuples(r) != 0)
                die("finalize reported %d items not owned", PQntuples(r));
            PQclear(r);
            w->items += prev.n;
        }
        claimed t = prev; /* the round just claimed is finalized in the next pipeline */
        prev = cur;
        cur = t;
        have_prev = prev.n > 0;
        if (last || prev.n == 0)
            break; /* done, or the queue ran dry */
    }
    w->elapsed = mono_s() - start;
    free(p);
    PQfinish(c);
    return NULL;
}

/* The statement the dispatcher sends for a round of unlimited customers: run_claim.sql names
 * run_claim_unlimited.sql beside it (claim_statement() in src/dispatch/rows.c); any other file
 * is sent as it is. */
static char *unlimited_claim_path(const char *claim_path)
{
    const char *base = strrchr(claim_path, '/');
    base = base ? base + 1 : claim_path;
    if (strcmp(base, "run_claim.sql") != 0)
        return strdup(claim_path);
    size_t dir = (size_t)(base - claim_path);
    char *lean = malloc(dir + sizeof "run_claim_unlimited.sql");
    if (!lean)
        die("out of memory");
    memcpy(lean, claim_path, dir);
    strcpy(lean + dir, "run_claim_unlimited.sql");
    return lean;
}

static int cmd_unlimited(int argc, char **argv)
{
    if (argc < 5)
        die("usage: unlimited CONNINFO CLAIM_SQL SUCCESS_SQL --customers L --batch N --seconds S");
    const char *conninfo = argv[2];
    char *claim_path = unlimited_claim_path(argv[3]);
    char *claim_sql = read_file(claim_path), *success_sql = read_file(argv[4]);
    free(claim_path);
    long *ids = NULL;
    int nids = 0, batch = 100;
    double seconds = 5;
    for (int i = 5; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--customers"))
            nids = parse_ids(argv[i + 1], &ids);
        else if (!strcmp(argv[i], "--batch"))
            batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else
            die("unknown option %s", argv[i]);
    }
    if (nids < 1)
        die("--customers needed");
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)nids);
    worker *w = calloc((size_t)nids, sizeof *w);
    pthread_t *th = calloc((size_t)nids, sizeof *th);
    for (int i = 0; i < nids; i++) {
        w[i] = (worker){.conninfo = conninfo,
                        .claim_sql = claim_sql,
                        .success_sql = success_sql,
                        .customer = ids[i],
                        .batch = batch,
                        .index = i,
                        .seconds = seconds,
                        .barrier = &barrier};
        pthread_create(&th[i], NULL, unlimited_thread, &w[i]);
    }
    long items = 0, rounds = 0;
    double elapsed = 0;
    bool dry = false;
    for (int i = 0; i < nids; i++) {
        pthread_join(th[i], NULL);
        items += w[i].items;
        rounds += w[i].rounds;
        elapsed = w[i].elapsed > elapsed ? w[i].elapsed : elapsed;
        dry = dry || w[i].dry;
    }
    printf("items %ld seconds %.3f items_per_s %.1f rounds %ld dry %d\n", items, elapsed,
           (double)items / elapsed, rounds, dry ? 1 : 0);
    return 0;
}

/* ---- claim rounds: spaced, batch tick, carriers ---------------------------------------------- */

static int cmd_round(int argc, char **argv)
{
    if (argc < 5)
        die("usage: round CONNINFO CLAIM_SQL FINALIZE_SQL --mode M --customers L --rounds R");
    const char *conninfo = argv[2];
    char *finalize_sql = read_file(argv[4]);
    const char *mode = "spaced";
    long *ids = NULL;
    int nids = 0, rounds = 10, limit = 1, budget = 100, ncarriers = 0;
    char **carriers = NULL;
    for (int i = 5; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mode"))
            mode = argv[i + 1];
        else if (!strcmp(argv[i], "--customers"))
            nids = parse_ids(argv[i + 1], &ids);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--limit"))
            limit = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--budget"))
            budget = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--carriers"))
            ncarriers = parse_list(argv[i + 1], &carriers);
        else
            die("unknown option %s", argv[i]);
    }
    bool spaced = !strcmp(mode, "spaced"), batch = !strcmp(mode, "batch");
    bool with_carriers = !strcmp(mode, "carriers");
    char *claim_path =
        !strcmp(mode, "nocarriers") ? unlimited_claim_path(argv[3]) : strdup(argv[3]);
    char *claim_sql = read_file(claim_path);
    free(claim_path);
    PGconn *c = connect_db(conninfo);
    shape sh = shape_of(claim_sql);
    prepare(c, "claim", claim_sql, sh.nparams);
    prepare(c, "finalize", finalize_sql, 10);
    int col_kind = shape_column(&sh, "kind"), col_item = shape_column(&sh, "item_id");
    const char **p = calloc((size_t)sh.nparams, sizeof *p);
    enum { PC, PK, PL, PF, CU, CL, CA, CB, FC, FB, FP, FK, NA };
    sb a[NA] = {{0}}, fa[10] = {{0}};
    const char *fp[10];
    long token = now_us();
    long tick = now_us() / 1000; /* increasing across runs: a tick is claimed once */
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < NA; k++)
            sb_reset(&a[k]);
        int64_t base = now_us();
        for (int i = 0; i < nids; i++) {
            if (with_carriers) {
                /* The dispatcher asks each (customer, carrier) pair for min(limit, budget). */
                for (int k = 0; k < ncarriers; k++) {
                    sb_elem(&a[PC], "%ld", ids[i]);
                    sb_elem(&a[PK], "\"%s\"", carriers[k]);
                    sb_elem(&a[PL], "%d", limit < budget ? limit : budget);
                    sb_elem(&a[PF], "0");
                }
            } else {
                sb_elem(&a[PC], "%ld", ids[i]);
                sb_elem(&a[PK], "\"\"");
                sb_elem(&a[PL], "%d", limit);
                sb_elem(&a[PF], "0");
            }
            sb_elem(&a[CU], "%ld", ids[i]);
            sb_elem(&a[CL], "%d", limit);
            if (spaced || batch) {
                sb_elem(&a[FC], "%ld", ids[i]);
                if (spaced)
                    sb_elem(&a[FB], "%lld", (long long)base);
                else
                    sb_elem(&a[FB], "NULL");
                sb_elem(&a[FP], spaced ? "1000000" : "NULL"); /* 60/min */
                sb_elem(&a[FK], spaced ? "NULL" : "0");
            }
        }
        for (int k = 0; k < ncarriers && with_carriers; k++) {
            sb_elem(&a[CA], "\"%s\"", carriers[k]);
            sb_elem(&a[CB], "%d", budget);
        }
        char budget_s[16], tok_s[32], tick_s[32];
        snprintf(budget_s, sizeof budget_s, "%d", budget);
        snprintf(tok_s, sizeof tok_s, "%ld", ++token);
        snprintf(tick_s, sizeof tick_s, "%ld", ++tick);
        const named known[] = {{"pair_customer", sb_close(&a[PC])},
                               {"pair_carrier", sb_close(&a[PK])},
                               {"pair_limit", sb_close(&a[PL])},
                               {"pair_in_flight", sb_close(&a[PF])},
                               {"customer", sb_close(&a[CU])},
                               {"customer_limit", sb_close(&a[CL])},
                               {"carrier", sb_close(&a[CA])},
                               {"carrier_budget", sb_close(&a[CB])},
                               {"default_carrier_budget", budget_s},
                               {"lease_s", "60"},
                               {"token", tok_s},
                               {"claimed_by", "claimbench"},
                               {"fr_customer", sb_close(&a[FC])},
                               {"fr_base", sb_close(&a[FB])},
                               {"fr_period", sb_close(&a[FP])},
                               {"fr_credit", sb_close(&a[FK])},
                               {"tick", batch ? tick_s : NULL},
                               {"rec_ahead_us", NULL},
                               {"gate_customer", "{}"},
                               {"gate_tat", "{}"}};
        shape_bind(&sh, known, sizeof known / sizeof known[0], p);
        double t0 = mono_s();
        PGresult *res = exec_prepared(c, "claim", sh.nparams, p, PGRES_TUPLES_OK);
        double ms = (mono_s() - t0) * 1000;
        claimed got = {0};
        for (int i = 0; i < PQntuples(res); i++)
            if (PQgetvalue(res, i, col_kind)[0] == 'i')
                claimed_add(&got, atol(PQgetvalue(res, i, col_item)), token);
        PQclear(res);
        printf("round %d ms %.3f items %d\n", r, ms, got.n);
        fflush(stdout);
        if (got.n > 0) { /* untimed: give the items back so the next round sees the same data */
            finalize_params(&got, "release", fa, fp);
            PQclear(exec_prepared(c, "finalize", 10, fp, PGRES_TUPLES_OK));
        }
        free(got.ids);
        free(got.tokens);
    }
    free(p);
    PQfinish(c);
    return 0;
}

/* ---- naive baselines ------------------------------------------------------------------------ */

/* The seed design's delay claim: the single oldest due row whose customer is not rate-limited
 * (no frontier row or frontier.tat <= now()), pushing that customer's tat by 1 min / rate. */
static const char naive_delay_sql[] =
    "WITH pick AS (\n"
    "    SELECT q.item_id, q.customer_id, q.next_action_at AS old_at\n"
    "      FROM pgpace.queue q LEFT JOIN pgpace.frontier f ON f.customer_id = q.customer_id\n"
    "     WHERE q.next_action_at <= now() AND (f.tat IS NULL OR f.tat <= now())\n"
    "     ORDER BY q.next_action_at LIMIT 1\n"
    "       FOR UPDATE OF q SKIP LOCKED\n"
    "), fr AS (\n"
    "    INSERT INTO pgpace.frontier (customer_id, tat)\n"
    "    SELECT p.customer_id, now() + interval '1 minute' / c.rate_per_minute\n"
    "      FROM pick p JOIN pgpace.customer c ON c.id = p.customer_id\n"
    "    ON CONFLICT (customer_id) DO UPDATE SET tat = EXCLUDED.tat\n"
    ")\n"
    "UPDATE pgpace.queue q SET next_action_at = now() + interval '1 hour'\n"
    "  FROM pick WHERE q.item_id = pick.item_id\n"
    "RETURNING q.item_id, pick.old_at";

/* The seed design's batch dispatcher: RANK() per customer over all due rows. */
static const char naive_batch_sql[] =
    "WITH ranked AS (\n"
    "    SELECT q.item_id, q.customer_id, q.next_action_at AS old_at,\n"
    "           rank() OVER (PARTITION BY q.customer_id ORDER BY q.next_action_at) AS rk\n"
    "      FROM pgpace.queue q WHERE q.next_action_at <= now()\n"
    "), pick AS (\n"
    "    SELECT r.item_id, r.old_at FROM ranked r JOIN pgpace.customer c ON c.id = r.customer_id\n"
    "     WHERE r.rk <= c.rate_per_minute\n"
    ")\n"
    "UPDATE pgpace.queue q SET next_action_at = now() + interval '1 hour'\n"
    "  FROM pick WHERE q.item_id = pick.item_id\n"
    "RETURNING q.item_id, pick.old_at";

static const char restore_sql[] =
    "UPDATE pgpace.queue q SET next_action_at = r.old_at\n"
    "  FROM unnest($1::bigint[], $2::timestamptz[]) AS r(item_id, old_at)\n"
    " WHERE q.item_id = r.item_id";

typedef struct restore {
    sb ids, ats;
} restore;

static void restore_add(restore *rs, PGresult *r)
{
    for (int i = 0; i < PQntuples(r); i++) {
        sb_elem(&rs->ids, "%s", PQgetvalue(r, i, 0));
        sb_elem(&rs->ats, "\"%s\"", PQgetvalue(r, i, 1));
    }
}

static void restore_run(PGconn *c, restore *rs)
{
    if (rs->ids.len == 0)
        return;
    const char *p[2] = {sb_close(&rs->ids), sb_close(&rs->ats)};
    PQclear(exec_params(c, restore_sql, 2, p, PGRES_COMMAND_OK));
    sb_reset(&rs->ids);
    sb_reset(&rs->ats);
}

static int cmd_naive(int argc, char **argv, bool batch)
{
    if (argc < 3)
        die("usage: naive-delay|naive-batch CONNINFO [--seconds S] [--max N] [--rounds R]");
    PGconn *c = connect_db(argv[2]);
    double seconds = 3;
    int max = batch ? 3 : 1000;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--max") || !strcmp(argv[i], "--rounds"))
            max = atoi(argv[i + 1]);
        else
            die("unknown option %s", argv[i]);
    }
    restore rs = {{0}, {0}};
    double start = mono_s();
    for (int i = 0; i < max; i++) {
        if (!batch && i >= 3 && mono_s() - start >= seconds)
            break;
        double t0 = mono_s();
        PGresult *r =
            exec_params(c, batch ? naive_batch_sql : naive_delay_sql, 0, NULL, PGRES_TUPLES_OK);
        double ms = (mono_s() - t0) * 1000;
        printf("%s %d ms %.3f items %d\n", batch ? "round" : "stmt", i, ms, PQntuples(r));
        fflush(stdout);
        restore_add(&rs, r);
        PQclear(r);
        if (batch)
            restore_run(c, &rs); /* untimed: every round sees the same data */
    }
    restore_run(c, &rs);
    PQfinish(c);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        die("usage: claimbench unlimited|round|naive-delay|naive-batch ...");
    if (!strcmp(argv[1], "unlimited"))
        return cmd_unlimited(argc, argv);
    if (!strcmp(argv[1], "round"))
        return cmd_round(argc, argv);
    if (!strcmp(argv[1], "naive-delay"))
        return cmd_naive(argc, argv, false);
    if (!strcmp(argv[1], "naive-batch"))
        return cmd_naive(argc, argv, true);
    die("unknown command %s", argv[1]);
    return 2;
}
