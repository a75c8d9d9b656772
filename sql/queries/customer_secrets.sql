SELECT array_to_string(c.signing_secrets, ' ') FROM pgpace.customer c WHERE c.name = $1
