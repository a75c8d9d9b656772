-- Deletes matching dead letters, their items and their idempotency keys for good (a purged
-- item's key may be used again). Same filters as dlq_list.sql.
WITH removed AS (
    DELETE FROM pgpace.dead_letter d
     USING pgpace.customer c
     WHERE c.id = d.customer_id
       AND ($1::text IS NULL OR c.name = $1)
       AND ($2::text IS NULL OR d.carrier = $2)
       AND ($3::text IS NULL OR d.last_error ILIKE '%' || $3 || '%')
       AND ($4::timestamptz IS NULL OR d.failed_at >= $4::timestamptz)
       AND ($5::timestamptz IS NULL OR d.failed_at < $5::timestamptz)
    RETURNING d.item_id
), items AS (
    DELETE FROM pgpace.item i USING removed r WHERE i.id = r.item_id RETURNING i.id
), keys AS (
    DELETE FROM pgpace.item_key k USING items WHERE k.item_id = items.id
)
SELECT count(*) FROM items
