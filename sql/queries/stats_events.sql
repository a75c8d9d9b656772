-- `pgpace stats`: the events of the last 24 hours of each customer whose enqueues fan out
-- (0018: it has endpoints, or no receiver of its own, or a subscription or filter on it):
-- events accepted, and those that matched no endpoint (unmatched: kept, without a delivery, for
-- `pgpace recover --endpoint` to back-fill). An event is an item with `fanout` and is not a
-- delivery, so it is counted here and nowhere among the queue's figures. Reads the item
-- partitions of the last day or two (no index on the item's customer): nothing when no
-- customer fans out. $1: a customer ("acme", or one of its endpoints' names: its customer).
-- @params: customer
-- @columns: customer events unmatched
WITH fan AS MATERIALIZED (
    SELECT c.id, c.name FROM pgpace.customer c
     WHERE c.parent_id IS NULL AND pgpace.fans_out(c.id)
       AND ($1::text IS NULL OR c.name = split_part($1::text, '/', 1))
), ev AS (
    SELECT i.customer_id, count(*) AS events, count(*) FILTER (WHERE i.fanout = 0) AS unmatched
      FROM pgpace.item i
     WHERE EXISTS (SELECT 1 FROM fan) -- a one-time filter: no scan when no customer fans out
       AND i.customer_id IN (SELECT f.id FROM fan f) AND i.fanout IS NOT NULL
       AND i.id >= pgpace.item_day_first_id(((now() - interval '24 hours') AT TIME ZONE 'UTC')::date)
       AND i.created_at > now() - interval '24 hours'
     GROUP BY i.customer_id
)
SELECT f.name AS customer, coalesce(ev.events, 0) AS events,
       coalesce(ev.unmatched, 0) AS unmatched
  FROM fan f LEFT JOIN ev ON ev.customer_id = f.id
 ORDER BY f.name
