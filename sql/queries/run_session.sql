-- Session settings of the dispatcher's connection, applied on every (re)connect.
-- JIT off: the claim's cost estimate grows with table size and crosses jit_above_cost, and
-- compiling then dominates (measured at 1M due rows: 1,445 ms with JIT, 65 ms without).
SELECT set_config('jit', 'off', false)
