-- http_enqueue.sql - POST /v1/items: one item from the request body ($1, JSON text).
-- estimated_send_at: when a new item is expected to be sent (pgpace.estimate_send_time, its
-- priority, and not before its run_at), as RFC 3339 UTC text; NULL for a duplicate (that item
-- may be long sent), a superseded item (it keeps its place), an expired one, and while the
-- customer sends nothing (paused, disabled). Evaluated after pgpace.enqueue_json, which
-- has checked every field; the new item itself is not counted ahead of itself (it was enqueued
-- by this transaction, see pgpace.queue_ahead). For a customer with endpoints the id is the
-- event's and deliveries the number of endpoints it reached (NULL otherwise, and for a
-- duplicate); estimated_send_at is NULL for an event: each endpoint has its own pace.
-- @params: doc
-- @columns: id created superseded expired estimated_send_at deliveries
SELECT e.id, e.created, e.superseded, e.expired,
       to_char(x.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS estimated_send_at,
       e.deliveries
  FROM pgpace.enqueue_json($1::jsonb) e
 CROSS JOIN LATERAL (
      SELECT CASE WHEN est.at IS NOT NULL
                  THEN greatest(est.at, ($1::jsonb ->> 'run_at')::timestamptz) END AS at
        FROM (SELECT CASE WHEN e.created AND NOT e.expired AND e.deliveries IS NULL
                          THEN pgpace.estimate_send_time(
                                   $1::jsonb ->> 'customer',
                                   coalesce(($1::jsonb ->> 'priority')::numeric::integer, 0))
                     END AS at) est) x
