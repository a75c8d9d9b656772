-- `pgpace recover`: one of its timestamps (--since, --until) read as PostgreSQL reads it, so a
-- value that does not parse is reported with the flag that gave it, before anything runs.
-- @params: value
-- @columns: t
SELECT $1::timestamptz AS t
