/* strbuf.c - growable string buffer. */
#include "strbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(strbuf *sb, size_t extra)
{
    if (sb->failed)
        return false;
    if (sb->len + extra + 1 <= sb->cap)
        return true;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *data = realloc(sb->data, cap);
    if (!data) {
        sb->failed = true;
        return false;
    }
    sb->data = data;
    sb->cap = cap;
    return true;
}

void strbuf_reset(strbuf *sb)
{
    sb->len = 0;
    sb->failed = false;
    if (sb->data)
        sb->data[0] = '\0';
}

void strbuf_free(strbuf *sb)
{
    free(sb->data);
    *sb = (strbuf){0};
}

void strbuf_append(strbuf *sb, const char *s, size_t n)
{
    if (!reserve(sb, n))
        return;
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

void strbuf_puts(strbuf *sb, const char *s)
{
    strbuf_append(sb, s, strlen(s));
}

void strbuf_printf(strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(sb, (size_t)n)) {
        sb->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

void strbuf_put_i64(strbuf *sb, int64_t v)
{
    char buf[24];
    size_t i = sizeof buf;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        buf[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        buf[--i] = '-';
    strbuf_append(sb, buf + i, sizeof buf - i);
}

void strbuf_put_fixed3(strbuf *sb, double v)
{
    double scaled = v * 1000.0;
    if (!(scaled > -9.2e18 && scaled < 9.2e18))
        scaled = 0; /* NaN, infinities, beyond int64 */
    int64_t milli = llround(scaled);
    uint64_t u = milli < 0 ? (uint64_t)0 - (uint64_t)milli : (uint64_t)milli;
    if (milli < 0)
        strbuf_append(sb, "-", 1);
    strbuf_put_i64(sb, (int64_t)(u / 1000));
    char frac[4] = {'.', (char)('0' + u / 100 % 10), (char)('0' + u / 10 % 10),
                    (char)('0' + u % 10)};
    strbuf_append(sb, frac, sizeof frac);
}

void strbuf_array_text(strbuf *sb, const char *s)
{
    strbuf_append(sb, "\"", 1);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            strbuf_append(sb, "\\", 1);
        strbuf_append(sb, s, 1);
    }
    strbuf_append(sb, "\"", 1);
}

const char *strbuf_str(strbuf *sb)
{
    if (sb->failed)
        return NULL;
    if (!sb->data) {
        if (!reserve(sb, 0))
            return NULL;
        sb->data[0] = '\0'; /* never written: the empty string */
    }
    return sb->data;
}

/* Appends s as the inside of a JSON string: quotes, backslashes and control characters
 * escaped, so a message with a newline stays one line. */
void strbuf_json_escape(strbuf *sb, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char esc[2] = {'\\', (char)ch};
            strbuf_append(sb, esc, 2);
        } else if (ch == '\n') {
            strbuf_puts(sb, "\\n");
        } else if (ch == '\r') {
            strbuf_puts(sb, "\\r");
        } else if (ch == '\t') {
            strbuf_puts(sb, "\\t");
        } else if (ch < 0x20 || ch == 0x7f) {
            strbuf_printf(sb, "\\u%04x", ch);
        } else {
            strbuf_append(sb, (const char *)&ch, 1);
        }
    }
}
