"""Clustered compaction: ``CALL lance.compact(table => ..., sort_order => ...)`` rewrites the
table's fragments with their rows range-partitioned and sorted by the sort order (a linear
order, or ``zorder(a, b, ...)``), so a selective filter on the sort columns touches few
fragments. The sort is a Spark job on executors; the driver holds only sampled bounds and
fragment metadata and commits one Lance ``Rewrite`` per group.

Modules, one job each: :mod:`.sort_order` (parse and check the order), :mod:`.keys` (Arrow
ordering, range ids, z-values), :mod:`.plan` (the group and its partitions), :mod:`.jobs`
(the sampling and rewriting Spark jobs), :mod:`.commit` (the Rewrite commit, indices),
:mod:`.run` (the orchestration and its result row).
"""
