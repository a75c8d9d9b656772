-- Marks operator events handled ($1 ids, $2 their times in epoch us).
-- @params: ids at_us
-- @columns: handled
SELECT pgpace.events_handled($1::bigint[], $2::bigint[]) AS handled
