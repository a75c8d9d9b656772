/* db.h - blocking libpq helpers for the command-line tools (never used on the service loop).
 *
 * Contract: errors are translated here, where they enter: the pgp_error says where we tried
 * to connect (host, port, and where the settings came from) or carries the server's message,
 * detail and hint. Results handed out are owned by the caller (PQclear).
 */
#ifndef PGPACE_DB_H
#define PGPACE_DB_H

#include "common.h"

#include <libpq-fe.h>

/* Advisory lock keys (two-int form, class 'pgpa'): one per purpose. */
#define DB_LOCK_CLASS   0x70677061
#define DB_LOCK_MIGRATE 1
#define DB_LOCK_LEADER  2

/* Connects with `conninfo` ("" = libpq environment). `source` says where the settings came
 * from ("--db", "config file x.ini", "libpq environment") for the error message. */
int db_connect(const char *conninfo, const char *source, PGconn **out,
               pgp_error *err) PGP_MUST_CHECK;

/* Runs one parameterised statement. On success *out (if not NULL) holds the result. */
int db_exec(PGconn *conn, const char *sql, int nparams, const char *const *params, PGresult **out,
            pgp_error *err) PGP_MUST_CHECK;

/* Runs one statement without parameters (may be several statements: simple protocol). */
int db_exec_simple(PGconn *conn, const char *sql, pgp_error *err) PGP_MUST_CHECK;

/* Rolls back the current transaction, ignoring errors: used on paths that already failed,
 * where the first error is the one worth reporting. */
void db_rollback(PGconn *conn);

/* Formats the server's error (message, detail, hint) of a failed result into err. */
int db_result_error(const PGresult *res, PGconn *conn, pgp_error *err);

#endif
