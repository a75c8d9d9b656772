-- Queue gauges for /metrics, refreshed by the leader every 15 s: per customer (due, in
-- flight, oldest due age in seconds) and the vacuum state of pgpace.queue (on every row). The
-- status page shows each customer's counts (delayed and dead too) and their sums from here, as
-- of this refresh: counting a customer's queue per page view would cost a deep backlog's scan on
-- every poll (src/dispatch/status.c).
-- @params:
-- @columns: customer due in_flight oldest_due_age_s dead_tuples vacuum_age_s dead customer_id
-- @columns: delayed
SELECT s.customer, s.due, s.in_flight,
       coalesce(extract(epoch FROM s.oldest_due_age), 0)::float8 AS oldest_due_age_s,
       coalesce(t.n_dead_tup, 0) AS dead_tuples,
       coalesce(extract(epoch FROM now() - greatest(t.last_autovacuum, t.last_vacuum)), -1)::float8
           AS vacuum_age_s,
       s.dead, c.id AS customer_id, s.delayed
  FROM pgpace.customer_stats s
  JOIN pgpace.customer c ON c.name = s.customer
  LEFT JOIN pg_stat_user_tables t ON t.relid = 'pgpace.queue'::regclass
