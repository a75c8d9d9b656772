-- 11_instance.sql - running pgpace instances and the leader.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Running pgpace instances and which one leads (holds the leader advisory lock, class 'pgpa'
-- = 1885827169, key 2). Instances set application_name to 'pgpace:<instance name>'.
CREATE OR REPLACE VIEW pgpace.instance AS
SELECT substr(a.application_name, 8) AS instance, a.pid, a.client_addr, a.backend_start,
       EXISTS (SELECT 1 FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.database = a.datid AND l.pid = a.pid
                  AND l.classid = 1885827169 AND l.objid = 2 AND l.objsubid = 2 AND l.granted)
           AS leader
  FROM pg_stat_activity a
 WHERE a.application_name LIKE 'pgpace:%' AND a.datname = current_database();

CREATE OR REPLACE VIEW pgpace.leader AS SELECT * FROM pgpace.instance WHERE leader;
