/* status_page.h - the live status page served at GET / by the admin listener: one HTML file
 * (src/status/status.html, its CSS and JavaScript inline) embedded in the binary at build time,
 * and the response headers that go with it.
 *
 * Contract:
 * - status_page_load() checks the embedded page once and builds its headers: a
 *   Content-Security-Policy that allows exactly the page's one inline <style> and one inline
 *   <script> (by their SHA-256), fetches to this origin only and nothing else (no other
 *   script, style, image, font, frame, form target or base URL), plus no referrer and no
 *   framing (every answer of the listener carries nosniff). Fails (-EINVAL) when the page
 *   does not have exactly one of each element without attributes (the unit test catches that
 *   first); -ENOMEM.
 * - The page and headers are static: valid for the life of the process, never freed.
 */
#ifndef PGPACE_STATUS_PAGE_H
#define PGPACE_STATUS_PAGE_H

#include <stddef.h>

typedef struct status_page {
    const char *html;
    size_t len;
    const char *headers; /* extra header lines, each ending in CRLF */
} status_page;

int status_page_load(status_page *out);

/* The headers of an embedded page (the status page's, the tenant page's: src/portal/portal.html)
 * as described above, in a new string at *out (the caller frees it). frame_ancestors: origins
 * that may frame the page ("https://a.example https://b.example", each scheme://host[:port]);
 * NULL or "" = none, and then X-Frame-Options: DENY too. -EINVAL for a page without exactly one
 * <script> and one <style>, or a malformed origin; -ENOMEM. */
int page_headers(const char *html, const char *frame_ancestors, char **out);

#endif
