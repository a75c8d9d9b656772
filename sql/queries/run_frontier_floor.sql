-- For the customers the frontier says nothing about (it is UNLOGGED: empty after a crash
-- restart and on a promoted standby), the latest durable traces of their sends, from which the
-- leader rebuilds a conservative GCRA state and batch tick (src/frontier_floor.h): the latest
-- attempt logged, and the latest claim of a queue row still leased (claim_token set: its
-- outcome, and so its attempt, is not written yet). Run once when a leader loads the frontier,
-- never on the hot path.
-- Each customer costs one index probe per attempt partition its horizon reaches
-- (delivery_attempt_customer) and one scan of its entries of queue_claim (only the entries
-- whose next_action_at is within the horizon are read from the heap: a leased row's
-- next_action_at is its claimed_at plus the lease, so that condition is implied and lets the
-- index filter).
--  $1 bigint[] customer, $2 bigint[] its horizon in microseconds (how far back a send still
--  matters for it), $3 bigint the largest of them (prunes attempt partitions at start-up).
-- Rows only for customers with a trace; NULL where one kind has none.
-- @params: customer horizon_us max_horizon_us
-- @columns: customer_id attempt_us claim_us
SELECT c.customer_id,
       (extract(epoch FROM a.started_at) * 1000000)::bigint AS attempt_us,
       (extract(epoch FROM l.claimed_at) * 1000000)::bigint AS claim_us
  FROM unnest($1::bigint[], $2::bigint[]) AS c(customer_id, horizon_us)
  LEFT JOIN LATERAL (
       SELECT max(da.started_at) AS started_at
         FROM pgpace.delivery_attempt da
        WHERE da.customer_id = c.customer_id
          AND da.started_at > now() - c.horizon_us * interval '1 microsecond'
          -- Both bounds are stable for the statement, so they prune the partitions older than
          -- the largest horizon and the days created ahead once, before any probe.
          AND da.started_at > now() - $3::bigint * interval '1 microsecond'
          AND da.started_at < now() + interval '1 hour') a ON true
  LEFT JOIN LATERAL (
       SELECT max(q.claimed_at) AS claimed_at
         FROM pgpace.queue q
        WHERE q.customer_id = c.customer_id
          AND q.next_action_at IS NOT NULL
          AND q.next_action_at > now() - c.horizon_us * interval '1 microsecond'
          AND q.claim_token IS NOT NULL
          AND q.claimed_at > now() - c.horizon_us * interval '1 microsecond') l ON true
 WHERE a.started_at IS NOT NULL OR l.claimed_at IS NOT NULL
