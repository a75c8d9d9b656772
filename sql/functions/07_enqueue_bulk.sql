-- 07_enqueue_bulk.sql - pgpace.enqueue_bulk, the loader behind `pgpace enqueue --file`.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Bulk enqueue from the session's temporary table pgpace_bulk(line_no bigint, doc text), one
-- JSON object per line (blank lines are skipped) as documented for `pgpace enqueue --file`. All
-- lines or none: the first bad line raises an error naming its line number and field. Returns
-- what became of the lines: inserted (queued), duplicates (a repeated idempotency key),
-- superseded (replaced the payload of a queued item: supersede_key) and expired (their
-- deadline had passed: dead-lettered as 'expired' at once, as pgpace.enqueue_item does); and of
-- the lines for customers with endpoints (pgpace.fans_out), each one event: events (new ones,
-- counted in inserted, superseded or expired as well), the deliveries they made, and unmatched
-- (events that reached no endpoint, kept as events).
-- Keyed lines take their ids first and insert their keys into pgpace.item_key (ON CONFLICT DO
-- NOTHING, in line order, so a key repeated within the file keeps its first line); only lines
-- whose key was new insert an item. Unkeyed lines insert plainly and pay for no conflict check.
-- Lines with a supersede_key go one by one through pgpace.enqueue_item after all the others
-- (in line order, so the last line of a key wins): superseding needs a row lock and a retry
-- when a concurrent producer takes the key, which a set-wise insert cannot express. Lines with
-- an order_key go the same way, so that each key's items take their ids in line order (the
-- order they are delivered in) after the file's other lines.
-- Fan-out (migration 0018) is set-wise too, with pgpace.enqueue_fanout's rules: each line of a
-- customer with endpoints is one event (its payload, once, on the customer's row; `fanout`
-- deliveries), and each endpoint whose subscription and payload filter match gets a delivery
-- (an item without payload pointing at the event, queued, or dead-lettered as 'expired' when
-- its deadline, with that endpoint's max_age, has passed). Idempotency keys act on the event,
-- per customer; lines with a supersede_key go through pgpace.enqueue_item (then
-- pgpace.enqueue_fanout) as above. Customers without endpoints take the plain statement, which
-- is as it was. SECURITY INVOKER: the caller needs INSERT on item, item_key, queue and
-- dead_letter, UPDATE on item and queue, and USAGE on item_id_seq.
-- JIT off and a larger work_mem: the staging tables are fresh, so the planner's estimates are
-- guesses, and compiling for a one-shot load cost more than it saved (measured 0.56 s / 100k).
-- default_statistics_target 10: ANALYZE of the staged lines samples 3,000 of them, not 30,000
-- (15 ms against 100 ms for 100,000 lines); the plans need row counts, not fine histograms.
--
-- Before events, deliveries and unmatched were returned: dropped once, in this file's
-- transaction (CREATE OR REPLACE cannot add an OUT parameter). Callers name the columns they
-- read (sql/queries/bulk_apply.sql), so an older `pgpace enqueue --file` works with this one.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc p
                WHERE p.oid = to_regprocedure('pgpace.enqueue_bulk()')
                  AND NOT ('deliveries' = ANY (p.proargnames))) THEN
        DROP FUNCTION pgpace.enqueue_bulk();
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION pgpace.enqueue_bulk(OUT inserted bigint, OUT duplicates bigint,
                                               OUT superseded bigint, OUT expired bigint,
                                               OUT events bigint, OUT deliveries bigint,
                                               OUT unmatched bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
SET work_mem = '64MB'
SET default_statistics_target = 10
AS $$
DECLARE
    bad record;
    size_limit bigint;
    allowed CONSTANT text[] :=
        '{customer,payload,carrier,kind,run_at,idempotency_key,priority,expires_at,supersede_key,'
        'traceparent,tracestate,order_key}';
    one record;
    ln record;
    -- A file where some line has an idempotency key and a supersede or order key: every keyed
    -- line goes one by one, in line order,
    -- so that a repeated idempotency key keeps its first line whichever lines supersede.
    mixed boolean;
    -- What the lines hold, from one pass over them: their customers, whether any has a
    -- timestamp, how many lines there are and how many go one by one for their keys.
    names text[];
    unknown text[];
    timed boolean;
    n_lines bigint;
    n_ordered bigint;
    n_keyed bigint;
    n_setwise bigint;
    -- Ids as pgpace.next_item_id makes them (so does pgpace.recover_endpoint): the day of the
    -- transaction's start in the high bits, computed once here rather than for every row.
    id_day CONSTANT bigint := pgpace.item_day_first_id((now() AT TIME ZONE 'UTC')::date);
    -- The customers of the file that fan out (pgpace.fans_out), and what their lines made.
    fan_ids bigint[];
    ev_inserted bigint := 0;
    ev_expired bigint := 0;
BEGIN
    SELECT s.value::bigint INTO size_limit FROM pgpace.setting s WHERE s.name = 'max_payload_bytes';

    -- One pass over the staged lines: parse each (once: each OFFSET 0 keeps an expression from
    -- being copied into every reference to it), check its shape and extract its fields. Only
    -- when a line does not parse, walk the lines to name the bad one. A line that is not an
    -- object, or names an unknown field, is reported before any line's bad field (the checks
    -- below).
    BEGIN
        CREATE TEMP TABLE pgpace_bulk_row ON COMMIT DROP AS
            SELECT f.line_no, f.customer #>> '{}' AS customer,
                   CASE WHEN jsonb_typeof(f.payload) <> 'null' THEN f.payload END AS payload,
                   f.carrier #>> '{}' AS carrier, f.kind #>> '{}' AS kind,
                   f.run_at #>> '{}' AS run_at, f.idempotency_key #>> '{}' AS idempotency_key,
                   f.priority #>> '{}' AS priority, f.expires_at #>> '{}' AS expires_at,
                   f.supersede_key #>> '{}' AS supersede_key, f.traceparent #>> '{}' AS traceparent,
                   f.tracestate #>> '{}' AS tracestate, f.order_key #>> '{}' AS order_key,
                   f.shape_error, jsonb_typeof(f.customer) AS customer_type,
                   CASE WHEN jsonb_typeof(f.payload) <> 'null' THEN octet_length(f.payload::text) END
                       AS payload_size,
                   CASE WHEN f.simple THEN
                          CASE WHEN jsonb_typeof(f.kind) NOT IN ('string', 'null') THEN 'kind' END
                        WHEN jsonb_typeof(f.carrier) NOT IN ('string', 'null') THEN 'carrier'
                        WHEN jsonb_typeof(f.kind) NOT IN ('string', 'null') THEN 'kind'
                        WHEN jsonb_typeof(f.run_at) NOT IN ('string', 'null') THEN 'run_at'
                        WHEN jsonb_typeof(f.idempotency_key) NOT IN ('string', 'null') THEN 'idempotency_key'
                        WHEN jsonb_typeof(f.priority) NOT IN ('number', 'null') THEN 'priority'
                        WHEN jsonb_typeof(f.expires_at) NOT IN ('string', 'null') THEN 'expires_at'
                        WHEN jsonb_typeof(f.supersede_key) NOT IN ('string', 'null') THEN 'supersede_key'
                        WHEN jsonb_typeof(f.traceparent) NOT IN ('string', 'null') THEN 'traceparent'
                        WHEN jsonb_typeof(f.tracestate) NOT IN ('string', 'null') THEN 'tracestate'
                        WHEN jsonb_typeof(f.order_key) NOT IN ('string', 'null') THEN 'order_key'
                   END AS mistyped
              -- Each field looked up once, as JSON (its type and its text are read from that;
              -- a null payload is NULL, as jsonb_to_record gave it). A line with no field but
              -- customer, payload and kind ("simple", most lines) looks up only those three.
              FROM (SELECT d.line_no, d.simple, d.j -> 'customer' AS customer,
                           d.j -> 'payload' AS payload, d.j -> 'kind' AS kind,
                           CASE WHEN NOT d.is_object THEN 'expected a JSON object'
                                WHEN NOT d.simple AND (d.rest - allowed) <> '{}'::jsonb
                                  THEN format('unknown field %s (allowed: %s)',
                                              (SELECT min(k) FROM jsonb_object_keys(d.rest - allowed) k),
                                              array_to_string(allowed, ', '))
                           END AS shape_error,
                           CASE WHEN NOT d.simple THEN d.j -> 'carrier' END AS carrier,
                           CASE WHEN NOT d.simple THEN d.j -> 'run_at' END AS run_at,
                           CASE WHEN NOT d.simple THEN d.j -> 'idempotency_key' END AS idempotency_key,
                           CASE WHEN NOT d.simple THEN d.j -> 'priority' END AS priority,
                           CASE WHEN NOT d.simple THEN d.j -> 'expires_at' END AS expires_at,
                           CASE WHEN NOT d.simple THEN d.j -> 'supersede_key' END AS supersede_key,
                           CASE WHEN NOT d.simple THEN d.j -> 'traceparent' END AS traceparent,
                           CASE WHEN NOT d.simple THEN d.j -> 'tracestate' END AS tracestate,
                           CASE WHEN NOT d.simple THEN d.j -> 'order_key' END AS order_key
                      FROM (SELECT p.line_no, p.j, p.is_object, p.rest,
                                   coalesce(p.rest = '{}'::jsonb, false) AS simple
                              FROM (SELECT p.line_no, p.j, jsonb_typeof(p.j) = 'object' AS is_object,
                                           CASE WHEN jsonb_typeof(p.j) = 'object'
                                                THEN p.j - '{customer,payload,kind}'::text[] END AS rest
                                      -- A line that starts with { is not blank: the pattern is
                                      -- matched only for the others.
                                      FROM (SELECT b.line_no, b.doc::jsonb AS j
                                              FROM pg_temp.pgpace_bulk b
                                             WHERE b.doc LIKE '{%' OR b.doc !~ '^\s*$'
                                            OFFSET 0) p
                                    OFFSET 0) p
                            OFFSET 0) d
                    OFFSET 0) f;
    EXCEPTION WHEN data_exception OR statement_too_complex THEN
        -- statement_too_complex (54001, "stack depth limit exceeded"): a line nested deeper than
        -- PostgreSQL's recursive parser goes at this max_stack_depth (about 13,000 levels at
        -- the default).
        FOR bad IN SELECT b.line_no, b.doc FROM pg_temp.pgpace_bulk b
                    WHERE b.doc !~ '^\s*$' ORDER BY b.line_no LOOP
            BEGIN
                PERFORM bad.doc::jsonb;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION 'line %: not valid JSON (%)', bad.line_no, SQLERRM
                    USING ERRCODE = 'invalid_text_representation';
            WHEN statement_too_complex THEN
                RAISE EXCEPTION 'line %: nested too deeply to parse (%; a payload may nest at most 256 levels)',
                                bad.line_no, SQLERRM
                    USING ERRCODE = 'statement_too_complex';
            END;
        END LOOP;
        RAISE;
    END;

    -- Row counts and customers for the planner (a nested loop over every line for every
    -- customer of the file would be the guess without them); a small sample is enough.
    ANALYZE pgpace_bulk_row;

    SELECT array_agg(g.customer), coalesce(bool_or(g.timed), false),
           coalesce(bool_or(g.mixed), false), coalesce(sum(g.n), 0), coalesce(sum(g.n_ordered), 0),
           coalesce(sum(g.n_keyed), 0)
      INTO names, timed, mixed, n_lines, n_ordered, n_keyed
      FROM (SELECT b.customer, bool_or(b.run_at IS NOT NULL OR b.expires_at IS NOT NULL) AS timed,
                   bool_or(b.idempotency_key IS NOT NULL
                           AND (b.supersede_key IS NOT NULL OR b.order_key IS NOT NULL)) AS mixed,
                   count(*) AS n,
                   count(*) FILTER (WHERE b.supersede_key IS NOT NULL OR b.order_key IS NOT NULL) AS n_ordered,
                   count(*) FILTER (WHERE b.idempotency_key IS NOT NULL AND b.supersede_key IS NULL
                                      AND b.order_key IS NULL) AS n_keyed
              FROM pgpace_bulk_row b GROUP BY b.customer) g;
    -- The file's names that are no customer's, looked up once each rather than for every line
    -- (the others are locked below, where one deleted in between is caught).
    unknown := ARRAY(SELECT n FROM unnest(names) n
                      WHERE n IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM pgpace.customer c
                                         WHERE c.name = n AND c.parent_id IS NULL));
    -- The lines set-wise below; the others go one by one at the end.
    n_setwise := n_lines - n_ordered - CASE WHEN mixed THEN n_keyed ELSE 0 END;

    -- The first line that is not an object or names an unknown field, else the first line with
    -- a bad field. An endpoint ('acme/crm', a row with a parent) is not enqueued to: its
    -- customer is.
    SELECT b.line_no, msg INTO bad FROM pgpace_bulk_row b
      CROSS JOIN LATERAL (SELECT CASE
          WHEN b.shape_error IS NOT NULL THEN b.shape_error
          WHEN b.customer_type IS DISTINCT FROM 'string' THEN 'field customer: required, must be a string'
          WHEN b.customer = ANY (unknown) AND position('/' IN b.customer) > 0
            THEN format('field customer: unknown customer %s (enqueue to the customer, the part '
                        'before /: its endpoints'' subscriptions route the event)',
                        quote_literal(left(b.customer, 140)))
          WHEN b.customer = ANY (unknown)
            THEN format('field customer: unknown customer %s', quote_literal(left(b.customer, 140)))
          -- A null payload is NULL here (the staging pass): no comparison with 'null'::jsonb,
          -- which copied and compared every payload.
          WHEN b.payload IS NULL THEN 'field payload: required, must not be null'
          WHEN b.payload_size > size_limit
            THEN format('field payload: %s bytes, above the limit of %s bytes', b.payload_size, size_limit)
          -- As pgpace.enqueue_item checks it (sql/functions/05_enqueue.sql).
          -- Nesting 257 levels takes at least 514 characters of brackets: smaller payloads are
          -- not walked.
          WHEN b.payload_size > 512
               AND jsonb_path_exists(b.payload, 'strict $.**{256} ? (@.type() == "array" || @.type() == "object")')
            THEN 'field payload: nests arrays and objects more than 256 levels deep'
          WHEN b.mistyped = 'priority' THEN 'field priority: must be an integer between -32767 and 32767'
          WHEN b.mistyped IS NOT NULL THEN format('field %s: must be a string', b.mistyped)
          WHEN NOT pgpace.valid_name(b.carrier)
            THEN 'field carrier: must be 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit'
          WHEN length(b.kind) NOT BETWEEN 1 AND 128 THEN 'field kind: must be 1 to 128 characters'
          WHEN length(b.idempotency_key) NOT BETWEEN 1 AND 255
            THEN 'field idempotency_key: must be 1 to 255 characters'
          WHEN length(b.supersede_key) NOT BETWEEN 1 AND 255
            THEN 'field supersede_key: must be 1 to 255 characters'
          -- "traceparent must ..." -> "field traceparent: must ...", as pgpace.enqueue_json says it.
          -- Called only where there is something to check: a plpgsql call per line costs more
          -- than the rest of the line's checks together.
          WHEN (b.traceparent IS NOT NULL OR b.tracestate IS NOT NULL)
               AND pgpace.trace_context_error(b.traceparent, b.tracestate) IS NOT NULL
            THEN regexp_replace(pgpace.trace_context_error(b.traceparent, b.tracestate),
                                '^([a-z]+) ', 'field \1: ')
          WHEN b.order_key IS NOT NULL AND pgpace.order_key_error(b.order_key) IS NOT NULL
            THEN regexp_replace(pgpace.order_key_error(b.order_key), '^([a-z_]+) ', 'field \1: ')
          -- -32768 is the recovery lane's (pgpace recover), as in pgpace.enqueue_item.
          WHEN b.priority !~ '^-?[0-9]{1,5}$' OR b.priority::integer NOT BETWEEN -32767 AND 32767
            THEN 'field priority: must be an integer between -32767 and 32767'
          END AS msg) m
     WHERE m.msg IS NOT NULL
     ORDER BY b.shape_error IS NULL, b.line_no LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'line %: %', bad.line_no, bad.msg USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Timestamps: cast them all; on failure name the first line that does not parse. Skipped
    -- when no line has one.
    IF timed THEN
        BEGIN
            SELECT b.line_no,
                   CASE WHEN NOT isfinite(b.run_at::timestamptz) THEN 'field run_at: must be a finite timestamp'
                        WHEN NOT isfinite(b.expires_at::timestamptz)
                          THEN 'field expires_at: must be a finite timestamp'
                   END AS msg INTO bad
              FROM pgpace_bulk_row b
             WHERE NOT isfinite(b.run_at::timestamptz) OR NOT isfinite(b.expires_at::timestamptz)
             ORDER BY b.line_no LIMIT 1;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
            FOR bad IN SELECT b.line_no, b.run_at, b.expires_at FROM pgpace_bulk_row b
                        WHERE b.run_at IS NOT NULL OR b.expires_at IS NOT NULL ORDER BY b.line_no LOOP
                BEGIN
                    PERFORM bad.run_at::timestamptz;
                EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
                    RAISE EXCEPTION 'line %: field run_at: %', bad.line_no, SQLERRM
                        USING ERRCODE = 'invalid_datetime_format';
                END;
                BEGIN
                    PERFORM bad.expires_at::timestamptz;
                EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
                    RAISE EXCEPTION 'line %: field expires_at: %', bad.line_no, SQLERRM
                        USING ERRCODE = 'invalid_datetime_format';
                END;
            END LOOP;
            RAISE;
        END;
        IF bad.msg IS NOT NULL THEN
            RAISE EXCEPTION 'line %: %', bad.line_no, bad.msg USING ERRCODE = 'invalid_datetime_format';
        END IF;
        SELECT b.line_no INTO bad FROM pgpace_bulk_row b
         WHERE b.expires_at::timestamptz <= b.run_at::timestamptz
         ORDER BY b.line_no LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'line %: field expires_at: must be later than run_at', bad.line_no
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;

    -- One KEY SHARE lock per customer (not per row, as a foreign key would take) keeps a
    -- concurrent `customer delete` from orphaning these items. fans_out: read under that lock,
    -- as pgpace.enqueue_item reads it.
    CREATE TEMP TABLE pgpace_bulk_customer ON COMMIT DROP AS
        SELECT c.id, c.name, c.max_attempts, c.max_age, pgpace.fans_out(c.id) AS fans_out
          FROM pgpace.customer c
         WHERE c.name = ANY (names) AND c.parent_id IS NULL
           FOR KEY SHARE;
    IF (SELECT count(*) FROM pgpace_bulk_customer) < cardinality(names) THEN
        RAISE EXCEPTION 'a customer named in the file was deleted during the load'
            USING ERRCODE = 'foreign_key_violation';
    END IF;


    -- Rows without a key cannot conflict, so only keyed rows pay for ON CONFLICT's speculative
    -- insertion (into the narrow pgpace.item_key). Every line takes its id first, in line order
    -- (`src` is materialised once: its ids come from a volatile function), and the item and
    -- its queue row are both inserted from that, without reading the items back (RETURNING)
    -- and joining them to their customers again. A keyed line is inserted only when its key
    -- was new.
    WITH src AS MATERIALIZED (
        SELECT id_day | (nextval('pgpace.item_id_seq') & 8589934591) AS id, b.line_no,
               c.id AS customer_id, b.carrier, b.kind,
               b.payload, b.idempotency_key, coalesce(b.priority::smallint, 0) AS priority,
               coalesce(b.run_at::timestamptz, now()) AS run_at, b.expires_at::timestamptz AS expires_at,
               b.traceparent, b.tracestate, c.max_attempts, c.max_age
          FROM pgpace_bulk_row b JOIN pgpace_bulk_customer c ON c.name = b.customer
         WHERE b.supersede_key IS NULL AND b.order_key IS NULL
           AND NOT (mixed AND b.idempotency_key IS NOT NULL)
           AND NOT c.fans_out
         ORDER BY b.line_no
    ), ins_key AS (
        INSERT INTO pgpace.item_key (customer_id, idempotency_key, item_id)
        SELECT k.customer_id, k.idempotency_key, k.id FROM src k
         WHERE k.idempotency_key IS NOT NULL
         ORDER BY k.line_no
        ON CONFLICT (customer_id, idempotency_key) DO NOTHING
        RETURNING item_id
    ), ins AS NOT MATERIALIZED (
        -- The effective deadline, as pgpace.enqueue_item computes it (run_at is never before
        -- now() minus the transaction's age here, so greatest() counts max_age from when the
        -- item is due or enqueued, whichever is later). Not materialised: each statement below
        -- reads `src` itself rather than a second copy of every payload.
        SELECT k.*, least(k.expires_at, greatest(k.run_at, now()) + k.max_age) AS deadline
          FROM src k
         WHERE k.idempotency_key IS NULL OR k.id IN (SELECT n.item_id FROM ins_key n)
    ), ins_item AS (
        INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, idempotency_key, priority,
                                 run_at, expires_at, traceparent, tracestate)
        SELECT k.id, k.customer_id, k.carrier, k.kind, k.payload, k.idempotency_key, k.priority,
               k.run_at, k.expires_at, k.traceparent, k.tracestate
          FROM ins k
    ), q AS (
        INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                  max_attempts, expires_at)
        SELECT ins.id, ins.customer_id, coalesce(ins.carrier, ''), ins.priority, ins.run_at,
               ins.max_attempts, ins.deadline
          FROM ins
         WHERE ins.deadline IS NULL OR ins.deadline > now()
    ), dead AS (
        INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
        SELECT ins.id, ins.customer_id, ins.carrier, 0, 'expired'
          FROM ins
         WHERE ins.deadline <= now()
    ), per_carrier AS (
        -- What was queued and dead-lettered, per customer and carrier (a wake-up each).
        SELECT ins.customer_id, coalesce(ins.carrier, '') AS carrier,
               count(*) FILTER (WHERE ins.deadline IS NULL OR ins.deadline > now()) AS queued,
               count(*) FILTER (WHERE ins.deadline <= now()) AS dead
          FROM ins GROUP BY 1, 2
    )
    SELECT coalesce(sum(x.queued), 0), coalesce(sum(x.dead), 0) INTO inserted, expired
      FROM per_carrier x
     CROSS JOIN (SELECT count(pg_notify('pgpace_enqueue', x.customer_id::text || ' ' || x.carrier))
                   FROM per_carrier x WHERE x.queued > 0) notified;
    events := 0;
    deliveries := 0;
    unmatched := 0;

    fan_ids := ARRAY(SELECT c.id FROM pgpace_bulk_customer c WHERE c.fans_out);
    IF cardinality(fan_ids) > 0 THEN
        -- Their endpoints (and a customer's own receiver, "default"), locked as
        -- pgpace.enqueue_fanout locks them: `endpoint delete` waits for this load.
        CREATE TEMP TABLE pgpace_bulk_endpoint ON COMMIT DROP AS
            SELECT coalesce(e.parent_id, e.id) AS customer_id, e.id, e.event_types,
                   e.payload_filter, e.max_attempts, e.max_age
              FROM pgpace.customer e
             WHERE e.parent_id = ANY (fan_ids) OR (e.id = ANY (fan_ids) AND e.webhook_url IS NOT NULL)
               FOR KEY SHARE;
        ANALYZE pgpace_bulk_endpoint;
        -- One event per line (its id taken first, so that its key can name it, as in the plain
        -- statement above), then one delivery per matching endpoint of the events whose key was
        -- new. ev, acc and dl are materialised once: their ids come from a volatile function.
        WITH ev AS MATERIALIZED (
            SELECT id_day | (nextval('pgpace.item_id_seq') & 8589934591) AS id, b.line_no,
               c.id AS customer_id, b.carrier, b.kind,
                   b.payload, b.idempotency_key, coalesce(b.priority::smallint, 0) AS priority,
                   coalesce(b.run_at::timestamptz, now()) AS run_at,
                   b.expires_at::timestamptz AS expires_at, b.traceparent, b.tracestate
              FROM pgpace_bulk_row b JOIN pgpace_bulk_customer c ON c.name = b.customer
             WHERE c.fans_out AND b.supersede_key IS NULL AND b.order_key IS NULL
               AND NOT (mixed AND b.idempotency_key IS NOT NULL)
             ORDER BY b.line_no
        ), ev_key AS (
            INSERT INTO pgpace.item_key (customer_id, idempotency_key, item_id)
            SELECT e.customer_id, e.idempotency_key, e.id FROM ev e
             WHERE e.idempotency_key IS NOT NULL
             ORDER BY e.line_no
            ON CONFLICT (customer_id, idempotency_key) DO NOTHING
            RETURNING item_id
        ), acc AS NOT MATERIALIZED (
            -- Read from ev twice rather than copied (with every payload) once more.
            SELECT e.* FROM ev e
             WHERE e.idempotency_key IS NULL OR e.id IN (SELECT k.item_id FROM ev_key k)
        ), dl AS MATERIALIZED (
            -- The deadline per endpoint, as pgpace.enqueue_fanout computes it.
            SELECT id_day | (nextval('pgpace.item_id_seq') & 8589934591) AS id, a.id AS event_id,
                   p.id AS endpoint_id,
                   p.max_attempts, a.carrier, a.kind, a.priority, a.run_at, a.expires_at,
                   a.traceparent, a.tracestate,
                   least(a.expires_at, greatest(a.run_at, now()) + p.max_age) AS deadline
              FROM acc a JOIN pgpace_bulk_endpoint p ON p.customer_id = a.customer_id
             WHERE (coalesce(cardinality(p.event_types), 0) = 0 OR pgpace.subscribed(p.event_types, a.kind))
               AND (p.payload_filter IS NULL OR a.payload @> p.payload_filter)
             ORDER BY a.line_no, p.id
        ), ins_dl AS (
            -- In id order: dl took its ids in the order it was materialised in.
            INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, event_id, priority,
                                     run_at, expires_at, traceparent, tracestate)
            SELECT d.id, d.endpoint_id, d.carrier, d.kind, NULL, d.event_id, d.priority, d.run_at,
                   d.expires_at, d.traceparent, d.tracestate
              FROM dl d
        ), q AS (
            INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                      max_attempts, expires_at)
            SELECT d.id, d.endpoint_id, coalesce(d.carrier, ''), d.priority, d.run_at,
                   d.max_attempts, d.deadline
              FROM dl d
             WHERE d.deadline IS NULL OR d.deadline > now()
        ), dead AS (
            INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
            SELECT d.id, d.endpoint_id, d.carrier, 0, 'expired'
              FROM dl d
             WHERE d.deadline <= now()
        ), per_event AS (
            SELECT d.event_id, count(*) AS n, count(*) FILTER (WHERE d.deadline <= now()) AS n_expired
              FROM dl d GROUP BY d.event_id
        ), ins_ev AS (
            -- The event itself: the payload, once. Unsorted: its id was taken in ev, and the
            -- join reads acc in that order anyway.
            INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, idempotency_key,
                                     priority, run_at, expires_at, traceparent, tracestate, fanout)
            SELECT a.id, a.customer_id, a.carrier, a.kind, a.payload, a.idempotency_key,
                   a.priority, a.run_at, a.expires_at, a.traceparent, a.tracestate,
                   coalesce(p.n, 0)
              FROM acc a LEFT JOIN per_event p ON p.event_id = a.id
        ), notified AS (
            SELECT count(pg_notify('pgpace_enqueue', x.endpoint_id::text || ' ' || x.carrier))
              FROM (SELECT DISTINCT d.endpoint_id, coalesce(d.carrier, '') AS carrier FROM dl d
                     WHERE d.deadline IS NULL OR d.deadline > now()) x
        ), per_all AS (
            SELECT count(*) AS matched, coalesce(sum(p.n), 0) AS n,
                   count(*) FILTER (WHERE p.n = p.n_expired) AS n_expired,
                   (SELECT count(*) FROM acc) AS n_events
              FROM per_event p
        )
        -- Counted from what the statements insert, not read back from them: every event of
        -- acc is inserted (fanout: its deliveries, 0 for none); every delivery expired: the
        -- event counts as expired, as pgpace.enqueue_item says.
        SELECT pa.n_events - pa.n_expired, pa.n_expired, pa.n_events, pa.n,
               pa.n_events - pa.matched
          INTO ev_inserted, ev_expired, events, deliveries, unmatched
          FROM per_all pa CROSS JOIN notified;
        inserted := inserted + ev_inserted;
        expired := expired + ev_expired;
    END IF;

    duplicates := n_setwise - inserted - expired;
    superseded := 0;
    IF n_setwise = n_lines THEN
        RETURN;
    END IF;

    -- A call per line, in line order (a join would call them in scan order, before sorting).
    FOR ln IN SELECT * FROM pgpace_bulk_row b
               WHERE b.supersede_key IS NOT NULL OR b.order_key IS NOT NULL
                  OR (mixed AND b.idempotency_key IS NOT NULL)
               ORDER BY b.line_no
    LOOP
        SELECT * INTO one
          FROM pgpace.enqueue_item(ln.customer, ln.payload, ln.carrier, ln.kind,
                                   ln.run_at::timestamptz, ln.idempotency_key,
                                   coalesce(ln.priority::integer, 0),
                                   ln.expires_at::timestamptz, ln.supersede_key,
                                   ln.traceparent, ln.tracestate, ln.order_key);
        -- An event (a customer with endpoints; NULL for a duplicate): what it made.
        IF one.deliveries IS NOT NULL THEN
            events := events + 1;
            deliveries := deliveries + one.deliveries;
            unmatched := unmatched + (one.deliveries = 0)::integer;
        END IF;
        IF one.expired THEN
            expired := expired + 1;
        ELSIF one.result = 'superseded' THEN
            superseded := superseded + 1;
        ELSIF one.result = 'duplicate' THEN
            duplicates := duplicates + 1;
        ELSE
            inserted := inserted + 1;
        END IF;
    END LOOP;
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.enqueue_bulk() FROM PUBLIC;
