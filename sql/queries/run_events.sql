-- Operator events the leader has not handled yet (oldest first, at most $1; events older than
-- a day are left to `pgpace events`; refused posts wait for their next_post_at), each with the
-- operator webhook's body: Standard Webhooks' shape, {"type": "customer.<kind>", "timestamp":
-- ..., "data": {...}}. data names the customer and the endpoint (0018) as `pgpace events`
-- does: an endpoint's event is recorded under its row's name "acme/crm" (customer acme,
-- endpoint crm); a customer's own is its "default" endpoint's. `customer` (the log line's) is
-- the name as recorded.
-- @params: limit
-- @columns: id kind customer detail body
SELECT e.id, e.kind, e.customer, e.detail::text AS detail,
       jsonb_build_object(
           'type', 'customer.' || e.kind,
           'timestamp', to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
           'data', jsonb_build_object('event_id', e.id, 'kind', e.kind,
                                      'customer', split_part(e.customer, '/', 1),
                                      'endpoint', CASE WHEN position('/' IN e.customer) > 0
                                                       THEN substr(e.customer, position('/' IN e.customer) + 1)
                                                       ELSE 'default' END,
                                      'detail', e.detail))::text AS body
  FROM pgpace.event e
 WHERE e.handled_at IS NULL AND e.at > now() - interval '1 day'
   AND (e.next_post_at IS NULL OR e.next_post_at <= now())
 ORDER BY e.id
 LIMIT $1::integer
