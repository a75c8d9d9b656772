/* conn_hosts.h - libpq's comma-separated host, hostaddr and port lists, rotated.
 *
 * Contract: pure string work; the only allocation is the returned copy (free() it).
 *
 * Why: libpq tries a multi-host conninfo's hosts in order, and its asynchronous connect
 * (PQconnectPoll) has no per-host deadline: the owner's deadline ends the whole attempt. A first
 * host that takes TCP connections but never answers (a hung server) would then end every attempt
 * before the second host is tried, and a failover to it would never happen. After an attempt
 * that timed out, the next one starts with the next host instead: the lists rotated by one more
 * place each time.
 */
#ifndef PGPACE_CONN_HOSTS_H
#define PGPACE_CONN_HOSTS_H

/* Entries of a comma-separated list: 0 for NULL or "", otherwise commas + 1. */
int conn_list_count(const char *list);

/* A copy of the list with its entries rotated left by `by` places (modulo their number; a
 * negative `by` counts as its remainder). NULL when list is NULL or allocation failed. */
char *conn_list_rotate(const char *list, int by);

#endif
