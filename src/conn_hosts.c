/* conn_hosts.c - rotating libpq's host lists; see conn_hosts.h. */
#include "conn_hosts.h"

#include <stdlib.h>
#include <string.h>

int conn_list_count(const char *list)
{
    if (!list || !*list)
        return 0;
    int n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    return n;
}

char *conn_list_rotate(const char *list, int by)
{
    if (!list)
        return NULL;
    size_t len = strlen(list);
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    int n = conn_list_count(list);
    int k = n > 0 ? by % n : 0;
    if (k < 0)
        k += n;
    /* The k-th comma splits the list: what follows it goes first. */
    const char *cut = list;
    for (int i = 0; i < k; i++)
        cut = strchr(cut, ',') + 1;
    if (k == 0) {
        memcpy(out, list, len + 1);
        return out;
    }
    size_t head = (size_t)(cut - list) - 1; /* without the comma */
    size_t tail = len - (size_t)(cut - list);
    memcpy(out, cut, tail);
    out[tail] = ',';
    memcpy(out + tail + 1, list, head);
    out[len] = '\0';
    return out;
}
