/* fuzz_json_depth.c - json_depth() (src/json_depth.c), the nesting scan in front of HTTP
 * enqueue. Input: the text, raw bytes (NULs included).
 * Invariants, beyond "no crash, no read outside the input":
 *   - it equals a byte-at-a-time reading of its contract (the reference below);
 *   - with stop_at s it returns min(depth, s);
 *   - the depth of a prefix is never greater than the whole text's;
 *   - for any text jansson parses (JSON_DECODE_ANY, duplicate keys refused: a dropped value's
 *     nesting would be missing from the tree), it is exactly the depth of jansson's tree.
 */
#include "fuzz_util.h"

#include "json_depth.h"
#include "json_dupkey.h"

#include <jansson.h>
#include <stdbool.h>

static size_t reference_depth(const char *s, size_t len)
{
    size_t depth = 0, max = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max)
                max = depth;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return max;
}

/* The nesting of a parsed value (jansson caps its parser at 2048 levels, so this recursion is
 * bounded too). */
static size_t tree_depth(const json_t *v)
{
    size_t max = 0;
    if (json_is_array(v)) {
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e)
        {
            size_t d = tree_depth(e);
            if (d > max)
                max = d;
        }
        return max + 1;
    }
    if (json_is_object(v)) {
        const char *k;
        const json_t *e;
        json_object_foreach((json_t *)v, k, e)
        {
            size_t d = tree_depth(e);
            if (d > max)
                max = d;
        }
        return max + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exactly-sized copy, so that ASan sees any read past the end. */
    char *text = malloc(size ? size : 1);
    if (!text)
        abort();
    if (size)
        memcpy(text, data, size);
    size_t depth = json_depth(text, size, 0);
    size_t want = reference_depth(text, size);
    FUZZ_CHECK(depth == want, "depth %zu, the reference says %zu: %s", depth, want,
               fuzz_show(fuzz_strndup(data, size)));
    for (size_t stop = 1; stop <= 4; stop++)
        FUZZ_CHECK(json_depth(text, size, stop) == (depth < stop ? depth : stop),
                   "stop_at %zu gave %zu for depth %zu", stop, json_depth(text, size, stop), depth);
    size_t cut = size / 2;
    FUZZ_CHECK(json_depth(text, cut, 0) <= depth, "the first %zu bytes nest deeper (%zu) than all",
               cut, json_depth(text, cut, 0));
    json_error_t err;
    json_t *v =
        json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &err);
    if (v) {
        size_t tree = tree_depth(v);
        FUZZ_CHECK(depth == tree, "depth %zu, jansson's tree %zu", depth, tree);
        json_decref(v);
    }
    /* json_dupkey (json_dupkey.h) on the same text: for what jansson reads as JSON, a repeated
     * member exactly when jansson's JSON_REJECT_DUPLICATES refuses it; the name it gives fits. */
    char where[48];
    int dk = json_dupkey(text, size, where, sizeof where);
    FUZZ_CHECK(dk >= -1 && dk <= 1 && strlen(where) < sizeof where, "json_dupkey %d", dk);
    json_t *any = json_loadb(text, size, JSON_DECODE_ANY, &err);
    if (any && !memchr(text, '\0', size)) {
        json_t *strict = json_loadb(text, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
        FUZZ_CHECK(dk == (strict ? 0 : 1), "json_dupkey %d, jansson %s: %s", dk,
                   strict ? "reads it" : "refuses a duplicate",
                   fuzz_show(fuzz_strndup(data, size)));
        json_decref(strict);
    }
    json_decref(any);
    free(text);
    return 0;
}
