-- The leader turns cold (24_wake.sql): true when no producer can still leave a row unread; the
-- leader's next poll then reads the last ones.
-- @params:
-- @columns: cold
SELECT pgpace.wake_cold() AS cold
