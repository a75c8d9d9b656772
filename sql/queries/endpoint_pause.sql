-- `pgpace endpoint pause|resume`: pgpace.endpoint_pause; false when it already was.
-- @params: customer endpoint paused
-- @columns: changed
SELECT pgpace.endpoint_pause($1::text, $2::text, $3::boolean) AS changed
