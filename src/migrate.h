/* migrate.h - applies the embedded sql/migrations in order, each in its own transaction, then
 * re-applies the embedded sql/functions that changed, in the last migration's transaction.
 *
 * Contract: migrate_run() takes a session advisory lock so concurrent runs serialise, creates
 * the bookkeeping tables if needed, verifies the SHA-256 of every applied migration against the
 * embedded text (a mismatch is an error and nothing is applied; a former checksum of a migration
 * whose comments were revised is accepted and its record updated), then applies the missing
 * migrations in order, recording each in pgpace.schema_migration in the same transaction.
 * Then it re-applies every function file whose checksum differs from its row in
 * pgpace.schema_function (or has none; every file after a migration was applied), forgets rows
 * of files this binary does not have, and stores migrate_functions_digest() in
 * pgpace.schema_function_digest: in the last migration's transaction when one was applied (so
 * no version is ever committed without its functions), else in a transaction of its own. A
 * failing file rolls all of that back. Running it again is a no-op.
 */
#ifndef PGPACE_MIGRATE_H
#define PGPACE_MIGRATE_H

#include "common.h"

#include <libpq-fe.h>
#include <stdio.h>

/* The schema version this binary expects (its highest migration). */
int migrate_latest_version(void);

/* SHA-256 (64 hex digits) over this binary's function files, in order: of the lines
 * "<sha256 of the file>  <NN_name>.sql\n", i.e. what `sha256sum` prints for them, run in
 * sql/functions. The database holds the digest of the binary that last ran `pgpace migrate`
 * (second column of sql/queries/schema_version.sql); equal digests mean equal functions. */
const char *migrate_functions_digest(void);

/* What one migrate_run() did. */
typedef struct migrate_result {
    int migrations; /* migrations applied */
    int functions;  /* function files (re-)applied */
    int revised;    /* migration records moved from a former checksum (comments revised) */
} migrate_result;

/* Applies pending migrations and changed function files. Progress lines go to `progress` (may
 * be NULL). */
int migrate_run(PGconn *conn, migrate_result *result, FILE *progress,
                pgp_error *err) PGP_MUST_CHECK;

/* Reads the database's schema version (0 when never migrated). */
int migrate_db_version(PGconn *conn, int *version, pgp_error *err) PGP_MUST_CHECK;

/* Reads the schema version and the digest of the function files last applied ("" when none was
 * recorded). */
int migrate_db_state(PGconn *conn, int *version, char digest[65], pgp_error *err) PGP_MUST_CHECK;

#endif
