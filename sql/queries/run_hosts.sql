-- The receiver hosts that have a limit of their own or a connection cap (pgpace.host): all of
-- them ($1 NULL, at start-up) or those $1 lists (a NOTIFY on pgpace_host; a host that is no
-- longer a row is simply not returned, and the dispatcher drops what it had for it).
-- `limit_windows` is pgpace.limits_machine's "COUNT/PERIOD_S ..." ('' for none);
-- `max_connections` is 0 where the configured default applies.
-- @params: hosts
-- @columns: host limit_windows max_connections
SELECT h.host, pgpace.limits_machine(h.limits) AS limit_windows,
       coalesce(h.max_connections, 0) AS max_connections
  FROM pgpace.host h
 WHERE $1::text[] IS NULL OR h.host = ANY ($1::text[])
 ORDER BY h.host
