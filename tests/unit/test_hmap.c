/* test_hmap.c - the hash map against a naive model: short keys kept in the slot (customer ids)
 * and longer ones copied, replacement, deletion by backward shift (every remaining key still
 * found, nothing deleted found), iteration over exactly the entries, and a zero-length key. */
#include "testlib.h"

#include "hmap.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A value the map only borrows: any distinct pointer will do. */
static char values[64];

static void short_and_long_keys(void **state)
{
    hmap m;
    hmap_init(&m);
    int64_t id = 42;
    const char *name = "a-carrier-name-longer-than-eight-bytes";
    char buf[64];
    assert_null(hmap_get(&m, &id, sizeof id));
    assert_int_equal(hmap_put(&m, &id, sizeof id, &values[1]), 0);
    /* The long key is copied: changing the caller's buffer changes nothing. */
    snprintf(buf, sizeof buf, "%s", name);
    assert_int_equal(hmap_put(&m, buf, strlen(buf), &values[2]), 0);
    memset(buf, 'x', strlen(name));
    assert_ptr_equal(hmap_get(&m, &id, sizeof id), &values[1]);
    assert_ptr_equal(hmap_get(&m, name, strlen(name)), &values[2]);
    assert_null(hmap_get(&m, buf, strlen(name)));
    /* Same bytes, other length: another key. */
    assert_null(hmap_get(&m, &id, 4));
    /* The empty key is a key like any other. */
    assert_int_equal(hmap_put(&m, "", 0, &values[3]), 0);
    assert_ptr_equal(hmap_get(&m, "", 0), &values[3]);
    assert_int_equal(m.n, 3);
    /* Replacing keeps one entry. */
    assert_int_equal(hmap_put(&m, &id, sizeof id, &values[4]), 0);
    assert_ptr_equal(hmap_get(&m, &id, sizeof id), &values[4]);
    assert_int_equal(m.n, 3);
    assert_ptr_equal(hmap_del(&m, name, strlen(name)), &values[2]);
    assert_null(hmap_get(&m, name, strlen(name)));
    assert_null(hmap_del(&m, name, strlen(name)));
    assert_ptr_equal(hmap_del(&m, "", 0), &values[3]);
    assert_int_equal(m.n, 1);
    hmap_free(&m);
    hmap_free(&m); /* freeing twice is harmless */
}

/* Sequential ids (as customers have) and string keys, inserted, half deleted in a scattered
 * order, inserted again: the map always answers as a plain array would. */
static void agrees_with_a_model(void **state)
{
    enum { N = 20000 };
    hmap m;
    hmap_init(&m);
    static bool present[N];
    char key[32];
    for (int64_t i = 0; i < N; i++) {
        if (i % 2) {
            assert_int_equal(hmap_put(&m, &i, sizeof i, &values[i % 64]), 0);
        } else {
            int len = snprintf(key, sizeof key, "customer-%lld", (long long)i);
            assert_int_equal(hmap_put(&m, key, (size_t)len, &values[i % 64]), 0);
        }
        present[i] = true;
    }
    assert_int_equal(m.n, N);
    /* Delete every third in a scattered order (stride coprime with N). */
    size_t gone = 0;
    for (int64_t k = 0, i = 0; k < N; k++, i = (i + 7919) % N) {
        if (i % 3)
            continue;
        void *v;
        if (i % 2) {
            v = hmap_del(&m, &i, sizeof i);
        } else {
            int len = snprintf(key, sizeof key, "customer-%lld", (long long)i);
            v = hmap_del(&m, key, (size_t)len);
        }
        assert_ptr_equal(v, &values[i % 64]);
        present[i] = false;
        gone++;
    }
    assert_int_equal(m.n, N - gone);
    for (int64_t i = 0; i < N; i++) {
        void *v;
        if (i % 2) {
            v = hmap_get(&m, &i, sizeof i);
        } else {
            int len = snprintf(key, sizeof key, "customer-%lld", (long long)i);
            v = hmap_get(&m, key, (size_t)len);
        }
        if (present[i])
            assert_ptr_equal(v, &values[i % 64]);
        else
            assert_null(v);
    }
    /* Iteration visits exactly the entries. */
    size_t pos = 0, seen = 0;
    while (hmap_next(&m, &pos))
        seen++;
    assert_int_equal(seen, m.n);
    hmap_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(short_and_long_keys),
        cmocka_unit_test(agrees_with_a_model),
    };
    return TL_RUN(tests, NULL, NULL);
}
