-- `pgpace host delete HOST`: pgpace.host_delete (unknown host: P0002). Returns the stored form
-- of the host that was deleted.
-- @params: host
-- @columns: host
SELECT pgpace.host_normalize($1::text) AS host, pgpace.host_delete($1::text)
