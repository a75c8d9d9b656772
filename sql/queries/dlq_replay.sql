-- Moves matching dead letters back into the queue (attempts reset), oldest first, made due
-- one every 60/$6 seconds so that a replay trickles in instead of flooding the customer (on
-- top of the customer's own rate). Same filters as dlq_list.sql ($7 the endpoint). An endpoint's
-- dead letter goes back to that endpoint. One whose receiver is gone (pgpace.endpoint_gone: a
-- delivery a deleted endpoint left on its customer, endpoint_deleted; anything of a customer
-- without a webhook URL of its own) is never replayed: it stays a dead letter and is counted
-- as refused (`recover --endpoint` back-fills its event to an endpoint that should have it).
-- A replayed item with an order key goes back with its key, ahead of the key's later items, and
-- its key's hold (order_on_dead 'hold') ends with its dead letter (0020_order_keys.sql).
-- @params: customer carrier error since until rate endpoint
-- @columns: replayed refused
WITH rows AS MATERIALIZED (
    SELECT x.id FROM pgpace.customer x
     WHERE x.name = CASE WHEN $7::text IS NULL OR $7::text = 'default' THEN $1::text
                         ELSE $1::text || '/' || $7::text END
        OR ($7::text IS NULL
            AND x.parent_id = (SELECT y.id FROM pgpace.customer y
                                WHERE y.name = $1::text AND y.parent_id IS NULL))
), locked AS (
    SELECT d.item_id, d.customer_id, coalesce(d.carrier, '') AS carrier, d.failed_at,
           c.parent_id IS NULL
           AND (c.webhook_url IS NULL
                OR EXISTS (SELECT 1 FROM pgpace.item i
                            WHERE i.id = d.item_id
                              AND pgpace.endpoint_gone(c.id, i.id, i.event_id, i.created_at,
                                                       d.last_error))) AS gone
      FROM pgpace.dead_letter d JOIN pgpace.customer c ON c.id = d.customer_id
     WHERE ($1::text IS NULL OR d.customer_id IN (SELECT r.id FROM rows r))
       AND ($2::text IS NULL OR d.carrier = $2)
       AND ($3::text IS NULL OR d.last_error ILIKE '%' || $3 || '%')
       AND ($4::timestamptz IS NULL OR d.failed_at >= $4::timestamptz)
       AND ($5::timestamptz IS NULL OR d.failed_at < $5::timestamptz)
       FOR UPDATE OF d
), picked AS (
    SELECT l.item_id, l.customer_id, l.carrier,
           row_number() OVER (ORDER BY l.failed_at, l.item_id) - 1 AS seq
      FROM locked l
     WHERE NOT l.gone
), removed AS (
    DELETE FROM pgpace.dead_letter d USING picked p WHERE d.item_id = p.item_id
    RETURNING d.item_id
), queued AS (
    -- With its order key and its own item_id: back at the head of its key (the gate lets the
    -- key's later items wait for it, 0020_order_keys.sql).
    INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts,
                              order_key)
    SELECT p.item_id, p.customer_id, p.carrier, i.priority,
           now() + p.seq * (60.0 / $6::float8) * interval '1 second', c.max_attempts, i.order_key
      FROM picked p
      JOIN removed r ON r.item_id = p.item_id
      JOIN pgpace.item i ON i.id = p.item_id
      JOIN pgpace.customer c ON c.id = p.customer_id
    ON CONFLICT (item_id) DO NOTHING
    RETURNING customer_id, carrier
), woken AS (
    SELECT count(pg_notify('pgpace_enqueue', x.customer_id::text || ' ' || x.carrier))
      FROM (SELECT DISTINCT customer_id, carrier FROM queued) x
)
SELECT (SELECT count(*) FROM queued) AS replayed,
       -- (--endpoint default means the customer's own: those of gone receivers are not asked.)
       (SELECT count(*) FROM locked WHERE locked.gone AND $7::text IS DISTINCT FROM 'default')
           AS refused
  FROM woken
