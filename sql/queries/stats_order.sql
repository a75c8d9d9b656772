-- `pgpace stats`: ordered delivery (0020_order_keys.sql), per customer or endpoint that has
-- any: waiting, its items parked behind an earlier item of their order key (not among the
-- table's due or delayed); blocked_keys, the keys whose later items wait behind a head that is
-- failing (retrying) or held by its dead letter (order_on_dead hold); and of those the one
-- waiting longest: its key and how long (oldest_blocked_s, since its first waiting item was
-- enqueued). $1: a customer ("acme": it and its endpoints) or one endpoint ("acme/crm"); NULL:
-- every one. Parked items are counted up to 100,000 per row, like the table's counts.
-- @params: customer
-- @columns: customer waiting blocked_keys oldest_blocked_key oldest_blocked_s
WITH c AS MATERIALIZED (
    SELECT cu.id, cu.name FROM pgpace.customer cu
     WHERE $1::text IS NULL OR cu.name = $1::text
        OR (strpos($1::text, '/') = 0 AND split_part(cu.name, '/', 1) = $1::text)
), span AS (
    SELECT min(c.id) AS lo, max(c.id) AS hi FROM c
), b AS (
    SELECT b.* FROM span, pgpace.order_blocked(span.lo, span.hi) b
), w AS (
    SELECT c.id, c.name,
           (SELECT count(*) FROM (SELECT 1 FROM pgpace.queue q
                                   WHERE q.customer_id = c.id AND q.next_action_at IS NULL
                                   LIMIT 100000) p) AS waiting
      FROM c
)
SELECT w.name AS customer, w.waiting, coalesce(b.blocked_keys, 0) AS blocked_keys,
       coalesce(b.oldest_key, '-') AS oldest_blocked_key,
       coalesce(round(extract(epoch FROM now() - b.oldest_waiting)::numeric, 1)::text, '-')
           AS oldest_blocked_s
  FROM w LEFT JOIN b ON b.customer_id = w.id
 WHERE w.waiting > 0 OR b.blocked_keys > 0
 ORDER BY w.name
