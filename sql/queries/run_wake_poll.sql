-- The wake-ups producers left since the leader's last poll (24_wake.sql). Rows written since
-- that poll have an xmin no older than its snapshot xmin ($1; NULL: every row); of those, the
-- entries numbered after what the leader has seen of their backend ($2 backends, $3 their
-- seq), one row each (a backend the leader has not seen: all of its entries). gap: entries
-- were dropped before the leader read them (a row keeps its last 64), so it scans instead.
-- A last row without a backend carries this poll's snapshot xmin, for the next one.
-- @params: after_xmin backends seqs
-- @columns: backend seq gap pair snapshot_xmin
WITH seen AS (
    SELECT s.backend, s.seq FROM unnest($2::integer[], $3::bigint[]) AS s(backend, seq)
), fresh AS (
    SELECT w.backend, w.seq, w.pairs, s.seq AS seen_seq
      FROM pgpace.wake w LEFT JOIN seen s ON s.backend = w.backend
     WHERE ($1::text IS NULL OR age(w.xmin) <= age($1::text::xid))
       AND w.seq > coalesce(s.seq, 0)
)
SELECT f.backend, f.seq, coalesce(f.seen_seq, 0) < f.seq - cardinality(f.pairs) AS gap, p.pair,
       NULL::text AS snapshot_xmin
  FROM fresh f
 CROSS JOIN LATERAL unnest(f.pairs) WITH ORDINALITY AS p(pair, ord)
 WHERE f.seq - cardinality(f.pairs) + p.ord > coalesce(f.seen_seq, 0)
UNION ALL
SELECT NULL, NULL, NULL, NULL, xid(pg_snapshot_xmin(pg_current_snapshot()))::text
