"""Indices built by the cluster (``CALL lance.create_index``): the request checked against the
table (spec.py), fragment groups (plan.py), one model trained by one Spark task on Lance's own
sample of the table (train.py), a segment per group built by Spark tasks (segments.py), merged
with bounded fan-in or kept as they are on an object store, committed once (commit.py), the run and its row
(build.py); and kept up to date incrementally (``optimize_indices``): a committed index's segments
and model (existing.py), which segments a run merges (tiers.py), the new rows built as a new
segment and committed beside the others (upkeep.py). Imports ``runtime/``, ``errors.py`` and
``options.py`` only; ``compaction/`` and ``maintenance/`` may import it."""
