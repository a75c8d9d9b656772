-- The leader's effective rates (pacing that listens to the receiver: lowered on 429/503,
-- regained per success), kept in frontier so a new leader resumes them.
--  $1 bigint[] customer, $2 float8[] effective rate per minute (NULL: back to rate_per_minute)
-- Customers deleted meanwhile are skipped: the KEY SHARE lock makes a concurrent
-- `customer delete` wait, or (once it committed) drops the row here, so the foreign key never
-- fails. A customer listed twice takes its last rate (one upsert may not touch a row twice).
-- @params: customer effective_rate
WITH p AS (
    SELECT DISTINCT ON (p.customer_id) p.customer_id, p.effective_rate
      FROM unnest($1::bigint[], $2::float8[]) WITH ORDINALITY AS p(customer_id, effective_rate, ord)
     WHERE p.customer_id IS NOT NULL
     ORDER BY p.customer_id, p.ord DESC
), live AS (
    SELECT c.id FROM pgpace.customer c WHERE c.id IN (SELECT p.customer_id FROM p) FOR KEY SHARE
)
INSERT INTO pgpace.frontier AS f (customer_id, effective_rate)
SELECT p.customer_id, p.effective_rate FROM p JOIN live ON live.id = p.customer_id
ON CONFLICT (customer_id) DO UPDATE SET effective_rate = EXCLUDED.effective_rate
 WHERE f.effective_rate IS DISTINCT FROM EXCLUDED.effective_rate
