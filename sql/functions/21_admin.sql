-- 21_admin.sql - operator changes that both the CLI (sql/queries/*.sql) and the management API
-- (22_api.sql) make, so that both follow one rule: replaying and purging dead letters (`pgpace
-- dlq replay|purge`; the filters are dlq_list.sql's, and item, the last argument, picks one dead
-- letter by its item id) and setting a carrier's caps (`pgpace carrier set`).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- The receivers' rows a dead-letter filter names: customer `customer`'s own and its endpoints',
-- or with `endpoint` one of them ('default': the customer's own). Unknown names: none.
CREATE OR REPLACE FUNCTION pgpace.dlq_rows(customer text, endpoint text)
RETURNS bigint[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(x.id), '{}')
      FROM pgpace.customer x
     WHERE x.name = CASE WHEN $2 IS NULL OR $2 = 'default' THEN $1 ELSE $1 || '/' || $2 END
        OR ($2 IS NULL
            AND x.parent_id = (SELECT y.id FROM pgpace.customer y
                                WHERE y.name = $1 AND y.parent_id IS NULL));
$$;

-- Moves matching dead letters back into the queue (attempts reset), oldest first, made due
-- one every 60/$6 seconds so that a replay trickles in instead of flooding the customer (on
-- top of the customer's own rate). Same filters as dlq_list.sql ($7 the endpoint). An endpoint's
-- dead letter goes back to that endpoint. One whose receiver is gone (pgpace.endpoint_gone: a
-- delivery a deleted endpoint left on its customer, endpoint_deleted; anything of a customer
-- without a webhook URL of its own) is never replayed: it stays a dead letter and is counted
-- as refused (`recover --endpoint` back-fills its event to an endpoint that should have it).
-- A replayed item with an order key goes back with its key, ahead of the key's later items, and
-- its key's hold (order_on_dead 'hold') ends with its dead letter (0020_order_keys.sql).
CREATE OR REPLACE FUNCTION pgpace.dlq_replay(customer text, carrier text, error text,
                                             since timestamptz, until timestamptz,
                                             rate double precision, endpoint text,
                                             item bigint DEFAULT NULL)
RETURNS TABLE (replayed bigint, refused bigint)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH rows AS MATERIALIZED (
        SELECT unnest(pgpace.dlq_rows($1::text, $7::text)) AS id
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
           AND ($8::bigint IS NULL OR d.item_id = $8::bigint)
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
      FROM woken;
$$;

-- Deletes matching dead letters, their items and their idempotency keys for good (a purged
-- item's key may be used again). Same filters as dlq_list.sql ($6 the endpoint).
CREATE OR REPLACE FUNCTION pgpace.dlq_purge(customer text, carrier text, error text,
                                            since timestamptz, until timestamptz, endpoint text,
                                            item bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH rows AS MATERIALIZED (
        SELECT unnest(pgpace.dlq_rows($1::text, $6::text)) AS id
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
           AND ($7::bigint IS NULL OR d.item_id = $7::bigint)
        RETURNING d.item_id
    ), items AS (
        DELETE FROM pgpace.item i USING removed r WHERE i.id = r.item_id RETURNING i.id
    ), keys AS (
        DELETE FROM pgpace.item_key k USING items WHERE k.item_id = items.id
    )
    SELECT count(*) AS purged FROM items;
$$;

-- Creates or changes carrier `name`'s caps: NULL keeps a cap, clear_* puts it back to the
-- configured default. Returns whether the carrier was created.
CREATE OR REPLACE FUNCTION pgpace.carrier_set(name text, max_per_round integer,
                                              max_in_flight integer,
                                              clear_max_per_round boolean DEFAULT false,
                                              clear_max_in_flight boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    created boolean;
BEGIN
    IF name IS NULL OR NOT pgpace.valid_name(name) THEN
        RAISE EXCEPTION 'name: must be 1-128 letters, digits and . _ : @ - (starting with a '
                        'letter or digit), got %', coalesce(quote_literal(left(name, 80)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_per_round IS NOT NULL AND max_per_round < 1 THEN
        RAISE EXCEPTION 'max_per_round: must be at least 1, got %', max_per_round
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_in_flight IS NOT NULL AND max_in_flight < 1 THEN
        RAISE EXCEPTION 'max_in_flight: must be at least 1, got %', max_in_flight
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgpace.carrier AS c (name, max_per_round, max_in_flight)
    VALUES (name, CASE WHEN clear_max_per_round THEN NULL ELSE max_per_round END,
            CASE WHEN clear_max_in_flight THEN NULL ELSE max_in_flight END)
    ON CONFLICT ON CONSTRAINT carrier_pkey DO UPDATE SET
        max_per_round = CASE WHEN clear_max_per_round THEN NULL
                             ELSE coalesce(EXCLUDED.max_per_round, c.max_per_round) END,
        max_in_flight = CASE WHEN clear_max_in_flight THEN NULL
                             ELSE coalesce(EXCLUDED.max_in_flight, c.max_in_flight) END,
        updated_at = now()
    RETURNING (c.xmax = 0) INTO created;
    RETURN created;
END
$$;

REVOKE EXECUTE ON FUNCTION
    pgpace.dlq_rows(text, text),
    pgpace.carrier_set(text, integer, integer, boolean, boolean),
    pgpace.dlq_replay(text, text, text, timestamptz, timestamptz, double precision, text, bigint),
    pgpace.dlq_purge(text, text, text, timestamptz, timestamptz, text, bigint)
    FROM PUBLIC;
