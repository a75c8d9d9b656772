-- Deletes matching dead letters, their items and their idempotency keys for good (a purged
-- item's key may be used again). Same filters as dlq_list.sql ($6 the endpoint).
-- @params: customer carrier error since until endpoint
-- @columns: purged
WITH rows AS MATERIALIZED (
    SELECT x.id FROM pgpace.customer x
     WHERE x.name = CASE WHEN $6::text IS NULL OR $6::text = 'default' THEN $1::text
                         ELSE $1::text || '/' || $6::text END
        OR ($6::text IS NULL
            AND x.parent_id = (SELECT y.id FROM pgpace.customer y
                                WHERE y.name = $1::text AND y.parent_id IS NULL))
), removed AS (
    DELETE FROM pgpace.dead_letter d
     USING pgpace.customer c
     WHERE c.id = d.customer_id
       AND ($1::text IS NULL OR d.customer_id IN (SELECT r.id FROM rows r))
       AND ($2::text IS NULL OR d.carrier = $2)
       AND ($3::text IS NULL OR d.last_error ILIKE '%' || $3 || '%')
       AND ($4::timestamptz IS NULL OR d.failed_at >= $4::timestamptz)
       AND ($5::timestamptz IS NULL OR d.failed_at < $5::timestamptz)
       AND ($6::text IS DISTINCT FROM 'default'
            OR (c.parent_id IS NULL AND c.webhook_url IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pgpace.item i
                                 WHERE i.id = d.item_id
                                   AND pgpace.endpoint_gone(c.id, i.id, i.event_id, i.created_at,
                                                            d.last_error))))
    RETURNING d.item_id
), items AS (
    DELETE FROM pgpace.item i USING removed r WHERE i.id = r.item_id RETURNING i.id
), keys AS (
    DELETE FROM pgpace.item_key k USING items WHERE k.item_id = items.id
)
SELECT count(*) AS purged FROM items
