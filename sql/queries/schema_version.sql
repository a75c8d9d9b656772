-- The database's schema version (0 when pgpace was never migrated into it) and the digest of the
-- function files `pgpace migrate` applied last (migrate_functions_digest() of that binary; NULL
-- when none was recorded: never migrated, or migrated only by a pgpace from before
-- sql/functions). Either table may be missing, and a statement that names a missing table fails
-- before it runs, so both are read through table_to_xml(), which takes the table as a value (NULL
-- when missing). The XML is matched as text, which needs no XML support in the server.
-- @params:
-- @columns: version functions_digest
SELECT coalesce((SELECT max(m[1]::integer)
                   FROM regexp_matches(table_to_xml(to_regclass('pgpace.schema_migration'),
                                                    false, false, '')::text,
                                       '<version>([0-9]+)</version>', 'g') AS m), 0) AS version,
       substring(table_to_xml(to_regclass('pgpace.schema_function_digest'), false, false, '')::text
                 FROM '<digest>([0-9a-f]{64})</digest>') AS functions_digest
