-- The dispatcher's view of customers: all of them ($1 NULL) or one (after a change NOTIFY),
-- with their breaker state so a new leader resumes an open breaker.
SELECT c.id, c.name, c.mode, c.rate_per_minute, c.burst, c.webhook_url,
       array_to_string(c.signing_secrets, ' '), coalesce(c.max_in_flight, 0), c.paused,
       coalesce(c.connect_timeout_ms, 0), coalesce(c.request_timeout_ms, 0),
       coalesce(b.state, 'closed'), coalesce(b.consecutive_failures, 0), coalesce(b.trips, 0),
       (extract(epoch FROM b.open_until) * 1000000)::bigint
  FROM pgpace.customer c
  LEFT JOIN pgpace.breaker b ON b.customer_id = c.id
 WHERE $1::bigint IS NULL OR c.id = $1::bigint
