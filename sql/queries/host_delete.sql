-- `pgpace host delete HOST`: pgpace.host_delete (unknown host: P0002). Returns the stored form
-- of the host that was deleted.
-- @params: host
-- @columns: host
SELECT h.host FROM (SELECT pgpace.host_normalize($1::text) AS host) h,
       LATERAL pgpace.host_delete(h.host)
