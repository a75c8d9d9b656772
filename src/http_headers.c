/* http_headers.c - a customer's extra header lines (http_headers in http_sender.h): one
 * allocation holding the curl list nodes and the lines they point to, built once per customer
 * load and referenced by each request that carries it, so a delivery allocates nothing for
 * them and a reload cannot free them under curl. The lines are checked again with the rules
 * pgpace.customer_set_headers applied (validate.h).
 */
#include "http_sender_internal.h"
#include "validate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int http_headers_new(const char *lines, http_headers **out)
{
    *out = NULL;
    if (!lines || !*lines)
        return 0;
    size_t n = 1, len = strlen(lines);
    for (const char *p = lines; *p; p++)
        if (*p == '\n')
            n++;
    if (n > HTTP_HEADERS_MAX)
        return -EINVAL;
    http_headers *h = malloc(sizeof *h + n * sizeof h->nodes[0] + len + 1);
    if (!h)
        return -ENOMEM;
    h->refs = 1;
    h->n = n;
    char *text = (char *)(h->nodes + n);
    memcpy(text, lines, len + 1);
    char *line = text;
    for (size_t i = 0; i < n; i++) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        /* The rules pgpace.customer_set_headers applied, checked again: a direct UPDATE passes
         * only the table's CHECK (no CR/LF), and a "Content-Length: 0" or "Host:" line would
         * change the request's framing. The one Authorization line is what run_customers.sql
         * builds from the customer's auth, last. */
        char name[VALIDATE_HEADER_NAME_MAX + 1];
        bool ok;
        if (i + 1 == n && strncasecmp(line, "Authorization:", 14) == 0) {
            ok = line[14] != '\0';
            for (const unsigned char *c = (const unsigned char *)line; ok && *c; c++)
                ok = *c >= 0x20 && *c != 0x7f;
        } else {
            ok = validate_header_line("header", line, name, NULL) == 0;
        }
        if (!ok) {
            free(h);
            return -EINVAL;
        }
        h->nodes[i].data = line;
        h->nodes[i].next = i + 1 < n ? &h->nodes[i + 1] : NULL;
        line = end ? end + 1 : line + strlen(line);
    }
    *out = h;
    return 0;
}

void http_headers_release(http_headers *h)
{
    if (h && --h->refs == 0)
        free(h);
}
