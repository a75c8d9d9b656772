-- The CTE runs customer_set first (it may create the customer), then the timeouts.
WITH s AS (
    SELECT pgpace.customer_set($1, $2, $3::float8, $4::integer, $5, $6::text[], $7::integer,
                               $8::integer, $9::boolean, coalesce($10::boolean, false)) AS created
)
SELECT s.created, pgpace.customer_set_timeouts($1, $11::integer, $12::integer) FROM s
