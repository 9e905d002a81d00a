-- Before compacting: look at the layout, then at what compaction would do (writes nothing).
CALL lance.describe_layout(table => 'db.events');
CALL lance.plan_compaction(table => 'db.events', target_rows_per_fragment => 1048576);
-- A bounded run: at most ~256 MB read, most valuable work first; run again to continue.
CALL lance.plan_compaction(table => 'db.events', strategy => 'io_bounded',
                           options => map('max_rewrite_bytes', '268435456'));
-- What cleanup would remove (old versions, files of failed writes); removes nothing.
CALL lance.cleanup(table => 'db.events', older_than => '7 days', dry_run => true);
