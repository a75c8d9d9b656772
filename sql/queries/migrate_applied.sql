-- @params:
-- @columns: version name checksum
SELECT version, name, checksum FROM pgpace.schema_migration ORDER BY version
