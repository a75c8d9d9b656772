/* migrate.h - applies the embedded sql/migrations in order, each in its own transaction.
 *
 * Contract: migrate_run() takes a session advisory lock so concurrent runs serialise, creates
 * the bookkeeping table if needed, verifies the SHA-256 of every applied migration against the
 * embedded text (a mismatch is an error and nothing is applied), then applies the missing ones
 * in order, recording each in pgpace.schema_migration in the same transaction. Running it
 * again is a no-op.
 */
#ifndef PGPACE_MIGRATE_H
#define PGPACE_MIGRATE_H

#include "common.h"

#include <libpq-fe.h>
#include <stdio.h>

/* The schema version this binary expects (its highest migration). */
int migrate_latest_version(void);

/* Applies pending migrations; *applied gets how many. Progress lines go to `progress` (may be
 * NULL). */
int migrate_run(PGconn *conn, int *applied, FILE *progress, pgp_error *err) PGP_MUST_CHECK;

/* Reads the database's schema version (0 when never migrated). */
int migrate_db_version(PGconn *conn, int *version, pgp_error *err) PGP_MUST_CHECK;

#endif
