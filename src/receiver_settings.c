/* receiver_settings.c - the table of receiver settings and what reads it (receiver_settings.h). */
#include "receiver_settings.h"

#include "config.h"
#include "json_dupkey.h"
#include "proxy.h"
#include "secret.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the custom options ---- */

/* Appends text to err's message (" (or 'default')"); returns -EINVAL. */
static int append(pgp_error *err, const char *text)
{
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, "%s", text);
    return -EINVAL;
}

static int h_secret(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    /* Checked by signing with it: the same decoding the sender will use. A whsk_ or whpk_
     * value gets the parser's own reason (which never quotes the value). */
    char sig[SECRET_SIGNATURE_MAX];
    bool asym =
        strncmp(arg, SECRET_ED25519_PREFIX, 5) == 0 || strncmp(arg, SECRET_PUBLIC_PREFIX, 5) == 0;
    if (strlen(arg) > SECRET_TEXT_MAX || secret_sign(arg, "check", 0, "", 0, sig, err) != 0) {
        if (asym && strlen(arg) <= SECRET_TEXT_MAX)
            return pgp_error_prefix(err, -EINVAL, "--secret");
        return pgp_error_set(err, -EINVAL,
                             "--secret: expected whsec_ followed by base64 of 24 to 64 bytes, "
                             "or whsk_ followed by base64 of a 32-byte Ed25519 seed");
    }
    v->secret = arg;
    return 0;
}

static int h_rotate(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s, (void)arg, (void)err;
    v->rotate = true;
    return 0;
}

static int h_retire(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s, (void)arg, (void)err;
    v->retire = true;
    return 0;
}

static int h_key_type(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    if (strcmp(arg, "hmac") != 0 && strcmp(arg, "ed25519") != 0)
        return pgp_error_set(err, -EINVAL, "--key-type: expected hmac or ed25519, got '%.32s'",
                             arg);
    v->key_type = arg;
    return 0;
}

static int h_header(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    char what[32];
    snprintf(what, sizeof what, "--header #%zu", v->n_headers + 1);
    if (v->n_headers == VALIDATE_HEADERS_MAX)
        return pgp_error_set(err, -EINVAL, "--header: at most %d extra headers",
                             VALIDATE_HEADERS_MAX);
    if (validate_header_line(what, arg, v->header_names[v->n_headers], err) != 0)
        return -EINVAL;
    for (size_t i = 0; i < v->n_headers; i++)
        if (strcasecmp(v->header_names[i], v->header_names[v->n_headers]) == 0)
            return pgp_error_set(err, -EINVAL, "%s: %s is given twice", what,
                                 v->header_names[v->n_headers]);
    v->header_lines[v->n_headers++] = arg;
    return 0;
}

static int h_clear_headers(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s, (void)arg, (void)err;
    v->clear_headers = true;
    return 0;
}

static int h_auth(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    v->auth_given = true;
    v->auth = (validate_auth_parts){0};
    v->oauth2 = strcmp(arg, "oauth2") == 0;
    if (v->oauth2)
        return 0;
    if (validate_auth("--auth", arg, &v->auth, err) != 0)
        return append(err, " (or oauth2 with --oauth-* flags)");
    return 0;
}

static int h_oauth_url(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    if (validate_url("--oauth-token-url", arg, err) != 0)
        return -EINVAL;
    v->oauth_url = arg;
    return 0;
}

/* A client id: 1 to 256 bytes without control characters (CR/LF would end up in a header). */
static int h_oauth_id(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    size_t n = strlen(arg);
    bool ok = n >= 1 && n <= 256;
    for (const unsigned char *p = (const unsigned char *)arg; ok && *p; p++)
        ok = *p >= 0x20 && *p != 0x7f;
    if (!ok)
        return pgp_error_set(err, -EINVAL,
                             "--oauth-client-id: expected 1 to 256 bytes without "
                             "a control character");
    v->oauth_id = arg;
    return 0;
}

static int h_oauth_secret_file(const receiver_setting *s, const char *arg, rs_values *v,
                               pgp_error *err)
{
    (void)s, (void)err;
    v->oauth_secret_file = arg;
    return 0;
}

/* An OAuth2 scope (RFC 6749 3.3): scope-tokens of %x21 / %x23-5B / %x5D-7E separated by single
 * spaces, at most 1024 characters (pgpace.customer_set_oauth2 holds the same rule). */
static int h_oauth_scope(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    size_t n = strlen(arg);
    bool ok = n > 0 && n <= 1024 && arg[0] != ' ' && arg[n - 1] != ' ' && !strstr(arg, "  ");
    for (const unsigned char *p = (const unsigned char *)arg; ok && *p; p++)
        ok = *p == ' ' || (*p >= 0x21 && *p <= 0x7e && *p != '"' && *p != '\\');
    if (!ok)
        return pgp_error_set(err, -EINVAL,
                             "--oauth-scope: expected scope tokens of printable "
                             "ASCII (no quote or backslash) separated by single "
                             "spaces, at most 1024 characters");
    v->oauth_scope = arg;
    return 0;
}

static int h_proxy(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    if (strcmp(arg, "direct") != 0 && strcmp(arg, "default") != 0 &&
        proxy_url_check("--proxy", arg, err) != 0)
        return append(err, " (or 'direct' or 'default')");
    v->proxy = arg;
    return 0;
}

static int h_client_cert(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)err;
    if (strcmp(s->name, "client-cert") == 0)
        v->cert_file = arg;
    else
        v->key_file = arg;
    return 0;
}

static int h_clear_client_cert(const receiver_setting *s, const char *arg, rs_values *v,
                               pgp_error *err)
{
    (void)s, (void)arg, (void)err;
    v->clear_client_cert = true;
    return 0;
}

/* --events: patterns separated by commas (blanks around them dropped), each an event kind or a
 * prefix ending in '*', as pgpace.event_types_error wants them: 1 to 128 characters without
 * whitespace or control characters, '*' only at the end, at most RS_EVENTS_MAX. "" is every
 * kind. Becomes a text[] literal, every element quoted. */
static int h_events(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    free(v->events);
    v->events = NULL;
    size_t cap = 2 * strlen(arg) + 3 * RS_EVENTS_MAX + 3;
    char *out = malloc(cap);
    if (!out)
        return pgp_error_set(err, -ENOMEM, "out of memory");
    char *o = out;
    *o++ = '{';
    const char *p = arg;
    while (*p == ' ' || *p == '\t')
        p++;
    for (int n = 0; *p; n++) {
        const char *end = p + strcspn(p, ",");
        const char *last = end;
        while (last > p && (last[-1] == ' ' || last[-1] == '\t'))
            last--;
        size_t len = (size_t)(last - p);
        const char *why = NULL;
        if (n == RS_EVENTS_MAX)
            why = "at most 64 patterns";
        else if (len == 0)
            why = "is empty";
        else if (len > 128)
            why = "is longer than 128 characters";
        for (size_t i = 0; !why && i < len; i++) {
            unsigned char c = (unsigned char)p[i];
            if (c <= 0x20 || c == 0x7f)
                why = "contains whitespace or a control character";
            else if (c == '*' && i + 1 < len)
                why = "a wildcard * may only end a pattern (order.*)";
        }
        if (why) {
            free(out);
            if (n == RS_EVENTS_MAX)
                return pgp_error_set(err, -EINVAL, "--events: %s", why);
            return pgp_error_set(err, -EINVAL, "--events: pattern %d ('%.*s'): %s", n + 1,
                                 len > 64 ? 64 : (int)len, p, why);
        }
        if (n)
            *o++ = ',';
        *o++ = '"';
        for (size_t i = 0; i < len; i++) {
            if (p[i] == '"' || p[i] == '\\')
                *o++ = '\\';
            *o++ = p[i];
        }
        *o++ = '"';
        p = *end ? end + 1 : end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*end && !*p) {
            free(out);
            return pgp_error_set(err, -EINVAL, "--events: pattern %d is empty", n + 2);
        }
    }
    *o++ = '}';
    *o = '\0';
    v->events = out;
    v->events_arg = arg;
    return 0;
}

/* --limit: one window or several separated by commas (COUNT/PERIOD: 10/s, 50000/day); kept as
 * given until rs_check joins them. Only the shape a shell can get wrong is checked here (empty,
 * too many); the windows themselves are checked where they are stored
 * (pgpace.limits_normalize, whose message names the bad window), so the rule lives once. */
static int h_limit(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    if (v->n_limit_args == PGP_ARRAY_LEN(v->limit_args))
        return pgp_error_set(err, -EINVAL, "--limit: a limit has at most %d windows",
                             RS_LIMITS_MAX);
    if (arg[strspn(arg, " \t,")] == '\0')
        return pgp_error_set(err, -EINVAL,
                             "--limit: expected COUNT/PERIOD, e.g. 10/s or 50000/day");
    v->limit_args[v->n_limit_args++] = arg;
    return 0;
}

static int h_no_limits(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s, (void)arg, (void)err;
    v->no_limits = true;
    return 0;
}

static int h_ratelimit_headers(const receiver_setting *s, const char *arg, rs_values *v,
                               pgp_error *err)
{
    (void)s;
    if (strcmp(arg, "on") == 0)
        v->param[SQL_CUSTOMER_SET_P_RATELIMIT_HEADERS] = "true";
    else if (strcmp(arg, "off") == 0)
        v->param[SQL_CUSTOMER_SET_P_RATELIMIT_HEADERS] = "false";
    else
        return pgp_error_set(err, -EINVAL, "--ratelimit-headers: expected on or off, got '%.32s'",
                             arg);
    return 0;
}

static int h_order_on_dead(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    if (strcmp(arg, "skip") != 0 && strcmp(arg, "hold") != 0)
        return pgp_error_set(err, -EINVAL, "--order-on-dead: expected skip or hold, got '%.32s'",
                             arg);
    v->param[SQL_CUSTOMER_SET_P_ORDER_ON_DEAD] = arg;
    return 0;
}

char *rs_limits_literal(const char *const *args, size_t n_args, pgp_error *err)
{
    size_t cap = 3;
    for (size_t i = 0; i < n_args; i++)
        cap += 3 * strlen(args[i]) + 3;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    char *o = out;
    *o++ = '{';
    int n = 0;
    for (size_t i = 0; i < n_args; i++) {
        for (const char *p = args[i]; *p;) {
            p += strspn(p, " \t");
            size_t len = strcspn(p, ",");
            size_t trimmed = len;
            while (trimmed > 0 && (p[trimmed - 1] == ' ' || p[trimmed - 1] == '\t'))
                trimmed--;
            if (trimmed > 0) {
                if (++n > RS_LIMITS_MAX) {
                    free(out);
                    pgp_error_set(err, -EINVAL, "--limit: a limit has at most %d windows, got %d",
                                  RS_LIMITS_MAX, n);
                    return strdup("");
                }
                if (n > 1)
                    *o++ = ',';
                *o++ = '"';
                for (size_t j = 0; j < trimmed; j++) {
                    if (p[j] == '"' || p[j] == '\\')
                        *o++ = '\\';
                    *o++ = p[j];
                }
                *o++ = '"';
            }
            p += len + (p[len] == ',');
        }
    }
    *o++ = '}';
    *o = '\0';
    return out;
}

/* --filter: a JSON object the payload must contain (PostgreSQL's @>); checked here so that the
 * message names the option and says where the JSON went wrong. */
static int h_filter(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s;
    json_error_t jerr;
    json_t *j = json_loads(arg, JSON_DECODE_ANY, &jerr);
    if (!j)
        return pgp_error_set(err, -EINVAL, "--filter: not JSON: %.200s (at character %d)",
                             jerr.text, jerr.position);
    /* One reading (json_dupkey.h): {"region":"eu","region":"us"} would be stored as the last. */
    char where[160];
    if (json_dupkey(arg, strlen(arg), where, sizeof where) == 1) {
        json_decref(j);
        return pgp_error_set(err, -EINVAL,
                             "--filter: duplicate member %s: an object names it twice", where);
    }
    bool object = json_is_object(j);
    const char *type = json_is_array(j)    ? "an array"
                       : json_is_string(j) ? "a string"
                       : json_is_number(j) ? "a number"
                       : json_is_null(j)   ? "null"
                                           : "a boolean";
    json_decref(j);
    if (!object)
        return pgp_error_set(err, -EINVAL,
                             "--filter: must be a JSON object such as {\"region\":\"eu\"} (a "
                             "payload matches when it contains it), got %s",
                             type);
    v->filter = arg;
    return 0;
}

static int h_no_filter(const receiver_setting *s, const char *arg, rs_values *v, pgp_error *err)
{
    (void)s, (void)arg, (void)err;
    v->no_filter = true;
    return 0;
}

/* ---- the table ---- */

/* The paragraphs of the help, by a row's `group`. */
static const char *const rs_groups[] = {
    "Which events it receives (endpoints):",
    NULL,
    "What the receiver requires besides the signature (secrets: shown only by 'get\n"
    "--show-secrets', never logged):",
    "Egress proxy (see [delivery] proxy):",
    "Pacing that listens to the receiver (429, or 503 with Retry-After, lowers the effective\n"
    "rate; each success raises it again, up to --rate). 'default' uses the [delivery] setting:",
    "Limit windows (README, \"Limits\"): every window applies beside --rate, the pace is the\n"
    "slowest of them; a spaced or batch receiver with windows needs no --rate:",
};
enum { G_ROUTING, G_MAIN, G_AUTH, G_PROXY, G_THROTTLE, G_LIMITS };

#define P(x) SQL_CUSTOMER_SET_P_##x
#define NONE (-1)

/* clang-format off */
const receiver_setting receiver_settings[] = {
    {.name = "events", .arg = "'P1,P2,...'", .scope = RS_ROUTING, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_events,
     .column = "event_types", .call = "endpoint_add, endpoint_set_routing",
     .deflt = "every kind",
     .help = "the event kinds it receives, separated by commas: exact kinds\n"
             "(invoice.paid) or prefixes ending in * (order.*), at most 64; ''\n"
             "for every kind",
     .group = G_ROUTING},
    {.name = "filter", .arg = "JSON", .scope = RS_ROUTING, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_filter,
     .column = "payload_filter", .call = "endpoint_add, endpoint_set_routing",
     .deflt = "none (any payload)",
     .help = "a JSON object the payload must contain to be sent here, e.g.\n"
             "'{\"region\":\"eu\"}' (PostgreSQL's @>)",
     .group = G_ROUTING},
    {.name = "no-filter", .scope = RS_ENDPOINT_SET, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_no_filter,
     .column = "payload_filter", .call = "endpoint_set_routing",
     .help = "remove the payload filter", .group = G_ROUTING},

    {.name = "rate", .arg = "R", .scope = RS_RECEIVER, .kind = RS_RATE,
     .param = P(RATE), .word_param = NONE,
     .column = "rate_per_minute", .call = "customer_set", .deflt = "required to create",
     .help = "items per minute, > 0, fractions allowed (0.5 = one every 2 min);\n"
             "a customer's rate is its limit over all of its endpoints (its own\n"
             "receiver included), an endpoint's its receiver's",
     .group = G_MAIN},
    {.name = "mode", .arg = "M", .scope = RS_RECEIVER, .kind = RS_MODE,
     .param = P(MODE), .word_param = NONE,
     .column = "mode", .call = "customer_set", .deflt = "spaced",
     .help = "spaced (default): one item every 60/R s, GCRA with --burst;\n"
             "batch: up to R items per tick, delivered at once;\n"
             "unlimited: plain work queue, as fast as deliveries allow",
     .group = G_MAIN},
    {.name = "burst", .arg = "N", .scope = RS_RECEIVER, .kind = RS_INT, .min = 1, .max = 1000000,
     .param = P(BURST), .word_param = NONE,
     .column = "burst", .call = "customer_set", .deflt = "1",
     .help = "spaced mode: items that may go back to back after idling (>= 1)", .group = G_MAIN},
    {.name = "url", .arg = "URL", .scope = RS_RECEIVER, .kind = RS_URL,
     .param = P(URL), .word_param = NONE,
     .column = "webhook_url", .call = "customer_set", .deflt = "none",
     .help = "webhook endpoint, http:// or https:// (an endpoint's is required;\n"
             "a customer without one has no receiver of its own: its endpoints\n"
             "receive its events)",
     .group = G_MAIN},
    {.name = "secret", .arg = "S", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_secret,
     .column = "signing_secrets", .call = "customer_set", .deflt = "generated (hmac)",
     .help = "set the signing secret: whsec_... (HMAC-SHA256, v1 signatures) or\n"
             "whsk_... (Ed25519, v1a: receivers verify with the whpk_ public\n"
             "key 'get' shows); generated when creating",
     .group = G_MAIN},
    {.name = "rotate-secret", .scope = RS_CUSTOMER | RS_ENDPOINT_SET, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_rotate,
     .column = "signing_secrets", .call = "customer_set",
     .help = "add a new generated secret; old ones keep signing until retired",
     .group = G_MAIN},
    {.name = "key-type", .arg = "hmac|ed25519", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_key_type,
     .column = "signing_secrets", .call = "customer_set", .deflt = "hmac",
     .help = "the kind of secret generated (--rotate-secret: default the\n"
             "kind of the newest secret; creating: hmac)",
     .group = G_MAIN},
    {.name = "retire-old-secrets", .scope = RS_CUSTOMER | RS_ENDPOINT_SET, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_retire,
     .column = "signing_secrets", .call = "customer_set",
     .help = "keep only the newest secret", .group = G_MAIN},
    {.name = "max-in-flight", .arg = "N|none", .scope = RS_RECEIVER, .kind = RS_INT,
     .min = 1, .max = 1000000, .word = "none", .word_value = "true",
     .word_param = P(CLEAR_MAX_IN_FLIGHT), .param = P(MAX_IN_FLIGHT),
     .column = "max_in_flight", .call = "customer_set", .deflt = "none (unlimited)",
     .help = "most outstanding deliveries for this receiver ('none': no limit)",
     .group = G_MAIN},
    {.name = "max-attempts", .arg = "N", .scope = RS_RECEIVER, .kind = RS_INT,
     .min = 1, .max = 1000, .param = P(MAX_ATTEMPTS), .word_param = NONE,
     .column = "max_attempts", .call = "customer_set", .deflt = "12",
     .help = "attempts before an item is dead-lettered (1-1000, default 12)", .group = G_MAIN},
    {.name = "paused", .scope = RS_RECEIVER, .kind = RS_FLAG, .value = "true",
     .param = P(PAUSED), .word_param = NONE,
     .column = "paused", .call = "customer_set", .deflt = "active",
     .usage = "--paused / --active",
     .help = "pause or resume (same as pause / resume)", .group = G_MAIN},
    {.name = "active", .scope = RS_RECEIVER, .kind = RS_FLAG, .value = "false",
     .param = P(PAUSED), .word_param = NONE,
     .column = "paused", .call = "customer_set", .group = G_MAIN},
    {.name = "connect-timeout-ms", .arg = "N|default", .scope = RS_RECEIVER, .kind = RS_INT,
     .min = 100, .max = 600000, .word = "default", .word_value = "0", .word_param = NONE,
     .param = P(CONNECT_TIMEOUT_MS),
     .column = "connect_timeout_ms", .call = "customer_set_timeouts",
     .deflt = "[delivery] connect_timeout_ms",
     .help = "TCP/TLS connect timeout for this receiver's webhooks", .group = G_MAIN},
    {.name = "request-timeout-ms", .arg = "N|default", .scope = RS_RECEIVER, .kind = RS_INT,
     .min = 100, .max = 3600000, .word = "default", .word_value = "0", .word_param = NONE,
     .param = P(REQUEST_TIMEOUT_MS),
     .column = "request_timeout_ms", .call = "customer_set_timeouts",
     .deflt = "[delivery] request_timeout_ms",
     .help = "total time allowed per webhook request", .group = G_MAIN},
    {.name = "max-age", .arg = "D|none", .scope = RS_RECEIVER, .kind = RS_DURATION,
     .word = "none", .word_value = "0", .word_param = NONE, .param = P(MAX_AGE),
     .column = "max_age", .call = "customer_set_max_age", .deflt = "none",
     .help = "items not sent within D of being due (their run_at, or their\n"
             "enqueue) are dead-lettered as 'expired': 90s, 15m, 2h, 3d (at\n"
             "most 365d); applies to items enqueued from then on",
     .group = G_MAIN},
    {.name = "order-on-dead", .arg = "skip|hold", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_order_on_dead,
     .column = "order_on_dead", .call = "customer_set_order_on_dead", .deflt = "skip",
     .help = "what a dead-lettered item with an order key does to its key: skip\n"
             "lets the key's next item go (its dead letter says so), hold stops\n"
             "the key until the item is replayed or purged (pgpace dlq)",
     .group = G_MAIN},

    {.name = "limit", .arg = "W", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_limit,
     .column = "limits", .call = "customer_set, endpoint_add", .deflt = "none",
     .usage = "--limit COUNT/PERIOD",
     .help = "at most COUNT sends in any PERIOD (a sliding window): 10/s,\n"
             "600/min, 100/10s, 50000/day; PERIOD 1s to 7day. Repeat it, or\n"
             "separate windows by commas, for several (at most 8, one per\n"
             "period); the given ones replace the receiver's whole list",
     .group = G_LIMITS},
    {.name = "no-limits", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_no_limits,
     .column = "limits", .call = "customer_set",
     .help = "remove every limit window", .group = G_LIMITS},
    {.name = "ratelimit-headers", .arg = "on|off", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_ratelimit_headers,
     .column = "ratelimit_headers", .call = "customer_set, endpoint_add", .deflt = "on",
     .help = "follow the limit the receiver announces in its answers (RateLimit,\n"
             "RateLimit-Policy, X-RateLimit-*): never above the configured one",
     .group = G_LIMITS},

    {.name = "header", .arg = "'Name: value'", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_header,
     .column = "extra_headers", .call = "customer_set_headers", .deflt = "none",
     .help = "an extra header sent with every webhook; repeat it for more (at\n"
             "most 20). The given ones replace the receiver's whole set. Names\n"
             "are HTTP tokens (at most 64); webhook-*, content-type,\n"
             "content-length, host, user-agent, authorization, transfer-encoding,\n"
             "connection, traceparent, tracestate, expect, keep-alive, te,\n"
             "trailer, upgrade, proxy-connection are reserved; values 1 to 4096\n"
             "bytes without control characters",
     .group = G_AUTH},
    {.name = "clear-headers", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_clear_headers,
     .column = "extra_headers", .call = "customer_set_headers",
     .help = "remove every extra header", .group = G_AUTH},
    {.name = "auth", .arg = "basic:USER:PASSWORD | bearer:TOKEN | none", .scope = RS_RECEIVER,
     .kind = RS_CUSTOM, .param = NONE, .word_param = NONE, .handler = h_auth,
     .column = "auth_scheme, auth_username, auth_secret", .call = "customer_set_auth",
     .deflt = "none",
     .help = "the Authorization header: Basic (USER without a colon) or Bearer\n"
             "(a token68 token), or none",
     .group = G_AUTH},
    {.name = "oauth-token-url", .arg = "URL", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_oauth_url,
     .column = "auth_scheme, auth_username, auth_secret, oauth_token_url, oauth_scope",
     .call = "customer_set_oauth2", .deflt = "none",
     .usage = "--auth oauth2 --oauth-token-url URL --oauth-client-id ID\n"
              "        --oauth-client-secret-file FILE|- [--oauth-scope 'S1 S2']",
     .help = "OAuth2 client credentials (RFC 6749 4.4): the dispatcher fetches\n"
             "an access token from URL (http/https) with the client id and\n"
             "secret, caches it until shortly before it expires and sends it as\n"
             "Bearer; the secret (1 to 1024 bytes) is read from FILE, or from\n"
             "stdin with '-' (one trailing newline dropped), never from argv",
     .group = G_AUTH},
    {.name = "oauth-client-id", .arg = "ID", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_oauth_id,
     .column = "auth_username", .call = "customer_set_oauth2", .group = G_AUTH},
    {.name = "oauth-client-secret-file", .arg = "FILE|-", .scope = RS_RECEIVER,
     .kind = RS_CUSTOM, .param = NONE, .word_param = NONE, .handler = h_oauth_secret_file,
     .column = "auth_secret", .call = "customer_set_oauth2", .group = G_AUTH},
    {.name = "oauth-scope", .arg = "'S1 S2'", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_oauth_scope,
     .column = "oauth_scope", .call = "customer_set_oauth2", .group = G_AUTH},
    {.name = "client-cert", .arg = "FILE", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_client_cert,
     .column = "client_cert, client_key", .call = "customer_set_client_cert", .deflt = "none",
     .usage = "--client-cert FILE --client-key FILE",
     .help = "mutual TLS: the client certificate (PEM, the leaf first, then any\n"
             "intermediates) and its unencrypted private key (PEM) presented to\n"
             "the receiver; read from the files (at most 64 KiB each), checked\n"
             "before anything is written: both parse, the key matches, the\n"
             "certificate is valid now",
     .group = G_AUTH},
    {.name = "client-key", .arg = "FILE", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_client_cert,
     .column = "client_key", .call = "customer_set_client_cert", .group = G_AUTH},
    {.name = "clear-client-cert", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_clear_client_cert,
     .column = "client_cert, client_key", .call = "customer_set_client_cert",
     .help = "remove the client certificate and key", .group = G_AUTH},

    {.name = "proxy", .arg = "URL|direct|default", .scope = RS_RECEIVER, .kind = RS_CUSTOM,
     .param = NONE, .word_param = NONE, .handler = h_proxy,
     .column = "proxy", .call = "customer_set_proxy", .deflt = "default",
     .help = "send this receiver's webhooks through its own HTTP CONNECT\n"
             "proxy (http://HOST:PORT, no credentials), never through a proxy\n"
             "(direct), or as configured ([delivery] proxy and no_proxy)",
     .group = G_PROXY},

    {.name = "throttle-decrease", .arg = "F|default", .scope = RS_RECEIVER, .kind = RS_DOUBLE,
     .range = &config_throttle_decrease_range, .word = "default", .word_value = "0",
     .word_param = NONE, .param = P(THROTTLE_DECREASE),
     .column = "throttle_decrease", .call = "customer_set_throttle",
     .deflt = "[delivery] throttle_decrease",
     .help = "rate multiplied by F on a throttled answer", .group = G_THROTTLE},
    {.name = "throttle-increase", .arg = "F|default", .scope = RS_RECEIVER, .kind = RS_DOUBLE,
     .range = &config_throttle_increase_range, .word = "default", .word_value = "0",
     .word_param = NONE, .param = P(THROTTLE_INCREASE),
     .column = "throttle_increase", .call = "customer_set_throttle",
     .deflt = "[delivery] throttle_increase",
     .help = "fraction of --rate regained per success", .group = G_THROTTLE},
    {.name = "throttle-floor", .arg = "F|default", .scope = RS_RECEIVER, .kind = RS_DOUBLE,
     .range = &config_throttle_floor_range, .word = "default", .word_value = "0",
     .word_param = NONE, .param = P(THROTTLE_FLOOR),
     .column = "throttle_floor", .call = "customer_set_throttle",
     .deflt = "[delivery] throttle_floor",
     .help = "lowest effective rate, as a fraction of --rate", .group = G_THROTTLE},
};
/* clang-format on */
const size_t receiver_settings_count = PGP_ARRAY_LEN(receiver_settings);

/* ---- parsing ---- */

int rs_long_options(unsigned scope, const struct option *common, int base, struct option *out,
                    size_t cap)
{
    size_t n = 0;
    for (; common && common->name; common++) {
        if (n + 1 >= cap)
            return -1;
        out[n++] = *common;
    }
    for (size_t i = 0; i < receiver_settings_count; i++) {
        const receiver_setting *s = &receiver_settings[i];
        if (!(s->scope & scope))
            continue;
        if (n + 1 >= cap)
            return -1;
        out[n++] =
            (struct option){s->name, s->arg ? required_argument : no_argument, NULL, base + (int)i};
    }
    out[n] = (struct option){NULL, 0, NULL, 0};
    return (int)n;
}

/* --max-age: a whole number of seconds, minutes, hours or days ("90s", "15m", "2h", "3d"), at
 * most 365 days, or "none". Writes the interval for SQL ("5400 seconds"; "0" for none) to out;
 * returns false for anything else. */
static bool parse_duration(const char *s, char *out, size_t n)
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

int rs_take(size_t index, const char *arg, rs_values *v, pgp_error *err)
{
    if (index >= receiver_settings_count)
        return pgp_error_set(err, -EINVAL, "unknown setting");
    const receiver_setting *s = &receiver_settings[index];
    char what[48];
    snprintf(what, sizeof what, "--%s", s->name);
    if (s->word && s->kind != RS_DURATION && strcmp(arg, s->word) == 0) {
        if (s->word_param >= 0) {
            v->param[s->word_param] = s->word_value;
            v->param[s->param] = NULL;
        } else {
            v->param[s->param] = s->word_value;
        }
        return 0;
    }
    double d;
    long long i;
    int rc = 0;
    switch (s->kind) {
    case RS_FLAG:
        v->param[s->param] = s->value;
        return 0;
    case RS_RATE:
        rc = validate_rate(what, arg, &d, err);
        break;
    case RS_INT:
        rc = validate_int(what, arg, s->min, s->max, &i, err);
        break;
    case RS_DOUBLE:
        rc = validate_double(what, arg, s->range, NULL, err);
        break;
    case RS_MODE:
        rc = validate_mode(what, arg, err);
        break;
    case RS_URL:
        rc = validate_url(what, arg, err);
        break;
    case RS_DURATION:
        if (!parse_duration(arg, v->max_age, sizeof v->max_age))
            return pgp_error_set(err, -EINVAL,
                                 "%s: expected a duration such as 90s, 15m, 2h or 3d (1s to "
                                 "365d), or 'none', got '%.64s'",
                                 what, arg);
        v->param[s->param] = v->max_age;
        return 0;
    case RS_CUSTOM:
        return s->handler(s, arg, v, err);
    }
    if (rc != 0) {
        if (s->word) {
            char or_word[32];
            snprintf(or_word, sizeof or_word, " (or '%s')", s->word);
            return append(err, or_word);
        }
        return -EINVAL;
    }
    v->param[s->param] = arg;
    if (s->word_param >= 0)
        v->param[s->word_param] = NULL;
    return 0;
}

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
        return pgp_error_set(err, -EINVAL, "%s: cannot open '%.200s': %s", flag, path,
                             strerror(errno));
    size_t n = fread(out, 1, cap - 1, f);
    bool failed = ferror(f) != 0;
    if (f != stdin)
        fclose(f);
    if (failed)
        return pgp_error_set(err, -EINVAL, "%s: cannot read '%.200s'", flag, path);
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

int rs_check(rs_values *v, pgp_error *err)
{
    if (v->clear_headers && v->n_headers > 0)
        return pgp_error_set(err, -EINVAL, "use --header or --clear-headers, not both");
    if (!v->oauth2 && (v->oauth_url || v->oauth_id || v->oauth_secret_file || v->oauth_scope))
        return pgp_error_set(err, -EINVAL,
                             "--oauth-token-url, --oauth-client-id, --oauth-client-secret-file "
                             "and --oauth-scope go with --auth oauth2");
    if (v->oauth2) {
        if (!v->oauth_url)
            return pgp_error_set(err, -EINVAL, "--auth oauth2: --oauth-token-url is required");
        if (!v->oauth_id)
            return pgp_error_set(err, -EINVAL, "--auth oauth2: --oauth-client-id is required");
        if (!v->oauth_secret_file)
            return pgp_error_set(err, -EINVAL,
                                 "--auth oauth2: --oauth-client-secret-file is required (FILE, "
                                 "or - for stdin: the secret is never taken from the command "
                                 "line)");
        if (read_client_secret(v->oauth_secret_file, v->oauth_secret, sizeof v->oauth_secret,
                               err) != 0)
            return -EINVAL;
    }
    if (v->clear_client_cert && (v->cert_file || v->key_file))
        return pgp_error_set(err, -EINVAL,
                             "use --client-cert/--client-key or --clear-client-cert, not both");
    if ((v->cert_file != NULL) != (v->key_file != NULL))
        return pgp_error_set(err, -EINVAL,
                             "%s needs %s too (the certificate and its key go together)",
                             v->cert_file ? "--client-cert" : "--client-key",
                             v->cert_file ? "--client-key" : "--client-cert");
    if ((v->secret != NULL) + v->rotate + v->retire > 1)
        return pgp_error_set(err, -EINVAL,
                             "use one of --secret, --rotate-secret, --retire-old-secrets at a "
                             "time");
    if (v->key_type && (v->secret || v->retire))
        return pgp_error_set(err, -EINVAL,
                             "--key-type: applies to generated secrets (--rotate-secret, or "
                             "creating without --secret); a given secret's prefix says its kind");
    if (v->filter && v->no_filter)
        return pgp_error_set(err, -EINVAL, "use --filter or --no-filter, not both");
    if (v->n_limit_args > 0 && v->no_limits)
        return pgp_error_set(err, -EINVAL, "use --limit or --no-limits, not both");
    if (v->n_limit_args > 0 || v->no_limits) {
        free(v->limits);
        v->limits = rs_limits_literal(v->limit_args, v->n_limit_args, err);
        if (!v->limits)
            return pgp_error_set(err, -ENOMEM, "out of memory");
        if (!v->limits[0])
            return -EINVAL;
        v->param[P(LIMITS)] = v->limits;
    }

    if (v->n_headers > 0 || v->clear_headers) {
        free(v->headers);
        v->headers = header_array(v->header_lines, v->n_headers);
        if (!v->headers)
            return pgp_error_set(err, -ENOMEM, "out of memory");
        v->param[P(HEADERS)] = v->headers;
    }
    v->param[P(AUTH_SCHEME)] = v->auth.scheme;
    v->param[P(AUTH_USERNAME)] = v->auth.username[0] ? v->auth.username : NULL;
    v->param[P(AUTH_SECRET)] = v->auth.secret;
    v->param[P(OAUTH_TOKEN_URL)] = v->oauth2 ? v->oauth_url : NULL;
    v->param[P(OAUTH_CLIENT_ID)] = v->oauth2 ? v->oauth_id : NULL;
    v->param[P(OAUTH_CLIENT_SECRET)] = v->oauth2 ? v->oauth_secret : NULL;
    v->param[P(OAUTH_SCOPE)] = v->oauth2 ? v->oauth_scope : NULL;
    return 0;
}

bool rs_any_param(const rs_values *v)
{
    for (int i = 0; i < RS_NPARAMS; i++)
        if (i != P(NAME) && v->param[i])
            return true;
    return false;
}

void rs_values_free(rs_values *v)
{
    explicit_bzero(v->oauth_secret, sizeof v->oauth_secret);
    free(v->headers);
    v->headers = NULL;
    free(v->events);
    v->events = NULL;
    free(v->limits);
    v->limits = NULL;
}

/* ---- documentation ---- */

/* The option as the help spells it: the row's usage, or "--name arg". */
static void usage_of(const receiver_setting *s, char *buf, size_t n)
{
    if (s->usage)
        snprintf(buf, n, "%s", s->usage);
    else
        snprintf(buf, n, "--%s%s%s", s->name, s->arg ? " " : "", s->arg ? s->arg : "");
}

/* A range as "0 < F <= 1". */
static void range_math(char *buf, size_t n, const double_range *r, const char *var)
{
    snprintf(buf, n, "%g %s %s %s %g", r->min, r->min_inclusive ? "<=" : "<", var,
             r->max_inclusive ? "<=" : "<", r->max);
}

void rs_help(FILE *out, unsigned scope)
{
    int group = -1;
    bool first = true;
    for (size_t i = 0; i < receiver_settings_count; i++) {
        const receiver_setting *s = &receiver_settings[i];
        if (!(s->scope & scope) || !s->help)
            continue;
        if (s->group != group) {
            group = s->group;
            if (!first)
                fputc('\n', out);
            if (rs_groups[group])
                fprintf(out, "%s\n", rs_groups[group]);
        }
        first = false;
        char usage[256];
        usage_of(s, usage, sizeof usage);
        /* The help starts in column 24: beside a short option, two spaces after a longer one,
         * on the next line after one that takes more than a line. */
        size_t len = strlen(usage);
        char with_range[512];
        const char *help = s->help;
        if (s->kind == RS_DOUBLE) {
            char range[64];
            range_math(range, sizeof range, s->range, "F");
            snprintf(with_range, sizeof with_range, "%s (%s)", s->help, range);
            help = with_range;
        }
        size_t line = strcspn(help, "\n");
        if (strchr(usage, '\n') || 4 + len + line > 96)
            fprintf(out, "  %s\n%24s%.*s\n", usage, "", (int)line, help);
        else
            fprintf(out, "  %-*s%.*s\n", len <= 20 ? 22 : (int)len + 2, usage, (int)line, help);
        for (help += line; *help == '\n';) {
            help++;
            line = strcspn(help, "\n");
            fprintf(out, "%24s%.*s\n", "", (int)line, help);
            help += line;
        }
    }
}

/* The value a row takes, in words: its form and range. */
static void value_of(const receiver_setting *s, char *buf, size_t n)
{
    char range[128] = "";
    switch (s->kind) {
    case RS_RATE:
        snprintf(range, sizeof range, "a number > 0");
        break;
    case RS_INT:
        snprintf(range, sizeof range, "%lld to %lld", s->min, s->max);
        break;
    case RS_DOUBLE:
        validate_double_range(range, sizeof range, s->range);
        break;
    case RS_DURATION:
        snprintf(range, sizeof range, "1s to 365d");
        break;
    default:
        break;
    }
    if (!s->arg)
        snprintf(buf, n, "(a flag)");
    else if (range[0])
        snprintf(buf, n, "`%s`: %s", s->arg, range);
    else
        snprintf(buf, n, "`%s`", s->arg);
}

/* Writes text for a Markdown table cell: '|' and '*' escaped, line breaks as spaces. */
static void put_cell(FILE *out, const char *text)
{
    for (const char *c = text; *c; c++) {
        if (*c == '\n')
            fputc(' ', out);
        else if (*c == '|' || *c == '*')
            fprintf(out, "\\%c", *c);
        else
            fputc(*c, out);
    }
}

void rs_markdown(FILE *out)
{
    fputs("| Option | Value | Default | Commands | Column (`pgpace.customer`) | Written by | "
          "What it does |\n",
          out);
    fputs("| --- | --- | --- | --- | --- | --- | --- |\n", out);
    for (size_t i = 0; i < receiver_settings_count; i++) {
        const receiver_setting *s = &receiver_settings[i];
        if (!s->help)
            continue;
        fputs("| ", out);
        /* The rows explained with this one share its line. */
        for (size_t j = i; j < receiver_settings_count && (j == i || !receiver_settings[j].help);
             j++)
            fprintf(out, "%s`--%s`", j == i ? "" : ", ", receiver_settings[j].name);
        char value[192];
        value_of(s, value, sizeof value);
        fputs(" | ", out);
        put_cell(out, value);
        fputs(" | ", out);
        put_cell(out, s->deflt ? s->deflt : "-");
        fprintf(out, " | %s%s%s | ", s->scope & RS_CUSTOMER ? "customer set" : "",
                (s->scope & RS_CUSTOMER) && (s->scope & RS_ROUTING) ? ", " : "",
                (s->scope & RS_ROUTING) == RS_ROUTING ? "endpoint add, set"
                : s->scope & RS_ENDPOINT_SET          ? "endpoint set"
                : s->scope & RS_ENDPOINT_ADD          ? "endpoint add"
                                                      : "");
        fprintf(out, "`%s` | `pgpace.%s` | ", s->column, s->call);
        put_cell(out, s->help);
        fputs(" |\n", out);
    }
}

/* Writes text for scdoc: '_' and '*' escaped (they would start emphasis). */
static void put_scd(FILE *out, const char *text, const char *newline)
{
    for (const char *c = text; *c; c++) {
        if (*c == '\n')
            fputs(newline, out);
        else if (*c == '_' || *c == '*' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else
            fputc(*c, out);
    }
}

/* An option's usage for scdoc: options in bold, their values underlined ('...' one value). */
static void put_scd_usage(FILE *out, const char *usage)
{
    for (const char *p = usage; *p;) {
        size_t blank = strspn(p, " \n");
        if (blank) {
            fputc(' ', out);
            p += blank;
            continue;
        }
        bool bracket = p[0] == '[';
        if (bracket) {
            fputc('[', out);
            p++;
        }
        size_t len = p[0] == '\'' && strchr(p + 1, '\'') ? (size_t)(strchr(p + 1, '\'') - p + 1)
                                                         : strcspn(p, " \n]");
        char word[256];
        snprintf(word, sizeof word, "%.*s", (int)len, p);
        if (strncmp(word, "--", 2) == 0) {
            fprintf(out, "*%s*", word);
        } else if (strcmp(word, "/") == 0 || strcmp(word, "|") == 0) {
            fputs(word, out);
        } else {
            fputc('_', out);
            put_scd(out, word, " ");
            fputc('_', out);
        }
        p += len;
        if (*p == ']')
            fputc(*p++, out);
    }
}

void rs_man(FILE *out, unsigned scope, unsigned exclude, bool full)
{
    bool first = true;
    size_t column = 0;
    for (size_t i = 0; i < receiver_settings_count; i++) {
        const receiver_setting *s = &receiver_settings[i];
        if (!(s->scope & scope) || (s->scope & exclude))
            continue;
        if (!full) {
            /* Names in a paragraph of lines of at most 96 characters. */
            size_t len = strlen(s->name) + 4;
            if (!first && column + 2 + len > 96) {
                fputs(",\n", out);
                column = 0;
            } else if (!first) {
                fputs(", ", out);
                column += 2;
            }
            fprintf(out, "*--%s*", s->name);
            column += len;
            first = false;
            continue;
        }
        if (!s->help)
            continue;
        char usage[256];
        usage_of(s, usage, sizeof usage);
        fputs(first ? "" : "\n", out);
        first = false;
        if (s->usage || !s->arg) {
            put_scd_usage(out, usage);
        } else {
            /* The value as one: "basic:USER:PASSWORD | bearer:TOKEN | none". */
            fprintf(out, "*--%s* _", s->name);
            put_scd(out, s->arg, " ");
            fputc('_', out);
        }
        /* The rows explained with this one (--active beside --paused). */
        for (size_t j = i + 1; j < receiver_settings_count && !receiver_settings[j].help; j++)
            if (!strstr(usage, receiver_settings[j].name))
                fprintf(out, ", *--%s*", receiver_settings[j].name);
        fputs("\n\t", out);
        put_scd(out, s->help, "\n\t");
        fputs("\n", out);
    }
    if (!full && !first)
        fputs("\n", out);
}
