"""Distributed compaction of Lance datasets on Apache Spark."""
from .errors import CompactionError
from .api import LanceCompaction, compact, configure_spark_with_lance_compact, jar_path

__all__ = ["CompactionError", "LanceCompaction", "compact",
           "configure_spark_with_lance_compact", "jar_path"]
