/* json_depth.h - how deeply a JSON text nests arrays and objects, found in one pass over its
 * bytes without parsing it. It keeps an over-deep HTTP body away from PostgreSQL, whose JSON
 * parser recurses once per level and fails with "stack depth limit exceeded" (SQLSTATE 54001)
 * near 13,000 levels at the default max_stack_depth of 2 MB.
 *
 * Contract:
 * - json_depth() reads text[0..len) once, left to right, with no recursion and no allocation;
 *   NUL and any other bytes are ordinary bytes. Outside a string, '[' or '{' opens a level and
 *   ']' or '}' closes one (never below zero); a string runs from a '"' to the next '"' that a
 *   '\' does not escape (a '\' escapes the one byte after it).
 * - It returns the greatest number of levels open at once. For valid JSON that is exactly its
 *   nesting: 0 for a scalar, 1 for [] and {"a":1}, 2 for {"a":[1]}.
 * - For any other text it is never less than the nesting a left-to-right parser reaches before
 *   it finds the error (the parser can only have opened levels that this count opened), so a
 *   text within a limit cannot take such a parser deeper than the limit.
 * - It stops reading once stop_at levels are open and returns stop_at (0: no stop).
 */
#ifndef PGPACE_JSON_DEPTH_H
#define PGPACE_JSON_DEPTH_H

#include <stddef.h>

size_t json_depth(const char *text, size_t len, size_t stop_at);

#endif
