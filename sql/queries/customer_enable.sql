-- `pgpace customer enable NAME`: clears a disable (pgpace.customer_enable); false when the
-- customer was not disabled.
-- @params: name
-- @columns: enabled
SELECT pgpace.customer_enable($1::text) AS enabled
