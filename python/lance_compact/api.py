"""The PySpark API: compaction as a DataFrame of metrics, for notebooks and jobs.

It issues the same ``CALL`` the SQL users run, so SQL and Python share one orchestration::

    from lance_compact import LanceCompaction
    metrics = LanceCompaction(spark, "db.events").option("target_rows_per_fragment", 1 << 20).execute()

Spark needs the catalog (``spark.sql.catalog.lance``) and the jar: a session built with
:func:`configure_spark_with_lance_compact` has both.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

from .options import option_specs

CATALOG_CLASS = "io.github.lancecompact.spark.catalog.LanceCatalog"
PLUGIN_CLASS = "io.github.lancecompact.spark.engine.EnginePlugin"
JAR_NAME = "lance-spark-compact.jar"


def jar_path() -> str:
    """The catalog jar: $LANCE_COMPACT_JAR, one shipped in this package, or the source build."""
    candidates = [os.environ.get("LANCE_COMPACT_JAR"),
                  Path(__file__).parent / "jars" / JAR_NAME,
                  Path(__file__).resolve().parents[2] / "spark-ext" / "target" / JAR_NAME]
    for c in candidates:
        if c and Path(c).is_file():
            return str(Path(c).resolve())
    raise FileNotFoundError(
        f"{JAR_NAME} not found: build it with `bin/sbt package` or set LANCE_COMPACT_JAR")


def configure_spark_with_lance_compact(builder: Any, warehouse: str | None = None,
                                       catalog: str = "lance",
                                       storage_options: Mapping[str, str] | None = None,
                                       start_engine: bool = True) -> Any:
    """Configure a ``SparkSession.Builder`` for compaction (like Delta's configure_spark_with_delta_pip).

    Adds the jar, registers the catalog ``catalog`` over ``warehouse`` and makes the driver's
    engine and the executors run this Python (they must run the same pylance). With
    ``start_engine`` the engine and the executors' Python workers start with the session
    (Spark plugin ``EnginePlugin``), so the first CALL does not wait for them.
    """
    builder = (builder.config("spark.jars", jar_path())
               .config(f"spark.sql.catalog.{catalog}", CATALOG_CLASS)
               .config("spark.sql.execution.pyspark.python", sys.executable))
    if start_engine:
        plugins = [p for p in (getattr(builder, "_options", {}).get("spark.plugins") or "").split(",") if p]
        if PLUGIN_CLASS not in plugins:
            builder = builder.config("spark.plugins", ",".join(plugins + [PLUGIN_CLASS]))
    if warehouse:
        builder = builder.config(f"spark.sql.catalog.{catalog}.warehouse", warehouse)
    for k, v in (storage_options or {}).items():
        builder = builder.config(f"spark.sql.catalog.{catalog}.storage.{k}", v)
    return builder


class LanceCompaction:
    """A compaction of one table, configured step by step, run by :meth:`execute`.

    ``table`` is ``namespace.table`` in the catalog's warehouse, or a dataset path/URI in it.
    """

    def __init__(self, spark: Any, table: str, catalog: str = "lance") -> None:
        self._spark = spark
        self._table = table
        self._catalog = catalog
        self._params: dict[str, Any] = {}
        self._options: dict[str, str] = {}
        self._strategy: str | None = None

    def option(self, key: str, value: Any) -> "LanceCompaction":
        """Set one compaction option (see parameters.json / the README's table)."""
        spec = option_specs().get(key)
        if spec is not None and spec.sql and not isinstance(value, (list, tuple)):
            self._params[key] = value
        else:
            self._options[key] = ",".join(map(str, value)) if isinstance(value, (list, tuple)) \
                else str(value).lower() if isinstance(value, bool) else str(value)
        return self

    def options(self, **options: Any) -> "LanceCompaction":
        """Set several options at once."""
        for k, v in options.items():
            self.option(k, v)
        return self

    def strategy(self, name: str) -> "LanceCompaction":
        """Planning strategy: ``default``, ``io_bounded``, ``deletion_only``, ``incremental``,
        or a dotted Planner class name."""
        self._strategy = name
        return self

    def execute(self) -> Any:
        """Run the compaction; returns a one-row DataFrame of measured metrics."""
        return self._call("compact")

    def plan(self) -> Any:
        """Dry run: a DataFrame with a row per task compaction would run or leave for later."""
        return self._call("plan_compaction")

    def _call(self, procedure: str) -> Any:
        params = dict(self._params)
        if self._options:
            params["options"] = self._options
        if self._strategy:
            params["strategy"] = self._strategy
        return call_procedure(self._spark, procedure, self._table, self._catalog, params)


def call_procedure(spark: Any, procedure: str, table: str, catalog: str = "lance",
                   params: Mapping[str, Any] | None = None) -> Any:
    """``CALL <catalog>.<procedure>(table => ..., ...)`` with bound parameters (no quoting
    of values into SQL); a dict value becomes ``map(...)``."""
    args: dict[str, Any] = {"table": table}
    named = ["table => :table"]
    for i, (k, v) in enumerate((params or {}).items()):
        if isinstance(v, Mapping):
            pairs = []
            for j, (mk, mv) in enumerate(v.items()):
                args[f"k{i}_{j}"], args[f"v{i}_{j}"] = mk, mv
                pairs.append(f":k{i}_{j}, :v{i}_{j}")
            named.append(f"{k} => map({', '.join(pairs)})")
        else:
            args[f"p{i}"] = v
            named.append(f"{k} => :p{i}")
    target = ".".join(f"`{p}`" for p in catalog.split("."))
    return spark.sql(f"CALL {target}.{procedure}({', '.join(named)})", args=args)


def describe_layout(spark: Any, table: str, catalog: str = "lance", **params: Any) -> Any:
    """The layout report as a one-row DataFrame (``CALL lance.describe_layout``)."""
    return call_procedure(spark, "describe_layout", table, catalog, params)


def cleanup(spark: Any, table: str, catalog: str = "lance", **params: Any) -> Any:
    """Lance's cleanup of old versions and orphaned files (``CALL lance.cleanup``):
    ``older_than='7 days'``, ``retain_versions``, ``delete_unverified``, ``dry_run``."""
    return call_procedure(spark, "cleanup", table, catalog, params)


def plan_compaction(spark: Any, table: str, *, catalog: str = "lance", strategy: str | None = None,
                    **options: Any) -> Any:
    """Dry run of :func:`compact`: a DataFrame with a row per task; writes nothing."""
    job = LanceCompaction(spark, table, catalog).options(**options)
    if strategy:
        job.strategy(strategy)
    return job.plan()


def compact(spark: Any, table: str, *, catalog: str = "lance", strategy: str | None = None,
            **options: Any) -> Any:
    """Compact ``table``; returns a one-row DataFrame of measured metrics.

    >>> compact(spark, "db.events", target_rows_per_fragment=1_048_576).show()
    """
    job = LanceCompaction(spark, table, catalog).options(**options)
    if strategy:
        job.strategy(strategy)
    return job.execute()
