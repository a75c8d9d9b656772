-- 16_endpoints.sql - a customer's endpoints (migration 0018): subscriptions, fan-out of one
-- event to every endpoint that wants it, and the calls that add, change and delete endpoints.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- What is wrong with a subscription (a list of event-type patterns), as a message naming the
-- field, or NULL when it is fine. A pattern is an exact kind (1 to 128 characters, as
-- pgpace.item's kind) or a prefix followed by one '*' at its end ('order.*', or '*' alone for
-- every kind); no whitespace or control characters; at most 64 patterns.
CREATE OR REPLACE FUNCTION pgpace.event_types_error(patterns text[])
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF patterns IS NULL THEN
        RETURN NULL;
    END IF;
    IF cardinality(patterns) > 64 THEN
        RETURN format('events must list at most 64 patterns, got %s', cardinality(patterns));
    END IF;
    FOR i IN 1 .. coalesce(array_length(patterns, 1), 0) LOOP
        IF patterns[i] IS NULL OR patterns[i] = '' THEN
            RETURN format('events[%s] must not be empty', i);
        END IF;
        IF length(patterns[i]) > 128 THEN
            RETURN format('events[%s] must be at most 128 characters', i);
        END IF;
        IF patterns[i] ~ '[[:space:][:cntrl:]]' THEN
            RETURN format('events[%s] must not contain whitespace or control characters', i);
        END IF;
        IF position('*' IN left(patterns[i], -1)) > 0 THEN
            RETURN format('events[%s] %s: a wildcard * may only end a pattern (order.*)', i,
                          quote_literal(patterns[i]));
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Whether an item of `kind` goes to an endpoint subscribed to `patterns` (NULL or empty: every
-- kind). A pattern ending in '*' matches every kind that starts with what comes before it (so
-- '*' matches every kind, also none); any other pattern matches that kind exactly.
-- PL/pgSQL, not SQL, here and in fans_out below: a SQL function whose body has a sub-select is
-- not inlined, and is planned again in every statement (or, called from PL/pgSQL, every
-- transaction) that calls it: about 40 us per enqueue each on a 2-core machine, where the
-- loop below costs about 1 us per endpoint (the sub-select per row cost 4). No SET
-- search_path: it would be set and reset on every call (per endpoint); the built-ins it calls
-- are pg_catalog's, which is searched first.
CREATE OR REPLACE FUNCTION pgpace.subscribed(patterns text[], kind text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    pat text;
BEGIN
    IF coalesce(cardinality(patterns), 0) = 0 THEN
        RETURN true;
    END IF;
    FOREACH pat IN ARRAY patterns LOOP
        IF pat = kind OR pat = '*' OR (right(pat, 1) = '*' AND starts_with(kind, left(pat, -1))) THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

-- Whether an enqueue to this customer fans out (an event with deliveries) rather than queueing
-- the one item of a customer that is its own only endpoint, as every customer did before 0018.
-- Every enqueue asks it, with endpoints or without: PL/pgSQL (see subscribed above), its
-- statements planned once per session (bench/ENDPOINTS.md, section 1, before and after).
CREATE OR REPLACE FUNCTION pgpace.fans_out(cust_id bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pgpace.customer e WHERE e.parent_id = cust_id)
        OR EXISTS (SELECT 1 FROM pgpace.customer c
                    WHERE c.id = cust_id
                      AND (c.webhook_url IS NULL OR coalesce(cardinality(c.event_types), 0) > 0
                           OR c.payload_filter IS NOT NULL));
END
$$;

-- The fan-out of one event (pgpace.enqueue_item has checked every argument, taken the customer
-- row's KEY SHARE lock and recorded the idempotency key for event_id). Writes the event (the
-- customer's item row with the payload, `fanout` deliveries) and, for each endpoint whose
-- subscription and payload filter match, a delivery: an item row without payload pointing at the
-- event, and its queue row (or a dead letter 'expired' when its deadline, which includes that
-- endpoint's max_age, has already passed). A match also includes the customer's own receiver
-- (its "default" endpoint) when it has a webhook URL.
--
-- supersede_key acts per endpoint as it does for a single customer: an endpoint's queued,
-- never-claimed delivery with that key is moved to this event (its new payload, kind, deadline and
-- trace context; it keeps its item id, place and carrier); an endpoint whose delivery with the
-- key was already claimed (the receiver may have seen it) or that has none gets a new delivery.
-- order_key: every delivery carries the event's key (the order holds per endpoint), and so does
-- the event's row (the record). With a supersede_key, order wins as in pgpace.enqueue_item: an
-- endpoint's queued delivery is moved only when it has the same order key (or neither has
-- one) and no later delivery of that key is queued behind it; otherwise it gives the supersede
-- key up and the endpoint gets a new delivery at the end of its key.
-- result: 'created', or 'superseded' when at least one delivery was moved; expired: every
-- delivery was already past its deadline (false when none matched); deliveries: how many
-- endpoints matched (the event's `fanout`: new deliveries, moved ones and expired ones alike).
--
-- Before `deliveries` was returned: dropped once, in this file's transaction (callers never meet
-- a moment without it; CREATE OR REPLACE cannot add an OUT parameter).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc p
                WHERE p.oid = to_regprocedure('pgpace.enqueue_fanout(bigint, bigint, jsonb, text, text, '
                                              'timestamptz, text, integer, timestamptz, text, text, text)')
                  AND NOT ('deliveries' = ANY (p.proargnames))) THEN
        DROP FUNCTION pgpace.enqueue_fanout(bigint, bigint, jsonb, text, text, timestamptz, text,
                                            integer, timestamptz, text, text, text);
    END IF;
END
$$;
-- And the one before order_key (migration 0020): a new parameter, a new signature.
DROP FUNCTION IF EXISTS pgpace.enqueue_fanout(bigint, bigint, jsonb, text, text, timestamptz, text,
                                              integer, timestamptz, text, text, text);
CREATE OR REPLACE FUNCTION pgpace.enqueue_fanout(
    cust_id         bigint,
    event_id        bigint,
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
    OUT result      text,
    OUT expired     boolean,
    OUT deliveries  integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ep         record;
    old        record;
    n          integer := 0;
    n_expired  integer := 0;
    d_id       bigint;
    deadline   timestamptz;
    due        timestamptz;
    late       boolean;
    queued     boolean;
    moved      boolean;
    mv_id      bigint;
    tries      integer;
    notified   bigint;
    late_ids   bigint[];
    late_eps   bigint[];
BEGIN
    result := 'created';
    -- Without a supersede_key every delivery is new, and one statement writes the event and
    -- all of them: one insert into pgpace.item (the partitioned table's insert is set up once,
    -- not once per delivery), their queue rows or dead letters, a NOTIFY per endpoint
    -- (bench/ENDPOINTS.md, section 1: 10 us of statements per delivery at 100 endpoints, where
    -- statements per endpoint took 59).
    -- A delivery is past its deadline at enqueue when expires_at is (then all are), and
    -- otherwise only for a max_age whose months and days nearly cancel out ('1 month -29
    -- days' is more than 0, as customer_max_age_valid asks, yet before now() from some days):
    -- the first statement writes no dead letter (it hands those back), the second nothing but.
    IF supersede_key IS NULL THEN
        IF NOT coalesce(expires_at <= now(), false) THEN
            WITH m AS MATERIALIZED (
                SELECT e.id, e.max_attempts, e.max_age
                  FROM pgpace.customer e
                 WHERE (e.parent_id = cust_id OR (e.id = cust_id AND e.webhook_url IS NOT NULL))
                   AND pgpace.subscribed(e.event_types, kind)
                   AND (e.payload_filter IS NULL OR payload @> e.payload_filter)
                 ORDER BY e.id
                   FOR KEY SHARE
            ), d AS MATERIALIZED (
                -- Ids in endpoint order, after the event's; the deadline as in the loop below.
                SELECT pgpace.next_item_id() AS id, m.id AS ep_id, m.max_attempts,
                       least(expires_at, greatest(coalesce(run_at, now()), now()) + m.max_age) AS deadline
                  FROM m ORDER BY m.id
            ), ins AS (
                -- The event (the payload, once) and its deliveries.
                INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, event_id,
                                         idempotency_key, priority, run_at, expires_at,
                                         traceparent, tracestate, fanout, order_key)
                SELECT event_id, cust_id, carrier, kind, payload, NULL, idempotency_key, priority,
                       coalesce(run_at, now()), expires_at, traceparent, tracestate,
                       (SELECT count(*) FROM d), order_key
                UNION ALL
                SELECT d.id, d.ep_id, carrier, kind, NULL, event_id, NULL, priority,
                       coalesce(run_at, now()), expires_at, traceparent, tracestate, NULL, order_key
                  FROM d
            ), q AS (
                INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                          max_attempts, expires_at, order_key)
                SELECT d.id, d.ep_id, coalesce(carrier, ''), priority::smallint,
                       coalesce(run_at, now()), d.max_attempts, d.deadline, order_key
                  FROM d
                 WHERE NOT coalesce(d.deadline <= now(), false)
                RETURNING customer_id
            )
            SELECT (SELECT count(*) FROM d),
                   (SELECT count(pgpace.wake_leader(q.customer_id, coalesce(carrier, '')))
                      FROM q),
                   ARRAY(SELECT d.id FROM d WHERE d.deadline <= now() ORDER BY d.id),
                   ARRAY(SELECT d.ep_id FROM d WHERE d.deadline <= now() ORDER BY d.id)
              INTO n, notified, late_ids, late_eps;
            IF cardinality(late_ids) > 0 THEN
                INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
                SELECT l.id, l.ep_id, carrier, 0, 'expired'
                  FROM unnest(late_ids, late_eps) AS l(id, ep_id);
                n_expired := cardinality(late_ids);
            END IF;
        ELSE
            WITH m AS MATERIALIZED (
                SELECT e.id
                  FROM pgpace.customer e
                 WHERE (e.parent_id = cust_id OR (e.id = cust_id AND e.webhook_url IS NOT NULL))
                   AND pgpace.subscribed(e.event_types, kind)
                   AND (e.payload_filter IS NULL OR payload @> e.payload_filter)
                 ORDER BY e.id
                   FOR KEY SHARE
            ), d AS MATERIALIZED (
                SELECT pgpace.next_item_id() AS id, m.id AS ep_id FROM m ORDER BY m.id
            ), ins AS (
                INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, event_id,
                                         idempotency_key, priority, run_at, expires_at,
                                         traceparent, tracestate, fanout, order_key)
                SELECT event_id, cust_id, carrier, kind, payload, NULL, idempotency_key, priority,
                       coalesce(run_at, now()), expires_at, traceparent, tracestate,
                       (SELECT count(*) FROM d), order_key
                UNION ALL
                SELECT d.id, d.ep_id, carrier, kind, NULL, event_id, NULL, priority,
                       coalesce(run_at, now()), expires_at, traceparent, tracestate, NULL, order_key
                  FROM d
            ), dead AS (
                INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
                SELECT d.id, d.ep_id, carrier, 0, 'expired' FROM d
                RETURNING item_id
            )
            SELECT count(*) INTO n FROM dead;
            n_expired := n;
        END IF;
        expired := n > 0 AND n_expired = n;
        deliveries := n;
        RETURN;
    END IF;

    -- With a supersede_key, an endpoint's queued delivery with the key may be moved instead: one
    -- endpoint at a time.
    FOR ep IN
        SELECT e.id, e.max_attempts, e.max_age
          FROM pgpace.customer e
         WHERE (e.parent_id = cust_id OR (e.id = cust_id AND e.webhook_url IS NOT NULL))
           AND pgpace.subscribed(e.event_types, kind)
           AND (e.payload_filter IS NULL OR payload @> e.payload_filter)
         ORDER BY e.id
           FOR KEY SHARE
    LOOP
        n := n + 1;
        deadline := least(expires_at, greatest(coalesce(run_at, now()), now()) + ep.max_age);
        late := coalesce(deadline <= now(), false);
        d_id := pgpace.next_item_id();
        queued := false;
        moved := false;
        tries := 0;
        WHILE supersede_key IS NOT NULL AND NOT late LOOP
            SELECT q.* INTO old FROM pgpace.queue q
             WHERE q.customer_id = ep.id AND q.supersede_key = enqueue_fanout.supersede_key
               FOR UPDATE;
            -- Order wins (see above): not moved, the supersede key passes to the new delivery.
            IF FOUND AND (old.order_key IS DISTINCT FROM enqueue_fanout.order_key
                          OR EXISTS (SELECT 1 FROM pgpace.queue q
                                      WHERE q.customer_id = ep.id AND q.order_key = old.order_key
                                        AND q.attempt = 0 AND q.item_id > old.item_id)
                          OR EXISTS (SELECT 1 FROM pgpace.queue q
                                      WHERE q.customer_id = ep.id AND q.order_key = old.order_key
                                        AND q.attempt > 0 AND q.item_id > old.item_id)) THEN
                UPDATE pgpace.queue q SET supersede_key = NULL WHERE q.item_id = old.item_id;
            ELSIF FOUND THEN
                IF pgpace.item_id_day(old.item_id) = pgpace.item_id_day(event_id) THEN
                    mv_id := old.item_id;
                    UPDATE pgpace.item i
                       SET payload = NULL, event_id = enqueue_fanout.event_id,
                           kind = enqueue_fanout.kind, expires_at = enqueue_fanout.expires_at,
                           traceparent = enqueue_fanout.traceparent,
                           tracestate = enqueue_fanout.tracestate
                     WHERE i.id = old.item_id;
                ELSE
                    -- Queued since an earlier day: the delivery moves to the event's day (a new
                    -- id; it was never claimed, so no receiver saw the old one), since retention
                    -- keeps a day's partition only while its own ids are queued, and the event's
                    -- day must outlive every delivery that reads its payload.
                    mv_id := d_id;
                    DELETE FROM pgpace.item i WHERE i.id = old.item_id;
                    INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, event_id,
                                             priority, run_at, expires_at, traceparent, tracestate,
                                             order_key)
                    VALUES (d_id, ep.id, nullif(old.carrier, ''), kind, NULL, event_id,
                            old.priority, coalesce(run_at, now()), expires_at, traceparent,
                            tracestate, old.order_key);
                END IF;
                due := greatest(old.next_action_at, run_at);
                deadline := least(expires_at, greatest(due, now()) + ep.max_age);
                DELETE FROM pgpace.queue q WHERE q.item_id = old.item_id;
                IF coalesce(deadline <= greatest(due, now()), false) THEN
                    INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
                    VALUES (mv_id, ep.id, nullif(old.carrier, ''), old.attempt, 'expired');
                    n_expired := n_expired + 1;
                ELSE
                    INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                              attempt, max_attempts, last_error, expires_at,
                                              supersede_key, order_key)
                    VALUES (mv_id, ep.id, old.carrier, old.priority, due, old.attempt,
                            old.max_attempts, old.last_error, deadline, old.supersede_key,
                            old.order_key);
                    PERFORM pgpace.wake_leader(ep.id, old.carrier);
                END IF;
                moved := true;
                result := 'superseded';
                EXIT;
            END IF;
            INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                      max_attempts, expires_at, supersede_key, order_key)
            VALUES (d_id, ep.id, coalesce(carrier, ''), priority::smallint,
                    coalesce(run_at, now()), ep.max_attempts, deadline, supersede_key, order_key)
            -- No conflict target: here (use_variable) its column supersede_key would be read as
            -- the parameter, and match no index. The queue's one other unique index is its
            -- primary key, which d_id, a new id, cannot conflict on: only queue_supersede can.
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                queued := true;
                EXIT;
            END IF;
            tries := tries + 1;
            IF tries >= 100 THEN
                RAISE EXCEPTION 'pgpace.enqueue: supersede_key % changed hands 100 times during this call',
                                quote_literal(supersede_key)
                    USING ERRCODE = 'serialization_failure', HINT = 'retry the transaction';
            END IF;
        END LOOP;
        CONTINUE WHEN moved;
        INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, event_id, priority,
                                 run_at, expires_at, traceparent, tracestate, order_key)
        VALUES (d_id, ep.id, carrier, kind, NULL, event_id, priority, coalesce(run_at, now()),
                expires_at, traceparent, tracestate, order_key);
        IF late THEN
            INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
            VALUES (d_id, ep.id, carrier, 0, 'expired');
            n_expired := n_expired + 1;
            CONTINUE;
        END IF;
        IF NOT queued THEN
            INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                      max_attempts, expires_at, order_key)
            VALUES (d_id, ep.id, coalesce(carrier, ''), priority::smallint, coalesce(run_at, now()),
                    ep.max_attempts, deadline, order_key);
        END IF;
        PERFORM pgpace.wake_leader(ep.id, coalesce(carrier, ''));
    END LOOP;
    -- The event itself: the payload, once.
    INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, idempotency_key, priority,
                             run_at, expires_at, traceparent, tracestate, fanout, order_key)
    VALUES (event_id, cust_id, carrier, kind, payload, idempotency_key, priority,
            coalesce(run_at, now()), expires_at, traceparent, tracestate, n, order_key);
    expired := n > 0 AND n_expired = n;
    deliveries := n;
END
$$;

-- An endpoint's row id, locked as asked ('share': KEY SHARE, 'update': FOR UPDATE), from its
-- customer's name and its own; P0002 naming which is unknown. 'default' is the customer's own
-- receiver, when it has a webhook URL.
CREATE OR REPLACE FUNCTION pgpace.endpoint_row(customer text, endpoint text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cust_id bigint;
    ep_id   bigint;
BEGIN
    SELECT c.id INTO cust_id FROM pgpace.customer c
     WHERE c.name = endpoint_row.customer AND c.parent_id IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %', coalesce(quote_literal(left(endpoint_row.customer, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    IF endpoint_row.endpoint = 'default' THEN
        SELECT c.id INTO ep_id FROM pgpace.customer c
         WHERE c.id = cust_id AND c.webhook_url IS NOT NULL;
    ELSE
        SELECT c.id INTO ep_id FROM pgpace.customer c
         WHERE c.parent_id = cust_id AND c.endpoint_name = endpoint_row.endpoint;
    END IF;
    IF ep_id IS NULL THEN
        RAISE EXCEPTION 'customer % has no endpoint %', quote_literal(endpoint_row.customer),
                        coalesce(quote_literal(left(endpoint_row.endpoint, 140)), 'NULL')
            USING ERRCODE = 'no_data_found',
                  HINT = 'pgpace endpoint list ' || endpoint_row.customer || ' shows its endpoints';
    END IF;
    RETURN ep_id;
END
$$;

-- Checks what an endpoint's subscription and filter may be, naming the field (SQLSTATE 22023).
CREATE OR REPLACE FUNCTION pgpace.check_endpoint_routing(event_types text[], payload_filter jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    why text := pgpace.event_types_error(event_types);
BEGIN
    IF why IS NOT NULL THEN
        RAISE EXCEPTION '%', why USING ERRCODE = 'invalid_parameter_value',
              HINT = 'patterns are event kinds (invoice.paid) or prefixes ending in * (order.*)';
    END IF;
    IF payload_filter IS NOT NULL AND jsonb_typeof(payload_filter) <> 'object' THEN
        RAISE EXCEPTION 'filter must be a JSON object, got a JSON %', jsonb_typeof(payload_filter)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a payload matches when it contains the object ({"region": "eu"})';
    END IF;
END
$$;

-- Adds an endpoint to a customer: its receiver (url, rate: the receiver's limit, mode, burst,
-- signing secrets: a new one when NULL), its subscription (NULL or '{}': every kind) and payload
-- filter. Refused, naming the field: an unknown customer (P0002), a name that is taken or not a
-- valid name ('default' is the customer's own receiver), an invalid pattern or filter (22023),
-- more endpoints than the max_endpoints_per_customer setting (54000). The URL's shape is checked
-- by the table; whether its address may be reached is checked by `pgpace endpoint add` and again
-- by the dispatcher on every request (SSRF rules). Returns the endpoint's row id.
-- limits (0019): its COUNT/PERIOD windows (pgpace.customer_limits_arg: normalised, a bad one
-- refused naming the field and the window); with windows a spaced or batch endpoint needs no
-- rate (its pace is its shortest window's). ratelimit_headers: follow the limit the receiver
-- announces (NULL: on).
--
-- Before `limits` and `ratelimit_headers`: the ten-argument form is dropped once, in this file's
-- transaction.
DO $$
BEGIN
    IF to_regprocedure('pgpace.endpoint_add(text, text, text, double precision, text, integer, '
                       'text[], text[], jsonb, integer)') IS NOT NULL THEN
        DROP FUNCTION pgpace.endpoint_add(text, text, text, double precision, text, integer,
                                          text[], text[], jsonb, integer);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION pgpace.endpoint_add(
    customer        text,
    endpoint        text,
    webhook_url     text,
    rate_per_minute double precision,
    mode            text DEFAULT NULL,
    burst           integer DEFAULT NULL,
    signing_secrets text[] DEFAULT NULL,
    event_types     text[] DEFAULT NULL,
    payload_filter  jsonb DEFAULT NULL,
    max_attempts    integer DEFAULT NULL,
    limits          text[] DEFAULT NULL,
    ratelimit_headers boolean DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    cust_id  bigint;
    n        bigint;
    cap      bigint;
    new_id   bigint;
    windows  text[] := coalesce(pgpace.customer_limits_arg(limits), '{}');
BEGIN
    -- FOR UPDATE: endpoints of one customer are added one at a time, so the cap holds.
    SELECT c.id INTO cust_id FROM pgpace.customer c
     WHERE c.name = endpoint_add.customer AND c.parent_id IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %', coalesce(quote_literal(left(endpoint_add.customer, 140)), 'NULL')
            USING ERRCODE = 'no_data_found',
                  HINT = 'create it first: pgpace customer set <name> [--rate N]';
    END IF;
    IF endpoint IS NULL OR NOT pgpace.valid_name(endpoint) OR endpoint = 'default' THEN
        RAISE EXCEPTION 'endpoint: invalid endpoint name %', coalesce(quote_literal(left(endpoint, 140)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'names are 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit; default is the customer''s own receiver';
    END IF;
    IF webhook_url IS NULL THEN
        RAISE EXCEPTION 'url: an endpoint needs a webhook URL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF rate_per_minute IS NULL AND cardinality(windows) = 0 THEN
        RAISE EXCEPTION 'rate: an endpoint needs a rate (its receiver''s limit, per minute) or limits'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM pgpace.check_receiver_pace(customer || '/' || endpoint, coalesce(mode, 'spaced'),
                                       rate_per_minute, webhook_url, windows);
    PERFORM pgpace.check_signing_secrets(signing_secrets);
    PERFORM pgpace.check_endpoint_routing(event_types, payload_filter);
    IF EXISTS (SELECT 1 FROM pgpace.customer e WHERE e.parent_id = cust_id AND e.endpoint_name = endpoint) THEN
        RAISE EXCEPTION 'endpoint: customer % already has an endpoint %', quote_literal(customer),
                        quote_literal(endpoint)
            USING ERRCODE = 'unique_violation',
                  HINT = 'change it with pgpace endpoint set';
    END IF;
    SELECT s.value::bigint INTO cap FROM pgpace.setting s WHERE s.name = 'max_endpoints_per_customer';
    SELECT count(*) INTO n FROM pgpace.customer e WHERE e.parent_id = cust_id;
    IF n >= coalesce(cap, 100) THEN
        RAISE EXCEPTION 'endpoint: customer % has % endpoints, the most allowed', quote_literal(customer), n
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'the limit is the max_endpoints_per_customer row of pgpace.setting (pgpace setting set)';
    END IF;
    INSERT INTO pgpace.customer (name, parent_id, endpoint_name, mode, rate_per_minute, burst,
                                 webhook_url, signing_secrets, max_attempts, event_types,
                                 payload_filter, limits, ratelimit_headers)
    VALUES (customer || '/' || endpoint, cust_id, endpoint, coalesce(mode, 'spaced'),
            rate_per_minute, coalesce(burst, 1), webhook_url,
            coalesce(signing_secrets, ARRAY[pgpace.new_signing_secret()]),
            coalesce(max_attempts, 12), nullif(event_types, '{}'), payload_filter, windows,
            coalesce(ratelimit_headers, true))
    RETURNING id INTO new_id;
    RETURN new_id;
END
$$;

-- Changes an endpoint's subscription and payload filter: NULL leaves one as it is; '{}' (events)
-- subscribes to every kind, and clear_filter removes the filter. Its receiver settings are the
-- customer_set* calls with the endpoint's full name, "<customer>/<endpoint>" (`pgpace endpoint
-- set` does that). Unknown endpoint: P0002.
CREATE OR REPLACE FUNCTION pgpace.endpoint_set_routing(customer text, endpoint text,
                                                       event_types text[] DEFAULT NULL,
                                                       payload_filter jsonb DEFAULT NULL,
                                                       clear_filter boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ep_id bigint := pgpace.endpoint_row(customer, endpoint);
BEGIN
    PERFORM pgpace.check_endpoint_routing(event_types, payload_filter);
    UPDATE pgpace.customer c
       SET event_types = CASE WHEN event_types IS NULL THEN c.event_types
                              ELSE nullif(event_types, '{}') END,
           payload_filter = CASE WHEN clear_filter THEN NULL
                                 ELSE coalesce(payload_filter, c.payload_filter) END,
           updated_at = now()
     WHERE c.id = ep_id;
END
$$;

-- Deletes an endpoint. Refused while it has deliveries queued (SQLSTATE 2BP01, nothing changed)
-- unless drop_queued: they then become dead letters with last_error 'endpoint_deleted' (kept
-- under the customer, listed by `pgpace dlq list`, never silently lost), and its own dead
-- letters, attempts and idempotency state stay for the record. The customer's own receiver
-- ('default') is removed by clearing its URL the same way. Returns the deliveries dropped.
CREATE OR REPLACE FUNCTION pgpace.endpoint_delete(customer text, endpoint text,
                                                  drop_queued boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ep_id   bigint;
    cust_id bigint;
    pending bigint;
BEGIN
    ep_id := pgpace.endpoint_row(customer, endpoint);
    -- FOR UPDATE waits for enqueuers holding KEY SHARE on the row, so none can slip in after.
    SELECT c.parent_id INTO cust_id FROM pgpace.customer c WHERE c.id = ep_id FOR UPDATE;
    SELECT count(*) INTO pending FROM pgpace.queue q WHERE q.customer_id = ep_id;
    IF pending > 0 AND NOT drop_queued THEN
        RAISE EXCEPTION 'endpoint %/% has % delivery(ies) queued; nothing was deleted',
                        customer, endpoint, pending
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'wait for them to drain, or delete with --drop-queued to make them dead letters (endpoint_deleted)';
    END IF;
    -- Queued deliveries become dead letters of the customer (the endpoint's row goes).
    INSERT INTO pgpace.dead_letter (item_id, customer_id, carrier, attempts, last_error)
    SELECT q.item_id, coalesce(cust_id, ep_id), nullif(q.carrier, ''), q.attempt, 'endpoint_deleted'
      FROM pgpace.queue q WHERE q.customer_id = ep_id;
    DELETE FROM pgpace.queue q WHERE q.customer_id = ep_id;
    IF cust_id IS NULL THEN
        -- The customer's own receiver: the customer stays, without a URL; its rate stays as
        -- the limit over its other endpoints.
        UPDATE pgpace.customer c
           SET webhook_url = NULL, signing_secrets = NULL, updated_at = now()
         WHERE c.id = ep_id;
        RETURN pending;
    END IF;
    -- What refers to the row by id and must not keep it: its dead letters and items move to the
    -- customer (their history stays listed there), its attempts stay as they are (by id).
    UPDATE pgpace.dead_letter d SET customer_id = cust_id WHERE d.customer_id = ep_id;
    UPDATE pgpace.item i SET customer_id = cust_id WHERE i.customer_id = ep_id;
    DELETE FROM pgpace.customer c WHERE c.id = ep_id;
    RETURN pending;
END
$$;

REVOKE EXECUTE ON FUNCTION
    pgpace.event_types_error(text[]),
    pgpace.subscribed(text[], text),
    pgpace.fans_out(bigint),
    pgpace.enqueue_fanout(bigint, bigint, jsonb, text, text, timestamptz, text, integer,
                          timestamptz, text, text, text, text),
    pgpace.endpoint_row(text, text),
    pgpace.check_endpoint_routing(text[], jsonb),
    pgpace.endpoint_add(text, text, text, double precision, text, integer, text[], text[], jsonb,
                        integer, text[], boolean),
    pgpace.endpoint_set_routing(text, text, text[], jsonb, boolean),
    pgpace.endpoint_delete(text, text, boolean)
    FROM PUBLIC;
