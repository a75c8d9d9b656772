-- Scheduler state a new leader resumes from (empty after a crash: every customer is eligible).
-- @params:
-- @columns: customer_id tat_us credit last_tick
SELECT f.customer_id, (extract(epoch FROM f.tat) * 1000000)::bigint AS tat_us,
       f.batch_credit AS credit, f.last_tick
  FROM pgpace.frontier f
