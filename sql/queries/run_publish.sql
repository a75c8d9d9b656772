-- What the leader publishes of its configuration (sql/migrations/0011_recover.sql): sent when it
-- takes the lead and on every reload while it leads, so SQL that needs the batch tick
-- (pgpace.estimate_send_time, customer_stats.backlog_seconds) follows the dispatching instance.
-- @params: batch_tick_ms instance
INSERT INTO pgpace.leader_config AS l (singleton, batch_tick_ms, instance, written_at)
VALUES (true, $1::integer, $2::text, now())
ON CONFLICT (singleton) DO UPDATE
   SET batch_tick_ms = EXCLUDED.batch_tick_ms, instance = EXCLUDED.instance, written_at = now()
