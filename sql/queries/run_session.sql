-- Session settings of the dispatcher's connection, applied on every (re)connect and reload.
-- JIT off: the claim's cost estimate grows with table size and crosses jit_above_cost, and
-- compiling then dominates (measured at 1M due rows: 1,445 ms with JIT, 65 ms without).
-- statement_timeout ($1, ms): a statement stuck behind a lock or a sick server fails with
-- SQLSTATE 57014 and is retried, instead of holding the pipeline until the watchdog resets it.
-- 0 leaves it as the server, database or role sets it (its reset value, so a reload from a
-- non-zero value to 0 gives that default back).
-- @params: statement_timeout_ms
SELECT set_config('jit', 'off', false),
       set_config('statement_timeout',
                  CASE WHEN $1::integer > 0 THEN $1::integer::text
                       ELSE (SELECT reset_val FROM pg_settings WHERE name = 'statement_timeout')
                  END, false)
