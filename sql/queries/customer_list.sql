SELECT c.name, c.mode, c.rate_per_minute AS rate, c.burst, c.paused,
       c.disabled_at IS NOT NULL AS disabled,
       coalesce(c.max_in_flight::text, '-') AS max_in_flight, c.max_attempts,
       coalesce(c.max_age::text, '-') AS max_age, c.webhook_url
  FROM pgpace.customer c ORDER BY c.name
