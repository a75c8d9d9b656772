-- The server's clock, for the dispatcher's timebase (src/timebase.h): clock_timestamp(), the
-- time it is read, not the transaction's start.
-- @params:
-- @columns: server_us
SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS server_us
