-- 05_enqueue.sql - pgpace.enqueue, the producers' transactional enqueue, and
-- pgpace.enqueue_item, which does the work for it and for the JSON and bulk paths.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- The signatures before migration 0012 (without traceparent, tracestate). Dropped here, not in
-- 0012: this file runs in one transaction with the last pending migration, so the old signature
-- and the new one swap at one commit and a producer never finds no enqueue at all (a migration
-- commits on its own, and the next one may wait long for a lock). No-op once they are gone.
-- Grants on the old signatures other than pgpace_producer's (below) go with them.
DROP FUNCTION IF EXISTS pgpace.enqueue(text, jsonb, text, text, timestamptz, text, integer, timestamptz, text);
DROP FUNCTION IF EXISTS pgpace.enqueue_item(text, jsonb, text, text, timestamptz, text, integer,
                                            timestamptz, text);
-- And the one before `deliveries` (migration 0018's endpoints) was returned: CREATE OR REPLACE
-- cannot add an OUT parameter. Dropped once, in this file's transaction, as above.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc p
                WHERE p.oid = to_regprocedure('pgpace.enqueue_item(text, jsonb, text, text, timestamptz, '
                                              'text, integer, timestamptz, text, text, text)')
                  AND NOT ('deliveries' = ANY (p.proargnames))) THEN
        DROP FUNCTION pgpace.enqueue_item(text, jsonb, text, text, timestamptz, text, integer,
                                          timestamptz, text, text, text);
    END IF;
END
$$;

-- And the one before order_key (migration 0020): a new parameter, so a new signature; dropped
-- in this file's transaction as above (enqueue_item's grants are none; enqueue's are given
-- again below).
DROP FUNCTION IF EXISTS pgpace.enqueue_item(text, jsonb, text, text, timestamptz, text, integer,
                                            timestamptz, text, text, text);
DROP FUNCTION IF EXISTS pgpace.enqueue(text, jsonb, text, text, timestamptz, text, integer,
                                       timestamptz, text, text, text);

-- What is wrong with an order key given at enqueue, as a message that starts with the field, or
-- NULL when it is fine (or absent). Shared by every enqueue path; the CHECK constraints of
-- 0020_order_keys.sql state the same rule. Control characters are refused because the key is
-- shown by `pgpace dlq list` and in logs, where they could forge lines.
CREATE OR REPLACE FUNCTION pgpace.order_key_error(order_key text)
RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN order_key IS NULL THEN NULL
        WHEN order_key = '' THEN 'order_key must not be empty (leave it out for none)'
        WHEN length(order_key) > 255
            THEN format('order_key must be at most 255 characters, got %s', length(order_key))
        WHEN order_key ~ '[[:cntrl:]]' THEN 'order_key must not contain control characters'
    END
$$;

-- What is wrong with a W3C Trace Context (Trace Context level 1, the traceparent and tracestate
-- HTTP headers) given at enqueue, as a message that starts with the field ("traceparent must
-- ..."), or NULL when it is fine (or absent). Shared by every enqueue path, so that they all
-- refuse the same values in the same words. The values are sent to receivers verbatim as
-- headers; pgpace.item's CHECK constraints (0012_trace_context.sql) are the second line of
-- defence.
-- - traceparent: version-traceid-parentid-flags, 2-32-16-2 lowercase hex digits; version ff is
--   invalid, an all-zero trace-id or parent-id too; version 00 is exactly 55 characters. A
--   later version may append "-..." (the spec's forward compatibility), visible ASCII only and
--   at most 256 characters in all.
-- - tracestate: at most 32 list-members key=value separated by commas (optional spaces or tabs
--   around them, empty members allowed and not counted), keys and values per the spec's
--   grammar, each key once, at least one member, at most 512 characters, not starting or
--   ending with a space or tab (HTTP would
--   strip those, and the receiver would not see what was enqueued), and only with a
--   traceparent (without one, the spec has receivers ignore it).
CREATE OR REPLACE FUNCTION pgpace.trace_context_error(traceparent text, tracestate text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    members text[];
    keys    text[] := '{}';
    m       text;
    n       integer := 0;
BEGIN
    IF traceparent IS NOT NULL THEN
        IF length(traceparent) > 256
           OR traceparent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?$' THEN
            RETURN 'traceparent must be version-traceid-parentid-flags: 2, 32, 16 and 2 lowercase '
                   'hex digits joined by "-" (W3C Trace Context)';
        END IF;
        IF left(traceparent, 2) = 'ff' THEN
            RETURN 'traceparent must not have version ff (invalid in W3C Trace Context)';
        END IF;
        IF left(traceparent, 2) = '00' AND length(traceparent) <> 55 THEN
            RETURN format('traceparent must be exactly 55 characters for version 00, got %s',
                          length(traceparent));
        END IF;
        IF substr(traceparent, 4, 32) = repeat('0', 32) THEN
            RETURN 'traceparent must not have an all-zero trace-id';
        END IF;
        IF substr(traceparent, 37, 16) = repeat('0', 16) THEN
            RETURN 'traceparent must not have an all-zero parent-id';
        END IF;
    END IF;
    IF tracestate IS NULL THEN
        RETURN NULL;
    END IF;
    IF traceparent IS NULL THEN
        RETURN 'tracestate must come with a traceparent';
    END IF;
    IF tracestate = '' THEN
        RETURN 'tracestate must not be empty (leave it out)';
    END IF;
    IF length(tracestate) > 512 THEN
        RETURN format('tracestate must be at most 512 characters, got %s', length(tracestate));
    END IF;
    IF tracestate ~ '^[\t ]|[\t ]$' THEN
        RETURN 'tracestate must not start or end with a space or tab';
    END IF;
    members := string_to_array(tracestate, ',');
    FOR i IN 1 .. cardinality(members) LOOP
        m := btrim(members[i], E' \t');
        CONTINUE WHEN m = '';
        n := n + 1;
        IF m !~ ('^([a-z][a-z0-9_*/-]{0,255}|[a-z0-9][a-z0-9_*/-]{0,240}@[a-z][a-z0-9_*/-]{0,13})'
                 '=[ -+\--<>-~]{0,255}[!-+\--<>-~]$') THEN
            RETURN format('tracestate must be a list of key=value members separated by commas '
                          '(W3C Trace Context): member %s is not', i);
        END IF;
        IF split_part(m, '=', 1) = ANY (keys) THEN
            RETURN format('tracestate must list each key once (W3C Trace Context): member %s '
                          'repeats an earlier key', i);
        END IF;
        keys := keys || split_part(m, '=', 1);
    END LOOP;
    IF n = 0 THEN
        RETURN 'tracestate must have a list-member (leave it out)';
    END IF;
    IF n > 32 THEN
        RETURN format('tracestate must have at most 32 list-members, got %s', n);
    END IF;
    RETURN NULL;
END
$$;

-- The table's own line of defence for the values sent as headers (0023_enqueue_checks.sql): the
-- rule above, and only for items with a trace context. Added here, after the function, because
-- migrations run before this file; NOT VALID because every row already met the CHECKs it
-- replaces. Nothing to do once it is there.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'pgpace.item'::regclass
                      AND conname = 'item_trace_context_valid') THEN
        ALTER TABLE pgpace.item
            ADD CONSTRAINT item_trace_context_valid
            CHECK ((traceparent IS NULL AND tracestate IS NULL)
                   OR pgpace.trace_context_error(traceparent, tracestate) IS NULL) NOT VALID;
    END IF;
END
$$;

-- One item, with every check and rule of every enqueue path; returns its id and what became of
-- it: `result` is 'created', 'duplicate' (a repeated idempotency key: the first item's id,
-- nothing changed) or 'superseded' (the id of the queued item whose payload this one replaced);
-- `expired` says the item's deadline had already passed, so it went straight to the dead
-- letters (reason 'expired') instead of the queue. Not for producers directly (they call
-- pgpace.enqueue or pgpace.enqueue_json, which run as the owner).
--
-- For a customer that fans out (pgpace.fans_out: it has endpoints), the id is the event's, a
-- new one also when it superseded (the webhook-id msg_<id> of every delivery it made or moved);
-- `result` is 'superseded' when it moved at least one endpoint's queued delivery, `expired`
-- when every delivery was past its deadline, and `deliveries` how many endpoints it reached
-- (0: it matched none and is kept as an event). `deliveries` is NULL for an item of a customer
-- that does not fan out and for a duplicate.
--
-- Keys:
-- - idempotency_key first: a key seen before returns that item's id and does nothing else, also
--   when the repeat carries a supersede_key. Keys live in pgpace.item_key, whose unique index
--   the partitioned pgpace.item cannot have. A new key is recorded for the item it ends up in
--   (the superseded one when this call supersedes).
-- - supersede_key: a queued item of the same customer and key that was never claimed gets this
--   item's payload, kind and deadline and keeps its id, carrier, priority and place; without
--   one, this item is queued with the key. queue_supersede (unique on customer and key over
--   the rows that still have one; the claim clears it) makes a concurrent producer wait for
--   the first and then supersede its item.
--
-- - order_key: the item is queued at the end of its key (0020_order_keys.sql: the deliveries of
--   one customer or endpoint with the same key go one at a time, in enqueue order). With a
--   supersede_key too, order wins: the queued item with the supersede key is replaced only when
--   it has the same order key (or neither has one) and no later item of that order key is
--   queued behind it, so that superseding never moves a payload ahead of items enqueued before
--   it. Otherwise this item is queued at the end of its own key and takes the supersede key
--   over (the older item keeps its place and is delivered: it can no longer be superseded).
--
-- Deadlines: the effective one is least(expires_at, due + the customer's max_age), where due is
-- the later of run_at and now() (transaction time, as for run_at's default): max_age bounds
-- how late an item may be sent, so a scheduled item does not age before it is due. A deadline
-- already past at enqueue is not an error: the producer's transaction (its business change)
-- still commits, and the item is dead-lettered as 'expired' where `dlq list` shows it and
-- `dlq replay` can send it anyway. An expires_at not after run_at is an error (it can never be
-- sent: a mistake in the caller).
CREATE OR REPLACE FUNCTION pgpace.enqueue_item(
    customer        text,
    payload         jsonb,
    carrier         text,
    kind            text,
    run_at          timestamptz,
    idempotency_key text,
    priority        integer,
    expires_at      timestamptz,
    supersede_key   text,
    traceparent     text,
    tracestate      text,
    order_key       text,
    OUT id          bigint,
    OUT result      text,
    OUT expired     boolean,
    OUT deliveries  integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    cust_id      bigint;
    cust_max     integer;
    cust_age     interval;
    cust_fans_out boolean;
    new_id       bigint;
    size_limit   bigint;
    payload_size bigint;
    deadline     timestamptz;
    due          timestamptz;
    old          record;
    tries        integer := 0;
    trace_error  text;
BEGIN
    IF enqueue_item.customer IS NULL THEN
        RAISE EXCEPTION 'pgpace.enqueue: customer must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF enqueue_item.payload IS NULL THEN
        RAISE EXCEPTION 'pgpace.enqueue: payload must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF enqueue_item.carrier IS NOT NULL AND NOT pgpace.valid_name(enqueue_item.carrier) THEN
        RAISE EXCEPTION 'pgpace.enqueue: invalid carrier %', quote_literal(left(enqueue_item.carrier, 140))
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'carrier names are 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit';
    END IF;
    IF enqueue_item.kind IS NOT NULL AND length(enqueue_item.kind) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'pgpace.enqueue: kind must be 1 to 128 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue_item.idempotency_key IS NOT NULL AND length(enqueue_item.idempotency_key) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'pgpace.enqueue: idempotency_key must be 1 to 255 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue_item.supersede_key IS NOT NULL AND length(enqueue_item.supersede_key) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'pgpace.enqueue: supersede_key must be 1 to 255 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue_item.run_at IS NOT NULL AND NOT isfinite(enqueue_item.run_at) THEN
        RAISE EXCEPTION 'pgpace.enqueue: run_at must be a finite timestamp'
            USING ERRCODE = 'invalid_datetime_format';
    END IF;
    IF enqueue_item.expires_at IS NOT NULL AND NOT isfinite(enqueue_item.expires_at) THEN
        RAISE EXCEPTION 'pgpace.enqueue: expires_at must be a finite timestamp'
            USING ERRCODE = 'invalid_datetime_format',
                  HINT = 'leave it out (NULL) for no deadline';
    END IF;
    IF enqueue_item.expires_at <= enqueue_item.run_at THEN
        RAISE EXCEPTION 'pgpace.enqueue: expires_at must be later than run_at'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'an item due at run_at could never be sent before such a deadline';
    END IF;
    -- Both checks only for what is there: a call costs a few microseconds even for NULLs.
    IF enqueue_item.traceparent IS NOT NULL OR enqueue_item.tracestate IS NOT NULL THEN
        trace_error := pgpace.trace_context_error(enqueue_item.traceparent, enqueue_item.tracestate);
    END IF;
    IF trace_error IS NOT NULL THEN
        RAISE EXCEPTION 'pgpace.enqueue: %', trace_error
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'traceparent and tracestate as W3C Trace Context (level 1) defines them; leave both out for none';
    END IF;
    IF enqueue_item.order_key IS NOT NULL THEN
        trace_error := pgpace.order_key_error(enqueue_item.order_key);
    END IF;
    IF trace_error IS NOT NULL THEN
        RAISE EXCEPTION 'pgpace.enqueue: %', trace_error
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'an order key is 1-255 characters without control characters';
    END IF;
    -- -32768 is the recovery lane's (items sent again by `pgpace recover`), below all live
    -- traffic; producers get the symmetric range.
    IF enqueue_item.priority IS NULL OR enqueue_item.priority NOT BETWEEN -32767 AND 32767 THEN
        RAISE EXCEPTION 'pgpace.enqueue: priority must be between -32767 and 32767, got %', enqueue_item.priority
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '-32768 is reserved for items sent again by pgpace recover';
    END IF;

    -- Endpoints ("<customer>/<endpoint>", migration 0018) are not enqueued to: their customer
    -- is, and its subscriptions route the event. One statement reads the customer, whether it
    -- fans out (pgpace.fans_out's rule, written out: a call would be a second statement) and
    -- the payload limit: each statement of a single enqueue is a measurable part of it.
    SELECT c.id, c.max_attempts, c.max_age,
           c.webhook_url IS NULL OR coalesce(cardinality(c.event_types), 0) > 0
           OR c.payload_filter IS NOT NULL
           OR EXISTS (SELECT 1 FROM pgpace.customer e WHERE e.parent_id = c.id),
           (SELECT s.value::bigint FROM pgpace.setting s WHERE s.name = 'max_payload_bytes')
      INTO cust_id, cust_max, cust_age, cust_fans_out, size_limit
      FROM pgpace.customer c WHERE c.name = enqueue_item.customer AND c.parent_id IS NULL
       FOR KEY SHARE OF c;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgpace.enqueue: unknown customer %', quote_literal(left(enqueue_item.customer, 140))
            USING ERRCODE = 'foreign_key_violation',
                  HINT = CASE WHEN position('/' IN enqueue_item.customer) > 0
                              THEN 'enqueue to the customer (the part before /): its endpoints'' subscriptions route the event'
                              ELSE 'create it first: pgpace customer set <name> --rate ... --url ...' END;
    END IF;

    payload_size := octet_length(enqueue_item.payload::text);
    IF payload_size > size_limit THEN
        RAISE EXCEPTION 'pgpace.enqueue: payload is % bytes, above the limit of % bytes', payload_size, size_limit
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'the limit is the max_payload_bytes row of pgpace.setting';
    END IF;
    -- Nesting: at most 256 levels of arrays and objects (the HTTP path checks the same before
    -- the database: ADMIN_HTTP_PAYLOAD_MAX_DEPTH in src/admin_http.h). PostgreSQL parses and
    -- walks JSON recursively; 256 stays within what it parses and walks at any max_stack_depth,
    -- so every path gives this error rather than "stack depth limit exceeded" (54001), which
    -- the producer still meets for a payload too deep to parse at all. A container at level 256
    -- (the root is level 0) is a 257th level. The walk goes no deeper than that; it costs less
    -- than the size check above (measured 1.6 us against 2.2 us for an 800-byte payload, 0.5 ms
    -- against 0.6 ms for 230 kB; a whole enqueue takes about 60 us).
    IF jsonb_path_exists(enqueue_item.payload,
                         'strict $.**{256} ? (@.type() == "array" || @.type() == "object")') THEN
        RAISE EXCEPTION 'pgpace.enqueue: payload nests arrays and objects more than 256 levels deep'
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'the limit keeps every payload within what PostgreSQL parses at any max_stack_depth';
    END IF;

    -- The id first, so that the key rows can name it; the item only when it is new.
    new_id := pgpace.next_item_id();
    IF enqueue_item.idempotency_key IS NOT NULL THEN
        INSERT INTO pgpace.item_key AS k (customer_id, idempotency_key, item_id)
        VALUES (cust_id, enqueue_item.idempotency_key, new_id)
        ON CONFLICT (customer_id, idempotency_key) DO NOTHING
        RETURNING k.item_id INTO id;
        IF id IS NULL THEN
            -- The key exists (possibly committed by a concurrent transaction we just waited for).
            SELECT k.item_id INTO id FROM pgpace.item_key k
             WHERE k.customer_id = cust_id AND k.idempotency_key = enqueue_item.idempotency_key;
            IF id IS NULL THEN
                RAISE EXCEPTION 'pgpace.enqueue: idempotency key % is taken by a transaction this snapshot cannot see',
                                quote_literal(enqueue_item.idempotency_key)
                    USING ERRCODE = 'serialization_failure', HINT = 'retry the transaction';
            END IF;
            result := 'duplicate';
            expired := false;
            RETURN;
        END IF;
        id := NULL;
    END IF;

    -- A customer with endpoints (or with a subscription or filter on its own receiver, or none):
    -- one event, a delivery per matching endpoint (16_endpoints.sql). new_id is the event's.
    IF cust_fans_out THEN
        SELECT f.result, f.expired, f.deliveries INTO result, expired, deliveries
          FROM pgpace.enqueue_fanout(cust_id, new_id, enqueue_item.payload, enqueue_item.carrier,
                                     enqueue_item.kind, enqueue_item.run_at,
                                     enqueue_item.idempotency_key, enqueue_item.priority,
                                     enqueue_item.expires_at, enqueue_item.supersede_key,
                                     enqueue_item.traceparent, enqueue_item.tracestate,
                                     enqueue_item.order_key) AS f;
        id := new_id;
        RETURN;
    END IF;

    deadline := least(enqueue_item.expires_at,
                      greatest(coalesce(enqueue_item.run_at, now()), now()) + cust_age);
    expired := coalesce(deadline <= now(), false);

    -- An item already past its deadline replaces nothing: it is dead-lettered by itself below,
    -- and the queued item with its key (if any) stays as it was.
    WHILE enqueue_item.supersede_key IS NOT NULL AND NOT expired LOOP
        -- A queued, never claimed item with this key. FOR UPDATE: it is deleted below; a claim
        -- that holds it (FOR NO KEY UPDATE) makes this wait, and then clears the key, so the
        -- row no longer matches when re-checked and this item is queued on its own.
        SELECT q.* INTO old FROM pgpace.queue q
         WHERE q.customer_id = cust_id AND q.supersede_key = enqueue_item.supersede_key
           FOR UPDATE;
        -- Order wins (see above): a queued item of another order key, or one with later items
        -- of its key behind it, is not replaced; it gives the supersede key up to this item.
        IF FOUND AND (old.order_key IS DISTINCT FROM enqueue_item.order_key
                      OR EXISTS (SELECT 1 FROM pgpace.queue q
                                  WHERE q.customer_id = cust_id AND q.order_key = old.order_key
                                    AND q.attempt = 0 AND q.item_id > old.item_id)
                      OR EXISTS (SELECT 1 FROM pgpace.queue q
                                  WHERE q.customer_id = cust_id AND q.order_key = old.order_key
                                    AND q.attempt > 0 AND q.item_id > old.item_id)) THEN
            UPDATE pgpace.queue q SET supersede_key = NULL WHERE q.item_id = old.item_id;
        ELSIF FOUND THEN
            UPDATE pgpace.item i
               SET payload = enqueue_item.payload, kind = enqueue_item.kind,
                   expires_at = enqueue_item.expires_at,
                   -- The trace context belongs to the payload: the newer item's replaces it.
                   traceparent = enqueue_item.traceparent, tracestate = enqueue_item.tracestate
             WHERE i.id = old.item_id;
            -- It keeps its place, but not before the newer item's own run_at; and it can only
            -- be sent if its deadline comes after the time it is due: otherwise it is
            -- dead-lettered as expired now rather than when the deadline passes.
            due := greatest(old.next_action_at, enqueue_item.run_at); -- NULL run_at: its place
            deadline := least(enqueue_item.expires_at, greatest(due, now()) + cust_age);
            expired := coalesce(deadline <= greatest(due, now()), false);
            -- Deleted and inserted again rather than updated: a claim statement whose snapshot
            -- predates this transaction's commit then skips the row (deleted) instead of
            -- locking its new version and sending the item's payload as its snapshot saw it,
            -- the one replaced here. The new row is claimed by the next round.
            DELETE FROM pgpace.queue q WHERE q.item_id = old.item_id;
            IF expired THEN
                INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
                VALUES (old.item_id, cust_id, nullif(old.carrier, ''), old.attempt, 'expired');
            ELSE
                INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                          attempt, max_attempts, last_error, expires_at, supersede_key,
                                          order_key)
                VALUES (old.item_id, cust_id, old.carrier, old.priority, due,
                        old.attempt, old.max_attempts, old.last_error, deadline, old.supersede_key,
                        old.order_key);
                -- The round that skipped the row may have taken its pair for drained.
                PERFORM pgpace.wake_leader(cust_id, old.carrier);
            END IF;
            IF enqueue_item.idempotency_key IS NOT NULL THEN
                UPDATE pgpace.item_key k SET item_id = old.item_id
                 WHERE k.customer_id = cust_id AND k.idempotency_key = enqueue_item.idempotency_key;
            END IF;
            id := old.item_id;
            result := 'superseded';
            RETURN;
        END IF;
        EXIT WHEN expired; -- nothing to supersede, and this item is not queued: no key to hold
        -- Take the key with this item's queue row (the item row follows below). A conflict is
        -- a concurrent producer's row, committed while we waited: supersede it instead.
        INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                  max_attempts, expires_at, supersede_key, order_key)
        VALUES (new_id, cust_id, coalesce(enqueue_item.carrier, ''), enqueue_item.priority::smallint,
                coalesce(enqueue_item.run_at, now()), cust_max, deadline, enqueue_item.supersede_key,
                enqueue_item.order_key)
        ON CONFLICT (customer_id, supersede_key) WHERE supersede_key IS NOT NULL DO NOTHING;
        IF FOUND THEN
            id := new_id;
            EXIT;
        END IF;
        -- Each turn follows another producer's commit on this key (a row superseded while we
        -- waited for its lock is deleted, and its new version is not in our snapshot), so this
        -- makes progress; the bound is a safety net, not a limit producers meet (16 producers on
        -- 5 keys needed at most a few turns).
        tries := tries + 1;
        IF tries >= 100 THEN
            RAISE EXCEPTION 'pgpace.enqueue: supersede_key % changed hands 100 times during this call',
                            quote_literal(enqueue_item.supersede_key)
                USING ERRCODE = 'serialization_failure', HINT = 'retry the transaction';
        END IF;
    END LOOP;

    INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, idempotency_key, priority,
                             run_at, expires_at, traceparent, tracestate, order_key)
    VALUES (new_id, cust_id, enqueue_item.carrier, enqueue_item.kind, enqueue_item.payload,
            enqueue_item.idempotency_key, enqueue_item.priority, coalesce(enqueue_item.run_at, now()),
            enqueue_item.expires_at, enqueue_item.traceparent, enqueue_item.tracestate,
            enqueue_item.order_key);
    result := 'created';
    IF expired THEN
        INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
        VALUES (new_id, cust_id, enqueue_item.carrier, 0, 'expired');
        id := new_id;
        RETURN;
    END IF;
    IF id IS NULL THEN
        INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                  max_attempts, expires_at, order_key)
        VALUES (new_id, cust_id, coalesce(enqueue_item.carrier, ''), enqueue_item.priority::smallint,
                coalesce(enqueue_item.run_at, now()), cust_max, deadline, enqueue_item.order_key);
        id := new_id;
    END IF;

    -- The dispatcher wakes that (customer, carrier) pair: by NOTIFY, or by a row it polls for
    -- while it is hot (24_wake.sql).
    PERFORM pgpace.wake_leader(cust_id, coalesce(enqueue_item.carrier, ''));
END
$$;

-- Transactional enqueue. Call it inside the producer's own transaction: the item exists if and
-- only if that transaction commits, and the wake-up NOTIFY is delivered on commit only. Returns
-- the item's id (the first item's for a repeated idempotency key, the superseded item's when
-- it superseded one). expires_at and supersede_key, then traceparent and tracestate (a W3C
-- Trace Context, sent with the webhook as headers), then order_key (deliveries with the same
-- key go one at a time, in enqueue order), came last, with defaults, so calls written for an
-- earlier signature (positional or named) work unchanged.
CREATE OR REPLACE FUNCTION pgpace.enqueue(
    customer        text,
    payload         jsonb,
    carrier         text DEFAULT NULL,
    kind            text DEFAULT NULL,
    run_at          timestamptz DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    priority        integer DEFAULT 0,
    expires_at      timestamptz DEFAULT NULL,
    supersede_key   text DEFAULT NULL,
    traceparent     text DEFAULT NULL,
    tracestate      text DEFAULT NULL,
    order_key       text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- plpgsql, not sql: a SQL function called from a client's statement is parsed and planned
-- again on every call (40 us of a single enqueue); plpgsql keeps its plan for the session.
BEGIN
    RETURN (pgpace.enqueue_item($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)).id;
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.trace_context_error(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgpace.order_key_error(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    pgpace.enqueue_item(text, jsonb, text, text, timestamptz, text, integer, timestamptz, text, text, text, text)
    FROM PUBLIC;
-- Producers (the pgpace_producer group) may call this and pgpace.enqueue_json, nothing else.
REVOKE EXECUTE ON FUNCTION
    pgpace.enqueue(text, jsonb, text, text, timestamptz, text, integer, timestamptz, text, text, text, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    pgpace.enqueue(text, jsonb, text, text, timestamptz, text, integer, timestamptz, text, text, text, text)
    TO pgpace_producer;
