-- A claim round that uses none of run_claim.sql's frontier, tick or carriers (no spaced
-- customer, not a batch tick, no item naming a carrier): in practice a round of unlimited
-- customers, or batch customers taking what they are still owed. Such a round has one pair per
-- customer, whose limit is the customer's, so it needs neither the customer list, nor the
-- carrier rankings and turns, nor the frontier upsert. Same effect and same rows as run_claim.sql
-- for such a round (src/dispatch/rows.c checks the round is one before choosing this statement).
--  $1 bigint[] pair customer, $2 int[] pair limit (every pair's carrier is '')
--  $3 int lease seconds, $4 bigint claim token, $5 text claimed_by
-- Rows: kind 'i' per claimed item; kind 'd' per pair that had fewer due rows than its limit,
-- with the pair's next future next_action_at (NULL: nothing queued) so the caller can sleep.
-- The columns are run_claim.sql's, in the same places (one parser reads both).
-- Recovery pace (pgpace.recovery_pace): this statement does not keep its cell, so it takes no
-- recovered item (priority -32768) of a customer that has one. Its rows name the pace
-- (rec_period_us) and a 'd' row says when recovered items are held back (rec_at: now), so the
-- dispatcher claims that customer with run_claim.sql from then on.
-- Ordered delivery (order_key, 0020_order_keys.sql): of the items of one endpoint and key only
-- the head is claimable, whatever its priority (order wins), and only while no other item of
-- the key is in flight or retrying and no dead head holds the key; items without a key are
-- not gated. A key's next item becomes due when its head leaves the queue, which no NOTIFY
-- announces: the caller claims the pair again when one of its keyed items is finalized.
-- @params: pair_customer pair_limit lease_s token claimed_by
-- @columns: kind item_id customer_id carrier attempt max_attempts stale payload created_us
-- @columns: next_us frontier_rows prio due_at expires_in_us traceparent tracestate rec_at
-- @columns: rec_period_us msg_id ordered
WITH pair AS (
    -- (SELECT $n) hides the arrays' lengths from the planner, as a generic plan does not know
    -- them either: both plans then cost the same, so the plan cache keeps the generic one and
    -- the statement is not planned again every round (0.5 ms of a 1,000-item claim).
    SELECT p.customer_id, p.n, ceil(60000000 / rp.rate_per_minute)::bigint AS rec_period
      FROM unnest((SELECT $1::bigint[]), (SELECT $2::integer[])) AS p(customer_id, n)
      LEFT JOIN pgpace.recovery_pace rp ON rp.customer_id = p.customer_id
), cand AS (
    SELECT q.item_id, q.customer_id, q.priority, q.next_action_at, q.attempt, q.max_attempts,
           q.claim_token, q.expires_at, p.rec_period
      FROM pair p
     CROSS JOIN LATERAL (
          SELECT q.item_id, q.customer_id, q.priority, q.next_action_at, q.attempt,
                 q.max_attempts, q.claim_token, q.expires_at
            FROM pgpace.queue q
           WHERE q.customer_id = p.customer_id AND q.carrier = ''
             AND q.next_action_at <= now()
             -- Past its deadline: never sent; the leader's sweep dead-letters it (run_expire.sql).
             AND (q.expires_at IS NULL OR q.expires_at > now())
             -- Not the recovery lane of a customer with a recovery pace (an index bound).
             AND q.priority >= CASE WHEN p.rec_period IS NOT NULL THEN -32767 ELSE -32768 END
             -- Ordered delivery (0020_order_keys.sql): an item with an order key only when it
             -- is its key's head: no earlier item of the endpoint and key still queued (due,
             -- retrying or in flight), none of the key's items claimed before (a replayed or
             -- late-committed lower id waits for it too), and no dead head holding the key.
             -- Two probes of small partial indexes, for keyed rows only.
             AND (q.order_key IS NULL
                  OR (NOT EXISTS (SELECT 1 FROM pgpace.queue e
                                   WHERE e.customer_id = q.customer_id AND e.order_key = q.order_key
                                     AND e.order_key IS NOT NULL AND e.attempt = 0
                                     AND e.item_id < q.item_id)
                      AND NOT EXISTS (SELECT 1 FROM pgpace.queue e
                                       WHERE e.customer_id = q.customer_id
                                         AND e.order_key = q.order_key AND e.order_key IS NOT NULL
                                         AND e.attempt > 0 AND e.item_id <> q.item_id)
                      -- (The first term, once per statement: no held key, no probe.)
                      AND NOT ((SELECT EXISTS (SELECT 1 FROM pgpace.order_hold))
                               AND EXISTS (SELECT 1 FROM pgpace.order_hold h
                                            WHERE h.customer_id = q.customer_id
                                              AND h.order_key = q.order_key
                                              AND h.item_id < q.item_id
                                              AND EXISTS (SELECT 1 FROM pgpace.dead_letter d
                                                           WHERE d.item_id = h.item_id)))))
           ORDER BY q.priority DESC, q.next_action_at
           LIMIT p.n
             FOR NO KEY UPDATE SKIP LOCKED) q
), claimed AS (
    -- Updates exactly the rows of cand: this statement holds their locks. So the rows below
    -- come from cand (attempt + 1 is what this sets), with no join of the two 1,000-row sets,
    -- whose plan would rest on row estimates a generic plan does not have.
    -- = ANY (ARRAY(...)) keeps this a primary-key probe per row (see run_claim.sql).
    UPDATE pgpace.queue q
       SET next_action_at = now() + make_interval(secs => $3::integer),
           claim_token = $4::bigint, claimed_by = $5::text, claimed_at = now(),
           attempt = q.attempt + 1,
           -- Claimed once, never superseded: the receiver may have seen its webhook-id.
           supersede_key = NULL
     WHERE q.item_id = ANY (ARRAY(SELECT item_id FROM cand))
)
SELECT 'i' AS kind, c.item_id, c.customer_id, '' AS carrier, c.attempt + 1 AS attempt,
       c.max_attempts, c.claim_token IS NOT NULL AS stale, i.payload::text AS payload,
       (extract(epoch FROM i.created_at) * 1000000)::bigint AS created_us,
       NULL::bigint AS next_us, 0::bigint AS frontier_rows,
       c.priority AS prio, c.next_action_at AS due_at,
       -- Time left, not the deadline: the dispatcher adds it to its own clock (see rows.c).
       CASE WHEN c.expires_at IS NOT NULL
            THEN greatest((extract(epoch FROM c.expires_at - now()) * 1000000)::bigint, 1)
       END AS expires_in_us,
       -- W3C Trace Context given at enqueue (NULL: none), sent as headers of the same names.
       i.traceparent, i.tracestate, NULL::bigint AS rec_at, c.rec_period AS rec_period_us,
       i.msg_id, i.ordered
  FROM cand c
  -- LIMIT 1 fences the subquery so it stays a primary-key probe per claimed item.
 CROSS JOIN LATERAL (SELECT coalesce(it.payload,
                               -- A delivery made by fan-out: its event's payload (0018).
                               (SELECT ev.payload FROM pgpace.item ev
                                 WHERE ev.id = it.event_id LIMIT 1)) AS payload,
                            it.created_at, it.traceparent, it.tracestate,
                            coalesce(it.event_id, it.id) AS msg_id,
                            it.order_key IS NOT NULL AS ordered
                       FROM pgpace.item it
                      WHERE it.id = c.item_id LIMIT 1) i
UNION ALL
SELECT 'd', NULL, p.customer_id, '', NULL, NULL, NULL, NULL, NULL,
       (SELECT (extract(epoch FROM q.next_action_at) * 1000000)::bigint
          FROM pgpace.queue q
         WHERE q.customer_id = p.customer_id AND q.carrier = ''
           AND q.next_action_at > now()
         ORDER BY q.priority DESC, q.next_action_at LIMIT 1),
       NULL, NULL, NULL, NULL, NULL, NULL,
       CASE WHEN p.rec_period IS NOT NULL
                 AND EXISTS (SELECT 1 FROM pgpace.queue q
                              WHERE q.customer_id = p.customer_id AND q.carrier = ''
                                AND q.priority = -32768 AND q.next_action_at <= now()
                                AND (q.expires_at IS NULL OR q.expires_at > now()))
            THEN (extract(epoch FROM now()) * 1000000)::bigint END,
       p.rec_period, NULL, NULL
  FROM pair p
  LEFT JOIN (SELECT c.customer_id, count(*) AS k FROM cand c GROUP BY c.customer_id) pp
         ON pp.customer_id = p.customer_id
 -- A round that got all it asked (the busy case) has no short pair: a one-time filter then
 -- skips counting per pair.
 WHERE (SELECT count(*) FROM cand) < (SELECT sum(n) FROM pair)
   AND coalesce(pp.k, 0) < p.n
 -- Deliveries start in result order: most urgent first.
 ORDER BY prio DESC NULLS LAST, due_at
