/* strbuf.c - growable string buffer. */
#include "strbuf.h"

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
