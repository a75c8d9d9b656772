-- The (customer, carrier) pairs that have queue rows, by a loose index scan (one probe per
-- pair, not per row), with whether one is due now and the earliest time in index order.
-- Catches work whose NOTIFY was lost (they are best effort) and feeds a new leader.
-- @params:
-- @columns: customer_id carrier due next_us
WITH RECURSIVE pairs AS (
    (SELECT q.customer_id, q.carrier FROM pgpace.queue q
      WHERE q.next_action_at IS NOT NULL
      ORDER BY q.customer_id, q.carrier LIMIT 1)
    UNION ALL
    SELECT n.customer_id, n.carrier
      FROM pairs p
     CROSS JOIN LATERAL (
          SELECT q.customer_id, q.carrier FROM pgpace.queue q
           WHERE q.next_action_at IS NOT NULL
             AND (q.customer_id, q.carrier) > (p.customer_id, p.carrier)
           ORDER BY q.customer_id, q.carrier LIMIT 1) n
)
SELECT p.customer_id, p.carrier,
       EXISTS (SELECT 1 FROM pgpace.queue q
                WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
                  AND q.next_action_at <= now()) AS due,
       (SELECT (extract(epoch FROM q.next_action_at) * 1000000)::bigint FROM pgpace.queue q
         WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
           AND q.next_action_at IS NOT NULL
         ORDER BY q.priority DESC, q.next_action_at LIMIT 1) AS next_us
  FROM pairs p
