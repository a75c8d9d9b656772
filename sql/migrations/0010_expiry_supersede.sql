-- 0010_expiry_supersede.sql - deadlines (an item not sent by its deadline is dead-lettered as
-- 'expired', never sent late) and coalescing (a newer item for the same customer and
-- supersede_key replaces the payload of a queued, never claimed one). Tables only (README: from
-- 0008 on, functions and views live in sql/functions/); the enqueue functions whose signatures
-- change are dropped here and created again by their files in the same `migrate` run.

-- The longest an item of this customer may wait once due (counted from its run_at, or its
-- enqueue when that is later); NULL: no limit. Bounded so that a typo ('3000 days') cannot
-- keep items forever under a limit that looks set, and positive: a zero age would expire
-- everything at once. Applies to items enqueued after it is set (their deadline is computed
-- at enqueue and stored in queue.expires_at).
ALTER TABLE pgpace.customer
    ADD COLUMN max_age interval
        CONSTRAINT customer_max_age_valid
        CHECK (max_age > interval '0' AND max_age <= interval '365 days');

-- The producer's own deadline, as enqueued (the record; the queue row carries the effective
-- one). Nullable without default: adding it rewrites nothing.
ALTER TABLE pgpace.item ADD COLUMN expires_at timestamptz;

-- expires_at: the effective deadline, least(item's expires_at, due time + customer max_age),
--   fixed at enqueue; NULL: none. The claim skips rows past it, the dispatcher checks it again
--   right before each request, and the leader's sweep dead-letters the rows past it.
-- supersede_key: set only while the item has never been claimed; the claim clears it, so a
--   newer item with the same key supersedes only what no receiver can have seen (a retried
--   item's webhook-id may already be known to the receiver, which would then drop the newer
--   payload as a duplicate).
ALTER TABLE pgpace.queue
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN supersede_key text
        CONSTRAINT queue_supersede_key_valid CHECK (length(supersede_key) BETWEEN 1 AND 255);

-- The sweep's index: only rows with a deadline, read in deadline order from the oldest.
CREATE INDEX queue_expires ON pgpace.queue (expires_at) WHERE expires_at IS NOT NULL;
-- At most one supersedable (never claimed) item per customer and key; a concurrent second
-- producer waits on it (the unique check) and then supersedes the first one's item.
CREATE UNIQUE INDEX queue_supersede ON pgpace.queue (customer_id, supersede_key)
    WHERE supersede_key IS NOT NULL;

-- An item that was not sent by its deadline is logged with its own outcome. As in 0008, the
-- set only grows, so every existing row satisfies it: NOT VALID skips scanning the whole
-- attempt log under the ACCESS EXCLUSIVE lock this takes.
ALTER TABLE pgpace.delivery_attempt
    DROP CONSTRAINT delivery_attempt_outcome_valid,
    ADD CONSTRAINT delivery_attempt_outcome_valid
        CHECK (outcome IN ('success', 'retry', 'dead', 'paused', 'released', 'throttled',
                           'expired')) NOT VALID;

-- New parameters (expires_at, supersede_key) and result columns: CREATE OR REPLACE cannot
-- change a signature, so the old ones go; 05-07 create the new ones (and grant EXECUTE to
-- pgpace_producer again) in this same run.
DROP FUNCTION pgpace.enqueue(text, jsonb, text, text, timestamptz, text, integer);
DROP FUNCTION pgpace.enqueue_json(jsonb);
DROP FUNCTION pgpace.enqueue_bulk();
