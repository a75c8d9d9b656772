-- `pgpace token list`: every token, by name, without its hash (pgpace.token_list).
-- @params:
-- @columns: name scopes created_at created_by revoked_at
SELECT t.name, t.scopes, t.created_at, t.created_by, coalesce(t.revoked_at::text, '-') AS revoked_at
  FROM pgpace.token_list() t
