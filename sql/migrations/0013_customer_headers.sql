-- 0013_customer_headers.sql - what some receivers require besides the signature: static extra
-- headers (an API key, a tenant id) and an Authorization (Basic or Bearer) per customer.
--
-- Both are secrets, like signing_secrets: pgpace_producer has no SELECT on this table (and gets
-- none here), the dispatcher never logs them, and `pgpace customer get` shows them only with
-- --show-secrets. They are written only through pgpace.customer_set_headers and
-- pgpace.customer_set_auth (sql/functions/08_customer.sql), which check every line and name the
-- field they refuse; the constraints below hold what a direct writer could break and the
-- sender relies on (the count, and no line break that would let a value start a header of its
-- own).
ALTER TABLE pgpace.customer
    -- "Name: value" lines, names unique (case-insensitive), in the order given.
    ADD COLUMN extra_headers text[] NOT NULL DEFAULT '{}'
        CONSTRAINT customer_extra_headers_valid
        CHECK (cardinality(extra_headers) <= 20
               AND array_position(extra_headers, NULL) IS NULL
               AND array_to_string(extra_headers, '') !~ '[\r\n]'),
    -- NULL: no Authorization header.
    ADD COLUMN auth_scheme text
        CONSTRAINT customer_auth_scheme_valid CHECK (auth_scheme IN ('basic', 'bearer')),
    -- basic: the user-id; bearer: NULL.
    ADD COLUMN auth_username text,
    -- basic: the password; bearer: the token.
    ADD COLUMN auth_secret text,
    ADD CONSTRAINT customer_auth_complete
        CHECK (CASE auth_scheme
                   WHEN 'basic' THEN auth_username IS NOT NULL AND auth_secret IS NOT NULL
                   WHEN 'bearer' THEN auth_username IS NULL AND auth_secret IS NOT NULL
                   ELSE auth_username IS NULL AND auth_secret IS NULL END
               AND coalesce(auth_username, '') !~ '[\r\n:]'
               AND coalesce(auth_secret, '') !~ '[\r\n]');
