"""Compaction: what a CALL asks for, plan (planners), execute on executors (Spark jobs), commit
on the driver; clustered compaction (``clustering/``)."""
