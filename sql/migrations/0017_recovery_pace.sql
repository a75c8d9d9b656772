-- 0017_recovery_pace.sql - the pace `pgpace recover --rate R` puts on the sends of a customer's
-- recovered items, so that R is a limit on sends and not only on due times.
--
-- Recovered items are the queue rows of priority -32768 (the recovery lane, reserved for them:
-- sql/functions/12_recover.sql). Spacing only their due times let them go out faster than R:
-- one held behind live traffic was followed at once by the next, already due. A customer with a
-- row here has its recovered items claimed only as this GCRA cell (no burst: one send every
-- 60/rate_per_minute seconds) allows, in the claim statement itself (sql/queries/run_claim.sql),
-- and the dispatcher sends none of them less than that after the previous one (README,
-- "Recovering a time range").
--
-- A logged table, unlike pgpace.frontier: the rate is what an operator asked for, and the cell
-- is written only by rounds that take a recovered item (at most R a minute), so keeping it
-- across a crash costs little and the bound then holds across a crash too.
--
-- One row per customer, written by pgpace.recover: its rate (replaced by a later recovery with
-- --rate) and tat, the earliest time the next recovered item may be sent (NULL: none sent yet).
-- Deleting the customer deletes it.
CREATE TABLE IF NOT EXISTS pgpace.recovery_pace (
    customer_id     bigint PRIMARY KEY REFERENCES pgpace.customer (id) ON DELETE CASCADE,
    -- NaN compares greater than every number, so the upper bound rejects it too.
    rate_per_minute double precision NOT NULL
                    CONSTRAINT recovery_pace_rate_valid
                    CHECK (rate_per_minute >= 0.0001 AND rate_per_minute < 'Infinity'::float8),
    tat             timestamptz,
    set_at          timestamptz NOT NULL DEFAULT now()
);
