-- `pgpace portal-link CUSTOMER`: a signed tenant page token (sql/functions/23_portal.sql) valid
-- for $2 (an interval: 1h, 30m, 7d), read-only when $3.
-- @params: customer ttl read_only
-- @columns: token expires_at
SELECT t.token, to_char(t.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS expires_at
  FROM pgpace.portal_token($1::text, $2::interval, $3::boolean) t
