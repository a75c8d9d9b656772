-- 0006: customer_stats reads pgpace.queue through the claim index.
--
-- The queue's only index on customer_id is queue_claim, partial on next_action_at IS NOT NULL.
-- The view's per-customer count said only customer_id = c.id, which does not imply that
-- predicate, so every customer cost a sequential scan of the whole queue: 19.6 s for 1,000
-- customers over 270,000 rows (EXPLAIN ANALYZE), and the leader's 15-second queue gauges
-- (sql/queries/run_metrics.sql) held its pipeline, and every claim behind them, that long.
-- Rows without a next_action_at were never counted anyway (every FILTER compares it), so the
-- results are unchanged.
CREATE OR REPLACE VIEW pgpace.customer_stats AS
SELECT c.name AS customer, c.mode, c.rate_per_minute, c.burst, c.paused,
       coalesce(q.due, 0) AS due,
       coalesce(q.in_flight, 0) AS in_flight,
       coalesce(q.delayed, 0) AS delayed,
       coalesce(d.dead, 0) AS dead,
       now() - q.oldest_due AS oldest_due_age,
       coalesce(b.state, 'closed') AS breaker,
       CASE WHEN b.state = 'open' THEN b.open_until END AS breaker_open_until
  FROM pgpace.customer c
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE qq.next_action_at <= now()) AS due,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NOT NULL) AS in_flight,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NULL) AS delayed,
             min(qq.next_action_at) FILTER (WHERE qq.next_action_at <= now()) AS oldest_due
        FROM pgpace.queue qq
       WHERE qq.customer_id = c.id AND qq.next_action_at IS NOT NULL) q ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS dead FROM pgpace.dead_letter dl WHERE dl.customer_id = c.id) d ON true
  LEFT JOIN pgpace.breaker b ON b.customer_id = c.id;
