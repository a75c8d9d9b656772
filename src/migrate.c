/* migrate.c - versioned, checksummed, lock-protected schema migrations. */
#include "migrate.h"

#include "db.h"
#include "sql_embed.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

int migrate_latest_version(void)
{
    return (int)sql_migrations_count;
}

static int sha256_hex(const char *text, char out[65])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(text, strlen(text), digest, &len, EVP_sha256(), NULL) != 1 || len != 32)
        return -EIO;
    for (unsigned i = 0; i < len; i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
    return 0;
}

int migrate_db_version(PGconn *conn, int *version, pgp_error *err)
{
    PGresult *res;
    int rc = db_exec(conn, sql_q_schema_version, 0, NULL, &res, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot read the schema version");
    *version = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    return 0;
}

/* Verifies applied migrations; returns the number applied so far or a negative error. */
static int check_applied(PGconn *conn, pgp_error *err)
{
    PGresult *res;
    int rc = db_exec(conn, sql_q_migrate_applied, 0, NULL, &res, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot read applied migrations");
    int n = PQntuples(res);
    rc = n;
    for (int i = 0; i < n; i++) {
        int version = atoi(PQgetvalue(res, i, 0));
        const char *name = PQgetvalue(res, i, 1);
        const char *checksum = PQgetvalue(res, i, 2);
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
        if (strcmp(expected, checksum) != 0) {
            rc = pgp_error_set(err, -EPROTO,
                               "migration %s was changed after it was applied: checksum in the "
                               "database %.12s..., in this binary %.12s...; applied migrations "
                               "must never be edited (add a new one instead)",
                               sql_migrations[i].name, checksum, expected);
            break;
        }
    }
    PQclear(res);
    return rc;
}

static int apply_one(PGconn *conn, const struct sql_migration *m, pgp_error *err)
{
    char checksum[65], version[16];
    if (sha256_hex(m->text, checksum) != 0)
        return pgp_error_set(err, -EIO, "cannot compute SHA-256");
    snprintf(version, sizeof version, "%d", m->version);
    const char *params[] = {version, m->name, checksum};

    int rc = db_exec_simple(conn, "BEGIN", err);
    if (rc == 0)
        rc = db_exec_simple(conn, m->text, err);
    if (rc == 0)
        rc = db_exec(conn, sql_q_migrate_record, 3, params, NULL, err);
    if (rc == 0)
        rc = db_exec_simple(conn, "COMMIT", err);
    if (rc != 0) {
        db_rollback(conn);
        return pgp_error_prefix(err, rc, "migration %s failed and was rolled back", m->name);
    }
    return 0;
}

int migrate_run(PGconn *conn, int *applied, FILE *progress, pgp_error *err)
{
    *applied = 0;
    char lock_class[16], lock_key[16];
    snprintf(lock_class, sizeof lock_class, "%d", DB_LOCK_CLASS);
    snprintf(lock_key, sizeof lock_key, "%d", DB_LOCK_MIGRATE);
    const char *lock_params[] = {lock_class, lock_key};

    int rc = db_exec(conn, sql_q_lock_migrate, 2, lock_params, NULL, err);
    if (rc != 0)
        return pgp_error_prefix(err, rc, "cannot take the migration lock");

    rc = db_exec_simple(conn, sql_q_migrate_bootstrap, err);
    if (rc != 0)
        pgp_error_prefix(err, rc, "cannot create the pgpace schema");
    int done = rc == 0 ? check_applied(conn, err) : rc;
    rc = done < 0 ? done : 0;
    for (int i = done; rc == 0 && i < (int)sql_migrations_count; i++) {
        rc = apply_one(conn, &sql_migrations[i], err);
        if (rc == 0) {
            (*applied)++;
            if (progress)
                fprintf(progress, "applied %s\n", sql_migrations[i].name);
        }
    }

    pgp_error unlock_err;
    if (db_exec(conn, sql_q_unlock_migrate, 2, lock_params, NULL, &unlock_err) != 0 && rc == 0)
        rc = pgp_error_set(err, -EIO, "cannot release the migration lock: %s", unlock_err.msg);
    return rc;
}
