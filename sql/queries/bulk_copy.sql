COPY pgpace_bulk (line_no, doc) FROM STDIN
