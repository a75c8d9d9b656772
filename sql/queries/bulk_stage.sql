CREATE TEMP TABLE pgpace_bulk (line_no bigint NOT NULL, doc text NOT NULL) ON COMMIT DROP
