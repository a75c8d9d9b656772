SELECT i.instance, CASE WHEN i.leader THEN 'leader' ELSE 'standby' END AS role, i.pid,
       coalesce(host(i.client_addr), 'local') AS client, i.backend_start
  FROM pgpace.instance i
 ORDER BY i.leader DESC, i.instance
