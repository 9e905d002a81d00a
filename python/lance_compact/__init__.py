"""Distributed compaction of Lance datasets on Apache Spark."""
import os as _os
import sys as _sys

if _os.environ.get("LANCE_COMPACT_ENGINE_WORKER") and _sys.argv[:1] == ["-m"]:
    # An engine worker being started (python -m lance_compact.engine; "-m" until the module is
    # found) leaves the terminal's process group before its imports, which take a second or two:
    # a Ctrl-C at spark-sql's prompt meanwhile killed it ("did not start: it exited with code
    # 130"). engine.py's _detach_from_terminal does the same once it runs.
    import signal as _signal

    try:
        _os.setsid()
    except OSError:  # already a group leader
        pass
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)

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
