-- @params: lock_class lock_key
-- @columns: locked
SELECT pg_try_advisory_lock($1::integer, $2::integer) AS locked
