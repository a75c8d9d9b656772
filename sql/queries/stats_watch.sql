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
SELECT s.customer, s.mode, s.rate_per_minute AS rate,
       trim_scale(round(s.effective_rate_per_minute::numeric,
                        8 - floor(log(s.effective_rate_per_minute::numeric))::integer)) AS eff_rate,
       CASE WHEN s.mode = 'batch'
            -- The most a tick may carry: the rate rounded up (only a fraction of a request
            -- carries to the next tick), so 0.5 shows "1 of 1/tick" every second tick.
            THEN coalesce(t.sent, 0) || ' of ' || ceil(s.rate_per_minute)::bigint || '/tick'
            WHEN w.secs >= 60 THEN coalesce(o.sent, 0) || '/min'
            WHEN w.secs < 1 THEN coalesce(o.sent, 0) || ' in ' || round(w.secs::numeric, 1) || ' s'
            ELSE trim_scale(round(coalesce(o.sent, 0) * 60 / w.secs::numeric, 1)) || '/min ('
                 || round(w.secs::numeric) || ' s)' END AS observed,
       coalesce(g.gaps, '-') AS last_gaps_ms,
       s.due + s.delayed AS queued, s.in_flight, s.dead,
       s.breaker || CASE WHEN s.paused THEN ' (paused)' ELSE '' END
                 || CASE WHEN s.disabled THEN ' (disabled)' ELSE '' END AS state
  FROM pgpace.customer_stats s
  JOIN pgpace.customer c ON c.name = s.customer
  CROSS JOIN LATERAL (
      SELECT greatest(now() - interval '1 minute', c.created_at,
                      (SELECT min(l.backend_start) FROM pgpace.leader l)) AS since) ws
  CROSS JOIN LATERAL (SELECT extract(epoch FROM now() - ws.since)::float8 AS secs) w
  LEFT JOIN LATERAL (
      SELECT count(*) AS sent FROM pgpace.delivery_attempt a
       WHERE c.mode <> 'batch' AND a.customer_id = c.id AND a.outcome = 'success'
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
          ON a.customer_id = c.id AND a.started_at >= w.tick_start AND a.started_at < w.tick_end
       WHERE c.mode = 'batch' AND a.outcome <> 'released'
         AND a.error_class IS DISTINCT FROM 'expired') t ON true
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
