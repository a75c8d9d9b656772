-- One claim round without carrier ranking (DESIGN §3, §4): the same parameters, rows and
-- effects as run_claim.sql, for rounds where no item names a carrier, so each customer is
-- one pair and the per-carrier and per-customer rankings of run_claim.sql change nothing.
-- Dropping their three window functions and sorts saves about a third of a 1,000-item claim
-- (bench/RESULTS.md). The dispatcher picks this statement only when every pair's carrier is
-- '' ($6, $7 and $8 are then unused but kept, so both statements take the same parameters).
WITH unused_params AS (
    -- Never executed (not referenced); it only gives the carrier parameters their types.
    SELECT $6::text[] AS carriers, $7::integer[] AS budgets, $8::integer AS default_budget
), pair AS (
    SELECT p.customer_id, p.carrier, p.n
      FROM unnest($1::bigint[], $2::text[], $3::integer[]) AS p(customer_id, carrier, n)
), cust AS (
    SELECT c.customer_id, c.n
      FROM unnest($4::bigint[], $5::integer[]) AS c(customer_id, n)
     -- Batch: a tick is dispatched once per customer, also across a leader failover.
     WHERE $16::bigint IS NULL
        OR NOT EXISTS (SELECT 1 FROM pgpace.frontier f
                        WHERE f.customer_id = c.customer_id AND f.last_tick >= $16::bigint)
), chosen AS (
    SELECT q.item_id, q.customer_id, q.carrier, q.claim_token AS old_token, q.priority,
           q.next_action_at
      FROM pair p
      JOIN cust ON cust.customer_id = p.customer_id
     CROSS JOIN LATERAL (
          SELECT q.item_id, q.customer_id, q.carrier, q.priority, q.next_action_at, q.claim_token
            FROM pgpace.queue q
           WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
             AND q.next_action_at <= now()
           ORDER BY q.priority DESC, q.next_action_at
           LIMIT least(p.n, cust.n)
             FOR NO KEY UPDATE SKIP LOCKED) q
), claimed AS (
    -- = ANY(ARRAY(...)) keeps this a primary-key probe per chosen row (see run_claim.sql).
    UPDATE pgpace.queue q
       SET next_action_at = now() + make_interval(secs => $9::integer),
           claim_token = $10::bigint, claimed_by = $11::text, claimed_at = now(),
           attempt = q.attempt + 1
     WHERE q.item_id = ANY (ARRAY(SELECT item_id FROM chosen))
    RETURNING q.item_id, q.customer_id, q.carrier, q.attempt, q.max_attempts
), per_customer AS (
    SELECT c.customer_id, count(*) AS k FROM claimed c GROUP BY c.customer_id
), per_pair AS (
    SELECT c.customer_id, c.carrier, count(*) AS k FROM chosen c GROUP BY c.customer_id, c.carrier
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
       ch.priority AS prio, ch.next_action_at AS due_at
  FROM claimed c
  JOIN chosen ch ON ch.item_id = c.item_id
 CROSS JOIN LATERAL (SELECT it.payload, it.created_at FROM pgpace.item it
                      WHERE it.id = c.item_id LIMIT 1) i
UNION ALL
SELECT 'd', NULL, p.customer_id, p.carrier, NULL, NULL, NULL, NULL, NULL,
       (SELECT (extract(epoch FROM q.next_action_at) * 1000000)::bigint
          FROM pgpace.queue q
         WHERE q.customer_id = p.customer_id AND q.carrier = p.carrier
           AND q.next_action_at > now()
         ORDER BY q.priority DESC, q.next_action_at LIMIT 1),
       NULL, NULL, NULL
  FROM pair p
  JOIN cust ON cust.customer_id = p.customer_id
  LEFT JOIN per_pair pp ON pp.customer_id = p.customer_id AND pp.carrier = p.carrier
 WHERE coalesce(pp.k, 0) < least(p.n, cust.n)
 ORDER BY prio DESC NULLS LAST, due_at
