-- 0009_reserved.sql - PLACEHOLDER on the expiry branch only: migration numbers must be
-- contiguous, and 0009 belongs to another branch of issue 14. Drop this file when merging that
-- branch's 0009 (it changes nothing).
SELECT 1;
