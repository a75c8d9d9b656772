-- `pgpace host set HOST`: pgpace.host_set (18_limits.sql) normalises the host, checks every
-- argument naming its field and upserts the row; NULL leaves a value as it is ($2 '{}' clears
-- the windows, $4 true removes the connection cap). Returns the stored host and whether the row
-- is new.
-- @params: host limits max_connections clear_max_connections
-- @columns: host created
WITH before AS (
    SELECT count(*) AS n FROM pgpace.host h
     WHERE h.host = pgpace.host_normalize($1::text)
)
SELECT pgpace.host_set($1::text, $2::text[], $3::integer, coalesce($4::boolean, false)) AS host,
       before.n = 0 AS created
  FROM before
