-- The leader's read connection (src/dispatch/housekeeping.c) is read-only for its life: its
-- passes only read, and a write sent there by mistake would not be fenced by the leader lock,
-- which the claim connection's session holds. Applied on every (re)connect, after
-- run_session.sql.
-- @params:
-- @columns: read_only
SELECT set_config('default_transaction_read_only', 'on', false) AS read_only
