"""The PySpark API: compaction as a DataFrame of metrics, for notebooks and jobs.

It issues the same ``CALL`` the SQL users run, so SQL and Python share one orchestration::

    from lance_compact import LanceCompaction
    metrics = LanceCompaction(spark, "db.events").option("target_rows_per_fragment", 1 << 20).execute()

Spark needs the catalog (``spark.sql.catalog.lance``) and the jar: a session built with
:func:`configure_spark_with_lance_compact` has both.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import warnings
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from .options import spec as _spec
from .runtime.envelope import DEFAULT_CATALOG
from .runtime.private_conf import properties_text, split, take_properties_file, write_properties

F = TypeVar("F", bound=Callable[..., Any])

PICTURE_DIR = "spark.lance.compact.picture.dir"

CATALOG_CLASS = "io.github.lancecompact.spark.catalog.LanceCatalog"
PLUGIN_CLASS = "io.github.lancecompact.spark.engine.EnginePlugin"
SQL_EXTENSIONS_CLASS = "io.github.lancecompact.spark.LanceSqlExtensions"
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
               strategies: Mapping[str, str] | None = None, extensions: str | None = None) -> dict[str, str]:
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
    conf["spark.sql.extensions"] = _merged(extensions, SQL_EXTENSIONS_CLASS)
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
                      strategies=strategies, extensions=options.get("spark.sql.extensions"))
    from . import sigint_cancel
    sigint_cancel.install()  # Ctrl-C during spark.sql("CALL ...") in a script reaches Spark
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

    named, args = take_properties_file(shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")))
    prefix, extra = "", ["--load-spark-defaults"]
    if named is not None:  # the user's own: merged into ours, which replaces it
        prefix = properties_text(named, "$PYSPARK_SUBMIT_ARGS")
        extra = []
    path = write_properties(private, prefix=prefix)
    os.environ["PYSPARK_SUBMIT_ARGS"] = shlex.join(["--properties-file", str(path), *extra, *args])


@functools.lru_cache(maxsize=None)
def _sql_parameters() -> frozenset[str]:
    """The compaction options, settings and run settings that are named CALL parameters
    (``sql`` in parameters.json); the others go in the options map."""
    return frozenset(e["name"] for section in ("options", "settings", "run_settings")
                     for e in _spec()[section] if e.get("sql"))


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
                if isinstance(v, str):  # text, as in SQL's map(...): the engine reads it by the key's type
                    self._options[k] = v
                else:
                    self.option(k, v)
            return self
        if key in _sql_parameters() and not isinstance(value, (list, tuple)):
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

    def where(self, predicate: str) -> "LanceCompaction":
        """Compact only fragments holding rows that match ``predicate``, a Spark SQL predicate
        on the table's columns (``"ts > current_timestamp() - INTERVAL 1 DAY"``)."""
        return self.option("where", predicate)

    def sort_order(self, order: str) -> "LanceCompaction":
        """Cluster while compacting: ``"tenant ASC NULLS LAST, ts DESC"``,
        ``"zorder(tenant, ts)"``, ``"hilbert(tenant, ts)"``, or ``"none"`` (a plain compaction
        of a clustered table)."""
        return self.option("sort_order", order)

    def zorder_by(self, *columns: str) -> "LanceCompaction":
        """Cluster along a Z-order curve through ``columns`` (two or more), as Delta's ZORDER BY."""
        return self.sort_order(f"zorder({', '.join(columns)})")

    def hilbert_by(self, *columns: str) -> "LanceCompaction":
        """Cluster along a Hilbert curve through ``columns`` (two or more)."""
        return self.sort_order(f"hilbert({', '.join(columns)})")

    def target_rows_per_fragment(self, rows: int) -> "LanceCompaction":
        """Rows each output fragment should hold."""
        return self.option("target_rows_per_fragment", rows)

    def partial_progress(self, enabled: bool = True, max_commits: int | None = None) -> "LanceCompaction":
        """Commit in groups as they finish (up to ``max_commits``) rather than all at once."""
        self.option("partial_progress", enabled)
        return self.option("max_commits", max_commits) if max_commits is not None else self

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
    from . import progress_line  # on a runner thread (an interrupt cancels it); a live line in a notebook

    return progress_line.run(spark, procedure,
                             lambda: spark.sql(f"CALL {target}.{procedure}({', '.join(named)})", args=args),
                             table=table)


# ---- the procedures as Python functions -------------------------------------------------
#
# Each function's parameters are the procedure's parameters in parameters.json (the one spec:
# tests/test_options.py checks every function against it), keyword-only, None meaning "not
# given" (the procedure's default applies: the table's policy or setting, else the spec's
# default, which each docstring lists from the spec). A misspelled name fails with a
# suggestion (:func:`_discoverable`).

_PY_TYPES = {"long": "int", "double": "float", "boolean": "bool", "string": "str",
             "long_list": "Sequence[int]", "duration": "str | timedelta", "age": "str | datetime | timedelta",
             "map": "Mapping[str, Any]"}

# Which spec sections make each procedure's parameters (after its table or namespace).
PROCEDURE_SECTIONS: dict[str, tuple[str, ...]] = {
    "compact": ("options", "settings", "run_settings"),
    "plan_compaction": ("options", "settings", "run_settings"),
    "describe_layout": ("options:target_rows_per_fragment,materialize_deletions_threshold", "layout_parameters"),
    "cleanup": ("cleanup_parameters",),
    "optimize_indices": ("optimize_indices_parameters",),
    "create_index": ("create_index_parameters",),
    "drop_index": ("drop_index_parameters",),
    "maintain": ("maintain_parameters",),
    "maintain_warehouse": ("maintain_warehouse_parameters",),
}


def procedure_parameters(procedure: str) -> list[dict[str, Any]]:
    """The spec's entries (parameters.json) of ``procedure``'s parameters after its table or
    namespace, in positional order, without test hooks."""
    found: list[dict[str, Any]] = []
    for section in PROCEDURE_SECTIONS[procedure]:
        name, _, only = section.partition(":")
        entries = _spec()[name]
        found += [e for e in entries if not only or e["name"] in only.split(",")]
    return found


def _default_text(entry: Mapping[str, Any]) -> str:
    if entry.get("default") is not None:
        return repr(entry["default"])
    if entry.get("lance_default") is not None:
        return f"the table's lance.compaction.{entry['name']}, else {entry['lance_default']!r}"
    return "the procedure's (see the reference)"


def _discoverable(procedure: str) -> Callable[[F], F]:
    """Make ``fn`` a documented, checked procedure call: its docstring gains every parameter of
    the spec with its type, meaning and default; a misspelled keyword fails at once with the
    closest name (``TypeError: compact() got an unexpected keyword argument
    'target_row_per_fragment' (did you mean 'target_rows_per_fragment'?)``). A parameter's
    former name (parameters.json ``aliases``) is still taken for one release, with a
    ``FutureWarning``."""
    from .options import did_you_mean

    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)
        former = {a: e["name"] for e in procedure_parameters(procedure) for a in e.get("aliases", ())}

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old in [k for k in kwargs if k in former and k not in signature.parameters]:
                new, value = former[old], kwargs.pop(old)
                if kwargs.get(new) is not None and value is not None:
                    raise TypeError(f"{fn.__name__}() got {new} twice: as {new} and as {old}, its former name")
                warnings.warn(f"{fn.__name__}(): {old} is deprecated, it is the former name of {new} "
                              f"(accepted until the next release); use {new}", FutureWarning, stacklevel=2)
                if value is not None:
                    kwargs[new] = value
            unknown = [k for k in kwargs if k not in signature.parameters]
            if unknown:
                raise TypeError(f"{fn.__name__}() got an unexpected keyword argument {unknown[0]!r}"
                                f"{did_you_mean(unknown[0], signature.parameters)}")
            return fn(*args, **kwargs)

        lines = [f"    {e['name']} ({_PY_TYPES.get(e['type'], e['type'])}): {e['doc']} "
                 f"Default: {_default_text(e)}."
                 + "".join(f" Formerly ``{a}`` (still accepted until the next release)." for a in e.get("aliases", ()))
                 for e in procedure_parameters(procedure)]
        call.__doc__ = (fn.__doc__ or "").rstrip() + (
            f"\n\n    Parameters of ``CALL lance.{procedure}`` (from parameters.json; None: not given):\n\n"
            + "\n".join(lines) + "\n")
        return call  # type: ignore[return-value]
    return wrap


def _given(procedure: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's parameters of ``procedure`` that were given (not None), by name."""
    return {e["name"]: values[e["name"]] for e in procedure_parameters(procedure)
            if values.get(e["name"]) is not None}


@_discoverable("describe_layout")
def describe_layout(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG,
                    target_rows_per_fragment: int | None = None,
                    materialize_deletions_threshold: float | None = None,
                    histogram: bool | None = None, picture: str | None = None,
                    compare_version: int | None = None) -> Any:
    """The layout report as a one-row DataFrame (``CALL lance.describe_layout``).

    ``histogram=True``: the fragment-size histogram as text instead, a row per line (column
    ``histogram``); ``picture="layout.png"`` (or ``.svg``) also draws it into that file on
    the driver, inside the folder the session allows (``picture_dir``; needs the ``plot`` extra); ``compare_version=N`` puts version N beside the
    current one. ``target_rows_per_fragment`` and ``materialize_deletions_threshold`` set
    what counts as small and as over the threshold.

    >>> print("\\n".join(r.histogram for r in describe_layout(spark, "db.events", histogram=True).collect()))
    """
    return call_procedure(spark, "describe_layout", table, catalog, _given("describe_layout", locals()))


@_discoverable("cleanup")
def cleanup(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG,
            older_than: str | datetime | timedelta | None = None, retain_versions: int | None = None,
            delete_unverified: bool | None = None, dry_run: bool | None = None,
            unverified_min_age: str | datetime | timedelta | None = None) -> Any:
    """Lance's cleanup of old versions and orphaned files (``CALL lance.cleanup``); a one-row
    DataFrame of what was (or, with ``dry_run``, would be) removed.

    >>> cleanup(spark, "db.events", older_than="14 days", dry_run=True).show()
    """
    return call_procedure(spark, "cleanup", table, catalog, _given("cleanup", locals()))


@_discoverable("optimize_indices")
def optimize_indices(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG,
                     indices: str | None = None, num_indices_to_merge: int | None = None,
                     retrain: bool | None = None, dry_run: bool | None = None) -> Any:
    """Lance's index optimization (``CALL lance.optimize_indices``); a one-row DataFrame of
    what changed.

    >>> optimize_indices(spark, "db.events", indices="id_idx").show()
    """
    return call_procedure(spark, "optimize_indices", table, catalog, _given("optimize_indices", locals()))


@_discoverable("drop_index")
def drop_index(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG, name: str | None = None) -> Any:
    """Drop one of the table's indices by name (``CALL lance.drop_index``, as ``DROP INDEX name
    ON lance.db.t``), in one commit; an unknown name is refused, listing the table's indices. A
    one-row DataFrame of what was dropped.

    >>> drop_index(spark, "db.events", name="id_idx").show()
    """
    return call_procedure(spark, "drop_index", table, catalog, _given("drop_index", locals()))


@_discoverable("create_index")
def create_index(spark: Any, table: str, column: str, index_type: str, *, catalog: str = DEFAULT_CATALOG,
                 name: str | None = None, metric: str | None = None, replace: bool | None = None,
                 options: Mapping[str, Any] | None = None, dry_run: bool | None = None) -> Any:
    """Build an index on the cluster (``CALL lance.create_index``): for a vector index a training
    sample gathered by Spark tasks and one model, then a segment per fragment group built by a
    Spark task, merged and committed once on the driver (a small table in local mode is built by
    pylance's ``create_index`` in the engine: the row's ``built_by`` says which). ``options``
    holds the build's parameters by the names ``LanceDataset.create_index`` takes
    (``num_partitions``, ``num_sub_vectors``, ...) and the build's own settings
    (``rows_per_segment``, ...); values may be numbers or booleans. ``dry_run=True`` returns the
    plan. A one-row DataFrame.

    >>> create_index(spark, "db.items", "emb", "IVF_PQ", options={"num_partitions": 256, "num_sub_vectors": 16}).show()
    """
    params: dict[str, Any] = {"column": column, "index_type": index_type, "name": name, "metric": metric,
                              "replace": replace, "dry_run": dry_run}
    if options:
        params["options"] = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    return call_procedure(spark, "create_index", table, catalog, {k: v for k, v in params.items() if v is not None})


@_discoverable("maintain")
def maintain(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG,
             target_rows_per_fragment: int | None = None, min_small_fragments: int | None = None,
             min_unindexed_fragments: int | None = None,
             older_than: str | datetime | timedelta | None = None, retain_versions: int | None = None,
             max_rewrite_bytes: int | None = None, dry_run: bool | None = None, sort_order: str | None = None,
             max_clustering_depth: float | None = None, fail_on_error: bool | None = None) -> Any:
    """Everyday maintenance (``CALL lance.maintain``): compaction, index optimization and
    cleanup, each when due; a DataFrame with a row per step (ran or skipped, and why).
    ``fail_on_error=True`` also fails (``LANCE_MAINTENANCE_FAILED``) when compaction tasks
    failed all their attempts while the others were committed.

    >>> maintain(spark, "db.events", older_than="8d").show()
    """
    return call_procedure(spark, "maintain", table, catalog, _given("maintain", locals()))


@_discoverable("maintain_warehouse")
def maintain_warehouse(spark: Any, namespace: str | None = None, *, catalog: str = DEFAULT_CATALOG,
                       dry_run: bool | None = None, max_tables: int | None = None,
                       max_total_rewrite_bytes: int | None = None, max_duration: str | timedelta | None = None,
                       parallelism: int | None = None, exclude: str | None = None,
                       target_rows_per_fragment: int | None = None, min_small_fragments: int | None = None,
                       min_unindexed_fragments: int | None = None,
                       older_than: str | datetime | timedelta | None = None,
                       retain_versions: int | None = None, sort_order: str | None = None,
                       max_clustering_depth: float | None = None, fail_on_error: bool | None = None) -> Any:
    """Maintain every table of the warehouse, or of ``namespace``, that needs it
    (``CALL lance.maintain_warehouse``): worst health first, then priority, within
    ``max_tables``, ``max_total_rewrite_bytes`` and ``max_duration``; the maintain thresholds as defaults
    for every table; ``dry_run=True`` writes nothing. A DataFrame with a row per table and step.
    ``fail_on_error=True``: once every table it can maintain is maintained, raise
    (``AnalysisException``, condition ``LANCE_MAINTENANCE_FAILED``) naming each failed table and
    why, and what was committed for the others: a scheduler's task fails.

    >>> maintain_warehouse(spark, "db", max_duration="10 minutes").show()
    """
    params = _given("maintain_warehouse", locals())
    if namespace is not None:
        params = {"namespace": namespace, **params}
    return call_procedure(spark, "maintain_warehouse", None, catalog, params)


def _compaction(spark: Any, table: str, catalog: str, strategy: str | None, given: Mapping[str, Any],
                options: Mapping[str, Any] | None) -> "LanceCompaction":
    """The compaction :func:`compact` runs and :func:`plan_compaction` plans."""
    job = LanceCompaction(spark, table, catalog).options(**given)
    if options:
        job.option("options", options)
    return job.strategy(strategy) if strategy else job


@_discoverable("plan_compaction")
def plan_compaction(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG, strategy: str | None = None,
                    options: Mapping[str, Any] | None = None,
                    target_rows_per_fragment: int | None = None, max_rows_per_group: int | None = None,
                    max_bytes_per_file: int | None = None, materialize_deletions: bool | None = None,
                    materialize_deletions_threshold: float | None = None, defer_index_remap: bool | None = None,
                    compaction_mode: str | None = None, num_threads: int | None = None,
                    batch_size: int | None = None, io_buffer_size: int | None = None,
                    binary_copy_read_batch_bytes: int | None = None, max_source_fragments: int | None = None,
                    max_source_rows: int | None = None, max_source_bytes: int | None = None,
                    excluded_fragment_ids: Sequence[int] | None = None, data_storage_version: str | None = None,
                    since_version: int | None = None, max_rewrite_bytes: int | None = None,
                    max_rewrite_rows: int | None = None, max_rewrite_fragments: int | None = None,
                    partial_progress: bool | None = None,
                    max_commits: int | None = None, max_retries: int | None = None,
                    carry_over_deletes: bool | None = None, where: str | None = None,
                    min_input_fragments: int | None = None, task_order: str | None = None,
                    sort_order: str | None = None, full: bool | None = None,
                    restore_indices: bool | None = None) -> Any:
    """Dry run of :func:`compact`: a DataFrame with a row per task it would run or leave for
    later, and why; writes nothing."""
    return _compaction(spark, table, catalog, strategy, _given("plan_compaction", locals()), options).plan()


@_discoverable("compact")
def compact(spark: Any, table: str, *, catalog: str = DEFAULT_CATALOG, strategy: str | None = None,
            options: Mapping[str, Any] | None = None,
            target_rows_per_fragment: int | None = None, max_rows_per_group: int | None = None,
            max_bytes_per_file: int | None = None, materialize_deletions: bool | None = None,
            materialize_deletions_threshold: float | None = None, defer_index_remap: bool | None = None,
            compaction_mode: str | None = None, num_threads: int | None = None,
            batch_size: int | None = None, io_buffer_size: int | None = None,
            binary_copy_read_batch_bytes: int | None = None, max_source_fragments: int | None = None,
            max_source_rows: int | None = None, max_source_bytes: int | None = None,
            excluded_fragment_ids: Sequence[int] | None = None, data_storage_version: str | None = None,
            since_version: int | None = None, max_rewrite_bytes: int | None = None,
            max_rewrite_rows: int | None = None, max_rewrite_fragments: int | None = None,
            partial_progress: bool | None = None,
            max_commits: int | None = None, max_retries: int | None = None,
            carry_over_deletes: bool | None = None, where: str | None = None,
            min_input_fragments: int | None = None, task_order: str | None = None,
            sort_order: str | None = None, full: bool | None = None,
            restore_indices: bool | None = None) -> Any:
    """Compact ``table``; returns a one-row DataFrame of measured metrics.

    ``where`` is a Spark SQL predicate (``"ts > current_timestamp() - INTERVAL 1 DAY"``): only
    fragments holding matching rows are compacted. ``sort_order="tenant ASC NULLS LAST, ts
    DESC"``, ``"hilbert(tenant, ts)"`` or ``"zorder(tenant, ts)"`` clusters the rows while
    compacting. ``strategy`` picks the planner (``default``, ``io_bounded``, ``deletion_only``,
    ``incremental`` or one registered with the catalog); ``options`` is the options map, for
    a registered strategy's own settings.

    >>> compact(spark, "db.events", target_rows_per_fragment=1_048_576).show()
    """
    return _compaction(spark, table, catalog, strategy, _given("compact", locals()), options).execute()


# ---- warehouse views -------------------------------------------------------------------

def _quoted(parts: Sequence[str]) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def _table_parts(table: str, catalog: str) -> list[str]:
    """``namespace.table`` (or ``<catalog>.namespace.table``) as its parts, namespace first."""
    parts = table.split(".")
    if len(parts) > 2 and parts[0] == catalog:
        parts = parts[1:]
    if len(parts) < 2 or not all(parts):
        raise ValueError(f"table {table!r} needs a namespace: write <namespace>.<table>, for example db.events")
    return parts


def _require_table(spark: Any, table: str, catalog: str) -> list[str]:
    """The parts of ``table``, a table of ``catalog`` (``namespace.table``) that exists; else
    :class:`~lance_compact.errors.TableNotFoundError` naming it, the catalog, and the closest
    table of its namespace (or the closest namespace, when the namespace does not exist).
    What exists is asked of the catalog as any statement asks it (one lookup); the listings
    that find a near name are made only for a missing table."""
    from .errors import TableNotFoundError
    from .options import did_you_mean

    parts = _table_parts(table, catalog)
    prefix = catalog.split(".")
    try:
        if spark.catalog.tableExists(_quoted([*prefix, *parts])):
            return parts
    except Exception:  # noqa: BLE001 - it is there but cannot be loaded (a corrupt manifest): its row says why
        return parts
    namespace, name = parts[:-1], parts[-1]
    shown = ".".join(parts)
    try:
        names = [r[1] for r in spark.sql(f"SHOW TABLES IN {_quoted([*prefix, *namespace])}").collect()]
    except Exception:  # noqa: BLE001 - the namespace does not exist (or cannot be listed)
        names = None
    if names is not None:
        space = ".".join(namespace)
        hint = did_you_mean(shown, [f"{space}.{n}" for n in names]) or (
            f" (namespace {space} has {len(names)} tables"
            + (": " + ", ".join(sorted(names)[:10]) + (", ..." if len(names) > 10 else "") if names else "") + ")")
        raise TableNotFoundError(f"table {shown} does not exist in catalog {catalog}{hint}", shown, catalog)
    try:
        spaces = [r[0] for r in spark.sql(f"SHOW NAMESPACES IN {_quoted(prefix)}").collect()]
    except Exception:  # noqa: BLE001 - the catalog itself cannot be listed: say only what is known
        spaces = []
    raise TableNotFoundError(f"table {shown} does not exist in catalog {catalog}: its namespace "
                             f"{'.'.join(namespace)} does not exist{did_you_mean('.'.join(namespace), spaces)}",
                             shown, catalog)


def _system_table(spark: Any, name: str, table: str | None, catalog: str) -> Any:
    """``<catalog>.system.<name>``, narrowed to one ``namespace.table`` (filters the catalog
    pushes down: only that table is read). A table that does not exist is refused
    (:func:`_require_table`): a filter that matches nothing would read as "no problem"."""
    from pyspark.sql import functions as F

    parts = None if table is None else _require_table(spark, table, catalog)
    frame = spark.table(_quoted([*catalog.split("."), "system", name]))
    if parts is None:
        return frame
    return frame.where((F.col("namespace") == ".".join(parts[:-1])) & (F.col("table") == parts[-1]))


def table_health(spark: Any, table: str | None = None, *, catalog: str = DEFAULT_CATALOG) -> Any:
    """Health of every table of the warehouse, or of ``table`` (``namespace.table``), from
    metadata only: a DataFrame of ``lance.system.table_health`` (a row per table: its score,
    the steps due and why, fragments, deletions, unindexed fragments, versions, clustering).
    A ``table`` that does not exist raises :class:`~lance_compact.errors.TableNotFoundError`
    (an alert on the score must not read no rows as healthy).

    >>> table_health(spark).orderBy("health_score").show()
    """
    return _system_table(spark, "table_health", table, catalog)


def history(spark: Any, table: str | None = None, *, catalog: str = DEFAULT_CATALOG) -> Any:
    """The versions of every table of the warehouse, or of ``table``, and which were
    maintenance (compaction, index optimization, cleanup): a DataFrame of
    ``lance.system.maintenance_history`` (a row per table and version). A ``table`` that does
    not exist raises :class:`~lance_compact.errors.TableNotFoundError`.

    >>> history(spark, "db.events").where("maintenance").show()
    """
    return _system_table(spark, "maintenance_history", table, catalog)


class LanceTable:
    """One table, for everything this package does to it, the way Delta's ``DeltaTable`` reads::

        t = LanceTable.for_name(spark, "db.events")
        t.optimize().where("day >= current_date() - INTERVAL 7 DAYS").sort_order("zorder(tenant, ts)") \\
            .target_rows_per_fragment(1 << 20).execute()
        t.cleanup(older_than="14 days")
        t.health().show(); t.history().show(); t.layout().show()

    Every call is the same ``CALL`` SQL users run (works over Spark Connect too).
    """

    def __init__(self, spark: Any, name: str, catalog: str = DEFAULT_CATALOG) -> None:
        self._spark, self.name, self.catalog = spark, name, catalog

    @classmethod
    def for_name(cls, spark: Any, name: str, catalog: str = DEFAULT_CATALOG) -> "LanceTable":
        """The table ``name`` (``namespace.table`` of ``catalog``, or a dataset path in its
        warehouse). A ``namespace.table`` that does not exist raises
        :class:`~lance_compact.errors.TableNotFoundError` here (a path is checked by its first
        call)."""
        if "/" not in name and "\\" not in name:
            _require_table(spark, name, catalog)
        return cls(spark, name, catalog)

    def optimize(self) -> "LanceCompaction":
        """A compaction of this table to configure (``where``, ``sort_order``,
        ``target_rows_per_fragment``, ...) and run with ``execute()`` (or ``plan()``)."""
        return LanceCompaction(self._spark, self.name, self.catalog)

    def cleanup(self, **params: Any) -> Any:
        """:func:`cleanup` of this table."""
        return cleanup(self._spark, self.name, catalog=self.catalog, **params)

    def maintain(self, **params: Any) -> Any:
        """:func:`maintain` of this table."""
        return maintain(self._spark, self.name, catalog=self.catalog, **params)

    def create_index(self, column: str, index_type: str, **params: Any) -> Any:
        """:func:`create_index` on this table."""
        return create_index(self._spark, self.name, column, index_type, catalog=self.catalog, **params)

    def optimize_indices(self, **params: Any) -> Any:
        """:func:`optimize_indices` of this table."""
        return optimize_indices(self._spark, self.name, catalog=self.catalog, **params)

    def drop_index(self, name: str) -> Any:
        """:func:`drop_index` of this table."""
        return drop_index(self._spark, self.name, catalog=self.catalog, name=name)

    def layout(self, **params: Any) -> Any:
        """:func:`describe_layout` of this table."""
        return describe_layout(self._spark, self.name, catalog=self.catalog, **params)

    def health(self) -> Any:
        """:func:`table_health` of this table (one row)."""
        return table_health(self._spark, self.name, catalog=self.catalog)

    def history(self) -> Any:
        """:func:`history` of this table (a row per version)."""
        return history(self._spark, self.name, catalog=self.catalog)
