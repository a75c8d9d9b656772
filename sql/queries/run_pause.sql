-- A receiver answered 410 Gone: pause the customer (its items wait; nothing is dropped), and
-- record the `paused` event with that reason (pgpace.pause_by_receiver).
-- @params: customer_id
-- @columns: paused
SELECT pgpace.pause_by_receiver($1::bigint) AS paused
