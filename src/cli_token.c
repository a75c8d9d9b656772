/* cli_token.c - `pgpace token create|list|revoke`: tokens for the admin listener's API
 * (pgpace.api_token, migration 0021). A token is made here from 32 random bytes (OpenSSL's
 * RAND_bytes), printed once on stdout, and only its SHA-256 goes to the database; names and
 * scopes are checked, naming the field, by the SQL (20_tokens.sql). */
#include "cli.h"
#include "sql_embed.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char token_usage[] =
    "usage: pgpace token create NAME --scope SCOPE [--scope SCOPE ...]\n"
    "       pgpace token list\n"
    "       pgpace token revoke NAME\n"
    "\n"
    "Tokens for the admin listener's API. SCOPE is one of enqueue (POST /v1/items), read (the\n"
    "API's GETs), write (its changes) and status (the status page); repeat --scope or separate\n"
    "scopes by commas. create prints the token once, on standard output: only its SHA-256 is\n"
    "stored, so it cannot be shown again. A name is never reused, a revoked token's included;\n"
    "revoke keeps the token's row (who held it, until when), and it grants nothing from then on.\n";

enum { OPT_SCOPE = 1 };

#define TOKEN_PREFIX "pgp_"
#define TOKEN_RANDOM 32

/* base64url without padding of n bytes into out (4 * ceil(n / 3) + 1 bytes). */
static void base64url(const unsigned char *in, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = a[(v >> 18) & 63];
        out[o++] = a[(v >> 12) & 63];
        if (i + 1 < n)
            out[o++] = a[(v >> 6) & 63];
        if (i + 2 < n)
            out[o++] = a[v & 63];
    }
    out[o] = '\0';
}

/* A new token's text and the hex of its SHA-256; 0 or -EIO. */
static int token_make(char *token, size_t token_cap, char hash_hex[65])
{
    unsigned char raw[TOKEN_RANDOM], digest[EVP_MAX_MD_SIZE];
    char enc[4 * ((TOKEN_RANDOM + 2) / 3) + 1];
    unsigned len = 0;
    if (RAND_bytes(raw, sizeof raw) != 1)
        return -EIO;
    base64url(raw, sizeof raw, enc);
    OPENSSL_cleanse(raw, sizeof raw);
    if ((size_t)snprintf(token, token_cap, TOKEN_PREFIX "%s", enc) >= token_cap)
        return -EIO;
    if (EVP_Digest(token, strlen(token), digest, &len, EVP_sha256(), NULL) != 1 || len != 32)
        return -EIO;
    for (unsigned i = 0; i < len; i++)
        snprintf(hash_hex + 2 * i, 3, "%02x", digest[i]);
    return 0;
}

static int name_arg(cli_ctx *ctx, int argc, char **argv, const char **name)
{
    if (optind >= argc)
        return cli_usage_error(ctx, "missing NAME");
    *name = argv[optind++];
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

static int token_create(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_COMMON_OPTIONS, {"scope", required_argument, NULL, OPT_SCOPE}, {NULL, 0, NULL, 0}};
    char scopes[256] = "";
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        if (opt == 'h') {
            fputs(token_usage, stdout);
            return CLI_OK;
        }
        if (opt == OPT_SCOPE) {
            size_t used = strlen(scopes);
            if (optarg[strspn(optarg, " ,")] == '\0')
                return cli_usage_error(ctx, "--scope: expected enqueue, read, write or status");
            if (used + strlen(optarg) + 2 > sizeof scopes)
                return cli_usage_error(ctx, "--scope: too many scopes");
            snprintf(scopes + used, sizeof scopes - used, "%s%s", used ? "," : "", optarg);
            continue;
        }
        return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
    }
    const char *name = NULL;
    int status = name_arg(ctx, argc, argv, &name);
    if (status != CLI_OK)
        return status;
    if (!scopes[0])
        return cli_usage_error(ctx, "missing --scope (enqueue, read, write or status)");
    /* "read, write" and "read,,write" mean read and write. */
    char clean[256];
    size_t o = 0;
    for (const char *p = scopes; *p && o + 1 < sizeof clean; p++)
        if (*p != ' ' && !(*p == ',' && (o == 0 || clean[o - 1] == ',')))
            clean[o++] = *p;
    while (o > 0 && clean[o - 1] == ',')
        o--;
    clean[o] = '\0';
    status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    char token[64], hash_hex[65];
    if (token_make(token, sizeof token, hash_hex) != 0)
        return cli_fail(ctx, CLI_FAILED, "cannot make a token: no random bytes");
    const char *params[SQL_TOKEN_CREATE_NPARAMS] = {[SQL_TOKEN_CREATE_P_NAME] = name,
                                                    [SQL_TOKEN_CREATE_P_SCOPES] = clean,
                                                    [SQL_TOKEN_CREATE_P_HASH_HEX] = hash_hex};
    PGresult *res = cli_query(ctx, sql_q_token_create, SQL_TOKEN_CREATE_NPARAMS, params);
    if (!res) {
        OPENSSL_cleanse(token, sizeof token);
        return CLI_FAILED;
    }
    PQclear(res);
    printf("%s\n", token);
    fflush(stdout);
    fprintf(stderr,
            "created token %s (scopes %s); it is shown this once: only its hash is stored\n", name,
            clean);
    OPENSSL_cleanse(token, sizeof token);
    return CLI_OK;
}

static int token_list(cli_ctx *ctx, int argc, char **argv)
{
    int parsed = cli_parse_plain(ctx, argc, argv, token_usage);
    if (parsed != CLI_OK)
        return parsed == CLI_HELP_SHOWN ? CLI_OK : parsed;
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    PGresult *res = cli_query(ctx, sql_q_token_list, SQL_TOKEN_LIST_NPARAMS, NULL);
    if (!res)
        return CLI_FAILED;
    cli_print_table(res);
    PQclear(res);
    return CLI_OK;
}

static int token_revoke(cli_ctx *ctx, int argc, char **argv)
{
    int parsed = cli_parse_plain_keep(ctx, argc, argv, token_usage);
    if (parsed != CLI_OK)
        return parsed == CLI_HELP_SHOWN ? CLI_OK : parsed;
    const char *name = NULL;
    int status = name_arg(ctx, argc, argv, &name);
    if (status == CLI_OK)
        status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[SQL_TOKEN_REVOKE_NPARAMS] = {[SQL_TOKEN_REVOKE_P_NAME] = name};
    PGresult *res = cli_query(ctx, sql_q_token_revoke, SQL_TOKEN_REVOKE_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    printf("revoked token %s at %s\n", name, PQgetvalue(res, 0, SQL_TOKEN_REVOKE_C_REVOKED_AT));
    PQclear(res);
    return CLI_OK;
}

int cli_token(cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(token_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    snprintf(ctx->command_buf, sizeof ctx->command_buf, "token %s", argv[1]);
    ctx->command = ctx->command_buf;
    if (strcmp(argv[1], "create") == 0)
        return token_create(ctx, argc - 1, argv + 1);
    if (strcmp(argv[1], "list") == 0)
        return token_list(ctx, argc - 1, argv + 1);
    if (strcmp(argv[1], "revoke") == 0)
        return token_revoke(ctx, argc - 1, argv + 1);
    ctx->command = "token";
    return cli_usage_error(ctx, "unknown subcommand '%s' (create, list, revoke)", argv[1]);
}
