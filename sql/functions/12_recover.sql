-- 12_recover.sql - pgpace.recover: send the items of a time range again (`pgpace recover`).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.
--
-- The window is on the item's created_at (when it was enqueued, as "recover since" means on
-- other webhook platforms): what a receiver missed is what was produced while it was down,
-- whenever pgpace tried. An item's id carries the UTC day of its created_at (both come from
-- the enqueuing transaction's now()), so the window's days bound the ids and only their
-- partitions of pgpace.item are read. Ids from before migration 0007 (item_legacy, below 2^33)
-- are read too: their ids carry no day.
--
-- The items go back into pgpace.queue under their own ids, so receivers get their original
-- webhook-id (msg_<item id>) and can de-duplicate. Their queue rows have priority -32768, a value
-- reserved for this lane (producers cannot enqueue it): the claim takes a customer's items by
-- priority first (sql/queries/run_claim.sql, within a carrier and across a customer's carriers),
-- so every live item of the customer goes before the recovered ones, which fill the rest of the
-- customer's rate. With a rate, that rate limits their sends, not only their due times: it is
-- the customer's recovery pace (pgpace.recovery_pace, migration 0017), a GCRA cell that the
-- claim reads and advances (sql/queries/run_claim.sql). Attempts start again at 0 with the customer's max_attempts, as after
-- `dlq replay`; the attempt log keeps the earlier attempts, so one item may have two rows with
-- the same attempt number there (delivery_attempt has no unique key on it; started_at orders
-- them).

-- Whether an item that lies on row row_id was made for another receiver, one that is gone: a
-- delivery (event_id set) of an endpoint deleted since, which pgpace.endpoint_delete moved to
-- its customer's row with its dead letter (16_endpoints.sql). Its dead letter says
-- 'endpoint_deleted' (it was queued when the endpoint went), or its attempts were made by
-- another row (the endpoint's: the attempt log keeps the id it was sent under). Such an item
-- must never go to the customer's own receiver (it was not subscribed to it) nor to a customer
-- without one: `recover` and `dlq replay` leave it out, `dlq list` shows its endpoint as
-- "(deleted)". An item is attempted after it was created, so the attempt log is read from
-- created_at on (its partitions of those days only). Every other item is the row's own.
CREATE OR REPLACE FUNCTION pgpace.endpoint_gone(row_id bigint, item_id bigint, event_id bigint,
                                                created_at timestamptz, last_error text)
RETURNS boolean
LANGUAGE sql STABLE
RETURN event_id IS NOT NULL
   AND (last_error IS NOT DISTINCT FROM 'endpoint_deleted'
        OR EXISTS (SELECT 1 FROM pgpace.delivery_attempt a
                    WHERE a.item_id = endpoint_gone.item_id AND a.started_at >= endpoint_gone.created_at
                      AND a.customer_id <> endpoint_gone.row_id));

-- The items of a window that may be sent again: with failed_only, the customer's dead letters
-- whose items were created in it; otherwise every item of the customer created in it that is
-- not queued now (delivered or dead-lettered; failed_at says which). Never an event (an item
-- with `fanout`: the payload its deliveries point at, never sent itself; 0018) nor a delivery a
-- deleted endpoint left on the customer's row (pgpace.endpoint_gone). A set-returning SQL
-- function with one SELECT, so the planner inlines it into the statements that use it.
-- lo and hi are the first id of the window's first day and of the day after its last.
CREATE OR REPLACE FUNCTION pgpace.recover_candidates(cust_id bigint, since timestamptz,
                                                     win_end timestamptz, lo bigint, hi bigint,
                                                     failed_only boolean)
RETURNS TABLE (item_id bigint, carrier text, created_at timestamptz, failed_at timestamptz,
               expires_at timestamptz)
LANGUAGE sql STABLE
AS $$
    -- An item fails after it is created, so failed_at >= since prunes dead_letter's days too.
    SELECT d.item_id, i.carrier, i.created_at, d.failed_at, i.expires_at
      FROM pgpace.dead_letter d
      JOIN pgpace.item i ON i.id = d.item_id
     WHERE $6 AND d.customer_id = $1 AND d.failed_at >= $2
       AND ((d.item_id >= $4 AND d.item_id < $5) OR d.item_id < 8589934592)
       AND ((i.id >= $4 AND i.id < $5) OR i.id < 8589934592) -- prunes item's days too
       AND i.created_at >= $2 AND i.created_at < $3
       AND NOT pgpace.endpoint_gone($1, i.id, i.event_id, i.created_at, d.last_error)
    UNION ALL
    SELECT i.id, i.carrier, i.created_at, d.failed_at, i.expires_at
      FROM pgpace.item i
      LEFT JOIN pgpace.dead_letter d
             ON d.item_id = i.id AND d.customer_id = $1 AND d.failed_at >= $2
     WHERE NOT $6 AND i.customer_id = $1
       AND ((i.id >= $4 AND i.id < $5) OR i.id < 8589934592)
       AND i.created_at >= $2 AND i.created_at < $3
       AND i.fanout IS NULL
       AND NOT EXISTS (SELECT 1 FROM pgpace.queue q WHERE q.item_id = i.id)
       AND NOT pgpace.endpoint_gone($1, i.id, i.event_id, i.created_at, d.last_error)
$$;

-- Whether the customer has recovered items queued (the lane, priority -32768): a loose scan of
-- its carriers in the claim index, then one probe of the lane each, so a customer with a deep
-- live backlog costs a few probes, not a read of it.
CREATE OR REPLACE FUNCTION pgpace.recovery_lane_busy(cust_id bigint)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    WITH RECURSIVE k AS (
        (SELECT q.carrier FROM pgpace.queue q
          WHERE q.customer_id = $1 AND q.next_action_at IS NOT NULL
          ORDER BY q.carrier LIMIT 1)
        UNION ALL
        SELECT (SELECT q.carrier FROM pgpace.queue q
                 WHERE q.customer_id = $1 AND q.carrier > k.carrier AND q.next_action_at IS NOT NULL
                 ORDER BY q.carrier LIMIT 1)
          FROM k WHERE k.carrier IS NOT NULL
    )
    SELECT EXISTS (SELECT 1 FROM k
                    WHERE EXISTS (SELECT 1 FROM pgpace.queue q
                                   WHERE q.customer_id = $1 AND q.carrier = k.carrier
                                     AND q.priority = -32768 AND q.next_action_at IS NOT NULL))
$$;

-- Sends the items of customer created in [since, until) again (until NULL: now()): the dead
-- letters (failed_only, the default) or every item not queued now. rate_per_minute NULL makes
-- them all due at once and the dispatcher paces them at the customer's own rate; a rate R makes
-- one due every 60/R seconds, oldest first, and sets the customer's recovery pace to R: the
-- dispatcher then never sends two of its recovered items less than 60/R seconds apart (nor
-- faster than the customer's own rate, and live items first), whatever their due times. The
-- pace covers every recovered item of the customer still queued, so a later recovery with
-- another rate replaces it for them all, and one without a rate keeps it while recovered items
-- are queued (an earlier paced recovery is never made faster) and drops it otherwise. dry_run
-- changes nothing and returns the same counts. Rows:
--   ('recovered' or, in a dry run, 'to_send', NULL, items sent again / that would be)
--   ('still_queued', NULL, items of the window queued now: skipped, they are sent anyway)
--   ('past_deadline', NULL, items whose own expires_at has passed: never sent late, skipped;
--       their dead letters stay. A recovered item keeps its expires_at; the customer's max_age
--       is not applied again: recovering old items is what the operator asked for)
--   ('day_not_kept', day, ids) per UTC day of the window whose items are no longer kept
--       (its partition was dropped by retention, or never existed): none of its items can be
--       sent, and `ids` is how many of this customer's item ids of that day the attempt log or
--       the dead letters still name.
-- One statement for the whole window: the run is atomic, and a million items take seconds, not
-- minutes (README, "Recovering a time range"); a dry run counts the same set as a run started
-- at that moment would. Two recoveries of one customer take turns (an advisory lock), so an
-- item delivered meanwhile is not sent twice by both.
-- `customer` is a row's name: a customer's (its own receiver, "default") or an endpoint's
-- ("acme/crm"; pgpace.recover_endpoint below takes the two names and back-fills too). Events
-- and what deleted endpoints left on a customer's row are never sent (recover_candidates).
-- Bad input raises SQLSTATE 22004 (a NULL), 22023 (naming since, until or rate_per_minute: at
-- least 0.0001, one item a week), 23503 (unknown customer) or 55000 (a customer without a
-- receiver of its own: its endpoints are recovered one by one).
CREATE OR REPLACE FUNCTION pgpace.recover(
    customer        text,
    since           timestamptz,
    until           timestamptz DEFAULT NULL,
    failed_only     boolean DEFAULT true,
    rate_per_minute double precision DEFAULT NULL,
    dry_run         boolean DEFAULT false)
RETURNS TABLE (category text, day date, items bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
SET work_mem = '64MB'
AS $$
DECLARE
    cust_id   bigint;
    cust_max  integer;
    win_end   timestamptz;
    first_day date;
    last_day  date;
    lo        bigint;
    hi        bigint;
    n_send    bigint;
    n_queued  bigint;
    n_late    bigint;
    legacy_to date;
    rate      double precision := recover.rate_per_minute;
    lane_busy boolean;
    has_receiver boolean;
BEGIN
    IF recover.customer IS NULL OR recover.since IS NULL OR recover.failed_only IS NULL
       OR recover.dry_run IS NULL THEN
        RAISE EXCEPTION 'pgpace.recover: % must not be null',
                        CASE WHEN recover.customer IS NULL THEN 'customer'
                             WHEN recover.since IS NULL THEN 'since'
                             WHEN recover.failed_only IS NULL THEN 'failed_only'
                             ELSE 'dry_run' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT isfinite(recover.since) THEN
        RAISE EXCEPTION 'pgpace.recover: since must be a finite timestamp'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF recover.until IS NOT NULL AND NOT isfinite(recover.until) THEN
        RAISE EXCEPTION 'pgpace.recover: until must be a finite timestamp'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF recover.since > now() THEN
        RAISE EXCEPTION 'pgpace.recover: since (%) is in the future', recover.since
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    win_end := coalesce(recover.until, now());
    IF recover.since >= win_end THEN
        RAISE EXCEPTION 'pgpace.recover: since (%) must be before until (%)', recover.since, win_end
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- NaN compares greater than every number, so "< Infinity" rejects it too.
    IF rate IS NOT NULL AND NOT (rate >= 0.0001 AND rate < 'Infinity'::float8) THEN
        RAISE EXCEPTION 'pgpace.recover: rate_per_minute must be a number of at least 0.0001 (one item a week), got %', rate
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- KEY SHARE, as enqueue takes: a concurrent `customer delete` waits instead of leaving queue
    -- rows without their customer.
    SELECT c.id, c.max_attempts, c.webhook_url IS NOT NULL INTO cust_id, cust_max, has_receiver
      FROM pgpace.customer c WHERE c.name = recover.customer
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgpace.recover: unknown customer %', quote_literal(left(recover.customer, 140))
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    -- A customer without a receiver of its own (0018) has nothing to send again: its deliveries
    -- are its endpoints', and what lies on its row (its events, what deleted endpoints left)
    -- has no receiver here.
    IF NOT has_receiver THEN
        RAISE EXCEPTION 'pgpace.recover: customer % has no receiver of its own (no webhook URL): recover one of its endpoints',
                        quote_literal(left(recover.customer, 140))
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'pgpace recover --customer ' || left(recover.customer, 140)
                         || ' --endpoint NAME (pgpace endpoint list ' || left(recover.customer, 140)
                         || ' shows them)';
    END IF;

    -- One recovery of a customer at a time: a second one waits for the first to commit, and
    -- then sees its rows queued (skipped as still_queued), not delivered-and-gone.
    PERFORM pg_advisory_xact_lock(hashtext('pgpace.recover'), hashtext(cust_id::text));

    first_day := (recover.since AT TIME ZONE 'UTC')::date;
    last_day := ((win_end - interval '1 microsecond') AT TIME ZONE 'UTC')::date;
    lo := pgpace.item_day_first_id(first_day);
    hi := pgpace.item_day_first_id(last_day + 1);

    -- Queued now: the queue's primary key over the window's ids, then each item's created_at.
    SELECT count(*) INTO n_queued
      FROM pgpace.queue q JOIN pgpace.item i ON i.id = q.item_id
     WHERE q.customer_id = cust_id
       AND ((q.item_id >= lo AND q.item_id < hi) OR q.item_id < 8589934592)
       AND i.created_at >= recover.since AND i.created_at < win_end;

    -- Candidates past their own deadline (`late`) are counted, never sent.
    IF recover.dry_run THEN
        SELECT count(*) FILTER (WHERE NOT x.late), count(*) FILTER (WHERE x.late)
          INTO n_send, n_late
          FROM (SELECT coalesce(c.expires_at <= now(), false) AS late
                  FROM pgpace.recover_candidates(cust_id, recover.since, win_end, lo, hi,
                                                 recover.failed_only) c) x;
    ELSE
        -- Recovered items of an earlier run still queued (read before this run adds any).
        lane_busy := pgpace.recovery_lane_busy(cust_id);
        WITH cand AS MATERIALIZED (
            SELECT x.*, coalesce(x.expires_at <= now(), false) AS late
              FROM pgpace.recover_candidates(cust_id, recover.since, win_end, lo, hi,
                                             recover.failed_only) x
        ), locked AS (
            -- Their dead letters, locked as `dlq replay` locks them: a concurrent replay or purge
            -- of the same rows waits, and one that got there first leaves its item out here.
            SELECT d.item_id, d.failed_at
              FROM pgpace.dead_letter d JOIN cand c ON c.item_id = d.item_id AND c.failed_at = d.failed_at
             WHERE NOT c.late AND d.customer_id = cust_id AND d.failed_at >= recover.since
               FOR UPDATE OF d
        ), removed AS (
            DELETE FROM pgpace.dead_letter d USING locked l
             WHERE d.item_id = l.item_id AND d.failed_at = l.failed_at AND d.failed_at >= recover.since
            RETURNING d.item_id
        ), picked AS (
            SELECT c.item_id, coalesce(c.carrier, '') AS carrier, c.expires_at,
                   row_number() OVER (ORDER BY c.created_at, c.item_id) - 1 AS seq
              FROM cand c
             WHERE NOT c.late AND (c.failed_at IS NULL OR c.item_id IN (SELECT r.item_id FROM removed r))
        ), queued AS (
            INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                      max_attempts, expires_at)
            SELECT p.item_id, cust_id, p.carrier, -32768,
                   CASE WHEN rate IS NULL THEN now()
                        ELSE now() + p.seq * (60.0 / rate) * interval '1 second' END,
                   cust_max, p.expires_at
              FROM picked p
            ON CONFLICT (item_id) DO NOTHING
            RETURNING queue.carrier
        ), woken AS (
            -- Payload "<customer id> <carrier>", as enqueue sends: the leader wakes each pair.
            SELECT count(pg_notify('pgpace_enqueue', cust_id::text || ' ' || x.carrier)) AS n
              FROM (SELECT DISTINCT qd.carrier FROM queued qd) x
        )
        SELECT (SELECT count(*) FROM queued), (SELECT count(*) FROM cand WHERE cand.late)
          INTO n_send, n_late FROM woken;

        IF rate IS NOT NULL THEN
            -- The latest recovered send was one old period before tat: the next may go one new
            -- period after it (periods in whole microseconds, rounded up, as the claim uses).
            INSERT INTO pgpace.recovery_pace AS rp (customer_id, rate_per_minute)
            VALUES (cust_id, rate)
            ON CONFLICT (customer_id) DO UPDATE
               SET rate_per_minute = EXCLUDED.rate_per_minute, set_at = now(),
                   tat = rp.tat - ceil(60000000 / rp.rate_per_minute) * interval '1 microsecond'
                         + ceil(60000000 / EXCLUDED.rate_per_minute) * interval '1 microsecond';
        ELSIF NOT lane_busy THEN
            DELETE FROM pgpace.recovery_pace rp WHERE rp.customer_id = cust_id;
        END IF;
    END IF;

    RETURN QUERY SELECT CASE WHEN recover.dry_run THEN 'to_send' ELSE 'recovered' END, NULL::date, n_send;
    RETURN QUERY SELECT 'still_queued'::text, NULL::date, n_queued;
    RETURN QUERY SELECT 'past_deadline'::text, NULL::date, n_late;
    -- Items from before migration 0007 are in item_legacy whatever their day: the days up to
    -- its newest item are kept there (its highest id is about its newest, as
    -- drop_item_partitions reads it). Days after today have nothing to lose.
    IF to_regclass('pgpace.item_legacy') IS NOT NULL THEN
        EXECUTE 'SELECT (l.created_at AT TIME ZONE ''UTC'')::date FROM pgpace.item_legacy l '
                'ORDER BY l.id DESC LIMIT 1' INTO legacy_to;
    END IF;
    last_day := least(last_day, (now() AT TIME ZONE 'UTC')::date);
    -- Days of the window without their partition (and without ids in the DEFAULT partition,
    -- which keeps the days whose partition could not be created): retention dropped them, or
    -- pgpace held nothing then. The ids still known come from the id ranges of the attempt log
    -- and the dead letters (their item_id indexes).
    RETURN QUERY
        SELECT 'day_not_kept'::text, g.d,
               (SELECT count(*) FROM (
                    SELECT a.item_id FROM pgpace.delivery_attempt a
                     WHERE a.item_id >= pgpace.item_day_first_id(g.d)
                       AND a.item_id < pgpace.item_day_first_id(g.d + 1) AND a.customer_id = cust_id
                    UNION
                    SELECT dl.item_id FROM pgpace.dead_letter dl
                     WHERE dl.item_id >= pgpace.item_day_first_id(g.d)
                       AND dl.item_id < pgpace.item_day_first_id(g.d + 1) AND dl.customer_id = cust_id
                ) known)
          FROM generate_series(first_day::timestamp, last_day::timestamp, interval '1 day') AS s(t)
         CROSS JOIN LATERAL (SELECT s.t::date AS d) g
         WHERE to_regclass(format('pgpace.%I', 'item_p' || to_char(g.d, 'YYYYMMDD'))) IS NULL
           AND (legacy_to IS NULL OR g.d > legacy_to)
           AND NOT EXISTS (SELECT 1 FROM pgpace.item_default x
                            WHERE x.id >= pgpace.item_day_first_id(g.d)
                              AND x.id < pgpace.item_day_first_id(g.d + 1))
         ORDER BY g.d;
END
$$;

-- The events of customer cust_id created in [since, win_end) (ids in [lo, hi): their days) that
-- an endpoint (ep_id, subscribed to event_types, with payload_filter) would get and has no
-- delivery of: the back-fill of pgpace.recover_endpoint. late: past the event's own deadline.
-- "Has a delivery": one of the endpoint's items of those days names the event, or one of its
-- queued or dead-lettered items of earlier days does (a queued delivery that a superseding
-- event took over keeps its older id). PL/pgSQL, not an inlined SQL function: this file is
-- applied before 16_endpoints.sql, which defines pgpace.subscribed.
CREATE OR REPLACE FUNCTION pgpace.backfill_candidates(ep_id bigint, cust_id bigint,
                                                      event_types text[], payload_filter jsonb,
                                                      since timestamptz, win_end timestamptz,
                                                      lo bigint, hi bigint)
RETURNS TABLE (event_id bigint, carrier text, kind text, priority smallint,
               expires_at timestamptz, traceparent text, tracestate text,
               created_at timestamptz, late boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT e.id, e.carrier, e.kind, e.priority, e.expires_at, e.traceparent, e.tracestate,
           e.created_at, coalesce(e.expires_at <= now(), false)
      FROM pgpace.item e
     WHERE e.customer_id = backfill_candidates.cust_id AND e.fanout IS NOT NULL
       AND e.id >= backfill_candidates.lo AND e.id < backfill_candidates.hi
       AND e.created_at >= backfill_candidates.since AND e.created_at < backfill_candidates.win_end
       AND pgpace.subscribed(backfill_candidates.event_types, e.kind)
       AND (backfill_candidates.payload_filter IS NULL
            OR e.payload @> backfill_candidates.payload_filter)
       AND NOT EXISTS (SELECT 1 FROM pgpace.item d
                        WHERE d.customer_id = backfill_candidates.ep_id AND d.event_id = e.id
                          AND d.id >= backfill_candidates.lo AND d.id < backfill_candidates.hi)
       AND NOT EXISTS (SELECT 1 FROM pgpace.queue q JOIN pgpace.item d ON d.id = q.item_id
                        WHERE q.customer_id = backfill_candidates.ep_id
                          AND q.item_id < backfill_candidates.lo AND d.event_id = e.id)
       AND NOT EXISTS (SELECT 1 FROM pgpace.dead_letter dl JOIN pgpace.item d ON d.id = dl.item_id
                        WHERE dl.customer_id = backfill_candidates.ep_id
                          AND dl.item_id < backfill_candidates.lo AND d.event_id = e.id);
END
$$;

-- `pgpace recover --endpoint`: pgpace.recover for one endpoint of a customer (its deliveries of
-- the window: their dead letters, or with failed_only false every one not queued now), and the
-- back-fill: every event of the customer created in the window that the endpoint's subscription
-- and payload filter match but that has no delivery for it (the endpoint was added, or its
-- subscription widened, after the event; the event matched no endpoint then) gets one now: an
-- item of the endpoint without payload pointing at the event (its webhook-id is the event's,
-- msg_<event id>, as every delivery of it), queued in the recovery lane behind the endpoint's
-- live traffic like the recovered items, with the event's carrier, priority, deadline and trace
-- context, and counted in the event's `fanout`. An event past its own deadline is not
-- back-filled (counted as past_deadline). endpoint 'default' is the customer's own receiver.
--
-- A back-filled delivery's id is of its event's day and its created_at is the event's: it is
-- dated as if the event had fanned out to it then, so it lives in the event's item partition,
-- whose retention its queue row (or dead letter) then holds back, as for every delivery (the
-- payload it is sent with stays); and a later recovery of that window finds it with the rest.
--
-- "Has a delivery" is read from the endpoint's items of the window's days, and from its queued
-- and dead-lettered ones of earlier days (a queued delivery that a superseding event took over
-- keeps its older id). A delivery taken over that way and already delivered is not seen: its
-- event would get a second delivery with the same webhook-id, which receivers de-duplicate.
--
-- Rows as pgpace.recover's, in its order (past_deadline counts both parts), with one more
-- after past_deadline: ('backfilled' or, in a dry run, 'to_backfill', NULL, deliveries made /
-- that would be). With a rate, the back-filled deliveries become due after the recovered ones,
-- one every 60/R seconds, under the same recovery pace. One transaction and the recovery's
-- advisory lock, so two back-fills of one endpoint never make one event two deliveries.
-- Bad input: as pgpace.recover, and P0002 for an unknown customer or endpoint.
CREATE OR REPLACE FUNCTION pgpace.recover_endpoint(
    customer        text,
    endpoint        text,
    since           timestamptz,
    until           timestamptz DEFAULT NULL,
    failed_only     boolean DEFAULT true,
    rate_per_minute double precision DEFAULT NULL,
    dry_run         boolean DEFAULT false)
RETURNS TABLE (category text, day date, items bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
SET work_mem = '64MB'
AS $$
DECLARE
    ep_id     bigint;
    ep        record;
    cust_id   bigint;
    r         record;
    n_send    bigint;
    n_queued  bigint;
    n_late    bigint;
    n_fill    bigint;
    n_fill_late bigint;
    days      date[] := '{}';
    day_ids   bigint[] := '{}';
    win_end   timestamptz;
    lo        bigint;
    hi        bigint;
    rate      double precision := recover_endpoint.rate_per_minute;
BEGIN
    IF recover_endpoint.customer IS NULL OR recover_endpoint.endpoint IS NULL THEN
        RAISE EXCEPTION 'pgpace.recover: % must not be null',
                        CASE WHEN recover_endpoint.customer IS NULL THEN 'customer' ELSE 'endpoint' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    ep_id := pgpace.endpoint_row(recover_endpoint.customer, recover_endpoint.endpoint);
    SELECT c.name, c.parent_id, c.event_types, c.payload_filter, c.max_attempts INTO ep
      FROM pgpace.customer c WHERE c.id = ep_id;
    cust_id := coalesce(ep.parent_id, ep_id);

    -- The endpoint's own deliveries (checks every input, takes the endpoint row's KEY SHARE lock
    -- and the recovery's advisory lock, held to the end of the transaction).
    FOR r IN SELECT x.category, x.day, x.items
               FROM pgpace.recover(ep.name, recover_endpoint.since, recover_endpoint.until,
                                   recover_endpoint.failed_only, rate, recover_endpoint.dry_run) x
    LOOP
        CASE r.category
            WHEN 'recovered', 'to_send' THEN n_send := r.items;
            WHEN 'still_queued' THEN n_queued := r.items;
            WHEN 'past_deadline' THEN n_late := r.items;
            ELSE days := days || r.day; day_ids := day_ids || r.items;
        END CASE;
    END LOOP;

    win_end := coalesce(recover_endpoint.until, now());
    lo := pgpace.item_day_first_id((recover_endpoint.since AT TIME ZONE 'UTC')::date);
    hi := pgpace.item_day_first_id(((win_end - interval '1 microsecond') AT TIME ZONE 'UTC')::date + 1);

    IF recover_endpoint.dry_run THEN
        SELECT count(*) FILTER (WHERE NOT b.late), count(*) FILTER (WHERE b.late)
          INTO n_fill, n_fill_late
          FROM pgpace.backfill_candidates(ep_id, cust_id, ep.event_types, ep.payload_filter,
                                          recover_endpoint.since, win_end, lo, hi) b;
    ELSE
        WITH cand AS MATERIALIZED (
            SELECT b.*, row_number() OVER (ORDER BY b.created_at, b.event_id) - 1 AS seq
              FROM pgpace.backfill_candidates(ep_id, cust_id, ep.event_types, ep.payload_filter,
                                              recover_endpoint.since, win_end, lo, hi) b
        ), made AS (
            -- The event's day in the id's high bits and a fresh sequence value in the low ones,
            -- as pgpace.next_item_id makes them (its values never repeat within a day).
            INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, event_id, priority,
                                     run_at, created_at, expires_at, traceparent, tracestate)
            SELECT pgpace.item_day_first_id(pgpace.item_id_day(c.event_id))
                       | (nextval('pgpace.item_id_seq') & 8589934591),
                   ep_id, c.carrier, c.kind, NULL, c.event_id, c.priority, now(), c.created_at,
                   c.expires_at, c.traceparent, c.tracestate
              FROM cand c WHERE NOT c.late
            RETURNING id, event_id
        ), queued AS (
            INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at,
                                      max_attempts, expires_at)
            SELECT m.id, ep_id, coalesce(c.carrier, ''), -32768,
                   CASE WHEN rate IS NULL THEN now()
                        ELSE now() + (coalesce(n_send, 0) + c.seq) * (60.0 / rate) * interval '1 second'
                   END,
                   ep.max_attempts, c.expires_at
              FROM made m JOIN cand c ON c.event_id = m.event_id
            RETURNING queue.carrier
        ), counted AS (
            UPDATE pgpace.item e SET fanout = e.fanout + 1
              FROM made m WHERE e.id = m.event_id
        ), woken AS (
            -- Payload "<customer id> <carrier>", as enqueue sends: the leader wakes each pair.
            SELECT count(pg_notify('pgpace_enqueue', ep_id::text || ' ' || x.carrier)) AS n
              FROM (SELECT DISTINCT qd.carrier FROM queued qd) x
        )
        SELECT (SELECT count(*) FROM made), (SELECT count(*) FROM cand WHERE cand.late)
          INTO n_fill, n_fill_late FROM woken;
    END IF;

    RETURN QUERY SELECT CASE WHEN recover_endpoint.dry_run THEN 'to_send' ELSE 'recovered' END,
                        NULL::date, n_send;
    RETURN QUERY SELECT 'still_queued'::text, NULL::date, n_queued;
    RETURN QUERY SELECT 'past_deadline'::text, NULL::date, n_late + n_fill_late;
    RETURN QUERY SELECT CASE WHEN recover_endpoint.dry_run THEN 'to_backfill' ELSE 'backfilled' END,
                        NULL::date, n_fill;
    RETURN QUERY SELECT 'day_not_kept'::text, u.d, u.n
                   FROM unnest(days, day_ids) AS u(d, n);
END
$$;

-- Operators' tools: not for producers (PUBLIC has USAGE on nothing here, but new functions are
-- executable by PUBLIC by default).
REVOKE EXECUTE ON FUNCTION
    pgpace.endpoint_gone(bigint, bigint, bigint, timestamptz, text),
    pgpace.recover_candidates(bigint, timestamptz, timestamptz, bigint, bigint, boolean),
    pgpace.backfill_candidates(bigint, bigint, text[], jsonb, timestamptz, timestamptz, bigint,
                               bigint),
    pgpace.recovery_lane_busy(bigint),
    pgpace.recover(text, timestamptz, timestamptz, boolean, double precision, boolean),
    pgpace.recover_endpoint(text, text, timestamptz, timestamptz, boolean, double precision,
                            boolean)
    FROM PUBLIC;
