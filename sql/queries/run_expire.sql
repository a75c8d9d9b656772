-- The leader's expiry sweep: dead-letters (last_error 'expired') at most $1 queue rows past their
-- deadline that no delivery holds: never claimed, waiting for a retry or their release, or
-- whose lease ran out (the instance that claimed them is gone or too late; a finalisation it
-- still sends finds the row gone and is counted as lost ownership). Rows of paused customers
-- and of customers whose breaker is open go too: a deadline does not wait for a receiver.
-- Items on the wire (lease running) are left to the dispatcher, which checks the deadline
-- before each request and writes the outcome 'expired' itself. Reads queue_expires from the
-- oldest deadline on; SKIP LOCKED passes over rows a claim or a superseding producer holds.
-- No attempt is logged: no request was made. Returns one row per customer with its count.
-- @params: batch
-- @columns: customer_id customer expired
WITH doomed AS (
    SELECT q.item_id
      FROM pgpace.queue q
     WHERE q.expires_at <= now()
       AND (q.claim_token IS NULL OR q.next_action_at <= now())
     ORDER BY q.expires_at
     LIMIT $1::integer
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgpace.queue q
     WHERE q.item_id = ANY (ARRAY(SELECT item_id FROM doomed))
    RETURNING q.item_id, q.customer_id, q.carrier, q.attempt
), dead AS (
    -- A row whose lease ran out counts its claimed attempt as made (it may have been sent).
    INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
    SELECT g.item_id, g.customer_id, nullif(g.carrier, ''), g.attempt, 'expired'
      FROM gone g
    ON CONFLICT DO NOTHING
)
SELECT g.customer_id, c.name AS customer, count(*) AS expired
  FROM gone g
  LEFT JOIN pgpace.customer c ON c.id = g.customer_id
 GROUP BY g.customer_id, c.name
