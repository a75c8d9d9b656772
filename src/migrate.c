/* migrate.c - versioned, checksummed, lock-protected schema migrations, and the repeatable
 * function files re-applied when they change. */
#include "migrate.h"

#include "db.h"
#include "sql_embed.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

int migrate_latest_version(void)
{
    return (int)sql_migrations_count;
}

static void hex(const unsigned char *digest, unsigned len, char out[65])
{
    for (unsigned i = 0; i < len; i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
}

static int sha256_hex(const char *text, char out[65])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(text, strlen(text), digest, &len, EVP_sha256(), NULL) != 1 || len != 32)
        return -EIO;
    hex(digest, len, out);
    return 0;
}

/* ---- the digest of the function files --------------------------------------------------- */

/* Computed once: it depends only on the embedded files. "" if SHA-256 failed, which matches no
 * stored digest. */
static pthread_once_t digest_once = PTHREAD_ONCE_INIT;
static char functions_digest[65];

static void compute_functions_digest(void)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    for (size_t i = 0; ok && i < sql_functions_count; i++) {
        char sum[65], line[256];
        ok = sha256_hex(sql_functions[i].text, sum) == 0;
        int n = snprintf(line, sizeof line, "%s  %s.sql\n", sum, sql_functions[i].name);
        ok = ok && n > 0 && (size_t)n < sizeof line && EVP_DigestUpdate(ctx, line, (size_t)n) == 1;
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (ok && EVP_DigestFinal_ex(ctx, digest, &len) == 1 && len == 32)
        hex(digest, len, functions_digest);
    EVP_MD_CTX_free(ctx);
}

const char *migrate_functions_digest(void)
{
    pthread_once(&digest_once, compute_functions_digest);
    return functions_digest;
}

/* ---- reading the database's state ------------------------------------------------------- */

int migrate_db_state(PGconn *conn, int *version, char digest[65], pgp_error *err)
{
    PGresult *res;
    int rc = db_exec(conn, sql_q_schema_version, 0, NULL, &res, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot read the schema version");
    *version = atoi(PQgetvalue(res, 0, SQL_SCHEMA_VERSION_C_VERSION));
    snprintf(digest, 65, "%s",
             PQgetvalue(res, 0, SQL_SCHEMA_VERSION_C_FUNCTIONS_DIGEST)); /* "" for NULL */
    PQclear(res);
    return 0;
}

int migrate_db_version(PGconn *conn, int *version, pgp_error *err)
{
    char digest[65];
    return migrate_db_state(conn, version, digest, err);
}

/* ---- migrations ------------------------------------------------------------------------- */

/* Comment-only revisions: migrations whose comment lines were edited after they were released,
 * with the checksum of the text as released. Their statements are byte for byte those that a
 * database which recorded the former checksum ran, so that checksum is accepted and the record
 * moved to the current one. An entry is for an edit of comment lines only (`git diff` of the
 * file shows nothing else) and names the sha256sum of the file before it; a version may have
 * several. */
static const struct comment_revision {
    int version;
    const char *former_sha256;
} comment_revisions[] = {
    {1, "38f38044022879d6da2a1fb332048d91b14121c2846ebe242b979393a0d84ac8"},
    {5, "1c3ccc79337427c34f7837e5a846cb4d3acb3c7f77b3840e3bdd2ceb122f4439"},
    {6, "f728927b1d19a9a926fdf738c6f4a30b378bee7b98aaa589d53d001f5e2502ce"},
    {7, "5c6f9dab233f11c4b107339a57903b65da3af75ca68e2ccde8826646ff7068ab"},
};

static bool is_former_checksum(int version, const char *checksum)
{
    for (size_t i = 0; i < PGP_ARRAY_LEN(comment_revisions); i++) {
        if (comment_revisions[i].version == version &&
            strcmp(comment_revisions[i].former_sha256, checksum) == 0)
            return true;
    }
    return false;
}

/* Moves the records of revised migrations (revise[v - 1] set) to their current checksums. */
static int record_revisions(PGconn *conn, const char (*revise)[65], int n, migrate_result *result,
                            FILE *progress, pgp_error *err)
{
    for (int i = 0; i < n; i++) {
        if (!revise[i][0])
            continue;
        char version[16], expected[65];
        if (sha256_hex(sql_migrations[i].text, expected) != 0)
            return pgp_error_set(err, -EIO, "cannot compute SHA-256");
        snprintf(version, sizeof version, "%d", i + 1);
        const char *params[SQL_MIGRATE_REVISE_NPARAMS] = {
            [SQL_MIGRATE_REVISE_P_VERSION] = version,
            [SQL_MIGRATE_REVISE_P_FORMER_CHECKSUM] = revise[i],
            [SQL_MIGRATE_REVISE_P_CHECKSUM] = expected};
        int rc = db_exec(conn, sql_q_migrate_revise, SQL_MIGRATE_REVISE_NPARAMS, params, NULL, err);
        if (rc != 0)
            return pgp_error_prefix(err, rc, "cannot update the record of %s",
                                    sql_migrations[i].name);
        result->revised++;
        if (progress)
            fprintf(progress, "updated the checksum of %s (its comments were revised)\n",
                    sql_migrations[i].name);
    }
    return 0;
}

/* Verifies applied migrations; returns the number applied so far or a negative error. Records
 * that carry the former checksum of a comment-only revision are updated once all passed. */
static int check_applied(PGconn *conn, migrate_result *result, FILE *progress, pgp_error *err)
{
    PGresult *res;
    int rc = db_exec(conn, sql_q_migrate_applied, 0, NULL, &res, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot read applied migrations");
    int n = PQntuples(res);
    rc = n;
    /* revise[i]: the former checksum recorded for migration i + 1, "" when current */
    char(*revise)[65] = calloc((size_t)n + 1, sizeof *revise);
    if (!revise) {
        PQclear(res);
        return pgp_error_set(err, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        int version = atoi(PQgetvalue(res, i, SQL_MIGRATE_APPLIED_C_VERSION));
        const char *name = PQgetvalue(res, i, SQL_MIGRATE_APPLIED_C_NAME);
        const char *checksum = PQgetvalue(res, i, SQL_MIGRATE_APPLIED_C_CHECKSUM);
        if (version != i + 1 || version > (int)sql_migrations_count) {
            rc = pgp_error_set(err, -EPROTO,
                               "database has migration %d (%s) which this pgpace %s does not "
                               "know; the schema is newer than this binary (latest %d)",
                               version, name, version > (int)sql_migrations_count ? "binary" : "",
                               (int)sql_migrations_count);
            break;
        }
        char expected[65];
        if (sha256_hex(sql_migrations[i].text, expected) != 0) {
            rc = pgp_error_set(err, -EIO, "cannot compute SHA-256");
            break;
        }
        if (strcmp(expected, checksum) != 0 && is_former_checksum(version, checksum)) {
            snprintf(revise[i], sizeof revise[i], "%s", checksum);
        } else if (strcmp(expected, checksum) != 0) {
            rc = pgp_error_set(err, -EPROTO,
                               "migration %s was changed after it was applied: checksum in the "
                               "database %.12s..., in this binary %.12s...; applied migrations "
                               "must never be edited (add a new one instead)",
                               sql_migrations[i].name, checksum, expected);
            break;
        }
    }
    PQclear(res);
    if (rc >= 0) {
        int revised = record_revisions(conn, (const char(*)[65])revise, n, result, progress, err);
        if (revised != 0)
            rc = revised;
    }
    free(revise);
    return rc;
}

/* Applies one migration in a transaction of its own; with keep_open the transaction is left
 * open on success, for the function files to join it. */
static int apply_one(PGconn *conn, const struct sql_migration *m, bool keep_open, pgp_error *err)
{
    char checksum[65], version[16];
    if (sha256_hex(m->text, checksum) != 0)
        return pgp_error_set(err, -EIO, "cannot compute SHA-256");
    snprintf(version, sizeof version, "%d", m->version);
    const char *params[SQL_MIGRATE_RECORD_NPARAMS] = {[SQL_MIGRATE_RECORD_P_VERSION] = version,
                                                      [SQL_MIGRATE_RECORD_P_NAME] = m->name,
                                                      [SQL_MIGRATE_RECORD_P_CHECKSUM] = checksum};

    int rc = db_exec_simple(conn, "BEGIN", err);
    if (rc == 0)
        rc = db_exec_simple(conn, m->text, err);
    if (rc == 0)
        rc = db_exec(conn, sql_q_migrate_record, SQL_MIGRATE_RECORD_NPARAMS, params, NULL, err);
    if (rc == 0 && !keep_open)
        rc = db_exec_simple(conn, "COMMIT", err);
    if (rc != 0) {
        db_rollback(conn);
        return pgp_error_prefix(err, rc, "migration %s failed and was rolled back", m->name);
    }
    return 0;
}

/* ---- function files --------------------------------------------------------------------- */

/* The function files to apply, as flags over sql_functions[] with their checksums. */
typedef struct function_plan {
    bool *todo;
    char (*checksum)[65];
    int n_todo;
    bool forget; /* the database has rows of files this binary does not have */
    bool digest; /* the stored digest is not this binary's */
} function_plan;

static void plan_free(function_plan *p)
{
    free(p->todo);
    free(p->checksum);
}

/* Compares the embedded files with pgpace.schema_function: a file is to be applied when its
 * row is missing or holds another checksum, or always when `all`. */
static int plan_functions(PGconn *conn, bool all, function_plan *plan, pgp_error *err)
{
    size_t n = sql_functions_count;
    plan->todo = calloc(n + 1, sizeof *plan->todo);
    plan->checksum = calloc(n + 1, sizeof *plan->checksum);
    if (!plan->todo || !plan->checksum)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (sha256_hex(sql_functions[i].text, plan->checksum[i]) != 0)
            return pgp_error_set(err, -EIO, "cannot compute SHA-256");
    }

    PGresult *res;
    int rc = db_exec(conn, sql_q_migrate_function_applied, 0, NULL, &res, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot read applied function files");
    int rows = PQntuples(res);
    for (size_t i = 0; i < n; i++) {
        bool same = false;
        for (int r = 0; r < rows && !same; r++) {
            same = strcmp(PQgetvalue(res, r, SQL_MIGRATE_FUNCTION_APPLIED_C_NAME),
                          sql_functions[i].name) == 0 &&
                   strcmp(PQgetvalue(res, r, SQL_MIGRATE_FUNCTION_APPLIED_C_CHECKSUM),
                          plan->checksum[i]) == 0;
        }
        plan->todo[i] = all || !same;
        plan->n_todo += plan->todo[i];
    }
    for (int r = 0; r < rows && !plan->forget; r++) {
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = strcmp(PQgetvalue(res, r, SQL_MIGRATE_FUNCTION_APPLIED_C_NAME),
                           sql_functions[i].name) == 0;
        plan->forget = !known;
    }
    PQclear(res);

    int version;
    char stored[65];
    rc = migrate_db_state(conn, &version, stored, err);
    if (rc != 0)
        return rc;
    plan->digest = strcmp(stored, migrate_functions_digest()) != 0;
    return 0;
}

/* "{01_names,02_partitions,...}": names are [A-Za-z0-9_] (embed_sql checks), so no quoting. */
static char *function_names_array(void)
{
    size_t len = 3;
    for (size_t i = 0; i < sql_functions_count; i++)
        len += strlen(sql_functions[i].name) + 1;
    char *out = malloc(len);
    if (!out)
        return NULL;
    char *p = out;
    *p++ = '{';
    for (size_t i = 0; i < sql_functions_count; i++)
        p += sprintf(p, "%s%s", i ? "," : "", sql_functions[i].name);
    strcpy(p, "}");
    return out;
}

/* The statements of one transaction: the planned files, their rows, the rows of files gone
 * (*forgotten gets their names), the digest. */
static int apply_functions_tx(PGconn *conn, const function_plan *plan, PGresult **forgotten,
                              pgp_error *err)
{
    for (size_t i = 0; i < sql_functions_count; i++) {
        if (!plan->todo[i])
            continue;
        const char *params[SQL_MIGRATE_FUNCTION_RECORD_NPARAMS] = {
            [SQL_MIGRATE_FUNCTION_RECORD_P_NAME] = sql_functions[i].name,
            [SQL_MIGRATE_FUNCTION_RECORD_P_CHECKSUM] = plan->checksum[i]};
        int rc = db_exec_simple(conn, sql_functions[i].text, err);
        if (rc == 0)
            rc = db_exec(conn, sql_q_migrate_function_record, SQL_MIGRATE_FUNCTION_RECORD_NPARAMS,
                         params, NULL, err);
        if (rc != 0) {
            return pgp_error_prefix(err, rc,
                                    "function file %s failed; no function file was applied "
                                    "(rolled back)",
                                    sql_functions[i].name);
        }
    }

    char *names = function_names_array();
    if (!names)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    const char *forget_params[SQL_MIGRATE_FUNCTION_FORGET_NPARAMS] = {
        [SQL_MIGRATE_FUNCTION_FORGET_P_NAMES] = names};
    int rc = db_exec(conn, sql_q_migrate_function_forget, SQL_MIGRATE_FUNCTION_FORGET_NPARAMS,
                     forget_params, forgotten, err);
    free(names);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot update pgpace.schema_function");

    const char *digest_params[SQL_MIGRATE_FUNCTION_DIGEST_NPARAMS] = {
        [SQL_MIGRATE_FUNCTION_DIGEST_P_DIGEST] = migrate_functions_digest()};
    rc = db_exec(conn, sql_q_migrate_function_digest, SQL_MIGRATE_FUNCTION_DIGEST_NPARAMS,
                 digest_params, NULL, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot update pgpace.schema_function_digest");
    return 0;
}

/* Re-applies the function files that changed, in one transaction. After a migration every file
 * is applied, in that migration's transaction (in_tx: it is still open), so the database is
 * never at a new version without its functions: a migration may have dropped a view or function
 * to change what it depends on. Progress lines are written once the transaction committed. */
static int apply_functions(PGconn *conn, bool in_tx, migrate_result *result, FILE *progress,
                           pgp_error *err)
{
    function_plan plan = {0};
    PGresult *forgotten = NULL;
    int rc = plan_functions(conn, in_tx, &plan, err);
    if (rc == 0 && (plan.n_todo > 0 || plan.forget || plan.digest)) {
        if (!in_tx)
            rc = db_exec_simple(conn, "BEGIN", err);
        if (rc == 0)
            rc = apply_functions_tx(conn, &plan, &forgotten, err);
    }
    if (rc == 0 && (in_tx || plan.n_todo > 0 || plan.forget || plan.digest))
        rc = db_exec_simple(conn, "COMMIT", err);
    if (rc != 0)
        db_rollback(conn);
    if (rc == 0) {
        result->functions = plan.n_todo;
        for (size_t i = 0; progress && i < sql_functions_count; i++) {
            if (plan.todo[i])
                fprintf(progress, "applied function file %s\n", sql_functions[i].name);
        }
        for (int r = 0; progress && forgotten && r < PQntuples(forgotten); r++) {
            fprintf(progress, "forgot function file %s (not in this binary)\n",
                    PQgetvalue(forgotten, r, SQL_MIGRATE_FUNCTION_FORGET_C_NAME));
        }
    }
    PQclear(forgotten);
    plan_free(&plan);
    return rc;
}

int migrate_run(PGconn *conn, migrate_result *result, FILE *progress, pgp_error *err)
{
    *result = (migrate_result){0};
    char lock_class[16], lock_key[16];
    snprintf(lock_class, sizeof lock_class, "%d", DB_LOCK_CLASS);
    snprintf(lock_key, sizeof lock_key, "%d", DB_LOCK_MIGRATE);
    const char *lock_params[SQL_LOCK_MIGRATE_NPARAMS] = {
        [SQL_LOCK_MIGRATE_P_LOCK_CLASS] = lock_class, [SQL_LOCK_MIGRATE_P_LOCK_KEY] = lock_key};
    _Static_assert((int)SQL_LOCK_MIGRATE_NPARAMS == (int)SQL_UNLOCK_MIGRATE_NPARAMS,
                   "same parameters");

    int rc = db_exec(conn, sql_q_lock_migrate, SQL_LOCK_MIGRATE_NPARAMS, lock_params, NULL, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot take the migration lock");

    rc = db_exec_simple(conn, sql_q_migrate_bootstrap, err);
    if (rc != 0)
        pgp_error_prefix(err, rc, "cannot create the pgpace schema");
    int done = rc == 0 ? check_applied(conn, result, progress, err) : rc;
    rc = done < 0 ? done : 0;
    /* The last pending migration's transaction stays open for the function files. */
    int last = (int)sql_migrations_count - 1;
    for (int i = done; rc == 0 && i <= last; i++) {
        rc = apply_one(conn, &sql_migrations[i], i == last, err);
        if (rc == 0) {
            result->migrations++;
            if (progress && i < last)
                fprintf(progress, "applied %s\n", sql_migrations[i].name);
        }
    }
    if (rc == 0) {
        rc = apply_functions(conn, result->migrations > 0, result, progress, err);
        if (rc != 0 && result->migrations > 0)
            pgp_error_prefix(err, rc, "migration %s was rolled back with them",
                             sql_migrations[last].name);
        else if (rc == 0 && result->migrations > 0 && progress)
            fprintf(progress, "applied %s\n", sql_migrations[last].name);
        if (rc != 0 && result->migrations > 0)
            result->migrations--;
    }

    pgp_error unlock_err;
    if (db_exec(conn, sql_q_unlock_migrate, SQL_UNLOCK_MIGRATE_NPARAMS, lock_params, NULL,
                &unlock_err) != 0 &&
        rc == 0)
        rc = pgp_error_set(err, -EIO, "cannot release the migration lock: %s", unlock_err.msg);
    return rc;
}
