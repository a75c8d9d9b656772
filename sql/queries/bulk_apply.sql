-- bulk_apply.sql - `pgpace enqueue --file`: enqueue the lines COPYed into pgpace_bulk (see
-- pgpace.enqueue_bulk for what each count is).
-- @columns: inserted duplicates superseded expired events deliveries unmatched
SELECT inserted, duplicates, superseded, expired, events, deliveries, unmatched
  FROM pgpace.enqueue_bulk()
