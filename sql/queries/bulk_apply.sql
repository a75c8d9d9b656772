SELECT inserted, duplicates, superseded, expired FROM pgpace.enqueue_bulk()
