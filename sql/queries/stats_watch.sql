-- The live view of `pgpace stats --watch`: the per-customer stats plus the effective rate (as
-- in stats.sql), what was delivered in the last minute (observed rate) and the last three gaps
-- between successful webhooks.
SELECT s.customer, s.mode, s.rate_per_minute AS rate,
       trim_scale(round(s.effective_rate_per_minute::numeric,
                        8 - floor(log(s.effective_rate_per_minute::numeric))::integer)) AS eff_rate,
       coalesce(o.per_min, 0) AS observed,
       coalesce(g.gaps, '-') AS last_gaps_ms,
       s.due + s.delayed AS queued, s.in_flight, s.dead,
       s.breaker || CASE WHEN s.paused THEN ' (paused)' ELSE '' END
                 || CASE WHEN s.disabled THEN ' (disabled)' ELSE '' END AS state
  FROM pgpace.customer_stats s
  JOIN pgpace.customer c ON c.name = s.customer
  LEFT JOIN LATERAL (
      SELECT count(*) AS per_min FROM pgpace.delivery_attempt a
       WHERE a.customer_id = c.id AND a.outcome = 'success'
         AND a.started_at > now() - interval '1 minute') o ON true
  LEFT JOIN LATERAL (
      SELECT string_agg(round(extract(epoch FROM x.gap) * 1000)::text, ' ' ORDER BY x.started_at) AS gaps
        FROM (SELECT a.started_at, a.started_at - lag(a.started_at) OVER (ORDER BY a.started_at) AS gap
                FROM (SELECT a.started_at FROM pgpace.delivery_attempt a
                       WHERE a.customer_id = c.id AND a.outcome = 'success'
                         AND a.started_at > now() - interval '10 minutes'
                       ORDER BY a.started_at DESC LIMIT 4) a) x
       WHERE x.gap IS NOT NULL) g ON true
 WHERE $1::text IS NULL OR s.customer = $1
 ORDER BY s.customer
