-- 0011_recover.sql - what the leader publishes of its configuration, for SQL that needs it.
--
-- pgpace.estimate_send_time (sql/functions/13_estimate.sql) and the backlog of batch customers
-- in pgpace.customer_stats depend on the dispatcher's batch tick, `dispatcher.batch_tick_ms`:
-- configuration, not data, and each instance may have its own file. What counts is the
-- configuration of the instance that dispatches, so the leader writes it here when it takes the
-- lead and again on every reload (sql/queries/run_publish.sql). One row; none until a leader
-- ran, and readers then assume the default (60000). A table, not a pgpace.setting row: settings
-- are what operators set for every path to agree on, this is what the leader reports.
CREATE TABLE pgpace.leader_config (
    singleton     boolean PRIMARY KEY DEFAULT true CONSTRAINT leader_config_singleton CHECK (singleton),
    batch_tick_ms integer NOT NULL
                  CONSTRAINT leader_config_batch_tick_valid CHECK (batch_tick_ms BETWEEN 100 AND 3600000),
    instance      text NOT NULL,
    written_at    timestamptz NOT NULL DEFAULT now()
);
