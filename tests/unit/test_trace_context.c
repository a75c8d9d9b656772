/* test_trace_context.c - the CLI's copy of the W3C Trace Context rules (src/trace_context.c):
 * accepted values, and the exact message for each refusal, which must match what
 * pgpace.trace_context_error says (tests/integration/dispatch/test_trace.c checks the SQL side
 * with the same words). */
#include "testlib.h"

#include "trace_context.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void accepted(void **state)
{
    (void)state;
    static const struct {
        const char *tp, *ts;
    } ok[] = {
        {NULL, NULL},
        {TP, NULL},
        {TP, "a=b"},
        {TP, "a=b , ,t@sys=x y,\tz=1"},
        {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever", NULL},
        {TP, "a=1,b=1,a@x=1,a@y=1"}, /* tenant@system keys differ by system */
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(ok); i++) {
        pgp_error err = {{0}};
        if (trace_context_check("tp", ok[i].tp, "ts", ok[i].ts, &err) != 0)
            fail_msg("case %zu refused: %s", i, err.msg);
    }
    /* 32 distinct members fill the limit exactly. */
    char ts[512] = "";
    for (int i = 0; i < 32; i++)
        snprintf(ts + strlen(ts), sizeof ts - strlen(ts), "%sk%d=v", i ? "," : "", i);
    pgp_error err = {{0}};
    assert_int_equal(trace_context_check("tp", TP, "ts", ts, &err), 0);
}

static void refused_with_the_sql_words(void **state)
{
    (void)state;
    char many[600] = "a=b";
    for (int i = 0; i < 32; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), ",k%d=v", i);
    char longer[700];
    snprintf(longer, sizeof longer, "a=b,%0600d", 0);
    static const char *const none = NULL;
    const struct {
        const char *tp, *ts, *msg;
    } bad[] = {
        {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", none,
         "tp: must be version-traceid-parentid-flags: 2, 32, 16 and 2 lowercase hex digits "
         "joined by \"-\" (W3C Trace Context)"},
        {"", none, "tp: must be version-traceid-parentid-flags"},
        {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", none,
         "tp: must not have version ff (invalid in W3C Trace Context)"},
        {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", none,
         "tp: must not have an all-zero trace-id"},
        {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", none,
         "tp: must not have an all-zero parent-id"},
        {TP "-00", none, "tp: must be exactly 55 characters for version 00, got 58"},
        {TP "\r\nx: 1", none, "tp: must be version-traceid-parentid-flags"},
        {none, "a=b", "ts: must come with a traceparent (tp)"},
        {TP, "", "ts: must not be empty (leave it out)"},
        {TP, longer, "ts: must be at most 512 characters, got 604"},
        {TP, many, "ts: must have at most 32 list-members, got 33"},
        {TP, "a=b,B=c",
         "ts: must be a list of key=value members separated by commas (W3C Trace "
         "Context): member 2 is not"},
        {TP, "a=b,c=d=e", "member 2 is not"},
        {TP, "a=b,,c=", "member 3 is not"},
        {TP, "a=b\r\nx: 1", "member 1 is not"},
        {TP, " a=b", "ts: must not start or end with a space or tab"},
        {TP, "a=1,b=2,t@sys=3, a=4",
         "ts: must list each key once (W3C Trace Context): member 4 repeats an earlier key"},
        {TP, ", ,", "ts: must have a list-member (leave it out)"},
    };
    for (size_t i = 0; i < PGP_ARRAY_LEN(bad); i++) {
        pgp_error err = {{0}};
        int rc = trace_context_check("tp", bad[i].tp, "ts", bad[i].ts, &err);
        if (rc != -EINVAL || !strstr(err.msg, bad[i].msg))
            fail_msg("case %zu: rc %d, message '%s', want '%s'", i, rc, err.msg, bad[i].msg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accepted),
        cmocka_unit_test(refused_with_the_sql_words),
    };
    return TL_RUN(tests, NULL, NULL);
}
