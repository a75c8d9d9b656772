-- Highest applied migration, or 0 when pgpace was never migrated into this database.
SELECT CASE WHEN to_regclass('pgpace.schema_migration') IS NULL THEN 0
            ELSE (SELECT coalesce(max(version), 0) FROM pgpace.schema_migration) END
