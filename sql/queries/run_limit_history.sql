-- What a new leader resumes the limit windows from (src/dispatch/limits.c): the sends of the
-- last PERIOD of each window, from the attempt log (every attempt that went on the wire: not
-- a give-back, nor an item expired before it was sent) and the claims still leased (sent, or
-- about to be, by the leader before: counted as sent now, the latest they can have gone).
-- Attempts are merged by window into groups of width_us (1: each its own), each group at its
-- latest send, so a window of 50,000 a day reads about a thousand rows, not 50,000. Run once
-- when a leader takes over, never on the hot path.
--  $1 int[] the windows (slots), $2 bigint[] each one's period (how far back), $3 bigint[] each
--  one's merge width; $4 int[] and $5 bigint[]: the customers (endpoints) whose sends count in
--  each window, as (slot, customer) pairs (a customer's window: its endpoints; a host's: every
--  customer on it).
-- @params: slots lookback_us width_us member_slots members
-- @columns: slot at_us sends
WITH w AS (
    SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[]) AS w(slot, lookback_us, width_us)
), m AS (
    SELECT * FROM unnest($4::int[], $5::bigint[]) AS m(slot, customer_id)
)
SELECT x.slot, x.at_us, x.sends
  FROM (
       SELECT w.slot, (extract(epoch FROM max(da.started_at)) * 1000000)::bigint AS at_us,
              count(*) AS sends
         FROM w
         JOIN m ON m.slot = w.slot
         JOIN pgpace.delivery_attempt da
           ON da.customer_id = m.customer_id
          AND da.started_at > now() - w.lookback_us * interval '1 microsecond'
          AND da.started_at < now() + interval '1 hour'
          AND da.outcome <> 'released'
          AND da.error_class IS DISTINCT FROM 'expired'
        GROUP BY w.slot,
                 floor(extract(epoch FROM da.started_at) * 1000000 / w.width_us)
       UNION ALL
       SELECT w.slot, (extract(epoch FROM now()) * 1000000)::bigint, count(*)
         FROM w
         JOIN m ON m.slot = w.slot
         JOIN pgpace.queue q
           ON q.customer_id = m.customer_id
          AND q.claim_token IS NOT NULL
          AND q.next_action_at IS NOT NULL
          AND q.claimed_at > now() - w.lookback_us * interval '1 microsecond'
        GROUP BY w.slot
       ) x
 ORDER BY x.at_us, x.slot
