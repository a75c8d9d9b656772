/* cli_portal.c - `pgpace portal-link CUSTOMER`: a signed, expiring link to the tenant page
 * (GET /portal on the admin listener), made by the database (sql/functions/23_portal.sql: the
 * signing key never leaves it), and --revoke, which voids every link of the customer given out
 * before. The link carries its token after '#', which browsers send to no server. */
#include "cli.h"
#include "sql_embed.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char portal_usage[] =
    "usage: pgpace portal-link CUSTOMER [--ttl DURATION] [--read-only] [--base-url URL]\n"
    "       pgpace portal-link CUSTOMER --revoke\n"
    "\n"
    "Prints a signed link to CUSTOMER's tenant page: its endpoints, recent events, each\n"
    "delivery's attempts and the receiver's answers, and (unless --read-only) adding and\n"
    "editing endpoints, rotating a secret, sending a test event and replaying a failed delivery.\n"
    "The link shows that customer alone and expires after --ttl (1 minute to 30 days, e.g. 30m,\n"
    "1h, 7d; default 1h). --base-url is the listener's address as the tenant reaches it (default:\n"
    "http:// and [http] listen). --revoke voids every link of CUSTOMER given out so far.\n";

enum { OPT_TTL = 1, OPT_READ_ONLY, OPT_BASE_URL, OPT_REVOKE };

int cli_portal(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"ttl", required_argument, NULL, OPT_TTL},
                                         {"read-only", no_argument, NULL, OPT_READ_ONLY},
                                         {"base-url", required_argument, NULL, OPT_BASE_URL},
                                         {"revoke", no_argument, NULL, OPT_REVOKE},
                                         {NULL, 0, NULL, 0}};
    const char *ttl = "1h", *base = NULL;
    bool read_only = false, revoke = false, ttl_given = false;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(portal_usage, stdout);
            return CLI_OK;
        case OPT_TTL:
            ttl = optarg;
            ttl_given = true;
            continue;
        case OPT_READ_ONLY:
            read_only = true;
            continue;
        case OPT_BASE_URL:
            base = optarg;
            continue;
        case OPT_REVOKE:
            revoke = true;
            continue;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage_error(ctx, "missing CUSTOMER");
    const char *customer = argv[optind++];
    if (optind < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    if (revoke && (ttl_given || read_only || base))
        return cli_usage_error(ctx, "--revoke takes no other option");
    if (base && strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0)
        return cli_usage_error(ctx, "--base-url: expected http://HOST[:PORT] or https://...");
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    if (revoke) {
        const char *params[SQL_PORTAL_REVOKE_NPARAMS] = {[SQL_PORTAL_REVOKE_P_CUSTOMER] = customer};
        PGresult *res = cli_query(ctx, sql_q_portal_revoke, SQL_PORTAL_REVOKE_NPARAMS, params);
        if (!res)
            return CLI_FAILED;
        PQclear(res);
        printf("revoked every tenant page link of %s given out so far\n", customer);
        return CLI_OK;
    }
    char listen_base[160];
    if (!base) {
        if (!ctx->cfg.http_listen[0])
            return cli_fail(ctx, CLI_FAILED,
                            "no [http] listen in the configuration: give --base-url");
        snprintf(listen_base, sizeof listen_base, "%s%s", "http://", ctx->cfg.http_listen);
        base = listen_base;
    }
    const char *params[SQL_PORTAL_LINK_NPARAMS] = {[SQL_PORTAL_LINK_P_CUSTOMER] = customer,
                                                   [SQL_PORTAL_LINK_P_TTL] = ttl,
                                                   [SQL_PORTAL_LINK_P_READ_ONLY] =
                                                       read_only ? "true" : "false"};
    PGresult *res = cli_query(ctx, sql_q_portal_link, SQL_PORTAL_LINK_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    size_t bl = strlen(base);
    printf("%.*s/portal#%s\n", (int)(bl > 0 && base[bl - 1] == '/' ? bl - 1 : bl), base,
           PQgetvalue(res, 0, SQL_PORTAL_LINK_C_TOKEN));
    fflush(stdout);
    fprintf(stderr, "a %s link to %s's tenant page, valid until %s\n",
            read_only ? "read-only" : "read-write", customer,
            PQgetvalue(res, 0, SQL_PORTAL_LINK_C_EXPIRES_AT));
    PQclear(res);
    return CLI_OK;
}
