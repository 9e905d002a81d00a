"""A table's metadata tables ``fragments``, ``versions`` and ``indices`` (``lance.db.t.fragments``
...): the facts Lance keeps in its manifests, as SQL tables. Every answer is
``(schema DDL, rows)`` with JSON-safe values (timestamps as microseconds)."""
from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import CompactionError
from ..options import columns_ddl, result_columns
from ..compaction.fragment_facts import FragmentFacts, file_path, handles
from ..compaction.history import rewrite_counts, undecodable_rewrite
from ..compaction.transactions import operation_kind
from ..compaction.fragments import index_state
from ..maintenance.version_ages import version_infos
from ..runtime.envelope import Envelope, Result


METADATA_TABLES = ("fragments", "versions", "indices")
# Operations whose object the maintenance history's details read (system_tables._details);
# of the others only the kind is needed.
_DETAILED = ("CreateIndex", "UpdateConfig")


# The metadata tables' columns: parameters.json (the reference is generated from it)
FRAGMENTS_COLUMNS = tuple(result_columns("fragments_columns"))
# What FragmentFacts' columns answer (one pass, numpy); the others read each fragment's files.
_FROM_FACTS = {"id", "live_rows", "deleted_rows", "physical_rows"}


def _fragments(ds, columns: Sequence[str] | None = None) -> tuple[str, list[list]]:
    """A row per fragment, of ``columns`` only (Spark's pruned scan: ``count(*)`` reads none;
    None: every column). Ids and rows come from the fragments' columns (fragment_facts.py,
    numpy), the files of each fragment only when a column of them is read, index coverage
    only when ``indices`` is."""
    wanted = [c for c, _ in FRAGMENTS_COLUMNS] if columns is None else list(columns)
    unknown = [c for c in wanted if c not in dict(FRAGMENTS_COLUMNS)]
    if unknown:
        raise CompactionError(f"the fragments table has no column {unknown[0]!r}")
    ddl = ", ".join(f"`{c}` {dict(FRAGMENTS_COLUMNS)[c]}" for c in wanted)
    facts = FragmentFacts.of(ds)
    if not wanted:
        return ddl, [()] * len(facts)  # one shared empty row: count(*) reads none of them
    values: dict[str, list] = {}
    if "indices" in wanted:
        names: list[list[str]] = [[] for _ in range(len(facts))]
        for name, e in sorted(index_state(ds, facts).items()):
            for at in np.flatnonzero(e["covered_mask"]).tolist():
                names[at].append(name)
        values["indices"] = names
    for c, column in (("id", facts.ids), ("live_rows", facts.live), ("deleted_rows", facts.deleted),
                      ("physical_rows", facts.physical)):
        if c in wanted:
            values[c] = column.tolist()
    if {"data_files", "bytes", "deletion_file"} & set(wanted):
        paths, sizes, deletions = [], [], []
        for _, f in handles(ds, facts.ids.tolist()):  # one native handle at a time (fragment_facts.py)
            files = f.data_files()
            paths.append([file_path(x) for x in files])
            sizes.append(sum(x.file_size_bytes for x in files)
                         if all(x.file_size_bytes is not None for x in files) else 0)
            deletions.append(f.deletion_file())
        values.update(data_files=paths, bytes=sizes, deletion_file=deletions)
    return ddl, list(zip(*(values[c] for c in wanted)))  # tuples: JSON arrays as they are


_AGGREGATES = ("count_star", "count", "sum", "min", "max")


def _fragment_aggregates(ds, asked: Any) -> tuple[str, list[list]]:
    """Aggregates Spark pushed to the fragments table's scan (MetadataTable.scala): one row of
    BIGINTs, each ``[function, column]`` of ``asked`` answered from the fragments' arrays
    (count_star, or count / sum / min / max of id, live_rows, deleted_rows, physical_rows);
    Spark's own aggregate finishes them. None for sum, min and max over no fragment."""
    if not isinstance(asked, list) or not all(isinstance(a, list) and len(a) == 2 for a in asked):
        raise CompactionError("the fragments table's aggregates are pairs [function, column]")
    facts = FragmentFacts.of(ds)
    arrays = {"id": facts.ids, "live_rows": facts.live, "deleted_rows": facts.deleted,
              "physical_rows": facts.physical}
    row: list[int | None] = []
    for function, column in asked:
        if function not in _AGGREGATES or (function != "count_star" and column not in arrays):
            raise CompactionError(f"the fragments table cannot answer {function}({column})")
        if function in ("count_star", "count"):
            row.append(len(facts))
        elif len(facts) == 0:
            row.append(None)
        else:
            values = arrays[column]
            row.append(int(values.sum() if function == "sum" else values.min() if function == "min" else values.max()))
    return ", ".join(f"`agg{i}` BIGINT" for i in range(len(asked))), [row]


def _operation(ds, version: int) -> tuple[str | None, Any]:
    """(name, operation object) of the transaction that committed ``version``; the object is
    None when pylance cannot build it or only the name is needed, both None when the
    transaction is gone."""
    kind = operation_kind(ds, version)  # from its file's first bytes (compaction/transactions.py)
    if kind is not None and kind not in _DETAILED:
        return kind, None
    try:
        t = ds.read_transaction(version)
    except TypeError as e:
        return ("Rewrite" if undecodable_rewrite(e) else None), None
    except (OSError, ValueError):
        return None, None
    if t is None or t.operation is None:
        return None, None
    return type(t.operation).__name__, t.operation


def version_records(ds, wanted: Callable[[int], bool] | None = None) -> list[dict[str, Any]]:
    """Per version, oldest first: ``version``, ``timestamp`` (datetime), ``operation`` (the
    transaction's kind), ``transaction`` (pylance's operation object, or None),
    ``fragments`` and ``rows`` (the manifest's summary), and for compactions (Lance's
    Rewrite) ``fragments_removed`` / ``fragments_added``. The ``versions`` metadata table and
    lance.system.maintenance_history are both made of these. ``wanted``: only the versions it
    keeps (their manifests and transactions alone are read, and the next one's transaction
    where it tells what a version was); the versions come from ``version_ages.version_infos``."""
    records = []
    versions, numbers = version_infos(ds, wanted)
    ops: dict[int, tuple] = {}

    def op_of(v: int) -> tuple:
        if v not in ops:
            ops[v] = _operation(ds, v) if v in numbers else (None, None)
        return ops[v]

    for info in versions:
        v = info["version"]
        meta = info.get("metadata") or {}
        op, obj = op_of(v)
        if op == "BaseOperation" and op_of(v + 1)[0] == "Rewrite":
            op = "ReserveFragments"  # a compaction's first commit (no Python class in pylance)
        removed = added = None
        if op == "Rewrite":
            removed, added = rewrite_counts(ds, v)
        fragments = meta.get("total_fragments")
        live = meta.get("total_rows")
        records.append({"version": v, "timestamp": info.get("timestamp"), "operation": op, "transaction": obj,
                        "fragments": int(fragments) if fragments is not None else None,
                        "rows": int(live) if live is not None else None,
                        "fragments_removed": removed, "fragments_added": added})
    return records


def micros(when) -> int | None:
    """A datetime as microseconds since the epoch (Spark's TIMESTAMP in JSON rows)."""
    # whole seconds and the microseconds apart: timestamp() * 1e6 in floating point can land a
    # microsecond short (a segment's created_at of .201 s read back as .200999)
    return math.floor(when.timestamp()) * 1_000_000 + when.microsecond if when else None


def _versions(ds) -> tuple[str, list[list]]:
    """A row per version: when, which operation, fragments and live rows (from the
    manifest's summary), and for compactions (Lance's Rewrite) what they removed and added."""
    rows = [[r["version"], micros(r["timestamp"]), r["operation"], r["fragments"], r["rows"],
             r["fragments_removed"], r["fragments_added"]] for r in version_records(ds)]
    return columns_ddl(result_columns("versions_columns")), rows


def _segment_times(ds) -> dict[str, list]:
    """Per index name, its segments' build times, oldest first: Lance's index metadata
    (``created_at`` of each segment); a segment written by a Lance that did not record it
    counts with the commit time of the version it was built at, while that version is kept
    (else it is left out)."""
    times: dict[str, list] = {}
    for d in ds.describe_indices():
        for seg in d.segments:
            when = seg.created_at
            if when is None:
                try:
                    when = ds.checkout_version(seg.dataset_version_at_last_update).get_version()["timestamp"]
                except (OSError, ValueError):
                    when = None  # that version was cleaned up: unknown, not guessed
            if when is not None:
                times.setdefault(d.name, []).append(when.astimezone(timezone.utc))
    return {n: sorted(t) for n, t in times.items()}


def index_built_at(ds) -> dict[str, int]:
    """Per index name, when its newest segment was built (by a build or an optimization), in
    microseconds: Lance's ``created_at`` of the segments, from the manifest (no index file is
    read). A segment Lance did not date is left out (no version is opened to guess it)."""
    out: dict[str, int] = {}
    for d in ds.describe_indices():
        times = [micros(s.created_at) for s in d.segments if s.created_at is not None]
        if times:
            out[d.name] = max(times)
    return out


def _metrics(ds) -> dict[str, str]:
    """Per vector index, its distance type (Lance's index details ``metric_type``)."""
    out = {}
    for d in ds.describe_indices():
        metric = (d.details or {}).get("metric_type") if isinstance(d.details, dict) else None
        if metric:
            out[d.name] = str(metric).lower()
    return out


INDICES_SCHEMA = columns_ddl(result_columns("indices_columns"))


def index_rows(ds, now: datetime | None = None) -> list[list]:
    """A row per user index (:data:`INDICES_SCHEMA`): its type and column(s), its segments, the
    live fragments it covers of the table's, the fragments and live rows it does not cover,
    its distance type (vector indices), and when its model was made: ``created_at`` is the
    oldest segment's build time (the segments optimize_indices adds reuse that segment's
    model; a retrain, or a merge that rewrites every segment, makes it new), ``updated_at``
    the newest segment's, ``age_hours`` the hours since ``created_at``."""
    now = now or datetime.now(timezone.utc)
    fragments = len(ds.fragment_ids())
    times = _segment_times(ds)
    metrics = _metrics(ds)
    rows = []
    for name, e in sorted(index_state(ds).items()):
        t = times.get(name) or [None]
        rows.append([name, e["type"], e["fields"], e["segments"], len(e["covered"]), fragments,
                     e["unindexed_ids"], e["unindexed_rows"], metrics.get(name), micros(t[0]), micros(t[-1]),
                     round((now - t[0]).total_seconds() / 3600, 6) if t[0] is not None else None])
    return rows


def _indices(ds) -> tuple[str, list[list]]:
    return INDICES_SCHEMA, index_rows(ds)


def metadata_table(request: Envelope) -> Result:
    """One of the table's metadata tables (``kind``: fragments, versions, indices)."""
    kind = request.extras.get("kind")
    if kind not in METADATA_TABLES:
        raise CompactionError(f"no metadata table {kind!r}; there are {', '.join(METADATA_TABLES)}")
    target = request.require_target()
    if kind == "fragments":
        # Spark reads only the columns a query names: the schema alone first (no fragment read),
        # then the scan of those columns (count(*): none)
        columns = request.extras.get("columns")
        if request.extras.get("schema_only"):
            return Result(", ".join(f"`{c}` {t}" for c, t in FRAGMENTS_COLUMNS), [])
        if request.extras.get("aggregates") is not None:
            return Result(*_fragment_aggregates(target.open(), request.extras["aggregates"]))
        return Result(*_fragments(target.open(), columns))
    ds = target.open()
    return Result(*(_versions(ds) if kind == "versions" else _indices(ds)))
