/* twosvc.h - up to two `pgpace run` instances on one fresh database and a loopback receiver,
 * for the dispatcher's fault and restart tests: setup/teardown, starting an instance with test
 * settings, counting log events, and CHECK, which prints the instances' logs on failure.
 */
#ifndef PGPACE_TWOSVC_H
#define PGPACE_TWOSVC_H

#include "receiver.h"
#include "testlib.h"

#include <stdbool.h>

typedef struct fx {
    tl_db *db;
    receiver *rx;
    tl_service svc[2];
    char *cfg[2];
} fx;

int svc_setup(void **state);
int svc_teardown(void **state);

/* Prints the tail of every running instance's log to stderr (TAP reads stdout only). */
void dump_logs(void);

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            dump_logs();                                                                           \
            fail_msg(__VA_ARGS__);                                                                 \
        }                                                                                          \
    } while (0)

typedef struct run_opts {
    const char *instance;
    int lease_seconds;
    int drain_timeout_ms;
    int request_timeout_ms;
    int max_in_flight;        /* 0: the default */
    int claim_batch_max;      /* 0: the default */
    int statement_timeout_ms; /* 0: the default */
} run_opts;

/* Starts instance `slot` (0 or 1) with the test configuration and these options. */
void start_service(fx *f, int slot, const run_opts *o);
/* Number of log lines with event=NAME exactly. */
int count_event(const char *log, const char *name);
int service_events(const tl_service *s, const char *name);

/* Receiver and database helpers shared by the fault and restart tests. */
#define QUEUE_EMPTY "SELECT count(*) FROM pgpace.queue"
typedef struct req_list {
    receiver_request *v;
    size_t n;
} req_list;
size_t rx_count(fx *f, const char *customer);
size_t rx_wait(fx *f, const char *customer, size_t n, int timeout_ms);
req_list requests_of(fx *f, const char *customer);
size_t distinct_ids(fx *f, const char *customer, size_t *total);
bool wait_query_eq(fx *f, const char *sql, long long want, int timeout_ms);

/* Whether the instance's process is still running (reaps only it). */
bool alive(const tl_service *s);
/* `pgpace customer set NAME --rate RATE --url <receiver>/c/NAME EXTRA...`; CHECKs success. */
void customer_set(fx *f, const char *name, const char *rate, const char *const *extra);

#endif
