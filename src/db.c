/* db.c - blocking libpq helpers with precise error messages. */
#include "db.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* libpq messages end in a newline and may span lines; keep them on one line for logs. */
static void one_line(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
    for (char *p = s; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

int db_connect(const char *conninfo, const char *source, PGconn **out, pgp_error *err)
{
    *out = NULL;
    /* Validate the conninfo syntax first: PQconnectdb would report it less clearly. */
    char *parse_err = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &parse_err);
    if (!opts) {
        pgp_error_set(err, -EINVAL, "invalid connection string (from %s): %s", source,
                      parse_err ? parse_err : "out of memory");
        one_line(err->msg);
        PQfreemem(parse_err);
        return -EINVAL;
    }
    PQconninfoFree(opts);

    PGconn *conn = PQconnectdb(conninfo);
    if (!conn)
        return pgp_error_set(err, -ENOMEM, "cannot allocate a database connection");
    if (PQstatus(conn) != CONNECTION_OK) {
        const char *host = PQhost(conn);
        const char *port = PQport(conn);
        const char *db = PQdb(conn);
        pgp_error_set(err, -ECONNREFUSED,
                      "cannot connect to the database at host=%s port=%s dbname=%s "
                      "(settings from %s): %s",
                      host && *host ? host : "(default)", port && *port ? port : "(default)",
                      db && *db ? db : "(default)", source, PQerrorMessage(conn));
        one_line(err->msg);
        PQfinish(conn);
        return -ECONNREFUSED;
    }
    /* Quiet NOTICEs from IF NOT EXISTS and friends: the tools report outcomes themselves. */
    PQclear(PQexec(conn, "SET client_min_messages = warning"));
    *out = conn;
    return 0;
}

int db_result_error(const PGresult *res, PGconn *conn, pgp_error *err)
{
    if (!res)
        return pgp_error_set(err, -EIO, "%s", PQerrorMessage(conn));
    const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
    const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
    if (!primary)
        primary = PQresultErrorMessage(res);
    if (!primary || !*primary)
        primary = PQerrorMessage(conn);
    /* A constraint's "Failing row contains (...)" quotes the whole row: for pgpace.customer
     * its signing secrets and receiver credentials. The constraint's name says enough. */
    if (detail && strncmp(detail, "Failing row contains", 20) == 0)
        detail = NULL;
    pgp_error_set(err, -EIO, "%s%s%s%s%s", primary, detail ? " (" : "", detail ? detail : "",
                  detail ? ")" : "", "");
    if (hint && err) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n, "; hint: %s", hint);
    }
    if (err)
        one_line(err->msg);
    return -EIO;
}

int db_exec(PGconn *conn, const char *sql, int nparams, const char *const *params, PGresult **out,
            pgp_error *err)
{
    if (out)
        *out = NULL;
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        int rc = db_result_error(res, conn, err);
        PQclear(res);
        return rc;
    }
    if (out)
        *out = res;
    else
        PQclear(res);
    return 0;
}

int db_exec_simple(PGconn *conn, const char *sql, pgp_error *err)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        int rc = db_result_error(res, conn, err);
        PQclear(res);
        return rc;
    }
    PQclear(res);
    return 0;
}

void db_rollback(PGconn *conn)
{
    PQclear(PQexec(conn, "ROLLBACK"));
}
