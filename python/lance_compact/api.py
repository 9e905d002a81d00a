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
from .runtime.envelope import DEFAULT_CATALOG
from .runtime.private_conf import split, write_properties

PICTURE_DIR = "spark.lance.compact.picture.dir"

CATALOG_CLASS = "io.github.lancecompact.spark.catalog.LanceCatalog"
PLUGIN_CLASS = "io.github.lancecompact.spark.engine.EnginePlugin"
JAR_NAME = "lance-spark-compact.jar"


def jar_path() -> str:
    """The catalog jar: $LANCE_COMPACT_JAR, else the source build (spark-ext/target, when this
    module runs from a source checkout), else the one shipped in this package (the wheel)."""
    source_root = Path(__file__).resolve().parents[2]
    candidates = [os.environ.get("LANCE_COMPACT_JAR"),
                  source_root / "spark-ext" / "target" / JAR_NAME,
                  Path(__file__).parent / "jars" / JAR_NAME]
    for c in candidates:
        if c and Path(c).is_file():
            return str(Path(c).resolve())
    raise FileNotFoundError(
        f"{JAR_NAME} not found: build it with `bin/sbt package` or set LANCE_COMPACT_JAR")


def _merged(existing: str | None, value: str) -> str:
    """A comma-separated Spark list (spark.jars, spark.plugins) with ``value`` appended once."""
    items = [i.strip() for i in (existing or "").split(",") if i.strip()]
    return ",".join(items if value in items else items + [value])


def spark_conf(warehouse: str | None = None, catalog: str = DEFAULT_CATALOG,
               storage_options: Mapping[str, str] | None = None, start_engine: bool = True,
               python: str | None = None, jars: str | None = None,
               plugins: str | None = None, picture_dir: str | None = None,
               strategies: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings compaction needs, key -> value in the order they are applied.

    The one place they are made: :func:`configure_spark_with_lance_compact` sets them on a
    ``SparkSession.Builder`` and the ``lance-spark-sql`` command passes them to spark-sql.
    ``python`` (default: this interpreter) runs the driver's engine and the executors' Python
    workers: it must have the same pylance as the driver. ``jars`` and ``plugins`` are values
    already set for ``spark.jars`` and ``spark.plugins``: ours are added to them, not put in
    their place. ``picture_dir`` is the folder ``describe_layout(picture => ...)`` may write
    into (pictures are off without it). ``strategies`` registers your own planning strategies,
    name -> ``module.Class``, chosen in SQL by name (nothing a SQL user names is imported).

    Storage options hold secrets: never pass these settings as ``--conf`` on a command line
    (``ps`` shows it to every user); :mod:`lance_compact.runtime.private_conf` puts them in a private
    properties file, as ``lance-spark-sql`` and :func:`configure_spark_with_lance_compact` do.
    """
    conf = {"spark.jars": _merged(jars, jar_path()),
            f"spark.sql.catalog.{catalog}": CATALOG_CLASS}
    if warehouse:
        conf[f"spark.sql.catalog.{catalog}.warehouse"] = str(warehouse)
    for k, v in (storage_options or {}).items():
        conf[f"spark.sql.catalog.{catalog}.storage.{k}"] = str(v)
    for name, cls in (strategies or {}).items():
        conf[f"spark.sql.catalog.{catalog}.strategies.{name}"] = cls
    if picture_dir:
        conf[PICTURE_DIR] = str(Path(picture_dir).resolve())
    conf["spark.sql.execution.pyspark.python"] = python or sys.executable
    # The engine and the executors' Python workers start with the session rather than on
    # the first statement that names the catalog.
    if start_engine:
        conf["spark.plugins"] = _merged(plugins, PLUGIN_CLASS)
    elif plugins:
        conf["spark.plugins"] = plugins
    return conf


def configure_spark_with_lance_compact(builder: Any, warehouse: str | None = None,
                                       catalog: str = DEFAULT_CATALOG,
                                       storage_options: Mapping[str, str] | None = None,
                                       start_engine: bool = True,
                                       picture_dir: str | None = ".",
                                       strategies: Mapping[str, str] | None = None) -> Any:
    """Configure a ``SparkSession.Builder`` for compaction (like Delta's configure_spark_with_delta_pip).

    Adds the jar, registers the catalog ``catalog`` over ``warehouse`` and makes the driver's
    engine and the executors run this Python (they must run the same pylance). With
    ``start_engine`` the engine and the executors' Python workers start with the session
    (Spark plugin ``EnginePlugin``), so the first CALL does not wait for them. Jars and
    plugins already set on the builder are kept. The settings are :func:`spark_conf`'s; it
    also sets ``$PYSPARK_PYTHON`` to this Python if unset (see the comment inside).
    ``picture_dir`` (default: the current folder) is where ``describe_layout`` may draw
    pictures; ``strategies`` registers your own planning strategies by name.

    Storage options never go on the JVM's command line (PySpark starts it with every builder
    setting as ``--conf``): before the JVM starts they go into a private properties file
    (mode 0600, removed when this Python exits) named in ``$PYSPARK_SUBMIT_ARGS``; once it
    runs, the builder hands them to the running JVM directly.
    """
    # The builder's options so far, to keep the user's jars and plugins: PySpark 4.0 to 4.3 has
    # no public way to read them (Builder's public methods only set), hence the private name,
    # read defensively (an unknown builder has none).
    options = getattr(builder, "_options", {}) or {}
    # Spark finds its Python data sources (the catalog's distributed reads) with the Python of
    # the JVM's environment only, PYSPARK_DRIVER_PYTHON or PYSPARK_PYTHON, not with any
    # setting: name this Python there before the session's JVM starts (kept if already set).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = spark_conf(warehouse=warehouse, catalog=catalog, storage_options=storage_options,
                      start_engine=start_engine, jars=options.get("spark.jars"),
                      plugins=options.get("spark.plugins"), picture_dir=picture_dir,
                      strategies=strategies)
    public, private = split(conf)
    if private and not _jvm_running():
        _submit_with_properties(private)
        conf = public
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder


def _jvm_running() -> bool:
    from pyspark import SparkContext
    return SparkContext._gateway is not None


def _submit_with_properties(private: Mapping[str, str]) -> None:
    """Make PySpark's JVM read ``private`` from a private properties file (not --conf)."""
    import shlex

    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    prefix, extra = "", ["--load-spark-defaults"]
    if "--properties-file" in args:  # the user's own: merged into ours, which replaces it
        i = args.index("--properties-file")
        prefix = Path(args[i + 1]).read_text(encoding="utf-8")
        del args[i:i + 2]
        extra = []
    path = write_properties(private, prefix=prefix)
    os.environ["PYSPARK_SUBMIT_ARGS"] = shlex.join(["--properties-file", str(path), *extra, *args])


class LanceCompaction:
    """A compaction of one table, configured step by step, run by :meth:`execute`.

    ``table`` is ``namespace.table`` in the catalog's warehouse, or a dataset path/URI in it.
    """

    def __init__(self, spark: Any, table: str, catalog: str = DEFAULT_CATALOG) -> None:
        self._spark = spark
        self._table = table
        self._catalog = catalog
        self._params: dict[str, Any] = {}
        self._options: dict[str, str] = {}
        self._strategy: str | None = None

    def option(self, key: str, value: Any) -> "LanceCompaction":
        """Set one compaction option (see parameters.json / the README's table); ``options``
        with a mapping sets each of its keys, as SQL's ``options => map(...)``."""
        if key == "options" and isinstance(value, Mapping):
            for k, v in value.items():
                self.option(k, v)
            return self
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
        or the name of one registered with the catalog (``strategies`` of
        :func:`configure_spark_with_lance_compact`)."""
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


def call_procedure(spark: Any, procedure: str, table: str | None, catalog: str = DEFAULT_CATALOG,
                   params: Mapping[str, Any] | None = None) -> Any:
    """``CALL <catalog>.<procedure>(table => ..., ...)`` with bound parameters (no quoting
    of values into SQL); a dict value becomes ``map(...)``; ``table=None`` passes no table
    (procedures of the whole warehouse)."""
    args: dict[str, Any] = {} if table is None else {"table": table}
    named = [] if table is None else ["table => :table"]
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


def describe_layout(spark: Any, table: str, catalog: str = DEFAULT_CATALOG, **params: Any) -> Any:
    """The layout report as a one-row DataFrame (``CALL lance.describe_layout``).

    ``histogram=True``: the fragment-size histogram as text instead, a row per line (column
    ``histogram``); ``picture="layout.png"`` (or ``.svg``) also draws it into that file on
    the driver, inside the folder the session allows (``picture_dir``; needs the ``plot`` extra); ``compare_version=N`` puts version N beside the
    current one. ``target_rows_per_fragment`` and ``materialize_deletions_threshold`` set
    what counts as small and as over the threshold.

    >>> print("\\n".join(r.histogram for r in describe_layout(spark, "db.events", histogram=True).collect()))
    """
    return call_procedure(spark, "describe_layout", table, catalog, params)


def cleanup(spark: Any, table: str, catalog: str = DEFAULT_CATALOG, **params: Any) -> Any:
    """Lance's cleanup of old versions and orphaned files (``CALL lance.cleanup``):
    ``older_than='7 days'``, ``retain_versions``, ``delete_unverified``, ``dry_run``."""
    return call_procedure(spark, "cleanup", table, catalog, params)


def optimize_indices(spark: Any, table: str, catalog: str = DEFAULT_CATALOG, **params: Any) -> Any:
    """Lance's index optimization (``CALL lance.optimize_indices``): ``indices='a,b'``,
    ``num_indices_to_merge``, ``retrain``, ``dry_run``; a one-row DataFrame."""
    return call_procedure(spark, "optimize_indices", table, catalog, params)


def maintain(spark: Any, table: str, catalog: str = DEFAULT_CATALOG, **params: Any) -> Any:
    """Everyday maintenance (``CALL lance.maintain``): compaction, index optimization and
    cleanup, each when due (``min_small_fragments``, ``min_unindexed_fragments``,
    ``older_than``, ``retain_versions``, ``target_rows_per_fragment``, ``dry_run``);
    a DataFrame with a row per step.

    >>> maintain(spark, "db.events", older_than="1 day").show()
    """
    return call_procedure(spark, "maintain", table, catalog, params)


def maintain_warehouse(spark: Any, namespace: str | None = None, catalog: str = DEFAULT_CATALOG,
                       **params: Any) -> Any:
    """Maintain every table of the warehouse, or of ``namespace``, that needs it
    (``CALL lance.maintain_warehouse``): worst health first, then priority, within
    ``max_tables``, ``max_bytes`` and ``max_duration``; the maintain thresholds
    (``target_rows_per_fragment``, ``min_small_fragments``, ``older_than``, ...) as defaults
    for every table; ``dry_run=True`` writes nothing. A DataFrame with a row per table and step.

    >>> maintain_warehouse(spark, "db", max_duration="10 minutes").show()
    """
    if namespace is not None:
        params = {"namespace": namespace, **params}
    return call_procedure(spark, "maintain_warehouse", None, catalog, params)


def _compaction(spark: Any, table: str, catalog: str, strategy: str | None,
                options: Mapping[str, Any]) -> LanceCompaction:
    """The compaction :func:`compact` runs and :func:`plan_compaction` plans."""
    job = LanceCompaction(spark, table, catalog).options(**options)
    return job.strategy(strategy) if strategy else job


def plan_compaction(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG, strategy: str | None = None,
                    **options: Any) -> Any:
    """Dry run of :func:`compact`: a DataFrame with a row per task; writes nothing."""
    return _compaction(spark, table, catalog, strategy, options).plan()


def compact(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG, strategy: str | None = None,
            **options: Any) -> Any:
    """Compact ``table``; returns a one-row DataFrame of measured metrics.

    ``sort_order="tenant ASC NULLS LAST, ts DESC"``, ``sort_order="hilbert(tenant, ts)"`` or ``"zorder(tenant, ts)"``
    clusters the rows while compacting (a sort on executors; see parameters.json's sort_order).

    >>> compact(spark, "db.events", target_rows_per_fragment=1_048_576).show()
    """
    return _compaction(spark, table, catalog, strategy, options).execute()
