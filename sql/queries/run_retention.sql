-- Attempt-log retention: whole days older than $1 days go (never row-by-row deletes).
SELECT pgpace.drop_partitions('pgpace.delivery_attempt', make_interval(days => $1::integer))
