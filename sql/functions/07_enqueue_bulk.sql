-- 07_enqueue_bulk.sql - pgpace.enqueue_bulk, the loader behind `pgpace enqueue --file`.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Bulk enqueue from the session's temporary table pgpace_bulk(line_no bigint, doc text), one
-- JSON object per line (blank lines are skipped) as documented for `pgpace enqueue --file`. All
-- lines or none: the first bad line raises an error naming its line number and field. Returns
-- (inserted, duplicates). Keyed lines take their ids first and insert their keys into
-- pgpace.item_key (ON CONFLICT DO NOTHING, in line order, so a key repeated within the file
-- keeps its first line); only lines whose key was new insert an item. Unkeyed lines insert
-- plainly and pay for no conflict check. SECURITY INVOKER: the caller needs INSERT on item,
-- item_key and queue and USAGE on item_id_seq.
-- JIT off and a larger work_mem: the staging tables are fresh, so the planner's estimates are
-- guesses, and compiling for a one-shot load cost more than it saved (measured 0.56 s / 100k).
CREATE OR REPLACE FUNCTION pgpace.enqueue_bulk(OUT inserted bigint, OUT duplicates bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
SET work_mem = '64MB'
AS $$
DECLARE
    bad record;
    size_limit bigint;
    allowed CONSTANT text[] := '{customer,payload,carrier,kind,run_at,idempotency_key,priority}';
BEGIN
    SELECT s.value::bigint INTO size_limit FROM pgpace.setting s WHERE s.name = 'max_payload_bytes';

    -- Parse every line at once; only when that fails, walk the lines to name the bad one.
    BEGIN
        CREATE TEMP TABLE pgpace_bulk_doc ON COMMIT DROP AS
            SELECT b.line_no, b.doc::jsonb AS j FROM pg_temp.pgpace_bulk b WHERE b.doc !~ '^\s*$';
    EXCEPTION WHEN data_exception THEN
        FOR bad IN SELECT b.line_no, b.doc FROM pg_temp.pgpace_bulk b
                    WHERE b.doc !~ '^\s*$' ORDER BY b.line_no LOOP
            BEGIN
                PERFORM bad.doc::jsonb;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION 'line %: not valid JSON (%)', bad.line_no, SQLERRM
                    USING ERRCODE = 'invalid_text_representation';
            END;
        END LOOP;
        RAISE;
    END;

    SELECT d.line_no,
           CASE WHEN jsonb_typeof(d.j) <> 'object' THEN 'expected a JSON object'
                ELSE format('unknown field %s (allowed: %s)',
                            (SELECT min(k) FROM jsonb_object_keys(d.j - allowed) k),
                            array_to_string(allowed, ', '))
           END AS msg
      INTO bad FROM pgpace_bulk_doc d
     WHERE jsonb_typeof(d.j) <> 'object' OR (d.j - allowed) <> '{}'::jsonb
     ORDER BY d.line_no LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'line %: %', bad.line_no, bad.msg USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- One extraction per line; the types of the optional fields are checked only where present.
    CREATE TEMP TABLE pgpace_bulk_row ON COMMIT DROP AS
        SELECT d.line_no, r.*,
               jsonb_typeof(d.j -> 'customer') AS customer_type,
               CASE WHEN r.payload IS NOT NULL THEN octet_length(r.payload::text) END AS payload_size,
               CASE WHEN jsonb_typeof(d.j -> 'carrier') NOT IN ('string', 'null') THEN 'carrier'
                    WHEN jsonb_typeof(d.j -> 'kind') NOT IN ('string', 'null') THEN 'kind'
                    WHEN jsonb_typeof(d.j -> 'run_at') NOT IN ('string', 'null') THEN 'run_at'
                    WHEN jsonb_typeof(d.j -> 'idempotency_key') NOT IN ('string', 'null') THEN 'idempotency_key'
                    WHEN jsonb_typeof(d.j -> 'priority') NOT IN ('number', 'null') THEN 'priority'
               END AS mistyped
          FROM pgpace_bulk_doc d,
               jsonb_to_record(d.j) AS r(customer text, payload jsonb, carrier text, kind text,
                                         run_at text, idempotency_key text, priority text);
    ANALYZE pgpace_bulk_row;

    SELECT b.line_no, msg INTO bad FROM pgpace_bulk_row b
      LEFT JOIN pgpace.customer c ON c.name = b.customer
      CROSS JOIN LATERAL (SELECT CASE
          WHEN b.customer_type IS DISTINCT FROM 'string' THEN 'field customer: required, must be a string'
          WHEN c.id IS NULL THEN format('field customer: unknown customer %s', quote_literal(left(b.customer, 140)))
          WHEN b.payload IS NULL OR b.payload = 'null'::jsonb THEN 'field payload: required, must not be null'
          WHEN b.payload_size > size_limit
            THEN format('field payload: %s bytes, above the limit of %s bytes', b.payload_size, size_limit)
          WHEN b.mistyped = 'priority' THEN 'field priority: must be an integer between -32768 and 32767'
          WHEN b.mistyped IS NOT NULL THEN format('field %s: must be a string', b.mistyped)
          WHEN NOT pgpace.valid_name(b.carrier)
            THEN 'field carrier: must be 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit'
          WHEN length(b.kind) NOT BETWEEN 1 AND 128 THEN 'field kind: must be 1 to 128 characters'
          WHEN length(b.idempotency_key) NOT BETWEEN 1 AND 255
            THEN 'field idempotency_key: must be 1 to 255 characters'
          WHEN b.priority !~ '^-?[0-9]{1,5}$' OR b.priority::integer NOT BETWEEN -32768 AND 32767
            THEN 'field priority: must be an integer between -32768 and 32767'
          END AS msg) m
     WHERE m.msg IS NOT NULL
     ORDER BY b.line_no LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'line %: %', bad.line_no, bad.msg USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Timestamps: cast them all; on failure name the first line that does not parse.
    BEGIN
        SELECT b.line_no, 'field run_at: must be a finite timestamp' AS msg INTO bad
          FROM pgpace_bulk_row b
         WHERE b.run_at IS NOT NULL AND NOT isfinite(b.run_at::timestamptz)
         ORDER BY b.line_no LIMIT 1;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
        FOR bad IN SELECT b.line_no, b.run_at FROM pgpace_bulk_row b
                    WHERE b.run_at IS NOT NULL ORDER BY b.line_no LOOP
            BEGIN
                PERFORM bad.run_at::timestamptz;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
                RAISE EXCEPTION 'line %: field run_at: %', bad.line_no, SQLERRM
                    USING ERRCODE = 'invalid_datetime_format';
            END;
        END LOOP;
        RAISE;
    END;
    IF bad.msg IS NOT NULL THEN
        RAISE EXCEPTION 'line %: %', bad.line_no, bad.msg USING ERRCODE = 'invalid_datetime_format';
    END IF;

    -- One KEY SHARE lock per customer (not per row, as a foreign key would take) keeps a
    -- concurrent `customer delete` from orphaning these items.
    CREATE TEMP TABLE pgpace_bulk_customer ON COMMIT DROP AS
        SELECT c.id, c.name, c.max_attempts FROM pgpace.customer c
         WHERE c.name IN (SELECT DISTINCT b.customer FROM pgpace_bulk_row b)
           FOR KEY SHARE;
    IF (SELECT count(*) FROM pgpace_bulk_customer)
       < (SELECT count(DISTINCT b.customer) FROM pgpace_bulk_row b) THEN
        RAISE EXCEPTION 'a customer named in the file was deleted during the load'
            USING ERRCODE = 'foreign_key_violation';
    END IF;

    -- Rows without a key cannot conflict, so only keyed rows pay for ON CONFLICT's speculative
    -- insertion (into the narrow pgpace.item_key). `keyed` is materialised once (it is volatile
    -- and read twice), so each keyed line has one id for its key and its item.
    WITH ins_plain AS (
        INSERT INTO pgpace.item (customer_id, carrier, kind, payload, priority, run_at)
        SELECT c.id, b.carrier, b.kind, b.payload,
               coalesce(b.priority::smallint, 0), coalesce(b.run_at::timestamptz, now())
          FROM pgpace_bulk_row b JOIN pgpace_bulk_customer c ON c.name = b.customer
         WHERE b.idempotency_key IS NULL
         ORDER BY b.line_no
        RETURNING id, customer_id, carrier, priority, run_at
    ), keyed AS (
        SELECT pgpace.next_item_id() AS id, b.line_no, c.id AS customer_id, b.carrier, b.kind,
               b.payload, b.idempotency_key, coalesce(b.priority::smallint, 0) AS priority,
               coalesce(b.run_at::timestamptz, now()) AS run_at
          FROM pgpace_bulk_row b JOIN pgpace_bulk_customer c ON c.name = b.customer
         WHERE b.idempotency_key IS NOT NULL
    ), ins_key AS (
        INSERT INTO pgpace.item_key (customer_id, idempotency_key, item_id)
        SELECT k.customer_id, k.idempotency_key, k.id FROM keyed k
         ORDER BY k.line_no
        ON CONFLICT (customer_id, idempotency_key) DO NOTHING
        RETURNING item_id
    ), ins_keyed AS (
        INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, idempotency_key, priority, run_at)
        SELECT k.id, k.customer_id, k.carrier, k.kind, k.payload, k.idempotency_key, k.priority, k.run_at
          FROM keyed k JOIN ins_key n ON n.item_id = k.id
         ORDER BY k.line_no
        RETURNING id, customer_id, carrier, priority, run_at
    ), ins AS (
        SELECT * FROM ins_plain UNION ALL SELECT * FROM ins_keyed
    ), q AS (
        INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts)
        SELECT ins.id, ins.customer_id, coalesce(ins.carrier, ''), ins.priority, ins.run_at, c.max_attempts
          FROM ins JOIN pgpace_bulk_customer c ON c.id = ins.customer_id
        RETURNING customer_id, carrier
    ), notified AS (
        SELECT count(pg_notify('pgpace_enqueue', x.customer_id::text || ' ' || x.carrier))
          FROM (SELECT DISTINCT customer_id, carrier FROM q) x
    )
    SELECT (SELECT count(*) FROM q), (SELECT count(*) FROM pgpace_bulk_row) - (SELECT count(*) FROM q)
      INTO inserted, duplicates
      FROM notified;
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.enqueue_bulk() FROM PUBLIC;
