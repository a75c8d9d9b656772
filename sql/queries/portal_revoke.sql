-- `pgpace portal-link CUSTOMER --revoke`: voids every link of the customer given out so far.
-- @params: customer
-- @columns: generation
SELECT pgpace.portal_revoke($1::text) AS generation
