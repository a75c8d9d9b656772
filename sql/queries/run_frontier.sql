-- Scheduler state a new leader resumes from. UNLOGGED: empty after a crash and on a promoted
-- standby; the leader rebuilds what it lacks with run_frontier_floor.sql.
-- effective_rate: the paced rate per minute (sql/queries/run_pace.sql); NULL: rate_per_minute.
-- @params:
-- @columns: customer_id tat_us credit last_tick effective_rate
SELECT f.customer_id, (extract(epoch FROM f.tat) * 1000000)::bigint AS tat_us,
       f.batch_credit AS credit, f.last_tick, f.effective_rate
  FROM pgpace.frontier f
