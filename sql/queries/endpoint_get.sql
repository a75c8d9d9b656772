-- What `pgpace endpoint get` shows besides the receiver settings (customer_get.sql on the
-- endpoint's full name): its subscription, filter, state and queued deliveries.
-- @params: customer endpoint
-- @columns: events filter state queued
SELECT l.events, l.filter, l.state, l.queued
  FROM pgpace.endpoint_list($1::text) l WHERE l.endpoint = $2::text
