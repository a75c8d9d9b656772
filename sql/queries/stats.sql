-- `pgpace stats`: per customer the configured rate and the effective one (eff_rate: lower while
-- the receiver answers 429/503; 9 significant digits, as the pacing arithmetic leaves tails
-- like 48.60000000000001), the queue counts, the oldest due item, the backlog in seconds at the
-- customer's pace (customer_stats.backlog_seconds; '-' for an unlimited customer that sent
-- nothing in the last minute), last_error: when the customer's latest attempt of the last hour
-- failed, its error class and HTTP status ("http:503", "tls", "oauth_http:500", "proxy"; '-'
-- when it succeeded or there was none), and the breaker (and "(disabled)" when health
-- disabled it).
--
-- Endpoints (0018): a customer with endpoints is a line of the customer, then a line per
-- endpoint, indented ("  default" for its own receiver when it has one, then the others by
-- name), each with its own figures as above. The customer's line: its mode and rate (the limit
-- over all of its endpoints, '-' for none), due, in_flight, delayed and dead summed over its
-- endpoints (dead also counts what deleted endpoints left on its row), the oldest due of them,
-- backlog_s the longest of its endpoints' or the sum of their due items at its own rate, and the
-- worst breaker ("open (1 of 3)" when not every endpoint's). A customer without endpoints is one
-- line, as before endpoints. $1 is a customer (its line and its endpoints') or an endpoint's
-- full name ("acme/crm": that line).
-- Limits (0019): where a row has limit windows, its rate cell lists them after its rate (per
-- minute, when it has one), separated by commas without blanks so that the cell stays one
-- word: "10/s,50000/day", "600/min,50000/day".
-- @params: customer
-- @columns: customer mode rate eff_rate paused due in_flight delayed dead oldest_due_s
-- @columns: backlog_s last_error breaker
WITH r AS (
    SELECT s.*, c.id, c.parent_id, coalesce(s.parent_customer, s.customer) AS tenant,
           CASE WHEN c.parent_id IS NOT NULL THEN 2
                WHEN EXISTS (SELECT 1 FROM pgpace.customer e WHERE e.parent_id = c.id) THEN 1
                ELSE 0 END AS kind -- 0 a customer alone, 1 one with endpoints, 2 an endpoint
      FROM pgpace.customer_stats s
      JOIN pgpace.customer c ON c.name = s.customer
     WHERE $1::text IS NULL OR s.customer = $1 OR s.parent_customer = $1
), lines AS (
    -- Each receiver's own line: a customer alone, a customer's own receiver ("  default"), an
    -- endpoint ("  crm").
    SELECT r.tenant, CASE r.kind WHEN 0 THEN 0 ELSE 1 END AS place,
           CASE r.kind WHEN 0 THEN '' WHEN 1 THEN '' ELSE r.endpoint END AS sort_name,
           CASE r.kind WHEN 0 THEN r.customer ELSE '  ' || r.endpoint END AS customer,
           r.mode, pgpace.rate_text(r.rate_per_minute, r.limits) AS rate,
           trim_scale(round(r.effective_rate_per_minute::numeric,
                            8 - floor(log(r.effective_rate_per_minute::numeric))::integer))::text
               AS eff_rate,
           r.paused, r.due, r.in_flight, r.delayed, r.dead,
           coalesce(to_char(extract(epoch FROM r.oldest_due_age), 'FM999999990.000'), '-')
               AS oldest_due_s,
           coalesce(to_char(r.backlog_seconds, 'FM999999999990.0'), '-') AS backlog_s,
           coalesce(CASE WHEN la.outcome NOT IN ('success', 'released')
                         THEN coalesce(la.error_class, 'http') || coalesce(':' || la.http_status, '')
                    END, '-') AS last_error,
           r.breaker || coalesce(' until ' || to_char(r.breaker_open_until, 'HH24:MI:SS'), '')
                     || CASE WHEN r.disabled THEN ' (disabled)' ELSE '' END AS breaker
      FROM r
      -- Here, not in the view: run_metrics.sql reads the view every scrape and needs none of it.
      -- One probe of delivery_attempt_customer per customer, newest first.
      LEFT JOIN LATERAL (
          SELECT da.outcome, da.error_class, da.http_status
            FROM pgpace.delivery_attempt da
           WHERE da.customer_id = r.id AND da.started_at > now() - interval '1 hour'
           ORDER BY da.started_at DESC LIMIT 1) la ON true
     -- A customer's own row without a receiver has no line of its own: its customer line says it.
     WHERE r.kind <> 1 OR r.endpoint IS NOT NULL
), tenants AS (
    -- The line of a customer with endpoints, over them all (its own receiver's row included).
    SELECT r.tenant, 0 AS place, '' AS sort_name, r.tenant AS customer,
           min(r.mode) FILTER (WHERE r.kind = 1) AS mode,
           coalesce(pgpace.rate_text(min(r.rate_per_minute) FILTER (WHERE r.kind = 1),
                                     min(r.limits) FILTER (WHERE r.kind = 1)), '-') AS rate,
           '-' AS eff_rate,
           bool_or(r.paused) FILTER (WHERE r.kind = 1) AS paused,
           sum(r.due)::bigint AS due, sum(r.in_flight)::bigint AS in_flight,
           sum(r.delayed)::bigint AS delayed, sum(r.dead)::bigint AS dead,
           coalesce(to_char(extract(epoch FROM max(r.oldest_due_age)), 'FM999999990.000'), '-')
               AS oldest_due_s,
           coalesce(to_char(greatest(
               max(r.backlog_seconds),
               CASE WHEN min(r.mode) FILTER (WHERE r.kind = 1) <> 'unlimited'
                    THEN sum(r.due) * 60.0
                         / least(min(r.rate_per_minute) FILTER (WHERE r.kind = 1),
                                 pgpace.limits_rate(min(r.limits) FILTER (WHERE r.kind = 1))) END),
               'FM999999999990.0'), '-') AS backlog_s,
           '-' AS last_error,
           CASE WHEN bool_or(r.breaker = 'open') FILTER (WHERE r.endpoint IS NOT NULL) THEN 'open'
                WHEN bool_or(r.breaker = 'half_open') FILTER (WHERE r.endpoint IS NOT NULL)
                THEN 'half_open'
                ELSE 'closed' END
           || CASE WHEN count(*) FILTER (WHERE r.endpoint IS NOT NULL AND r.breaker <> 'closed') > 0
                        AND count(*) FILTER (WHERE r.endpoint IS NOT NULL AND r.breaker <> 'closed')
                            < count(*) FILTER (WHERE r.endpoint IS NOT NULL)
                   THEN ' (' || count(*) FILTER (WHERE r.endpoint IS NOT NULL AND r.breaker <> 'closed')
                        || ' of ' || count(*) FILTER (WHERE r.endpoint IS NOT NULL) || ')'
                   ELSE '' END
           || CASE WHEN bool_and(r.disabled) FILTER (WHERE r.endpoint IS NOT NULL)
                   THEN ' (disabled)' ELSE '' END AS breaker
      FROM r
     WHERE r.kind > 0
     GROUP BY r.tenant
    HAVING count(*) FILTER (WHERE r.kind = 1) = 1 -- the customer's own row is among them
)
SELECT x.customer, x.mode, coalesce(x.rate, '-') AS rate, coalesce(x.eff_rate, '-') AS eff_rate,
       x.paused, x.due, x.in_flight, x.delayed, x.dead, x.oldest_due_s, x.backlog_s,
       x.last_error, x.breaker
  FROM (SELECT * FROM lines UNION ALL SELECT * FROM tenants) x
 ORDER BY x.tenant, x.place, x.sort_name
