-- Cold, and the last rows read: no producer writes pgpace.wake until the leader is hot again, so
-- its rows (some of backends long gone) are dropped and the next hot spell starts empty.
-- @params:
DELETE FROM pgpace.wake
