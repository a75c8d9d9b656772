-- @params: version name checksum
INSERT INTO pgpace.schema_migration (version, name, checksum) VALUES ($1, $2, $3)
