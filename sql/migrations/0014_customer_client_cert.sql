-- 0014_customer_client_cert.sql - mutual TLS per customer: the client certificate (PEM, the
-- leaf first, then any intermediates) and its private key (PEM, unencrypted) that the
-- dispatcher presents to receivers that require one.
--
-- Both are secrets like the signing secrets and the receiver credentials: pgpace_producer has
-- no SELECT on this table (and gets none here), the dispatcher never logs them, and `pgpace
-- customer get` shows only the certificate's subject, issuer, validity and fingerprint (the
-- key only with --show-secrets). They are written through pgpace.customer_set_client_cert
-- (sql/functions/08_customer.sql), which names the field it refuses; the real checks (the
-- certificate parses, the key matches it, it is valid now) are OpenSSL's, made by `pgpace
-- customer set` before it writes, and again by the dispatcher when it loads the customer. The
-- constraints below hold what a direct writer could break and the sender relies on: both or
-- neither, bounded, PEM armour present.
ALTER TABLE pgpace.customer
    ADD COLUMN client_cert text,
    ADD COLUMN client_key text,
    ADD CONSTRAINT customer_client_cert_valid
        CHECK ((client_cert IS NULL) = (client_key IS NULL)
               AND (client_cert IS NULL
                    OR (octet_length(client_cert) <= 65536
                        AND octet_length(client_key) <= 65536
                        AND strpos(client_cert, '-----BEGIN CERTIFICATE-----') > 0
                        AND client_key ~ '-----BEGIN [A-Z ]*PRIVATE KEY-----')));
