-- 19_order.sql - what ordered delivery (0020_order_keys.sql) holds up, for `pgpace stats`,
-- /metrics and the status page (run_metrics.sql, stats_order.sql).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- The keys waiting behind a failing head, per endpoint (customer row) with an id in [lo, hi]:
-- a key is blocked when its head has failed at least once and is not done (retrying, or in
-- flight again), or a dead head holds it (order_on_dead 'hold'), and at least one later item
-- of the key waits behind it. For each endpoint: how many keys, and of them the one whose
-- first waiting item was enqueued earliest (its key and that time: how long deliveries have
-- waited). Reads the keys' heads in flight or retrying (queue_order_started, a handful per
-- endpoint) and the held keys, then one probe per such key: its cost follows the blocked keys,
-- not the queue.
CREATE OR REPLACE FUNCTION pgpace.order_blocked(lo bigint, hi bigint)
RETURNS TABLE (customer_id bigint, blocked_keys bigint, oldest_waiting timestamptz,
               oldest_key text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH head AS (
        SELECT q.customer_id, q.order_key, q.item_id
          FROM pgpace.queue q
         WHERE q.customer_id BETWEEN lo AND hi AND q.order_key IS NOT NULL AND q.attempt > 0
           AND q.last_error IS NOT NULL
        UNION ALL
        SELECT h.customer_id, h.order_key, h.item_id
          FROM pgpace.order_hold h
         WHERE h.customer_id BETWEEN lo AND hi
           AND EXISTS (SELECT 1 FROM pgpace.dead_letter d WHERE d.item_id = h.item_id)
    ), waiting AS (
        SELECT hd.customer_id, hd.order_key, min(w.created_at) AS since
          FROM head hd
         CROSS JOIN LATERAL (
              SELECT i.created_at
                FROM pgpace.queue q
                JOIN pgpace.item i ON i.id = q.item_id
               WHERE q.customer_id = hd.customer_id AND q.order_key = hd.order_key
                 AND q.order_key IS NOT NULL AND q.attempt = 0 AND q.item_id > hd.item_id
               ORDER BY q.item_id LIMIT 1) w
         GROUP BY hd.customer_id, hd.order_key
    )
    SELECT w.customer_id, count(*), min(w.since),
           (array_agg(w.order_key ORDER BY w.since, w.order_key))[1]
      FROM waiting w
     GROUP BY w.customer_id
$$;
REVOKE EXECUTE ON FUNCTION pgpace.order_blocked(bigint, bigint) FROM PUBLIC;
