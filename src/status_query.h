/* status_query.h - the query string of GET /v1/status: which page of customers, sorted how,
 * filtered by what.
 *
 * Contract:
 * - offset (default 0, at most 1,000,000,000), limit (1..STATUS_MAX_LIMIT, default
 *   STATUS_DEFAULT_LIMIT), sort (name, rate, effective, observed, in_flight, state, each
 *   optionally prefixed by '-' for descending; default name), filter (a case-insensitive
 *   substring of the customer name, at most STATUS_MAX_FILTER bytes once decoded, no control
 *   characters). Values are percent-decoded ('+' is a space). Other parameters are ignored (a
 *   cache-busting one, say); a repeated one must be valid each time, and the last counts.
 * - A bad value fails with an error that names the parameter: "limit: expected 1 to 500".
 */
#ifndef PGPACE_STATUS_QUERY_H
#define PGPACE_STATUS_QUERY_H

#include <stdbool.h>
#include <stddef.h>

#define STATUS_DEFAULT_LIMIT 50
#define STATUS_MAX_LIMIT     500
#define STATUS_MAX_FILTER    200

typedef enum status_sort {
    STATUS_SORT_NAME,
    STATUS_SORT_RATE,
    STATUS_SORT_EFFECTIVE,
    STATUS_SORT_OBSERVED,
    STATUS_SORT_IN_FLIGHT,
    STATUS_SORT_STATE,
} status_sort;

typedef struct status_query {
    long offset;
    int limit;
    status_sort sort;
    bool descending;
    char filter[STATUS_MAX_FILTER + 1];
} status_query;

/* Parses query (the part after '?', may be NULL or empty) into *out. 0, or -1 with err set. */
int status_query_parse(const char *query, status_query *out, char *err, size_t errlen);

/* The sort as given back in the answer: "name", "-rate", ... */
const char *status_sort_spelling(status_sort s, bool descending);

/* Whether name contains filter, ignoring ASCII case ("" matches every name). */
bool status_name_matches(const char *name, const char *filter);

#endif
