-- 24_wake.sql - how the enqueue paths wake the leader: NOTIFY when it is cold, a row of
-- pgpace.wake when it is hot (0024_wake.sql says why). Repeatable, like every function file.
--
-- The protocol (K is the advisory lock (-743652652, 0), hashtext('pgpace.wake')):
-- - A producer, in READ COMMITTED, that finds the lease running takes K shared for the rest of
--   its transaction, and only then reads wake_state again in a new statement. Hot: it appends
--   "<customer id> <carrier>" to its backend's row. Cold (or no row): it notifies, as before.
-- - The leader turns hot by writing hot_until (and polls from then on); it turns cold with
--   pgpace.wake_cold(): hot_until in the past and, in the same transaction, K taken exclusively
--   without waiting. Taken: no producer is between its reading of wake_state and its commit,
--   so every row of a producer that read "hot" is committed, and the leader's next poll (a
--   later statement) reads it; every producer from now on reads "cold" (it waits for K until
--   this transaction has committed, then reads). Not taken: a producer is in flight; the
--   lease stays ended (new producers notify), and the leader polls on, more slowly, and tries
--   again. A transaction left open (idle in transaction, or PREPAREd: with a row written, a
--   producer can prepare, with a NOTIFY it cannot) holds the leader there until it ends. A
--   backend whose prepared transaction still holds its row notifies until that one ends (the
--   row's advisory lock (-743652652, pid), taken without waiting, says so).
-- - REPEATABLE READ and SERIALIZABLE producers always notify: their snapshot may predate the
--   leader's turning cold, so what they read of wake_state could be stale.
-- - The leader finds new rows by their xmin: a row written after its last poll has an xmin no
--   older than that poll's snapshot xmin. Within a row, seq tells which entries are new; a row
--   keeps its last WAKE_KEEP (64) entries, and a leader that finds more than that missed wakes
--   the pairs by a backstop scan instead.

-- Wake the leader for a (customer, carrier) pair whose item this transaction queued.
-- - The lease is read first, without the lock: a producer that reads "cold" notifies and does
--   not depend on the leader's polls, so it holds nothing the leader's barrier waits for.
-- - A transaction writes its row at most 8 times (pgpace.wake_writes) and notifies for the
--   pairs after that: a row updated again and again within one transaction is a chain of
--   versions each update walks (20,000 updates took 30 s), and one NOTIFY costs such a big
--   transaction little. The same pair twice in a row (a producer's loop) is written once
--   (pgpace.wake_last). Both settings are transaction-local, and a rolled-back savepoint takes
--   them back with the row.
CREATE OR REPLACE FUNCTION pgpace.wake_leader(cust_id bigint, carrier text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pair   text := cust_id::text || ' ' || carrier;
    writes integer;
BEGIN
    IF current_setting('transaction_isolation') = 'read committed'
       AND EXISTS (SELECT 1 FROM pgpace.wake_state s WHERE s.hot_until > statement_timestamp()) THEN
        IF current_setting('pgpace.wake_last', true) = pair THEN
            RETURN;
        END IF;
        writes := coalesce(nullif(current_setting('pgpace.wake_writes', true), ''), '0')::integer;
        -- The row's own lock, without waiting: this backend's last transaction may have been
        -- PREPAREd after writing the row, and still holds it (then this one notifies).
        IF writes < 8 AND pg_try_advisory_xact_lock(-743652652, pg_backend_pid()) THEN
            PERFORM pg_advisory_xact_lock_shared(-743652652, 0);
            -- Again, now that the leader cannot turn cold before this transaction ends.
            IF EXISTS (SELECT 1 FROM pgpace.wake_state s WHERE s.hot_until > statement_timestamp()) THEN
                UPDATE pgpace.wake w
                   SET seq = w.seq + 1,
                       pairs = (w.pairs || pair)[greatest(cardinality(w.pairs) - 62, 1):]
                 WHERE w.backend = pg_backend_pid();
                IF NOT FOUND THEN
                    INSERT INTO pgpace.wake (backend, seq, pairs) VALUES (pg_backend_pid(), 1, ARRAY[pair]);
                END IF;
                PERFORM set_config('pgpace.wake_last', pair, true),
                        set_config('pgpace.wake_writes', (writes + 1)::text, true);
                RETURN;
            END IF;
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
