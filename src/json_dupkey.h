/* json_dupkey.h - whether a JSON text names a member twice in one object, and which, found
 * before anything reads the text as data. PostgreSQL's jsonb (and many parsers) keep the last
 * of two members with one name, others the first, so a gateway that checks {"customer":"a",
 * "customer":"b"} and pgpace would disagree about the tenant: every JSON body pgpace accepts
 * is refused when it has one (HTTP enqueue, bulk lines, the CLI's JSON arguments).
 *
 * Contract:
 * - json_dupkey() reads text[0..len) once, left to right, with no recursion; what it allocates
 *   is freed before it returns. Member names are compared as decoded strings ("a" and "\u0061"
 *   are one name), byte for byte, within each object; the same name in two objects is fine.
 * - It returns 1 when some object repeats a name: `where` gets the repeated name's path, the
 *   object's path then the name ("customer", "payload.items[2].id"; names with '.', '[' or
 *   control characters are written as JSON strings: payload["a.b"]), cut to fit `cap` bytes
 *   (NUL included). It returns 0 when no object does, and -1 for text that is not one JSON
 *   value (left to the parser that reads it next to name the error) or when out of memory
 *   (-2), with `where` empty.
 * - The first repeat in reading order is the one named.
 */
#ifndef PGPACE_JSON_DUPKEY_H
#define PGPACE_JSON_DUPKEY_H

#include <stddef.h>

int json_dupkey(const char *text, size_t len, char *where, size_t cap);

#endif
