-- bench/pgbench/claim_complete.sql - the raw PostgreSQL limit for claim + ack (bench/run):
-- the same statement shapes as pgpace's unlimited claim and successful finalize, written as
-- plainly as possible. Run with: pgbench -n -M prepared -f claim_complete.sql -D n=BATCH -c C -j C
-- Client k works on customer k + 1 (disjoint sets, as the pgpace driver's connections).
-- Claim: lock the N oldest due rows of the customer, push them a lease ahead with a fresh token,
-- return them with their payloads (one transaction). An empty queue claims an empty array (not
-- NULL, which the complete's ::bigint[] would reject), so a run that drains its queue goes on
-- with empty transactions instead of aborting; bench/run counts the rows actually completed.
\set cust :client_id + 1
\set tok random(1, 9000000000000000000)
WITH c AS (
    SELECT q.item_id FROM pgpace.queue q
     WHERE q.customer_id = :cust AND q.carrier = '' AND q.next_action_at <= now()
     ORDER BY q.priority DESC, q.next_action_at
     LIMIT :n
       FOR NO KEY UPDATE SKIP LOCKED
), u AS (
    UPDATE pgpace.queue q
       SET next_action_at = now() + interval '60 seconds', claim_token = :tok,
           claimed_by = 'pgbench', claimed_at = now(), attempt = q.attempt + 1
     WHERE q.item_id = ANY (ARRAY(SELECT item_id FROM c))
    RETURNING q.item_id
)
SELECT coalesce(array_agg(u.item_id), '{}') AS ids, string_agg(i.payload::text, ',') AS payloads
  FROM u JOIN pgpace.item i ON i.id = u.item_id
\gset
-- Complete: delete the queue rows under the token and log one attempt each (one transaction).
WITH d AS (
    DELETE FROM pgpace.queue q
     WHERE q.item_id = ANY (:ids::bigint[]) AND q.claim_token = :tok
    RETURNING q.item_id, q.customer_id, q.attempt
)
INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, duration_ms,
                                     http_status, outcome)
SELECT d.item_id, d.customer_id, d.attempt, now(), 1.0, 200, 'success' FROM d;
