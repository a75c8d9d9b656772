/* fixture.h - a running pgpace dispatcher for integration tests: fresh database, loopback
 * receiver, config file, customers, items, and the service's log.
 *
 * fx_start() makes all of it; fx_run() starts `pgpace run` with the config plus extra INI
 * lines; fx_finish() stops the service (asserting a clean SIGTERM exit when it still runs),
 * the receiver and the database.
 */
#ifndef PGPACE_FIXTURE_H
#define PGPACE_FIXTURE_H

#include "receiver.h"
#include "testlib.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct fx {
    tl_db *db;
    receiver *recv;
    char config_path[64];
    tl_service svc;
    bool running;
} fx;

/* Fresh migrated database and receiver. */
fx *fx_start(void);
/* cmocka setup and teardown: fx_start() into *state, fx_finish(*state). */
int fx_setup(void **state);
int fx_teardown(void **state);
/* Starts `pgpace run` with the test defaults (fixture.c) and `extra_ini`: lines of the form
 * "section.key = value" that override or add to them, e.g. "delivery.breaker_failures = 3\n". */
void fx_run(fx *f, const char *extra_ini);
/* The same with extra environment ("K=V" strings, NULL-terminated) for the service. */
void fx_run_env(fx *f, const char *extra_ini, const char *const *env);
/* Writes the config file the service was started with (for SIGHUP reload tests). */
void fx_write_config(fx *f, const char *extra_ini);
/* SIGTERM, asserts exit status 0 within timeout_ms. */
void fx_stop_service(fx *f, int timeout_ms);
void fx_finish(fx *f);

/* `pgpace customer set NAME --url <receiver>/c/NAME <args...>`; asserts success. */
void fx_customer(fx *f, const char *name, const char *const *args);
/* `pgpace endpoint add CUSTOMER NAME --url <receiver>/e/CUSTOMER/NAME <args...>` (args must
 * hold --rate) with the fixture's configuration, which allows the loopback receiver (the
 * command checks a literal address against the SSRF rules); asserts success. */
void fx_endpoint(fx *f, const char *customer, const char *name, const char *const *args);
/* Enqueues n items for a customer with payload {"n": i}; returns the first item id. */
long long fx_enqueue(fx *f, const char *customer, const char *carrier, int n);
/* The same for large n, in one statement (no carrier, nothing returned). */
void fx_enqueue_many(fx *f, const char *customer, int n);
/* CLOCK_REALTIME microseconds, the receiver's clock for arrival times. */
int64_t fx_now_us(void);
/* The service log so far (owned). */
char *fx_log(fx *f);
/* GET /metrics from the service's admin listener (its port from the log): the whole answer,
 * headers and body (owned). */
char *fx_metrics(fx *f);
/* The value of a series ("name{labels}") in a /metrics answer, or -1 when it is not there. */
double fx_metric(const char *text, const char *series);
/* Waits until the service's /metrics shows `series` at `want` (deadline in ms); returns whether
 * it did. */
int fx_wait_metric(fx *f, const char *series, double want, int timeout_ms);
/* Waits until the log contains `needle` (deadline in ms); returns whether it did. */
int fx_wait_log(fx *f, const char *needle, int timeout_ms);
/* The admin listener's port, from the service's log ("event=http_listening ... port=N"); fails
 * the test when it does not come within 10 s. */
int fx_admin_port(fx *f);

#endif
