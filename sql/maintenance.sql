-- Compaction options beyond the named parameters go through the options map; unknown
-- keys are rejected with the list of valid ones.
CALL lance.system.compact(
  table => 'db.events',
  materialize_deletions_threshold => 0.05,
  compaction_mode => 'try_binary_copy',
  options => map('num_threads', '2', 'batch_size', '8192')
);
