-- The demo (bin/demo): look around the warehouse, then compact demo.events.
SHOW NAMESPACES IN lance;
SHOW TABLES IN lance.demo;
SHOW PROCEDURES IN lance;
CALL lance.compact(table => 'demo.events', target_rows_per_fragment => 65536);
-- Run again: nothing left to compact, zero counts, version unchanged.
CALL lance.compact(table => 'demo.events', target_rows_per_fragment => 65536);
