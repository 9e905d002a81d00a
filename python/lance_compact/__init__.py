"""Distributed compaction of Lance datasets on Apache Spark."""
from .api import (LanceCompaction, LanceTable, call_procedure, cleanup, compact,
                  configure_spark_with_lance_compact, create_index, describe_layout, drop_index, history, jar_path, maintain,
                  maintain_warehouse,
                  optimize_indices, plan_compaction, spark_conf, table_health)
from .errors import CompactionError, TableNotFoundError
from .report.histogram import FragmentHistogram

__all__ = ["CompactionError", "FragmentHistogram", "LanceCompaction", "LanceTable", "call_procedure", "cleanup",
           "compact", "configure_spark_with_lance_compact", "create_index", "describe_layout", "drop_index", "history", "jar_path",
           "maintain", "maintain_warehouse", "optimize_indices", "plan_compaction", "spark_conf",
           "table_health", "TableNotFoundError"]
