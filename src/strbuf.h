/* strbuf.h - a growable NUL-terminated string, for building statement parameters such as
 * PostgreSQL array literals.
 *
 * Contract: on allocation failure the buffer remembers it (sb->failed) and later appends are
 * no-ops, so a caller checks once at the end. strbuf_free() releases the memory.
 */
#ifndef PGPACE_STRBUF_H
#define PGPACE_STRBUF_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct strbuf {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
} strbuf;

void strbuf_reset(strbuf *sb);
void strbuf_free(strbuf *sb);
void strbuf_append(strbuf *sb, const char *s, size_t n);
void strbuf_puts(strbuf *sb, const char *s);
void strbuf_printf(strbuf *sb, const char *fmt, ...) PGP_PRINTF(2, 3);
/* Appends v in decimal: what "%" PRId64 writes, without printf's cost (the arrays of a claim or
 * finalisation statement hold thousands of numbers). */
void strbuf_put_i64(strbuf *sb, int64_t v);
/* Appends v with three decimals, as "%.3f" but for halves, which round away from zero (|v| below
 * 9.2e15; NaN and infinities as 0.000). */
void strbuf_put_fixed3(strbuf *sb, double v);
/* Appends s as a double-quoted PostgreSQL array element (backslash-escaping " and \). */
void strbuf_array_text(strbuf *sb, const char *s);
/* The string ("" when empty); NULL when an allocation failed. */
const char *strbuf_str(strbuf *sb);

/* Appends s[0..n) as the inside of a JSON string: quotes, backslashes and control characters
 * escaped, so a message with a newline stays one line. Other bytes are copied as they are. */
void strbuf_json_escape(strbuf *sb, const char *s, size_t n);

#endif
