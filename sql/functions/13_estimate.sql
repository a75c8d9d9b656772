-- 13_estimate.sql - pgpace.estimate_send_time: when an item enqueued now is expected to be sent.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- How many of a customer's queued items a new item of priority `prio` would wait for: due
-- (next_action_at <= now(), so not in flight: a claim pushes next_action_at a lease ahead) and
-- ahead of it in the claim's order (priority DESC, then next_action_at: a higher priority, or
-- the same one due before now(), which leaves out the items of the calling transaction, such as
-- the one an HTTP enqueue just wrote). Items scheduled later are not counted.
--
-- It runs on every HTTP enqueue, so its cost is bounded whatever the backlog: each carrier of
-- the customer is one range of the claim index (customer, carrier, priority DESC, next_action_at)
-- read in that order, and at most `scan_cap` entries are read in all (the index-only scan of
-- 10,000 entries takes a few milliseconds). Beyond that the count comes from the planner's
-- statistics of pgpace.queue (the row estimate of the same condition: the customer's share of
-- the queue from ANALYZE, which autovacuum reruns after 2 % of the queue changed, times the
-- queue's current size), never below what was counted. A block sample (TABLESAMPLE SYSTEM) was
-- tried first and rejected: a customer's rows sit together in the table, so 256 sampled pages
-- missed or hit them wholesale (36 % off at 10,000 rows). Measured in the README ("When will it
-- be sent?").
CREATE OR REPLACE FUNCTION pgpace.queue_ahead(cust_id bigint, prio integer, scan_cap integer)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k        text;
    budget   integer := scan_cap;
    scanned  integer;
    counted  bigint := 0;
    ahead    bigint;
    plan     json;
BEGIN
    -- The customer's carriers: a loose index scan (one probe each) over the claim index.
    FOR k IN
        WITH RECURSIVE kc AS (
            (SELECT q.carrier FROM pgpace.queue q
              WHERE q.customer_id = cust_id AND q.next_action_at IS NOT NULL
              ORDER BY q.carrier LIMIT 1)
            UNION ALL
            SELECT (SELECT q.carrier FROM pgpace.queue q
                     WHERE q.customer_id = cust_id AND q.carrier > kc.carrier
                       AND q.next_action_at IS NOT NULL
                     ORDER BY q.carrier LIMIT 1)
              FROM kc WHERE kc.carrier IS NOT NULL
        )
        SELECT kc.carrier FROM kc WHERE kc.carrier IS NOT NULL
    LOOP
        -- Every entry read counts against the budget (not only the due ones), so items in
        -- flight or scheduled later cannot make the scan long either.
        SELECT count(*), count(*) FILTER (WHERE s.ahead) INTO scanned, ahead
          FROM (SELECT q.next_action_at <= now()
                       AND (q.priority > prio OR q.next_action_at < now()) AS ahead
                  FROM pgpace.queue q
                 WHERE q.customer_id = cust_id AND q.carrier = k AND q.priority >= prio
                   AND q.next_action_at IS NOT NULL
                 ORDER BY q.priority DESC, q.next_action_at
                 LIMIT budget + 1) s;
        counted := counted + ahead;
        budget := budget - scanned;
        IF budget < 0 THEN
            -- More than scan_cap entries: the planner's estimate (literals, so that it uses the
            -- customer's own frequency), never below what was counted.
            EXECUTE format('EXPLAIN (FORMAT JSON) SELECT 1 FROM pgpace.queue q '
                           'WHERE q.customer_id = %s AND q.priority >= %s '
                           'AND q.next_action_at < now()', cust_id, prio)
               INTO plan;
            RETURN greatest(counted, round((plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8)::bigint);
        END IF;
    END LOOP;
    RETURN counted;
END
$$;

-- The send time by a receiver's pace alone (estimate_receiver's mode rules above), for `ahead`
-- items before it from `start` on.
CREATE OR REPLACE FUNCTION pgpace.estimate_pace(mode text, rate double precision, burst integer,
                                                cust_id bigint, tat timestamptz,
                                                batch_credit double precision,
                                                start timestamptz, ahead bigint)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    period   double precision;
    tick_ms  bigint;
    credit   double precision;
    ticks    bigint;
    next_ms  bigint;
    n_recent bigint;
    oldest   timestamptz;
    per_s    double precision;
BEGIN
    IF mode = 'spaced' THEN
        period := 60.0 / rate;
        RETURN greatest(start, greatest(coalesce(tat, start), start)
                               + (ahead * period - (burst - 1) * period) * interval '1 second');
    ELSIF mode = 'batch' THEN
        SELECT lc.batch_tick_ms INTO tick_ms FROM pgpace.leader_config lc;
        tick_ms := coalesce(tick_ms, 60000);
        credit := coalesce(batch_credit, 0);
        -- Ticks until the allowance covers the items ahead and this one (1e-9: as the
        -- dispatcher's rounding, gcra.c, a credit of 0.9999999999 is a whole item).
        ticks := greatest(1, ceil((ahead + 1 - credit) / rate - 1e-9)::bigint);
        next_ms := (floor(extract(epoch FROM start) * 1000)::bigint / tick_ms + 1) * tick_ms;
        RETURN to_timestamp((next_ms + (ticks - 1) * tick_ms) / 1000.0);
    END IF;
    -- unlimited
    IF ahead = 0 THEN
        RETURN start;
    END IF;
    SELECT count(*), min(a.started_at) INTO n_recent, oldest
      FROM (SELECT a.started_at FROM pgpace.delivery_attempt a
             WHERE a.customer_id = cust_id AND a.started_at > now() - interval '1 minute'
             ORDER BY a.started_at DESC LIMIT 1000) a;
    IF n_recent = 0 THEN
        RETURN start;
    END IF;
    per_s := n_recent / CASE WHEN n_recent < 1000 THEN 60.0
                             ELSE greatest(extract(epoch FROM now() - oldest), 0.001) END;
    RETURN start + (ahead / per_s) * interval '1 second';
END
$$;

-- The expected send time of an item enqueued now for one receiver (a customer's own, or an
-- endpoint: the row `cust_id`) with `priority`, by its own limits alone, or NULL when
-- it sends nothing now (paused or disabled). From the customer's mode and rate, its effective rate
-- (pgpace.frontier.effective_rate, lowered while its receiver throttles; NULL = the configured
-- rate), burst, GCRA state (frontier.tat: the slots already claimed, in flight included), the
-- items ahead of it (pgpace.queue_ahead) and the schedule (an open breaker holds everything
-- until open_until):
--   spaced:    the GCRA slot after the items ahead: max(start, max(tat, start) + n*T - tau),
--              T = 60 s / rate, tau = (burst - 1) * T, start = max(now, breaker's end);
--   batch:     the tick in which the allowance (rate per tick, plus the carried fraction)
--              reaches it, ticks being aligned multiples of the leader's batch_tick_ms
--              (pgpace.leader_config; 60000 when no leader has published it); the current
--              tick's rest is not counted, so this may be one tick late;
--   unlimited: start when nothing is ahead, else start + the items ahead / the customer's
--              attempts per second over the last minute (from at most the last 1000 attempts;
--              start when it sent nothing in that minute).
-- Limit windows (0019): a spaced or batch receiver's rate is the lesser of its rate_per_minute
-- and its shortest window's (pgpace.limits_rate; either may be missing), and the result is no
-- earlier than each of its own windows allows and each window of the host its URL counts
-- against (pgpace.host_for_url) allows, given the sends of the window's last period and the
-- items ahead (pgpace.limits_earliest, 18_limits.sql, which states the rule; for the host only
-- this receiver's items ahead are known, the other tenants' backlogs are not counted).
-- (18_limits.sql comes after this file; its functions are called at run time only.)
CREATE OR REPLACE FUNCTION pgpace.estimate_receiver(cust_id bigint, priority integer)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c        record;
    f        record;
    open_end timestamptz;
    start    timestamptz;
    rate     double precision;
    ahead    bigint;
    result   timestamptz;
    host_key text;
    windows  text[];
BEGIN
    SELECT cu.id, cu.mode, least(cu.rate_per_minute, pgpace.limits_rate(cu.limits)) AS rate,
           cu.burst, cu.limits, cu.webhook_url,
           cu.paused OR cu.disabled_at IS NOT NULL AS held INTO c
      FROM pgpace.customer cu WHERE cu.id = estimate_receiver.cust_id;
    -- A customer that sends nothing until an operator acts (paused, or disabled by health) has
    -- no send time.
    IF c.held THEN
        RETURN NULL;
    END IF;

    SELECT fr.tat, fr.batch_credit, fr.effective_rate INTO f
      FROM pgpace.frontier fr WHERE fr.customer_id = c.id;
    SELECT b.open_until INTO open_end
      FROM pgpace.breaker b WHERE b.customer_id = c.id AND b.state = 'open';
    start := greatest(now(), open_end);
    rate := least(coalesce(f.effective_rate, c.rate), c.rate);
    ahead := pgpace.queue_ahead(c.id, estimate_receiver.priority, 10000);
    result := pgpace.estimate_pace(c.mode, rate, c.burst, c.id, f.tat, f.batch_credit, start,
                                   ahead);
    -- Every window of the receiver's own and of its host's (none: result as it is).
    IF cardinality(c.limits) > 0 THEN
        result := greatest(result, pgpace.limits_earliest(ARRAY[c.id], c.limits, ahead));
    END IF;
    host_key := pgpace.host_for_url(c.webhook_url);
    SELECT h.limits INTO windows FROM pgpace.host h
     WHERE h.host = host_key AND cardinality(h.limits) > 0;
    IF FOUND THEN
        -- The receivers whose URLs count against the same row (strpos first: a cheap test
        -- before the URL is parsed, as this reads every receiver's URL).
        result := greatest(result,
                           pgpace.limits_earliest(ARRAY(SELECT cc.id FROM pgpace.customer cc
                                                         WHERE cc.webhook_url IS NOT NULL
                                                           AND strpos(lower(cc.webhook_url),
                                                                      CASE WHEN left(host_key, 1) = '['
                                                                           THEN '['
                                                                           ELSE split_part(host_key, ':', 1)
                                                                      END) > 0
                                                           AND pgpace.host_for_url(cc.webhook_url)
                                                               = host_key),
                                                  windows, ahead));
    END IF;
    RETURN result;
END
$$;

-- The expected send time of an item enqueued now for `customer` with `priority`, or NULL when
-- it would not be sent now (paused or disabled). For a customer that is its own only receiver,
-- pgpace.estimate_receiver. For a customer with endpoints (migration 0018): with `endpoint`,
-- when that endpoint would get its delivery; without, when every endpoint would have it (the
-- latest of them, as if the event matched every endpoint that is not held). Both limits count:
-- each endpoint's own (estimate_receiver) and the customer's over all of its endpoints, whose
-- GCRA cell (pgpace.tenant_frontier) gives every delivery queued for any of its endpoints ahead
-- of this one a period, and this event's deliveries one each:
--   max(now, max(tat, now) + (ahead + n - 1) * T - tau), T = 60 s / the customer's rate
-- (the lesser of its rate_per_minute and its shortest limit window's, 0019), and its limit
-- windows over the sends to all of its receivers (pgpace.limits_earliest with those ahead
-- and the event's other deliveries).
-- It reveals no payload and no other customer, so producers may call it (SECURITY DEFINER: they
-- cannot read the queue). Bad input: SQLSTATE 22004 (NULL customer), 22023 (priority out of
-- range), 23503 (unknown customer), P0002 (unknown endpoint).
CREATE OR REPLACE FUNCTION pgpace.estimate_send_time(customer text, priority integer,
                                                     endpoint text)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cu       record;
    ep       bigint;
    eps      bigint[];
    e        timestamptz;
    latest   timestamptz;
    held     integer := 0;
    ahead    bigint := 0;
    tat      timestamptz;
    period   double precision;
    all_eps  bigint[];
BEGIN
    IF estimate_send_time.customer IS NULL THEN
        RAISE EXCEPTION 'pgpace.estimate_send_time: customer must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF estimate_send_time.priority IS NULL OR estimate_send_time.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'pgpace.estimate_send_time: priority must be between -32768 and 32767, got %',
                        estimate_send_time.priority
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.id, c.mode, least(c.rate_per_minute, pgpace.limits_rate(c.limits)) AS rate_per_minute,
           c.limits, c.burst, c.webhook_url IS NOT NULL AS receives INTO cu
      FROM pgpace.customer c
     WHERE c.name = estimate_send_time.customer AND c.parent_id IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgpace.estimate_send_time: unknown customer %',
                        quote_literal(left(estimate_send_time.customer, 140))
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF estimate_send_time.endpoint IS NULL AND NOT pgpace.fans_out(cu.id) THEN
        RETURN pgpace.estimate_receiver(cu.id, estimate_send_time.priority);
    END IF;
    IF estimate_send_time.endpoint IS NOT NULL THEN
        eps := ARRAY[pgpace.endpoint_row(estimate_send_time.customer, estimate_send_time.endpoint)];
    ELSE
        eps := ARRAY(SELECT c.id FROM pgpace.customer c
                      WHERE c.parent_id = cu.id OR (c.id = cu.id AND cu.receives) ORDER BY c.id);
    END IF;
    FOREACH ep IN ARRAY eps LOOP
        e := pgpace.estimate_receiver(ep, estimate_send_time.priority);
        IF e IS NULL THEN
            held := held + 1;
        ELSIF latest IS NULL OR e > latest THEN
            latest := e;
        END IF;
    END LOOP;
    -- Nothing that would be sent now (a held endpoint asked for, or every endpoint held).
    IF latest IS NULL THEN
        RETURN NULL;
    END IF;
    -- The customer's limit over all of its endpoints (the dispatcher's tenant gate).
    IF cu.rate_per_minute IS NOT NULL AND cu.mode <> 'unlimited'
       AND EXISTS (SELECT 1 FROM pgpace.customer c WHERE c.parent_id = cu.id) THEN
        all_eps := ARRAY(SELECT c.id FROM pgpace.customer c
                          WHERE c.parent_id = cu.id OR (c.id = cu.id AND cu.receives));
        SELECT coalesce(sum(pgpace.queue_ahead(u.id, estimate_send_time.priority, 10000)), 0)
          INTO ahead
          FROM unnest(all_eps) AS u(id);
        SELECT t.tat INTO tat FROM pgpace.tenant_frontier t WHERE t.customer_id = cu.id;
        period := 60.0 / cu.rate_per_minute;
        latest := greatest(latest, now(),
                           greatest(coalesce(tat, now()), now())
                           + ((ahead + cardinality(eps) - held - 1) * period
                              - (cu.burst - 1) * period) * interval '1 second');
        IF cardinality(cu.limits) > 0 THEN
            latest := greatest(latest,
                               pgpace.limits_earliest(all_eps, cu.limits,
                                                      ahead + cardinality(eps) - held - 1));
        END IF;
    END IF;
    RETURN latest;
END
$$;

-- The form before 0018: every endpoint of the customer (or its own receiver).
CREATE OR REPLACE FUNCTION pgpace.estimate_send_time(customer text, priority integer DEFAULT 0)
RETURNS timestamptz
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN pgpace.estimate_send_time(customer, priority, NULL::text);

REVOKE EXECUTE ON FUNCTION pgpace.queue_ahead(bigint, integer, integer),
    pgpace.estimate_pace(text, double precision, integer, bigint, timestamptz, double precision,
                         timestamptz, bigint),
    pgpace.estimate_receiver(bigint, integer),
    pgpace.estimate_send_time(text, integer, text), pgpace.estimate_send_time(text, integer)
    FROM PUBLIC;
-- It reveals no payload: producers may ask when their item will go.
GRANT EXECUTE ON FUNCTION pgpace.estimate_send_time(text, integer, text),
    pgpace.estimate_send_time(text, integer) TO pgpace_producer;
