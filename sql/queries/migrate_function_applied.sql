-- @params:
-- @columns: name checksum
SELECT name, checksum FROM pgpace.schema_function ORDER BY name
