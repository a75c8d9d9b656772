-- Retention by whole days (never row-by-row deletes): attempt log older than $1 days, dead
-- letters older than $2 days. Returns the partitions dropped.
SELECT pgpace.drop_partitions('pgpace.delivery_attempt', make_interval(days => $1::integer))
     + pgpace.drop_partitions('pgpace.dead_letter', make_interval(days => $2::integer))
