-- 0020_order_keys.sql - ordered delivery per key (issue 32): the deliveries of one endpoint
-- (customer row) that carry the same order_key go one at a time, in enqueue order.
--
-- The model:
-- - order_key (1-255 characters, no control characters) is given at enqueue and kept on the
--   item (the record) and on its queue row (what the claim's gate reads). A delivery made by
--   fan-out carries its event's key, so the order holds per endpoint.
-- - The claim's gate (sql/queries/run_claim.sql, run_claim_unlimited.sql): a queued item with
--   an order key may be claimed only when no other item of its endpoint and key is still in
--   the queue with a lower item_id (queued, retrying or in flight), none of them has been
--   claimed before (attempt > 0: in flight or retrying, whatever its id: an item replayed from
--   the dead letters, or committed late with a lower id, waits for it), and no dead head of the
--   key holds it (pgpace.order_hold). Item ids follow enqueue order; the queue is the state, so
--   a leader failover, a lease expiry or a kill -9 changes nothing: an item whose lease ran out
--   is still queued, with attempt > 0, and still blocks its key.
-- - A dead-lettered head, per endpoint (customer.order_on_dead): 'skip' (default) lets the next
--   item of its key go, and its dead letter says so (dead_letter.order_action 'skipped');
--   'hold' stops the key's later items (order_action 'held', a pgpace.order_hold row) until
--   the dead letter is replayed (it goes back with its own item_id, so it is the key's head
--   again) or purged.
ALTER TABLE pgpace.item
    ADD COLUMN order_key text;
ALTER TABLE pgpace.queue
    ADD COLUMN order_key text;

-- The rule pgpace.order_key_error (05_enqueue.sql) words for producers; these are the second
-- line of defence. NOT VALID on item: every existing row has NULL in the new column, so the
-- ACCESS EXCLUSIVE lock need not be held for a scan of the whole item table (as 0012 did);
-- new and updated rows are checked all the same.
ALTER TABLE pgpace.item
    ADD CONSTRAINT item_order_key_valid
        CHECK (length(order_key) BETWEEN 1 AND 255 AND order_key !~ '[[:cntrl:]]') NOT VALID;
ALTER TABLE pgpace.queue
    ADD CONSTRAINT queue_order_key_valid
        CHECK (length(order_key) BETWEEN 1 AND 255 AND order_key !~ '[[:cntrl:]]') NOT VALID;

-- The gate's two probes, over keyed rows only (an endpoint without keys pays nothing):
-- "an item of the key has been claimed" reads queue_order_started, which holds the few rows
-- of each key that are in flight or retrying (at most one per key, but for a replay); "an
-- earlier item of the key is queued" is then the first entry below item_id in queue_order,
-- which holds the rest (never claimed: attempt 0). The two are disjoint so that a claim,
-- which moves its row from the one to the other, adds one index entry, not two (a claim's
-- update is never HOT: it changes next_action_at).
CREATE INDEX queue_order ON pgpace.queue (customer_id, order_key, item_id)
    WHERE order_key IS NOT NULL AND attempt = 0;
CREATE INDEX queue_order_started ON pgpace.queue (customer_id, order_key)
    WHERE order_key IS NOT NULL AND attempt > 0;

-- What a dead-lettered head does to its key, per endpoint.
ALTER TABLE pgpace.customer
    ADD COLUMN order_on_dead text NOT NULL DEFAULT 'skip'
        CONSTRAINT customer_order_on_dead_valid CHECK (order_on_dead IN ('skip', 'hold'));

-- The dead letter of an item with an order key names its key and what its death did to it:
-- 'skipped' (the key's next item went on without it) or 'held' (the key waits for it).
ALTER TABLE pgpace.dead_letter
    ADD COLUMN order_key text,
    ADD COLUMN order_action text
        CONSTRAINT dead_letter_order_action_valid CHECK (order_action IN ('skipped', 'held'));

-- Keys held by a dead head (order_on_dead 'hold'): items of the key with a higher item_id wait
-- while the dead letter of item_id exists. A row whose dead letter is gone (replayed, purged:
-- the trigger below deletes it; dropped with its partition by retention: left behind) holds
-- nothing, since the gate also asks for the dead letter. No foreign keys: the dead letter is
-- partitioned without a unique item_id, and deleting a customer must not wait on this.
CREATE TABLE pgpace.order_hold (
    customer_id bigint NOT NULL,
    order_key   text NOT NULL,
    item_id     bigint NOT NULL,
    held_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (customer_id, order_key, item_id)
);
CREATE INDEX order_hold_item ON pgpace.order_hold (item_id);

-- A trigger rather than a change to every statement that dead-letters (the finalize round,
-- the deadline sweep, an enqueue past its deadline, and those to come): whatever puts an item
-- with an order key into the dead letters applies its endpoint's order_on_dead. AFTER, so that
-- it sees the item row a statement wrote beside the dead letter (fan-out writes both in one
-- statement). Dead letters are rare next to deliveries; an item without a key costs one
-- primary-key probe.
CREATE FUNCTION pgpace.dead_letter_order() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    key    text;
    action text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- Replayed or purged: the dead head no longer holds its key.
        DELETE FROM pgpace.order_hold h WHERE h.item_id = OLD.item_id;
        RETURN NULL;
    END IF;
    SELECT i.order_key INTO key FROM pgpace.item i WHERE i.id = NEW.item_id LIMIT 1;
    IF key IS NULL OR NEW.order_action IS NOT NULL THEN
        RETURN NULL;
    END IF;
    SELECT CASE c.order_on_dead WHEN 'hold' THEN 'held' ELSE 'skipped' END INTO action
      FROM pgpace.customer c WHERE c.id = NEW.customer_id;
    action := coalesce(action, 'skipped');
    IF action = 'held' THEN
        INSERT INTO pgpace.order_hold (customer_id, order_key, item_id)
        VALUES (NEW.customer_id, key, NEW.item_id)
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE pgpace.dead_letter d SET order_key = key, order_action = action
     WHERE d.item_id = NEW.item_id AND d.failed_at = NEW.failed_at;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.dead_letter_order() FROM PUBLIC;
CREATE TRIGGER dead_letter_order AFTER INSERT OR DELETE ON pgpace.dead_letter
    FOR EACH ROW EXECUTE FUNCTION pgpace.dead_letter_order();

-- Parking: the claim's cost with a deep key. The gate above is what keeps the order, but an
-- item behind its key's head is still in the claim index, and a claim reads past every one of
-- them (measured: 56 ms per claim behind one key with 20,000 queued items, so the key went at
-- 17 a second however fast its receiver). So an item queued behind an earlier item of its key
-- is parked (next_action_at NULL: out of the claim index, as the index's predicate says), and
-- the key's lowest item is unparked whenever it is not (it becomes due at its run_at). Parking
-- is only ever an optimisation: the gate stays, so an item left unparked is merely read.
-- The invariant, "the lowest queued item of a key is not parked", has one hazard: a producer
-- parks its item behind the head while, concurrently, the head's delivery is finalized and
-- does not see the new (uncommitted) item. So the producer checks again at its COMMIT, and
-- both sides take a transaction-scoped advisory lock on the key's bucket (one of 512 per key
-- space, so a commit holds at most 512 locks however many keys it wrote) without ever waiting
-- for it:
-- - the producer parks its item as it inserts it (a BEFORE trigger: no second write of the
--   row), under READ COMMITTED only (under REPEATABLE READ or SERIALIZABLE its snapshot may
--   predate the head's delete, so the item is left unparked); at COMMIT (a deferred constraint
--   trigger, so the lock is held for the commit only, not the producer's transaction) each
--   parked item, with the lock, unparks its key's lowest item if that is parked (the head went
--   meanwhile; after the lock, READ COMMITTED sees every commit before it), and without it
--   notes the key in pgpace.order_recheck;
-- - whatever deletes a keyed row unparks the key's new lowest item when it gets the lock, and
--   otherwise notes the key in pgpace.order_recheck;
-- - the leader works off pgpace.order_recheck within a fraction of a second
--   (pgpace.order_recheck_run, run_order_recheck.sql).
-- (A first version parked at COMMIT with an UPDATE of the row: 27.6 s to enqueue 500,000
-- keyed items against 3.6 s without keys, and the queue twice its size until vacuumed, which
-- slowed every claim; bench/ORDER_KEYS.md.)
CREATE TABLE pgpace.order_recheck (
    customer_id bigint NOT NULL,
    order_key   text NOT NULL,
    noted_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (customer_id, order_key)
);

CREATE FUNCTION pgpace.order_try_lock(customer_id bigint, order_key text) RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_try_advisory_xact_lock(hashtext('pgpace.order'),
                                     (hashtextextended(order_key, customer_id) & 511)::integer)
$$;
REVOKE EXECUTE ON FUNCTION pgpace.order_try_lock(bigint, text) FROM PUBLIC;

-- Unparks the key's lowest queued item if it is parked and none of the key's items is in
-- flight or retrying; true when it did. The caller holds the key's bucket lock.
CREATE FUNCTION pgpace.order_unpark(cust bigint, key text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head    bigint;
    parked  boolean;
    carrier text;
BEGIN
    -- An item of the key in flight or retrying is its head (it goes first, whatever its id).
    IF EXISTS (SELECT 1 FROM pgpace.queue q
                WHERE q.customer_id = cust AND q.order_key = key AND q.order_key IS NOT NULL
                  AND q.attempt > 0) THEN
        RETURN false;
    END IF;
    SELECT q.item_id, q.next_action_at IS NULL, q.carrier INTO head, parked, carrier
      FROM pgpace.queue q
     WHERE q.customer_id = cust AND q.order_key = key AND q.order_key IS NOT NULL
       AND q.attempt = 0
     ORDER BY q.item_id LIMIT 1;
    IF NOT coalesce(parked, false) THEN
        RETURN false;
    END IF;
    UPDATE pgpace.queue q
       SET next_action_at = coalesce((SELECT i.run_at FROM pgpace.item i WHERE i.id = head), now())
     WHERE q.item_id = head AND q.next_action_at IS NULL;
    -- The leader claims the pair again (a delivery it finalized does that anyway; this is for
    -- the deletes of others: an expiry, a supersede, an operator's purge).
    PERFORM pg_notify('pgpace_enqueue', cust::text || ' ' || carrier);
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.order_unpark(bigint, text) FROM PUBLIC;

-- With the key's lock: unparks its lowest item if that is parked (a statement after the lock:
-- under READ COMMITTED it sees every commit before it). Without: notes the key for the leader.
CREATE FUNCTION pgpace.order_settle(cust bigint, key text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pgpace.order_try_lock(cust, key) THEN
        PERFORM pgpace.order_unpark(cust, key);
    ELSE
        INSERT INTO pgpace.order_recheck (customer_id, order_key)
        VALUES (cust, key)
        ON CONFLICT DO NOTHING;
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.order_settle(bigint, text) FROM PUBLIC;

CREATE FUNCTION pgpace.queue_order_park() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- (Rows the same statement inserted before this one are seen: a bulk insert parks all but
    -- the first of each key.)
    IF current_setting('transaction_isolation') = 'read committed'
       AND (EXISTS (SELECT 1 FROM pgpace.queue e
                     WHERE e.customer_id = NEW.customer_id AND e.order_key = NEW.order_key
                       AND e.order_key IS NOT NULL AND e.attempt = 0
                       AND e.item_id < NEW.item_id)
            OR EXISTS (SELECT 1 FROM pgpace.queue e
                        WHERE e.customer_id = NEW.customer_id AND e.order_key = NEW.order_key
                          AND e.order_key IS NOT NULL AND e.attempt > 0)) THEN
        NEW.next_action_at := NULL;
    END IF;
    RETURN NEW;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.queue_order_park() FROM PUBLIC;
CREATE TRIGGER queue_order_park BEFORE INSERT ON pgpace.queue
    FOR EACH ROW WHEN (NEW.order_key IS NOT NULL AND NEW.next_action_at IS NOT NULL
                       AND NEW.claim_token IS NULL)
    EXECUTE FUNCTION pgpace.queue_order_park();

CREATE FUNCTION pgpace.queue_order_parked() RETURNS trigger
LANGUAGE plpgsql
-- A producer's commit runs it with the producer's rights, which do not reach the queue.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgpace.order_settle(NEW.customer_id, NEW.order_key);
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.queue_order_parked() FROM PUBLIC;
CREATE CONSTRAINT TRIGGER queue_order_parked AFTER INSERT ON pgpace.queue
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.order_key IS NOT NULL AND NEW.next_action_at IS NULL)
    EXECUTE FUNCTION pgpace.queue_order_parked();

CREATE FUNCTION pgpace.queue_order_unpark() RETURNS trigger
LANGUAGE plpgsql
-- A producer's commit runs it with the producer's rights, which do not reach the queue.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgpace.order_settle(OLD.customer_id, OLD.order_key);
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.queue_order_unpark() FROM PUBLIC;
CREATE TRIGGER queue_order_unpark AFTER DELETE ON pgpace.queue
    FOR EACH ROW WHEN (OLD.order_key IS NOT NULL)
    EXECUTE FUNCTION pgpace.queue_order_unpark();

-- The leader's part: the keys noted above, oldest first, up to max_keys; each is unparked if
-- its lowest item is parked, once its bucket lock is free (otherwise it waits for the next
-- run). Returns the (customer, carrier) pairs it made due.
CREATE FUNCTION pgpace.order_recheck_run(max_keys integer)
RETURNS TABLE (customer_id bigint, carrier text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT o.customer_id, o.order_key FROM pgpace.order_recheck o
              ORDER BY o.noted_at LIMIT max_keys FOR UPDATE SKIP LOCKED LOOP
        CONTINUE WHEN NOT pgpace.order_try_lock(r.customer_id, r.order_key);
        DELETE FROM pgpace.order_recheck o
         WHERE o.customer_id = r.customer_id AND o.order_key = r.order_key;
        IF pgpace.order_unpark(r.customer_id, r.order_key) THEN
            RETURN QUERY SELECT q.customer_id, q.carrier FROM pgpace.queue q
                          WHERE q.customer_id = r.customer_id AND q.order_key = r.order_key
                            AND q.attempt = 0
                          ORDER BY q.item_id LIMIT 1;
        END IF;
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.order_recheck_run(integer) FROM PUBLIC;

-- The items parked behind their keys' heads, per endpoint: what `pgpace stats`, /metrics and
-- the status page count as waiting in order (they are out of the claim index, which the
-- queue's other counts read).
CREATE INDEX queue_parked ON pgpace.queue (customer_id) WHERE next_action_at IS NULL;
