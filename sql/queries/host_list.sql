-- `pgpace host list` ($1 NULL) and `pgpace host get HOST` ($1 the host, normalised; no row when
-- it has none): pgpace.host_list (18_limits.sql).
-- @params: host
-- @columns: host limits max_connections receivers updated_at
SELECT l.host, l.limits, l.max_connections, l.receivers,
       to_char(l.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"') AS updated_at
  FROM pgpace.host_list($1::text) l
