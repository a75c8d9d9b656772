SELECT pgpace.customer_delete($1, $2::boolean)
