-- Maintenance of a table that streaming jobs keep writing to.
-- Only what changed since the last compaction this product ran:
CALL lance.compact(table => 'db.events', strategy => 'incremental');
-- Materialize deletions only, leaving clean fragments alone:
CALL lance.compact(table => 'db.events', strategy => 'deletion_only', materialize_deletions_threshold => 0.05);
-- A big table in bounded, partially committed steps that survive a failing task:
CALL lance.compact(table => 'db.events', partial_progress => true, max_commits => 4, max_retries => 5);
