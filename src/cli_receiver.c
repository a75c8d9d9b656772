/* cli_receiver.c - the receiver settings of one pgpace.customer row from the command line
 * (cli_receiver.h). */
#include "cli_receiver.h"

#include "client_cert.h"
#include "db.h"
#include "netcheck.h"
#include "secret.h"
#include "sql_embed.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* getopt values of the settings: OPT_BASE + their row in receiver_settings[]. */
enum { OPT_BASE = 2000 };

int cli_receiver_options(cli_ctx *ctx, int argc, char **argv, unsigned scope, const char *help_head,
                         const char *help_tail, rs_values *v)
{
    static const struct option common[] = {CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
    struct option opts[80];
    if (rs_long_options(scope, common, OPT_BASE, opts, PGP_ARRAY_LEN(opts)) < 0)
        return cli_fail(ctx, CLI_FAILED, "too many options");
    pgp_error err;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(help_head, stdout);
            rs_help(stdout, scope);
            if (help_tail)
                fputs(help_tail, stdout);
            return CLI_HELP_SHOWN;
        }
        if (opt < OPT_BASE || (size_t)(opt - OPT_BASE) >= receiver_settings_count)
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        int rc = rs_take((size_t)(opt - OPT_BASE), optarg, v, &err);
        if (rc == -ENOMEM)
            return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
        if (rc != 0)
            return cli_usage_error(ctx, "%s", err.msg);
    }
    return CLI_OK;
}

int cli_receiver_url_check(cli_ctx *ctx, const char *flag, const char *url)
{
    int status = cli_load_config(ctx);
    if (status != CLI_OK)
        return status;
    netcheck_allow allow;
    pgp_error err;
    if (netcheck_parse_allow(ctx->cfg.allow_cidrs, &allow, &err) != 0)
        return cli_fail(ctx, CLI_FAILED, "[delivery] allow_cidrs: %s", err.msg);
    const char *reason = NULL;
    if (!netcheck_url_allowed(url, &allow, &reason))
        return cli_usage_error(ctx,
                               "%s: the SSRF rules refuse its address (%s); webhooks may reach "
                               "it only when [delivery] allow_cidrs covers it",
                               flag, reason ? reason : "refused");
    return CLI_OK;
}

int cli_receiver_secrets(cli_ctx *ctx, const rs_values *v, const char *current,
                         char secrets[CLI_SECRETS_MAX], char fresh[CLI_SECRET_MAX])
{
    secrets[0] = '\0';
    fresh[0] = '\0';
    pgp_error err;
    /* The generated secret's kind: --key-type, else on rotation the kind of the newest secret
     * (a receiver verifying Ed25519 keeps doing so), else HMAC. */
    secret_type type = SECRET_HMAC;
    if (v->key_type)
        type = strcmp(v->key_type, "ed25519") == 0 ? SECRET_ED25519 : SECRET_HMAC;
    else if (v->rotate && current && strncmp(current, SECRET_ED25519_PREFIX, 5) == 0)
        type = SECRET_ED25519;
    if (v->rotate || (!current && !v->secret)) {
        if (secret_generate_type(type, fresh, CLI_SECRET_MAX, &err) != 0)
            return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    }
    if (v->secret) {
        snprintf(secrets, CLI_SECRETS_MAX, "{\"%s\"}", v->secret);
    } else if (!current) {
        snprintf(secrets, CLI_SECRETS_MAX, "{\"%s\"}", fresh);
    } else if (v->rotate || v->retire) {
        /* current is space-separated, newest first. Rotation keeps at most 3 old secrets so a
         * receiver verifies against at most 4; retiring keeps only the newest. */
        char list[520];
        snprintf(list, sizeof list, "%s", current);
        char *save = NULL;
        size_t len = (size_t)snprintf(secrets, CLI_SECRETS_MAX, "{");
        int kept = 0;
        if (v->rotate)
            len += (size_t)snprintf(secrets + len, CLI_SECRETS_MAX - len, "\"%s\"", fresh), kept++;
        for (char *tok = strtok_r(list, " ", &save); tok && kept < (v->retire ? 1 : 4);
             tok = strtok_r(NULL, " ", &save), kept++)
            len += (size_t)snprintf(secrets + len, CLI_SECRETS_MAX - len, "%s\"%s\"",
                                    kept ? "," : "", tok);
        snprintf(secrets + len, CLI_SECRETS_MAX - len, "}");
        OPENSSL_cleanse(list, sizeof list);
    }
    return CLI_OK;
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

int cli_receiver_write(cli_ctx *ctx, const char *name, rs_values *v, const char *secrets,
                       bool in_tx, bool *created)
{
    /* Read and checked first, so that no path between this and the write has the key to
     * free but the ones below. */
    pem_pair pem = {0};
    if (v->cert_file) {
        int prc = load_client_cert(ctx, v->cert_file, v->key_file, &pem);
        if (prc != CLI_OK)
            return prc;
    }
    const char *params[RS_NPARAMS];
    memcpy(params, v->param, sizeof params);
    params[SQL_CUSTOMER_SET_P_NAME] = name;
    params[SQL_CUSTOMER_SET_P_SECRETS] = secrets && secrets[0] ? secrets : NULL;
    /* The proxy and the client certificate have statements of their own
     * (pgpace.customer_set_proxy, customer_set_client_cert), in one transaction with the rest:
     * a receiver is not left created or changed without what was asked for. A failure closes
     * the connection, which rolls it back. */
    bool with_cert = v->cert_file || v->clear_client_cert;
    bool own_tx = !in_tx && (with_cert || v->proxy);
    pgp_error err;
    if (own_tx && db_exec_simple(ctx->conn, "BEGIN", &err) != 0) {
        pem_pair_free(&pem);
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    }
    PGresult *res = cli_query(ctx, sql_q_customer_set, RS_NPARAMS, params);
    if (!res) {
        pem_pair_free(&pem);
        return CLI_FAILED;
    }
    if (created)
        *created = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (v->proxy) {
        const char *proxy_params[] = {name, v->proxy};
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
    if (own_tx && db_exec_simple(ctx->conn, "COMMIT", &err) != 0)
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    return CLI_OK;
}

void cli_receiver_print_public_key(const char *secret)
{
    secret_key *k = NULL;
    char pub[SECRET_PUBLIC_KEY_MAX];
    pgp_error err;
    if (secret && secret[0] && secret_key_parse(secret, &k, &err) == 0 &&
        secret_key_type(k) == SECRET_ED25519 && secret_key_public(k, pub, &err) == 0)
        printf("public key %s (give it to the receiver to verify v1a signatures)\n", pub);
    secret_key_free(k);
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

void cli_receiver_print(PGresult *res, bool show, const char *const *skip)
{
    for (int c = 0; c < PQnfields(res); c++) {
        const char *field = PQfname(res, c);
        const char *value = PQgetvalue(res, 0, c);
        bool skipped = false;
        for (const char *const *s = skip; s && *s && !skipped; s++)
            skipped = strcmp(*s, field) == 0;
        if (skipped)
            continue;
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
}
