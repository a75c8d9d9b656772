/* test_netcheck.c - SSRF address classification and allow-list parsing. */
#include "testlib.h"

#include "netcheck.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* Builds a sockaddr from a textual IPv4 or IPv6 address. */
static socklen_t make_sa(const char *text, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons(443)};
    if (inet_pton(AF_INET, text, &in4.sin_addr) == 1) {
        memcpy(ss, &in4, sizeof in4);
        return sizeof in4;
    }
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(443)};
    if (inet_pton(AF_INET6, text, &in6.sin6_addr) == 1) {
        memcpy(ss, &in6, sizeof in6);
        return sizeof in6;
    }
    fail_msg("test address %s does not parse", text);
    return 0;
}

/* NULL reason = allowed. */
typedef struct addr_case {
    const char *addr;
    const char *reason;
} addr_case;

#define LOOPBACK  "loopback address"
#define PRIVATE   "private address (RFC 1918)"
#define ULA       "unique local address (fc00::/7)"
#define LINKLOCAL "link-local address"
#define METADATA  "cloud metadata address (169.254.169.254)"
#define CGNAT     "carrier-grade NAT address (100.64.0.0/10)"
#define MULTICAST "multicast address"
#define UNSPEC    "unspecified address"
#define BROADCAST "broadcast address"
#define DOC       "documentation address"
#define BENCH     "benchmarking address"
#define THISNET   "\"this network\" address (0.0.0.0/8)"
#define RESERVED  "reserved address"
#define SITELOCAL "site-local address (fec0::/10, deprecated)"
#define V4COMPAT  "IPv4-compatible address (::/96, deprecated)"
#define TEREDO    "Teredo address (2001::/32)"
#define DISCARD   "discard-only address (100::/64)"
#define NOTGLOBAL "not a global unicast address"

static const addr_case default_cases[] = {
    /* IPv4 global unicast, including the edges of refused blocks. */
    {"8.8.8.8", NULL},
    {"1.1.1.1", NULL},
    {"93.184.216.34", NULL},
    {"9.255.255.255", NULL},
    {"11.0.0.0", NULL},
    {"100.63.255.255", NULL},
    {"100.128.0.0", NULL},
    {"126.255.255.255", NULL},
    {"128.0.0.0", NULL},
    {"169.253.255.255", NULL},
    {"169.255.0.0", NULL},
    {"172.15.255.255", NULL},
    {"172.32.0.0", NULL},
    {"192.0.1.1", NULL},
    {"192.0.3.0", NULL},
    {"192.31.196.1", NULL},
    {"192.88.98.255", NULL},
    {"192.167.255.255", NULL},
    {"192.169.0.0", NULL},
    {"198.17.255.255", NULL},
    {"198.20.0.0", NULL},
    {"223.255.255.255", NULL},
    /* IPv4 special purpose. */
    {"0.0.0.0", UNSPEC},
    {"0.1.2.3", THISNET},
    {"10.0.0.1", PRIVATE},
    {"10.255.255.255", PRIVATE},
    {"100.64.0.0", CGNAT},
    {"100.127.255.255", CGNAT},
    {"100.100.100.200", CGNAT},
    {"127.0.0.1", LOOPBACK},
    {"127.255.255.254", LOOPBACK},
    {"169.254.0.1", LINKLOCAL},
    {"169.254.169.254", METADATA},
    {"169.254.169.253", LINKLOCAL},
    {"172.16.0.1", PRIVATE},
    {"172.31.255.255", PRIVATE},
    {"192.0.0.8", RESERVED},
    {"192.0.0.170", RESERVED},
    {"192.0.2.1", DOC},
    {"192.88.99.1", RESERVED},
    {"192.168.1.1", PRIVATE},
    {"198.18.0.1", BENCH},
    {"198.19.255.255", BENCH},
    {"198.51.100.7", DOC},
    {"203.0.113.9", DOC},
    {"224.0.0.1", MULTICAST},
    {"239.255.255.250", MULTICAST},
    {"240.0.0.1", RESERVED},
    {"254.1.1.1", RESERVED},
    {"255.255.255.254", RESERVED},
    {"255.255.255.255", BROADCAST},
    /* IPv6 global unicast. */
    {"2606:4700:4700::1111", NULL},
    {"2a00:1450:4001:80b::200e", NULL},
    {"2001:200::1", NULL},
    {"2001:4860:4860::8888", NULL},
    {"2002:808:808::1", NULL},    /* 6to4 around 8.8.8.8 */
    {"64:ff9b::808:808", NULL},   /* NAT64 around 8.8.8.8 */
    {"64:ff9b:1::808:808", NULL}, /* local-use NAT64, /96 layout */
    {"::ffff:0:808:808", NULL},   /* SIIT-translated 8.8.8.8 */
    {"::ffff:8.8.8.8", NULL},     /* mapped 8.8.8.8 */
    /* IPv6 special purpose. */
    {"::", UNSPEC},
    {"::1", LOOPBACK},
    {"::2", V4COMPAT},
    {"::8.8.8.8", V4COMPAT},
    {"::ffff:127.0.0.1", LOOPBACK},
    {"::ffff:10.1.2.3", PRIVATE},
    {"::ffff:169.254.169.254", METADATA},
    {"::ffff:0.0.0.0", UNSPEC},
    {"::ffff:0:7f00:1", LOOPBACK},
    {"64:ff9b::7f00:1", LOOPBACK},
    {"64:ff9b::a9fe:a9fe", METADATA},
    {"64:ff9b::c0a8:101", PRIVATE},
    {"64:ff9b:1::a00:1", PRIVATE},
    {"64:ff9b:1:1::808:808", RESERVED}, /* non-/96 local NAT64: cannot be checked */
    {"2002:7f00:1::1", LOOPBACK},
    {"2002:a00:1::", PRIVATE},
    {"2002:c058:6301::1", RESERVED},
    {"2001::1", TEREDO},
    {"2001:0:4136:e378:8000:63bf:3fff:fdd2", TEREDO},
    {"2001:2::1", BENCH},
    {"2001:10::1", RESERVED},
    {"2001:20::1", RESERVED},
    {"2001:1::1", RESERVED},
    {"2001:db8::1", DOC},
    {"2001:db8:ffff::1", DOC},
    {"3fff::1", DOC},
    {"100::1", DISCARD},
    {"100:0:0:1::1", NOTGLOBAL},
    {"fc00::1", ULA},
    {"fd00:ec2::254", ULA},
    {"fdff:ffff::1", ULA},
    {"fe80::1", LINKLOCAL},
    {"febf::1", LINKLOCAL},
    {"fec0::1", SITELOCAL},
    {"ff02::1", MULTICAST},
    {"ff0e::1", MULTICAST},
    {"5f00::1", RESERVED},
    {"4000::1", NOTGLOBAL},
    {"1000::1", NOTGLOBAL},
    {"e000::1", NOTGLOBAL},
};

static void check_case(const addr_case *c, const netcheck_allow *allow)
{
    struct sockaddr_storage ss;
    socklen_t len = make_sa(c->addr, &ss);
    const char *reason = "untouched";
    bool ok = netcheck_allowed((const struct sockaddr *)&ss, len, allow, &reason);
    if (c->reason == NULL) {
        if (!ok)
            fail_msg("%s refused (%s), expected allowed", c->addr, reason);
        assert_string_equal(reason, "untouched");
    } else {
        if (ok)
            fail_msg("%s allowed, expected refused: %s", c->addr, c->reason);
        if (strcmp(reason, c->reason) != 0)
            fail_msg("%s: reason \"%s\", expected \"%s\"", c->addr, reason, c->reason);
    }
}

static void default_policy_table(void **state)
{
    netcheck_allow empty = {.n = 0};
    for (size_t i = 0; i < PGP_ARRAY_LEN(default_cases); i++) {
        check_case(&default_cases[i], NULL);
        check_case(&default_cases[i], &empty);
    }
}

static void null_reason_and_bad_sockaddrs(void **state)
{
    struct sockaddr_storage ss;
    socklen_t len = make_sa("127.0.0.1", &ss);
    assert_false(netcheck_allowed((const struct sockaddr *)&ss, len, NULL, NULL));
    len = make_sa("8.8.8.8", &ss);
    assert_true(netcheck_allowed((const struct sockaddr *)&ss, len, NULL, NULL));

    const char *reason = NULL;
    /* Truncated lengths are refused rather than read past. */
    assert_false(netcheck_allowed((const struct sockaddr *)&ss, 4, NULL, &reason));
    assert_non_null(reason);
    /* An IPv6 address passed with an IPv4-sized length. */
    (void)make_sa("2606:4700:4700::1111", &ss);
    assert_false(
        netcheck_allowed((const struct sockaddr *)&ss, sizeof(struct sockaddr_in), NULL, &reason));
    assert_false(netcheck_allowed(NULL, 0, NULL, &reason));

    struct sockaddr_storage un = {.ss_family = AF_UNIX};
    reason = NULL;
    assert_false(netcheck_allowed((const struct sockaddr *)&un, sizeof un, NULL, &reason));
    assert_string_equal(reason, "unsupported address family");
}

static netcheck_allow parse_ok(const char *list)
{
    netcheck_allow a;
    pgp_error err = {{0}};
    int rc = netcheck_parse_allow(list, &a, &err);
    if (rc != 0)
        fail_msg("\"%s\" did not parse: %s", list ? list : "(null)", err.msg);
    return a;
}

static void parse_bad(const char *list, const char *msg_part)
{
    netcheck_allow a;
    pgp_error err = {{0}};
    int rc = netcheck_parse_allow(list, &a, &err);
    if (rc == 0)
        fail_msg("\"%s\" parsed, expected an error containing \"%s\"", list, msg_part);
    assert_int_equal(a.n, 0);
    tl_assert_contains(err.msg, msg_part);
}

static void parse_good_lists(void **state)
{
    netcheck_allow a = parse_ok("");
    assert_int_equal(a.n, 0);
    a = parse_ok(" ,\t, \n");
    assert_int_equal(a.n, 0);
    a = parse_ok(NULL);
    assert_int_equal(a.n, 0);

    a = parse_ok("127.0.0.0/8, ::1/128");
    assert_int_equal(a.n, 2);
    assert_int_equal(a.cidrs[0].family, AF_INET);
    assert_int_equal(a.cidrs[0].prefix, 8);
    assert_int_equal(a.cidrs[0].addr[0], 127);
    assert_int_equal(a.cidrs[1].family, AF_INET6);
    assert_int_equal(a.cidrs[1].prefix, 128);
    assert_int_equal(a.cidrs[1].addr[15], 1);

    /* Hosts without a prefix; any mix of commas and whitespace. */
    a = parse_ok("10.1.2.3 fd00::5,,192.168.0.0/16\t0.0.0.0/0 ::/0");
    assert_int_equal(a.n, 5);
    assert_int_equal(a.cidrs[0].prefix, 32);
    assert_int_equal(a.cidrs[1].prefix, 128);
    assert_int_equal(a.cidrs[3].prefix, 0);
    assert_int_equal(a.cidrs[4].prefix, 0);

    /* Mapped entries become IPv4 entries. */
    a = parse_ok("::ffff:127.0.0.0/104");
    assert_int_equal(a.n, 1);
    assert_int_equal(a.cidrs[0].family, AF_INET);
    assert_int_equal(a.cidrs[0].prefix, 8);
    assert_int_equal(a.cidrs[0].addr[0], 127);

    /* Exactly the maximum number of entries. */
    char big[NETCHECK_MAX_CIDRS * 16 + 1] = "";
    for (int i = 0; i < NETCHECK_MAX_CIDRS; i++) {
        char one[16];
        snprintf(one, sizeof one, "10.0.%d.0/24,", i);
        strcat(big, one);
    }
    a = parse_ok(big);
    assert_int_equal(a.n, NETCHECK_MAX_CIDRS);
}

static void parse_bad_lists(void **state)
{
    parse_bad("localhost", "\"localhost\": not an IPv4 or IPv6 address");
    parse_bad("127.0.0.0/8, example.com", "\"example.com\"");
    parse_bad("10.0.0.0/33", "\"10.0.0.0/33\": prefix length 33 out of range 0-32");
    parse_bad("::/129", "out of range 0-128");
    parse_bad("10.0.0.0/", "\"10.0.0.0/\": bad prefix length");
    parse_bad("10.0.0.0/-1", "bad prefix length");
    parse_bad("10.0.0.0/8x", "bad prefix length");
    parse_bad("10.0.0.0/0008", "bad prefix length");
    parse_bad("10.0.0.0/8/8", "bad prefix length");
    parse_bad("10.0.0.1/8", "\"10.0.0.1/8\": host bits set (did you mean 10.0.0.0/8?)");
    parse_bad("192.168.1.1/23", "did you mean 192.168.0.0/23?");
    parse_bad("fd00::1/8", "did you mean fd00::/8?");
    parse_bad("256.0.0.1", "not an IPv4 or IPv6 address");
    parse_bad("1.2.3", "not an IPv4 or IPv6 address");
    parse_bad("fe80::1%eth0", "not an IPv4 or IPv6 address");
    parse_bad("12345678901234567890123456789012345678901234567890123456789012345678901234567890"
              "12345678901234567890123456789012345678901234567890",
              "too long");

    char big[(NETCHECK_MAX_CIDRS + 1) * 16 + 1] = "";
    for (int i = 0; i <= NETCHECK_MAX_CIDRS; i++) {
        char one[16];
        snprintf(one, sizeof one, "10.0.%d.0/24 ", i);
        strcat(big, one);
    }
    parse_bad(big, "too many entries");
}

static bool allowed_by(const char *addr, const netcheck_allow *allow)
{
    struct sockaddr_storage ss;
    socklen_t len = make_sa(addr, &ss);
    return netcheck_allowed((const struct sockaddr *)&ss, len, allow, NULL);
}

static void allow_list_reopens_ranges(void **state)
{
    netcheck_allow a = parse_ok("127.0.0.0/8, ::1, 10.20.0.0/16, fd00::/8, 169.254.169.254");
    assert_true(allowed_by("127.0.0.1", &a));
    assert_true(allowed_by("127.9.9.9", &a));
    assert_true(allowed_by("::1", &a));
    assert_true(allowed_by("10.20.255.1", &a));
    assert_false(allowed_by("10.21.0.1", &a));
    assert_true(allowed_by("fd00::2", &a));
    assert_false(allowed_by("fc00::2", &a));
    assert_true(allowed_by("169.254.169.254", &a));
    assert_false(allowed_by("169.254.169.253", &a));
    assert_false(allowed_by("192.168.0.1", &a));
    /* Global addresses stay allowed with an allow-list. */
    assert_true(allowed_by("8.8.8.8", &a));
    assert_true(allowed_by("2606:4700:4700::1111", &a));
}

static void mapped_forms_match_ipv4_entries(void **state)
{
    netcheck_allow a = parse_ok("127.0.0.0/8");
    assert_true(allowed_by("::ffff:127.0.0.1", &a));
    assert_true(allowed_by("::ffff:7f01:203", &a));
    assert_false(allowed_by("::ffff:10.0.0.1", &a));
    /* Translator/relay forms lead somewhere else than the local loopback: not opened by an
     * IPv4 entry, only by an entry for the IPv6 form itself. */
    assert_false(allowed_by("64:ff9b::7f00:1", &a));
    assert_false(allowed_by("2002:7f00:1::1", &a));
    assert_false(allowed_by("::ffff:0:7f00:1", &a));
    assert_false(allowed_by("::127.0.0.1", &a));
    a = parse_ok("64:ff9b::/96");
    assert_true(allowed_by("64:ff9b::7f00:1", &a));

    /* A mapped allow entry is the same as its IPv4 form, for both spellings of the address. */
    a = parse_ok("::ffff:10.0.0.0/104");
    assert_true(allowed_by("10.1.2.3", &a));
    assert_true(allowed_by("::ffff:10.1.2.3", &a));
    assert_false(allowed_by("172.16.0.1", &a));

    /* An IPv6 entry does not open IPv4 addresses, nor the other way round. */
    a = parse_ok("::/0");
    assert_false(allowed_by("127.0.0.1", &a));
    assert_false(allowed_by("::ffff:127.0.0.1", &a));
    assert_true(allowed_by("::1", &a));
    a = parse_ok("0.0.0.0/0");
    assert_true(allowed_by("::ffff:127.0.0.1", &a));
    assert_true(allowed_by("255.255.255.255", &a));
    assert_false(allowed_by("::1", &a));
}

static void reasons_are_static_and_refusal_consistent(void **state)
{
    /* Every refused address has a non-empty reason; reasons outlive the call. */
    const char *first = NULL;
    struct sockaddr_storage ss;
    socklen_t len = make_sa("10.0.0.1", &ss);
    assert_false(netcheck_allowed((const struct sockaddr *)&ss, len, NULL, &first));
    const char *second = NULL;
    len = make_sa("192.168.0.1", &ss);
    assert_false(netcheck_allowed((const struct sockaddr *)&ss, len, NULL, &second));
    assert_ptr_equal(first, second);
    assert_string_equal(first, PRIVATE);
}

/* A URL's host judged before DNS: literal addresses (IPv4 in any form a resolver reads, bracketed
 * IPv6, with or without a port or user info) and localhost; names pass (the dispatcher judges
 * the address it connects to). */
static void url_literals_are_judged_before_dns(void **state)
{
    static const struct {
        const char *url;
        bool allowed;
        const char *reason;
    } cases[] = {
        {"http://10.1.2.3/hook", false, PRIVATE},
        {"https://10.1.2.3:8443/hook?q=1", false, PRIVATE},
        {"http://169.254.169.254/latest/meta-data", false,
         "cloud metadata address (169.254.169.254)"},
        {"http://127.0.0.1:9/x", false, "loopback address"},
        {"http://127.1/", false, "loopback address"},
        {"http://2130706433/", false, "loopback address"},
        {"http://0x7f.0.0.1/", false, "loopback address"},
        {"http://[::1]:8080/", false, "loopback address"},
        {"http://[::ffff:10.0.0.1]/", false, PRIVATE},
        {"http://[fd00::1]/", false, "unique local address (fc00::/7)"},
        {"http://u@10.0.0.1/", false, PRIVATE},
        {"http://localhost/", false, "loopback address"},
        {"http://LocalHost.:80/", false, "loopback address"},
        {"http://api.localhost/", false, "loopback address"},
        {"http://8.8.8.8/", true, NULL},
        {"https://[2606:4700:4700::1111]/", true, NULL},
        {"https://example.com/hook", true, NULL},
        {"https://10.example.com/hook", true, NULL},
        {"https://localhost.example.com/", true, NULL},
        {"https://notlocalhost/", true, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *reason = NULL;
        bool ok = netcheck_url_allowed(cases[i].url, NULL, &reason);
        if (ok != cases[i].allowed)
            fail_msg("%s: %s", cases[i].url, ok ? "allowed" : reason);
        if (!ok)
            assert_string_equal(reason, cases[i].reason);
    }
    /* The allow-list opens what it covers: localhost by either loopback address. */
    netcheck_allow a = parse_ok("127.0.0.0/8");
    assert_true(netcheck_url_allowed("http://127.0.0.1:9/x", &a, NULL));
    assert_true(netcheck_url_allowed("http://localhost:9/x", &a, NULL));
    assert_false(netcheck_url_allowed("http://[::1]:9/x", &a, NULL));
    assert_false(netcheck_url_allowed("http://10.0.0.1/x", &a, NULL));
    a = parse_ok("::1");
    assert_true(netcheck_url_allowed("http://localhost:9/x", &a, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_policy_table),
        cmocka_unit_test(null_reason_and_bad_sockaddrs),
        cmocka_unit_test(parse_good_lists),
        cmocka_unit_test(parse_bad_lists),
        cmocka_unit_test(allow_list_reopens_ranges),
        cmocka_unit_test(mapped_forms_match_ipv4_entries),
        cmocka_unit_test(reasons_are_static_and_refusal_consistent),
        cmocka_unit_test(url_literals_are_judged_before_dns),
    };
    return TL_RUN(tests, NULL, NULL);
}
