-- 0019_limits.sql - limits as receivers state them: several count/period windows per customer
-- or endpoint, a receiver host's own limit, and whether a receiver's announced limit
-- (RateLimit / X-RateLimit-* answer headers) is followed.
--
-- A window is written COUNT/PERIOD: at most COUNT sends in any PERIOD (a sliding window: at no
-- instant do the sends of the last PERIOD number more than COUNT). PERIOD is a unit (s, min, h,
-- day, week, and their long forms) optionally preceded by a whole multiple ('100/10s',
-- '5/2min'), from 1 second to 7 days; COUNT is 1 to 1,000,000,000. A list holds at most 8
-- windows, no two of the same period; it is stored in canonical form (shortest period first,
-- each period in the largest unit that divides it: '10/s', '600/min', '50000/day') so that
-- what `pgpace customer get` prints is what was meant. Seconds are the clock's: a day is 86,400
-- of them, a leap second is an ordinary second.

-- A window's parts, or NULLs when it does not parse (pgpace.limit_window_error says why).
CREATE FUNCTION pgpace.limit_window_parts(w text, OUT count bigint, OUT period_s integer)
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text[];
    mult numeric;
    unit_s integer;
BEGIN
    m := regexp_match(lower(w), '^\s*([0-9]{1,10})\s*/\s*([0-9]{1,7})?\s*'
                                || '(s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs'
                                || '|hour|hours|d|day|days|w|wk|week|weeks)\s*$');
    IF m IS NULL THEN
        RETURN;
    END IF;
    unit_s := CASE
        WHEN m[3] IN ('s', 'sec', 'secs', 'second', 'seconds') THEN 1
        WHEN m[3] IN ('m', 'min', 'mins', 'minute', 'minutes') THEN 60
        WHEN m[3] IN ('h', 'hr', 'hrs', 'hour', 'hours') THEN 3600
        WHEN m[3] IN ('d', 'day', 'days') THEN 86400
        ELSE 604800 END;
    mult := coalesce(m[2]::numeric, 1);
    IF m[1]::numeric < 1 OR m[1]::numeric > 1000000000 OR mult < 1
       OR mult * unit_s > 604800 THEN
        RETURN;
    END IF;
    count := m[1]::bigint;
    period_s := (mult * unit_s)::integer;
END;
$$;

-- What is wrong with one window, naming it, or NULL when it is fine.
CREATE FUNCTION pgpace.limit_window_error(w text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m text[];
BEGIN
    IF w IS NULL OR btrim(w) = '' THEN
        RETURN 'a limit window must not be empty (write COUNT/PERIOD, e.g. 10/s or 50000/day)';
    END IF;
    IF (pgpace.limit_window_parts(w)).count IS NOT NULL THEN
        RETURN NULL;
    END IF;
    m := regexp_match(lower(w), '^\s*([0-9]+)\s*/\s*([0-9]+)?\s*([a-z]+)\s*$');
    IF m IS NULL THEN
        RETURN format('limit window %s is not COUNT/PERIOD (e.g. 10/s, 600/min, 100/10s, '
                      '50000/day)', quote_literal(w));
    END IF;
    IF m[3] NOT IN ('s', 'sec', 'secs', 'second', 'seconds', 'm', 'min', 'mins', 'minute',
                    'minutes', 'h', 'hr', 'hrs', 'hour', 'hours', 'd', 'day', 'days', 'w', 'wk',
                    'week', 'weeks') THEN
        RETURN format('limit window %s: unknown unit %s (use s, min, h, day or week)',
                      quote_literal(w), quote_literal(m[3]));
    END IF;
    IF length(m[1]) > 10 OR m[1]::numeric < 1 OR m[1]::numeric > 1000000000 THEN
        RETURN format('limit window %s: the count must be 1 to 1000000000', quote_literal(w));
    END IF;
    RETURN format('limit window %s: the period must be 1 second to 7 days', quote_literal(w));
END;
$$;

-- A period in canonical form: the largest of day, h, min, s that divides it, with its multiple
-- when that is not 1.
CREATE FUNCTION pgpace.limit_period_text(period_s integer)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE
    WHEN period_s % 86400 = 0 THEN coalesce(nullif((period_s / 86400)::text, '1'), '') || 'day'
    WHEN period_s % 3600 = 0 THEN coalesce(nullif((period_s / 3600)::text, '1'), '') || 'h'
    WHEN period_s % 60 = 0 THEN coalesce(nullif((period_s / 60)::text, '1'), '') || 'min'
    ELSE coalesce(nullif(period_s::text, '1'), '') || 's' END;

-- What is wrong with a list of windows, or NULL when it is fine: every window parses, at most
-- 8, no two with the same period.
CREATE FUNCTION pgpace.limits_error(windows text[])
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    err text;
    periods integer[] := '{}';
    p integer;
BEGIN
    IF windows IS NULL THEN
        RETURN NULL;
    END IF;
    IF cardinality(windows) > 8 THEN
        RETURN format('a limit has at most 8 windows, got %s', cardinality(windows));
    END IF;
    FOR i IN 1 .. coalesce(array_length(windows, 1), 0) LOOP
        err := pgpace.limit_window_error(windows[i]);
        IF err IS NOT NULL THEN
            RETURN err;
        END IF;
        p := (pgpace.limit_window_parts(windows[i])).period_s;
        IF p = ANY (periods) THEN
            RETURN format('limit windows %s: two windows of %s', array_to_string(windows, ', '),
                          '1/' || pgpace.limit_period_text(p));
        END IF;
        periods := periods || p;
    END LOOP;
    RETURN NULL;
END;
$$;

-- The canonical form of a valid list (shortest period first); raises the error of an invalid one.
CREATE FUNCTION pgpace.limits_normalize(windows text[])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    err text := pgpace.limits_error(windows);
BEGIN
    IF err IS NOT NULL THEN
        RAISE EXCEPTION '%', err USING ERRCODE = '22023';
    END IF;
    RETURN coalesce((SELECT array_agg(x.count::text || '/' || pgpace.limit_period_text(x.period_s)
                                      ORDER BY x.period_s)
                       FROM unnest(windows) AS u(w)
                      CROSS JOIN LATERAL pgpace.limit_window_parts(u.w) AS x), '{}');
END;
$$;

-- The dispatcher's form: "COUNT/PERIOD_S" pairs separated by spaces, shortest period first
-- ('' for none).
CREATE FUNCTION pgpace.limits_machine(windows text[])
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN coalesce((SELECT string_agg(x.count::text || '/' || x.period_s::text, ' '
                                   ORDER BY x.period_s)
                   FROM unnest(windows) AS u(w)
                  CROSS JOIN LATERAL pgpace.limit_window_parts(u.w) AS x), '');

-- The rate (per minute) of the shortest window: the pace of a spaced customer that has windows
-- and no rate_per_minute of its own, and the bound of one that has both. NULL for no windows.
CREATE FUNCTION pgpace.limits_rate(windows text[])
RETURNS double precision
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT x.count * 60.0 / x.period_s
          FROM unnest(windows) AS u(w)
         CROSS JOIN LATERAL pgpace.limit_window_parts(u.w) AS x
         ORDER BY x.period_s
         LIMIT 1);

-- Producers get pgpace.enqueue and the estimate only (0001): PostgreSQL grants EXECUTE on new
-- functions to PUBLIC, so it is taken back here.
REVOKE EXECUTE ON FUNCTION pgpace.limit_window_parts(text), pgpace.limit_window_error(text),
    pgpace.limit_period_text(integer), pgpace.limits_error(text[]),
    pgpace.limits_normalize(text[]), pgpace.limits_machine(text[]), pgpace.limits_rate(text[])
    FROM PUBLIC;

ALTER TABLE pgpace.customer
    ADD COLUMN limits text[] NOT NULL DEFAULT '{}'
        CONSTRAINT customer_limits_valid
        CHECK (pgpace.limits_error(limits) IS NULL AND limits = pgpace.limits_normalize(limits)),
    -- Follow what the receiver announces in RateLimit / X-RateLimit-* answer headers (never
    -- above the configured limit).
    ADD COLUMN ratelimit_headers boolean NOT NULL DEFAULT true,
    -- A spaced or batch receiver may have windows instead of a rate: its pace is then its
    -- shortest window's (pgpace.limits_rate). An unlimited one still needs its rate (the
    -- recovery pace and the estimate read it); a customer without a receiver needs neither.
    DROP CONSTRAINT customer_receiver_complete,
    ADD CONSTRAINT customer_receiver_complete
        CHECK ((webhook_url IS NULL) = (signing_secrets IS NULL)
               AND (parent_id IS NULL OR webhook_url IS NOT NULL)
               AND (rate_per_minute IS NOT NULL OR (parent_id IS NULL AND webhook_url IS NULL)
                    OR (mode <> 'unlimited' AND cardinality(limits) > 0)));

-- A receiver host's own limit, over every delivery to it from every customer and endpoint.
-- `host` is the lower-case host name or address, with ":port" when the limit is for that port
-- only ('hooks.example.com', 'api.example.net:8443', '[2001:db8::1]:443'); a URL's host matches
-- its host:port row first, then its host row.
CREATE TABLE pgpace.host (
    host            text PRIMARY KEY
                    CONSTRAINT host_name_valid
                    CHECK (length(host) <= 300
                           AND host ~ '^([a-z0-9]([a-z0-9_.-]*[a-z0-9_])?|\[[0-9a-f:.]+\])(:[0-9]{1,5})?$'),
    limits          text[] NOT NULL DEFAULT '{}'
                    CONSTRAINT host_limits_valid
                    CHECK (pgpace.limits_error(limits) IS NULL
                           AND limits = pgpace.limits_normalize(limits)),
    max_connections integer
                    CONSTRAINT host_max_connections_valid CHECK (max_connections BETWEEN 1 AND 10000),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The dispatcher reloads a host's limit when its row changes (payload: the host).
CREATE FUNCTION pgpace.notify_host_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pgpace_host', CASE WHEN TG_OP = 'DELETE' THEN OLD.host ELSE NEW.host END);
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.notify_host_change() FROM PUBLIC;
CREATE TRIGGER host_changed AFTER INSERT OR UPDATE OR DELETE ON pgpace.host
    FOR EACH ROW EXECUTE FUNCTION pgpace.notify_host_change();
