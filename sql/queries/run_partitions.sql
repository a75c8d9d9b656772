-- @params:
-- @columns: created
SELECT pgpace.ensure_partitions('pgpace.delivery_attempt', 7)
     + pgpace.ensure_partitions('pgpace.dead_letter', 7)
     + pgpace.ensure_partitions('pgpace.event', 7)
     + pgpace.ensure_item_partitions(7) AS created
