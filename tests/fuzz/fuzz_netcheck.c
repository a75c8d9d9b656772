/* fuzz_netcheck.c - netcheck_parse_allow and netcheck_allowed (the SSRF guard).
 *
 * Input: byte 0 selects how the socket address is built, then 28 bytes of socket address
 * (AF_INET uses 16, AF_INET6 28), then the allow-list text (cut at its first NUL):
 *   mode % 4 == 0: AF_INET, sizeof(struct sockaddr_in)
 *   mode % 4 == 1: AF_INET6, sizeof(struct sockaddr_in6)
 *   mode % 4 == 2: the raw bytes as they are (any family), with length (mode >> 2) % 29, in a
 *                  buffer of exactly that length (reads past it are ASan reports)
 *   mode % 4 == 3: AF_INET6 holding ::ffff:a.b.c.d, 64:ff9b::a.b.c.d, ::ffff:0:a.b.c.d or
 *                  2002:aabb:ccdd::, wrapping the first 4 address bytes (mode >> 2 picks)
 * Invariants, beyond "no crash, no sanitizer report":
 *   - parse success => 0 <= n <= 64; every entry AF_INET with prefix 0-32 and bytes 4-15 zero,
 *     or AF_INET6 with prefix 0-128; no host bits set;
 *   - parse failure => -EINVAL, n == 0 and a message;
 *   - a refusal always has a non-empty reason; an unknown family or a short length is refused;
 *   - an address covered by a parsed entry (same family, prefix match; IPv4-mapped IPv6
 *     judged as its IPv4) is allowed; the allow-list only ever opens (allowed without it =>
 *     allowed with it);
 *   - with no allow-list, the well-known refused IPv4 ranges are refused (an independent
 *     table), and ::ffff:a / 64:ff9b::a / ::ffff:0:a / 2002:a:: are refused whenever IPv4 a is;
 *     ::ffff:a gets the same verdict as a with any allow-list.
 */
#include "fuzz_util.h"

#include "netcheck.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>

#define ADDR_BYTES 28

static bool bits_match(const unsigned char *a, const unsigned char *net, int prefix)
{
    for (int i = 0; i < prefix; i++) {
        int m = 0x80 >> (i % 8);
        if ((a[i / 8] & m) != (net[i / 8] & m))
            return false;
    }
    return true;
}

static void check_parsed(const netcheck_allow *al, const char *list)
{
    FUZZ_CHECK(al->n <= NETCHECK_MAX_CIDRS, "n = %zu", al->n);
    for (size_t i = 0; i < al->n; i++) {
        const netcheck_cidr *c = &al->cidrs[i];
        int max = c->family == AF_INET ? 32 : 128;
        FUZZ_CHECK(c->family == AF_INET || c->family == AF_INET6, "entry %zu family %d for '%s'", i,
                   c->family, fuzz_show(list));
        FUZZ_CHECK(c->prefix >= 0 && c->prefix <= max, "entry %zu prefix %d out of 0-%d for '%s'",
                   i, c->prefix, max, fuzz_show(list));
        if (c->family == AF_INET)
            for (int b = 4; b < 16; b++)
                FUZZ_CHECK(c->addr[b] == 0, "IPv4 entry %zu has byte %d set for '%s'", i, b,
                           fuzz_show(list));
        for (int bit = c->prefix; bit < max; bit++)
            FUZZ_CHECK(!(c->addr[bit / 8] & (0x80 >> (bit % 8))),
                       "entry %zu has host bit %d set for '%s'", i, bit, fuzz_show(list));
    }
}

/* Independent list of IPv4 ranges the contract says are refused by default. */
static bool v4_must_refuse(const unsigned char a[4])
{
    uint32_t x = ((uint32_t)a[0] << 24) | ((uint32_t)a[1] << 16) | ((uint32_t)a[2] << 8) | a[3];
    static const struct {
        uint32_t net;
        int len;
    } r[] = {
        {0x00000000u, 8},  {0x0a000000u, 8},  {0x64400000u, 10}, {0x7f000000u, 8},
        {0xa9fe0000u, 16}, {0xac100000u, 12}, {0xc0000200u, 24}, {0xc0a80000u, 16},
        {0xc6120000u, 15}, {0xc6336400u, 24}, {0xcb007100u, 24}, {0xe0000000u, 4},
        {0xf0000000u, 4},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if ((x & (0xffffffffu << (32 - r[i].len))) == r[i].net)
            return true;
    return false;
}

static bool allowed(const void *sa, socklen_t len, const netcheck_allow *al, const char *ctx)
{
    /* An exact-size copy: reads past len are ASan reports. */
    unsigned char *copy = malloc(len ? len : 1);
    if (!copy)
        abort();
    memcpy(copy, sa, len);
    const char *reason = NULL;
    bool ok = netcheck_allowed((const struct sockaddr *)copy, len, al, &reason);
    if (!ok)
        FUZZ_CHECK(reason && reason[0], "%s: refused without a reason", ctx);
    /* reason == NULL is allowed by the contract. */
    FUZZ_CHECK(netcheck_allowed((const struct sockaddr *)copy, len, al, NULL) == ok,
               "%s: verdict depends on reason pointer", ctx);
    free(copy);
    return ok;
}

static void make_v4(struct sockaddr_in *in, const unsigned char a[4])
{
    memset(in, 0, sizeof *in);
    in->sin_family = AF_INET;
    in->sin_port = htons(443);
    memcpy(&in->sin_addr, a, 4);
}

static void make_v6(struct sockaddr_in6 *in6, const unsigned char b[16])
{
    memset(in6, 0, sizeof *in6);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(443);
    memcpy(&in6->sin6_addr, b, 16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char mode = size ? data[0] : 0;
    unsigned char raw[ADDR_BYTES] = {0};
    size_t take = size > 1 ? size - 1 : 0;
    if (take > ADDR_BYTES)
        take = ADDR_BYTES;
    if (take)
        memcpy(raw, data + 1, take);
    size_t rest_off = 1 + take;
    char *list = fuzz_strndup(data + (size > rest_off ? rest_off : size),
                              size > rest_off ? size - rest_off : 0);

    netcheck_allow al;
    memset(&al, 0xA5, sizeof al);
    pgp_error err;
    memset(&err, 0, sizeof err);
    int rc = netcheck_parse_allow(list, &al, &err);
    if (rc == 0) {
        check_parsed(&al, list);
    } else {
        FUZZ_CHECK(rc == -EINVAL, "parse returned %d for '%s'", rc, fuzz_show(list));
        FUZZ_CHECK(al.n == 0, "failed parse left n = %zu", al.n);
        FUZZ_CHECK(err.msg[0] != '\0', "failed parse without a message for '%s'", fuzz_show(list));
    }
    const netcheck_allow *alp = rc == 0 ? &al : NULL;

    struct sockaddr_in in;
    struct sockaddr_in6 in6;
    unsigned char a4[4], b16[16];
    const void *sa;
    socklen_t len;
    bool check_cover = true;
    switch (mode % 4) {
    case 0:
        memcpy(a4, raw, 4);
        make_v4(&in, a4);
        sa = &in;
        len = sizeof in;
        break;
    case 1:
        memcpy(b16, raw, 16);
        make_v6(&in6, b16);
        sa = &in6;
        len = sizeof in6;
        break;
    case 2:
        sa = raw;
        len = (socklen_t)((mode >> 2) % (ADDR_BYTES + 1));
        check_cover = false; /* arbitrary family and length: only "no crash" */
        break;
    default: {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
        static const unsigned char siit[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
        memcpy(a4, raw, 4);
        memset(b16, 0, 16);
        switch ((mode >> 2) % 4) {
        case 0:
            memcpy(b16, mapped, 12);
            memcpy(b16 + 12, a4, 4);
            break;
        case 1:
            memcpy(b16, nat64, 12);
            memcpy(b16 + 12, a4, 4);
            break;
        case 2:
            memcpy(b16, siit, 12);
            memcpy(b16 + 12, a4, 4);
            break;
        default:
            b16[0] = 0x20;
            b16[1] = 0x02;
            memcpy(b16 + 2, a4, 4);
            break;
        }
        make_v6(&in6, b16);
        sa = &in6;
        len = sizeof in6;
        /* The wrapped IPv4 address, judged alone with no allow-list. */
        struct sockaddr_in w;
        make_v4(&w, a4);
        bool v4_ok = allowed(&w, sizeof w, NULL, "wrapped v4");
        bool v6_ok = allowed(&in6, sizeof in6, NULL, "wrapping v6");
        if (!v4_ok)
            FUZZ_CHECK(!v6_ok, "%u.%u.%u.%u is refused but its form %d is allowed", a4[0], a4[1],
                       a4[2], a4[3], (mode >> 2) % 4);
        if ((mode >> 2) % 4 == 0) {
            /* IPv4-mapped: the very same verdict as the IPv4 address, with the allow-list. */
            bool a = allowed(&w, sizeof w, alp, "v4");
            bool b = allowed(&in6, sizeof in6, alp, "mapped");
            FUZZ_CHECK(a == b, "%u.%u.%u.%u: v4 %d, ::ffff: form %d with list '%s'", a4[0], a4[1],
                       a4[2], a4[3], a, b, fuzz_show(list));
        }
        break;
    }
    }

    bool with = allowed(sa, len, alp, "with list");
    bool without = allowed(sa, len, NULL, "without list");
    if (without)
        FUZZ_CHECK(with, "allowed without the list, refused with '%s'", fuzz_show(list));

    if ((mode % 4) == 0)
        FUZZ_CHECK(!(without && v4_must_refuse(a4)), "%u.%u.%u.%u allowed by default", a4[0], a4[1],
                   a4[2], a4[3]);

    if (check_cover && rc == 0) {
        /* The family and bytes the allow-list is compared against. */
        int fam;
        unsigned char key[16] = {0};
        const struct sockaddr *s = sa;
        if (s->sa_family == AF_INET) {
            fam = AF_INET;
            memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        } else {
            static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
            if (memcmp(b, mapped, 12) == 0) {
                fam = AF_INET;
                memcpy(key, b + 12, 4);
            } else {
                fam = AF_INET6;
                memcpy(key, b, 16);
            }
        }
        for (size_t i = 0; i < al.n; i++)
            if (al.cidrs[i].family == fam && bits_match(key, al.cidrs[i].addr, al.cidrs[i].prefix))
                FUZZ_CHECK(with, "address covered by entry %zu of '%s' is refused", i,
                           fuzz_show(list));
    }

    /* NULL address and short lengths are refused, never read. */
    FUZZ_CHECK(!netcheck_allowed(NULL, 16, alp, NULL), "NULL address allowed");
    free(list);
    return 0;
}
