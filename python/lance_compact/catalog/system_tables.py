"""The warehouse-wide tables ``lance.system.table_health`` and
``lance.system.maintenance_history``: a row per table (health) or per version of each table
(history), every table evaluated from its metadata on a bounded thread pool.

The JVM lists the warehouse's tables (it knows the layout) and sends
``{"catalog", "tables": [{"namespace", "table", "uri"}, ...], "storage_options",
"maintain_settings", "filters"}`` (parsed once by the engine: runtime/envelope.py). A table that
cannot be read (no dataset there, a corrupt manifest, an invalid policy) gets a row of its own
with ``error`` and NULLs; every other table is still evaluated.

``filters`` are the query's own, pushed down by Spark (SystemTable.scala's scan builder):
``{"namespace": [..], "table": [..], "version": [[op, n], ..]}`` (each optional; a list of
names is ``=`` or ``IN``, ops are ``> >= < <= =``). Only the tables they name are opened and,
for the history, only the versions they keep are decoded. Spark still applies every filter
after the scan, so a filter read here can only narrow what is read, never change the answer.
"""
from __future__ import annotations

import logging
import operator
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from ..errors import CompactionError
from ..maintenance.health import METADATA_THREADS
from ..maintenance.health_cache import EVALUATION_THREADS, HEALTH, own_policy_key
from ..maintenance.warehouse_maintenance import listed_namespaces
from .metadata_tables import index_built_at, micros, version_records
from ..options import columns_ddl, result_columns
from ..maintenance.policy import resolve_policy
from ..runtime.envelope import Envelope, TableEntry
from ..runtime.secrets import redact
from ..runtime import cost_records
from ..runtime.catalog_service import for_entry
from ..runtime.tables import open_dataset

log = logging.getLogger(__name__)

# pylance does its I/O in Rust with the GIL released: threads overlap the object-store
# round trips of many small tables (health.py's bound: a large warehouse does not open every
# table at once).
MAX_THREADS = METADATA_THREADS

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "=": operator.eq}


def _names(filters: dict[str, Any], key: str) -> set[str] | None:
    values = filters.get(key)
    return None if values is None else {str(v) for v in values}


def selected(tables: Sequence[TableEntry], filters: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The listed tables the query's pushed filters keep (all of them without filters)."""
    namespaces, names = _names(filters, "namespace"), _names(filters, "table")
    return [(e.namespace, e.name, e.uri) for e in tables
            if (namespaces is None or e.namespace in namespaces) and (names is None or e.name in names)]


def version_filter(filters: dict[str, Any]) -> Callable[[int], bool] | None:
    """Whether a version number passes the query's pushed version ranges (None: no range)."""
    ranges = filters.get("version") or []
    for op, _ in ranges:
        if op not in _OPS:
            raise CompactionError(f"system table: unknown version filter {op!r}; expected one of {', '.join(_OPS)}")
    if not ranges:
        return None
    return lambda v: all(_OPS[op](v, int(n)) for op, n in ranges)


def _each_table(request: Envelope, rows_of: Callable[[str, str, str], list[dict[str, Any]]],
                columns: list[tuple[str, str]], kind: str, most: int = MAX_THREADS) -> list[tuple]:
    filters = request.extras.get("filters") or {}
    tables = selected(request.tables, filters)
    storage = dict(request.storage_options)
    # The tables opened, by name: with a filter pushed down, the test reads this line to see
    # that only the tables asked for were read.
    log.info("system table %s: opening %d of %d listed tables%s%s", kind, len(tables), len(request.tables),
             f" ({', '.join(f'{ns}.{t}' for ns, t, _ in tables)})" if filters else "",
             listed_namespaces(request))

    def one(t: tuple) -> list[dict[str, Any]]:
        namespace, name, uri = t
        try:
            return rows_of(namespace, name, uri)
        except CompactionError as e:
            why = e.message
        except Exception as e:  # a corrupt file, an object-store failure: say which and go on
            why = f"table {namespace}.{name}: cannot be read: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return [{"namespace": namespace, "table": name, "error": redact(why, storage)}]

    # I/O bound (object-store round trips, GIL released): not bounded by the cores.
    threads = max(1, min(most, int(request.extras.get("threads") or most), len(tables) or 1))
    with ThreadPoolExecutor(threads, thread_name_prefix="lance-compact-system") as pool:
        results = list(pool.map(one, tables))
    return [tuple(r.get(c) for c, _ in columns) for rows in results for r in rows]


_BUILT: "OrderedDict[tuple[str, int], dict[str, int]]" = OrderedDict()
_BUILT_MOST = 10_000
_built_lock = threading.Lock()


def _built_at(uri: str, version: int, dataset: Any) -> dict[str, int]:
    """:func:`index_built_at` of the table at ``version``, kept per table version in this
    process: an evaluation served from the health cache opens no table, and neither does this
    (``dataset``: the table as opened, or how to open it)."""
    key = (uri, version)
    with _built_lock:
        if key in _BUILT:
            _BUILT.move_to_end(key)
            return _BUILT[key]
    ds = dataset() if callable(dataset) else dataset
    built = index_built_at(ds)
    with _built_lock:
        _BUILT[key] = built
        while len(_BUILT) > _BUILT_MOST:
            _BUILT.popitem(last=False)
    return built


def table_health_rows(request: Envelope) -> tuple[str, list[tuple]]:
    """``lance.system.table_health``: one row per table (parameters.json ``health_columns``)."""
    storage = dict(request.storage_options)
    settings = dict(request.maintain_settings)
    catalog = request.catalog_name

    def rows_of(namespace: str, name: str, uri: str) -> list[dict[str, Any]]:
        table = f"{namespace}.{name}"
        options = for_entry(storage, namespace, name)
        # read again only when the table changed since this worker's last evaluation of it
        e = HEALTH.evaluate(uri, options, lambda: open_dataset(table, uri, options),
                            lambda config: [resolve_policy(None, config, settings, table, catalog)],
                            policy_key=own_policy_key(table, catalog, settings))
        h, policy = e.healths[0], e.policies[0]
        p = h.parts
        built = (_built_at(uri, p["version"], e.ds if e.ds is not None else (lambda: open_dataset(table, uri, options)))
                 if p["indices"] else {})
        return [{**{k: p[k] for k in p if k != "indices"},
                 "namespace": namespace, "table": name, "health_score": h.score, "due": list(h.due),
                 "indices": [[n, e["type"], e["unindexed_fragments"], e["unindexed_rows"], e["segments"], built.get(n)]
                             for n, e in p["indices"].items()],
                 "reasons": dict(h.reasons), "enabled": policy.enabled, "priority": policy.priority}]

    columns = result_columns("health_columns")
    # most tables only listed (unchanged since this worker read them): many at once, the full
    # reads among them bounded by the cache (health_cache.py)
    return columns_ddl(columns), _each_table(request, rows_of, columns, "table_health", EVALUATION_THREADS)


def _kind(operation: str | None) -> tuple[str, bool]:
    """(kind, whether it is maintenance) of a Lance operation."""
    return {"Rewrite": ("compaction", True), "ReserveFragments": ("reserve", True),
            "CreateIndex": ("index", True), "UpdateConfig": ("policy", True),
            None: ("unknown", False)}.get(operation, ("write", False))


def _details(r: dict[str, Any], indexed: set[str]) -> str | None:
    """What the version did, in words; ``indexed``: names of indices earlier versions built."""
    op, t = r["operation"], r["transaction"]
    if op == "Rewrite":
        if r["fragments_removed"] is None:
            return "compaction (fragments not known: the version before it was cleaned up and pylance cannot decode its transaction)"
        return f"compaction: {r['fragments_removed']} fragments -> {r['fragments_added']}, {r['rows']} rows"
    if op == "ReserveFragments":
        return "fragment ids reserved for the compaction committed next"
    if op == "CreateIndex" and t is not None and not t.new_indices and t.removed_indices:
        gone = sorted({ix.name for ix in t.removed_indices})  # DROP INDEX, lance.drop_index
        indexed.difference_update(gone)
        return (f"{'indices' if len(gone) > 1 else 'index'} {', '.join(gone)} dropped "
                f"({len(t.removed_indices)} segment{'s' if len(t.removed_indices) != 1 else ''})")
    if op == "CreateIndex" and t is not None:
        covered = {ix.name: len(ix.fragment_ids or []) for ix in t.new_indices or []}
        removed = len(t.removed_indices or [])
        names = sorted(covered)
        if removed:
            what = f"optimized: {removed} segment{'s' if removed != 1 else ''} replaced by one covering"
        elif indexed & set(names):
            what = "optimized: a new segment covers"  # num_indices_to_merge=0: a delta
        else:
            what = "built: covers"
        indexed.update(names)
        return (f"{'indices' if len(names) > 1 else 'index'} {', '.join(names)} {what} "
                + ", ".join(f"{c} fragments" + (f" ({n})" if len(names) > 1 else "") for n, c in sorted(covered.items())))
    if op == "UpdateConfig" and t is not None and t.config_updates is not None:
        updates = t.config_updates.updates or {}
        set_ = sorted(f"{k}={v}" for k, v in updates.items() if v is not None)
        unset = sorted(k for k, v in updates.items() if v is None)
        return "; ".join(x for x in ((("set " + ", ".join(set_)) if set_ else ""),
                                     (("unset " + ", ".join(unset)) if unset else "")) if x) or "config updated"
    if op is None:
        return "the transaction of this version is not recorded (or not readable)"
    return None


# The operations whose versions this product keeps a cost for (runtime/cost_records.py): only
# their records are looked for.
_COSTED = {"Rewrite", "CreateIndex"}


def maintenance_history_rows(request: Envelope) -> tuple[str, list[tuple]]:
    """``lance.system.maintenance_history``: a row per version of each table, from Lance's
    own transactions (parameters.json ``history_columns``); the same versions, operations and
    counts as each table's ``versions`` metadata table. Cleanup makes no version, so it does
    not appear."""
    storage = dict(request.storage_options)
    wanted = version_filter(request.extras.get("filters") or {})

    def rows_of(namespace: str, name: str, uri: str) -> list[dict[str, Any]]:
        options = for_entry(storage, namespace, name)
        ds = open_dataset(f"{namespace}.{name}", uri, options)
        records = version_records(ds, wanted)
        if wanted is not None and any(r["operation"] == "CreateIndex" for r in records):
            # whether an index was built or optimized depends on the versions before: read them all
            records = version_records(ds)
        kept = cost_records.read(uri, options, [r["version"] for r in records if r["operation"] in _COSTED
                                               and (wanted is None or wanted(r["version"]))])
        out, indexed = [], set()
        for r in records:
            details = _details(r, indexed)
            if wanted is not None and not wanted(r["version"]):
                continue
            kind, maintenance = _kind(r["operation"])
            cost = kept.get(r["version"])
            out.append({**r, "namespace": namespace, "table": name, "timestamp": micros(r["timestamp"]),
                        "kind": kind, "maintenance": maintenance, "details": details,
                        **({"bytes_read": cost.bytes_read, "bytes_written": cost.bytes_written,
                            "task_seconds": cost.task_ms / 1000 if cost.task_ms is not None else None,
                            "elapsed_ms": cost.elapsed_ms} if cost else {})})
        return out

    columns = result_columns("history_columns")
    return columns_ddl(columns), _each_table(request, rows_of, columns, "maintenance_history")
