-- GET /v1/status on a standby: what the database knows of the customers on the requested page
-- ($1: their ids, at most 500) that the leader keeps in memory: the effective rate it last
-- wrote to the frontier, and the latest attempt of the last hour (one probe of
-- delivery_attempt_customer each): its error class and HTTP status when it failed (as
-- `pgpace stats` shows it), with its age in seconds. No queue counts: counting a customer's
-- queue per poll costs a scan of its backlog (1.2 s for 50 customers of 20,000 items each, most
-- of it heap visits of rows not yet vacuumed); the leader shows its queue-gauge counts instead.
-- failing_since_us: the recorded failing streak's start (pgpace.customer_health), NULL when none.
-- @params: ids
-- @columns: customer_id effective_rate last_error_class last_error_status last_error_age_s
-- @columns: failing_since_us
SELECT c.id AS customer_id,
       least(coalesce(f.effective_rate, p.pace), p.pace)::float8 AS effective_rate,
       CASE WHEN la.outcome NOT IN ('success', 'released')
            THEN coalesce(la.error_class, 'http') END AS last_error_class,
       CASE WHEN la.outcome NOT IN ('success', 'released') THEN la.http_status END
           AS last_error_status,
       CASE WHEN la.outcome NOT IN ('success', 'released')
            THEN extract(epoch FROM now() - la.started_at)::float8 END AS last_error_age_s,
       (extract(epoch FROM h.failing_since) * 1000000)::bigint AS failing_since_us
  FROM pgpace.customer c
  -- The pace (0019): the lesser of the rate and the shortest limit window's rate.
  CROSS JOIN LATERAL (SELECT least(c.rate_per_minute, pgpace.limits_rate(c.limits)) AS pace) p
  LEFT JOIN pgpace.frontier f ON f.customer_id = c.id
  LEFT JOIN pgpace.customer_health h ON h.customer_id = c.id
  LEFT JOIN LATERAL (
      SELECT da.outcome, da.error_class, da.http_status, da.started_at
        FROM pgpace.delivery_attempt da
       WHERE da.customer_id = c.id AND da.started_at > now() - interval '1 hour'
       ORDER BY da.started_at DESC LIMIT 1) la ON true
 WHERE c.id = ANY ($1::bigint[])
