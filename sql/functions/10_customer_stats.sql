-- 10_customer_stats.sql - the per-customer view of the queue.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Per-customer view of the queue for `pgpace stats` and dashboards. A claimed row whose lease
-- has passed counts as due again, since the next claim will recover it.
--
-- The per-customer count names next_action_at IS NOT NULL so that it reads pgpace.queue through
-- the partial claim index (queue_claim): without it, every customer cost a sequential scan of
-- the whole queue (19.6 s for 1,000 customers over 270,000 rows), which held the leader's
-- queue gauges (sql/queries/run_metrics.sql) and every claim behind them that long. Rows
-- without a next_action_at are not counted anyway (every FILTER compares it).
-- The index alone was not enough once a few customers held the whole queue: the statistics then
-- give every customer (rows / those few) rows, and a sequential scan of the queue per customer
-- looked as cheap as the index (65-73 ms per customer beside four 250,000-item backlogs: about
-- 130 s for 2,000 customers). So each count reads an ordered subquery (the index's order) under
-- a limit the planner cannot see: a LIMIT that is a sub-select is costed as a tenth of the
-- rows, so the index's ordered scan costs a tenth and a sequential scan must still read and
-- sort everything. The limit is the largest bigint: it never cuts a count. Dead letters the
-- same way (one customer dead-lettering everything is the same skew).
-- effective_rate_per_minute: the rate the leader paces the customer at (lowered while its
-- receiver answers 429/503, sql/queries/run_pace.sql); rate_per_minute when it has none, and
-- never above rate_per_minute (the rate may have been lowered since).
-- backlog_seconds: how long the due items take at the customer's pace: due / effective rate
-- (per minute for spaced customers; per tick of the leader's batch_tick_ms, pgpace.leader_config,
-- for batch ones, whose allowance is the rate per tick); for unlimited ones due / the attempts
-- per second of the last minute (from at most the last 1000, so it stays cheap for a fast
-- customer), NULL when it made none. 0 when nothing is due.
-- disabled: health disabled it (every delivery failed for [health] disable_after); its items
-- wait until `pgpace customer enable`.
-- Endpoints (0018) are rows of their own here, named "<customer>/<endpoint>": parent_customer
-- is the customer an endpoint belongs to (NULL on a customer's row), endpoint its name within
-- it: 'default' on a customer's row with a receiver of its own, NULL on one without (such a
-- row never has queued items: its events are stored once and queued as its endpoints'
-- deliveries, so every count of it but dead is 0; dead counts what deleted endpoints left).
-- Limits (0019): the pace is the lesser of rate_per_minute and the shortest limit window's rate
-- (pgpace.limits_rate; a receiver with windows may have no rate), so effective_rate_per_minute
-- and backlog_seconds use that; `limits` are the row's windows (canonical, text[]).
-- Columns can only be appended here (CREATE OR REPLACE VIEW); see README to change others.
CREATE OR REPLACE VIEW pgpace.customer_stats AS
SELECT c.name AS customer, c.mode, c.rate_per_minute, c.burst, c.paused,
       coalesce(q.due, 0) AS due,
       coalesce(q.in_flight, 0) AS in_flight,
       coalesce(q.delayed, 0) AS delayed,
       coalesce(d.dead, 0) AS dead,
       now() - q.oldest_due AS oldest_due_age,
       coalesce(b.state, 'closed') AS breaker,
       CASE WHEN b.state = 'open' THEN b.open_until END AS breaker_open_until,
       least(coalesce(f.effective_rate, p.pace), p.pace) AS effective_rate_per_minute,
       CASE WHEN coalesce(q.due, 0) = 0 THEN 0::float8
            WHEN c.mode = 'unlimited' THEN q.due / nullif(u.per_s, 0)
            ELSE q.due / least(coalesce(f.effective_rate, p.pace), p.pace)
                 * CASE WHEN c.mode = 'batch' THEN coalesce(lc.batch_tick_ms, 60000) / 1000.0
                        ELSE 60.0 END
       END AS backlog_seconds,
       c.disabled_at IS NOT NULL AS disabled,
       pc.name AS parent_customer,
       CASE WHEN c.parent_id IS NOT NULL THEN c.endpoint_name
            WHEN c.webhook_url IS NOT NULL THEN 'default' END AS endpoint,
       c.limits
  FROM pgpace.customer c
  -- least() skips a NULL: the rate, the windows' rate, or the lesser of both.
  CROSS JOIN LATERAL (SELECT least(c.rate_per_minute, pgpace.limits_rate(c.limits)) AS pace) p
  LEFT JOIN pgpace.customer pc ON pc.id = c.parent_id
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE qq.next_action_at <= now()) AS due,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NOT NULL) AS in_flight,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NULL) AS delayed,
             min(qq.next_action_at) FILTER (WHERE qq.next_action_at <= now()) AS oldest_due
        FROM (SELECT qq.next_action_at, qq.claim_token FROM pgpace.queue qq
               WHERE qq.customer_id = c.id AND qq.next_action_at IS NOT NULL
               ORDER BY qq.carrier, qq.priority DESC, qq.next_action_at
               LIMIT (SELECT 9223372036854775807)) qq) q ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS dead
        FROM (SELECT dl.failed_at FROM pgpace.dead_letter dl WHERE dl.customer_id = c.id
               ORDER BY dl.failed_at LIMIT (SELECT 9223372036854775807)) dl) d ON true
  LEFT JOIN pgpace.breaker b ON b.customer_id = c.id
  LEFT JOIN pgpace.frontier f ON f.customer_id = c.id
  LEFT JOIN pgpace.leader_config lc ON true
  LEFT JOIN LATERAL (
      SELECT a.n / CASE WHEN a.n < 1000 THEN 60.0
                        ELSE greatest(extract(epoch FROM now() - a.oldest), 0.001) END AS per_s
        FROM (SELECT count(*) AS n, min(r.started_at) AS oldest
                FROM (SELECT da.started_at FROM pgpace.delivery_attempt da
                       WHERE c.mode = 'unlimited' AND q.due > 0 AND da.customer_id = c.id
                         AND da.started_at > now() - interval '1 minute'
                       ORDER BY da.started_at DESC LIMIT 1000) r) a) u ON true;
