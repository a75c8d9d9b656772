-- The customer's egress proxy (`customer set --proxy`): URL, 'direct' or 'default' (NULL).
SELECT pgpace.customer_set_proxy($1, $2)
