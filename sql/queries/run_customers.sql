-- The dispatcher's view of customers: all of them ($1 NULL) or one (after a change NOTIFY).
SELECT c.id, c.name, c.mode, c.rate_per_minute, c.burst, c.webhook_url,
       array_to_string(c.signing_secrets, ' '), coalesce(c.max_in_flight, 0), c.paused
  FROM pgpace.customer c
 WHERE $1::bigint IS NULL OR c.id = $1::bigint
