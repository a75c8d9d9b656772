-- 14_health.sql - a customer's health lifecycle and the operator events that record it
-- (tables: migration 0009). Repeatable: `pgpace migrate` re-applies this file whenever it
-- changes (README, "Migrations, functions and views"), so it must stay safe to run any number
-- of times.
--
-- Every lifecycle change is one row of pgpace.event, announced on commit by
-- NOTIFY pgpace_event (payload: the event id). The leader then logs it, counts it and, when
-- configured, posts it to the operator webhook, and marks it handled (pgpace.events_handled).
-- Where the change comes from:
--   failing, recovered  pgpace.breaker_record (the dispatcher's breaker opened from closed /
--                       closed again)
--   breaker_open        pgpace.health_check (open for longer than [health] breaker_event_after)
--   disabled            pgpace.health_check (every delivery failed for disable_after)
--   enabled             pgpace.customer_enable
--   paused, resumed     any change of customer.paused (a trigger: the CLI, SQL, or a receiver's
--                       410 Gone through pgpace.pause_by_receiver)

CREATE OR REPLACE FUNCTION pgpace.record_event(kind text, customer_id bigint,
                                               detail jsonb DEFAULT '{}'::jsonb)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cust_name text;
    new_id bigint;
BEGIN
    SELECT c.name INTO cust_name FROM pgpace.customer c WHERE c.id = record_event.customer_id;
    INSERT INTO pgpace.event AS e (kind, customer_id, customer, detail)
    VALUES (record_event.kind, record_event.customer_id, coalesce(cust_name, '(deleted)'),
            coalesce(record_event.detail, '{}'::jsonb))
    RETURNING e.id INTO new_id;
    PERFORM pg_notify('pgpace_event', new_id::text);
    RETURN new_id;
END
$$;

-- paused/resumed and disabled/enabled from any writer of the customer row. The reason comes
-- from the transaction-local setting pgpace.event_reason when the writer set one (410 Gone,
-- health), else it was an operator.
CREATE OR REPLACE FUNCTION pgpace.customer_lifecycle_event() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reason text := nullif(current_setting('pgpace.event_reason', true), '');
BEGIN
    IF OLD.paused IS DISTINCT FROM NEW.paused THEN
        PERFORM pgpace.record_event(CASE WHEN NEW.paused THEN 'paused' ELSE 'resumed' END, NEW.id,
                                    jsonb_build_object('reason', coalesce(reason, 'operator'),
                                                       'by', session_user));
    END IF;
    IF (OLD.disabled_at IS NULL) <> (NEW.disabled_at IS NULL) THEN
        IF NEW.disabled_at IS NOT NULL THEN
            PERFORM pgpace.record_event('disabled', NEW.id,
                                        jsonb_build_object('reason', coalesce(NEW.disabled_reason, reason, 'operator'),
                                                           'by', session_user));
        ELSE
            PERFORM pgpace.record_event('enabled', NEW.id,
                                        jsonb_build_object('reason', coalesce(reason, 'operator'),
                                                           'by', session_user,
                                                           'disabled_at', OLD.disabled_at));
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER customer_lifecycle
    AFTER UPDATE OF paused, disabled_at ON pgpace.customer
    FOR EACH ROW EXECUTE FUNCTION pgpace.customer_lifecycle_event();

-- A receiver answered 410 Gone: pause the customer (its items wait; nothing is dropped).
-- Returns whether it was paused now (false: it already was, or it is gone).
CREATE OR REPLACE FUNCTION pgpace.pause_by_receiver(customer_id bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    changed boolean;
BEGIN
    PERFORM set_config('pgpace.event_reason', 'receiver answered 410 Gone', true);
    UPDATE pgpace.customer c SET paused = true, updated_at = now()
     WHERE c.id = pause_by_receiver.customer_id AND NOT c.paused;
    changed := FOUND;
    -- Transaction-local, but the dispatcher's pipeline may run more statements in the same
    -- implicit transaction: leave nothing behind for them.
    PERFORM set_config('pgpace.event_reason', '', true);
    RETURN changed;
END
$$;

-- Records a breaker transition of the dispatcher (the state a new leader resumes) and the
-- lifecycle events it makes: opening from closed is `failing`, closing again is `recovered`.
-- failing_since: the first failure of the streak (kept from the first record of the spell).
CREATE OR REPLACE FUNCTION pgpace.breaker_record(customer_id bigint, state text, failures integer,
                                                 trips integer, open_until timestamptz,
                                                 last_error text, failing_since timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    was text;
    was_failing_since timestamptz;
    now_failing_since timestamptz;
BEGIN
    SELECT b.state, b.failing_since INTO was, was_failing_since
      FROM pgpace.breaker b WHERE b.customer_id = breaker_record.customer_id FOR UPDATE;
    was := coalesce(was, 'closed');
    IF NOT EXISTS (SELECT 1 FROM pgpace.customer c WHERE c.id = breaker_record.customer_id) THEN
        RETURN; -- deleted meanwhile
    END IF;
    INSERT INTO pgpace.breaker AS b (customer_id, state, consecutive_failures, trips, open_until,
                                     last_error, failing_since, opened_at)
    VALUES (breaker_record.customer_id, breaker_record.state, breaker_record.failures,
            breaker_record.trips, breaker_record.open_until, left(breaker_record.last_error, 1000),
            CASE WHEN breaker_record.state <> 'closed' THEN breaker_record.failing_since END,
            CASE WHEN breaker_record.state <> 'closed' THEN now() END)
    ON CONFLICT ON CONSTRAINT breaker_pkey DO UPDATE
       SET state = EXCLUDED.state, consecutive_failures = EXCLUDED.consecutive_failures,
           trips = EXCLUDED.trips, open_until = EXCLUDED.open_until,
           last_error = coalesce(EXCLUDED.last_error, b.last_error), updated_at = now(),
           failing_since = CASE WHEN EXCLUDED.state = 'closed' THEN NULL
                                ELSE coalesce(b.failing_since, EXCLUDED.failing_since) END,
           opened_at = CASE WHEN EXCLUDED.state = 'closed' THEN NULL
                            ELSE coalesce(b.opened_at, now()) END,
           open_event_at = CASE WHEN EXCLUDED.state = 'closed' THEN NULL ELSE b.open_event_at END
    RETURNING b.failing_since INTO now_failing_since;

    IF was = 'closed' AND breaker_record.state = 'open' THEN
        PERFORM pgpace.record_event('failing', breaker_record.customer_id,
            jsonb_build_object('failing_since', now_failing_since,
                               'consecutive_failures', breaker_record.failures,
                               'last_error', left(breaker_record.last_error, 200),
                               'retry_at', breaker_record.open_until));
    ELSIF was <> 'closed' AND breaker_record.state = 'closed' THEN
        PERFORM pgpace.record_event('recovered', breaker_record.customer_id,
            jsonb_build_object('failing_since', was_failing_since,
                               'failing_seconds',
                               round(extract(epoch FROM now() - was_failing_since)::numeric, 3)));
    END IF;
END
$$;

-- The leader's periodic health check. Disables the customers whose deliveries have all failed
-- (the breaker has not closed) for at least `disable_after` and `min_attempts` attempts, unless
-- paused (an operator or the receiver already stopped them); records `breaker_open` once per
-- open spell longer than `breaker_event_after`. NULL intervals turn either off. Returns how
-- many customers it disabled and how many breaker events it recorded.
CREATE OR REPLACE FUNCTION pgpace.health_check(disable_after interval, min_attempts integer,
                                               breaker_event_after interval,
                                               OUT disabled integer, OUT breaker_events integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    disabled := 0;
    breaker_events := 0;
    IF min_attempts IS NULL OR min_attempts < 1 THEN
        RAISE EXCEPTION 'health_check: min_attempts must be at least 1, got %', min_attempts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF disable_after IS NOT NULL THEN
        FOR r IN
            SELECT b.customer_id, b.failing_since, b.consecutive_failures, b.last_error
              FROM pgpace.breaker b JOIN pgpace.customer c ON c.id = b.customer_id
             WHERE b.state <> 'closed' AND b.failing_since <= now() - disable_after
               AND b.consecutive_failures >= min_attempts
               AND c.disabled_at IS NULL AND NOT c.paused
               FOR UPDATE OF c
        LOOP
            UPDATE pgpace.customer c
               SET disabled_at = now(), updated_at = now(),
                   disabled_reason = left(format('every delivery failed since %s (%s attempts, for at least %s); last error: %s',
                                                 r.failing_since, r.consecutive_failures,
                                                 disable_after, coalesce(r.last_error, '-')), 1000)
             WHERE c.id = r.customer_id;
            disabled := disabled + 1;
        END LOOP;
    END IF;
    IF breaker_event_after IS NOT NULL THEN
        FOR r IN
            SELECT b.customer_id, b.opened_at, b.failing_since, b.trips, b.open_until,
                   b.consecutive_failures, b.last_error
              FROM pgpace.breaker b
             WHERE b.state <> 'closed' AND b.open_event_at IS NULL
               AND b.opened_at <= now() - breaker_event_after
               FOR UPDATE OF b
        LOOP
            UPDATE pgpace.breaker b SET open_event_at = now() WHERE b.customer_id = r.customer_id;
            PERFORM pgpace.record_event('breaker_open', r.customer_id,
                jsonb_build_object('opened_at', r.opened_at, 'failing_since', r.failing_since,
                                   'trips', r.trips, 'consecutive_failures', r.consecutive_failures,
                                   'retry_at', r.open_until, 'last_error', left(r.last_error, 200)));
            breaker_events := breaker_events + 1;
        END LOOP;
    END IF;
END
$$;

-- Re-enables a disabled customer: its items are claimed again at once, and its breaker starts
-- closed (a fresh streak: a receiver still failing opens it again, and is disabled again only
-- after another disable_after). Returns false when the customer was not disabled.
CREATE OR REPLACE FUNCTION pgpace.customer_enable(name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cust_id bigint;
    was timestamptz;
BEGIN
    SELECT c.id, c.disabled_at INTO cust_id, was
      FROM pgpace.customer c WHERE c.name = customer_enable.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %', quote_literal(left(customer_enable.name, 140))
            USING ERRCODE = 'no_data_found';
    END IF;
    IF was IS NULL THEN
        RETURN false;
    END IF;
    UPDATE pgpace.breaker b
       SET state = 'closed', consecutive_failures = 0, trips = 0, open_until = NULL,
           failing_since = NULL, opened_at = NULL, open_event_at = NULL, updated_at = now()
     WHERE b.customer_id = cust_id;
    UPDATE pgpace.customer c SET disabled_at = NULL, disabled_reason = NULL, updated_at = now()
     WHERE c.id = cust_id;
    RETURN true;
END
$$;

-- Marks events handled by the leader (logged, and accepted by the operator webhook if any).
-- at_us: each event's time in epoch microseconds, which leads to its partition's index.
CREATE OR REPLACE FUNCTION pgpace.events_handled(ids bigint[], at_us bigint[])
RETURNS integer
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH done AS (
        UPDATE pgpace.event e SET handled_at = now()
          FROM unnest(ids, at_us) AS x(id, us)
         WHERE e.id = x.id AND e.at = 'epoch'::timestamptz + x.us * interval '1 microsecond'
           AND e.handled_at IS NULL
        RETURNING 1
    )
    SELECT count(*)::integer FROM done;
$$;

REVOKE EXECUTE ON FUNCTION pgpace.record_event(text, bigint, jsonb),
    pgpace.customer_lifecycle_event(), pgpace.pause_by_receiver(bigint),
    pgpace.breaker_record(bigint, text, integer, integer, timestamptz, text, timestamptz),
    pgpace.health_check(interval, integer, interval), pgpace.customer_enable(text),
    pgpace.events_handled(bigint[], bigint[])
    FROM PUBLIC;
