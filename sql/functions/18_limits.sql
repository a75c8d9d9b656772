-- 18_limits.sql - receiver hosts' own limits (pgpace.host, migration 0019): setting, deleting
-- and listing them, the host a webhook URL counts against, and when a list of limit windows
-- lets the next sends go (pgpace.estimate_send_time, 13_estimate.sql, asks it).
-- `pgpace host set|get|list|delete` call these; they are usable from SQL directly by the owner
-- (EXECUTE is revoked from PUBLIC: pgpace_producer only enqueues). A change NOTIFYs pgpace_host
-- (the table's trigger), and the dispatcher reloads that host.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- A host as pgpace.host stores it: the lower-case name or address, with ":PORT" when given.
-- Accepts 'HOST', 'HOST:PORT', '[IPv6]' and '[IPv6]:PORT' (an IPv6 address in its canonical
-- form, a name's trailing dot dropped); refuses, naming the field (host, SQLSTATE 22023), a
-- URL (with a hint to give its host), an IPv6 address without brackets, a port outside 1-65535
-- and anything else that is not a host name.
CREATE OR REPLACE FUNCTION pgpace.host_normalize(host text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h    text := lower(btrim(host_normalize.host));
    m    text[];
    name text;
    port text;
    addr inet;
BEGIN
    IF h IS NULL OR h = '' THEN
        RAISE EXCEPTION 'host: must not be empty (write HOST or HOST:PORT, e.g. api.example.com:8443)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF position('://' IN h) > 0 OR position('/' IN h) > 0 OR position('@' IN h) > 0
       OR position('?' IN h) > 0 OR position('#' IN h) > 0 THEN
        RAISE EXCEPTION 'host: % is a URL, not a host', quote_literal(left(host_normalize.host, 140))
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'give its host, with :PORT when the limit is for that port only ('
                         || coalesce(substring(h FROM '^[a-z][a-z0-9+.-]*://(?:[^/@]*@)?([^/?#]+)'),
                                     'hooks.example.com') || ')';
    END IF;
    IF left(h, 1) = '[' THEN
        m := regexp_match(h, '^\[([^]]+)\](?::([0-9]{1,5}))?$');
        IF m IS NOT NULL THEN
            BEGIN
                addr := m[1]::inet;
            EXCEPTION WHEN OTHERS THEN
                addr := NULL;
            END;
        END IF;
        IF m IS NULL OR addr IS NULL OR family(addr) <> 6 OR masklen(addr) <> 128 THEN
            RAISE EXCEPTION 'host: % is not [IPv6] or [IPv6]:PORT', quote_literal(left(host_normalize.host, 140))
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        name := '[' || host(addr) || ']';
        port := m[2];
    ELSE
        IF h ~ ':.*:' THEN
            RAISE EXCEPTION 'host: % looks like an IPv6 address: write it in brackets', quote_literal(left(host_normalize.host, 140))
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'e.g. [2001:db8::1] or [2001:db8::1]:443';
        END IF;
        m := regexp_match(h, '^([^:]+?)\.?(?::([0-9]{1,5}))?$');
        IF m IS NULL OR m[1] !~ '^[a-z0-9]([a-z0-9_.-]*[a-z0-9_])?$' OR m[1] ~ '\.\.'
           OR length(m[1]) > 253 THEN
            RAISE EXCEPTION 'host: % is not a host name or address (letters, digits, . - _; optionally :PORT)',
                            quote_literal(left(host_normalize.host, 140))
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        name := m[1];
        port := m[2];
    END IF;
    IF port IS NOT NULL AND port::integer NOT BETWEEN 1 AND 65535 THEN
        RAISE EXCEPTION 'host: the port of % must be 1 to 65535', quote_literal(left(host_normalize.host, 140))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN name || coalesce(':' || port::integer::text, '');
END
$$;

-- The pgpace.host row a webhook URL's deliveries count against, or NULL when none: the row of
-- its host and port first (the scheme's port, 443 or 80, when the URL names none), then the row
-- of its host alone. The dispatcher matches the same way (README, "Limits").
CREATE OR REPLACE FUNCTION pgpace.host_for_url(url text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m    text[];
    name text;
    port text;
    found_host text;
BEGIN
    m := regexp_match(lower(url), '^(https?)://(?:[^/?#@]*@)?(\[[^]]+\]|[^/?#:]+)(?::([0-9]{1,5}))?');
    IF m IS NULL THEN
        RETURN NULL;
    END IF;
    name := rtrim(m[2], '.');
    IF left(name, 1) = '[' THEN
        BEGIN
            name := '[' || host(substr(name, 2, length(name) - 2)::inet) || ']';
        EXCEPTION WHEN OTHERS THEN
            RETURN NULL;
        END;
    END IF;
    port := coalesce(m[3]::integer::text, CASE m[1] WHEN 'https' THEN '443' ELSE '80' END);
    SELECT h.host INTO found_host FROM pgpace.host h
     WHERE h.host IN (name || ':' || port, name)
     ORDER BY h.host = name;
    RETURN found_host;
END
$$;

-- Creates or changes a host's own limit: its windows (limits: NULL leaves them, '{}' clears
-- them; normalised and checked as a customer's, pgpace.customer_limits_arg) and its connection
-- cap (max_connections 1 to 10000: NULL leaves it, clear_max_connections removes it: the
-- configured [delivery] max_host_connections applies). The host is normalised
-- (pgpace.host_normalize). Returns the stored host name. Refused naming the field (22023).
CREATE OR REPLACE FUNCTION pgpace.host_set(host text, limits text[] DEFAULT NULL,
                                           max_connections integer DEFAULT NULL,
                                           clear_max_connections boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    h       text := pgpace.host_normalize(host);
    windows text[] := pgpace.customer_limits_arg(limits);
BEGIN
    IF max_connections IS NOT NULL AND max_connections NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'max_connections: must be 1 to 10000, got %', max_connections
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_connections IS NOT NULL AND coalesce(clear_max_connections, false) THEN
        RAISE EXCEPTION 'max_connections: give a value or clear it, not both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgpace.host AS t (host, limits, max_connections)
    VALUES (h, coalesce(windows, '{}'), max_connections)
    ON CONFLICT ON CONSTRAINT host_pkey DO UPDATE
       SET limits = coalesce(windows, t.limits),
           max_connections = CASE WHEN coalesce(clear_max_connections, false) THEN NULL
                                  ELSE coalesce(max_connections, t.max_connections) END,
           updated_at = now();
    RETURN h;
END
$$;

-- Deletes a host's row (its deliveries are then limited by their customers' and endpoints'
-- limits alone). The host is normalised first; unknown: P0002.
CREATE OR REPLACE FUNCTION pgpace.host_delete(host text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    h text := pgpace.host_normalize(host);
BEGIN
    DELETE FROM pgpace.host t WHERE t.host = h;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown host %', quote_literal(h)
            USING ERRCODE = 'no_data_found',
                  HINT = 'pgpace host list shows the hosts that have a limit';
    END IF;
END
$$;

-- The hosts with a limit of their own, by name (or the one `only_host` names, normalised; none
-- when it has no row): their windows as text ('10/s,50000/day'; '-' for none), connection cap
-- ('default': [delivery] max_host_connections), how many receivers' URLs count against it,
-- and when it was last changed.
CREATE OR REPLACE FUNCTION pgpace.host_list(only_host text DEFAULT NULL)
RETURNS TABLE (host text, limits text, max_connections text, receivers bigint,
               updated_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    h text := CASE WHEN only_host IS NOT NULL THEN pgpace.host_normalize(only_host) END;
BEGIN
    RETURN QUERY
    SELECT t.host, coalesce(nullif(array_to_string(t.limits, ','), ''), '-'),
           coalesce(t.max_connections::text, 'default'),
           (SELECT count(*) FROM pgpace.customer c
             WHERE c.webhook_url IS NOT NULL AND pgpace.host_for_url(c.webhook_url) = t.host),
           t.updated_at
      FROM pgpace.host t
     WHERE h IS NULL OR t.host = h
     ORDER BY t.host;
END
$$;

-- A receiver's limit in one word, as `pgpace stats` shows it: its rate per minute as before
-- when it has no windows ('60'), else its rate (as COUNT/min, when it has one) and its windows
-- separated by commas ('10/s,50000/day', '60/min,50000/day'); NULL when it has neither.
CREATE OR REPLACE FUNCTION pgpace.rate_text(rate_per_minute double precision, limits text[])
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN coalesce(cardinality(limits), 0) = 0 THEN rate_per_minute::text
            ELSE concat_ws(',', rate_per_minute::text || '/min', array_to_string(limits, ','))
       END;

-- When the next sends may go under one list of windows: the earliest time at which a send that
-- has `ahead` others before it is allowed by every window, given the sends of the receivers
-- `ids` (pgpace.delivery_attempt rows of those customer ids, outcome <> 'released', by
-- started_at) within each window's period; now() when the windows allow it at once.
--
-- The rule, per window (C sends per P): with U sends in the last P, our send is the n-th,
-- n = U + ahead + 1, counting the U and then the ahead. Send number q may go only once send
-- q - C has left the window (its time + P), so by induction send n waits for send n - r*C plus
-- r periods, r the fewest whole rounds that reach back to a send already made
-- (n - r*C <= U, r = ceil((n - U) / C)):
--   n <= C:            no wait (the window has room);
--   1 <= n - r*C <= U: the (n - r*C)-th oldest send's started_at + r*P;
--   n - r*C <= 0:      now() + (r - 1)*P (the rounds of sends still to come, from now).
-- Exact for sends made back to back; sends spaced by a shorter window or the rate only go
-- later, so this is a lower bound, like the rest of the estimate.
CREATE OR REPLACE FUNCTION pgpace.limits_earliest(ids bigint[], windows text[], ahead bigint)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    w      record;
    t      timestamptz := now();
    period interval;
    used   bigint;
    n      bigint;
    r      bigint;
    idx    bigint;
    oldest timestamptz;
BEGIN
    IF coalesce(cardinality(windows), 0) = 0 OR coalesce(cardinality(ids), 0) = 0 THEN
        RETURN t;
    END IF;
    FOR w IN SELECT x.count, x.period_s
               FROM unnest(windows) AS u(win)
              CROSS JOIN LATERAL pgpace.limit_window_parts(u.win) AS x
              WHERE x.count IS NOT NULL LOOP
        period := w.period_s * interval '1 second';
        SELECT count(*) INTO used FROM pgpace.delivery_attempt a
         WHERE a.customer_id = ANY (ids) AND a.started_at > now() - period
           AND a.outcome <> 'released';
        n := used + greatest(ahead, 0) + 1;
        IF n <= w.count THEN
            CONTINUE;
        END IF;
        r := ceil((n - used)::numeric / w.count)::bigint;
        idx := n - r * w.count;
        IF idx >= 1 THEN
            SELECT a.started_at INTO oldest FROM pgpace.delivery_attempt a
             WHERE a.customer_id = ANY (ids) AND a.started_at > now() - period
               AND a.outcome <> 'released'
             ORDER BY a.started_at OFFSET idx - 1 LIMIT 1;
            t := greatest(t, oldest + r * period);
        ELSE
            t := greatest(t, now() + (r - 1) * period);
        END IF;
    END LOOP;
    RETURN t;
END
$$;

REVOKE EXECUTE ON FUNCTION
    pgpace.host_normalize(text),
    pgpace.host_for_url(text),
    pgpace.host_set(text, text[], integer, boolean),
    pgpace.host_delete(text),
    pgpace.host_list(text),
    pgpace.rate_text(double precision, text[]),
    pgpace.limits_earliest(bigint[], text[], bigint)
    FROM PUBLIC;
