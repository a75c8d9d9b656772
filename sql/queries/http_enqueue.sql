-- http_enqueue.sql - POST /v1/items: one item from the request body ($1, JSON text).
-- @params: doc
-- @columns: id created superseded expired
SELECT id, created, superseded, expired FROM pgpace.enqueue_json($1::jsonb)
