-- One claim round: every due (customer, carrier) pair is one index probe, so its cost follows
-- the items claimed, not the backlog.
--  $1 bigint[] pair customer, $2 text[] pair carrier ('' = none), $3 int[] pair limit
--  $4 bigint[] customer, $5 int[] customer limit this round
--  $6 text[] carrier, $7 int[] carrier budget this round; $8 int budget of unlisted carriers
--  $9 int lease seconds, $10 bigint claim token, $11 text claimed_by
--  frontier, one row per customer of the round:
--  $12 bigint[] customer, $13 bigint[] GCRA base (max(tat, now) in epoch us, NULL = not spaced),
--  $14 bigint[] GCRA period us, $15 float8[] batch credit after this tick (NULL = not batch),
--  $16 bigint batch tick number (NULL when the round is not a batch tick)
--  $17 int[] pair items in flight (turns it already had when the customer's carriers take turns)
-- Rows: kind 'i' per claimed item (expires_in_us: the time left to its deadline from this
-- statement's start, NULL for none; the dispatcher checks it again right before sending); kind 'd' per pair that had fewer due rows than its limit,
-- with the pair's next future next_action_at (NULL: nothing queued) so the caller can sleep.
-- @params: pair_customer pair_carrier pair_limit customer customer_limit carrier
-- @params: carrier_budget default_carrier_budget lease_s token claimed_by fr_customer fr_base
-- @params: fr_period fr_credit tick pair_in_flight
-- @columns: kind item_id customer_id carrier attempt max_attempts stale payload created_us
-- @columns: next_us frontier_rows prio due_at expires_in_us traceparent tracestate
WITH pair AS (
    -- ord: the caller lists each customer's pairs least recently served first.
    SELECT p.customer_id, p.carrier, p.n, p.ord, p.in_flight
      FROM unnest($1::bigint[], $2::text[], $3::integer[], $17::integer[])
           WITH ORDINALITY AS p(customer_id, carrier, n, in_flight, ord)
), cust AS (
    SELECT c.customer_id, c.n
      FROM unnest($4::bigint[], $5::integer[]) AS c(customer_id, n)
     -- Batch: a tick is dispatched once per customer, also across a leader failover.
     WHERE $16::bigint IS NULL
        OR NOT EXISTS (SELECT 1 FROM pgpace.frontier f
                        WHERE f.customer_id = c.customer_id AND f.last_tick >= $16::bigint)
), cand AS (
    SELECT q.item_id, q.customer_id, q.carrier, q.priority, q.next_action_at, q.claim_token, p.ord,
           p.in_flight
      FROM pair p
      JOIN cust ON cust.customer_id = p.customer_id
     CROSS JOIN LATERAL (
          SELECT q.item_id, q.customer_id, q.carrier, q.priority, q.next_action_at, q.claim_token
            FROM pgpace.queue q
           WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
             AND q.next_action_at <= now()
             -- Past its deadline: never sent; the leader's sweep dead-letters it (run_expire.sql).
             AND (q.expires_at IS NULL OR q.expires_at > now())
           ORDER BY q.priority DESC, q.next_action_at
           LIMIT least(p.n, cust.n)
             FOR NO KEY UPDATE SKIP LOCKED) q
), within_carrier AS (
    SELECT c.*,
           row_number() OVER (PARTITION BY c.customer_id, c.carrier
                              ORDER BY c.priority DESC, c.next_action_at) AS rp,
           row_number() OVER (PARTITION BY c.carrier ORDER BY c.priority DESC, c.next_action_at) AS rk
      FROM cand c
), carrier_budget AS (
    SELECT k.carrier, k.budget FROM unnest($6::text[], $7::integer[]) AS k(carrier, budget)
), within_customer AS (
    -- Items without a carrier ('') are not subject to carrier caps. Within a customer the
    -- carriers take turns (first item of each pair, least recently served pair first, then the
    -- second of each...), so a carrier with a deep backlog cannot hold the customer's other
    -- carriers back for more than a round, even when the customer's own rate allows one item.
    -- A pair's items in flight count as turns it already had: a carrier whose items are slow
    -- does not take the customer's whole room.
    SELECT w.*, row_number() OVER (PARTITION BY w.customer_id
                                   ORDER BY w.priority DESC, w.rp + w.in_flight, w.ord) AS rc
      FROM within_carrier w
      LEFT JOIN carrier_budget b ON b.carrier = w.carrier
     WHERE w.carrier = '' OR w.rk <= coalesce(b.budget, $8::integer)
), chosen AS (
    -- A round in which no item names a carrier ($6 empty: the caller lists every carrier of
    -- the round) has one pair per customer, limited to the customer's own limit, so the
    -- rankings change nothing: that branch is skipped at run time (a one-time filter) and the
    -- candidates are taken as they are, saving their sorts (a quarter of a 1,000-item claim).
    SELECT c.item_id, c.claim_token AS old_token, c.priority, c.next_action_at
      FROM cand c
     WHERE cardinality($6::text[]) = 0
    UNION ALL
    SELECT w.item_id, w.claim_token, w.priority, w.next_action_at
      FROM within_customer w JOIN cust ON cust.customer_id = w.customer_id
     WHERE cardinality($6::text[]) > 0 AND w.rc <= cust.n
), claimed AS (
    -- = ANY(ARRAY(...)) keeps this a primary-key probe per chosen row; a join here was planned
    -- as a hash join over the whole queue (measured: a sequential scan of 1M rows per round).
    UPDATE pgpace.queue q
       SET next_action_at = now() + make_interval(secs => $9::integer),
           claim_token = $10::bigint, claimed_by = $11::text, claimed_at = now(),
           attempt = q.attempt + 1,
           -- Claimed once, never superseded: the receiver may have seen its webhook-id.
           supersede_key = NULL
     WHERE q.item_id = ANY (ARRAY(SELECT item_id FROM chosen))
    RETURNING q.item_id, q.customer_id, q.carrier, q.attempt, q.max_attempts, q.expires_at
), per_customer AS (
    SELECT c.customer_id, count(*) AS k FROM claimed c GROUP BY c.customer_id
), per_pair AS (
    SELECT c.customer_id, c.carrier, count(*) AS k FROM cand c GROUP BY c.customer_id, c.carrier
), frontier_new AS (
    INSERT INTO pgpace.frontier AS f (customer_id, tat, batch_credit, last_tick)
    SELECT s.customer_id,
           CASE WHEN s.base IS NOT NULL AND coalesce(pc.k, 0) > 0
                THEN 'epoch'::timestamptz + (s.base + pc.k * s.period) * interval '1 microsecond' END,
           coalesce(s.credit, 0),
           CASE WHEN s.credit IS NOT NULL THEN $16::bigint END
      FROM unnest($12::bigint[], $13::bigint[], $14::bigint[], $15::float8[])
               AS s(customer_id, base, period, credit)
      JOIN cust ON cust.customer_id = s.customer_id
      LEFT JOIN per_customer pc ON pc.customer_id = s.customer_id
    ON CONFLICT (customer_id) DO UPDATE
       SET tat = coalesce(EXCLUDED.tat, f.tat),
           batch_credit = CASE WHEN EXCLUDED.last_tick IS NOT NULL THEN EXCLUDED.batch_credit ELSE f.batch_credit END,
           last_tick = coalesce(EXCLUDED.last_tick, f.last_tick)
    RETURNING f.customer_id
)
SELECT 'i' AS kind, c.item_id, c.customer_id, c.carrier, c.attempt, c.max_attempts,
       ch.old_token IS NOT NULL AS stale, i.payload::text AS payload,
       (extract(epoch FROM i.created_at) * 1000000)::bigint AS created_us,
       NULL::bigint AS next_us,
       (SELECT count(*) FROM frontier_new) AS frontier_rows,
       ch.priority AS prio, ch.next_action_at AS due_at,
       -- Time left, not the deadline: the dispatcher adds it to its own clock (see rows.c).
       CASE WHEN c.expires_at IS NOT NULL
            THEN greatest((extract(epoch FROM c.expires_at - now()) * 1000000)::bigint, 1)
       END AS expires_in_us,
       -- W3C Trace Context given at enqueue (NULL: none), sent as headers of the same names.
       i.traceparent, i.tracestate
  FROM claimed c
  JOIN chosen ch ON ch.item_id = c.item_id
  -- LIMIT 1 fences the subquery so it stays a primary-key probe per claimed item.
 CROSS JOIN LATERAL (SELECT it.payload, it.created_at, it.traceparent, it.tracestate
                       FROM pgpace.item it
                      WHERE it.id = c.item_id LIMIT 1) i
UNION ALL
SELECT 'd', NULL, p.customer_id, p.carrier, NULL, NULL, NULL, NULL, NULL,
       (SELECT (extract(epoch FROM q.next_action_at) * 1000000)::bigint
          FROM pgpace.queue q
         WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
           AND q.next_action_at > now()
         ORDER BY q.priority DESC, q.next_action_at LIMIT 1),
       NULL, NULL, NULL, NULL, NULL, NULL
  FROM pair p
  JOIN cust ON cust.customer_id = p.customer_id
  LEFT JOIN per_pair pp ON pp.customer_id = p.customer_id AND pp.carrier = p.carrier
 WHERE coalesce(pp.k, 0) < p.n
 -- Deliveries start in result order: most urgent first.
 ORDER BY prio DESC NULLS LAST, due_at
