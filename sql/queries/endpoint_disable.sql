-- `pgpace endpoint disable`: pgpace.endpoint_disable; false when it already was disabled.
-- @params: customer endpoint
-- @columns: changed
SELECT pgpace.endpoint_disable($1::text, $2::text) AS changed
