-- `pgpace stats`: per customer the configured rate and the effective one (eff_rate: lower while
-- the receiver answers 429/503; 9 significant digits, as the pacing arithmetic leaves tails
-- like 48.60000000000001), the queue counts, the oldest due item, the backlog in seconds at the
-- customer's pace (customer_stats.backlog_seconds; '-' for an unlimited customer that sent
-- nothing in the last minute) and the breaker (and "(disabled)" when health disabled it).
SELECT s.customer, s.mode, s.rate_per_minute AS rate,
       trim_scale(round(s.effective_rate_per_minute::numeric,
                        8 - floor(log(s.effective_rate_per_minute::numeric))::integer)) AS eff_rate,
       s.paused, s.due, s.in_flight, s.delayed,
       s.dead, coalesce(to_char(extract(epoch FROM s.oldest_due_age), 'FM999999990.000'), '-')
           AS oldest_due_s,
       coalesce(to_char(s.backlog_seconds, 'FM999999999990.0'), '-') AS backlog_s,
       s.breaker || coalesce(' until ' || to_char(s.breaker_open_until, 'HH24:MI:SS'), '')
                 || CASE WHEN s.disabled THEN ' (disabled)' ELSE '' END AS breaker
  FROM pgpace.customer_stats s
 WHERE $1::text IS NULL OR s.customer = $1
 ORDER BY s.customer
