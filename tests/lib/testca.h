/* testca.h - a private PKI made at test time with OpenSSL's APIs (no openssl command needed):
 * a CA, a server certificate for 127.0.0.1 and client certificates, written as PEM files to a
 * fresh temporary directory.
 *
 * Contract: testca_make() creates the directory and every file below (EC P-256 keys, SHA-256
 * signatures, random serials) and returns 0, or -1 with a message on stderr. Validity is
 * counted from the moment of the call: "valid" certificates from an hour ago to 30 days ahead,
 * the expired one ended a day ago, the future one starts in a day. testca_remove() deletes the
 * files and the directory. Paths are absolute, NUL-terminated.
 */
#ifndef PGPACE_TESTCA_H
#define PGPACE_TESTCA_H

#define TESTCA_PATH 160

typedef struct testca {
    char dir[TESTCA_PATH];
    char ca_cert[TESTCA_PATH]; /* CN "pgpace test CA": the trust anchor of both sides */
    char server_cert[TESTCA_PATH], server_key[TESTCA_PATH]; /* CN "localhost", SAN IP 127.0.0.1 */
    char client_a_cert[TESTCA_PATH], client_a_key[TESTCA_PATH]; /* CN "client-a" */
    char client_b_cert[TESTCA_PATH], client_b_key[TESTCA_PATH]; /* CN "client-b" */
    /* CN "client-chain", issued by an intermediate CA the server does not know: the file holds
     * the leaf then the intermediate, so the server can build the chain. */
    char chain_cert[TESTCA_PATH], chain_key[TESTCA_PATH];
    char expired_cert[TESTCA_PATH], expired_key[TESTCA_PATH]; /* CN "client-expired" */
    char future_cert[TESTCA_PATH], future_key[TESTCA_PATH];   /* CN "client-future" */
    /* CN "client-foreign", signed by another CA ("other test CA") the server does not trust. */
    char foreign_cert[TESTCA_PATH], foreign_key[TESTCA_PATH];
    char stray_key[TESTCA_PATH];     /* a key that matches none of the certificates */
    char encrypted_key[TESTCA_PATH]; /* client-a's key, encrypted (AES-256, "pass phrase") */
    char rsa_key[TESTCA_PATH], rsa_cert[TESTCA_PATH]; /* CN "client-rsa": a traditional
                                                         "BEGIN RSA PRIVATE KEY" file */
} testca;

int testca_make(testca *ca);
void testca_remove(const testca *ca);

#endif
