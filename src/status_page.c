/* status_page.c - the embedded status page and its headers (status_page.h). */
#include "status_page.h"

#include "status_page_html.h"
#include "validate.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

/* The one element <tag>...</tag> of html: its content's base64 SHA-256 into b64 (45 bytes).
 * -EINVAL when there is not exactly one, or it carries attributes (a src= would load code
 * the hash does not cover). */
static int element_hash(const char *html, const char *tag, char b64[45])
{
    char open[16], close[16];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    char open_attr[16];
    snprintf(open_attr, sizeof open_attr, "<%s ", tag);
    const char *start = strstr(html, open);
    if (!start || strstr(start + 1, open) || strstr(html, open_attr))
        return -EINVAL;
    start += strlen(open);
    const char *end = strstr(start, close);
    if (!end)
        return -EINVAL;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_Digest(start, (size_t)(end - start), md, &mdlen, EVP_sha256(), NULL) != 1 ||
        mdlen != 32)
        return -ENOMEM;
    EVP_EncodeBlock((unsigned char *)b64, md, 32);
    return 0;
}

int page_headers(const char *html, const char *frame_ancestors, char **out)
{
    char script[45], style[45];
    int rc = element_hash(html, "script", script);
    if (rc == 0)
        rc = element_hash(html, "style", style);
    if (rc != 0)
        return rc;
    bool framed = frame_ancestors && *frame_ancestors;
    if (framed && !validate_origins(frame_ancestors))
        return -EINVAL;
    size_t cap = 1024 + (framed ? strlen(frame_ancestors) : 0);
    char *h = malloc(cap);
    if (!h)
        return -ENOMEM;
    int n = snprintf(h, cap,
                     "Content-Security-Policy: default-src 'none'; "
                     "script-src 'sha256-%s'; style-src 'sha256-%s'; "
                     "connect-src 'self'; img-src data:; base-uri 'none'; "
                     "form-action 'none'; frame-ancestors %s\r\n"
                     "Referrer-Policy: no-referrer\r\n"
                     "%s",
                     script, style, framed ? frame_ancestors : "'none'",
                     framed ? "" : "X-Frame-Options: DENY\r\n");
    if (n < 0 || (size_t)n >= cap) {
        free(h);
        return -ENOMEM;
    }
    *out = h;
    return 0;
}

int status_page_load(status_page *out)
{
    static char *headers;
    static int loaded; /* 0 not yet, 1 done, negative errno */
    if (loaded == 0) {
        int rc = page_headers((const char *)status_page_html, NULL, &headers);
        loaded = rc == 0 ? 1 : rc;
    }
    if (loaded < 0)
        return loaded;
    out->html = (const char *)status_page_html;
    out->len = status_page_html_len;
    out->headers = headers;
    return 0;
}
