-- The (customer, carrier) pairs that have queue rows, by a loose index scan (one probe per
-- pair, not per row), with whether one is due now and the earliest time in index order.
-- Catches work whose NOTIFY was lost (they are best effort) and feeds a new leader.
-- One slice: at most $3 pairs after ($1, $2) in index order (customer id, then carrier; a pass
-- starts after (-9223372036854775808, '')); the next slice starts after the last pair returned,
-- and a slice of fewer than $3 ends the pass. The recursion stops once $3 pairs are read, so a
-- slice costs its pairs whatever the table holds: at 1,000,000 customers the whole scan in one
-- statement took 4.8 s, every claim queued behind it (src/dispatch/housekeeping.c paces them).
-- Whether a pair is due is an ordered probe, not an EXISTS: when a few customers hold the whole
-- queue the statistics give every customer (rows / those few) rows, and an EXISTS (which drops
-- any ORDER BY) was then planned as a sequential scan per pair that stops at the first due row:
-- a pair with nothing due read the whole queue (89 ms at 1,190,000 rows, and a slice holds
-- thousands of pairs). Ordered as the claim index is, it stays one index probe.
-- @params: after_customer_id after_carrier pairs
-- @columns: customer_id carrier due next_us
WITH RECURSIVE pairs AS (
    (SELECT q.customer_id, q.carrier FROM pgpace.queue q
      WHERE q.next_action_at IS NOT NULL
        AND (q.customer_id, q.carrier) > ($1::bigint, $2::text)
      ORDER BY q.customer_id, q.carrier LIMIT 1)
    UNION ALL
    SELECT n.customer_id, n.carrier
      FROM pairs p
     CROSS JOIN LATERAL (
          SELECT q.customer_id, q.carrier FROM pgpace.queue q
           WHERE q.next_action_at IS NOT NULL
             AND (q.customer_id, q.carrier) > (p.customer_id, p.carrier)
           ORDER BY q.customer_id, q.carrier LIMIT 1) n
), slice AS MATERIALIZED (
    SELECT customer_id, carrier FROM pairs LIMIT $3::int
)
SELECT p.customer_id, p.carrier,
       (SELECT true FROM pgpace.queue q
         WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
           AND q.next_action_at <= now()
         ORDER BY q.priority DESC, q.next_action_at LIMIT 1) IS NOT NULL AS due,
       (SELECT (extract(epoch FROM q.next_action_at) * 1000000)::bigint FROM pgpace.queue q
         WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
           AND q.next_action_at IS NOT NULL
         ORDER BY q.priority DESC, q.next_action_at LIMIT 1) AS next_us
  FROM slice p
 ORDER BY p.customer_id, p.carrier
