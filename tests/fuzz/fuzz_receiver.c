/* fuzz_receiver.c - the test receiver's HTTP/1.1 request parser (tests/lib/receiver.c).
 *
 * Optional target: the receiver is a test helper, not shipped code, but it parses whatever
 * pgpace (or a fault test) sends, so a crash there would be a flaky test. Its parser is static,
 * so this file includes receiver.c itself and drives parse_head()/parse_chunked() the way
 * conn_process() does, over a buffer of pipelined requests.
 * Input: the bytes received on one connection.
 * Invariants, beyond "no crash, no sanitizer report":
 *   - results are P_MORE, P_OK or one of 400, 413, 431, 501;
 *   - P_OK consumes at least one byte and never more than the buffer holds;
 *   - streaming: every strict prefix of a complete head (or chunked body) gives P_MORE, never
 *     an error and never a different complete parse (data arrives in arbitrary pieces);
 *   - the chunked sizing pass (out == NULL) and the decoding pass agree on length and bytes used;
 *   - a body declared by Content-Length is taken as it is.
 */
#include "fuzz_util.h"

#include "../lib/receiver.c"

static bool status_ok(int rc)
{
    return rc == P_MORE || rc == P_OK || rc == 400 || rc == 413 || rc == 431 || rc == 501;
}

static void check_head_prefixes(const char *b, size_t len, const request_head *full)
{
    size_t cuts[4] = {full->head_len - 1, full->head_len / 2, full->head_len / 3, 0};
    for (size_t i = 0; i < 4; i++) {
        size_t cut = cuts[i];
        if (cut >= full->head_len || cut > len)
            continue;
        char *p = malloc(cut ? cut : 1);
        if (!p)
            abort();
        memcpy(p, b, cut);
        receiver_request rq;
        memset(&rq, 0, sizeof rq);
        request_head h;
        int rc = parse_head(p, cut, &h, &rq);
        FUZZ_CHECK(rc == P_MORE, "head prefix of %zu/%zu bytes gave %d", cut, full->head_len, rc);
        free(p);
    }
}

static void check_chunked_prefixes(const char *b, size_t used)
{
    size_t cuts[3] = {used - 1, used / 2, 0};
    for (size_t i = 0; i < 3; i++) {
        size_t cut = cuts[i];
        if (cut >= used)
            continue;
        char *p = malloc(cut ? cut : 1);
        if (!p)
            abort();
        memcpy(p, b, cut);
        size_t bl = 0, u = 0;
        int rc = parse_chunked(p, cut, NULL, &bl, &u);
        FUZZ_CHECK(rc == P_MORE, "chunked prefix of %zu/%zu bytes gave %d", cut, used, rc);
        free(p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data, size);
    size_t off = 0;
    for (int requests = 0; off < size && requests < 64; requests++) {
        const char *in = buf + off;
        size_t in_len = size - off;
        receiver_request rq;
        memset(&rq, 0, sizeof rq);
        request_head h;
        int rc = parse_head(in, in_len, &h, &rq);
        FUZZ_CHECK(status_ok(rc), "parse_head returned %d", rc);
        if (rc != P_OK)
            break;
        FUZZ_CHECK(h.head_len > 0 && h.head_len <= in_len, "head_len %zu of %zu", h.head_len,
                   in_len);
        FUZZ_CHECK(strnlen(rq.path, sizeof rq.path) < sizeof rq.path, "path not terminated");
        check_head_prefixes(in, in_len, &h);

        const char *b = in + h.head_len;
        size_t avail = in_len - h.head_len, body_len = 0, used = 0;
        if (h.chunked) {
            rc = parse_chunked(b, avail, NULL, &body_len, &used);
            FUZZ_CHECK(status_ok(rc), "parse_chunked returned %d", rc);
            if (rc != P_OK)
                break;
            FUZZ_CHECK(used > 0 && used <= avail && body_len <= used,
                       "chunked: used %zu of %zu, body %zu", used, avail, body_len);
            check_chunked_prefixes(b, used);
            char *out = malloc(body_len ? body_len : 1);
            if (!out)
                abort();
            size_t bl2 = 0, used2 = 0;
            int rc2 = parse_chunked(b, avail, out, &bl2, &used2);
            FUZZ_CHECK(rc2 == P_OK && bl2 == body_len && used2 == used,
                       "decoding pass differs: rc %d, %zu/%zu bytes", rc2, bl2, used2);
            free(out);
        } else {
            if (h.cl > MAX_BODY_BYTES || avail < h.cl)
                break;
            used = (size_t)h.cl;
        }
        off += h.head_len + used;
    }
    free(buf);
    return 0;
}
