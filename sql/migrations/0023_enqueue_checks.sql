-- 0023_enqueue_checks.sql - a single enqueue without re-reading eight CHECK expressions (issue 34).
--
-- PostgreSQL prepares a table's CHECK constraints anew for every INSERT statement: it reads each
-- one's stored expression tree back from text (stringToNode) and plans it, and a plpgsql
-- function's INSERT is a new statement on every call. The eight CHECKs on pgpace.item and the
-- two on pgpace.queue were 13.6 kB and 2.7 kB of such text; preparing them took 95 us and 26 us
-- of a single enqueue's 136 us (perf: ExecConstraints -> stringToNode -> nodeRead; timed with
-- 5,000 INSERTs in a loop with and without them: bench/ENQUEUE.md).
--
-- They repeated, column by column, what every enqueue path checks before it inserts (with the
-- messages producers see): pgpace.enqueue_item, pgpace.enqueue_bulk and the functions they share
-- (pgpace.valid_name, pgpace.order_key_error, pgpace.trace_context_error). Those are the one
-- place of these rules now. The trace context keeps a table CHECK, because its values go to
-- receivers as HTTP headers: one constraint that calls the enqueue's own rule, and only when
-- there is a trace context (a few hundred bytes of tree; the function runs for traced items
-- only): item_trace_context_valid, added by 05_enqueue.sql after the function it calls (this
-- migration runs before the function files, in the same transaction when it is the last). The
-- sender refuses unsafe header values once more before it sends (http_sender.c). The
-- structural checks (fanout, payload_present) stay.
ALTER TABLE pgpace.item
    DROP CONSTRAINT item_kind_valid,
    DROP CONSTRAINT item_carrier_valid,
    DROP CONSTRAINT item_idempotency_key_valid,
    DROP CONSTRAINT item_order_key_valid,
    DROP CONSTRAINT item_traceparent_valid,
    DROP CONSTRAINT item_tracestate_valid;
ALTER TABLE pgpace.queue
    DROP CONSTRAINT queue_order_key_valid,
    DROP CONSTRAINT queue_supersede_key_valid;
