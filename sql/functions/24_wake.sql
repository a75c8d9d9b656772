-- 24_wake.sql - how the enqueue paths wake the leader: NOTIFY when it is cold, a row of
-- pgpace.wake when it is hot (0024_wake.sql says why). Repeatable, like every function file.
--
-- The protocol (K is the advisory lock (-743652652, 0), hashtext('pgpace.wake')):
-- - A producer, in READ COMMITTED, takes K shared for the rest of its transaction, and only then
--   reads wake_state in a new statement. Hot: it appends "<customer id> <carrier>" to its
--   backend's row. Cold (or no row): it notifies, as before.
-- - The leader turns hot by writing hot_until (and polls from then on); it turns cold with
--   pgpace.wake_cold(): hot_until in the past and, in the same transaction, K taken exclusively
--   without waiting. Taken: no producer is between its reading of wake_state and its commit,
--   so every row of a producer that read "hot" is committed, and the leader's next poll (a
--   later statement) reads it; every producer from now on reads "cold" (it waits for K until
--   this transaction has committed, then reads). Not taken: a producer is in flight; the
--   leader stays hot and polls on.
-- - REPEATABLE READ and SERIALIZABLE producers always notify: their snapshot may predate the
--   leader's turning cold, so what they read of wake_state could be stale.
-- - The leader finds new rows by their xmin: a row written after its last poll has an xmin no
--   older than that poll's snapshot xmin. Within a row, seq tells which entries are new; a row
--   keeps its last WAKE_KEEP (64) entries, and a leader that finds more than that missed wakes
--   the pairs by a backstop scan instead.

-- Wake the leader for a (customer, carrier) pair whose item this transaction queued. The same
-- pair twice in a row within a transaction (a producer's loop) is written once: the
-- transaction-local setting pgpace.wake_last remembers it (and forgets it with a rolled-back
-- savepoint, as the row does).
CREATE OR REPLACE FUNCTION pgpace.wake_leader(cust_id bigint, carrier text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pair text := cust_id::text || ' ' || carrier;
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        IF current_setting('pgpace.wake_last', true) = pair THEN
            RETURN;
        END IF;
        PERFORM pg_advisory_xact_lock_shared(-743652652, 0);
        IF EXISTS (SELECT 1 FROM pgpace.wake_state s WHERE s.hot_until > statement_timestamp()) THEN
            UPDATE pgpace.wake w
               SET seq = w.seq + 1,
                   pairs = (w.pairs || pair)[greatest(cardinality(w.pairs) - 62, 1):]
             WHERE w.backend = pg_backend_pid();
            IF NOT FOUND THEN
                INSERT INTO pgpace.wake (backend, seq, pairs) VALUES (pg_backend_pid(), 1, ARRAY[pair]);
            END IF;
            PERFORM set_config('pgpace.wake_last', pair, true);
            RETURN;
        END IF;
    END IF;
    PERFORM pg_notify('pgpace_enqueue', pair);
END
$$;

-- The leader turns cold: true when no producer can still leave a row it has not read (see
-- above); its next poll then reads the last ones.
CREATE OR REPLACE FUNCTION pgpace.wake_cold()
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgpace.wake_state SET hot_until = '-infinity';
    RETURN pg_try_advisory_xact_lock(-743652652, 0);
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.wake_leader(bigint, text), pgpace.wake_cold() FROM PUBLIC;
