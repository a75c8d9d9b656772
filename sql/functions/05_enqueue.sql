-- 05_enqueue.sql - pgpace.enqueue, the producers' transactional enqueue.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Transactional enqueue. Call it inside the producer's own transaction: the item exists if and
-- only if that transaction commits, and the wake-up NOTIFY is delivered on commit only.
-- A repeated idempotency key for the same customer returns the existing item's id; keys live
-- in pgpace.item_key, whose unique index the partitioned pgpace.item cannot have.
CREATE OR REPLACE FUNCTION pgpace.enqueue(
    customer        text,
    payload         jsonb,
    carrier         text DEFAULT NULL,
    kind            text DEFAULT NULL,
    run_at          timestamptz DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    priority        integer DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    cust_id      bigint;
    cust_max     integer;
    item_id      bigint;
    new_id       bigint;
    size_limit   bigint;
    payload_size bigint;
BEGIN
    IF enqueue.customer IS NULL THEN
        RAISE EXCEPTION 'pgpace.enqueue: customer must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF enqueue.payload IS NULL THEN
        RAISE EXCEPTION 'pgpace.enqueue: payload must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF enqueue.carrier IS NOT NULL AND NOT pgpace.valid_name(enqueue.carrier) THEN
        RAISE EXCEPTION 'pgpace.enqueue: invalid carrier %', quote_literal(left(enqueue.carrier, 140))
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'carrier names are 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit';
    END IF;
    IF enqueue.kind IS NOT NULL AND length(enqueue.kind) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'pgpace.enqueue: kind must be 1 to 128 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.idempotency_key IS NOT NULL AND length(enqueue.idempotency_key) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'pgpace.enqueue: idempotency_key must be 1 to 255 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.run_at IS NOT NULL AND NOT isfinite(enqueue.run_at) THEN
        RAISE EXCEPTION 'pgpace.enqueue: run_at must be a finite timestamp'
            USING ERRCODE = 'invalid_datetime_format';
    END IF;
    IF enqueue.priority IS NULL OR enqueue.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'pgpace.enqueue: priority must be between -32768 and 32767, got %', enqueue.priority
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT c.id, c.max_attempts INTO cust_id, cust_max
      FROM pgpace.customer c WHERE c.name = enqueue.customer
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgpace.enqueue: unknown customer %', quote_literal(left(enqueue.customer, 140))
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'create it first: pgpace customer set <name> --rate ... --url ...';
    END IF;

    SELECT s.value::bigint INTO size_limit FROM pgpace.setting s WHERE s.name = 'max_payload_bytes';
    payload_size := octet_length(enqueue.payload::text);
    IF payload_size > size_limit THEN
        RAISE EXCEPTION 'pgpace.enqueue: payload is % bytes, above the limit of % bytes', payload_size, size_limit
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'the limit is the max_payload_bytes row of pgpace.setting';
    END IF;

    IF enqueue.idempotency_key IS NULL THEN
        INSERT INTO pgpace.item AS i (customer_id, carrier, kind, payload, priority, run_at)
        VALUES (cust_id, enqueue.carrier, enqueue.kind, enqueue.payload, enqueue.priority,
                coalesce(enqueue.run_at, now()))
        RETURNING i.id INTO item_id;
    ELSE
        -- The id first, so that the key row can name it; the item only when the key is new.
        new_id := pgpace.next_item_id();
        INSERT INTO pgpace.item_key AS k (customer_id, idempotency_key, item_id)
        VALUES (cust_id, enqueue.idempotency_key, new_id)
        ON CONFLICT (customer_id, idempotency_key) DO NOTHING
        RETURNING k.item_id INTO item_id;

        IF item_id IS NULL THEN
            -- The key exists (possibly committed by a concurrent transaction we just waited for).
            SELECT k.item_id INTO item_id FROM pgpace.item_key k
             WHERE k.customer_id = cust_id AND k.idempotency_key = enqueue.idempotency_key;
            IF item_id IS NULL THEN
                RAISE EXCEPTION 'pgpace.enqueue: idempotency key % is taken by a transaction this snapshot cannot see',
                                quote_literal(enqueue.idempotency_key)
                    USING ERRCODE = 'serialization_failure', HINT = 'retry the transaction';
            END IF;
            RETURN item_id;
        END IF;

        INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, idempotency_key, priority, run_at)
        VALUES (new_id, cust_id, enqueue.carrier, enqueue.kind, enqueue.payload, enqueue.idempotency_key,
                enqueue.priority, coalesce(enqueue.run_at, now()));
    END IF;

    INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts)
    VALUES (item_id, cust_id, coalesce(enqueue.carrier, ''), enqueue.priority::smallint,
            coalesce(enqueue.run_at, now()), cust_max);

    -- Payload "<customer id> <carrier>": the dispatcher wakes that (customer, carrier) pair.
    PERFORM pg_notify('pgpace_enqueue', cust_id::text || ' ' || coalesce(enqueue.carrier, ''));
    RETURN item_id;
END
$$;

-- Producers (the pgpace_producer group) may call this and pgpace.enqueue_json, nothing else.
REVOKE EXECUTE ON FUNCTION pgpace.enqueue(text, jsonb, text, text, timestamptz, text, integer)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgpace.enqueue(text, jsonb, text, text, timestamptz, text, integer)
    TO pgpace_producer;
