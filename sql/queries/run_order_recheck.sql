-- The leader's part of parking (0020_order_keys.sql): the ordered keys whose lowest item may
-- have been left parked, because whatever deleted their head found the key's lock taken (by a
-- producer's commit parking a new item of the key, or another delete). Unparks those whose
-- lock is free now, at most $1 keys, and returns the (customer, carrier) pairs made due so the
-- leader claims them. An empty table costs one probe (every 100 ms, housekeeping.c).
-- @params: max_keys
-- @columns: customer_id carrier
SELECT r.customer_id, r.carrier FROM pgpace.order_recheck_run($1::integer) r
