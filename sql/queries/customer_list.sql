-- `pgpace customer list`: the customers (tenants; their endpoints are `pgpace endpoint list`),
-- each with its limit (its rate and its windows, separated by commas; '-': none), its own receiver's settings ('-':
-- it has none) and how many endpoints it has (its own receiver, 'default', counted).
SELECT c.name, c.mode, coalesce(c.rate_per_minute::text, '-') AS rate,
       coalesce(nullif(array_to_string(c.limits, ','), ''), '-') AS limits, c.burst, c.paused,
       c.disabled_at IS NOT NULL AS disabled,
       coalesce(c.max_in_flight::text, '-') AS max_in_flight, c.max_attempts,
       coalesce(c.max_age::text, '-') AS max_age,
       (SELECT count(*) FROM pgpace.customer e WHERE e.parent_id = c.id)
         + (c.webhook_url IS NOT NULL)::integer AS endpoints,
       coalesce(c.webhook_url, '-') AS webhook_url
  FROM pgpace.customer c WHERE c.parent_id IS NULL ORDER BY c.name
