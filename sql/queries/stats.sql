-- `pgpace stats`: per customer the configured rate and the effective one (eff_rate: lower while
-- the receiver answers 429/503; 9 significant digits, as the pacing arithmetic leaves tails
-- like 48.60000000000001), the queue counts, the oldest due item, the backlog in seconds at the
-- customer's pace (customer_stats.backlog_seconds; '-' for an unlimited customer that sent
-- nothing in the last minute), last_error: when the customer's latest attempt of the last hour
-- failed, its error class and HTTP status ("http:503", "tls", "oauth_http:500", "proxy"; '-'
-- when it succeeded or there was none), and the breaker (and "(disabled)" when health
-- disabled it).
SELECT s.customer, s.mode, s.rate_per_minute AS rate,
       trim_scale(round(s.effective_rate_per_minute::numeric,
                        8 - floor(log(s.effective_rate_per_minute::numeric))::integer)) AS eff_rate,
       s.paused, s.due, s.in_flight, s.delayed,
       s.dead, coalesce(to_char(extract(epoch FROM s.oldest_due_age), 'FM999999990.000'), '-')
           AS oldest_due_s,
       coalesce(to_char(s.backlog_seconds, 'FM999999999990.0'), '-') AS backlog_s,
       coalesce(CASE WHEN la.outcome NOT IN ('success', 'released')
                     THEN coalesce(la.error_class, 'http') || coalesce(':' || la.http_status, '')
                END, '-') AS last_error,
       s.breaker || coalesce(' until ' || to_char(s.breaker_open_until, 'HH24:MI:SS'), '')
                 || CASE WHEN s.disabled THEN ' (disabled)' ELSE '' END AS breaker
  FROM pgpace.customer_stats s
  JOIN pgpace.customer c ON c.name = s.customer
  -- Here, not in the view: run_metrics.sql reads the view every scrape and needs none of it.
  -- One probe of delivery_attempt_customer per customer, newest first.
  LEFT JOIN LATERAL (
      SELECT da.outcome, da.error_class, da.http_status
        FROM pgpace.delivery_attempt da
       WHERE da.customer_id = c.id AND da.started_at > now() - interval '1 hour'
       ORDER BY da.started_at DESC LIMIT 1) la ON true
 WHERE $1::text IS NULL OR s.customer = $1
 ORDER BY s.customer
