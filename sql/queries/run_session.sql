-- Session settings of the dispatcher's connection, applied on every (re)connect and reload.
-- JIT off: the claim's cost estimate grows with table size and crosses jit_above_cost, and
-- compiling then dominates (measured at 1M due rows: 1,445 ms with JIT, 65 ms without).
-- statement_timeout ($1, ms): a statement stuck behind a lock or a sick server fails with
-- SQLSTATE 57014 and is retried, instead of holding the pipeline until the watchdog resets it.
SELECT set_config('jit', 'off', false), set_config('statement_timeout', $1::integer::text, false)
