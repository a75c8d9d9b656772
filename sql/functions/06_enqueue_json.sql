-- 06_enqueue_json.sql - pgpace.enqueue_json: one item from a JSON document (HTTP enqueue).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Enqueues the item described by `doc`, an object with the fields of a bulk line:
-- {customer, payload, carrier?, kind?, run_at?, idempotency_key?, priority?}. Returns the
-- item's id and whether this call created it (false: a repeated idempotency key).
--
-- The JSON shape is checked here (unknown fields, types); everything else is pgpace.enqueue's
-- job, whose errors are re-raised with the field they concern ("field customer: unknown
-- customer 'x'"), keeping their SQLSTATE: class 22 for bad values, 23503 for an unknown
-- customer, 54000 for a payload over max_payload_bytes.
--
-- `created`: with an idempotency key, the item may already exist (committed earlier, or by a
-- concurrent transaction that pgpace.enqueue waited for). It was created by this call when its
-- key was not visible (in pgpace.item_key) before the call and its row was written by the
-- current transaction. The insert runs inside the exception block's subtransaction, so its
-- xmin is a subtransaction id, not pg_current_xact_id(): pg_xact_status() reports 'in progress'
-- for the current transaction and all of its subtransactions.
CREATE OR REPLACE FUNCTION pgpace.enqueue_json(doc jsonb)
RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    allowed CONSTANT text[] := '{customer,payload,carrier,kind,run_at,idempotency_key,priority}';
    f          text;
    run_at     timestamptz;
    priority   integer := 0;
    existed    boolean := false;
    item_id    bigint;
    row_xmin   bigint;
    cur        bigint;
    msg        text;
    hint       text;
    v_state    text;
BEGIN
    IF doc IS NULL OR jsonb_typeof(doc) <> 'object' THEN
        RAISE EXCEPTION 'body must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT min(k) INTO f FROM jsonb_object_keys(doc - allowed) AS k;
    IF f IS NOT NULL THEN
        RAISE EXCEPTION 'unknown field % (allowed: %)', quote_literal(left(f, 64)),
                        array_to_string(allowed, ', ')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF jsonb_typeof(doc -> 'customer') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'field customer: required, must be a string'
            USING ERRCODE = CASE WHEN coalesce(jsonb_typeof(doc -> 'customer'), 'null') = 'null'
                                 THEN 'null_value_not_allowed' ELSE 'invalid_parameter_value' END;
    END IF;
    IF coalesce(jsonb_typeof(doc -> 'payload'), 'null') = 'null' THEN
        RAISE EXCEPTION 'field payload: required, must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    FOREACH f IN ARRAY '{carrier,kind,run_at,idempotency_key}'::text[] LOOP
        IF coalesce(jsonb_typeof(doc -> f), 'null') NOT IN ('string', 'null') THEN
            RAISE EXCEPTION 'field %: must be a string', f
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF coalesce(jsonb_typeof(doc -> 'priority'), 'null') <> 'null' THEN
        IF jsonb_typeof(doc -> 'priority') <> 'number'
           OR (doc ->> 'priority')::numeric NOT BETWEEN -32768 AND 32767
           OR (doc ->> 'priority')::numeric <> trunc((doc ->> 'priority')::numeric) THEN
            RAISE EXCEPTION 'field priority: must be an integer between -32768 and 32767'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        priority := (doc ->> 'priority')::integer;
    END IF;
    IF doc ->> 'run_at' IS NOT NULL THEN
        BEGIN
            run_at := (doc ->> 'run_at')::timestamptz;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
            RAISE EXCEPTION 'field run_at: %', SQLERRM USING ERRCODE = SQLSTATE;
        END;
    END IF;

    IF doc ->> 'idempotency_key' IS NOT NULL THEN
        SELECT true INTO existed
          FROM pgpace.item_key k JOIN pgpace.customer c ON c.id = k.customer_id
         WHERE c.name = doc ->> 'customer' AND k.idempotency_key = doc ->> 'idempotency_key';
        existed := coalesce(existed, false);
    END IF;

    BEGIN
        item_id := pgpace.enqueue(customer        => doc ->> 'customer',
                                  payload         => doc -> 'payload',
                                  carrier         => doc ->> 'carrier',
                                  kind            => doc ->> 'kind',
                                  run_at          => run_at,
                                  idempotency_key => doc ->> 'idempotency_key',
                                  priority        => priority);
    EXCEPTION WHEN data_exception OR foreign_key_violation OR program_limit_exceeded THEN
        GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT, v_state = RETURNED_SQLSTATE;
        msg := regexp_replace(msg, '^pgpace\.enqueue: ', '');
        -- pgpace.enqueue's messages start with the field ("kind must be ...", "payload is N
        -- bytes ...") or name it ("unknown customer 'x'", "invalid carrier 'x'").
        f := CASE WHEN msg ~ '^(customer|payload|carrier|kind|run_at|idempotency_key|priority) '
                  THEN substring(msg FROM '^([a-z_]+) ')
                  WHEN msg ~ '^unknown customer ' THEN 'customer'
                  WHEN msg ~ '^invalid carrier ' THEN 'carrier'
             END;
        IF f IS NULL THEN
            RAISE;
        END IF;
        IF msg ~ ('^' || f || ' ') THEN
            msg := regexp_replace(msg, '^[a-z_]+ (is )?', '');
        END IF;
        IF hint = '' THEN
            RAISE EXCEPTION 'field %: %', f, msg USING ERRCODE = v_state;
        END IF;
        RAISE EXCEPTION 'field %: %', f, msg USING ERRCODE = v_state, HINT = hint;
    END;

    IF existed THEN
        RETURN QUERY SELECT item_id, false;
        RETURN;
    END IF;
    -- The full (epoch-qualified) id of the row's xmin: the 32-bit xmin is within 2^31 of the
    -- current transaction id (the row was just written or waited for).
    SELECT i.xmin::text::bigint INTO row_xmin FROM pgpace.item i WHERE i.id = item_id;
    cur := pg_current_xact_id()::text::bigint;
    row_xmin := cur + (((row_xmin - (cur & 4294967295) + 2147483648) & 4294967295) - 2147483648);
    RETURN QUERY
        SELECT item_id, coalesce(pg_xact_status(row_xmin::text::xid8) = 'in progress', false);
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.enqueue_json(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgpace.enqueue_json(jsonb) TO pgpace_producer;
