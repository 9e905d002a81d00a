"""What the operator configured for the driver, read once when the engine starts.

These settings come from the SparkContext's own (static) configuration, which whoever starts
the driver sets (``--conf``, a properties file, the session builder) and which no SQL
statement can change (``SET`` writes a session's SQL configuration, not this):

- ``spark.sql.catalog.<catalog>.strategies.<name> = module.Class``: a custom planning
  strategy, chosen in SQL by ``<name>``. Nothing a SQL user names is imported otherwise.
- ``spark.lance.compact.picture.dir = /folder``: where ``describe_layout(picture => ...)``
  may write; without it the picture parameter is refused.
- ``spark.lance.compact.cleanup.unverifiedMinAge = 7 days``: the youngest a file no version
  references may be for cleanup to remove it (the floor of ``unverified_min_age``; default
  Lance's own 7 days). A writer's data and deletion files exist before its commit, so a SQL
  user must not be able to remove young ones; only the operator, who knows no write runs
  for longer, lowers it ('1 hour'; '0 seconds' lets Lance's ``delete_unverified`` run).
- ``spark.lance.compact.cleanup.versionMinAge = 7 days``: the youngest a version may be for any
  cleanup (cleanup, maintain, maintain_warehouse, the service, policies) to remove it, as
  Delta's retention check refuses a VACUUM under 168 hours. A reader or writer still on a
  version finds its files gone once it is removed; only the operator lowers it ('0s' turns the
  check off, as Delta's ``retentionDurationCheck.enabled=false``).
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any, Iterable

log = logging.getLogger(__name__)

PICTURE_DIR = "spark.lance.compact.picture.dir"
CLEANUP_FLOOR = "spark.lance.compact.cleanup.unverifiedMinAge"
VERSION_FLOOR = "spark.lance.compact.cleanup.versionMinAge"
_STRATEGY_KEY = re.compile(r"spark\.sql\.catalog\.([^.]+)\.strategies\.([^.]+)")

_strategies: dict[str, dict[str, str]] = {}  # catalog -> strategy name -> module.Class
_picture_dir: str | None = None
_cleanup_floor: str | None = None
_version_floor: str | None = None


def load(conf: Iterable[tuple[str, str]]) -> None:
    """Take the settings from the driver's static Spark configuration (engine start)."""
    global _picture_dir, _cleanup_floor, _version_floor
    strategies: dict[str, dict[str, str]] = {}
    picture_dir = cleanup_floor = version_floor = None
    for key, value in conf:
        m = _STRATEGY_KEY.fullmatch(key)
        if m and value.strip():
            strategies.setdefault(m.group(1), {})[m.group(2).lower()] = value.strip()
        elif key == PICTURE_DIR and value.strip():
            picture_dir = value.strip()
        elif key == CLEANUP_FLOOR:
            cleanup_floor = value  # checked where it is used (version_cleanup.unverified_floor)
        elif key == VERSION_FLOOR:
            version_floor = value  # checked where it is used (maintenance/retention.py)
    _strategies.clear()
    _strategies.update(strategies)
    _picture_dir = picture_dir
    _cleanup_floor = cleanup_floor
    _version_floor = version_floor


def strategies(catalog: str | None) -> dict[str, str]:
    """Registered strategies (name -> ``module.Class``) of ``catalog``; of every catalog when
    the request does not say which (all of them were registered by the operator)."""
    if catalog is not None:
        return dict(_strategies.get(catalog, {}))
    merged: dict[str, str] = {}
    for registered in _strategies.values():
        merged.update(registered)
    return merged


def picture_dir() -> str | None:
    """The folder describe_layout may draw pictures into, or None (pictures off)."""
    return _picture_dir


def cleanup_floor() -> str | None:
    """The operator's floor for removing unreferenced files as written (None: not set, Lance's
    7 days)."""
    return _cleanup_floor


def version_floor() -> str | None:
    """The operator's floor for removing versions as written (None: not set, 7 days)."""
    return _version_floor


def max_task_attempts(sc: Any) -> int:
    """How many attempts Spark gives a task: local[N] 1, local[N,F] F, else spark.task.maxFailures."""
    master = sc.master.replace(" ", "")
    m = re.fullmatch(r"local\[(?:\d+|\*),(\d+)\]", master)
    if m:
        return int(m.group(1))
    if re.fullmatch(r"local(?:\[(?:\d+|\*)\])?", master):
        return 1
    return int(static_conf(sc).get("spark.task.maxFailures", "4"))


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}


def size_bytes(key: str, text: str) -> int:
    """A size setting's value ('67108864', '64m', '1g') in bytes; an error names the setting."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if m is None or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"{key} = {text!r}: expected a size such as 67108864, 64m or 1g")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


# Work small enough runs in the engine process itself instead of as Spark tasks: a compaction
# batch (compaction/engine_rewrite.py) and an index build (indexing/build.py, upkeep.py), by
# this one setting.
MAX_BATCH_BYTES = "spark.lance.compact.engineRewrite.maxBatchBytes"
# Its former name, still read for one release (with a warning): "maxBytes" read like one more of
# the byte budgets (max_rewrite_bytes, max_total_rewrite_bytes) while it is a batch's size.
FORMER_MAX_BYTES = "spark.lance.compact.engineRewrite.maxBytes"
# Measured on the benchmark's streaming table (88 MB read, 2 tasks; 2 cores): the rewrite
# itself takes ~0.3 s, so 256 MiB bounds a batch here to about a second and the engine's
# memory to what pylance's compact_files of the same batch takes.
LOCAL_DEFAULT = 256 << 20


def is_local(master: str) -> bool:
    """Whether ``master`` runs the executors inside the driver's JVM (``local``, ``local[N]``,
    ``local[N,F]``)."""
    return re.fullmatch(r"local(\[[^\]]*\])?", master.replace(" ", "")) is not None


def max_batch_bytes(conf: dict[str, str], master: str) -> int:
    """The largest batch (bytes its tasks read, or an index build's estimated column bytes) done
    in the engine: the operator's ``spark.lance.compact.engineRewrite.maxBatchBytes`` (or its
    former name ``engineRewrite.maxBytes``, with a warning), else 256 MiB in local mode and 0
    (off) on a cluster. A value that is no size is ignored with a warning (the default applies)."""
    default = LOCAL_DEFAULT if is_local(master) else 0
    key = MAX_BATCH_BYTES
    if key not in conf and FORMER_MAX_BYTES in conf:
        key = FORMER_MAX_BYTES
        log.warning("%s is deprecated: it is the former name of %s, read until the next release; use %s",
                    FORMER_MAX_BYTES, MAX_BATCH_BYTES, MAX_BATCH_BYTES)
    text = conf.get(key)
    if text is None:
        return default
    try:
        return size_bytes(key, text)
    except ValueError as e:
        log.warning("%s; using the default %d", e, default)
        return default


# id -> (the context, kept alive so its id is not reused; its static conf)
_STATIC: dict[int, tuple[Any, dict[str, str]]] = {}
_static_lock = threading.Lock()


def static_conf(sc: Any) -> dict[str, str]:
    """The driver's static Spark configuration (no statement can change it), read once per
    SparkContext: PySpark reads the whole conf with several Py4J round trips an entry (about
    250 for 30 settings), and a warehouse run's first tables asked for it at once, one read each."""
    with _static_lock:
        known = _STATIC.get(id(sc))
        if known is None or known[0] is not sc:
            known = _STATIC[id(sc)] = (sc, dict(sc.getConf().getAll()))
        return known[1]


_ENGINE_LIMITS: dict[int, tuple[Any, int]] = {}  # id -> (the context, kept alive so its id is not reused; limit)


def engine_limit(sc: Any) -> int:
    """This engine's ``max_batch_bytes``, from the driver's static Spark configuration."""
    known = _ENGINE_LIMITS.get(id(sc))
    if known is None or known[0] is not sc:
        known = _ENGINE_LIMITS[id(sc)] = (sc, max_batch_bytes(static_conf(sc), sc.master))
    return known[1]


# An index build in the engine worker (indexing/build.py, upkeep.py) is bounded three ways, each
# beside maxBatchBytes (which turns in-engine work off on a cluster): the column's size, the build's
# modelled CPU (indexing/cost.py: parameters such as HNSW's m and ef_construction make a build cost
# far more than its rows), and a time limit after which its statement is cancelled (its worker
# killed at the cancel grace if the build does not end): beyond either bound it runs as Spark tasks.
INDEX_MAX_BYTES = "spark.lance.compact.index.engineMaxBytes"
INDEX_MAX_SECONDS = "spark.lance.compact.index.engineMaxSeconds"
INDEX_TIMEOUT = "spark.lance.compact.index.engineTimeout"
INDEX_DEFAULTS = {INDEX_MAX_BYTES: 8 << 20, INDEX_MAX_SECONDS: 10.0, INDEX_TIMEOUT: 120.0}


def index_limits(conf: dict[str, str]) -> dict[str, float]:
    """The three bounds of an in-engine index build from the driver's static conf (bytes of the
    column, modelled CPU seconds, seconds of wall time); a value that does not parse is ignored
    with a warning (the default applies)."""
    from .durations import seconds as duration_seconds

    out: dict[str, float] = dict(INDEX_DEFAULTS)
    for key in INDEX_DEFAULTS:
        text = conf.get(key)
        if text is None:
            continue
        try:
            out[key] = float(size_bytes(key, text)) if key == INDEX_MAX_BYTES else (
                float(text) if key == INDEX_MAX_SECONDS else duration_seconds(text, key))
            if out[key] < 0:
                raise ValueError(f"{key} = {text!r}: must not be negative")
        except Exception as e:  # noqa: B902 - a ValueError or the durations parser's error
            log.warning("%s; using the default %s", e, INDEX_DEFAULTS[key])
            out[key] = INDEX_DEFAULTS[key]
    return out


_INDEX_LIMITS: dict[int, tuple[Any, dict[str, float]]] = {}


def index_engine_limits(sc: Any) -> dict[str, float]:
    """:func:`index_limits` of this engine's SparkContext (read once per context)."""
    known = _INDEX_LIMITS.get(id(sc))
    if known is None or known[0] is not sc:
        known = _INDEX_LIMITS[id(sc)] = (sc, index_limits(static_conf(sc)))
    return known[1]
