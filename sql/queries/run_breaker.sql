-- Records a breaker transition for a customer ($2 state, $3 consecutive failures, $4 trips,
-- $5 open until in epoch us or NULL, $6 last error).
-- @params: customer_id state failures trips open_until_us last_error
INSERT INTO pgpace.breaker AS b (customer_id, state, consecutive_failures, trips, open_until, last_error)
VALUES ($1::bigint, $2::text, $3::integer, $4::integer,
        CASE WHEN $5::bigint IS NULL THEN NULL
             ELSE 'epoch'::timestamptz + $5::bigint * interval '1 microsecond' END,
        left($6::text, 1000))
ON CONFLICT (customer_id) DO UPDATE
   SET state = EXCLUDED.state, consecutive_failures = EXCLUDED.consecutive_failures,
       trips = EXCLUDED.trips, open_until = EXCLUDED.open_until,
       last_error = coalesce(EXCLUDED.last_error, b.last_error), updated_at = now()
