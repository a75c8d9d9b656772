/* common.c - error message helpers. */
#include "common.h"

#include <stdio.h>
#include <string.h>

int pgp_error_set(pgp_error *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int pgp_error_prefix(pgp_error *e, int code, const char *fmt, ...)
{
    if (!e)
        return code;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Shift the old message right in place; truncate its tail if both do not fit. */
    size_t plen = strlen(prefix);
    size_t olen = strlen(e->msg);
    if (plen + 2 + olen >= sizeof e->msg)
        olen = sizeof e->msg - plen - 3;
    memmove(e->msg + plen + 2, e->msg, olen);
    memcpy(e->msg, prefix, plen);
    memcpy(e->msg + plen, ": ", 2);
    e->msg[plen + 2 + olen] = '\0';
    return code;
}
