-- Scheduler state a new leader resumes from (empty after a crash: every customer is eligible).
SELECT f.customer_id, (extract(epoch FROM f.tat) * 1000000)::bigint, f.batch_credit, f.last_tick
  FROM pgpace.frontier f
