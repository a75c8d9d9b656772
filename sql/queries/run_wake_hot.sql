-- The leader is hot (24_wake.sql): producers leave their wake-ups in pgpace.wake until
-- hot_until, which the leader moves on while it stays hot (wake.c).
-- @params: lease_ms
INSERT INTO pgpace.wake_state (one, hot_until)
VALUES (true, statement_timestamp() + $1::integer * interval '1 millisecond')
ON CONFLICT (one) DO UPDATE SET hot_until = excluded.hot_until
