"""Spark 4 registers ``DefaultSource`` of any top-level ``pyspark_*`` module in every session."""
from lance_compact.datasource import LanceCompactDataSource as DefaultSource  # noqa: F401
