-- `pgpace endpoint add`: the endpoint's row (pgpace.endpoint_add checks every argument, the
-- customer's max_endpoints_per_customer and that the name is free); its other receiver settings
-- follow through customer_set.sql on its full name, in the same transaction.
-- The limit windows ($11, a text[]) go here too: an endpoint may be added with windows and no
-- rate.
-- @params: customer endpoint url rate mode burst secrets events filter max_attempts limits
-- @columns: id
SELECT pgpace.endpoint_add($1, $2, $3, $4::float8, $5, $6::integer, $7::text[], $8::text[],
                           $9::jsonb, $10::integer, $11::text[]) AS id
