/* test_admin_api.c - how the admin listener hands an API request to the database: the path's
 * segments percent-decoded into a JSON array, the query string into an object of strings
 * (admin_api_path_json, admin_api_query_json in src/admin_api.c), and what they refuse. */
#include "admin_http_internal.h"

#include "testlib.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

static void expect_path(const char *path, int rc, const char *want)
{
    strbuf out = {0};
    int got = admin_api_path_json(path, strlen(path), &out);
    const char *text = strbuf_str(&out);
    if (got != rc || (rc == 0 && strcmp(text, want) != 0))
        fail_msg("path %s: got %d %s, want %d %s", path, got, text ? text : "", rc, want);
    strbuf_free(&out);
}

static void expect_query(const char *query, int rc, const char *want)
{
    strbuf out = {0};
    int got = admin_api_query_json(query, strlen(query), &out);
    const char *text = strbuf_str(&out);
    if (got != rc || (rc == 0 && strcmp(text, want) != 0))
        fail_msg("query %s: got %d %s, want %d %s", query, got, text ? text : "", rc, want);
    if (rc == 0) {
        /* What the database reads must be JSON. */
        json_error_t e;
        json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &e);
        if (!doc)
            fail_msg("query %s: not JSON: %s", query, e.text);
        json_decref(doc);
    }
    strbuf_free(&out);
}

static void path_segments_are_decoded(void **state)
{
    (void)state;
    expect_path("customers", 0, "[\"customers\"]");
    expect_path("customers/acme/endpoints/crm", 0,
                "[\"customers\",\"acme\",\"endpoints\",\"crm\"]");
    /* A host with an IPv6 literal and a port, escaped as a client would. */
    expect_path("hosts/%5B%3A%3A1%5D%3A8080", 0, "[\"hosts\",\"[::1]:8080\"]");
    /* '+' is a plus in a path; a quote and a backslash are escaped for JSON. */
    expect_path("customers/a+b%22%5C", 0, "[\"customers\",\"a+b\\\"\\\\\"]");
    /* UTF-8 passes through as it is. */
    expect_path("customers/%C3%A9", 0, "[\"customers\",\"\xc3\xa9\"]");
}

static void bad_paths_are_refused(void **state)
{
    (void)state;
    expect_path("customers/", -EINVAL, "");          /* an empty segment at the end */
    expect_path("customers//acme", -EINVAL, "");     /* and inside */
    expect_path("customers/%zz", -EINVAL, "");       /* not an escape */
    expect_path("customers/%4", -EINVAL, "");        /* cut short */
    expect_path("customers/a%00b", -EINVAL, "");     /* NUL */
    expect_path("customers/a%0Ab", -EINVAL, "");     /* a control character */
    expect_path("customers/%FF", -EINVAL, "");       /* not UTF-8 */
    expect_path("customers/%C0%AF", -EINVAL, "");    /* an overlong '/' */
    expect_path("customers/%ED%A0%80", -EINVAL, ""); /* a surrogate */
    expect_path("customers/\xff", -EINVAL, "");      /* raw, not escaped */
}

static void queries_become_objects(void **state)
{
    (void)state;
    expect_query("", 0, "{}");
    expect_query("limit=5", 0, "{\"limit\":\"5\"}");
    expect_query("customer=a+b&since=2026-01-01T00%3A00%3A00Z", 0,
                 "{\"customer\":\"a b\",\"since\":\"2026-01-01T00:00:00Z\"}");
    expect_query("flag", 0, "{\"flag\":\"\"}");               /* no '=': an empty value */
    expect_query("a=1&&b=2", 0, "{\"a\":\"1\",\"b\":\"2\"}"); /* an empty pair is skipped */
    expect_query("a=%3D%26", 0, "{\"a\":\"=&\"}");
    expect_query("a=1&a=2", -EEXIST, "");   /* given twice */
    expect_query("a=1&%61=2", -EEXIST, ""); /* the same decoded name */
    expect_query("=1", -EINVAL, "");        /* no name */
    expect_query("a=%G0", -EINVAL, "");
    expect_query("a=%01", -EINVAL, "");
    expect_query("c\xff\xffursor=abc", -EINVAL, ""); /* a name that is not UTF-8 */
    expect_query("a=%F4%90%80%80", -EINVAL, "");     /* past U+10FFFF */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(path_segments_are_decoded),
        cmocka_unit_test(bad_paths_are_refused),
        cmocka_unit_test(queries_become_objects),
    };
    return TL_RUN(tests, NULL, NULL);
}
