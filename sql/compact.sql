-- Compact one table of the lance catalog. Run with:
--   bin/lance-spark-sql --warehouse /path/to/warehouse -f sql/compact.sql
-- (edit the table name first). Every parameter is optional but table; see the README.
CALL lance.compact(
  table => 'db.events',
  target_rows_per_fragment => 1048576
);
