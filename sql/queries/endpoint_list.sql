-- `pgpace endpoint list CUSTOMER` (and the endpoints `customer get` shows): pgpace.endpoint_list.
-- @params: customer
-- @columns: endpoint url mode rate events filter state queued
SELECT l.endpoint, l.url, l.mode, l.rate, l.events, l.filter, l.state, l.queued
  FROM pgpace.endpoint_list($1::text) l
