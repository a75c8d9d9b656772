-- 06_enqueue_json.sql - pgpace.enqueue_json: one item from a JSON document (HTTP enqueue).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Enqueues the item described by `doc`, an object with the fields of a bulk line:
-- {customer, payload, carrier?, kind?, run_at?, idempotency_key?, priority?, expires_at?,
-- supersede_key?, traceparent?, tracestate?, order_key?}. Returns the item's id, whether this call created it (false: a repeated
-- idempotency key, or a supersede), whether it superseded a queued item (whose id it is), and
-- whether the item's deadline had already passed (it was dead-lettered as 'expired' at once).
-- For a customer with endpoints (pgpace.enqueue_item) the id is the event's: created unless a
-- repeated idempotency key (a superseding event is new too: superseded says it moved an
-- endpoint's queued delivery to itself), expired when every delivery was past its deadline,
-- and deliveries the number of endpoints it reached (NULL for a customer without endpoints
-- and for a repeated key).
--
-- Before `deliveries` was returned: dropped once, in this file's transaction (CREATE OR REPLACE
-- cannot change a result's columns); the GRANT below gives producers the new one.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc p
                WHERE p.oid = to_regprocedure('pgpace.enqueue_json(jsonb)')
                  AND NOT ('deliveries' = ANY (p.proargnames))) THEN
        DROP FUNCTION pgpace.enqueue_json(jsonb);
    END IF;
END
$$;
--
-- The JSON shape is checked here (unknown fields, types); everything else is
-- pgpace.enqueue_item's job, whose errors are re-raised with the field they concern ("field
-- customer: unknown customer 'x'"), keeping their SQLSTATE: class 22 for bad values, 23503 for
-- an unknown customer, 54000 for a payload over max_payload_bytes or nested over 256 levels.
CREATE OR REPLACE FUNCTION pgpace.enqueue_json(doc jsonb)
RETURNS TABLE (id bigint, created boolean, superseded boolean, expired boolean, deliveries integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    allowed CONSTANT text[] :=
        '{customer,payload,carrier,kind,run_at,idempotency_key,priority,expires_at,supersede_key,'
        'traceparent,tracestate,order_key}';
    f          text;
    run_at     timestamptz;
    expires_at timestamptz;
    priority   integer := 0;
    e          record;
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
    FOREACH f IN ARRAY '{carrier,kind,run_at,idempotency_key,expires_at,supersede_key,traceparent,tracestate,order_key}'::text[] LOOP
        IF coalesce(jsonb_typeof(doc -> f), 'null') NOT IN ('string', 'null') THEN
            RAISE EXCEPTION 'field %: must be a string', f
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF coalesce(jsonb_typeof(doc -> 'priority'), 'null') <> 'null' THEN
        IF jsonb_typeof(doc -> 'priority') <> 'number'
           OR (doc ->> 'priority')::numeric NOT BETWEEN -32767 AND 32767
           OR (doc ->> 'priority')::numeric <> trunc((doc ->> 'priority')::numeric) THEN
            RAISE EXCEPTION 'field priority: must be an integer between -32767 and 32767'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = '-32768 is reserved for items sent again by pgpace recover';
        END IF;
        -- Through numeric: 1.0 and 1e2 are integers too, which integer's input refuses.
        priority := (doc ->> 'priority')::numeric::integer;
    END IF;
    IF doc ->> 'run_at' IS NOT NULL THEN
        BEGIN
            run_at := (doc ->> 'run_at')::timestamptz;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
            RAISE EXCEPTION 'field run_at: %', SQLERRM USING ERRCODE = SQLSTATE;
        END;
    END IF;
    IF doc ->> 'expires_at' IS NOT NULL THEN
        BEGIN
            expires_at := (doc ->> 'expires_at')::timestamptz;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
            RAISE EXCEPTION 'field expires_at: %', SQLERRM USING ERRCODE = SQLSTATE;
        END;
    END IF;

    BEGIN
        SELECT * INTO e FROM pgpace.enqueue_item(doc ->> 'customer', doc -> 'payload',
                                                 doc ->> 'carrier', doc ->> 'kind', run_at,
                                                 doc ->> 'idempotency_key', priority, expires_at,
                                                 doc ->> 'supersede_key', doc ->> 'traceparent',
                                                 doc ->> 'tracestate', doc ->> 'order_key');
    EXCEPTION WHEN data_exception OR foreign_key_violation OR program_limit_exceeded THEN
        GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT, v_state = RETURNED_SQLSTATE;
        msg := regexp_replace(msg, '^pgpace\.enqueue: ', '');
        -- pgpace.enqueue_item's messages start with the field ("kind must be ...", "payload is
        -- N bytes ...") or name it ("unknown customer 'x'", "invalid carrier 'x'").
        f := CASE WHEN msg ~ '^(customer|payload|carrier|kind|run_at|idempotency_key|priority|expires_at|supersede_key|traceparent|tracestate|order_key) '
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

    RETURN QUERY SELECT e.id,
                        e.result = 'created' OR (e.deliveries IS NOT NULL AND e.result = 'superseded'),
                        e.result = 'superseded', e.expired, e.deliveries;
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.enqueue_json(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgpace.enqueue_json(jsonb) TO pgpace_producer;
