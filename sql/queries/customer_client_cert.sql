-- Sets ($2 certificate, $3 key; PEM) or removes (NULL, NULL) a customer's client certificate
-- for mutual TLS. `customer set` runs it in the same transaction as customer_set.sql, after
-- checking both with OpenSSL.
-- @params: name cert_pem key_pem
SELECT pgpace.customer_set_client_cert($1, $2, $3)
