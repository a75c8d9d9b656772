/* status_internal.h - what the status answer's two halves share (status.c writes the answer,
 * status_choose.c judges each customer's state and chooses the page): the request, its page
 * entries, the customers without a receiver of their own as the gauge pass read them. Private to
 * src/dispatch/status*.c. */
#ifndef PGPACE_DISPATCH_STATUS_INTERNAL_H
#define PGPACE_DISPATCH_STATUS_INTERNAL_H

#include "internal.h"

#include "status_query.h"

/* Status requests waiting for the database at once; more get 503. */
#define STATUS_MAX_PENDING 8
/* Carriers listed (the busiest first); carriers_total says how many there are. */
#define STATUS_MAX_CARRIERS 200
/* How often the page polls. */
#define STATUS_POLL_MS 2000
/* Endpoints listed per customer (its own receiver first, then by name); endpoints_total says how
 * many it has. */
#define STATUS_MAX_ENDPOINTS 200
/* Endpoints listed over a page's customers (the customers after them list fewer, or none). */
#define STATUS_MAX_PAGE_ENDPOINTS 2000

/* A customer without a receiver of its own (0018), as the queue-gauge pass last read it. */
typedef struct status_tenant {
    int64_t id;
    char *name;
    double rate;     /* its limit over all of its endpoints; 0: none */
    char mode[12];   /* spaced, batch, unlimited */
    int64_t dead;    /* dead letters on its own row: what deleted endpoints left */
    int64_t seen_us; /* the start of the pass that read it last */
} status_tenant;

/* One entry of the page: a customer alone, or a customer with endpoints (`group`). A group
 * keeps what the answer needs of it past choose_page: its endpoints' ids (its own receiver
 * first), its name and limit. */
typedef struct page_entry {
    int64_t id; /* the customer's row id (a customer alone's is its receiver's) */
    bool group;
    char name[136];
    double rate;      /* group: its limit over its endpoints; 0: none */
    char mode[12];    /* group: its own row's mode, "" when not known */
    int64_t dead;     /* group without a receiver: the dead letters on its own row */
    int64_t *members; /* group: all its endpoints' row ids, its own receiver first, by name */
    size_t n_members;
    size_t n_listed; /* of them listed in the answer (the first ones) */
} page_entry;

typedef struct status_req {
    dispatcher *d;
    admin_http_reply *reply;
    status_query q;
    page_entry *page; /* the page's entries, in order */
    size_t n_page;
    int64_t *ids; /* every row id the page shows (a standby asks for them), in order */
    size_t n_ids;
    size_t total, matched, endpoints;
    int paused, disabled, held, breaker_open, throttled, failing;
    PGresult *instances; /* kept results; NULL when not (yet) there or failed */
    PGresult *customers;
    int outstanding; /* statements whose results have not come back */
    bool db_failed;  /* a statement could not be sent or failed */
} status_req;

const char *held_reason(const customer *c);
double effective_rate(const customer *c);
bool is_throttled(const customer *c, int64_t now);
bool is_failing(const customer *c);
unsigned problems(const customer *c, int64_t now, bool live);
activity_window observed_window(const dispatcher *d, const customer *c, int64_t mono);
int choose_page(dispatcher *d, status_req *r);

#endif
