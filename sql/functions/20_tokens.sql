-- 20_tokens.sql - the admin API's tokens (pgpace.api_token, migration 0021): creating, listing
-- and revoking them. `pgpace token create|list|revoke` call these; the owner may call them from
-- SQL (EXECUTE is revoked from PUBLIC). Only hashes come in: the secret is made and shown by the
-- caller, once.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Creates token `name` granting `scopes` (each of enqueue, read, write, status, at least one;
-- repeats dropped) whose secret hashes (SHA-256) to `token_hash`. Each argument is checked
-- naming its field (SQLSTATE 22023); a name in use, even by a revoked token, is 23505 (a name
-- says who held a token, so it is not reused).
CREATE OR REPLACE FUNCTION pgpace.token_create(name text, scopes text[], token_hash bytea)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    bad  text;
    id   bigint;
    uniq text[];
BEGIN
    IF name IS NULL OR NOT pgpace.valid_name(name) THEN
        RAISE EXCEPTION 'name: must be 1-128 letters, digits and . _ : @ - (starting with a '
                        'letter or digit), got %',
                        coalesce(quote_literal(left(name, 80)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF scopes IS NULL OR cardinality(scopes) = 0 THEN
        RAISE EXCEPTION 'scopes: give at least one of enqueue, read, write, status'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s INTO bad FROM unnest(scopes) s
     WHERE s IS NULL OR s NOT IN ('enqueue', 'read', 'write', 'status') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'scopes: unknown scope % (known: enqueue, read, write, status)',
                        coalesce(quote_literal(left(bad, 40)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF token_hash IS NULL OR length(token_hash) <> 32 THEN
        RAISE EXCEPTION 'token_hash: must be the 32 bytes of a SHA-256 digest'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT array_agg(DISTINCT s ORDER BY s) INTO uniq FROM unnest(scopes) s;
    BEGIN
        INSERT INTO pgpace.api_token (name, scopes, token_hash)
        VALUES (name, uniq, token_hash)
        RETURNING api_token.id INTO id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'name: token % exists (names are not reused, revoked ones included)',
                        quote_literal(name)
            USING ERRCODE = 'unique_violation';
    END;
    RETURN id;
END
$$;

-- Revokes token `name` (from now on it grants nothing; its row stays). Revoking a revoked
-- token changes nothing and returns its revocation time; an unknown name is P0002.
CREATE OR REPLACE FUNCTION pgpace.token_revoke(name text)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    at timestamptz;
BEGIN
    UPDATE pgpace.api_token t SET revoked_at = coalesce(t.revoked_at, now())
     WHERE t.name = name
    RETURNING t.revoked_at INTO at;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown token %', coalesce(quote_literal(left(name, 80)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN at;
END
$$;

-- The tokens, by name: scopes, who created them and when, and when revoked (NULL: active).
-- Never their hashes.
CREATE OR REPLACE FUNCTION pgpace.token_list()
RETURNS TABLE (name text, scopes text, created_at timestamptz, created_by text,
               revoked_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT t.name, array_to_string(t.scopes, ','), t.created_at, t.created_by, t.revoked_at
      FROM pgpace.api_token t
     ORDER BY t.name
$$;

REVOKE EXECUTE ON FUNCTION
    pgpace.token_create(text, text[], bytea),
    pgpace.token_revoke(text),
    pgpace.token_list()
    FROM PUBLIC;
