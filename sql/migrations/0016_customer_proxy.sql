-- 0016_customer_proxy.sql - a customer's egress proxy choice, overriding [delivery] proxy.
--
-- NULL: the configured proxy (and its no_proxy list); 'direct': never through a proxy; else
-- the customer's own proxy, "http://HOST:PORT" (no credentials: nothing secret is stored
-- here). Written through pgpace.customer_set_proxy (sql/functions/08_customer.sql), which
-- checks the URL and names the field it refuses; the constraint holds what a direct writer
-- could break and the sender relies on (the shape, no control character or line break).
ALTER TABLE pgpace.customer
    ADD COLUMN proxy text
        CONSTRAINT customer_proxy_valid
        CHECK (proxy = 'direct'
               OR (octet_length(proxy) <= 255
                   AND proxy ~ '^http://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}/?$'));
