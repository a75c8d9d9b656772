-- A migration whose comments were revised: its record moves from the former checksum to the
-- current one (src/migrate.c, comment_revisions).
-- @params: version former_checksum checksum
UPDATE pgpace.schema_migration SET checksum = $3 WHERE version = $1 AND checksum = $2
