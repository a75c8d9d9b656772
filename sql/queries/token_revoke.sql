-- `pgpace token revoke NAME`: pgpace.token_revoke (unknown: P0002); when it was revoked.
-- @params: name
-- @columns: revoked_at
SELECT pgpace.token_revoke($1::text) AS revoked_at
