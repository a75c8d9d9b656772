-- 01_names.sql - names and signing secrets: the checks that table constraints call.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Names of customers and carriers appear in logs, metrics labels and URLs of the admin API,
-- so they are restricted to a safe, printable alphabet.
CREATE OR REPLACE FUNCTION pgpace.valid_name(name text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN name ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$';

-- A signing secret is `whsec_` followed by base64 of 24 to 64 random bytes (HMAC-SHA256, `v1,`
-- signatures), or `whsk_` followed by base64 of a 32-byte Ed25519 seed (`v1a,` signatures):
-- exactly 44 characters, the last one '=' and the one before it with its unused low bits zero,
-- so each key has one spelling (src/secret.c decodes it the same way). Standard Webhooks.
CREATE OR REPLACE FUNCTION pgpace.valid_secrets(secrets text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN cardinality(secrets) BETWEEN 1 AND 4
   AND array_position(secrets, NULL) IS NULL
   AND (SELECT bool_and(s ~ '^whsec_[A-Za-z0-9+/]{32,88}={0,2}$'
                        OR s ~ '^whsk_[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$')
          FROM unnest(secrets) AS s);

-- The same rule as pgpace.valid_secrets, with an error that names the entry and what is wrong
-- (the table's CHECK can only say that it failed). The values are secrets: no message quotes
-- them. Called by pgpace.customer_set before it writes.
CREATE OR REPLACE FUNCTION pgpace.check_signing_secrets(secrets text[]) RETURNS void
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s text;
    i integer := 0;
BEGIN
    IF coalesce(cardinality(secrets), 0) NOT BETWEEN 1 AND 4 THEN
        RAISE EXCEPTION 'signing_secrets: expected 1 to 4 secrets, got %', coalesce(cardinality(secrets), 0)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH s IN ARRAY secrets LOOP
        i := i + 1;
        IF s IS NULL THEN
            RAISE EXCEPTION 'signing_secrets[%]: must not be NULL', i
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF s LIKE 'whpk\_%' THEN
            RAISE EXCEPTION 'signing_secrets[%]: a whpk_ public key cannot sign; give the whsk_ secret key (the public key is derived from it)', i
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF s LIKE 'whsk\_%' AND length(s) = 93 AND s ~ '^whsk_[A-Za-z0-9+/]{86}==$' THEN
            RAISE EXCEPTION 'signing_secrets[%]: whsk_ must be followed by base64 of a 32-byte Ed25519 seed (44 characters ending in ''=''); this is 64 bytes (seed and public key, libsodium''s form?): keep its first 32 bytes', i
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF s LIKE 'whsk\_%' AND s !~ '^whsk_[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$' THEN
            RAISE EXCEPTION 'signing_secrets[%]: whsk_ must be followed by base64 of a 32-byte Ed25519 seed (44 characters ending in ''=''), got % characters after the prefix', i, length(s) - 5
                USING ERRCODE = 'invalid_parameter_value';
        -- Stricter than valid_secrets (whose CHECK rows written before must keep passing):
        -- whole base64 quanta and 24 to 64 decoded bytes, as src/secret.c decodes them, so
        -- what this accepts the dispatcher can sign with.
        ELSIF s LIKE 'whsec\_%' AND (s !~ '^whsec_([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)$'
                                    OR (length(s) - 6) / 4 * 3 - (length(s) - length(rtrim(s, '='))) NOT BETWEEN 24 AND 64) THEN
            RAISE EXCEPTION 'signing_secrets[%]: whsec_ must be followed by base64 of 24 to 64 bytes', i
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF s NOT LIKE 'whsk\_%' AND s NOT LIKE 'whsec\_%' THEN
            RAISE EXCEPTION 'signing_secrets[%]: expected whsec_ (HMAC-SHA256) or whsk_ (Ed25519) followed by base64', i
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
END
$$;

-- PostgreSQL grants EXECUTE on a new function to PUBLIC; nothing of pgpace is public.
REVOKE EXECUTE ON FUNCTION pgpace.valid_name(text), pgpace.valid_secrets(text[]),
    pgpace.check_signing_secrets(text[]) FROM PUBLIC;
