-- `pgpace shard NAME`: the customer's id, which its shard is computed from (no row: unknown
-- customer).
-- @params: name
-- @columns: id
SELECT c.id FROM pgpace.customer c WHERE c.name = $1::text
