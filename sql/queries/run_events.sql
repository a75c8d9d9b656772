-- Operator events the leader has not handled yet (oldest first, at most $1; events older than
-- a day are left to `pgpace events`), each with the operator webhook's body: Standard Webhooks'
-- shape, {"type": "customer.<kind>", "timestamp": ..., "data": {...}}.
-- @params: limit
-- @columns: id at_us kind customer detail body
SELECT e.id, (extract(epoch FROM e.at) * 1000000)::bigint AS at_us, e.kind, e.customer,
       e.detail::text AS detail,
       jsonb_build_object(
           'type', 'customer.' || e.kind,
           'timestamp', to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
           'data', jsonb_build_object('event_id', e.id, 'kind', e.kind, 'customer', e.customer,
                                      'detail', e.detail))::text AS body
  FROM pgpace.event e
 WHERE e.handled_at IS NULL AND e.at > now() - interval '1 day'
 ORDER BY e.id
 LIMIT $1::integer
