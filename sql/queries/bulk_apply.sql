SELECT inserted, duplicates FROM pgpace.enqueue_bulk()
