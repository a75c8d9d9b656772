-- 15_shard.sql - pgpace.shard_of: which of N shards a customer lives in.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- The 0-based shard of `customer_id` among `shard_count` shards, as Citus places a row whose
-- bigint distribution column holds customer_id: PostgreSQL's hashint8 of the id (the hash
-- token, an int4) and the token space [-2^31, 2^31 - 1] cut into shard_count ranges of
-- 2^32 / shard_count tokens (integer division), the last range taking the remainder. src/shard.c
-- (`pgpace shard`) computes the same and says where in Citus's source the rule comes from
-- (README, "Scaling"). It reads no table: the answer depends on the two numbers only.
-- Bad input: SQLSTATE 22004 (NULL argument), 22023 (shard_count not 1 to 64000, Citus's limit).
CREATE OR REPLACE FUNCTION pgpace.shard_of(customer_id bigint, shard_count integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF shard_of.customer_id IS NULL OR shard_of.shard_count IS NULL THEN
        RAISE EXCEPTION 'pgpace.shard_of: % must not be null',
                        CASE WHEN shard_of.customer_id IS NULL THEN 'customer_id' ELSE 'shard_count' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF shard_of.shard_count NOT BETWEEN 1 AND 64000 THEN
        RAISE EXCEPTION 'pgpace.shard_of: shard_count must be between 1 and 64000, got %',
                        shard_of.shard_count
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The token's offset from -2^31 over the range width; the one quotient past the end (the
    -- last range's remainder) belongs to the last shard.
    RETURN least((hashint8(shard_of.customer_id)::bigint + 2147483648)
                 / (4294967296 / shard_of.shard_count),
                 shard_of.shard_count - 1)::integer;
END
$$;

-- PostgreSQL grants EXECUTE on a new function to PUBLIC; nothing of pgpace is public (a producer
-- that routes by shard can compute the same from hashint8, which is public).
REVOKE EXECUTE ON FUNCTION pgpace.shard_of(bigint, integer) FROM PUBLIC;
