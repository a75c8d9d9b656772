-- `pgpace stats --unmatched`: the events of the last 24 hours that matched no endpoint (0018:
-- kept with fanout 0, without a delivery, for `pgpace recover --endpoint` to back-fill), newest
-- first, at most $2: each one's id (its webhook-id is msg_<id>), customer, kind and when it was
-- enqueued. Reads the item partitions of the last day or two, as stats_events.sql does.
-- $1: a customer ("acme", or one of its endpoints' names: its customer), NULL for every one.
-- @params: customer limit
-- @columns: event_id customer kind created_at
SELECT i.id AS event_id, c.name AS customer, coalesce(i.kind, '-') AS kind,
       to_char(i.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created_at
  FROM pgpace.customer c
  JOIN pgpace.item i ON i.customer_id = c.id
 WHERE c.parent_id IS NULL
   AND ($1::text IS NULL OR c.name = split_part($1::text, '/', 1))
   AND i.fanout = 0
   AND i.id >= pgpace.item_day_first_id(((now() - interval '24 hours') AT TIME ZONE 'UTC')::date)
   AND i.created_at > now() - interval '24 hours'
 ORDER BY i.created_at DESC, i.id DESC
 LIMIT $2::int
