-- Retention by whole days (never row-by-row deletes): attempt log and operator events older
-- than $1 days, dead letters older than $2 days, items older than $3 days unless one of their
-- day is still queued or dead-lettered (items last: their partitions are dropped under a lock on pgpace.item, held
-- until this statement commits), and the management API's Idempotency-Key answers once they are
-- 24 hours old (a small table, row by row). Returns the partitions dropped.
-- @params: attempt_days dead_letter_days item_days
-- @columns: dropped
WITH expired_keys AS (
    DELETE FROM pgpace.api_idempotency k WHERE k.created_at < now() - interval '24 hours'
    RETURNING 1
)
SELECT pgpace.drop_partitions('pgpace.delivery_attempt', make_interval(days => $1::integer))
     + pgpace.drop_partitions('pgpace.event', make_interval(days => $1::integer))
     + pgpace.drop_partitions('pgpace.dead_letter', make_interval(days => $2::integer))
     + pgpace.drop_item_partitions(make_interval(days => $3::integer))
     + 0 * (SELECT count(*) FROM expired_keys) AS dropped
