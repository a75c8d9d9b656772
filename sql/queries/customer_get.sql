SELECT c.name, c.mode, c.rate_per_minute, c.burst, c.webhook_url, c.paused,
       coalesce(c.max_in_flight::text, 'unlimited') AS max_in_flight, c.max_attempts,
       coalesce(c.connect_timeout_ms::text, 'default') AS connect_timeout_ms,
       coalesce(c.request_timeout_ms::text, 'default') AS request_timeout_ms,
       coalesce(c.throttle_decrease::text, 'default') AS throttle_decrease,
       coalesce(c.throttle_increase::text, 'default') AS throttle_increase,
       coalesce(c.throttle_floor::text, 'default') AS throttle_floor,
       coalesce(c.max_age::text, 'none') AS max_age,
       coalesce(b.state, 'closed') AS breaker,
       cardinality(c.signing_secrets) AS secrets, array_to_string(c.signing_secrets, ' ') AS secret_list,
       c.created_at, c.updated_at
  FROM pgpace.customer c LEFT JOIN pgpace.breaker b ON b.customer_id = c.id
 WHERE c.name = $1
