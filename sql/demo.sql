-- The demo (bin/demo): look around the warehouse, then compact demo.events.
-- bin/demo passes ${before} (the table's version before) and ${picture} (a .png path) with
-- --hivevar; by hand: bin/lance-spark-sql --warehouse WH --hivevar before=N --hivevar picture=layout.png -f sql/demo.sql (pictures go in the current folder)
SHOW NAMESPACES IN lance;
SHOW TABLES IN lance.demo;
SHOW PROCEDURES IN lance;
-- The layout before, as text: one row per line.
CALL lance.describe_layout(table => 'demo.events', target_rows_per_fragment => 65536, histogram => true);
CALL lance.compact(table => 'demo.events', target_rows_per_fragment => 65536);
-- Run again: nothing left to compact, zero counts, version unchanged.
CALL lance.compact(table => 'demo.events', target_rows_per_fragment => 65536);
-- Before and after side by side, and the same as a picture.
CALL lance.describe_layout(table => 'demo.events', target_rows_per_fragment => 65536, histogram => true,
                           compare_version => ${before}, picture => '${picture}');
