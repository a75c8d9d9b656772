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
--  $18 bigint how far ahead of its slot a recovered item may be claimed, us (NULL: 0)
--  $19 bigint[] customer whose endpoints share its limit (tenant.c), $20 bigint[] its cell's tat
--  once this round's slots are handed out (an upper bound, epoch us): stored for a new leader
-- Recovered items (priority -32768, `pgpace recover`) of a customer with a recovery pace
-- (pgpace.recovery_pace) are claimed only as its GCRA cell allows (no burst: one per period,
-- slots up to $18 ahead), after the customer's live items, and the cell advances in this
-- statement: the pace limits their sends, not their due times.
-- Rows: kind 'i' per claimed item (expires_in_us: the time left to its deadline from this
-- statement's start, NULL for none; the dispatcher checks it again right before sending); kind 'd' per pair that had fewer due rows than its limit,
-- with the pair's next future next_action_at (NULL: nothing queued) so the caller can sleep.
-- rec_at: on an 'i' row, the slot of a recovered item under its customer's recovery pace
-- (epoch us: it may not be sent before); on a 'd' row, when the pair's due recovered items held
-- back by that pace may be claimed (NULL: none held). rec_period_us: the customer's recovery
-- pace's period, on every row of a customer that has one (NULL: none).
-- Ordered delivery (order_key, 0020_order_keys.sql): of the items of one endpoint and key only
-- the head is claimable, whatever its priority (order wins), and only while no other item of
-- the key is in flight or retrying and no dead head holds the key; items without a key are
-- not gated. A key's next item becomes due when its head leaves the queue, which no NOTIFY
-- announces: the caller claims the pair again when one of its keyed items is finalized
-- (`ordered`: the item has an order key).
-- @params: pair_customer pair_carrier pair_limit customer customer_limit carrier
-- @params: carrier_budget default_carrier_budget lease_s token claimed_by fr_customer fr_base
-- @params: fr_period fr_credit tick pair_in_flight rec_ahead_us gate_customer gate_tat
-- @columns: kind item_id customer_id carrier attempt max_attempts stale payload created_us
-- @columns: next_us frontier_rows prio due_at expires_in_us traceparent tracestate rec_at
-- @columns: rec_period_us msg_id ordered
WITH pair AS (
    -- ord: the caller lists each customer's pairs least recently served first.
    SELECT p.customer_id, p.carrier, p.n, p.ord, p.in_flight
      FROM unnest($1::bigint[], $2::text[], $3::integer[], $17::integer[])
           WITH ORDINALITY AS p(customer_id, carrier, n, in_flight, ord)
), cust AS (
    -- rec_n: how many recovered items the customer's recovery pace lets this round take (GCRA
    -- without burst: the slots rec_base, rec_base + rec_period, ... up to $18 from now); NULL
    -- when it has no recovery pace (then its recovered items only come after its live ones).
    SELECT c.customer_id, c.n, rc.period_us AS rec_period, rc.base_us AS rec_base,
           CASE WHEN rc.base_us <= rc.now_us + coalesce($18::bigint, 0)
                THEN 1 + (rc.now_us + coalesce($18::bigint, 0) - rc.base_us) / rc.period_us
                WHEN rc.period_us IS NOT NULL THEN 0 END AS rec_n
      FROM unnest($4::bigint[], $5::integer[]) AS c(customer_id, n)
      LEFT JOIN LATERAL (
          SELECT r.period_us, greatest(r.tat_us, r.now_us) AS base_us, r.now_us
            FROM (SELECT ceil(60000000 / rp.rate_per_minute)::bigint AS period_us,
                         (extract(epoch FROM rp.tat) * 1000000)::bigint AS tat_us,
                         (extract(epoch FROM now()) * 1000000)::bigint AS now_us
                    FROM pgpace.recovery_pace rp
                   WHERE rp.customer_id = c.customer_id) r
      ) rc ON true
     -- Batch: a tick is dispatched once per customer, also across a leader failover.
     WHERE $16::bigint IS NULL
        OR NOT EXISTS (SELECT 1 FROM pgpace.frontier f
                        WHERE f.customer_id = c.customer_id AND f.last_tick >= $16::bigint)
), fetched AS (
    SELECT q.item_id, q.customer_id, q.carrier, q.priority, q.next_action_at, q.claim_token, p.ord,
           p.in_flight, cust.rec_n, cust.rec_base, cust.rec_period
      FROM pair p
      JOIN cust ON cust.customer_id = p.customer_id
     CROSS JOIN LATERAL (
          SELECT q.item_id, q.customer_id, q.carrier, q.priority, q.next_action_at, q.claim_token
            FROM pgpace.queue q
           WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
             AND q.next_action_at <= now()
             -- Past its deadline: never sent; the leader's sweep dead-letters it (run_expire.sql).
             AND (q.expires_at IS NULL OR q.expires_at > now())
             -- The recovery lane is not read at all while the customer's recovery pace is closed
             -- (an index bound, so a deep lane costs nothing then).
             AND q.priority >= CASE WHEN cust.rec_n = 0 THEN -32767 ELSE -32768 END
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
           LIMIT least(p.n, cust.n)
             FOR NO KEY UPDATE SKIP LOCKED) q
), cand AS (
    -- Of the recovered items fetched for a customer with a recovery pace, the first rec_n (the
    -- others' locks end with the statement), each with its slot; live items as fetched.
    SELECT f.item_id, f.customer_id, f.carrier, f.priority, f.next_action_at, f.claim_token,
           f.ord, f.in_flight, NULL::bigint AS rec_at, f.rec_period
      FROM fetched f
     WHERE f.priority > -32768 OR f.rec_n IS NULL
    UNION ALL
    SELECT x.item_id, x.customer_id, x.carrier, x.priority, x.next_action_at, x.claim_token,
           x.ord, x.in_flight, x.rec_base + (x.k - 1) * x.rec_period, x.rec_period
      FROM (SELECT f.*, row_number() OVER (PARTITION BY f.customer_id
                                           ORDER BY f.next_action_at, f.item_id) AS k
              FROM fetched f
             WHERE f.priority = -32768 AND f.rec_n IS NOT NULL
               -- A one-time filter: rounds without a recovery pace skip this branch.
               AND EXISTS (SELECT 1 FROM cust WHERE cust.rec_period IS NOT NULL)) x
     WHERE x.k <= x.rec_n
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
    SELECT c.item_id, c.customer_id, c.claim_token AS old_token, c.priority, c.next_action_at,
           c.rec_at, c.rec_period
      FROM cand c
     WHERE cardinality($6::text[]) = 0
    UNION ALL
    SELECT w.item_id, w.customer_id, w.claim_token, w.priority, w.next_action_at, w.rec_at,
           w.rec_period
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
    -- Fetched, not kept: a pair whose recovered items the pace held back is not drained.
    SELECT f.customer_id, f.carrier, count(*) AS k FROM fetched f GROUP BY f.customer_id, f.carrier
), recovery_new AS (
    -- The recovery pace's cell moves one period past the last slot given out.
    UPDATE pgpace.recovery_pace rp
       SET tat = 'epoch'::timestamptz + (x.last_at + x.period) * interval '1 microsecond'
      FROM (SELECT ch.customer_id, max(ch.rec_at) AS last_at, max(ch.rec_period) AS period
              FROM chosen ch WHERE ch.rec_at IS NOT NULL GROUP BY ch.customer_id) x
     WHERE rp.customer_id = x.customer_id
    RETURNING rp.customer_id, x.last_at + x.period AS tat_us
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
), gate_new AS (
    -- Never moved back: a round answered after a later one must not undo it.
    INSERT INTO pgpace.tenant_frontier AS t (customer_id, tat)
    SELECT g.customer_id, 'epoch'::timestamptz + g.tat_us * interval '1 microsecond'
      FROM unnest($19::bigint[], $20::bigint[]) AS g(customer_id, tat_us)
    ON CONFLICT (customer_id) DO UPDATE SET tat = greatest(t.tat, EXCLUDED.tat)
    RETURNING t.customer_id
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
       i.traceparent, i.tracestate, ch.rec_at, ch.rec_period AS rec_period_us,
       -- webhook-id: msg_<msg_id>, the event's id on every delivery of one event.
       i.msg_id, i.ordered
  FROM claimed c
  JOIN chosen ch ON ch.item_id = c.item_id
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
SELECT 'd', NULL, p.customer_id, p.carrier, NULL, NULL, NULL, NULL, NULL,
       (SELECT (extract(epoch FROM q.next_action_at) * 1000000)::bigint
          FROM pgpace.queue q
         WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
           AND q.next_action_at > now()
         ORDER BY q.priority DESC, q.next_action_at LIMIT 1),
       NULL, NULL, NULL, NULL, NULL, NULL,
       -- Due recovered items the pace held back: claimable once its cell allows.
       CASE WHEN cust.rec_period IS NOT NULL
                 AND EXISTS (SELECT 1 FROM pgpace.queue q
                              WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
                                AND q.priority = -32768 AND q.next_action_at <= now()
                                AND (q.expires_at IS NULL OR q.expires_at > now()))
            THEN coalesce(rn.tat_us, cust.rec_base) END,
       cust.rec_period, NULL, NULL
  FROM pair p
  JOIN cust ON cust.customer_id = p.customer_id
  LEFT JOIN per_pair pp ON pp.customer_id = p.customer_id AND pp.carrier = p.carrier
  LEFT JOIN recovery_new rn ON rn.customer_id = p.customer_id
 WHERE coalesce(pp.k, 0) < p.n
 -- Deliveries start in result order: most urgent first.
 ORDER BY prio DESC NULLS LAST, due_at
