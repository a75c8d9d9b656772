-- A customer's failing streak began ($2 true: breaker_failures attempts in a row failed since
-- $3, epoch us; $4 failures so far, $5 last error) or ended ($2 false: a success), with its
-- `failing` / `recovered` event (pgpace.health_note).
-- @params: customer_id failing failing_since_us failures last_error
-- @columns: noted
SELECT pgpace.health_note(
           $1::bigint, $2::boolean,
           CASE WHEN $3::bigint IS NULL THEN NULL
                ELSE 'epoch'::timestamptz + $3::bigint * interval '1 microsecond' END,
           $4::integer, $5::text) IS NULL AS noted
