-- @params: digest
INSERT INTO pgpace.schema_function_digest AS d (digest) VALUES ($1)
ON CONFLICT (one) DO UPDATE SET digest = EXCLUDED.digest, applied_at = now()
