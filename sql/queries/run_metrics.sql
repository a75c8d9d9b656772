-- Queue gauges for /metrics, refreshed by the leader every 15 s: per customer (due, in
-- flight, oldest due age in seconds) and the vacuum state of pgpace.queue (on every row). The
-- status page's totals (all customers' due items and dead letters) are their sums.
-- @params:
-- @columns: customer due in_flight oldest_due_age_s dead_tuples vacuum_age_s dead
SELECT s.customer, s.due, s.in_flight,
       coalesce(extract(epoch FROM s.oldest_due_age), 0)::float8 AS oldest_due_age_s,
       coalesce(t.n_dead_tup, 0) AS dead_tuples,
       coalesce(extract(epoch FROM now() - greatest(t.last_autovacuum, t.last_vacuum)), -1)::float8
           AS vacuum_age_s,
       s.dead
  FROM pgpace.customer_stats s
  LEFT JOIN pg_stat_user_tables t ON t.relid = 'pgpace.queue'::regclass
