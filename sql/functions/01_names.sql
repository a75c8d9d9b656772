-- 01_names.sql - names and signing secrets: the checks that table constraints call.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Names of customers and carriers appear in logs, metrics labels and URLs of the admin API,
-- so they are restricted to a safe, printable alphabet.
CREATE OR REPLACE FUNCTION pgpace.valid_name(name text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN name ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$';

-- A signing secret is `whsec_` followed by base64 of 24 to 64 random bytes (Standard Webhooks).
CREATE OR REPLACE FUNCTION pgpace.valid_secrets(secrets text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN cardinality(secrets) BETWEEN 1 AND 4
   AND array_position(secrets, NULL) IS NULL
   AND (SELECT bool_and(s ~ '^whsec_[A-Za-z0-9+/]{32,88}={0,2}$') FROM unnest(secrets) AS s);

-- PostgreSQL grants EXECUTE on a new function to PUBLIC; nothing of pgpace is public.
REVOKE EXECUTE ON FUNCTION pgpace.valid_name(text), pgpace.valid_secrets(text[]) FROM PUBLIC;
