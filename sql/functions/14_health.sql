-- 14_health.sql - a customer's health lifecycle and the operator events that record it
-- (tables: migration 0009). Repeatable: `pgpace migrate` re-applies this file whenever it
-- changes (README, "Migrations, functions and views"), so it must stay safe to run any number
-- of times.
--
-- Every lifecycle change is one row of pgpace.event, announced on commit by
-- NOTIFY pgpace_event (payload: the event id). The leader then logs it, counts it and, when
-- configured, posts it to the operator webhook, and marks it handled (pgpace.events_posted).
-- Where the change comes from:
--   failing, recovered  pgpace.health_note (the dispatcher: breaker_failures attempts in a row
--                       failed / the first success after that)
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

-- The dispatcher's note of a customer's failing streak: failing = true when breaker_failures
-- attempts in a row have failed since failing_since (any failure: 5xx, timeouts, refused
-- connections, 4xx that dead-letter; throttles are not failures), false at the first success
-- after that. Records the `failing` / `recovered` event. The dispatcher's memory is the truth for
-- a new streak (failing_since is replaced); a `recovered` for a streak not recorded changes
-- nothing.
CREATE OR REPLACE FUNCTION pgpace.health_note(customer_id bigint, failing boolean,
                                              failing_since timestamptz, failures integer,
                                              last_error text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    was timestamptz;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgpace.customer c WHERE c.id = health_note.customer_id) THEN
        RETURN; -- deleted meanwhile
    END IF;
    IF failing THEN
        INSERT INTO pgpace.customer_health AS h (customer_id, failing_since, last_error)
        VALUES (health_note.customer_id, health_note.failing_since, left(health_note.last_error, 1000))
        ON CONFLICT ON CONSTRAINT customer_health_pkey DO UPDATE
           SET failing_since = EXCLUDED.failing_since, last_error = EXCLUDED.last_error,
               updated_at = now();
        PERFORM pgpace.record_event('failing', health_note.customer_id,
            jsonb_build_object('failing_since', health_note.failing_since,
                               'failures_in_a_row', health_note.failures,
                               'last_error', left(health_note.last_error, 200)));
    ELSE
        DELETE FROM pgpace.customer_health h WHERE h.customer_id = health_note.customer_id
        RETURNING h.failing_since INTO was;
        IF FOUND THEN
            PERFORM pgpace.record_event('recovered', health_note.customer_id,
                jsonb_build_object('failing_since', was,
                                   'failing_seconds',
                                   round(extract(epoch FROM now() - was)::numeric, 3)));
        END IF;
    END IF;
END
$$;

-- Records a breaker transition of the dispatcher (the state a new leader resumes) and keeps the
-- open spell's start (opened_at), from which health_check records `breaker_open`.
CREATE OR REPLACE FUNCTION pgpace.breaker_record(customer_id bigint, state text, failures integer,
                                                 trips integer, open_until timestamptz,
                                                 last_error text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO pgpace.breaker AS b (customer_id, state, consecutive_failures, trips, open_until,
                                     last_error, opened_at)
    SELECT $1, $2, $3, $4, $5, left($6, 1000), CASE WHEN $2 <> 'closed' THEN now() END
     WHERE EXISTS (SELECT 1 FROM pgpace.customer c WHERE c.id = $1) -- not deleted meanwhile
    ON CONFLICT ON CONSTRAINT breaker_pkey DO UPDATE
       SET state = EXCLUDED.state, consecutive_failures = EXCLUDED.consecutive_failures,
           trips = EXCLUDED.trips, open_until = EXCLUDED.open_until,
           last_error = coalesce(EXCLUDED.last_error, b.last_error), updated_at = now(),
           opened_at = CASE WHEN EXCLUDED.state = 'closed' THEN NULL
                            ELSE coalesce(b.opened_at, now()) END,
           open_event_at = CASE WHEN EXCLUDED.state = 'closed' THEN NULL ELSE b.open_event_at END;
$$;

-- The leader's periodic health check. Disables the customers whose deliveries have all failed
-- for at least `disable_after`, with at least `min_attempts` failed attempts, unless paused (an
-- operator or the receiver already stopped them): the streak comes from customer_health and is
-- confirmed against the attempt log (no successful attempt since it began, enough failed ones);
-- a streak the log shows ended is closed with a `recovered` event. Records `breaker_open` once
-- per open spell longer than `breaker_event_after`. NULL intervals turn either off. Returns how
-- many customers it disabled and how many breaker events it recorded.
CREATE OR REPLACE FUNCTION pgpace.health_check(disable_after interval, min_attempts integer,
                                               breaker_event_after interval,
                                               OUT disabled integer, OUT breaker_events integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    failed bigint;
BEGIN
    disabled := 0;
    breaker_events := 0;
    IF min_attempts IS NULL OR min_attempts < 1 THEN
        RAISE EXCEPTION 'health_check: min_attempts must be at least 1, got %', min_attempts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF disable_after IS NOT NULL THEN
        FOR r IN
            SELECT h.customer_id, h.failing_since, h.last_error
              FROM pgpace.customer_health h JOIN pgpace.customer c ON c.id = h.customer_id
             WHERE h.failing_since <= now() - disable_after
               AND c.disabled_at IS NULL AND NOT c.paused
             ORDER BY h.failing_since
               FOR UPDATE OF h, c
        LOOP
            IF EXISTS (SELECT 1 FROM pgpace.delivery_attempt a
                        WHERE a.customer_id = r.customer_id AND a.started_at >= r.failing_since
                          AND a.outcome = 'success') THEN
                PERFORM pgpace.health_note(r.customer_id, false, NULL, NULL, NULL);
                CONTINUE;
            END IF;
            SELECT count(*) INTO failed
              FROM (SELECT 1 FROM pgpace.delivery_attempt a
                     WHERE a.customer_id = r.customer_id AND a.started_at >= r.failing_since
                       -- A failed attempt whose retry would have come after its deadline is
                       -- logged 'expired' with its own error class; one never sent, with 'expired'.
                       AND (a.outcome IN ('retry', 'dead')
                            OR (a.outcome = 'expired' AND a.error_class IS DISTINCT FROM 'expired'))
                     LIMIT min_attempts) x;
            CONTINUE WHEN failed < min_attempts;
            UPDATE pgpace.customer c
               SET disabled_at = now(), updated_at = now(),
                   disabled_reason = left(format('every delivery failed since %s (at least %s attempts, for longer than %s); last error: %s',
                                                 r.failing_since, failed, disable_after,
                                                 coalesce(r.last_error, '-')), 1000)
             WHERE c.id = r.customer_id;
            disabled := disabled + 1;
        END LOOP;
    END IF;
    IF breaker_event_after IS NOT NULL THEN
        FOR r IN
            SELECT b.customer_id, b.opened_at, b.trips, b.open_until, b.consecutive_failures,
                   b.last_error
              FROM pgpace.breaker b
             WHERE b.state <> 'closed' AND b.open_event_at IS NULL
               AND b.opened_at <= now() - breaker_event_after
               FOR UPDATE OF b
        LOOP
            UPDATE pgpace.breaker b SET open_event_at = now() WHERE b.customer_id = r.customer_id;
            PERFORM pgpace.record_event('breaker_open', r.customer_id,
                jsonb_build_object('opened_at', r.opened_at, 'trips', r.trips,
                                   'consecutive_failures', r.consecutive_failures,
                                   'retry_at', r.open_until, 'last_error', left(r.last_error, 200)));
            breaker_events := breaker_events + 1;
        END LOOP;
    END IF;
END
$$;

-- Re-enables a disabled customer: its items are claimed again at once, and its breaker and
-- failing streak start afresh (a receiver still failing is `failing` again, and disabled again
-- only after another disable_after). Returns false when the customer was not disabled.
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
           opened_at = NULL, open_event_at = NULL, updated_at = now()
     WHERE b.customer_id = cust_id;
    DELETE FROM pgpace.customer_health h WHERE h.customer_id = cust_id;
    UPDATE pgpace.customer c SET disabled_at = NULL, disabled_reason = NULL, updated_at = now()
     WHERE c.id = cust_id;
    RETURN true;
END
$$;

-- The outcome of the leader's handling: events logged and accepted by the operator webhook (or
-- logged, without one) are handled; refused posts are tried again from next_post_at, backing off
-- from 10 s doubling to an hour. Events are found by id within the day they may still be
-- handled in (the fetch skips older ones). Returns how many were marked handled.
CREATE OR REPLACE FUNCTION pgpace.events_posted(handled_ids bigint[], refused_ids bigint[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer;
BEGIN
    UPDATE pgpace.event e SET post_attempts = e.post_attempts + 1,
           next_post_at = now() + least(interval '1 hour',
                                        interval '10 seconds' * 2 ^ least(e.post_attempts, 10))
     WHERE e.id = ANY (refused_ids) AND e.at > now() - interval '2 days' AND e.handled_at IS NULL;
    UPDATE pgpace.event e SET handled_at = now()
     WHERE e.id = ANY (handled_ids) AND e.at > now() - interval '2 days' AND e.handled_at IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.record_event(text, bigint, jsonb),
    pgpace.customer_lifecycle_event(), pgpace.pause_by_receiver(bigint),
    pgpace.health_note(bigint, boolean, timestamptz, integer, text),
    pgpace.breaker_record(bigint, text, integer, integer, timestamptz, text),
    pgpace.health_check(interval, integer, interval), pgpace.customer_enable(text),
    pgpace.events_posted(bigint[], bigint[])
    FROM PUBLIC;
