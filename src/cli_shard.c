/* cli_shard.c - `pgpace shard`: the shard a customer lives in under N shards.
 *
 * A thin front of shard.c (the hash and Citus's ranges): with --id it needs no database; with a
 * customer NAME it reads only the customer's id. Prints the customer, id, hash token, shard
 * index and that shard's token range, as lines or (--json) one JSON object. Flags are checked
 * before anything connects (exit 2 naming the flag); an unknown customer is exit 1.
 */
#include "cli.h"
#include "shard.h"
#include "sql_embed.h"
#include "validate.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char shard_usage[] =
    "usage: pgpace shard --shards N (--id ID | NAME) [--json]\n"
    "\n"
    "Prints the shard a customer lives in when the queue is split into N shards by customer id,\n"
    "the way Citus distributes a table by a bigint column: PostgreSQL's hashint8 of the id (the\n"
    "hash token, -2147483648 to 2147483647), and the token space cut into N ranges of 2^32 / N\n"
    "tokens (integer division), the last range taking the remainder. Shards count from 0.\n"
    "\n"
    "  --shards N  the number of shards, 1 to 64000 (Citus's limit)\n"
    "  --id ID     the customer's id (pgpace.customer.id); needs no database\n"
    "  NAME        the customer's name; its id is read from the database\n"
    "  --json      one JSON object instead of lines\n"
    "\n"
    "The same index from SQL: SELECT pgpace.shard_of(id, N). See README, \"Scaling\".\n";

enum { OPT_SHARDS = 1, OPT_ID, OPT_JSON };

/* The customer's id by name: CLI_OK with *id set, or CLI_FAILED (printed). */
static int lookup_id(cli_ctx *ctx, const char *name, long long *id)
{
    int status = cli_connect(ctx);
    if (status != CLI_OK)
        return status;
    const char *params[SQL_CUSTOMER_ID_NPARAMS] = {[SQL_CUSTOMER_ID_P_NAME] = name};
    PGresult *res = cli_query(ctx, sql_q_customer_id, SQL_CUSTOMER_ID_NPARAMS, params);
    if (!res)
        return CLI_FAILED;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return cli_fail(ctx, CLI_FAILED, "unknown customer '%s'", name);
    }
    pgp_error err;
    int rc = validate_int("customer id", PQgetvalue(res, 0, SQL_CUSTOMER_ID_C_ID), LLONG_MIN,
                          LLONG_MAX, id, &err);
    PQclear(res);
    if (rc != 0)
        return cli_fail(ctx, CLI_FAILED, "%s", err.msg);
    return CLI_OK;
}

static int print_json(cli_ctx *ctx, const char *name, long long id, int32_t token, int index,
                      int count, int32_t min, int32_t max)
{
    json_t *o = json_pack("{s:s?, s:I, s:I, s:i, s:i, s:I, s:I}", "customer", name, "id",
                          (json_int_t)id, "token", (json_int_t)token, "shard", index, "shards",
                          count, "range_min", (json_int_t)min, "range_max", (json_int_t)max);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return cli_fail(ctx, CLI_FAILED, "out of memory");
    puts(text);
    free(text);
    return CLI_OK;
}

int cli_shard(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {CLI_COMMON_OPTIONS,
                                         {"shards", required_argument, NULL, OPT_SHARDS},
                                         {"id", required_argument, NULL, OPT_ID},
                                         {"json", no_argument, NULL, OPT_JSON},
                                         {NULL, 0, NULL, 0}};
    long long count = 0, id = 0;
    bool have_id = false, json = false;
    pgp_error err;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (cli_common_option(ctx, opt, optarg))
            continue;
        switch (opt) {
        case 'h':
            fputs(shard_usage, stdout);
            return CLI_OK;
        case OPT_SHARDS:
            if (validate_int("--shards", optarg, 1, SHARD_COUNT_MAX, &count, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            break;
        case OPT_ID:
            if (validate_int("--id", optarg, LLONG_MIN, LLONG_MAX, &id, &err) != 0)
                return cli_usage_error(ctx, "%s", err.msg);
            have_id = true;
            break;
        case OPT_JSON:
            json = true;
            break;
        default:
            return cli_usage_error(ctx, "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    const char *name = optind < argc ? argv[optind] : NULL;
    if (name && optind + 1 < argc)
        return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind + 1]);
    if (count == 0)
        return cli_usage_error(ctx, "--shards is required");
    if (have_id && name)
        return cli_usage_error(ctx, "give --id or a customer NAME, not both");
    if (!have_id && !name)
        return cli_usage_error(ctx, "a customer NAME or --id is required");
    if (name && validate_name("customer", name, &err) != 0)
        return cli_usage_error(ctx, "%s", err.msg);
    if (name) {
        int status = lookup_id(ctx, name, &id);
        if (status != CLI_OK)
            return status;
    }

    int32_t token = shard_hash_int8((int64_t)id), min = 0, max = 0;
    int index = shard_index(token, (int)count);
    if (index < 0 || shard_range(index, (int)count, &min, &max) != 0)
        return cli_fail(ctx, CLI_FAILED, "shard count %lld out of range", count);
    if (json)
        return print_json(ctx, name, id, token, index, (int)count, min, max);
    printf("customer  %s\n", name ? name : "-");
    printf("id        %lld\n", id);
    printf("token     %d\n", (int)token);
    printf("shard     %d of %lld (0-based)\n", index, count);
    printf("range     %d .. %d\n", (int)min, (int)max);
    return CLI_OK;
}
