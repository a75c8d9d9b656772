-- 22_api.sql - the management API under /v1 (issue 33; README "Management API", the contract in
-- src/openapi.json). The admin listener checks the token and its scope, splits the path into
-- its decoded segments and the query string into an object of strings, and calls
-- pgpace.api_call once per request: one statement, so one transaction, in which the change,
-- its audit event (pgpace.event kind api_write) and its Idempotency-Key record commit together
-- or not at all.
--
-- Every change goes through the functions the CLI calls (customer_set, endpoint_add,
-- host_set, dlq_replay, recover, ...), so the rules and their messages are the same. Errors are
-- RFC 9457 problem documents: {type, title, status, detail, field}; `field` names the member of
-- the body or the query parameter at fault when there is one.
--
-- Representations never hold a secret: signing secrets and receiver credentials are counted or
-- named, and a generated signing secret is shown once, in the answer that made it.
-- ETags are the row version (its xmin), so any change, by the API or not, changes them; an
-- update or delete needs If-Match (428 without, 412 when it no longer matches; "*" is an
-- explicit "whatever it is now").
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Raises a problem: SQLSTATE PA<status> with the field in COLUMN_NAME. api_call turns it into
-- the answer; nothing the handler did before stays.
CREATE OR REPLACE FUNCTION pgpace.api_fail(status integer, detail text, field text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    RAISE EXCEPTION USING MESSAGE = detail, ERRCODE = 'PA' || status::text,
                          COLUMN = coalesce(field, '');
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_problem(status integer, detail text, field text DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN jsonb_strip_nulls(jsonb_build_object(
    'type', 'urn:pgpace:problem:' || CASE status
        WHEN 400 THEN 'invalid-request' WHEN 401 THEN 'unauthorized' WHEN 403 THEN 'forbidden'
        WHEN 404 THEN 'not-found' WHEN 405 THEN 'method-not-allowed' WHEN 409 THEN 'conflict'
        WHEN 412 THEN 'precondition-failed' WHEN 422 THEN 'idempotency-key-reused'
        WHEN 428 THEN 'precondition-required' ELSE 'error' END,
    'title', CASE status
        WHEN 400 THEN 'Bad Request' WHEN 401 THEN 'Unauthorized' WHEN 403 THEN 'Forbidden'
        WHEN 404 THEN 'Not Found' WHEN 405 THEN 'Method Not Allowed' WHEN 409 THEN 'Conflict'
        WHEN 412 THEN 'Precondition Failed' WHEN 422 THEN 'Unprocessable Content'
        WHEN 428 THEN 'Precondition Required' ELSE 'Error' END,
    'status', status, 'detail', detail, 'field', nullif(field, '')));

-- ---- reading a body --------------------------------------------------------------------------
-- Each getter returns NULL for an absent member or a JSON null, and refuses a wrong type naming
-- the member.

-- The body must be an object whose members are all in `allowed`.
CREATE OR REPLACE FUNCTION pgpace.api_members(doc jsonb, allowed text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    k text;
BEGIN
    IF doc IS NULL OR jsonb_typeof(doc) <> 'object' THEN
        PERFORM pgpace.api_fail(400, 'the body must be a JSON object');
    END IF;
    SELECT x INTO k FROM jsonb_object_keys(doc) x WHERE x <> ALL (allowed) ORDER BY x LIMIT 1;
    IF FOUND THEN
        PERFORM pgpace.api_fail(400, format('%s: unknown member (known: %s)', left(k, 80),
                                            array_to_string(allowed, ', ')), left(k, 80));
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_text(doc jsonb, key text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF doc IS NULL OR jsonb_typeof(doc -> key) IS NULL OR jsonb_typeof(doc -> key) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(doc -> key) <> 'string' THEN
        PERFORM pgpace.api_fail(400, key || ': expected a string', key);
    END IF;
    RETURN doc ->> key;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_number(doc jsonb, key text)
RETURNS double precision
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF doc IS NULL OR jsonb_typeof(doc -> key) IS NULL OR jsonb_typeof(doc -> key) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(doc -> key) <> 'number' THEN
        PERFORM pgpace.api_fail(400, key || ': expected a number', key);
    END IF;
    BEGIN
        RETURN (doc ->> key)::double precision;
    EXCEPTION WHEN numeric_value_out_of_range OR invalid_text_representation THEN
        PERFORM pgpace.api_fail(400, key || ': number out of range', key);
    END;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_int(doc jsonb, key text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n numeric;
BEGIN
    IF doc IS NULL OR jsonb_typeof(doc -> key) IS NULL OR jsonb_typeof(doc -> key) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(doc -> key) <> 'number' THEN
        PERFORM pgpace.api_fail(400, key || ': expected an integer', key);
    END IF;
    n := (doc ->> key)::numeric;
    IF n <> trunc(n) OR n < -2147483648 OR n > 2147483647 THEN
        PERFORM pgpace.api_fail(400, key || ': expected an integer', key);
    END IF;
    RETURN n::integer;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_bool(doc jsonb, key text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF doc IS NULL OR jsonb_typeof(doc -> key) IS NULL OR jsonb_typeof(doc -> key) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(doc -> key) <> 'boolean' THEN
        PERFORM pgpace.api_fail(400, key || ': expected true or false', key);
    END IF;
    RETURN (doc -> key)::boolean;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_texts(doc jsonb, key text)
RETURNS text[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF doc IS NULL OR jsonb_typeof(doc -> key) IS NULL OR jsonb_typeof(doc -> key) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(doc -> key) <> 'array'
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(doc -> key) e
                   WHERE jsonb_typeof(e) <> 'string') THEN
        PERFORM pgpace.api_fail(400, key || ': expected an array of strings', key);
    END IF;
    RETURN ARRAY(SELECT jsonb_array_elements_text(doc -> key));
END
$$;

-- Whether the member is present with a JSON null: "clear it" or "back to the default".
CREATE OR REPLACE FUNCTION pgpace.api_null(doc jsonb, key text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN coalesce(jsonb_typeof(doc -> key) = 'null', false);

-- A query parameter as a time (RFC 3339), an integer in a range, or a boolean.
CREATE OR REPLACE FUNCTION pgpace.api_query_time(query jsonb, key text)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF query ->> key IS NULL THEN
        RETURN NULL;
    END IF;
    IF query ->> key !~ '^\d{4}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d(\.\d+)?)?)?(Z|[+-]\d\d(:?\d\d)?)?$' THEN
        PERFORM pgpace.api_fail(400, key || ': expected a time such as 2026-01-31T12:00:00Z', key);
    END IF;
    RETURN (query ->> key)::timestamptz;
EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
    PERFORM pgpace.api_fail(400, key || ': expected a time such as 2026-01-31T12:00:00Z', key);
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_query_int(query jsonb, key text, lo integer, hi integer,
                                                deflt integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF query ->> key IS NULL THEN
        RETURN deflt;
    END IF;
    IF query ->> key !~ '^[0-9]{1,9}$' OR (query ->> key)::integer NOT BETWEEN lo AND hi THEN
        PERFORM pgpace.api_fail(400, format('%s: expected an integer from %s to %s', key, lo, hi),
                                key);
    END IF;
    RETURN (query ->> key)::integer;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_query_bool(query jsonb, key text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF query ->> key IS NULL THEN
        RETURN false;
    END IF;
    IF query ->> key NOT IN ('true', 'false') THEN
        PERFORM pgpace.api_fail(400, key || ': expected true or false', key);
    END IF;
    RETURN (query ->> key)::boolean;
END
$$;

-- Query parameters: only those a route knows.
CREATE OR REPLACE FUNCTION pgpace.api_params(query jsonb, allowed text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    k text;
BEGIN
    SELECT x INTO k FROM jsonb_object_keys(coalesce(query, '{}')) x
     WHERE x <> ALL (allowed) ORDER BY x LIMIT 1;
    IF FOUND THEN
        PERFORM pgpace.api_fail(400, format('%s: unknown query parameter (known: %s)', left(k, 80),
                                            coalesce(nullif(array_to_string(allowed, ', '), ''),
                                                     'none')), left(k, 80));
    END IF;
END
$$;

-- ---- cursors ---------------------------------------------------------------------------------
-- Opaque to clients: base64url of "<kind>:<position>". A cursor of another list is refused.
CREATE OR REPLACE FUNCTION pgpace.api_cursor(kind text, pos text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN rtrim(translate(encode(convert_to(kind || ':' || pos, 'UTF8'), 'base64'), E'+/\n', '-_'),
             '=');

CREATE OR REPLACE FUNCTION pgpace.api_cursor_pos(query jsonb, kind text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c   text := query ->> 'cursor';
    raw text;
BEGIN
    IF c IS NULL THEN
        RETURN NULL;
    END IF;
    BEGIN
        IF length(c) > 400 OR c !~ '^[A-Za-z0-9_-]+$' THEN
            RAISE invalid_parameter_value;
        END IF;
        raw := convert_from(decode(translate(c, '-_', '+/')
                                   || repeat('=', (4 - length(c) % 4) % 4), 'base64'), 'UTF8');
    EXCEPTION WHEN OTHERS THEN
        raw := NULL;
    END;
    IF raw IS NULL OR NOT starts_with(raw, kind || ':') THEN
        PERFORM pgpace.api_fail(400, 'cursor: not a cursor of this list (use next_cursor as given)',
                                'cursor');
    END IF;
    RETURN substr(raw, length(kind) + 2);
END
$$;

-- ---- representations -------------------------------------------------------------------------
-- An object without its members that are null (its top level only: jsonb_strip_nulls would
-- reach into a payload or an attempt too).
CREATE OR REPLACE FUNCTION pgpace.api_drop_nulls(doc jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}')
          FROM jsonb_each(doc) e WHERE jsonb_typeof(e.value) <> 'null');

CREATE OR REPLACE FUNCTION pgpace.api_etag(id bigint, version xid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN '"' || left(md5(id::text || ':' || version::text), 20) || '"';

CREATE OR REPLACE FUNCTION pgpace.api_time(t timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');

-- A receiver's settings (a customer's own, or an endpoint's), without its secrets.
CREATE OR REPLACE FUNCTION pgpace.api_receiver_doc(c pgpace.customer)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object(
        'webhook_url', c.webhook_url, 'mode', c.mode, 'rate_per_minute', c.rate_per_minute,
        'burst', c.burst, 'limits', to_jsonb(c.limits), 'ratelimit_headers', c.ratelimit_headers,
        'max_in_flight', c.max_in_flight, 'max_attempts', c.max_attempts, 'paused', c.paused,
        'disabled_at', pgpace.api_time(c.disabled_at), 'disabled_reason', c.disabled_reason,
        'connect_timeout_ms', c.connect_timeout_ms, 'request_timeout_ms', c.request_timeout_ms,
        'throttle_decrease', c.throttle_decrease, 'throttle_increase', c.throttle_increase,
        'throttle_floor', c.throttle_floor,
        'max_age_seconds', extract(epoch FROM c.max_age)::double precision,
        'order_on_dead', c.order_on_dead,
        'header_names', to_jsonb(ARRAY(SELECT split_part(h, ':', 1) FROM unnest(c.extra_headers) h)),
        'auth_scheme', c.auth_scheme,
        'signing_secrets', coalesce(cardinality(c.signing_secrets), 0),
        'created_at', pgpace.api_time(c.created_at), 'updated_at', pgpace.api_time(c.updated_at));
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_customer_doc(c pgpace.customer)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object('name', c.name,
                              'endpoints', (SELECT count(*) FROM pgpace.customer e
                                             WHERE e.parent_id = c.id)
                                           + (c.webhook_url IS NOT NULL)::integer)
           || pgpace.api_receiver_doc(c);
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_endpoint_doc(e pgpace.customer)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st record;
BEGIN
    -- Its queue and pace as pgpace.customer_stats has them, read once: counting a backlog is
    -- the costly part (about 0.3 ms per 1,000 queued items).
    SELECT s.due, s.in_flight, s.delayed, s.dead, s.effective_rate_per_minute INTO st
      FROM pgpace.customer_stats s WHERE s.customer = e.name;
    RETURN jsonb_build_object(
        'customer', CASE WHEN e.parent_id IS NULL THEN e.name ELSE split_part(e.name, '/', 1) END,
        'name', coalesce(e.endpoint_name, 'default'),
        'event_types', to_jsonb(coalesce(e.event_types, '{}')),
        'payload_filter', e.payload_filter,
        'state', CASE WHEN e.disabled_at IS NOT NULL THEN 'disabled'
                      WHEN e.paused THEN 'paused' ELSE 'active' END,
        'queued', coalesce(st.due + st.in_flight + st.delayed, 0),
        'throttle', jsonb_build_object(
            'in_flight', coalesce(st.in_flight, 0), 'due', coalesce(st.due, 0),
            'dead', coalesce(st.dead, 0),
            'effective_rate_per_minute', round(st.effective_rate_per_minute::numeric, 6)::float8),
        'health', coalesce((SELECT jsonb_build_object(
                                'breaker', b.state, 'failures', b.consecutive_failures,
                                'open_until', pgpace.api_time(b.open_until))
                              FROM pgpace.breaker b WHERE b.customer_id = e.id),
                           jsonb_build_object('breaker', 'closed', 'failures', 0, 'open_until', NULL))
                  || jsonb_build_object('failing_since',
                                        (SELECT pgpace.api_time(h.failing_since)
                                           FROM pgpace.customer_health h
                                          WHERE h.customer_id = e.id)))
           || pgpace.api_receiver_doc(e);
END
$$;

-- What became of one delivery (an item that is sent: a customer's own item, or an endpoint's
-- delivery of an event). The representations that read partitioned tables are PL/pgSQL, whose
-- statements' plans a session keeps: a SQL function's body is planned again at every call, and
-- planning over the partitions cost about 10 ms a row of a list.
CREATE OR REPLACE FUNCTION pgpace.api_delivery_status(item bigint)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce(
        (SELECT CASE WHEN q.claim_token IS NOT NULL THEN 'in_flight'
                     WHEN q.attempt > 0 THEN 'retrying' ELSE 'queued' END
           FROM pgpace.queue q WHERE q.item_id = item),
        (SELECT 'dead' FROM pgpace.dead_letter d WHERE d.item_id = item LIMIT 1),
        (SELECT CASE a.outcome WHEN 'success' THEN 'delivered' WHEN 'expired' THEN 'expired' END
           FROM pgpace.delivery_attempt a
          WHERE a.item_id = item AND a.outcome IN ('success', 'expired')
          ORDER BY a.started_at DESC LIMIT 1),
        'dropped');
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_attempts(item bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce((SELECT jsonb_agg(jsonb_build_object(
                                'attempt', a.attempt, 'started_at', pgpace.api_time(a.started_at),
                                'duration_ms', a.duration_ms, 'http_status', a.http_status,
                                'outcome', a.outcome, 'error_class', a.error_class,
                                'response_excerpt', a.response_excerpt)
                                ORDER BY a.started_at, a.attempt)
                       FROM pgpace.delivery_attempt a WHERE a.item_id = item), '[]');
END
$$;

-- An event's or an item's summary; with_detail adds the deliveries and their attempts, and the
-- payload when with_payload.
CREATE OR REPLACE FUNCTION pgpace.api_event_doc(i pgpace.item, with_detail boolean,
                                                with_payload boolean)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    owner    pgpace.customer;
    dels     jsonb;
    statuses text[];
    status   text;
BEGIN
    SELECT c.* INTO owner FROM pgpace.customer c WHERE c.id = i.customer_id;
    -- A list needs only the deliveries' statuses; the detail their representations.
    IF i.fanout IS NULL THEN
        statuses := ARRAY[pgpace.api_delivery_status(i.id)];
        IF with_detail THEN
            dels := jsonb_build_array(pgpace.api_delivery_doc(i, true));
        END IF;
    ELSIF with_detail THEN
        SELECT coalesce(jsonb_agg(pgpace.api_delivery_doc(d, true) ORDER BY d.id), '[]')
          INTO dels FROM pgpace.item d WHERE d.event_id = i.id;
        SELECT coalesce(array_agg(x ->> 'status'), '{}') INTO statuses
          FROM jsonb_array_elements(dels) x;
    ELSE
        SELECT coalesce(array_agg(pgpace.api_delivery_status(d.id)), '{}') INTO statuses
          FROM pgpace.item d WHERE d.event_id = i.id;
    END IF;
    status := CASE WHEN i.fanout IS NULL THEN statuses[1]
                   WHEN i.fanout = 0 THEN 'unmatched'
                   WHEN statuses && ARRAY['queued', 'retrying', 'in_flight'] THEN 'pending'
                   WHEN 'dead' = ANY (statuses) THEN 'failed'
                   WHEN statuses <@ ARRAY['delivered'] THEN 'delivered'
                   ELSE 'done' END;
    RETURN pgpace.api_drop_nulls(jsonb_build_object(
        'id', i.id,
        'customer', CASE WHEN owner.parent_id IS NULL THEN owner.name
                         ELSE split_part(owner.name, '/', 1) END,
        'kind', i.kind, 'status', status, 'order_key', i.order_key, 'carrier', i.carrier,
        'priority', i.priority, 'created_at', pgpace.api_time(i.created_at),
        'run_at', pgpace.api_time(i.run_at), 'expires_at', pgpace.api_time(i.expires_at),
        'deliveries', dels,
        'delivery_count', cardinality(statuses),
        'payload', CASE WHEN with_payload THEN i.payload END))
        || jsonb_build_object('status', status);
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_delivery_doc(d pgpace.item, with_attempts boolean)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT pgpace.api_drop_nulls(jsonb_build_object(
                'id', d.id, 'event_id', coalesce(d.event_id, d.id),
                'customer', CASE WHEN c.parent_id IS NULL THEN c.name
                                 ELSE split_part(c.name, '/', 1) END,
                'endpoint', CASE WHEN c.parent_id IS NOT NULL THEN c.endpoint_name
                                 WHEN c.webhook_url IS NULL THEN '(deleted)' ELSE 'default' END,
                'kind', coalesce(d.kind, (SELECT e.kind FROM pgpace.item e WHERE e.id = d.event_id)),
                'order_key', d.order_key,
                'created_at', pgpace.api_time(d.created_at),
                'attempt_count', (SELECT count(*) FROM pgpace.delivery_attempt a
                                   WHERE a.item_id = d.id AND a.outcome <> 'released'),
                'attempts', CASE WHEN with_attempts THEN pgpace.api_attempts(d.id) END,
                'last_attempt', (SELECT jsonb_build_object(
                                     'at', pgpace.api_time(a.started_at), 'http_status', a.http_status,
                                     'outcome', a.outcome, 'error_class', a.error_class)
                                   FROM pgpace.delivery_attempt a WHERE a.item_id = d.id
                                  ORDER BY a.started_at DESC LIMIT 1)))
                   || jsonb_build_object('status', pgpace.api_delivery_status(d.id))
              FROM pgpace.customer c WHERE c.id = d.customer_id);
END
$$;

-- ---- lookups ---------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION pgpace.api_customer_row(name text, lock boolean DEFAULT false)
RETURNS pgpace.customer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    r pgpace.customer;
BEGIN
    IF lock THEN
        SELECT c.* INTO r FROM pgpace.customer c
         WHERE c.name = api_customer_row.name AND c.parent_id IS NULL FOR UPDATE;
    ELSE
        SELECT c.* INTO r FROM pgpace.customer c
         WHERE c.name = api_customer_row.name AND c.parent_id IS NULL;
    END IF;
    IF NOT FOUND THEN
        PERFORM pgpace.api_fail(404, format('unknown customer %s', quote_literal(left(name, 140))));
    END IF;
    RETURN r;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_endpoint_row(customer text, endpoint text,
                                                   lock boolean DEFAULT false)
RETURNS pgpace.customer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    cust pgpace.customer := pgpace.api_customer_row(customer);
    r    pgpace.customer;
BEGIN
    SELECT c.* INTO r FROM pgpace.customer c
     WHERE CASE WHEN endpoint = 'default' THEN c.id = cust.id AND c.webhook_url IS NOT NULL
                ELSE c.parent_id = cust.id AND c.endpoint_name = endpoint END;
    IF NOT FOUND THEN
        PERFORM pgpace.api_fail(404, format('customer %s has no endpoint %s',
                                            quote_literal(customer),
                                            quote_literal(left(endpoint, 140))));
    END IF;
    IF lock THEN
        PERFORM 1 FROM pgpace.customer c WHERE c.id = r.id FOR UPDATE;
    END IF;
    RETURN r;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_version(id bigint)
RETURNS xid
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT c.xmin FROM pgpace.customer c WHERE c.id = api_version.id);

-- If-Match against the row's ETag: 428 without one, 412 when it no longer matches.
CREATE OR REPLACE FUNCTION pgpace.api_check_match(if_match text, etag text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF if_match IS NULL THEN
        PERFORM pgpace.api_fail(428, 'If-Match: required for a change; send the ETag of the '
                                     'GET you based it on (or * to change whatever is there)',
                                'If-Match');
    END IF;
    IF trim(if_match) <> '*' AND NOT etag = ANY (ARRAY(
           SELECT trim(regexp_replace(x, '^\s*W/', '')) FROM unnest(string_to_array(if_match, ',')) x)) THEN
        PERFORM pgpace.api_fail(412, 'If-Match: the resource changed since that ETag; GET it '
                                     'again and re-apply the change', 'If-Match');
    END IF;
END
$$;

-- ---- receivers (customers and endpoints) -----------------------------------------------------
-- The receiver settings the body may carry, and how each is applied: through the same
-- functions as `pgpace customer set` / `pgpace endpoint set`. A JSON null clears a setting
-- that may be empty (max_in_flight, limits, max_age_seconds, headers, auth) or puts it back to
-- the configured default (timeouts, throttle_*).
CREATE OR REPLACE FUNCTION pgpace.api_receiver_members()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY['webhook_url', 'mode', 'rate_per_minute', 'burst', 'limits', 'ratelimit_headers',
             'max_in_flight', 'max_attempts', 'paused', 'connect_timeout_ms',
             'request_timeout_ms', 'throttle_decrease', 'throttle_increase', 'throttle_floor',
             'max_age_seconds', 'order_on_dead', 'headers', 'auth_scheme', 'auth_username',
             'auth_secret'];

CREATE OR REPLACE FUNCTION pgpace.api_receiver_apply(full_name text, doc jsonb)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    created boolean;
    age     double precision := pgpace.api_number(doc, 'max_age_seconds');
BEGIN
    IF age IS NOT NULL AND (age <= 0 OR age > 365 * 86400) THEN
        PERFORM pgpace.api_fail(400, 'max_age_seconds: expected more than 0 and at most 31536000 '
                                     '(365 days); null removes it', 'max_age_seconds');
    END IF;
    IF pgpace.api_null(doc, 'webhook_url') OR pgpace.api_null(doc, 'mode')
       OR pgpace.api_null(doc, 'burst') OR pgpace.api_null(doc, 'max_attempts')
       OR pgpace.api_null(doc, 'paused') OR pgpace.api_null(doc, 'order_on_dead')
       OR pgpace.api_null(doc, 'ratelimit_headers') THEN
        PERFORM pgpace.api_fail(400, (SELECT k || ': cannot be null' FROM unnest(ARRAY[
            'webhook_url', 'mode', 'burst', 'max_attempts', 'paused', 'order_on_dead',
            'ratelimit_headers']) k WHERE pgpace.api_null(doc, k) LIMIT 1),
            (SELECT k FROM unnest(ARRAY['webhook_url', 'mode', 'burst', 'max_attempts', 'paused',
                                        'order_on_dead', 'ratelimit_headers']) k
              WHERE pgpace.api_null(doc, k) LIMIT 1));
    END IF;
    IF pgpace.api_null(doc, 'rate_per_minute') THEN
        PERFORM pgpace.api_fail(400, 'rate_per_minute: cannot be null (limits state windows '
                                     'instead)', 'rate_per_minute');
    END IF;
    created := pgpace.customer_set(
        full_name, pgpace.api_text(doc, 'mode'), pgpace.api_number(doc, 'rate_per_minute'),
        pgpace.api_int(doc, 'burst'), pgpace.api_text(doc, 'webhook_url'), NULL,
        pgpace.api_int(doc, 'max_in_flight'), pgpace.api_int(doc, 'max_attempts'),
        pgpace.api_bool(doc, 'paused'), pgpace.api_null(doc, 'max_in_flight'),
        CASE WHEN pgpace.api_null(doc, 'limits') THEN '{}'::text[]
             ELSE pgpace.api_texts(doc, 'limits') END,
        pgpace.api_bool(doc, 'ratelimit_headers'));
    PERFORM pgpace.customer_set_timeouts(
        full_name,
        CASE WHEN pgpace.api_null(doc, 'connect_timeout_ms') THEN 0
             ELSE pgpace.api_int(doc, 'connect_timeout_ms') END,
        CASE WHEN pgpace.api_null(doc, 'request_timeout_ms') THEN 0
             ELSE pgpace.api_int(doc, 'request_timeout_ms') END);
    PERFORM pgpace.customer_set_throttle(
        full_name,
        CASE WHEN pgpace.api_null(doc, 'throttle_decrease') THEN 0
             ELSE pgpace.api_number(doc, 'throttle_decrease') END,
        CASE WHEN pgpace.api_null(doc, 'throttle_increase') THEN 0
             ELSE pgpace.api_number(doc, 'throttle_increase') END,
        CASE WHEN pgpace.api_null(doc, 'throttle_floor') THEN 0
             ELSE pgpace.api_number(doc, 'throttle_floor') END);
    PERFORM pgpace.customer_set_max_age(
        full_name, CASE WHEN pgpace.api_null(doc, 'max_age_seconds') THEN interval '0'
                        ELSE make_interval(secs => age) END);
    PERFORM pgpace.customer_set_headers(
        full_name, CASE WHEN pgpace.api_null(doc, 'headers') THEN '{}'::text[]
                        ELSE pgpace.api_texts(doc, 'headers') END);
    IF doc ? 'auth_scheme' OR doc ? 'auth_username' OR doc ? 'auth_secret' THEN
        PERFORM pgpace.customer_set_auth(full_name,
                                         coalesce(pgpace.api_text(doc, 'auth_scheme'), 'none'),
                                         pgpace.api_text(doc, 'auth_username'),
                                         pgpace.api_text(doc, 'auth_secret'));
    END IF;
    PERFORM pgpace.customer_set_order_on_dead(full_name, pgpace.api_text(doc, 'order_on_dead'));
    RETURN created;
END
$$;

-- A new signing secret first; the older ones keep signing (at most 4 in all) unless retired.
CREATE OR REPLACE FUNCTION pgpace.api_rotate_secret(row_id bigint, retire boolean)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fresh text := pgpace.new_signing_secret();
BEGIN
    UPDATE pgpace.customer c
       SET signing_secrets = CASE WHEN retire THEN ARRAY[fresh]
                                  ELSE ARRAY[fresh] || c.signing_secrets[1:3] END,
           updated_at = now()
     WHERE c.id = row_id AND c.webhook_url IS NOT NULL;
    IF NOT FOUND THEN
        PERFORM pgpace.api_fail(409, 'this customer has no receiver of its own to sign for (its '
                                     'endpoints have their own secrets)');
    END IF;
    RETURN fresh;
END
$$;

-- ---- lists -----------------------------------------------------------------------------------
-- Whether item i belongs in a list ('event': what producers enqueued, a customer's own items and
-- the events that fan out to its endpoints; 'delivery': what is sent, items of a receiver) with
-- these filters (NULL: any): below the cursor's id, created in [since, until) (an id carries its
-- UTC day, so only those days' partitions are read), of this kind (a delivery's is its event's).
CREATE OR REPLACE FUNCTION pgpace.api_item_wanted(i pgpace.item, list text, after bigint,
                                                  since timestamptz, until timestamptz, kind text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN list = 'event' THEN i.event_id IS NULL ELSE i.fanout IS NULL END
   AND (after IS NULL OR i.id < after)
   AND (since IS NULL OR i.created_at >= since)
   AND (until IS NULL OR i.created_at < until)
   AND (since IS NULL OR i.id >= pgpace.item_day_first_id((since AT TIME ZONE 'UTC')::date))
   AND (until IS NULL OR i.id < pgpace.item_day_first_id((until AT TIME ZONE 'UTC')::date + 1))
   AND (kind IS NULL OR coalesce(i.kind, (SELECT e.kind FROM pgpace.item e
                                           WHERE e.id = i.event_id)) = kind);

CREATE OR REPLACE FUNCTION pgpace.api_item_doc(i pgpace.item, list text)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN list = 'event' THEN pgpace.api_event_doc(i, false, false)
            ELSE pgpace.api_delivery_doc(i, false) END;

-- A list of items (api_item_wanted), newest first, of the receivers' rows rows_of (NULL: every
-- customer's), with the query's status, kind, since/until, limit and cursor. Every customer's
-- are read by the primary key; a customer's by item_customer, each of its rows cut at the page's
-- size and then merged: a page reads about a page of items, however many others have. Custom
-- plans throughout, so that the filters left NULL drop out of them.
CREATE OR REPLACE FUNCTION pgpace.api_item_list(list text, rows_of bigint[], query jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    lim      integer := pgpace.api_query_int(query, 'limit', 1, 500, 50);
    after    bigint;
    since    timestamptz := pgpace.api_query_time(query, 'since');
    until    timestamptz := pgpace.api_query_time(query, 'until');
    want     text := query ->> 'status';
    kind     text := query ->> 'kind';
    pos      text := pgpace.api_cursor_pos(query, list);
    statuses text[] := ARRAY['queued', 'retrying', 'in_flight', 'dead', 'delivered', 'expired',
                             'dropped']
                       || CASE WHEN list = 'event'
                               THEN ARRAY['pending', 'failed', 'unmatched', 'done'] END;
    got      jsonb;
    n        integer;
BEGIN
    IF want IS NOT NULL AND want <> ALL (statuses) THEN
        PERFORM pgpace.api_fail(400, 'status: expected one of ' || array_to_string(statuses, ', '),
                                'status');
    END IF;
    IF pos IS NOT NULL THEN
        IF pos !~ '^[0-9]{1,19}$' THEN
            PERFORM pgpace.api_fail(400, 'cursor: not a cursor of this list', 'cursor');
        END IF;
        after := pos::bigint;
    END IF;
    IF rows_of IS NULL THEN
        SELECT jsonb_agg(jsonb_build_object('id', x.id, 'doc', x.doc) ORDER BY x.id DESC) INTO got
          FROM (SELECT y.id, y.doc
                  FROM (SELECT i.id, pgpace.api_item_doc(i, list) AS doc FROM pgpace.item i
                         WHERE pgpace.api_item_wanted(i, list, after, since, until, kind)
                         ORDER BY i.id DESC) y
                 WHERE want IS NULL OR y.doc ->> 'status' = want
                 LIMIT lim + 1) x;
    ELSE
        SELECT jsonb_agg(jsonb_build_object('id', x.id, 'doc', x.doc) ORDER BY x.id DESC) INTO got
          FROM (SELECT f.id, f.doc
                  FROM unnest(rows_of) r(cid)
                  CROSS JOIN LATERAL (
                      SELECT y.id, y.doc
                        FROM (SELECT i.id, pgpace.api_item_doc(i, list) AS doc FROM pgpace.item i
                               WHERE i.customer_id = r.cid
                                 AND pgpace.api_item_wanted(i, list, after, since, until, kind)
                               ORDER BY i.id DESC) y
                       WHERE want IS NULL OR y.doc ->> 'status' = want
                       LIMIT lim + 1) f
                 ORDER BY f.id DESC
                 LIMIT lim + 1) x;
    END IF;
    n := coalesce(jsonb_array_length(got), 0);
    RETURN jsonb_build_object(
        'items', coalesce((SELECT jsonb_agg(e -> 'doc' ORDER BY o)
                             FROM jsonb_array_elements(got) WITH ORDINALITY a(e, o)
                            WHERE o <= lim), '[]'),
        'next_cursor', CASE WHEN n > lim
                            THEN pgpace.api_cursor(list, got -> (lim - 1) ->> 'id') END);
END
$$;

-- The receivers' rows of a customer (its own and its endpoints'), or of one endpoint.
CREATE OR REPLACE FUNCTION pgpace.api_rows_of(customer text, endpoint text)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    cust pgpace.customer;
BEGIN
    IF customer IS NULL THEN
        IF endpoint IS NOT NULL THEN
            PERFORM pgpace.api_fail(400, 'endpoint: give the customer too', 'endpoint');
        END IF;
        RETURN NULL;
    END IF;
    IF endpoint IS NOT NULL THEN
        RETURN ARRAY[(pgpace.api_endpoint_row(customer, endpoint)).id];
    END IF;
    cust := pgpace.api_customer_row(customer);
    RETURN ARRAY(SELECT c.id FROM pgpace.customer c WHERE c.id = cust.id OR c.parent_id = cust.id);
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_dead_letter_list(rows_of bigint[], query jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    lim    integer := pgpace.api_query_int(query, 'limit', 1, 500, 50);
    since  timestamptz := pgpace.api_query_time(query, 'since');
    until  timestamptz := pgpace.api_query_time(query, 'until');
    carrier text := query ->> 'carrier';
    err    text := query ->> 'error';
    pos    text := pgpace.api_cursor_pos(query, 'dead');
    at_pos timestamptz;
    id_pos bigint;
    rows   jsonb;
    last_pos text;
    n      integer;
BEGIN
    IF pos IS NOT NULL THEN
        IF pos !~ '^[0-9]{1,19}\|[0-9]{1,19}$' THEN
            PERFORM pgpace.api_fail(400, 'cursor: not a cursor of this list', 'cursor');
        END IF;
        at_pos := timestamptz 'epoch' + (split_part(pos, '|', 1) || ' microseconds')::interval;
        id_pos := split_part(pos, '|', 2)::bigint;
    END IF;
    WITH picked AS (
        SELECT d.item_id, d.failed_at,
               pgpace.api_drop_nulls(jsonb_build_object(
                   'item_id', d.item_id,
                   'customer', CASE WHEN c.parent_id IS NULL THEN c.name
                                    ELSE split_part(c.name, '/', 1) END,
                   'endpoint', CASE WHEN c.parent_id IS NOT NULL THEN c.endpoint_name
                                    WHEN c.webhook_url IS NULL THEN '(deleted)'
                                    ELSE 'default' END,
                   'carrier', d.carrier, 'attempts', d.attempts, 'last_status', d.last_status,
                   'last_error', d.last_error, 'failed_at', pgpace.api_time(d.failed_at),
                   'order_key', d.order_key, 'order_action', d.order_action)) AS doc
          FROM pgpace.dead_letter d JOIN pgpace.customer c ON c.id = d.customer_id
         WHERE (rows_of IS NULL OR d.customer_id = ANY (rows_of))
           AND (carrier IS NULL OR d.carrier = carrier)
           AND (err IS NULL OR d.last_error ILIKE '%' || err || '%')
           AND (since IS NULL OR d.failed_at >= since)
           AND (until IS NULL OR d.failed_at < until)
           AND (at_pos IS NULL OR (d.failed_at, d.item_id) < (at_pos, id_pos))
         ORDER BY d.failed_at DESC, d.item_id DESC
         LIMIT lim + 1
    ), numbered AS (
        SELECT p.*, row_number() OVER (ORDER BY p.failed_at DESC, p.item_id DESC) AS rn
          FROM picked p
    )
    SELECT jsonb_agg(x.doc ORDER BY x.rn) FILTER (WHERE x.rn <= lim), count(*),
           max((extract(epoch FROM x.failed_at) * 1000000)::bigint::text || '|' || x.item_id::text)
               FILTER (WHERE x.rn = lim)
      INTO rows, n, last_pos FROM numbered x;
    RETURN jsonb_build_object('items', coalesce(rows, '[]'),
                              'next_cursor', CASE WHEN n > lim
                                                  THEN pgpace.api_cursor('dead', last_pos) END);
END
$$;

-- ---- routes ----------------------------------------------------------------------------------
-- A handler's answer: {status, body, etag, location, allow, audit_customer}.
CREATE OR REPLACE FUNCTION pgpace.api_answer(status integer, body jsonb, etag text DEFAULT NULL,
                                             location text DEFAULT NULL,
                                             audit_customer bigint DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN jsonb_build_object('status', status, 'body', body, 'etag', etag, 'location', location,
                          'audit_customer', audit_customer);

CREATE OR REPLACE FUNCTION pgpace.api_not_allowed(allow text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN jsonb_build_object('status', 405, 'allow', allow,
                          'body', pgpace.api_problem(405, 'allowed here: ' || allow));

CREATE OR REPLACE FUNCTION pgpace.api_customers(method text, segs text[], query jsonb, body jsonb,
                                                if_match text)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n      integer := cardinality(segs);
    cust   pgpace.customer;
    name   text := segs[2];
    pos    text;
    rows   jsonb;
    lim    integer;
    total  integer;
    secret text;
    result jsonb;
BEGIN
    IF n = 1 THEN
        IF method = 'GET' THEN
            PERFORM pgpace.api_params(query, ARRAY['limit', 'cursor']);
            lim := pgpace.api_query_int(query, 'limit', 1, 500, 100);
            pos := pgpace.api_cursor_pos(query, 'customer');
            SELECT jsonb_agg(pgpace.api_customer_doc(c.r) ORDER BY c.nm) FILTER (WHERE c.rn <= lim),
                   count(*), max(c.nm) FILTER (WHERE c.rn <= lim)
              INTO rows, total, name
              FROM (SELECT x AS r, x.name AS nm, row_number() OVER (ORDER BY x.name) AS rn
                      FROM pgpace.customer x
                     WHERE x.parent_id IS NULL AND (pos IS NULL OR x.name > pos)
                     ORDER BY x.name LIMIT lim + 1) c;
            RETURN pgpace.api_answer(200, jsonb_build_object(
                'items', coalesce(rows, '[]'),
                'next_cursor', CASE WHEN total > lim THEN pgpace.api_cursor('customer', name) END));
        ELSIF method = 'POST' THEN
            PERFORM pgpace.api_params(query, '{}');
            PERFORM pgpace.api_members(body, ARRAY['name'] || pgpace.api_receiver_members());
            name := pgpace.api_text(body, 'name');
            IF name IS NULL THEN
                PERFORM pgpace.api_fail(400, 'name: required', 'name');
            END IF;
            IF NOT pgpace.valid_name(name) THEN
                PERFORM pgpace.api_fail(400, 'name: must be 1-128 letters, digits and . _ : @ - '
                                             '(starting with a letter or digit)', 'name');
            END IF;
            IF EXISTS (SELECT 1 FROM pgpace.customer c WHERE c.name = name) THEN
                PERFORM pgpace.api_fail(409, format('customer %s exists (PATCH changes it)',
                                                    quote_literal(name)), 'name');
            END IF;
            IF body ? 'webhook_url' AND pgpace.api_number(body, 'rate_per_minute') IS NULL
               AND coalesce(cardinality(pgpace.api_texts(body, 'limits')), 0) = 0 THEN
                PERFORM pgpace.api_fail(400, 'rate_per_minute: required with a webhook_url '
                                             '(or limits)', 'rate_per_minute');
            END IF;
            PERFORM pgpace.api_receiver_apply(name, body);
            cust := pgpace.api_customer_row(name);
            result := pgpace.api_customer_doc(cust);
            IF cust.signing_secrets IS NOT NULL THEN
                result := result || jsonb_build_object('signing_secret', cust.signing_secrets[1]);
            END IF;
            RETURN pgpace.api_answer(201, result, pgpace.api_etag(cust.id, pgpace.api_version(cust.id)),
                                     '/v1/customers/' || name, cust.id);
        END IF;
        RETURN pgpace.api_not_allowed('GET, POST');
    END IF;
    IF n = 2 THEN
        IF method = 'GET' THEN
            PERFORM pgpace.api_params(query, '{}');
            cust := pgpace.api_customer_row(name);
            RETURN pgpace.api_answer(200, pgpace.api_customer_doc(cust),
                                     pgpace.api_etag(cust.id, pgpace.api_version(cust.id)));
        ELSIF method = 'PATCH' THEN
            PERFORM pgpace.api_params(query, '{}');
            PERFORM pgpace.api_members(body, pgpace.api_receiver_members());
            cust := pgpace.api_customer_row(name, true);
            PERFORM pgpace.api_check_match(if_match, pgpace.api_etag(cust.id, pgpace.api_version(cust.id)));
            PERFORM pgpace.api_receiver_apply(name, body);
            cust := pgpace.api_customer_row(name);
            RETURN pgpace.api_answer(200, pgpace.api_customer_doc(cust),
                                     pgpace.api_etag(cust.id, pgpace.api_version(cust.id)), NULL,
                                     cust.id);
        ELSIF method = 'DELETE' THEN
            PERFORM pgpace.api_params(query, ARRAY['force']);
            cust := pgpace.api_customer_row(name, true);
            PERFORM pgpace.api_check_match(if_match, pgpace.api_etag(cust.id, pgpace.api_version(cust.id)));
            PERFORM pgpace.customer_delete(name, pgpace.api_query_bool(query, 'force'));
            RETURN pgpace.api_answer(204, NULL, NULL, NULL, cust.id);
        END IF;
        RETURN pgpace.api_not_allowed('GET, PATCH, DELETE');
    END IF;
    IF n = 3 AND segs[3] IN ('pause', 'resume', 'enable') THEN
        IF method <> 'POST' THEN
            RETURN pgpace.api_not_allowed('POST');
        END IF;
        PERFORM pgpace.api_params(query, '{}');
        cust := pgpace.api_customer_row(name, true);
        IF segs[3] = 'enable' THEN
            PERFORM pgpace.customer_enable(name);
        ELSE
            UPDATE pgpace.customer c SET paused = (segs[3] = 'pause'), updated_at = now()
             WHERE c.id = cust.id AND c.paused IS DISTINCT FROM (segs[3] = 'pause');
        END IF;
        cust := pgpace.api_customer_row(name);
        RETURN pgpace.api_answer(200, pgpace.api_customer_doc(cust),
                                 pgpace.api_etag(cust.id, pgpace.api_version(cust.id)), NULL, cust.id);
    END IF;
    IF n = 3 AND segs[3] = 'rotate-secret' THEN
        IF method <> 'POST' THEN
            RETURN pgpace.api_not_allowed('POST');
        END IF;
        PERFORM pgpace.api_params(query, ARRAY['retire_old']);
        cust := pgpace.api_customer_row(name, true);
        secret := pgpace.api_rotate_secret(cust.id, pgpace.api_query_bool(query, 'retire_old'));
        cust := pgpace.api_customer_row(name);
        RETURN pgpace.api_answer(200, pgpace.api_customer_doc(cust)
                                      || jsonb_build_object('signing_secret', secret),
                                 pgpace.api_etag(cust.id, pgpace.api_version(cust.id)), NULL, cust.id);
    END IF;
    IF n = 3 AND segs[3] = 'recover' THEN
        IF method <> 'POST' THEN
            RETURN pgpace.api_not_allowed('POST');
        END IF;
        PERFORM pgpace.api_params(query, '{}');
        PERFORM pgpace.api_members(body, ARRAY['since', 'until', 'failed_only', 'rate_per_minute',
                                               'dry_run']);
        cust := pgpace.api_customer_row(name);
        IF pgpace.api_text(body, 'since') IS NULL THEN
            PERFORM pgpace.api_fail(400, 'since: required (the start of the range, RFC 3339)', 'since');
        END IF;
        BEGIN
            SELECT coalesce(jsonb_agg(jsonb_build_object('category', r.category,
                                                         'day', r.day::text, 'items', r.items)
                                      ORDER BY r.day, r.category), '[]')
              INTO rows
              FROM pgpace.recover(name,
                                  pgpace.api_query_time(body, 'since'),
                                  pgpace.api_query_time(body, 'until'),
                                  coalesce(pgpace.api_bool(body, 'failed_only'), true),
                                  pgpace.api_number(body, 'rate_per_minute'),
                                  coalesce(pgpace.api_bool(body, 'dry_run'), false)) r;
        EXCEPTION WHEN object_not_in_prerequisite_state THEN
            -- recover's refusal for a customer without a receiver of its own.
            PERFORM pgpace.api_fail(409, SQLERRM);
        END;
        RETURN pgpace.api_answer(200, jsonb_build_object(
            'dry_run', coalesce(pgpace.api_bool(body, 'dry_run'), false), 'counts', rows),
            NULL, NULL, CASE WHEN coalesce(pgpace.api_bool(body, 'dry_run'), false) THEN NULL
                             ELSE cust.id END);
    END IF;
    IF n >= 3 AND segs[3] = 'endpoints' THEN
        RETURN pgpace.api_endpoints(method, segs, query, body, if_match);
    END IF;
    IF n = 3 AND segs[3] IN ('events', 'deliveries', 'dead-letters') THEN
        IF method <> 'GET' THEN
            RETURN pgpace.api_not_allowed('GET');
        END IF;
        cust := pgpace.api_customer_row(name);
        IF segs[3] = 'events' THEN
            PERFORM pgpace.api_params(query, ARRAY['status', 'kind', 'since', 'until', 'limit',
                                                   'cursor']);
            RETURN pgpace.api_answer(200, pgpace.api_item_list(
                'event', pgpace.api_rows_of(name, NULL), query));
        ELSIF segs[3] = 'deliveries' THEN
            PERFORM pgpace.api_params(query, ARRAY['endpoint', 'status', 'kind', 'since', 'until',
                                                   'limit', 'cursor']);
            RETURN pgpace.api_answer(200, pgpace.api_item_list(
                'delivery', pgpace.api_rows_of(name, query ->> 'endpoint'), query));
        END IF;
        PERFORM pgpace.api_params(query, ARRAY['endpoint', 'carrier', 'error', 'since', 'until',
                                               'limit', 'cursor']);
        RETURN pgpace.api_answer(200, pgpace.api_dead_letter_list(
            pgpace.api_rows_of(name, query ->> 'endpoint'), query));
    END IF;
    PERFORM pgpace.api_fail(404, 'no such resource');
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_endpoints(method text, segs text[], query jsonb, body jsonb,
                                                if_match text)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n      integer := cardinality(segs);
    cname  text := segs[2];
    cust   pgpace.customer;
    ep     pgpace.customer;
    epname text := segs[4];
    rows   jsonb;
    secret text;
    result jsonb;
    routing text[] := ARRAY['event_types', 'payload_filter'];
BEGIN
    IF n = 3 THEN
        IF method = 'GET' THEN
            PERFORM pgpace.api_params(query, '{}');
            cust := pgpace.api_customer_row(cname);
            SELECT coalesce(jsonb_agg(pgpace.api_endpoint_doc(e)
                                      ORDER BY e.parent_id NULLS FIRST, e.endpoint_name), '[]')
              INTO rows FROM pgpace.customer e
             WHERE e.parent_id = cust.id OR (e.id = cust.id AND e.webhook_url IS NOT NULL);
            RETURN pgpace.api_answer(200, jsonb_build_object('items', rows));
        ELSIF method = 'POST' THEN
            PERFORM pgpace.api_params(query, '{}');
            PERFORM pgpace.api_members(body, ARRAY['name'] || routing || pgpace.api_receiver_members());
            cust := pgpace.api_customer_row(cname, true);
            epname := pgpace.api_text(body, 'name');
            IF epname IS NULL THEN
                PERFORM pgpace.api_fail(400, 'name: required', 'name');
            END IF;
            IF epname = 'default' OR NOT pgpace.valid_name(epname) THEN
                PERFORM pgpace.api_fail(400, 'name: must be 1-128 letters, digits and . _ : @ - '
                                             '(starting with a letter or digit), not default '
                                             '(the customer''s own receiver)', 'name');
            END IF;
            IF EXISTS (SELECT 1 FROM pgpace.customer e
                        WHERE e.parent_id = cust.id AND e.endpoint_name = epname) THEN
                PERFORM pgpace.api_fail(409, format('customer %s has an endpoint %s (PATCH changes it)',
                                                    quote_literal(cname), quote_literal(epname)),
                                        'name');
            END IF;
            IF pgpace.api_text(body, 'webhook_url') IS NULL THEN
                PERFORM pgpace.api_fail(400, 'webhook_url: required', 'webhook_url');
            END IF;
            IF jsonb_typeof(body -> 'payload_filter') NOT IN ('object', 'null') THEN
                PERFORM pgpace.api_fail(400, 'payload_filter: expected an object', 'payload_filter');
            END IF;
            PERFORM pgpace.endpoint_add(cname, epname, pgpace.api_text(body, 'webhook_url'),
                                        pgpace.api_number(body, 'rate_per_minute'),
                                        pgpace.api_text(body, 'mode'), pgpace.api_int(body, 'burst'),
                                        NULL, pgpace.api_texts(body, 'event_types'),
                                        CASE WHEN jsonb_typeof(body -> 'payload_filter') = 'object'
                                             THEN body -> 'payload_filter' END,
                                        pgpace.api_int(body, 'max_attempts'),
                                        pgpace.api_texts(body, 'limits'));
            PERFORM pgpace.api_receiver_apply(cname || '/' || epname,
                                              body - 'name' - routing - 'webhook_url'
                                                   - 'rate_per_minute' - 'mode' - 'burst'
                                                   - 'max_attempts' - 'limits');
            ep := pgpace.api_endpoint_row(cname, epname);
            RETURN pgpace.api_answer(201, pgpace.api_endpoint_doc(ep)
                                          || jsonb_build_object('signing_secret', ep.signing_secrets[1]),
                                     pgpace.api_etag(ep.id, pgpace.api_version(ep.id)),
                                     '/v1/customers/' || cname || '/endpoints/' || epname, cust.id);
        END IF;
        RETURN pgpace.api_not_allowed('GET, POST');
    END IF;
    IF n = 4 THEN
        IF method = 'GET' THEN
            PERFORM pgpace.api_params(query, '{}');
            ep := pgpace.api_endpoint_row(cname, epname);
            RETURN pgpace.api_answer(200, pgpace.api_endpoint_doc(ep),
                                     pgpace.api_etag(ep.id, pgpace.api_version(ep.id)));
        ELSIF method = 'PATCH' THEN
            PERFORM pgpace.api_params(query, '{}');
            PERFORM pgpace.api_members(body, routing || pgpace.api_receiver_members());
            ep := pgpace.api_endpoint_row(cname, epname, true);
            PERFORM pgpace.api_check_match(if_match, pgpace.api_etag(ep.id, pgpace.api_version(ep.id)));
            IF epname = 'default' AND (body ? 'event_types' OR body ? 'payload_filter') THEN
                PERFORM pgpace.api_fail(400, 'event_types: the customer''s own receiver (default) '
                                             'gets every event; add an endpoint to subscribe',
                                        CASE WHEN body ? 'event_types' THEN 'event_types'
                                             ELSE 'payload_filter' END);
            END IF;
            IF jsonb_typeof(body -> 'payload_filter') NOT IN ('object', 'null') THEN
                PERFORM pgpace.api_fail(400, 'payload_filter: expected an object', 'payload_filter');
            END IF;
            PERFORM pgpace.api_receiver_apply(ep.name, body - routing);
            IF body ? 'event_types' OR body ? 'payload_filter' THEN
                PERFORM pgpace.endpoint_set_routing(
                    cname, epname,
                    CASE WHEN pgpace.api_null(body, 'event_types') THEN '{}'::text[]
                         ELSE pgpace.api_texts(body, 'event_types') END,
                    CASE WHEN jsonb_typeof(body -> 'payload_filter') = 'object'
                         THEN body -> 'payload_filter' END,
                    pgpace.api_null(body, 'payload_filter'));
            END IF;
            ep := pgpace.api_endpoint_row(cname, epname);
            RETURN pgpace.api_answer(200, pgpace.api_endpoint_doc(ep),
                                     pgpace.api_etag(ep.id, pgpace.api_version(ep.id)), NULL,
                                     coalesce(ep.parent_id, ep.id));
        ELSIF method = 'DELETE' THEN
            PERFORM pgpace.api_params(query, ARRAY['drop_queued']);
            ep := pgpace.api_endpoint_row(cname, epname, true);
            PERFORM pgpace.api_check_match(if_match, pgpace.api_etag(ep.id, pgpace.api_version(ep.id)));
            PERFORM pgpace.endpoint_delete(cname, epname, pgpace.api_query_bool(query, 'drop_queued'));
            RETURN pgpace.api_answer(204, NULL, NULL, NULL, coalesce(ep.parent_id, ep.id));
        END IF;
        RETURN pgpace.api_not_allowed('GET, PATCH, DELETE');
    END IF;
    IF n = 5 AND segs[5] IN ('pause', 'resume', 'enable', 'disable', 'rotate-secret') THEN
        IF method <> 'POST' THEN
            RETURN pgpace.api_not_allowed('POST');
        END IF;
        PERFORM pgpace.api_params(query, CASE WHEN segs[5] = 'rotate-secret'
                                              THEN ARRAY['retire_old'] ELSE '{}' END);
        ep := pgpace.api_endpoint_row(cname, epname, true);
        CASE segs[5]
            WHEN 'pause' THEN PERFORM pgpace.endpoint_pause(cname, epname, true);
            WHEN 'resume' THEN PERFORM pgpace.endpoint_pause(cname, epname, false);
            WHEN 'enable' THEN PERFORM pgpace.endpoint_enable(cname, epname);
            WHEN 'disable' THEN PERFORM pgpace.endpoint_disable(cname, epname);
            ELSE secret := pgpace.api_rotate_secret(ep.id, pgpace.api_query_bool(query, 'retire_old'));
        END CASE;
        ep := pgpace.api_endpoint_row(cname, epname);
        result := pgpace.api_endpoint_doc(ep);
        IF secret IS NOT NULL THEN
            result := result || jsonb_build_object('signing_secret', secret);
        END IF;
        RETURN pgpace.api_answer(200, result, pgpace.api_etag(ep.id, pgpace.api_version(ep.id)),
                                 NULL, coalesce(ep.parent_id, ep.id));
    END IF;
    PERFORM pgpace.api_fail(404, 'no such resource');
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_carrier_doc(c pgpace.carrier)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN jsonb_build_object('name', c.name, 'max_per_round', c.max_per_round,
                          'max_in_flight', c.max_in_flight,
                          'updated_at', pgpace.api_time(c.updated_at));

CREATE OR REPLACE FUNCTION pgpace.api_host_doc(h pgpace.host)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN jsonb_build_object('host', h.host, 'limits', to_jsonb(h.limits),
                          'max_connections', h.max_connections,
                          'receivers', (SELECT count(*) FROM pgpace.customer c
                                         WHERE c.webhook_url IS NOT NULL
                                           AND pgpace.host_for_url(c.webhook_url) = h.host),
                          'created_at', pgpace.api_time(h.created_at),
                          'updated_at', pgpace.api_time(h.updated_at));

-- Carriers (/v1/carriers) and receiver hosts (/v1/hosts): their caps and limits.
CREATE OR REPLACE FUNCTION pgpace.api_carriers(method text, segs text[], query jsonb, body jsonb,
                                               if_match text)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n    integer := cardinality(segs);
    r    pgpace.carrier;
    v    xid;
    name text := segs[2];
    rows jsonb;
BEGIN
    PERFORM pgpace.api_params(query, '{}');
    IF n = 1 AND method = 'GET' THEN
        SELECT coalesce(jsonb_agg(pgpace.api_carrier_doc(c) ORDER BY c.name), '[]') INTO rows
          FROM pgpace.carrier c;
        RETURN pgpace.api_answer(200, jsonb_build_object('items', rows));
    ELSIF n = 1 AND method = 'POST' THEN
        PERFORM pgpace.api_members(body, ARRAY['name', 'max_per_round', 'max_in_flight']);
        name := pgpace.api_text(body, 'name');
        IF name IS NULL THEN
            PERFORM pgpace.api_fail(400, 'name: required', 'name');
        END IF;
        IF EXISTS (SELECT 1 FROM pgpace.carrier c WHERE c.name = name) THEN
            PERFORM pgpace.api_fail(409, format('carrier %s exists (PATCH changes it)',
                                                quote_literal(name)), 'name');
        END IF;
        PERFORM pgpace.carrier_set(name, pgpace.api_int(body, 'max_per_round'),
                                   pgpace.api_int(body, 'max_in_flight'));
        SELECT c.* INTO r FROM pgpace.carrier c WHERE c.name = name;
        SELECT c.xmin INTO v FROM pgpace.carrier c WHERE c.name = name;
        RETURN pgpace.api_answer(201, pgpace.api_carrier_doc(r), pgpace.api_etag(0, v),
                                 '/v1/carriers/' || name);
    ELSIF n = 1 THEN
        RETURN pgpace.api_not_allowed('GET, POST');
    ELSIF n <> 2 THEN
        PERFORM pgpace.api_fail(404, 'no such resource');
    END IF;
    SELECT c.* INTO r FROM pgpace.carrier c WHERE c.name = name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM pgpace.api_fail(404, format('unknown carrier %s', quote_literal(left(name, 140))));
    END IF;
    SELECT c.xmin INTO v FROM pgpace.carrier c WHERE c.name = name;
    IF method = 'GET' THEN
        RETURN pgpace.api_answer(200, pgpace.api_carrier_doc(r), pgpace.api_etag(0, v));
    ELSIF method = 'PATCH' THEN
        PERFORM pgpace.api_members(body, ARRAY['max_per_round', 'max_in_flight']);
        PERFORM pgpace.api_check_match(if_match, pgpace.api_etag(0, v));
        PERFORM pgpace.carrier_set(name, pgpace.api_int(body, 'max_per_round'),
                                   pgpace.api_int(body, 'max_in_flight'),
                                   pgpace.api_null(body, 'max_per_round'),
                                   pgpace.api_null(body, 'max_in_flight'));
        SELECT c.* INTO r FROM pgpace.carrier c WHERE c.name = name;
        SELECT c.xmin INTO v FROM pgpace.carrier c WHERE c.name = name;
        RETURN pgpace.api_answer(200, pgpace.api_carrier_doc(r), pgpace.api_etag(0, v));
    ELSIF method = 'DELETE' THEN
        PERFORM pgpace.api_check_match(if_match, pgpace.api_etag(0, v));
        DELETE FROM pgpace.carrier c WHERE c.name = name;
        RETURN pgpace.api_answer(204, NULL);
    END IF;
    RETURN pgpace.api_not_allowed('GET, PATCH, DELETE');
END
$$;

CREATE OR REPLACE FUNCTION pgpace.api_hosts(method text, segs text[], query jsonb, body jsonb,
                                            if_match text)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n    integer := cardinality(segs);
    r    pgpace.host;
    v    xid;
    name text;
    rows jsonb;
BEGIN
    PERFORM pgpace.api_params(query, '{}');
    IF n = 1 AND method = 'GET' THEN
        SELECT coalesce(jsonb_agg(pgpace.api_host_doc(h) ORDER BY h.host), '[]') INTO rows
          FROM pgpace.host h;
        RETURN pgpace.api_answer(200, jsonb_build_object('items', rows));
    ELSIF n = 1 AND method = 'POST' THEN
        PERFORM pgpace.api_members(body, ARRAY['host', 'limits', 'max_connections']);
        IF pgpace.api_text(body, 'host') IS NULL THEN
            PERFORM pgpace.api_fail(400, 'host: required', 'host');
        END IF;
        name := pgpace.host_normalize(pgpace.api_text(body, 'host'));
        IF EXISTS (SELECT 1 FROM pgpace.host h WHERE h.host = name) THEN
            PERFORM pgpace.api_fail(409, format('host %s has settings (PATCH changes them)',
                                                quote_literal(name)), 'host');
        END IF;
        PERFORM pgpace.host_set(name, pgpace.api_texts(body, 'limits'),
                                pgpace.api_int(body, 'max_connections'));
        SELECT h.* INTO r FROM pgpace.host h WHERE h.host = name;
        SELECT h.xmin INTO v FROM pgpace.host h WHERE h.host = name;
        RETURN pgpace.api_answer(201, pgpace.api_host_doc(r), pgpace.api_etag(0, v),
                                 '/v1/hosts/' || name);
    ELSIF n = 1 THEN
        RETURN pgpace.api_not_allowed('GET, POST');
    ELSIF n <> 2 THEN
        PERFORM pgpace.api_fail(404, 'no such resource');
    END IF;
    name := pgpace.host_normalize(segs[2]);
    SELECT h.* INTO r FROM pgpace.host h WHERE h.host = name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM pgpace.api_fail(404, format('no settings for host %s', quote_literal(left(name, 300))));
    END IF;
    SELECT h.xmin INTO v FROM pgpace.host h WHERE h.host = name;
    IF method = 'GET' THEN
        RETURN pgpace.api_answer(200, pgpace.api_host_doc(r), pgpace.api_etag(0, v));
    ELSIF method = 'PATCH' THEN
        PERFORM pgpace.api_members(body, ARRAY['limits', 'max_connections']);
        PERFORM pgpace.api_check_match(if_match, pgpace.api_etag(0, v));
        PERFORM pgpace.host_set(name, CASE WHEN pgpace.api_null(body, 'limits') THEN '{}'::text[]
                                           ELSE pgpace.api_texts(body, 'limits') END,
                                pgpace.api_int(body, 'max_connections'),
                                pgpace.api_null(body, 'max_connections'));
        SELECT h.* INTO r FROM pgpace.host h WHERE h.host = name;
        SELECT h.xmin INTO v FROM pgpace.host h WHERE h.host = name;
        RETURN pgpace.api_answer(200, pgpace.api_host_doc(r), pgpace.api_etag(0, v));
    ELSIF method = 'DELETE' THEN
        PERFORM pgpace.api_check_match(if_match, pgpace.api_etag(0, v));
        PERFORM pgpace.host_delete(name);
        RETURN pgpace.api_answer(204, NULL);
    END IF;
    RETURN pgpace.api_not_allowed('GET, PATCH, DELETE');
END
$$;

-- /v1/events, /v1/deliveries, /v1/dead-letters, /v1/stats.
CREATE OR REPLACE FUNCTION pgpace.api_records(method text, segs text[], query jsonb, body jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n    integer := cardinality(segs);
    i    pgpace.item;
    id   bigint;
    rows jsonb;
    r    record;
    f    jsonb;
    ids  bigint[];
    names text[];
BEGIN
    IF n >= 2 AND segs[1] IN ('events', 'deliveries') THEN
        IF segs[2] !~ '^[0-9]{1,19}$' THEN
            PERFORM pgpace.api_fail(404, format('no %s %s (ids are numbers)',
                                                CASE segs[1] WHEN 'events' THEN 'event' ELSE 'delivery' END,
                                                quote_literal(left(segs[2], 40))));
        END IF;
        id := segs[2]::bigint;
        SELECT x.* INTO i FROM pgpace.item x WHERE x.id = id;
        IF NOT FOUND OR (segs[1] = 'events' AND i.event_id IS NOT NULL)
           OR (segs[1] = 'deliveries' AND i.fanout IS NOT NULL) THEN
            PERFORM pgpace.api_fail(404, format('no %s %s', CASE segs[1] WHEN 'events' THEN 'event'
                                                                   ELSE 'delivery' END, id));
        END IF;
    END IF;
    IF segs[1] = 'dead-letters' AND n = 2 AND segs[2] IN ('replay', 'purge') THEN
        IF method <> 'POST' THEN
            RETURN pgpace.api_not_allowed('POST');
        END IF;
        PERFORM pgpace.api_params(query, '{}');
        PERFORM pgpace.api_members(body, ARRAY['customer', 'endpoint', 'carrier', 'error', 'since',
                                               'until', 'rate_per_minute', 'all']);
        f := body;
        IF pgpace.api_text(f, 'endpoint') IS NOT NULL AND pgpace.api_text(f, 'customer') IS NULL THEN
            PERFORM pgpace.api_fail(400, 'endpoint: give the customer too', 'endpoint');
        END IF;
        IF NOT coalesce(pgpace.api_bool(f, 'all'), false)
           AND NOT (f ?| ARRAY['customer', 'carrier', 'error', 'since', 'until']) THEN
            PERFORM pgpace.api_fail(400, 'all: give a filter (customer, carrier, error, since, '
                                         'until) or "all": true', 'all');
        END IF;
        IF pgpace.api_text(f, 'customer') IS NOT NULL THEN
            IF pgpace.api_text(f, 'endpoint') IS NOT NULL THEN
                PERFORM pgpace.api_endpoint_row(pgpace.api_text(f, 'customer'),
                                                pgpace.api_text(f, 'endpoint'));
            ELSE
                PERFORM pgpace.api_customer_row(pgpace.api_text(f, 'customer'));
            END IF;
        ELSIF pgpace.api_text(f, 'endpoint') IS NOT NULL THEN
            PERFORM pgpace.api_fail(400, 'endpoint: give the customer too', 'endpoint');
        END IF;
        IF segs[2] = 'replay' THEN
            IF coalesce(pgpace.api_number(f, 'rate_per_minute'), 60) <= 0 THEN
                PERFORM pgpace.api_fail(400, 'rate_per_minute: must be greater than 0',
                                        'rate_per_minute');
            END IF;
            SELECT x.replayed, x.refused INTO r
              FROM pgpace.dlq_replay(pgpace.api_text(f, 'customer'), pgpace.api_text(f, 'carrier'),
                                     pgpace.api_text(f, 'error'), pgpace.api_query_time(f, 'since'),
                                     pgpace.api_query_time(f, 'until'),
                                     coalesce(pgpace.api_number(f, 'rate_per_minute'), 60),
                                     pgpace.api_text(f, 'endpoint')) x;
            RETURN pgpace.api_answer(200, jsonb_build_object('replayed', r.replayed,
                                                             'refused', r.refused));
        END IF;
        IF f ? 'rate_per_minute' THEN
            PERFORM pgpace.api_fail(400, 'rate_per_minute: only for replay', 'rate_per_minute');
        END IF;
        RETURN pgpace.api_answer(200, jsonb_build_object('purged', pgpace.dlq_purge(
            pgpace.api_text(f, 'customer'), pgpace.api_text(f, 'carrier'), pgpace.api_text(f, 'error'),
            pgpace.api_query_time(f, 'since'), pgpace.api_query_time(f, 'until'),
            pgpace.api_text(f, 'endpoint'))));
    END IF;
    IF segs[1] = 'dead-letters' AND n = 3 AND segs[3] IN ('replay', 'purge') THEN
        IF method <> 'POST' THEN
            RETURN pgpace.api_not_allowed('POST');
        END IF;
        PERFORM pgpace.api_params(query, '{}');
        IF segs[2] !~ '^[0-9]{1,19}$'
           OR NOT EXISTS (SELECT 1 FROM pgpace.dead_letter d WHERE d.item_id = segs[2]::bigint) THEN
            PERFORM pgpace.api_fail(404, format('no dead letter %s', quote_literal(left(segs[2], 40))));
        END IF;
        IF segs[3] = 'replay' THEN
            SELECT x.replayed, x.refused INTO r
              FROM pgpace.dlq_replay(NULL, NULL, NULL, NULL, NULL, 60, NULL, segs[2]::bigint) x;
            IF r.refused > 0 THEN
                PERFORM pgpace.api_fail(409, 'its receiver is gone (a deleted endpoint): it stays '
                                             'a dead letter');
            END IF;
            RETURN pgpace.api_answer(200, jsonb_build_object('replayed', r.replayed, 'refused', 0));
        END IF;
        RETURN pgpace.api_answer(200, jsonb_build_object('purged', pgpace.dlq_purge(
            NULL, NULL, NULL, NULL, NULL, NULL, segs[2]::bigint)));
    END IF;
    IF method <> 'GET' THEN
        RETURN pgpace.api_not_allowed('GET');
    END IF;
    IF segs[1] = 'events' AND n = 1 THEN
        PERFORM pgpace.api_params(query, ARRAY['customer', 'status', 'kind', 'since', 'until',
                                               'limit', 'cursor']);
        RETURN pgpace.api_answer(200, pgpace.api_item_list(
            'event', pgpace.api_rows_of(query ->> 'customer', NULL), query));
    ELSIF segs[1] = 'events' AND n = 2 THEN
        PERFORM pgpace.api_params(query, '{}');
        RETURN pgpace.api_answer(200, pgpace.api_event_doc(i, true, true));
    ELSIF segs[1] = 'deliveries' AND n = 1 THEN
        PERFORM pgpace.api_params(query, ARRAY['customer', 'endpoint', 'status', 'kind', 'since',
                                               'until', 'limit', 'cursor']);
        RETURN pgpace.api_answer(200, pgpace.api_item_list(
            'delivery', pgpace.api_rows_of(query ->> 'customer', query ->> 'endpoint'), query));
    ELSIF segs[1] = 'deliveries' AND n = 2 THEN
        PERFORM pgpace.api_params(query, '{}');
        RETURN pgpace.api_answer(200, pgpace.api_delivery_doc(i, true));
    ELSIF segs[1] = 'deliveries' AND n = 3 AND segs[3] = 'attempts' THEN
        PERFORM pgpace.api_params(query, '{}');
        RETURN pgpace.api_answer(200, jsonb_build_object('items', pgpace.api_attempts(i.id)));
    ELSIF segs[1] = 'dead-letters' AND n = 1 THEN
        PERFORM pgpace.api_params(query, ARRAY['customer', 'endpoint', 'carrier', 'error', 'since',
                                               'until', 'limit', 'cursor']);
        RETURN pgpace.api_answer(200, pgpace.api_dead_letter_list(
            pgpace.api_rows_of(query ->> 'customer', query ->> 'endpoint'), query));
    ELSIF segs[1] = 'stats' AND n = 1 THEN
        PERFORM pgpace.api_params(query, ARRAY['customer']);
        -- Its rows first, once (404 for an unknown customer): not a call per customer row.
        ids := pgpace.api_rows_of(query ->> 'customer', NULL);
        names := CASE WHEN ids IS NOT NULL
                      THEN ARRAY(SELECT c.name FROM pgpace.customer c WHERE c.id = ANY (ids)) END;
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'customer', coalesce(s.parent_customer, s.customer),
                   'endpoint', s.endpoint,
                   'mode', s.mode, 'rate_per_minute', s.rate_per_minute,
                   'limits', to_jsonb(s.limits), 'paused', s.paused, 'disabled', s.disabled,
                   'due', s.due, 'in_flight', s.in_flight, 'delayed', s.delayed, 'dead', s.dead,
                   'oldest_due_age_seconds', extract(epoch FROM s.oldest_due_age)::double precision,
                   'effective_rate_per_minute', round(s.effective_rate_per_minute::numeric, 6)::float8,
                   'backlog_seconds', s.backlog_seconds, 'breaker', s.breaker,
                   'breaker_open_until', pgpace.api_time(s.breaker_open_until))
                   ORDER BY s.customer), '[]')
          INTO rows
          FROM pgpace.customer_stats s
         -- By the rows' names, known when the statement is planned: the view then computes
         -- only those (joined to the customers instead, it computed every customer's).
         WHERE names IS NULL OR s.customer = ANY (names);
        RETURN pgpace.api_answer(200, jsonb_build_object('items', rows));
    END IF;
    PERFORM pgpace.api_fail(404, 'no such resource');
    RETURN NULL;
END
$$;

-- The member of the body or query a database error is about, when it says: the error's column,
-- its constraint (customer_rate_valid: rate_per_minute), or a message that starts with
-- "<member>:" or names a member of the body.
CREATE OR REPLACE FUNCTION pgpace.api_error_field(msg text, col text, cons text, body jsonb,
                                                  query jsonb)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN coalesce(
    nullif(col, ''),
    CASE cons WHEN 'customer_rate_valid' THEN 'rate_per_minute'
              WHEN 'customer_url_valid' THEN 'webhook_url'
              WHEN 'customer_burst_valid' THEN 'burst'
              WHEN 'customer_max_attempts_valid' THEN 'max_attempts'
              WHEN 'customer_max_in_flight_valid' THEN 'max_in_flight'
              WHEN 'customer_mode_valid' THEN 'mode'
              WHEN 'customer_limits_valid' THEN 'limits'
              WHEN 'customer_event_types_valid' THEN 'event_types'
              WHEN 'customer_extra_headers_valid' THEN 'headers'
              WHEN 'customer_connect_timeout_valid' THEN 'connect_timeout_ms'
              WHEN 'customer_request_timeout_valid' THEN 'request_timeout_ms'
              WHEN 'customer_name_valid' THEN 'name'
              WHEN 'carrier_name_valid' THEN 'name'
              WHEN 'host_name_valid' THEN 'host'
              WHEN 'host_limits_valid' THEN 'limits'
              WHEN 'host_max_connections_valid' THEN 'max_connections' END,
    (SELECT k FROM (SELECT jsonb_object_keys(coalesce(body, '{}')) AS k
                    WHERE jsonb_typeof(body) = 'object'
                    UNION ALL SELECT jsonb_object_keys(coalesce(query, '{}'))) keys
      WHERE starts_with(msg, k || ':') OR starts_with(msg, k || '[') LIMIT 1),
    -- The CLI's names for what the API calls otherwise.
    CASE substring(msg FROM '^([a-z_]+)[:\[ ]')
         WHEN 'events' THEN 'event_types' WHEN 'filter' THEN 'payload_filter'
         WHEN 'rate' THEN 'rate_per_minute' WHEN 'url' THEN 'webhook_url'
         WHEN 'headers' THEN 'headers' WHEN 'limits' THEN 'limits' END,
    CASE WHEN msg ~* '\murl\M' THEN 'webhook_url'
         WHEN msg ~* '\mrate\M' THEN 'rate_per_minute' END,
    (SELECT k FROM (SELECT jsonb_object_keys(coalesce(body, '{}')) AS k
                    WHERE jsonb_typeof(body) = 'object') keys
      WHERE msg ~* ('\m' || regexp_replace(k, '([^A-Za-z0-9_])', '\\\1', 'g') || '\M')
      ORDER BY length(k) DESC LIMIT 1));

-- One request of the management API. method: GET, POST, PATCH, DELETE; segs: the path after
-- /v1/, split at '/' and percent-decoded; query: the query string's parameters (each a string);
-- body: the request body's text (NULL: none); actor: who (the token's name, "token:NAME"), for
-- the audit; if_match and idem_key: those headers. Returns the status, the ETag, Location and
-- Allow headers (NULL: none) and the JSON body (NULL: none, as for 204).
-- Errors of the request come back as problem documents. An error of pgpace's own or of the
-- database (lost connection, out of disk) is raised, and the listener answers 500 or 503.
CREATE OR REPLACE FUNCTION pgpace.api_call(method text, segs text[], query jsonb, body_text text,
                                           actor text, if_match text, idem_key text,
                                           portal_token text,
                                           OUT status integer, OUT etag text,
                                           OUT location text, OUT allow text, OUT body jsonb)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    doc        jsonb;
    answer     jsonb;
    req_hash   bytea;
    kept       pgpace.api_idempotency;
    st         text;
    msg        text;
    col        text;
    cons       text;
    target     bigint;
    cust_name  text;
BEGIN
    IF segs[1] = 'portal' THEN
        -- A tenant page: its link says who (for the audit and the Idempotency-Key's scope).
        BEGIN
            actor := 'portal:' || ((pgpace.portal_check(portal_token)).customer).name;
        EXCEPTION WHEN SQLSTATE 'PA401' THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
            status := 401;
            body := pgpace.api_problem(401, msg);
            RETURN;
        END;
    END IF;
    IF idem_key IS NOT NULL THEN
        IF method <> 'POST' THEN
            idem_key := NULL; -- only POST is not idempotent by itself
        ELSIF length(idem_key) NOT BETWEEN 1 AND 255 OR idem_key ~ '[[:cntrl:]]' THEN
            status := 400;
            body := pgpace.api_problem(400, 'Idempotency-Key: 1 to 255 characters without control '
                                            'characters', 'Idempotency-Key');
            RETURN;
        ELSE
            req_hash := sha256(convert_to(method || ' ' || array_to_string(segs, '/') || E'\n'
                                          || coalesce(query::text, '') || E'\n'
                                          || coalesce(body_text, ''), 'UTF8'));
            -- Two requests with one key take turns; the second finds the first's answer.
            PERFORM pg_advisory_xact_lock(hashtext('pgpace.api_idempotency'),
                                          hashtext(actor || E'\n' || idem_key));
            SELECT k.* INTO kept FROM pgpace.api_idempotency k
             WHERE k.actor = api_call.actor AND k.key = idem_key
               AND k.created_at > now() - interval '24 hours';
            IF FOUND THEN
                IF kept.request_hash <> req_hash THEN
                    status := 422;
                    body := pgpace.api_problem(422, 'Idempotency-Key: used before with another '
                                                    'request (a key names one request)',
                                               'Idempotency-Key');
                    RETURN;
                END IF;
                status := kept.status;
                etag := kept.etag;
                location := kept.location;
                body := kept.body;
                RETURN;
            END IF;
        END IF;
    END IF;
    BEGIN
        IF body_text IS NOT NULL AND body_text <> '' THEN
            BEGIN
                doc := body_text::jsonb;
            EXCEPTION WHEN invalid_text_representation OR invalid_parameter_value
                           OR untranslatable_character OR character_not_in_repertoire THEN
                PERFORM pgpace.api_fail(400, 'the body is not valid JSON');
            END;
        END IF;
        answer := CASE segs[1]
            WHEN 'customers' THEN pgpace.api_customers(method, segs, query, doc, if_match)
            WHEN 'carriers' THEN pgpace.api_carriers(method, segs, query, doc, if_match)
            WHEN 'hosts' THEN pgpace.api_hosts(method, segs, query, doc, if_match)
            WHEN 'events' THEN pgpace.api_records(method, segs, query, doc)
            WHEN 'deliveries' THEN pgpace.api_records(method, segs, query, doc)
            WHEN 'dead-letters' THEN pgpace.api_records(method, segs, query, doc)
            WHEN 'stats' THEN pgpace.api_records(method, segs, query, doc)
            WHEN 'portal' THEN pgpace.api_portal(method, segs, query, doc, if_match, portal_token)
            END;
        IF answer IS NULL THEN
            PERFORM pgpace.api_fail(404, 'no such resource');
        END IF;
    EXCEPTION WHEN SQLSTATE 'PA400' OR SQLSTATE 'PA401' OR SQLSTATE 'PA403' OR SQLSTATE 'PA404'
                   OR SQLSTATE 'PA409' OR SQLSTATE 'PA412' OR SQLSTATE 'PA428' OR data_exception OR integrity_constraint_violation
                   OR raise_exception OR no_data_found OR program_limit_exceeded
                   OR dependent_objects_still_exist THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, col = COLUMN_NAME,
                                cons = CONSTRAINT_NAME;
        status := CASE WHEN st LIKE 'PA%' THEN substr(st, 3)::integer
                       WHEN st IN ('23505', '2BP01') THEN 409
                       WHEN st = 'P0002' THEN 404
                       ELSE 400 END;
        -- P0002 from a create is about what is missing in the body, not the URL.
        IF st = 'P0002' AND method = 'POST' AND msg !~ '^(unknown|customer .* has no endpoint)' THEN
            status := 400;
        END IF;
        answer := jsonb_build_object('status', status, 'body', pgpace.api_problem(
            status, left(msg, 500),
            CASE WHEN status IN (400, 409) THEN pgpace.api_error_field(msg, col, cons, doc, query)
                 WHEN status IN (412, 428) THEN 'If-Match' END));
    END;
    status := (answer ->> 'status')::integer;
    etag := answer ->> 'etag';
    location := answer ->> 'location';
    allow := answer ->> 'allow';
    body := CASE WHEN jsonb_typeof(answer -> 'body') = 'null' THEN NULL ELSE answer -> 'body' END;
    IF method <> 'GET' AND status BETWEEN 200 AND 299 THEN
        target := (answer ->> 'audit_customer')::bigint;
        SELECT c.name INTO cust_name FROM pgpace.customer c WHERE c.id = target;
        INSERT INTO pgpace.event (kind, customer_id, customer, detail)
        VALUES ('api_write', target,
                coalesce(cust_name, CASE WHEN segs[1] = 'customers' THEN segs[2] ELSE '-' END),
                jsonb_build_object('actor', actor, 'method', method,
                                   'path', '/v1/' || array_to_string(segs, '/'), 'status', status))
        RETURNING pgpace.event.id INTO target;
        PERFORM pg_notify('pgpace_event', target::text);
    END IF;
    IF req_hash IS NOT NULL AND status < 500 THEN
        INSERT INTO pgpace.api_idempotency AS k (actor, key, request_hash, status, etag, location, body)
        VALUES (actor, idem_key, req_hash, status, etag, location, body)
        ON CONFLICT ON CONSTRAINT api_idempotency_pkey DO UPDATE
           SET request_hash = EXCLUDED.request_hash, status = EXCLUDED.status,
               etag = EXCLUDED.etag, location = EXCLUDED.location, body = EXCLUDED.body,
               created_at = now();
    END IF;
END
$$;

-- The owner's alone, like every function that changes customers.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'pgpace'::regnamespace AND p.proname LIKE 'api\_%' LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
