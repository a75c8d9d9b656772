-- 0008_throttle.sql - pacing that listens to the receiver: a receiver that answers 429 (or 503
-- with Retry-After) lowers its customer's effective rate multiplicatively, and each successful
-- delivery raises it again additively, up to rate_per_minute. Tables only (README: from 0008
-- on, functions and views live in sql/functions/).

-- Per-customer overrides of the [delivery] throttle_* settings; NULL: the dispatcher's
-- configured value. The ranges are those of the config keys. NaN compares greater than every
-- number in PostgreSQL, so each upper bound also rejects NaN (and infinity).
ALTER TABLE pgpace.customer
    ADD COLUMN throttle_decrease double precision
        CONSTRAINT customer_throttle_decrease_valid
        CHECK (throttle_decrease > 0 AND throttle_decrease < 1),
    ADD COLUMN throttle_increase double precision
        CONSTRAINT customer_throttle_increase_valid
        CHECK (throttle_increase > 0 AND throttle_increase <= 1),
    ADD COLUMN throttle_floor double precision
        CONSTRAINT customer_throttle_floor_valid
        CHECK (throttle_floor > 0 AND throttle_floor <= 1);

-- The effective rate per minute the leader paces a customer at, kept with the rest of its
-- scheduler state so a new leader resumes it; NULL: rate_per_minute. UNLOGGED like the rest of
-- frontier: after a crash every customer starts again at its configured rate.
ALTER TABLE pgpace.frontier
    ADD COLUMN effective_rate double precision
        CONSTRAINT frontier_effective_rate_valid
        CHECK (effective_rate > 0 AND effective_rate < 'Infinity'::float8);

-- A throttled attempt is logged with its own outcome (it does not count toward max_attempts).
-- The new set only adds a value, so every existing row satisfies it: NOT VALID skips scanning
-- the whole attempt log (every daily partition) under the ACCESS EXCLUSIVE lock this takes,
-- which would hold up every finalisation that long. New rows are checked all the same, and
-- partitions created from now on carry it validated.
ALTER TABLE pgpace.delivery_attempt
    DROP CONSTRAINT delivery_attempt_outcome_valid,
    ADD CONSTRAINT delivery_attempt_outcome_valid
        CHECK (outcome IN ('success', 'retry', 'dead', 'paused', 'released', 'throttled')) NOT VALID;
