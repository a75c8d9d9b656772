-- `pgpace stats`: JIT off for its session, as the dispatcher's (run_session.sql): the
-- per-customer counts of pgpace.customer_stats read each queue and dead-letter index under a
-- limit the planner cannot see, which it costs as a large scan, past jit_above_cost; compiling
-- the statement then took a second or two, running it a few milliseconds (and --watch runs it
-- every second).
-- @columns: jit
SELECT set_config('jit', 'off', false) AS jit
