-- http_enqueue.sql - POST /v1/items: one item from the request body ($1, JSON text).
-- @params: doc
-- @columns: id created
SELECT id, created FROM pgpace.enqueue_json($1::jsonb)
