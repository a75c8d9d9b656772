-- The leader handled operator events ($1: logged and posted, or logged when there is no
-- operator webhook) or the webhook refused them ($2: tried again later); pgpace.events_posted.
-- @params: handled_ids refused_ids
-- @columns: handled
SELECT pgpace.events_posted($1::bigint[], $2::bigint[]) AS handled
