/* http_form.c - form posts on the sender's request objects (http_post_form in http_sender.h):
 * an OAuth2 token request. Their header list is the fnodes array instead of the webhook's
 * (switched back when the object returns to the pool), their form and Authorization line live
 * in fbuf (wiped and freed at the end), and the response body is collected whole in rbody.
 */
#include "http_sender_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static char hdr_form_type[] = "content-type: application/x-www-form-urlencoded";
static char hdr_accept_json[] = "accept: application/json";

/* The value of a form request's Authorization, and its form: no CR, LF or NUL may reach the
 * wire (the caller built them from checked values; this keeps the sender safe regardless). */
static bool form_text_safe(const char *v)
{
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            return false;
    return true;
}

int http_post_form(http_sender *s, const http_form_request *req, http_done_cb cb, void *arg)
{
    if (!s || !req || !cb || !req->url || !req->form || !form_text_safe(req->form) ||
        (req->authorization && (!*req->authorization || !form_text_safe(req->authorization))) ||
        req->max_body == 0 || req->max_body > 1024 * 1024 || req->total_timeout_ms <= 0 ||
        req->connect_timeout_ms < 0)
        return -EINVAL;
    if (s->closing)
        return -ESHUTDOWN;
    http_req *r = hs_req_get(s);
    if (!r)
        return -ENOMEM;
    CURL *e = r->easy;
    int rc = -ENOMEM;
    static const char auth_prefix[] = "authorization: ";
    size_t form_len = strlen(req->form);
    size_t auth_len = req->authorization ? strlen(req->authorization) : 0;
    r->form = true; /* from here on req_put switches the header list back */
    r->fbuf_len = form_len + 1 + sizeof auth_prefix + auth_len;
    r->fbuf = malloc(r->fbuf_len);
    if (!r->fbuf)
        goto fail_rc;
    memcpy(r->fbuf, req->form, form_len + 1);
    r->rbody_max = req->max_body;
    struct curl_slist *n = r->fnodes;
    n[0].data = hdr_form_type;
    n[1].data = hdr_accept_json;
    n[2].data = http_hdr_user_agent;
    n[3].data = http_hdr_expect;
    n[3].next = NULL;
    for (int i = 0; i < 3; i++)
        n[i].next = &n[i + 1];
    if (req->authorization) {
        char *line = r->fbuf + form_len + 1;
        memcpy(line, auth_prefix, sizeof auth_prefix - 1);
        memcpy(line + sizeof auth_prefix - 1, req->authorization, auth_len + 1);
        n[4].data = line;
        n[4].next = NULL;
        n[3].next = &n[4];
    }
    rc = -EINVAL;
    SETOPT(CURLOPT_HTTPHEADER, r->fnodes);
    hs_launch l = {.url = req->url,
                   .body = r->fbuf,
                   .body_len = form_len,
                   .connect_timeout_ms = req->connect_timeout_ms,
                   .total_timeout_ms = req->total_timeout_ms,
                   .proxy = req->proxy,
                   .cb = cb,
                   .arg = arg};
    if ((rc = hs_req_launch(s, r, &l)) < 0)
        goto fail_rc;
    return 0;

fail:
    rc = -EINVAL;
fail_rc:
    hs_req_put(r);
    return rc;
}
