/* tokens.c - the admin API's tokens on this instance's admin listener: read from
 * pgpace.api_token (run_tokens.sql) when the instance loads and whenever a change NOTIFYs
 * pgpace_token, and handed whole to admin_http (admin_http_set_api_tokens), which checks
 * requests against them. Every instance does it, the standbys too: each serves its own
 * listener. A read that fails keeps the set it had (logged); the next change reads again. */
#include "internal.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* One row into *t; false when its hash or scopes are not what the table allows. */
static bool token_parse(const char *hex, const char *scopes, const char *name, admin_http_token *t)
{
    snprintf(t->name, sizeof t->name, "%s", name);
    if (strlen(hex) != 64)
        return false;
    for (int i = 0; i < 32; i++) {
        int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        t->hash[i] = (unsigned char)(hi << 4 | lo);
    }
    static const struct {
        const char *name;
        unsigned bit;
    } known[] = {{"enqueue", ADMIN_SCOPE_ENQUEUE},
                 {"read", ADMIN_SCOPE_READ},
                 {"write", ADMIN_SCOPE_WRITE},
                 {"status", ADMIN_SCOPE_STATUS}};
    t->scopes = 0;
    for (const char *p = scopes; *p;) {
        size_t n = strcspn(p, ",");
        for (size_t k = 0; k < PGP_ARRAY_LEN(known); k++)
            if (strlen(known[k].name) == n && strncmp(p, known[k].name, n) == 0)
                t->scopes |= known[k].bit;
        p += n + (p[n] == ',');
    }
    return t->scopes != 0;
}

static void on_tokens(pgconn *conn, PGresult *res, void *arg)
{
    dispatcher *d = arg;
    if (!res || !d->admin)
        return; /* lost: read again once connected */
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        !rows_shape_ok(res, SQL_RUN_TOKENS_NCOLS, "api tokens")) {
        LOG_WARN("api_tokens_failed", LOG_S("error", PQresultErrorMessage(res)),
                 LOG_S("meaning", "the tokens read before stay in force"));
        return;
    }
    int n = PQntuples(res);
    admin_http_token *t = n > 0 ? calloc((size_t)n, sizeof *t) : NULL;
    if (n > 0 && !t) {
        LOG_ERROR("out_of_memory", LOG_S("where", "api tokens"));
        return;
    }
    size_t kept = 0;
    for (int r = 0; r < n; r++)
        if (token_parse(PQgetvalue(res, r, SQL_RUN_TOKENS_C_TOKEN_HASH),
                        PQgetvalue(res, r, SQL_RUN_TOKENS_C_SCOPES),
                        PQgetvalue(res, r, SQL_RUN_TOKENS_C_NAME), &t[kept]))
            kept++;
    if (admin_http_set_api_tokens(d->admin, t, kept) != 0)
        LOG_ERROR("out_of_memory", LOG_S("where", "api tokens"));
    else
        LOG_INFO("api_tokens_loaded", LOG_I("tokens", (long long)kept));
    free(t);
}

void tokens_load(dispatcher *d)
{
    if (d->admin)
        DSP_QUERY0(d, run_tokens, on_tokens, d, "api tokens");
}
