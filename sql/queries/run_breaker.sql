-- Records a breaker transition for a customer ($2 state, $3 consecutive failures, $4 trips,
-- $5 open until in epoch us or NULL, $6 last error) with its open spell's start
-- (pgpace.breaker_record).
-- @params: customer_id state failures trips open_until_us last_error
-- @columns: recorded
SELECT pgpace.breaker_record(
           $1::bigint, $2::text, $3::integer, $4::integer,
           CASE WHEN $5::bigint IS NULL THEN NULL
                ELSE 'epoch'::timestamptz + $5::bigint * interval '1 microsecond' END,
           $6::text) IS NULL AS recorded
