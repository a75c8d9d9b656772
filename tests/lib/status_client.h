/* status_client.h - a client of the admin listener's status endpoints for integration tests:
 * HTTP GET over loopback (libcurl), the answer's JSON read field by field (jansson), and polling
 * GET /v1/status until a condition holds, with a deadline.
 *
 * The field readers fail the test (cmocka) with the object they were given when the field is
 * missing or of another type, so a test reads what the contract promises without checking
 * each type itself. Times are the endpoint's ISO 8601 UTC strings, read as epoch seconds.
 */
#ifndef PGPACE_STATUS_CLIENT_H
#define PGPACE_STATUS_CLIENT_H

#include "testlib.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* An HTTP answer: status (0 when none came), body and header lines (owned). */
typedef struct sc_answer {
    long status;
    char *body;
    char *head;
} sc_answer;

/* GET path from 127.0.0.1:port. authorization: an Authorization header value (NULL: none);
 * userpwd: "user:password" that libcurl sends as HTTP Basic (NULL: none). Fails the test when
 * no answer comes within 10 s. */
sc_answer sc_http_get(int port, const char *path, const char *authorization, const char *userpwd);
void sc_answer_free(sc_answer *a);
/* The value of header `name` in the answer ("" when absent), into buf. */
const char *sc_header(const sc_answer *a, const char *name, char *buf, size_t len);

/* Compact JSON text of j, for messages (owned; "(none)" for NULL). */
char *sc_dump(const json_t *j);
/* Field `key` of object o, of the type named; fail otherwise. */
json_t *sc_get(const json_t *o, const char *key);
double sc_num(const json_t *o, const char *key);
const char *sc_str(const json_t *o, const char *key);
bool sc_bool(const json_t *o, const char *key);
json_t *sc_arr(const json_t *o, const char *key);
/* Fails unless field `key` is there and null. */
void sc_null(const json_t *o, const char *key);
/* The element of array `key` of o whose string field `field` is `value`, or NULL. */
json_t *sc_find(const json_t *o, const char *key, const char *field, const char *value);
/* The listed customer `name` of a status answer; fails when it is not on the page. */
json_t *sc_customer(const json_t *j, const char *name);
/* Whether the answer comes from a live leader that lists `name` (polls start before that). */
bool sc_leading_with(const json_t *j, const char *name);
/* Whether customer c carries the leader's queue counts (counts_at set). */
bool sc_counted(const json_t *c);
/* The names of the listed customers in order, one per line (owned). */
char *sc_names(const json_t *j);

/* GET /v1/status?query ("" or NULL: none): must be 200 with a JSON object (owned). */
json_t *sc_status_get(int port, const char *query);

/* A condition on a status answer; it may also assert what every answer must hold. */
typedef bool (*sc_pred)(const json_t *j, void *arg);
/* Polls GET /v1/status?query until pred holds; returns that answer (owned), or fails with the
 * last one after timeout_ms, saying what was awaited. */
json_t *sc_wait_status(int port, const char *query, sc_pred pred, void *arg, int timeout_ms,
                       const char *what);

/* Epoch seconds of "2026-11-24T12:00:00.123Z" (the fraction optional); fails on another form. */
double sc_iso_seconds(const char *s);
/* The wall clock in epoch seconds (the dispatcher's and the database's clock). */
double sc_now_s(void);

#endif
