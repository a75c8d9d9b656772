-- 0012_trace_context.sql - an item may carry a W3C Trace Context (traceparent, tracestate),
-- given at enqueue and sent with each of its webhooks as the headers of those names. Tables
-- only (README: from 0008 on, functions live in sql/functions/); the enqueue functions whose
-- signatures change are dropped here and created again by their files in the same `migrate`
-- run (05_enqueue.sql also grants EXECUTE on pgpace.enqueue to pgpace_producer again).

-- Nullable without default: adding them rewrites nothing.
ALTER TABLE pgpace.item
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate text;

-- A second line of defence behind pgpace.trace_context_error (05_enqueue.sql), which checks
-- the full W3C grammar and names the fault: the shape of a traceparent, and for tracestate
-- what makes it safe to send as a header (printable ASCII, spaces and tabs only inside, at
-- most 512 characters, and only beside a traceparent). NOT VALID: every existing row has
-- NULL in both new columns, so the ACCESS EXCLUSIVE lock need not be held for a scan of the
-- whole item table; new and updated rows are checked all the same.
ALTER TABLE pgpace.item
    ADD CONSTRAINT item_traceparent_valid CHECK (traceparent IS NULL OR (
        length(traceparent) <= 256
        AND traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[!-~]*)?$'
        AND left(traceparent, 2) <> 'ff'
        AND (left(traceparent, 2) <> '00' OR length(traceparent) = 55)
        AND substr(traceparent, 4, 32) <> repeat('0', 32)
        AND substr(traceparent, 37, 16) <> repeat('0', 16))) NOT VALID,
    -- Spelled out with IS NULL: "traceparent IS NOT NULL" is false, not NULL, for an item
    -- without either, and would fail it.
    ADD CONSTRAINT item_tracestate_valid CHECK (tracestate IS NULL OR (
        length(tracestate) BETWEEN 1 AND 512
        AND tracestate !~ '[^\t -~]'
        AND tracestate !~ '^[\t ]|[\t ]$'
        AND traceparent IS NOT NULL)) NOT VALID;

-- The new enqueue parameters (traceparent, tracestate) change pgpace.enqueue's and
-- pgpace.enqueue_item's signatures: 05_enqueue.sql drops the old ones itself, in the transaction
-- that creates the new ones, so that no moment between two migrations lacks an enqueue.
