-- `pgpace endpoint enable`: pgpace.endpoint_enable; false when it was not disabled.
-- @params: customer endpoint
-- @columns: changed
SELECT pgpace.endpoint_enable($1::text, $2::text) AS changed
