"""Registers lance-spark-compact's distributed table reads with Spark: Spark imports every
top-level ``pyspark_*`` module once per JVM and registers its ``DefaultSource``."""
from lance_compact.catalog.read_source import LanceFragmentSource as DefaultSource

__all__ = ["DefaultSource"]
