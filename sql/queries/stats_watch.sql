-- The live view of `pgpace stats --watch`: the per-customer stats plus the effective rate (as
-- in stats.sql), what was delivered (observed) and the last three gaps between successful
-- webhooks. Observed is per minute for spaced and unlimited customers: the successes of the last
-- minute, or, when the customer or the leader's session is younger than that, of the time since,
-- per minute of it and marked with its length ("118.5/min (27 s)"): a dispatcher started 27 s
-- ago sent nothing before, so a customer at 120/min read 55/min, the count of a partial minute
-- (the leader's start is unknown to a role that may not see its session: then the minute). For
-- batch customers,
-- whose rate is an allowance per tick, it is the requests sent in the last complete tick of the
-- leader's batch_tick_ms (pgpace.leader_config, 60000 when none published) against that
-- allowance: per minute, a 5 s tick's full allowance of 12 would read as 144, a broken limit.
-- Endpoints (0018) are grouped as in stats.sql: a customer with endpoints is its line (its
-- rate: the limit over them all; observed: the successes of all of them, per minute over the
-- customer's window, against that limit; queued, in flight and dead summed; the worst breaker),
-- then its endpoints' lines, indented, each as a customer's.
-- @params: customer
-- @columns: customer mode rate eff_rate observed last_gaps_ms queued in_flight dead state
WITH r AS (
    SELECT s.*, c.id, c.created_at, coalesce(s.parent_customer, s.customer) AS tenant,
           CASE WHEN c.parent_id IS NOT NULL THEN 2
                WHEN EXISTS (SELECT 1 FROM pgpace.customer e WHERE e.parent_id = c.id) THEN 1
                ELSE 0 END AS kind -- 0 a customer alone, 1 one with endpoints, 2 an endpoint
      FROM pgpace.customer_stats s
      JOIN pgpace.customer c ON c.name = s.customer
     WHERE $1::text IS NULL OR s.customer = $1 OR s.parent_customer = $1
), leader AS (
    SELECT (SELECT min(l.backend_start) FROM pgpace.leader l) AS since
), lines AS (
    SELECT r.tenant, CASE r.kind WHEN 0 THEN 0 ELSE 1 END AS place,
           CASE r.kind WHEN 2 THEN r.endpoint ELSE '' END AS sort_name,
           CASE r.kind WHEN 0 THEN r.customer ELSE '  ' || r.endpoint END AS customer,
           r.mode, coalesce(pgpace.rate_text(r.rate_per_minute, r.limits), '-') AS rate,
           coalesce(trim_scale(round(r.effective_rate_per_minute::numeric,
                                     8 - floor(log(r.effective_rate_per_minute::numeric))::integer))::text,
                    '-') AS eff_rate,
           CASE WHEN r.mode = 'batch'
                -- The most a tick may carry: the rate rounded up (only a fraction of a request
                -- carries to the next tick), so 0.5 shows "1 of 1/tick" every second tick.
                THEN coalesce(t.sent, 0) || ' of '
                     || ceil(least(r.rate_per_minute, pgpace.limits_rate(r.limits)))::bigint
                     || '/tick'
                WHEN w.secs >= 60 THEN coalesce(o.sent, 0) || '/min'
                WHEN w.secs < 1 THEN coalesce(o.sent, 0) || ' in ' || round(w.secs::numeric, 1) || ' s'
                ELSE trim_scale(round(coalesce(o.sent, 0) * 60 / w.secs::numeric, 1)) || '/min ('
                     || round(w.secs::numeric) || ' s)' END AS observed,
           coalesce(g.gaps, '-') AS last_gaps_ms,
           r.due + r.delayed AS queued, r.in_flight, r.dead,
           r.breaker || CASE WHEN r.paused THEN ' (paused)' ELSE '' END
                     || CASE WHEN r.disabled THEN ' (disabled)' ELSE '' END AS state
      FROM r
     CROSS JOIN leader ld
     CROSS JOIN LATERAL (
          SELECT greatest(now() - interval '1 minute', r.created_at, ld.since) AS since) ws
     CROSS JOIN LATERAL (SELECT extract(epoch FROM now() - ws.since)::float8 AS secs) w
      LEFT JOIN LATERAL (
          SELECT count(*) AS sent FROM pgpace.delivery_attempt a
           WHERE r.mode <> 'batch' AND a.customer_id = r.id AND a.outcome = 'success'
             AND a.started_at > ws.since) o ON true
      LEFT JOIN LATERAL (
          -- Ticks are aligned to multiples of batch_tick_ms since the epoch, as the dispatcher's.
          -- Every request that went out counts against the allowance (retries too); released
          -- items and those expired before sending did not go out.
          SELECT count(*) AS sent
            FROM (SELECT to_timestamp((k.end_ms - k.ms) / 1000.0) AS tick_start,
                         to_timestamp(k.end_ms / 1000.0) AS tick_end
                    FROM (SELECT l.ms, floor(extract(epoch FROM now()) * 1000 / l.ms)::bigint * l.ms AS end_ms
                            FROM (SELECT coalesce((SELECT lc.batch_tick_ms FROM pgpace.leader_config lc),
                                                  60000)::bigint AS ms) l) k) w
            JOIN pgpace.delivery_attempt a
              ON a.customer_id = r.id AND a.started_at >= w.tick_start AND a.started_at < w.tick_end
           WHERE r.mode = 'batch' AND a.outcome <> 'released'
             AND a.error_class IS DISTINCT FROM 'expired') t ON true
      LEFT JOIN LATERAL (
          SELECT string_agg(round(extract(epoch FROM x.gap) * 1000)::text, ' ' ORDER BY x.started_at) AS gaps
            FROM (SELECT a.started_at, a.started_at - lag(a.started_at) OVER (ORDER BY a.started_at) AS gap
                    FROM (SELECT a.started_at FROM pgpace.delivery_attempt a
                           WHERE a.customer_id = r.id AND a.outcome = 'success'
                             AND a.started_at > now() - interval '10 minutes'
                           ORDER BY a.started_at DESC LIMIT 4) a) x
           WHERE x.gap IS NOT NULL) g ON true
     -- A customer's own row without a receiver has no line of its own: its customer line says it.
     WHERE r.kind <> 1 OR r.endpoint IS NOT NULL
), tenants AS (
    SELECT r.tenant, 0 AS place, '' AS sort_name, r.tenant AS customer,
           min(r.mode) FILTER (WHERE r.kind = 1) AS mode,
           coalesce(pgpace.rate_text(min(r.rate_per_minute) FILTER (WHERE r.kind = 1),
                                     min(r.limits) FILTER (WHERE r.kind = 1)), '-') AS rate,
           '-' AS eff_rate,
           -- Every endpoint's successes over the customer's window, per minute.
           CASE WHEN min(w.secs) >= 60 THEN sum(o.sent) || '/min'
                WHEN min(w.secs) < 1 THEN sum(o.sent) || ' in ' || round(min(w.secs)::numeric, 1) || ' s'
                ELSE trim_scale(round(sum(o.sent) * 60 / min(w.secs)::numeric, 1)) || '/min ('
                     || round(min(w.secs)::numeric) || ' s)' END AS observed,
           '-' AS last_gaps_ms,
           sum(r.due + r.delayed)::bigint AS queued, sum(r.in_flight)::bigint AS in_flight,
           sum(r.dead)::bigint AS dead,
           CASE WHEN bool_or(r.breaker = 'open') FILTER (WHERE r.endpoint IS NOT NULL) THEN 'open'
                WHEN bool_or(r.breaker = 'half_open') FILTER (WHERE r.endpoint IS NOT NULL)
                THEN 'half_open'
                ELSE 'closed' END
           || CASE WHEN bool_or(r.paused) FILTER (WHERE r.kind = 1) THEN ' (paused)' ELSE '' END
           AS state
      FROM r
     CROSS JOIN leader ld
     -- The customer's window: its own row's age, as a customer alone's.
     CROSS JOIN LATERAL (
          SELECT extract(epoch FROM now() - greatest(now() - interval '1 minute',
                                                     (SELECT t.created_at FROM r t
                                                       WHERE t.tenant = r.tenant AND t.kind = 1),
                                                     ld.since))::float8 AS secs) w
      LEFT JOIN LATERAL (
          SELECT count(*) AS sent FROM pgpace.delivery_attempt a
           WHERE a.customer_id = r.id AND a.outcome = 'success'
             AND a.started_at > now() - w.secs * interval '1 second') o ON true
     WHERE r.kind > 0
     GROUP BY r.tenant
    HAVING count(*) FILTER (WHERE r.kind = 1) = 1 -- the customer's own row is among them
)
SELECT x.customer, x.mode, x.rate, x.eff_rate, x.observed, x.last_gaps_ms, x.queued,
       x.in_flight, x.dead, x.state
  FROM (SELECT * FROM lines UNION ALL SELECT * FROM tenants) x
 ORDER BY x.tenant, x.place, x.sort_name
