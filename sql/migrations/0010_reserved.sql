-- 0010: reserved for a colleague's migration of issue 14 (this branch only: drop this file and
-- its sql/meson.build line when merging; the real 0010 takes its place). Migration numbers
-- must be contiguous, so 0011_recover.sql needs 0009 and 0010 to exist to build on its own.
SELECT 1;
