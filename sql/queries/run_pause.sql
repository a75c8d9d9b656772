-- A receiver answered 410 Gone: pause the customer (its items wait; nothing is dropped).
-- @params: customer_id
UPDATE pgpace.customer SET paused = true, updated_at = now() WHERE id = $1::bigint AND NOT paused
