-- catalog_dump.sql - everything the catalog holds about schema pgpace, one sorted text line per
-- fact, for comparing two databases (test_migrate.c: an upgrade from every earlier schema
-- version against a fresh install). Run by hand with: psql -At -f tests/integration/catalog_dump.sql
--
-- Daily partitions (NAME_pYYYYMMDD) are named and bounded by the day they were made for: their
-- date is replaced by "YYYYMMDD"/"DAY" so that the lines of every day collapse into one (DISTINCT),
-- and a run across midnight compares equal. Their columns, constraints and indexes come from the
-- parent and are compared there.
WITH rel AS (
    SELECT c.oid, c.relkind, c.relname,
           regexp_replace(c.relname, '_p[0-9]{8}$', '_pYYYYMMDD') AS name,
           c.relname ~ '_p[0-9]{8}$' AND c.relispartition AS daily
      FROM pg_class c
     WHERE c.relnamespace = 'pgpace'::regnamespace
), lines AS (
    SELECT 'schema pgpace owner ' || pg_get_userbyid(n.nspowner) || ' acl ' || coalesce(n.nspacl::text, '-')
           || ' comment ' || coalesce(obj_description(n.oid, 'pg_namespace'), '-') AS line
      FROM pg_namespace n WHERE n.nspname = 'pgpace'
    UNION ALL
    -- Relations: kind, persistence, options, owner, privileges, comment, partitioning.
    SELECT format('relation %s kind %s persistence %s options %s owner %s acl %s comment %s '
                  'partition key %s partition of %s bound %s replica identity %s',
                  r.name, r.relkind, c.relpersistence, coalesce(c.reloptions::text, '-'),
                  pg_get_userbyid(c.relowner), coalesce(c.relacl::text, '-'),
                  coalesce(obj_description(c.oid, 'pg_class'), '-'),
                  coalesce(pg_get_partkeydef(c.oid), '-'),
                  coalesce((SELECT i.inhparent::regclass::text FROM pg_inherits i WHERE i.inhrelid = c.oid), '-'),
                  CASE WHEN r.daily THEN 'DAY' ELSE coalesce(pg_get_expr(c.relpartbound, c.oid), '-') END,
                  c.relreplident)
      FROM rel r JOIN pg_class c ON c.oid = r.oid
     WHERE r.relkind <> 'i'
    UNION ALL
    -- Columns, in order, with type, nullability, default, identity, generation, collation,
    -- storage, privileges and comment.
    SELECT format('column %s.%s #%s %s%s default %s identity "%s" generated "%s" collation %s '
                  'storage %s acl %s comment %s',
                  r.name, a.attname, a.attnum, format_type(a.atttypid, a.atttypmod),
                  CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                  coalesce(pg_get_expr(d.adbin, d.adrelid), '-'), a.attidentity, a.attgenerated,
                  coalesce(nullif(a.attcollation, 0)::regcollation::text, '-'), a.attstorage,
                  coalesce(a.attacl::text, '-'), coalesce(col_description(r.oid, a.attnum), '-'))
      FROM rel r
      JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE NOT r.daily AND r.relkind IN ('r', 'p', 'v', 'u', 'f', 'm')
    UNION ALL
    -- Constraints (check, unique, primary key, foreign key, exclusion), inherited or not.
    SELECT format('constraint %s on %s type %s %s deferrable %s validated %s local %s inherited %s comment %s',
                  co.conname, r.name, co.contype, pg_get_constraintdef(co.oid), co.condeferrable,
                  co.convalidated, co.conislocal, co.coninhcount,
                  coalesce(obj_description(co.oid, 'pg_constraint'), '-'))
      FROM pg_constraint co JOIN rel r ON r.oid = co.conrelid
     WHERE NOT r.daily
    UNION ALL
    SELECT format('index %s %s valid %s comment %s', r.name, pg_get_indexdef(r.oid), i.indisvalid,
                  coalesce(obj_description(r.oid, 'pg_class'), '-'))
      FROM rel r JOIN pg_index i ON i.indexrelid = r.oid
      JOIN pg_class t ON t.oid = i.indrelid
     WHERE NOT (t.relname ~ '_p[0-9]{8}$' AND t.relispartition)
    UNION ALL
    SELECT format('trigger %s on %s enabled %s %s', t.tgname, r.name, t.tgenabled,
                  pg_get_triggerdef(t.oid))
      FROM pg_trigger t JOIN rel r ON r.oid = t.tgrelid
     WHERE NOT t.tgisinternal AND NOT r.daily
    UNION ALL
    SELECT format('sequence %s type %s start %s increment %s min %s max %s cache %s cycle %s owned by %s',
                  r.name, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin,
                  s.seqmax, s.seqcache, s.seqcycle,
                  coalesce((SELECT d.refobjid::regclass::text || '.' || a.attname
                              FROM pg_depend d
                              JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                             WHERE d.classid = 'pg_class'::regclass AND d.objid = r.oid
                               AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')), '-'))
      FROM rel r JOIN pg_sequence s ON s.seqrelid = r.oid
    UNION ALL
    SELECT format('view %s %s', r.name, pg_get_viewdef(r.oid))
      FROM rel r WHERE r.relkind IN ('v', 'm')
    UNION ALL
    SELECT format('rule %s on %s %s', ru.rulename, r.name, pg_get_ruledef(ru.oid))
      FROM pg_rewrite ru JOIN rel r ON r.oid = ru.ev_class
     WHERE ru.rulename <> '_RETURN'
    UNION ALL
    SELECT format('policy %s on %s %s %s', p.polname, r.name, p.polcmd,
                  coalesce(pg_get_expr(p.polqual, p.polrelid), '-'))
      FROM pg_policy p JOIN rel r ON r.oid = p.polrelid
    UNION ALL
    -- Functions: the whole definition, owner, privileges, comment.
    SELECT format('function %s owner %s acl %s comment %s %s', p.oid::regprocedure,
                  pg_get_userbyid(p.proowner), coalesce(p.proacl::text, '-'),
                  coalesce(obj_description(p.oid, 'pg_proc'), '-'), pg_get_functiondef(p.oid))
      FROM pg_proc p WHERE p.pronamespace = 'pgpace'::regnamespace
    UNION ALL
    -- Functions and views depend on what their SQL names (standard-body functions, views);
    -- what depends on a function (defaults, checks, triggers) pins it.
    SELECT format('depends %s on %s (%s)', pg_describe_object(d.classid, d.objid, d.objsubid),
                  pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), d.deptype)
      FROM pg_depend d
     WHERE (d.refclassid = 'pg_proc'::regclass
            AND d.refobjid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'pgpace'::regnamespace))
        OR (d.classid = 'pg_proc'::regclass
            AND d.objid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'pgpace'::regnamespace))
    UNION ALL
    SELECT format('type %s kind %s owner %s acl %s', t.oid::regtype, t.typtype,
                  pg_get_userbyid(t.typowner), coalesce(t.typacl::text, '-'))
      FROM pg_type t
     WHERE t.typnamespace = 'pgpace'::regnamespace AND t.typrelid = 0 AND t.typelem = 0
)
SELECT DISTINCT regexp_replace(line, '_p[0-9]{8}', '_pYYYYMMDD', 'g') AS line FROM lines ORDER BY 1;
