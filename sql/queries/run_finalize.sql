-- Batched finalisation: one statement for every outcome, each a compare-and-swap on the claim
-- token, so a leader whose lease expired cannot overwrite the item's newer state. Rows come back only for items this leader no longer owned.
-- Outcomes: success (the row goes), retry (rescheduled after the delay; dead-lettered instead
-- once attempt reaches max_attempts), dead (dead-lettered), release (not attempted: due again
-- at once, the attempt given back, nothing logged), pause (410 Gone: as release, logged as
-- 'paused'), throttled (the receiver said "later": 429, or 503 with Retry-After; rescheduled
-- after the delay like retry, but the attempt is given back and the item is never
-- dead-lettered for it, whatever attempt and max_attempts say; logged as 'throttled'), expired
-- (past the item's deadline: dead-lettered with last_error 'expired' and logged as 'expired';
-- with error class 'expired' no request was made and the attempt is given back, otherwise the
-- request failed and its retry would have come after the deadline).
--  $1 bigint[] item, $2 bigint[] token,
--  $3 text[] outcome (success|retry|dead|release|pause|throttled|expired),
--  $4 bigint[] retry delay ms, $5 int[] http status, $6 text[] error class, $7 text[] error,
--  $8 bigint[] attempt start (epoch us), $9 float8[] duration ms, $10 text[] response excerpt
-- @params: item token outcome delay_ms http_status error_class error started_us
-- @params: duration_ms excerpt
-- @columns: item_id
WITH f AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::integer[],
                         $6::text[], $7::text[], $8::bigint[], $9::float8[], $10::text[])
             AS f(item_id, token, outcome, delay_ms, http_status, error_class, error, started_us,
                  duration_ms, excerpt)
), succeeded AS (
    DELETE FROM pgpace.queue q USING f
     WHERE f.outcome = 'success' AND q.item_id = f.item_id AND q.claim_token = f.token
    RETURNING q.item_id, q.customer_id, q.attempt
), retried AS (
    UPDATE pgpace.queue q
       SET next_action_at = now() + f.delay_ms * interval '1 millisecond', claim_token = NULL,
           last_error = left(coalesce(f.error, f.error_class), 1000)
      FROM f
     WHERE f.outcome = 'retry' AND q.item_id = f.item_id AND q.claim_token = f.token
       AND q.attempt < q.max_attempts
    RETURNING q.item_id, q.customer_id, q.attempt
), died AS (
    DELETE FROM pgpace.queue q USING f
     WHERE q.item_id = f.item_id AND q.claim_token = f.token
       AND (f.outcome = 'dead' OR (f.outcome = 'retry' AND q.attempt >= q.max_attempts))
    RETURNING q.item_id, q.customer_id, q.carrier, q.attempt
), expired AS (
    DELETE FROM pgpace.queue q USING f
     WHERE f.outcome = 'expired' AND q.item_id = f.item_id AND q.claim_token = f.token
    RETURNING q.item_id, q.customer_id, q.carrier, q.attempt
), dead_letters AS (
    INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_status, last_error)
    SELECT d.item_id, d.customer_id, nullif(d.carrier, ''), d.attempt, f.http_status,
           left(coalesce(f.error, f.error_class, 'failed'), 1000)
      FROM died d JOIN f ON f.item_id = d.item_id
    UNION ALL
    SELECT e.item_id, e.customer_id, nullif(e.carrier, ''),
           CASE WHEN f.error_class = 'expired' THEN greatest(e.attempt - 1, 0) ELSE e.attempt END,
           f.http_status, 'expired'
      FROM expired e JOIN f ON f.item_id = e.item_id
    ON CONFLICT DO NOTHING
), released AS (
    -- Not attempted (shutdown) or answered 410 Gone (the customer is paused): the lease is
    -- voided and the attempt given back, so the item waits without using up its attempts.
    UPDATE pgpace.queue q
       SET next_action_at = now(), claim_token = NULL, attempt = greatest(q.attempt - 1, 0)
      FROM f
     WHERE f.outcome IN ('release', 'pause') AND q.item_id = f.item_id AND q.claim_token = f.token
    RETURNING q.item_id, q.customer_id, q.attempt + 1 AS attempt, f.outcome
), throttled AS (
    -- Throttled: retried after the delay without using up an attempt, so a receiver that
    -- rate-limits us never turns items into dead letters. Logged with the attempt number used.
    UPDATE pgpace.queue q
       SET next_action_at = now() + f.delay_ms * interval '1 millisecond', claim_token = NULL,
           attempt = greatest(q.attempt - 1, 0),
           last_error = left(coalesce(f.error, f.error_class), 1000)
      FROM f
     WHERE f.outcome = 'throttled' AND q.item_id = f.item_id AND q.claim_token = f.token
    RETURNING q.item_id, q.customer_id, q.attempt + 1 AS attempt
), attempts AS (
    INSERT INTO pgpace.delivery_attempt (item_id, customer_id, attempt, started_at, duration_ms,
                                         http_status, outcome, error_class, response_excerpt)
    SELECT x.item_id, x.customer_id, x.attempt,
           'epoch'::timestamptz + f.started_us * interval '1 microsecond', f.duration_ms,
           f.http_status, x.outcome, f.error_class, f.excerpt
      FROM (SELECT item_id, customer_id, attempt, 'success' AS outcome FROM succeeded
            UNION ALL SELECT item_id, customer_id, attempt, 'retry' FROM retried
            UNION ALL SELECT item_id, customer_id, attempt, 'dead' FROM died
            UNION ALL SELECT item_id, customer_id, attempt, 'paused' FROM released
                       WHERE outcome = 'pause'
            UNION ALL SELECT item_id, customer_id, attempt, 'throttled' FROM throttled
            UNION ALL SELECT item_id, customer_id, attempt, 'expired' FROM expired) x
      JOIN f ON f.item_id = x.item_id
)
SELECT f.item_id FROM f
 WHERE f.item_id NOT IN (SELECT item_id FROM succeeded UNION ALL SELECT item_id FROM retried
                         UNION ALL SELECT item_id FROM died UNION ALL SELECT item_id FROM released
                         UNION ALL SELECT item_id FROM throttled
                         UNION ALL SELECT item_id FROM expired)
