-- GET /v1/status: the running instances (pgpace.instance) and which one leads, leader first.
-- @params:
-- @columns: instance leader pid client since_us
SELECT i.instance, i.leader, i.pid, coalesce(host(i.client_addr), 'local') AS client,
       (extract(epoch FROM i.backend_start) * 1000000)::bigint AS since_us
  FROM pgpace.instance i
 ORDER BY i.leader DESC, i.instance
 LIMIT 100
