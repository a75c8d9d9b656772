-- 0015_customer_oauth2.sql - receiver authentication by OAuth2 client credentials (RFC 6749
-- section 4.4): the dispatcher fetches an access token from the customer's token endpoint and
-- sends it as "Authorization: Bearer TOKEN", beside the static Basic and Bearer of 0013.
--
-- Stored like the other credentials (0013): auth_scheme 'oauth2', the client id in
-- auth_username and the client secret in auth_secret, so the secret has the protections those
-- columns already have (no SELECT for pgpace_producer, never logged, shown only with
-- --show-secrets). The token endpoint and the optional scope are new columns, NULL for every
-- other scheme. Written only through pgpace.customer_set_oauth2 (sql/functions/08_customer.sql),
-- which names the field it refuses; the constraints hold what a direct writer could break and
-- the dispatcher relies on (an http/https URL, no line break or control character anywhere
-- that goes into the token request).
ALTER TABLE pgpace.customer
    ADD COLUMN oauth_token_url text
        CONSTRAINT customer_oauth_token_url_valid
        CHECK (length(oauth_token_url) <= 2048
               AND oauth_token_url ~* '^https?://[^\s/?#@]+(:[0-9]{1,5})?([/?#][^\s]*)?$'
               AND oauth_token_url !~ '[[:cntrl:]]'),
    -- RFC 6749 3.3: scope-tokens of %x21 / %x23-5B / %x5D-7E separated by single spaces.
    ADD COLUMN oauth_scope text
        CONSTRAINT customer_oauth_scope_valid
        CHECK (length(oauth_scope) <= 1024
               AND oauth_scope ~ '^[!#-\[\]-~]+( [!#-\[\]-~]+)*$'),
    DROP CONSTRAINT customer_auth_scheme_valid,
    ADD CONSTRAINT customer_auth_scheme_valid
        CHECK (auth_scheme IN ('basic', 'bearer', 'oauth2')),
    DROP CONSTRAINT customer_auth_complete,
    ADD CONSTRAINT customer_auth_complete
        CHECK (CASE auth_scheme
                   WHEN 'basic' THEN auth_username IS NOT NULL AND auth_secret IS NOT NULL
                   WHEN 'bearer' THEN auth_username IS NULL AND auth_secret IS NOT NULL
                   WHEN 'oauth2' THEN auth_username IS NOT NULL AND auth_secret IS NOT NULL
                                      AND oauth_token_url IS NOT NULL
                   ELSE auth_username IS NULL AND auth_secret IS NULL END
               AND (coalesce(auth_scheme, '') = 'oauth2'
                    OR (oauth_token_url IS NULL AND oauth_scope IS NULL))
               -- a client id may hold a colon: it is form-urlencoded before Basic (RFC 6749
               -- 2.3.1); a Basic user-id may not (RFC 7617)
               AND (coalesce(auth_scheme, '') = 'oauth2' OR coalesce(auth_username, '') !~ ':')
               AND coalesce(auth_username, '') !~ '[\r\n]'
               AND coalesce(auth_secret, '') !~ '[\r\n]');
