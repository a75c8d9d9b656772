-- Deletes at most $1 idempotency keys of dropped item partitions; fewer than $1 back means none
-- are left. Sent by the leader on its backstop timer while keys remain.
-- @params: batch
-- @columns: deleted
SELECT pgpace.purge_item_keys($1::integer) AS deleted
