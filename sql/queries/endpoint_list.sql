-- `pgpace endpoint list CUSTOMER` (and the endpoints `customer get` shows): pgpace.endpoint_list.
-- @params: customer
-- `rate` is '-' for an endpoint paced by its limit windows alone.
-- @columns: endpoint url mode rate events filter state queued limits
SELECT l.endpoint, l.url, l.mode, coalesce(l.rate::text, '-') AS rate, l.events, l.filter,
       l.state, l.queued, l.limits
  FROM pgpace.endpoint_list($1::text) l
