/* test_session_check.c - the session check's decision (session_check_verdict) on the probe
 * patterns PgBouncer produces (as measured: see session_check.h) and on those of a session of
 * its own. The probes themselves run against PgBouncer in dispatch_pgbouncer. */
#include "testlib.h"

#include "session_check.h"

#include <stdio.h>
#include <string.h>

static session_probe probe(long long pid, long long server_start, const char *nonce)
{
    session_probe p = {.seen = true, .pid = pid, .server_start = server_start};
    snprintf(p.nonce, sizeof p.nonce, "%s", nonce);
    return p;
}

/* A's session read again by every read, B elsewhere (or nowhere). */
static void own_session_is_not_pooled(void **state)
{
    session_probe a = probe(100, 7, "n1"), reads[SESSION_CHECK_READS];
    for (int i = 0; i < SESSION_CHECK_READS; i++)
        reads[i] = a;
    session_probe b = probe(101, 7, "");
    assert_null(session_check_verdict(&a, &b, reads, SESSION_CHECK_READS));
    /* A session pool without a reset query hands B a session another client once marked. */
    b = probe(101, 7, "n0");
    assert_null(session_check_verdict(&a, &b, reads, SESSION_CHECK_READS));
    /* B never answered (a full session pool): nothing seen either. */
    session_probe none = {0};
    assert_null(session_check_verdict(&a, &none, reads, SESSION_CHECK_READS));
    /* The same pid on another server (another host of the conninfo) is not A's session. */
    b = probe(100, 8, "");
    assert_null(session_check_verdict(&a, &b, reads, SESSION_CHECK_READS));
}

/* Most recently released server reused (PgBouncer's default): B lands in A's session. */
static void b_in_a_session_is_pooled(void **state)
{
    session_probe a = probe(100, 7, "n1"), reads[SESSION_CHECK_READS];
    for (int i = 0; i < SESSION_CHECK_READS; i++)
        reads[i] = a;
    session_probe b = probe(100, 7, "n1");
    const char *why = session_check_verdict(&a, &b, reads, SESSION_CHECK_READS);
    assert_non_null(why);
    tl_assert_contains(why, "second connection");
    /* server_reset_query_always: the nonce is gone, the pid still tells. */
    b = probe(100, 7, "");
    assert_non_null(session_check_verdict(&a, &b, reads, SESSION_CHECK_READS));
}

/* Round robin over two servers: B on the other one, the first read back on A's, the second
 * on the other again. */
static void a_read_elsewhere_is_pooled(void **state)
{
    session_probe a = probe(100, 7, "n1"), reads[SESSION_CHECK_READS];
    for (int i = 0; i < SESSION_CHECK_READS; i++)
        reads[i] = (i % 2) ? probe(101, 7, "") : a;
    session_probe b = probe(101, 7, "");
    const char *why = session_check_verdict(&a, &b, reads, SESSION_CHECK_READS);
    assert_non_null(why);
    tl_assert_contains(why, "different server sessions");
    /* Only the last read elsewhere (a busy pool) is enough. */
    for (int i = 0; i < SESSION_CHECK_READS; i++)
        reads[i] = a;
    reads[SESSION_CHECK_READS - 1] = probe(102, 7, "");
    assert_non_null(session_check_verdict(&a, &b, reads, SESSION_CHECK_READS));
    /* Same pid and server, nonce gone (reset between transactions). */
    reads[SESSION_CHECK_READS - 1] = probe(100, 7, "");
    why = session_check_verdict(&a, &b, reads, SESSION_CHECK_READS);
    assert_non_null(why);
    tl_assert_contains(why, "was gone");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(own_session_is_not_pooled),
        cmocka_unit_test(b_in_a_session_is_pooled),
        cmocka_unit_test(a_read_elsewhere_is_pooled),
    };
    return TL_RUN(tests, NULL, NULL);
}
