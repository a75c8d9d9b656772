-- The admin API's active tokens (pgpace.api_token, migration 0021) for every instance's admin
-- listener: the SHA-256 of each, as hex, its scopes, and its name (who, in the audit of API
-- writes). Read at start and on NOTIFY
-- pgpace_token (src/dispatch/tokens.c).
-- @params:
-- @columns: token_hash scopes name
SELECT encode(t.token_hash, 'hex') AS token_hash, array_to_string(t.scopes, ',') AS scopes,
       t.name
  FROM pgpace.api_token t
 WHERE t.revoked_at IS NULL
