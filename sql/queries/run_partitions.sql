SELECT pgpace.ensure_partitions('pgpace.delivery_attempt', 7)
