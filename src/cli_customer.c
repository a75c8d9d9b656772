/* cli_customer.c - `pgpace customer set|get|list|pause|resume|enable|delete`. */
#include "cli.h"
#include "client_cert.h"
#include "db.h"
#include "proxy.h"
#include "secret.h"
#include "sql_embed.h"
#include "validate.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char customer_usage[] =
    "usage: pgpace customer COMMAND [ARGS...]\n"
    "\n"
    "  set NAME [options]     create or update a customer (only given options change)\n"
    "  get NAME [--show-secrets]\n"
    "  list\n"
    "  pause NAME             stop dispatching its items (they wait; nothing is dropped)\n"
    "  resume NAME\n"
    "  enable NAME            re-enable a customer health disabled (every delivery failed for\n"
    "                         [health] disable_after): its items are sent again\n"
    "  delete NAME [--force]  refuses while items are pending, unless --force drops them\n"
    "\n"
    "Run 'pgpace customer set --help' for the settings.\n";

static const char set_usage[] =
    "usage: pgpace customer set NAME [options]\n"
    "\n"
    "Creates the customer (then --rate and --url are required) or updates the given settings.\n"
    "Changes reach a running dispatcher within a second.\n"
    "\n"
    "  --rate R              items per minute, > 0, fractions allowed (0.5 = one every 2 min)\n"
    "  --mode M              spaced (default): one item every 60/R s, GCRA with --burst;\n"
    "                        batch: up to R items per tick, delivered at once;\n"
    "                        unlimited: plain work queue, as fast as deliveries allow\n"
    "  --burst N             spaced mode: items that may go back to back after idling (>= 1)\n"
    "  --url URL             webhook endpoint, http:// or https://\n"
    "  --secret S            set the signing secret: whsec_... (HMAC-SHA256, v1 signatures) or\n"
    "                        whsk_... (Ed25519, v1a: receivers verify with the whpk_ public\n"
    "                        key 'customer get' shows); generated when creating\n"
    "  --rotate-secret       add a new generated secret; old ones keep signing until retired\n"
    "  --key-type hmac|ed25519  the kind of secret generated (--rotate-secret: default the\n"
    "                        kind of the newest secret; creating: hmac)\n"
    "  --retire-old-secrets  keep only the newest secret\n"
    "  --max-in-flight N     most outstanding deliveries for this customer, or 'none'\n"
    "  --max-attempts N      attempts before an item is dead-lettered (1-1000, default 12)\n"
    "  --paused / --active   pause or resume (same as customer pause / resume)\n"
    "  --connect-timeout-ms N|default  TCP/TLS connect timeout for this customer's webhooks\n"
    "  --request-timeout-ms N|default  total time allowed per webhook request\n"
    "  --max-age D|none      items not sent within D of being due (their run_at, or their\n"
    "                        enqueue) are dead-lettered as 'expired': 90s, 15m, 2h, 3d (at\n"
    "                        most 365d); applies to items enqueued from then on\n"
    "\n"
    "What the receiver requires besides the signature (secrets: shown only by\n"
    "'customer get --show-secrets', never logged):\n"
    "  --header 'Name: value'  an extra header sent with every webhook; repeat it for more (at\n"
    "                        most 20). The given ones replace the customer's whole set. Names\n"
    "                        are HTTP tokens (at most 64); webhook-*, content-type,\n"
    "                        content-length, host, user-agent, authorization, transfer-encoding,\n"
    "                        connection, traceparent, tracestate, expect, keep-alive, te,\n"
    "                        trailer, upgrade, proxy-connection are reserved; values 1 to 4096\n"
    "                        bytes without control characters\n"
    "  --clear-headers       remove every extra header\n"
    "  --auth basic:USER:PASSWORD | bearer:TOKEN | none\n"
    "                        the Authorization header: Basic (USER without a colon) or Bearer\n"
    "                        (a token68 token), or none\n";
/* (Split: ISO C guarantees string literals of 4095 characters only.) */
static const char set_usage_more[] =
    "  --auth oauth2 --oauth-token-url URL --oauth-client-id ID\n"
    "        --oauth-client-secret-file FILE|- [--oauth-scope 'S1 S2']\n"
    "                        OAuth2 client credentials (RFC 6749 4.4): the dispatcher fetches\n"
    "                        an access token from URL (http/https) with the client id and\n"
    "                        secret, caches it until shortly before it expires and sends it as\n"
    "                        Bearer; the secret (1 to 1024 bytes) is read from FILE, or from\n"
    "                        stdin with '-' (one trailing newline dropped), never from argv\n"
    "  --client-cert FILE --client-key FILE\n"
    "                        mutual TLS: the client certificate (PEM, the leaf first, then any\n"
    "                        intermediates) and its unencrypted private key (PEM) presented to\n"
    "                        the receiver; read from the files (at most 64 KiB each), checked\n"
    "                        before anything is written: both parse, the key matches, the\n"
    "                        certificate is valid now\n"
    "  --clear-client-cert   remove the client certificate and key\n"
    "\n"
    "Egress proxy (see [delivery] proxy):\n"
    "  --proxy URL|direct|default  send this customer's webhooks through its own HTTP CONNECT\n"
    "                        proxy (http://HOST:PORT, no credentials), never through a proxy\n"
    "                        (direct), or as configured ([delivery] proxy and no_proxy)\n"
    "\n"
    "Pacing that listens to the receiver (429, or 503 with Retry-After, lowers the effective\n"
    "rate; each success raises it again, up to --rate). 'default' uses the [delivery] setting:\n"
    "  --throttle-decrease F|default   rate multiplied by F on a throttled answer (0 < F < 1)\n"
    "  --throttle-increase F|default   fraction of --rate regained per success (0 < F <= 1)\n"
    "  --throttle-floor F|default      lowest effective rate, as a fraction of --rate\n"
    "                                  (0 < F <= 1)\n";

enum {
    OPT_RATE = 1,
    OPT_MODE,
    OPT_BURST,
    OPT_URL,
    OPT_SECRET,
    OPT_ROTATE,
    OPT_RETIRE,
    OPT_MAX_IN_FLIGHT,
    OPT_MAX_ATTEMPTS,
    OPT_PAUSED,
    OPT_ACTIVE,
    OPT_SHOW,
    OPT_FORCE,
    OPT_CONNECT_TIMEOUT,
    OPT_REQUEST_TIMEOUT,
    OPT_THROTTLE_DECREASE,
    OPT_THROTTLE_INCREASE,
    OPT_THROTTLE_FLOOR,
    OPT_MAX_AGE,
    OPT_HEADER,
    OPT_CLEAR_HEADERS,
    OPT_AUTH,
    OPT_OAUTH_TOKEN_URL,
    OPT_OAUTH_CLIENT_ID,
    OPT_OAUTH_SECRET_FILE,
    OPT_OAUTH_SCOPE,
    OPT_KEY_TYPE,
    OPT_PROXY,
    OPT_CLIENT_CERT,
    OPT_CLIENT_KEY,
    OPT_CLEAR_CLIENT_CERT
};

/* The OAuth2 client secret, read from a file or stdin ("-") rather than argv (which other users
 * of the host can read in /proc). One trailing LF or CRLF is dropped (an editor's or echo's);
 * what is left must be 1 to 1024 bytes without control characters (the rule of
 * pgpace.customer_set_oauth2, checked here so the flag can be named). Returns 0, or a negative
 * error with err naming the flag and never quoting the content. */
static int read_client_secret(const char *path, char *out, size_t cap, pgp_error *err)
{
    static const char *flag = "--oauth-client-secret-file";
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f)
        return pgp_error_set(err, -errno, "%s: cannot open '%.200s': %s", flag, path,
                             strerror(errno));
    size_t n = fread(out, 1, cap, f);
    bool failed = ferror(f) != 0;
    if (f != stdin)
        fclose(f);
    if (failed)
        return pgp_error_set(err, -EIO, "%s: cannot read '%.200s'", flag, path), -1;
    if (n > 0 && out[n - 1] == '\n')
        n--;
    if (n > 0 && out[n - 1] == '\r')
        n--;
    if (n > 1024)
        return pgp_error_set(err, -EINVAL, "%s: the client secret is longer than 1024 bytes", flag);
    out[n] = '\0';
    if (n == 0)
        return pgp_error_set(err, -EINVAL, "%s: expected a client secret of 1 to 1024 bytes", flag);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
            return pgp_error_set(err, -EINVAL,
                                 "%s: the client secret holds a control character (a line break "
                                 "other than one at the end, a NUL, ...)",
                                 flag);
    return 0;
}

/* An OAuth2 scope (RFC 6749 3.3): scope-tokens of %x21 / %x23-5B / %x5D-7E separated by single
 * spaces, at most 1024 characters (pgpace.customer_set_oauth2 holds the same rule). */
static bool scope_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 1024 || s[0] == ' ' || s[n - 1] == ' ' || strstr(s, "  "))
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p != ' ' && (*p < 0x21 || *p > 0x7e || *p == '"' || *p == '\\'))
            return false;
    return true;
}

/* A client id: 1 to 256 bytes without control characters (CR/LF would end up in a header). */
static bool client_id_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 256)
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

/* The lines as a PostgreSQL array literal, every element quoted ('\\' and '"' escaped):
 * "{}" for none. Returns NULL when out of memory (the caller frees the result). */
static char *header_array(const char *const *lines, size_t n)
{
    size_t cap = 3;
    for (size_t i = 0; i < n; i++)
        cap += 2 * strlen(lines[i]) + 3;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    char *p = out;
    *p++ = '{';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        *p++ = '"';
        for (const char *c = lines[i]; *c; c++) {
            if (*c == '"' || *c == '\\')
                *p++ = '\\';
            *p++ = *c;
        }
        *p++ = '"';
    }
    *p++ = '}';
    *p = '\0';
    return out;
}

/* A certificate and key read from their files; the key is wiped when freed. */
typedef struct pem_pair {
    char *cert, *key;
    size_t cert_len, key_len;
} pem_pair;

static void pem_pair_free(pem_pair *p)
{
    free(p->cert);
    if (p->key)
        OPENSSL_cleanse(p->key, p->key_len);
    free(p->key);
    *p = (pem_pair){0};
}

/* Reads a whole PEM file of at most CLIENT_CERT_MAX_BYTES into *out (NUL-terminated). The
 * contents never appear in a message: a key file's are secret. Returns CLI_OK or the status of
 * the printed usage error, naming the flag and the file. */
static int read_pem_file(cli_ctx *ctx, const char *flag, const char *path, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return cli_usage_error(ctx, "%s %s: cannot open: %s", flag, path, strerror(errno));
    char *buf = malloc(CLIENT_CERT_MAX_BYTES + 2);
    if (!buf) {
        fclose(f);
        return cli_fail(ctx, CLI_FAILED, "out of memory");
    }
    size_t n = fread(buf, 1, CLIENT_CERT_MAX_BYTES + 1, f);
    bool failed = ferror(f);
    int e = errno;
    fclose(f);
    /* The characters pgpace.customer_set_client_cert refuses (any control character but tab
     * and line breaks), checked here so that such a file is a usage error naming it. */
    bool control = false;
    for (size_t i = 0; i < n && !control; i++) {
        unsigned char c = (unsigned char)buf[i];
        control = (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f;
    }
    const char *why = failed                         ? strerror(e)
                      : n > CLIENT_CERT_MAX_BYTES    ? "larger than 65536 bytes"
                      : n == 0                       ? "empty"
                      : memchr(buf, '\0', n) != NULL ? "contains a NUL byte (not a PEM text)"
                      : control ? "contains a control character (PEM is printable text)"
                      : strcmp(flag, "--client-cert") == 0 && memmem(buf, n, "PRIVATE KEY", 11)
                          ? "holds a private key: give the certificate (and its chain) only, "
                            "the key with --client-key"
                          : NULL;
    if (why) {
        OPENSSL_cleanse(buf, n);
        free(buf);
        return cli_usage_error(ctx, "%s %s: %s", flag, path, why);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return CLI_OK;
}

/* Reads and checks --client-cert and --client-key (client_cert.h: both parse, the key is not
 * encrypted and matches, the certificate is valid now) before anything is written. */
static int load_client_cert(cli_ctx *ctx, const char *cert_file, const char *key_file,
                            pem_pair *out)
{
    int rc = read_pem_file(ctx, "--client-cert", cert_file, &out->cert, &out->cert_len);
    if (rc == CLI_OK)
        rc = read_pem_file(ctx, "--client-key", key_file, &out->key, &out->key_len);
    if (rc != CLI_OK) {
        pem_pair_free(out);
        return rc;
    }
    client_cert_info info;
    client_cert_field field;
    pgp_error err;
    if (client_cert_check(out->cert, out->cert_len, out->key, out->key_len, (int64_t)time(NULL),
                          &info, &field, &err) != 0) {
        pem_pair_free(out);
        bool is_cert = field == CLIENT_CERT_FIELD_CERT;
        return cli_usage_error(ctx, "%s %s: %s", is_cert ? "--client-cert" : "--client-key",
                               is_cert ? cert_file : key_file, err.msg);
    }
    return CLI_OK;
}

/* --max-age: a whole number of seconds, minutes, hours or days ("90s", "15m", "2h", "3d"), at
 * most 365 days, or "none". Writes the interval for SQL ("5400 seconds"; "0" for none) to out;
 * returns false for anything else. */
static bool parse_max_age(const char *s, char *out, size_t n)
{
    if (strcmp(s, "none") == 0) {
        snprintf(out, n, "0");
        return true;
    }
    long long v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        v = v * 10 + (s[i] - '0');
        if (v > 365LL * 86400)
            return false;
    }
    if (i == 0 || s[i] == '\0' || s[i + 1] != '\0')
        return false;
    long long unit = s[i] == 's'   ? 1
                     : s[i] == 'm' ? 60
                     : s[i] == 'h' ? 3600
                     : s[i] == 'd' ? 86400
                                   : 0;
    long long secs = v * unit;
    if (unit == 0 || secs < 1 || secs > 365LL * 86400)
        return false;
    snprintf(out, n, "%lld seconds", secs);
    return true;
}

/* The throttle flags: each checked against the range of its [delivery] key before anything is
 * sent; the value reaches SQL as given, 'default' as 0 (pgpace.customer_set_throttle). */
static const struct throttle_flag {
    int opt;
    const char *flag;
    const double_range *range;
} throttle_flags[] = {
    {OPT_THROTTLE_DECREASE, "--throttle-decrease", &config_throttle_decrease_range},
    {OPT_THROTTLE_INCREASE, "--throttle-increase", &config_throttle_increase_range},
    {OPT_THROTTLE_FLOOR, "--throttle-floor", &config_throttle_floor_range},
};

/* Parses options common to every customer subcommand that takes only a NAME and flags. */
static int parse_name_and_flags(cli_ctx *ctx, int argc, char **argv, const char *usage_text,
                                const struct option *extra, int *flags_seen, const char **name)
{
    struct option opts[8] = {CLI_COMMON_OPTIONS};
    size_t n = 3;
    for (; extra && extra->name && n < 7; extra++)
        opts[n++] = *extra;
    opts[n] = (struct option){NULL, 0, NULL, 0};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(usage_text, stdout);
            return -1;
        }
        if (opt == '?' || opt == ':')
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        *flags_seen |= 1 << opt;
    }
    if (name) {
        if (optind >= argc)
            return cli_usage_error(ctx, "missing customer NAME");
        *name = argv[optind++];
    }
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

static int customer_set(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_COMMON_OPTIONS,
        {"rate", required_argument, NULL, OPT_RATE},
        {"mode", required_argument, NULL, OPT_MODE},
        {"burst", required_argument, NULL, OPT_BURST},
        {"url", required_argument, NULL, OPT_URL},
        {"secret", required_argument, NULL, OPT_SECRET},
        {"rotate-secret", no_argument, NULL, OPT_ROTATE},
        {"retire-old-secrets", no_argument, NULL, OPT_RETIRE},
        {"max-in-flight", required_argument, NULL, OPT_MAX_IN_FLIGHT},
        {"max-attempts", required_argument, NULL, OPT_MAX_ATTEMPTS},
        {"paused", no_argument, NULL, OPT_PAUSED},
        {"active", no_argument, NULL, OPT_ACTIVE},
        {"connect-timeout-ms", required_argument, NULL, OPT_CONNECT_TIMEOUT},
        {"request-timeout-ms", required_argument, NULL, OPT_REQUEST_TIMEOUT},
        {"throttle-decrease", required_argument, NULL, OPT_THROTTLE_DECREASE},
        {"throttle-increase", required_argument, NULL, OPT_THROTTLE_INCREASE},
        {"throttle-floor", required_argument, NULL, OPT_THROTTLE_FLOOR},
        {"max-age", required_argument, NULL, OPT_MAX_AGE},
        {"header", required_argument, NULL, OPT_HEADER},
        {"clear-headers", no_argument, NULL, OPT_CLEAR_HEADERS},
        {"auth", required_argument, NULL, OPT_AUTH},
        {"oauth-token-url", required_argument, NULL, OPT_OAUTH_TOKEN_URL},
        {"oauth-client-id", required_argument, NULL, OPT_OAUTH_CLIENT_ID},
        {"oauth-client-secret-file", required_argument, NULL, OPT_OAUTH_SECRET_FILE},
        {"oauth-scope", required_argument, NULL, OPT_OAUTH_SCOPE},
        {"key-type", required_argument, NULL, OPT_KEY_TYPE},
        {"proxy", required_argument, NULL, OPT_PROXY},
        {"client-cert", required_argument, NULL, OPT_CLIENT_CERT},
        {"client-key", required_argument, NULL, OPT_CLIENT_KEY},
        {"clear-client-cert", no_argument, NULL, OPT_CLEAR_CLIENT_CERT},
        {NULL, 0, NULL, 0}};
    const char *rate = NULL, *mode = NULL, *burst = NULL, *url = NULL, *secret = NULL;
    const char *max_in_flight = NULL, *max_attempts = NULL, *paused = NULL;
    const char *connect_timeout = NULL, *request_timeout = NULL;
    const char *throttle[PGP_ARRAY_LEN(throttle_flags)] = {NULL}; /* in throttle_flags order */
    bool rotate = false, retire = false, clear_max_in_flight = false;
    char max_age_buf[32];
    const char *max_age = NULL;
    const char *header_lines[VALIDATE_HEADERS_MAX];
    char header_names[VALIDATE_HEADERS_MAX][VALIDATE_HEADER_NAME_MAX + 1];
    size_t n_headers = 0;
    bool clear_headers = false;
    validate_auth_parts auth = {0};
    bool oauth2 = false;
    const char *oauth_url = NULL, *oauth_id = NULL, *oauth_secret_file = NULL;
    const char *oauth_scope = NULL;
    char oauth_secret[1027];     /* 1024 bytes, CRLF, and one more to see it is longer */
    const char *key_type = NULL; /* --key-type: "hmac" or "ed25519" */
    const char *proxy = NULL;    /* URL, "direct" or "default"; NULL: unchanged */
    const char *cert_file = NULL, *key_file = NULL;
    bool clear_client_cert = false;
    pgp_error err;
    double rate_value;
    long long int_value;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(set_usage, stdout);
            fputs(set_usage_more, stdout);
            return CLI_OK;
        case OPT_RATE:
            if (validate_rate("--rate", optarg, &rate_value, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            rate = optarg;
            break;
        case OPT_MODE:
            if (validate_mode("--mode", optarg, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            mode = optarg;
            break;
        case OPT_BURST:
            if (validate_int("--burst", optarg, 1, 1000000, &int_value, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            burst = optarg;
            break;
        case OPT_URL:
            if (validate_url("--url", optarg, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            url = optarg;
            break;
        case OPT_SECRET:
            secret = optarg;
            break;
        case OPT_ROTATE:
            rotate = true;
            break;
        case OPT_RETIRE:
            retire = true;
            break;
        case OPT_MAX_IN_FLIGHT:
            if (strcmp(optarg, "none") == 0) {
                clear_max_in_flight = true;
                break;
            }
            if (validate_int("--max-in-flight", optarg, 1, 1000000, &int_value, &err) != 0)
                return cli_usage_error(ctx, "%s (or 'none')", err.msg);
            max_in_flight = optarg;
            break;
        case OPT_MAX_ATTEMPTS:
            if (validate_int("--max-attempts", optarg, 1, 1000, &int_value, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            max_attempts = optarg;
            break;
        case OPT_PAUSED:
            paused = "true";
            break;
        case OPT_CONNECT_TIMEOUT:
        case OPT_REQUEST_TIMEOUT: {
            bool is_connect = opt == OPT_CONNECT_TIMEOUT;
            const char *what = is_connect ? "--connect-timeout-ms" : "--request-timeout-ms";
            const char *value = "0"; /* "default" */
            if (strcmp(optarg, "default") != 0) {
                if (validate_int(what, optarg, 100, is_connect ? 600000 : 3600000, &int_value,
                                 &err) != 0)
                    return cli_usage_error(ctx, "%s (or 'default')", err.msg);
                value = optarg;
            }
            if (is_connect)
                connect_timeout = value;
            else
                request_timeout = value;
            break;
        }
        case OPT_ACTIVE:
            paused = "false";
            break;
        case OPT_MAX_AGE:
            if (!parse_max_age(optarg, max_age_buf, sizeof max_age_buf))
                return cli_usage_error(ctx,
                                       "--max-age: expected a duration such as 90s, 15m, 2h or "
                                       "3d (1s to 365d), or 'none', got '%.64s'",
                                       optarg);
            max_age = max_age_buf;
            break;
        case OPT_HEADER: {
            char what[32];
            snprintf(what, sizeof what, "--header #%zu", n_headers + 1);
            if (n_headers == VALIDATE_HEADERS_MAX)
                return cli_usage_error(ctx, "--header: at most %d extra headers",
                                       VALIDATE_HEADERS_MAX);
            if (validate_header_line(what, optarg, header_names[n_headers], &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            for (size_t i = 0; i < n_headers; i++)
                if (strcasecmp(header_names[i], header_names[n_headers]) == 0)
                    return cli_usage_error(ctx, "%s: %s is given twice", what,
                                           header_names[n_headers]);
            header_lines[n_headers++] = optarg;
            break;
        }
        case OPT_CLEAR_HEADERS:
            clear_headers = true;
            break;
        case OPT_AUTH:
            if (strcmp(optarg, "oauth2") == 0) {
                oauth2 = true;
                auth = (validate_auth_parts){0};
                break;
            }
            oauth2 = false;
            if (validate_auth("--auth", optarg, &auth, &err) != 0)
                return cli_usage_error(ctx, "%s (or oauth2 with --oauth-* flags)", err.msg);
            break;
        case OPT_OAUTH_TOKEN_URL:
            if (validate_url("--oauth-token-url", optarg, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            oauth_url = optarg;
            break;
        case OPT_OAUTH_CLIENT_ID:
            if (!client_id_valid(optarg))
                return cli_usage_error(ctx, "--oauth-client-id: expected 1 to 256 bytes without "
                                            "a control character");
            oauth_id = optarg;
            break;
        case OPT_OAUTH_SECRET_FILE:
            oauth_secret_file = optarg;
            break;
        case OPT_OAUTH_SCOPE:
            if (!scope_valid(optarg))
                return cli_usage_error(ctx, "--oauth-scope: expected scope tokens of printable "
                                            "ASCII (no quote or backslash) separated by single "
                                            "spaces, at most 1024 characters");
            oauth_scope = optarg;
            break;
        case OPT_KEY_TYPE:
            if (strcmp(optarg, "hmac") != 0 && strcmp(optarg, "ed25519") != 0)
                return cli_usage_error(ctx, "--key-type: expected hmac or ed25519, got '%.32s'",
                                       optarg);
            key_type = optarg;
            break;
        case OPT_PROXY:
            if (strcmp(optarg, "direct") != 0 && strcmp(optarg, "default") != 0 &&
                proxy_url_check("--proxy", optarg, &err) != 0)
                return cli_usage_error(ctx, "%s (or 'direct' or 'default')", err.msg);
            proxy = optarg;
            break;
        case OPT_CLIENT_CERT:
            cert_file = optarg;
            break;
        case OPT_CLIENT_KEY:
            key_file = optarg;
            break;
        case OPT_CLEAR_CLIENT_CERT:
            clear_client_cert = true;
            break;
        case OPT_THROTTLE_DECREASE:
        case OPT_THROTTLE_INCREASE:
        case OPT_THROTTLE_FLOOR: {
            size_t t = 0;
            while (throttle_flags[t].opt != opt)
                t++;
            const char *value = "0"; /* "default" */
            if (strcmp(optarg, "default") != 0) {
                if (validate_double(throttle_flags[t].flag, optarg, throttle_flags[t].range, NULL,
                                    &err) != 0)
                    return cli_usage_error(ctx, "%s (or 'default')", err.msg);
                value = optarg;
            }
            throttle[t] = value;
            break;
        }
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage_error(ctx, "missing customer NAME");
    const char *name = argv[optind++];
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    if (validate_name("customer name", name, &err) != 0)
        return cli_usage_error(ctx, "%s", err.msg);
    if (clear_headers && n_headers > 0)
        return cli_usage_error(ctx, "use --header or --clear-headers, not both");
    if (!oauth2 && (oauth_url || oauth_id || oauth_secret_file || oauth_scope))
        return cli_usage_error(ctx, "--oauth-token-url, --oauth-client-id, "
                                    "--oauth-client-secret-file and --oauth-scope go with "
                                    "--auth oauth2");
    if (oauth2) {
        if (!oauth_url)
            return cli_usage_error(ctx, "--auth oauth2: --oauth-token-url is required");
        if (!oauth_id)
            return cli_usage_error(ctx, "--auth oauth2: --oauth-client-id is required");
        if (!oauth_secret_file)
            return cli_usage_error(ctx, "--auth oauth2: --oauth-client-secret-file is required "
                                        "(FILE, or - for stdin: the secret is never taken from "
                                        "the command line)");
        if (read_client_secret(oauth_secret_file, oauth_secret, sizeof oauth_secret, &err) != 0)
            return cli_usage_error(ctx, "%s", err.msg);
    }
    if (clear_client_cert && (cert_file || key_file))
        return cli_usage_error(ctx, "use --client-cert/--client-key or --clear-client-cert, not "
                                    "both");
    if ((cert_file != NULL) != (key_file != NULL))
        return cli_usage_error(ctx, "%s needs %s too (the certificate and its key go together)",
                               cert_file ? "--client-cert" : "--client-key",
                               cert_file ? "--client-key" : "--client-cert");

    if ((secret != NULL) + rotate + retire > 1)
        return cli_usage_error(ctx, "use one of --secret, --rotate-secret, --retire-old-secrets "
                                    "at a time");
    if (key_type && (secret || retire))
        return cli_usage_error(ctx, "--key-type: applies to generated secrets (--rotate-secret, "
                                    "or creating without --secret); a given secret's prefix "
                                    "says its kind");
    if (secret) {
        /* Check by signing with it: the same decoding the sender will use. A whsk_ or whpk_
         * value gets the parser's own reason (which never quotes the value). */
        char sig[SECRET_SIGNATURE_MAX];
        bool asym = strncmp(secret, SECRET_ED25519_PREFIX, 5) == 0 ||
                    strncmp(secret, SECRET_PUBLIC_PREFIX, 5) == 0;
        if (strlen(secret) > SECRET_TEXT_MAX ||
            secret_sign(secret, "check", 0, "", 0, sig, &err) != 0) {
            if (asym && strlen(secret) <= SECRET_TEXT_MAX)
                return cli_usage_error(ctx, "--secret: %s", err.msg);
            return cli_usage_error(ctx, "--secret: expected whsec_ followed by base64 of 24 to "
                                        "64 bytes, or whsk_ followed by base64 of a 32-byte "
                                        "Ed25519 seed");
        }
    }

    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;

    /* Secrets: [new] + current (rotation), first only (retire), given, or generated. */
    char secrets[600] = "";
    const char *name_param[] = {name};
    PGresult *cur = cli_query(ctx, sql_q_customer_secrets, 1, name_param);
    if (!cur)
        return CLI_FAILED;
    bool exists = PQntuples(cur) == 1;
    char current[520] = "";
    if (exists)
        snprintf(current, sizeof current, "%s", PQgetvalue(cur, 0, 0));
    PQclear(cur);
    if (!exists && (!rate || !url))
        return cli_fail(ctx, CLI_FAILED,
                        "customer '%s' does not exist; creating it needs --rate and --url", name);
    if ((rotate || retire) && !exists)
        return cli_fail(ctx, CLI_FAILED, "customer '%s' does not exist: nothing to rotate", name);
    if (key_type && exists && !rotate)
        return cli_usage_error(ctx,
                               "--key-type: customer '%s' exists; use it with "
                               "--rotate-secret to add a secret of that kind",
                               name);

    /* The generated secret's kind: --key-type, else on rotation the kind of the newest secret
     * (a customer verifying Ed25519 keeps doing so), else HMAC. */
    secret_type type = SECRET_HMAC;
    if (key_type)
        type = strcmp(key_type, "ed25519") == 0 ? SECRET_ED25519 : SECRET_HMAC;
    else if (rotate && strncmp(current, SECRET_ED25519_PREFIX, 5) == 0)
        type = SECRET_ED25519;
    char fresh[64];
    if (rotate || (!exists && !secret)) {
        if (secret_generate_type(type, fresh, sizeof fresh, &err) != 0)
            return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    }
    if (secret) {
        snprintf(secrets, sizeof secrets, "{\"%s\"}", secret);
    } else if (!exists) {
        snprintf(secrets, sizeof secrets, "{\"%s\"}", fresh);
    } else if (rotate || retire) {
        /* current is space-separated, newest first. Rotation keeps at most 3 old secrets so a
         * receiver verifies against at most 4; retiring keeps only the newest. */
        char *save = NULL;
        size_t len = (size_t)snprintf(secrets, sizeof secrets, "{");
        int kept = 0;
        if (rotate)
            len += (size_t)snprintf(secrets + len, sizeof secrets - len, "\"%s\"", fresh), kept++;
        for (char *tok = strtok_r(current, " ", &save); tok && kept < (retire ? 1 : 4);
             tok = strtok_r(NULL, " ", &save), kept++)
            len += (size_t)snprintf(secrets + len, sizeof secrets - len, "%s\"%s\"",
                                    kept ? "," : "", tok);
        snprintf(secrets + len, sizeof secrets - len, "}");
    }

    /* Read and checked here, after the checks above that need no file, so that no path
     * between this and the write has the key to free. */
    pem_pair pem = {0};
    if (cert_file) {
        int prc = load_client_cert(ctx, cert_file, key_file, &pem);
        if (prc != CLI_OK)
            return prc;
    }
    const char *params[] = {name,
                            mode,
                            rate,
                            burst,
                            url,
                            secrets[0] ? secrets : NULL,
                            max_in_flight,
                            max_attempts,
                            paused,
                            clear_max_in_flight ? "true" : "false",
                            connect_timeout,
                            request_timeout,
                            throttle[0],
                            throttle[1],
                            throttle[2],
                            max_age,
                            NULL,
                            auth.scheme,
                            auth.username[0] ? auth.username : NULL,
                            auth.secret,
                            oauth2 ? oauth_url : NULL,
                            oauth2 ? oauth_id : NULL,
                            oauth2 ? oauth_secret : NULL,
                            oauth2 ? oauth_scope : NULL};
    char *headers = NULL;
    if (n_headers > 0 || clear_headers) {
        headers = header_array(header_lines, n_headers);
        if (!headers) {
            pem_pair_free(&pem);
            return cli_fail(ctx, CLI_FAILED, "out of memory");
        }
        params[16] = headers;
    }
    /* The proxy and the client certificate have statements of their own
     * (pgpace.customer_set_proxy, customer_set_client_cert), in one transaction with the rest:
     * a customer is not left created or changed without what was asked for. A failure closes
     * the connection, which rolls it back. */
    bool with_cert = cert_file || clear_client_cert;
    bool in_tx = with_cert || proxy;
    if (in_tx && db_exec_simple(ctx->conn, "BEGIN", &err) != 0) {
        free(headers);
        pem_pair_free(&pem);
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    }
    PGresult *res = cli_query(ctx, sql_q_customer_set, (int)PGP_ARRAY_LEN(params), params);
    free(headers);
    if (oauth2)
        memset(oauth_secret, 0, sizeof oauth_secret);
    if (!res) {
        pem_pair_free(&pem);
        return CLI_FAILED;
    }
    bool created = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (proxy) {
        const char *proxy_params[] = {name, proxy};
        res = cli_query(ctx, sql_q_customer_set_proxy, 2, proxy_params);
        if (!res) {
            pem_pair_free(&pem);
            return CLI_FAILED;
        }
        PQclear(res);
    }
    if (with_cert) {
        const char *cert_params[] = {name, pem.cert, pem.key};
        res = cli_query(ctx, sql_q_customer_client_cert, 3, cert_params);
        pem_pair_free(&pem);
        if (!res)
            return CLI_FAILED;
        PQclear(res);
    }
    if (in_tx && db_exec_simple(ctx->conn, "COMMIT", &err) != 0)
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    printf("%s customer %s%s\n", created ? "created" : "updated", name,
           rotate ? " (new signing secret added; see: pgpace customer get --show-secrets)" : "");
    /* An Ed25519 secret's public key is what the receiver needs: shown at once. */
    if (rotate || !exists || secret) {
        secret_key *k = NULL;
        char pub[SECRET_PUBLIC_KEY_MAX];
        if (secret_key_parse(secret ? secret : fresh, &k, &err) == 0 &&
            secret_key_type(k) == SECRET_ED25519 && secret_key_public(k, pub, &err) == 0)
            printf("public key %s (give it to the receiver to verify v1a signatures)\n", pub);
        secret_key_free(k);
    }
    memset(fresh, 0, sizeof fresh);
    return CLI_OK;
}

/* For the space-separated secrets (newest first): their kinds, and the whpk_ public key of
 * each Ed25519 one. Public keys are not secret: the receiver needs them, so they are always
 * shown (the whsk_ itself only with --show-secrets). */
static void print_secret_kinds(const char *list)
{
    char kinds[64] = "";
    size_t klen = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, " ");
        bool ed = strncmp(p, SECRET_ED25519_PREFIX, 5) == 0;
        klen += (size_t)snprintf(kinds + klen, sizeof kinds - klen, "%s%s", klen ? " " : "",
                                 ed ? "ed25519" : "hmac");
        if (klen >= sizeof kinds)
            klen = sizeof kinds - 1;
        p += len + (p[len] == ' ');
    }
    printf("%-18s %s\n", "secret_kinds", kinds);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, " ");
        if (strncmp(p, SECRET_ED25519_PREFIX, 5) == 0) {
            char text[SECRET_TEXT_MAX + 1];
            secret_key *k = NULL;
            char pub[SECRET_PUBLIC_KEY_MAX];
            pgp_error err;
            snprintf(text, sizeof text, "%.*s", (int)len, p);
            if (secret_key_parse(text, &k, &err) == 0 && secret_key_public(k, pub, &err) == 0)
                printf("%-18s %s\n", "public_key", pub);
            else
                printf("%-18s (invalid whsk_ secret)\n", "public_key");
            secret_key_free(k);
            memset(text, 0, sizeof text);
        }
        p += len + (p[len] == ' ');
    }
}

static int customer_get(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option extra[] = {{"show-secrets", no_argument, NULL, OPT_SHOW},
                                          {NULL, 0, NULL, 0}};
    static const char usage[] = "usage: pgpace customer get NAME [--show-secrets]\n\n"
                                "Prints the customer's settings. Signing secrets, extra header "
                                "values, receiver\ncredentials and the client key are shown "
                                "only with --show-secrets; the whpk_\npublic key of each "
                                "Ed25519 (whsk_) secret always (receivers verify v1a\n"
                                "signatures with it).\n";
    int flags = 0;
    const char *name = NULL;
    int rc = parse_name_and_flags(ctx, argc, argv, usage, extra, &flags, &name);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {name};
    PGresult *res = cli_query(ctx, sql_q_customer_get, 1, params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "unknown customer '%s'", name);
    }
    bool show = flags & (1 << OPT_SHOW);
    for (int c = 0; c < PQnfields(res); c++) {
        const char *field = PQfname(res, c);
        const char *value = PQgetvalue(res, 0, c);
        if (strcmp(field, "secret_list") == 0) {
            print_secret_kinds(value);
            if (!show)
                continue;
        }
        if (strcmp(field, "headers") == 0) {
            /* One line each; without --show-secrets only the names (values are API keys). */
            if (!*value)
                printf("%-18s none\n", field);
            for (const char *line = value; *line;) {
                size_t len = strcspn(line, "\n");
                size_t name_len = strcspn(line, ":");
                if (name_len > len)
                    name_len = len;
                if (show)
                    printf("%-18s %.*s\n", field, (int)len, line);
                else
                    printf("%-18s %.*s: (hidden)\n", field, (int)name_len, line);
                line += len + (line[len] == '\n');
            }
            continue;
        }
        if (strcmp(field, "client_cert") == 0) {
            /* What identifies the certificate is shown always (none of it is secret); the PEM
             * only with --show-secrets, as it is stored among the secrets. */
            if (PQgetisnull(res, 0, c)) {
                printf("%-18s none\n", field);
                continue;
            }
            client_cert_info info;
            pgp_error err;
            if (client_cert_describe(value, strlen(value), &info, &err) != 0) {
                printf("%-18s (does not parse: %s)\n", field, err.msg);
            } else {
                time_t now = time(NULL);
                printf("%-18s %s\n", "client_cert", info.subject);
                printf("%-18s %s\n", "client_cert_issuer", info.issuer);
                printf("%-18s %s%s\n", "client_cert_until", info.not_after,
                       (int64_t)now > info.not_after_s ? " (expired)" : "");
                printf("%-18s %s\n", "client_cert_sha256", info.sha256);
                printf("%-18s %d\n", "client_cert_chain", info.chain);
            }
            if (show)
                printf("%s", value);
            continue;
        }
        if (strcmp(field, "client_key") == 0) {
            if (PQgetisnull(res, 0, c))
                continue;
            if (show)
                printf("%-18s\n%s", field, value);
            else
                printf("%-18s (hidden)\n", field);
            continue;
        }
        if (strcmp(field, "auth_credentials") == 0) {
            if (PQgetisnull(res, 0, c))
                continue;
            value = show ? value : "(hidden)";
        }
        printf("%-18s %s\n", field, value);
    }
    PQclear(res);
    return CLI_OK;
}

static int customer_list(cli_ctx *ctx, int argc, char **argv)
{
    int flags = 0;
    int rc =
        parse_name_and_flags(ctx, argc, argv, "usage: pgpace customer list\n", NULL, &flags, NULL);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    PGresult *res = cli_query(ctx, sql_q_customer_list, 0, NULL);
    if (!res)
        return CLI_FAILED;
    cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}

static int customer_pause(cli_ctx *ctx, int argc, char **argv, bool pause)
{
    int flags = 0;
    const char *name = NULL;
    int rc = parse_name_and_flags(
        ctx, argc, argv,
        pause ? "usage: pgpace customer pause NAME\n\nStops dispatching the customer's items; "
                "they stay queued.\n"
              : "usage: pgpace customer resume NAME\n",
        NULL, &flags, &name);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {name, pause ? "true" : "false"};
    PGresult *res = cli_query(ctx, sql_q_customer_pause, 2, params);
    if (!res)
        return CLI_FAILED;
    int found = PQntuples(res);
    PQclear(res);
    if (!found)
        return cli_fail(ctx, CLI_FAILED, "unknown customer '%s'", name);
    printf("%s customer %s\n", pause ? "paused" : "resumed", name);
    return CLI_OK;
}

static int customer_enable(cli_ctx *ctx, int argc, char **argv)
{
    static const char usage[] =
        "usage: pgpace customer enable NAME\n\n"
        "Re-enables a customer that health disabled ([health] disable_after): its items are\n"
        "claimed again at once and its breaker starts closed. An `enabled` event is recorded.\n"
        "A customer that is also paused stays paused until `pgpace customer resume`.\n";
    int flags = 0;
    const char *name = NULL;
    int rc = parse_name_and_flags(ctx, argc, argv, usage, NULL, &flags, &name);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {[SQL_CUSTOMER_ENABLE_P_NAME] = name};
    PGresult *res = cli_query(ctx, sql_q_customer_enable, 1, params);
    if (!res)
        return CLI_FAILED;
    bool enabled = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    printf(enabled ? "enabled customer %s\n" : "customer %s was not disabled; nothing changed\n",
           name);
    return CLI_OK;
}

static int customer_delete(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option extra[] = {{"force", no_argument, NULL, OPT_FORCE},
                                          {NULL, 0, NULL, 0}};
    static const char usage[] =
        "usage: pgpace customer delete NAME [--force]\n\n"
        "Deletes the customer. Refuses while it has pending items; --force deletes them too,\n"
        "with its dead letters.\n";
    int flags = 0;
    const char *name = NULL;
    int rc = parse_name_and_flags(ctx, argc, argv, usage, extra, &flags, &name);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[] = {name, (flags & (1 << OPT_FORCE)) ? "true" : "false"};
    PGresult *res = cli_query(ctx, sql_q_customer_delete, 2, params);
    if (!res)
        return CLI_FAILED;
    printf("deleted customer %s (%s item(s) removed)\n", name, PQgetvalue(res, 0, 0));
    PQclear(res);
    return CLI_OK;
}

int cli_customer(cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(customer_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    snprintf(ctx->command_buf, sizeof ctx->command_buf, "customer %s", sub);
    ctx->command = ctx->command_buf;
    argc--, argv++;
    if (strcmp(sub, "set") == 0)
        return customer_set(ctx, argc, argv);
    if (strcmp(sub, "get") == 0)
        return customer_get(ctx, argc, argv);
    if (strcmp(sub, "list") == 0)
        return customer_list(ctx, argc, argv);
    if (strcmp(sub, "pause") == 0)
        return customer_pause(ctx, argc, argv, true);
    if (strcmp(sub, "resume") == 0)
        return customer_pause(ctx, argc, argv, false);
    if (strcmp(sub, "enable") == 0)
        return customer_enable(ctx, argc, argv);
    if (strcmp(sub, "delete") == 0)
        return customer_delete(ctx, argc, argv);
    ctx->command = "customer";
    return cli_usage_error(
        ctx, "unknown subcommand '%s' (set, get, list, pause, resume, enable, delete)", sub);
}
