-- `pgpace endpoint delete [--drop-queued]`: pgpace.endpoint_delete; the queued deliveries it
-- made dead letters (endpoint_deleted), 0 without --drop-queued (it refuses while any are queued).
-- @params: customer endpoint drop_queued
-- @columns: dropped
SELECT pgpace.endpoint_delete($1::text, $2::text, $3::boolean) AS dropped
