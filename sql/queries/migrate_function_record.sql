-- @params: name checksum
INSERT INTO pgpace.schema_function AS f (name, checksum) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()
