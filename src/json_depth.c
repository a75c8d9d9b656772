/* json_depth.c - the nesting of a JSON text without parsing it (contract: json_depth.h). */
#include "json_depth.h"

#include <string.h>

size_t json_depth(const char *text, size_t len, size_t stop_at)
{
    size_t depth = 0, max = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        switch (*p++) {
        case '"': {
            /* Skip the string. memchr finds the next quote q and the first backslash before
             * it; a backslash skips the byte after it, and only when that was q itself (an
             * escaped quote) is the next quote looked for. Each byte is read at most twice. */
            const char *q = memchr(p, '"', (size_t)(end - p));
            for (;;) {
                if (!q)
                    return max; /* unterminated: nothing after it opens a level */
                const char *bs = memchr(p, '\\', (size_t)(q - p));
                if (!bs) {
                    p = q + 1;
                    break;
                }
                p = bs + 2;
                if (p > q) {
                    if (p >= end)
                        return max;
                    q = memchr(p, '"', (size_t)(end - p));
                }
            }
            break;
        }
        case '[':
        case '{':
            if (++depth > max) {
                max = depth;
                if (stop_at && max >= stop_at)
                    return stop_at;
            }
            break;
        case ']':
        case '}':
            if (depth > 0)
                depth--;
            break;
        default:
            break;
        }
    }
    return max;
}
