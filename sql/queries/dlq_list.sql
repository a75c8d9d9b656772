-- `pgpace dlq list`: dead letters matching the filters ($1 customer: its own and its endpoints'
-- (0018); $7 endpoint: one of them, 'default' its own receiver; $2 carrier, $3 error text (ILIKE
-- pattern fragment), $4 since, $5 until; NULL = any), newest first, at most $6 rows.
-- customer is the customer's name, endpoint the endpoint's: 'default' for the customer's own
-- receiver, '(deleted)' for a dead letter whose receiver is gone (pgpace.endpoint_gone: a
-- delivery a deleted endpoint left on its customer, or anything of a customer without a webhook
-- URL of its own), which `dlq replay` leaves where it is. Items are read for the page's rows
-- only (after the limit), unless --endpoint default asks which are the customer's own.
-- order: for an item with an order key, what its death did to the key ('skipped' or 'held')
-- and the key (0020_order_keys.sql); '' otherwise.
-- @params: customer carrier error since until limit endpoint
-- @columns: item customer endpoint carrier attempts status failed_at error order
WITH rows AS MATERIALIZED (
    SELECT unnest(pgpace.dlq_rows($1::text, $7::text)) AS id
)
SELECT y.item_id AS item, y.customer,
       CASE WHEN y.parent_id IS NOT NULL THEN y.endpoint_name
            WHEN y.webhook_url IS NULL
              OR pgpace.endpoint_gone(y.customer_id, i.id, i.event_id, i.created_at, y.last_error)
            THEN '(deleted)'
            ELSE 'default' END AS endpoint,
       coalesce(y.carrier, '') AS carrier, y.attempts, coalesce(y.last_status::text, '-') AS status,
       to_char(y.failed_at, 'YYYY-MM-DD HH24:MI:SS') AS failed_at,
       left(replace(y.last_error, E'\n', ' '), 80) AS error,
       coalesce(y.order_action || ' ' || left(y.order_key, 60), '') AS "order"
  FROM (SELECT d.*, c.parent_id, c.endpoint_name, c.webhook_url,
               coalesce(t.name, c.name) AS customer
          FROM pgpace.dead_letter d
          JOIN pgpace.customer c ON c.id = d.customer_id
          LEFT JOIN pgpace.customer t ON t.id = c.parent_id
         WHERE ($1::text IS NULL OR d.customer_id IN (SELECT r.id FROM rows r))
           AND ($2::text IS NULL OR d.carrier = $2)
           AND ($3::text IS NULL OR d.last_error ILIKE '%' || $3 || '%')
           AND ($4::timestamptz IS NULL OR d.failed_at >= $4::timestamptz)
           AND ($5::timestamptz IS NULL OR d.failed_at < $5::timestamptz)
           AND ($7::text IS DISTINCT FROM 'default'
                OR (c.parent_id IS NULL AND c.webhook_url IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM pgpace.item i
                                     WHERE i.id = d.item_id
                                       AND pgpace.endpoint_gone(c.id, i.id, i.event_id,
                                                                i.created_at, d.last_error))))
         ORDER BY d.failed_at DESC, d.item_id DESC
         LIMIT $6::integer) y
  LEFT JOIN LATERAL (SELECT ii.id, ii.event_id, ii.created_at FROM pgpace.item ii
                      WHERE ii.id = y.item_id LIMIT 1) i ON true
 ORDER BY y.failed_at DESC, y.item_id DESC
