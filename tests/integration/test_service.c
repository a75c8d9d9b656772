/* test_service.c - running pgpace as a service: systemd notifications, SIGHUP reload with a
 * bad and a good file, refusing an old schema. */
#include "fixture.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int setup(void **state)
{
    *state = fx_start();
    return 0;
}

static int teardown(void **state)
{
    fx_finish(*state);
    return 0;
}

/* Receives one datagram within timeout_ms into buf; returns its length or -1. */
static ssize_t recv_within(int fd, char *buf, size_t len, int timeout_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1)
        return -1;
    ssize_t n = recv(fd, buf, len - 1, 0);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}

static void systemd_ready_and_stopping(void **state)
{
    fx *f = *state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/pgpace-notify-%d", (int)getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);

    char env[96];
    snprintf(env, sizeof env, "NOTIFY_SOCKET=%s", path);
    fx_run_env(f, NULL, TL_ARGV(env));
    char buf[256];
    assert_true(recv_within(fd, buf, sizeof buf, 10000) > 0);
    tl_assert_contains(buf, "READY=1");
    /* Ready means the schema was checked and the database answers. */
    assert_true(fx_wait_log(f, "event=customers_loaded", 5000));

    tl_service_signal(&f->svc, SIGTERM, 0, 0);
    assert_true(recv_within(fd, buf, sizeof buf, 10000) > 0);
    tl_assert_contains(buf, "STOPPING=1");
    fx_stop_service(f, 15000);
    close(fd);
    unlink(path);
}

static void sighup_keeps_a_bad_config_and_applies_a_good_one(void **state)
{
    fx *f = *state;
    fx_customer(f, "acme", TL_ARGV("--rate", "6000"));
    fx_run(f, "log.level = info\n");
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 1, 10000), 1);

    /* A bad file: refused with file, line and key; the service keeps running as it was. */
    FILE *out = fopen(f->config_path, "a");
    assert_non_null(out);
    fputs("[delivery]\nretry_base_milliseconds = 5\n", out);
    fclose(out);
    tl_service_signal(&f->svc, SIGHUP, 0, 0);
    assert_true(fx_wait_log(f, "event=config_reload_failed", 5000));
    char *log = fx_log(f);
    tl_assert_contains(log, f->config_path);
    tl_assert_contains(log, "retry_base_milliseconds");
    tl_assert_contains(log, "keeping the running configuration");
    free(log);
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(receiver_wait(f->recv, "/c/acme", 2, 10000), 2);

    /* A good file that takes loopback off the allow-list: applied at once, so the next item
     * is refused (SSRF) instead of delivered. */
    fx_write_config(f, "log.level = info\ndelivery.allow_cidrs =\n");
    tl_service_signal(&f->svc, SIGHUP, 0, 0);
    assert_true(fx_wait_log(f, "event=config_reloaded", 5000));
    fx_enqueue(f, "acme", NULL, 1);
    assert_int_equal(
        tl_wait_query_at_least(f->db->conn, 1, 10000, "SELECT count(*) FROM pgpace.dead_letter"),
        1);
    assert_int_equal(receiver_count(f->recv, "/c/acme"), 2);
    char *err = tl_query_str(f->db->conn, "SELECT last_error FROM pgpace.dead_letter");
    tl_assert_contains(err, "loopback");
    free(err);
    fx_stop_service(f, 15000);
}

static void old_schema_refuses_to_start(void **state)
{
    fx *f = *state;
    tl_exec(f->db->conn, "DELETE FROM pgpace.schema_migration WHERE version = "
                         "(SELECT max(version) FROM pgpace.schema_migration)");
    fx_run(f, NULL);
    int status = tl_service_signal(&f->svc, 0, 0, 0); /* signal 0: just a probe */
    (void)status;
    assert_true(fx_wait_log(f, "event=schema_too_old", 10000));
    /* It exits by itself with status 1 and says what to run. */
    int deadline_status = -1;
    for (int i = 0; i < 500 && deadline_status < 0; i++)
        deadline_status = tl_service_signal(&f->svc, 0, 1, 20);
    assert_int_equal(deadline_status, 1);
    f->running = false;
    char *log = fx_log(f);
    tl_assert_contains(log, "pgpace migrate");
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(systemd_ready_and_stopping, setup, teardown),
        cmocka_unit_test_setup_teardown(sighup_keeps_a_bad_config_and_applies_a_good_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(old_schema_refuses_to_start, setup, teardown),
    };
    return TL_RUN(tests, NULL, NULL);
}
