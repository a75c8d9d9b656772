-- The leader's periodic health check (pgpace.health_check): disables customers whose every
-- delivery failed for $1 ms and at least $2 attempts, and records `breaker_open` for breakers
-- open longer than $3 ms. 0 turns either off.
-- @params: disable_after_ms min_attempts breaker_event_after_ms
-- @columns: disabled breaker_events
SELECT h.disabled, h.breaker_events
  FROM pgpace.health_check(
           CASE WHEN $1::bigint > 0 THEN $1::bigint * interval '1 millisecond' END,
           $2::integer,
           CASE WHEN $3::bigint > 0 THEN $3::bigint * interval '1 millisecond' END) h
