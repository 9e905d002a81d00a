"""What the catalog shows of a table without a procedure: its schema in Spark types, its rows
(read on the driver, for checks), and its metadata tables ``fragments``, ``versions`` and
``indices`` -- the facts Lance keeps in its manifests, as SQL tables.

Every answer is ``(schema DDL, rows)`` with JSON-safe values (timestamps as microseconds).
"""
from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any

import pyarrow as pa

from .errors import CompactionError
from .fragments import data_bytes, live_and_deleted
from .history import undecodable_rewrite
from .indices import index_state
from .spark_types import schema_ddl
from .tables import open_dataset


_EPOCH_DAY = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)
_MICRO = datetime.timedelta(microseconds=1)


def _json_value(v: Any, t: pa.DataType) -> Any:
    """A value of Arrow type ``t`` as the JVM reads it back (Scala ``JsonRows``): structs as
    arrays in field order, maps as objects, decimals as text, binary as base64, dates as days
    and timestamps as microseconds since the epoch."""
    if v is None:
        return None
    if pa.types.is_dictionary(t):
        return _json_value(v, t.value_type)
    if pa.types.is_struct(t):
        return [_json_value(v.get(f.name), f.type) for f in t]
    if pa.types.is_map(t):
        return {str(k): _json_value(x, t.item_type) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_json_value(x, t.value_type) for x in v]
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode()
    if isinstance(v, datetime.datetime):
        epoch = _EPOCH.replace(tzinfo=datetime.timezone.utc) if v.tzinfo else _EPOCH
        return (v - epoch) // _MICRO
    if isinstance(v, datetime.date):
        return (v - _EPOCH_DAY).days
    return v


def _rows(table: pa.Table) -> list[list]:
    """Rows of ``table`` in schema order, as :func:`_json_value` writes values; top-level
    timestamps and dates are cast in Arrow (exact for nanoseconds)."""
    columns = []
    for f, col in zip(table.schema, table.columns):
        t = f.type
        if pa.types.is_timestamp(t):
            col, t = col.cast(pa.timestamp("us", t.tz)).cast(pa.int64()), pa.int64()
        elif pa.types.is_date(t):
            col, t = col.cast(pa.date32()).cast(pa.int32()), pa.int32()
        columns.append([_json_value(v, t) for v in col.to_pylist()])
    return [list(r) for r in zip(*columns)] if columns else [[] for _ in range(table.num_rows)]


def open_request(raw: dict[str, Any]):
    """The dataset a read request names (``table``, ``uri``, ``storage_options``, ``version``)."""
    version = raw.get("version")
    return open_dataset(raw.get("table") or raw["uri"], raw["uri"], raw.get("storage_options"),
                        version=int(version) if version is not None else None)


def describe(request_json: str) -> tuple[str, list[tuple]]:
    """The table's schema as Spark DDL, its live rows, its version and its config (what
    SHOW TBLPROPERTIES shows): one row."""
    raw = json.loads(request_json)
    ds = open_request(raw)
    return ("`schema` STRING, `rows` BIGINT, `version` BIGINT, `config` MAP<STRING, STRING>",
            [(schema_ddl(ds.schema), ds.count_rows(), ds.version, dict(ds.config() or {}))])


DRIVER_READ_MAX_BYTES = 32 << 20


def read(request_json: str) -> tuple[str, list[list]]:
    """Rows of the table (``columns``, Lance ``filter``, ``version``) read on the driver; a
    read that would return more than ``max_rows`` rows or ``DRIVER_READ_MAX_BYTES`` of data
    is refused (``distributed_reads=false``, or no Python data source)."""
    raw = json.loads(request_json)
    ds = open_request(raw)
    table_name = raw.get("table") or raw["uri"]
    columns = raw.get("columns")
    filt = raw.get("filter") or None
    limit = int(raw.get("max_rows", 1_000_000))
    if raw.get("count_only"):
        return "`count` BIGINT", [[ds.count_rows(filter=filt)]]
    n = ds.count_rows(filter=filt)
    if n > limit:
        raise CompactionError(
            f"table {table_name}: this driver-side read would return {n:,} rows, more than "
            f"spark.sql.catalog.<name>.read_max_rows = {limit:,}; leave "
            "spark.sql.catalog.<name>.distributed_reads on (the default) to read on the executors")
    names = columns if columns is not None else ds.schema.names
    table = ds.to_table(columns=names, filter=filt)
    if table.nbytes > DRIVER_READ_MAX_BYTES:
        # The rows cross to the JVM as JSON, many times their Arrow size: refuse rather than
        # exhaust the driver's heap.
        raise CompactionError(
            f"table {table_name}: this driver-side read holds {table.nbytes / 2**20:,.0f} MiB of "
            f"data, more than the {DRIVER_READ_MAX_BYTES >> 20} MiB a driver read carries; leave "
            "spark.sql.catalog.<name>.distributed_reads on (the default) to read on the executors")
    schema = pa.schema([ds.schema.field(c) for c in names])
    return schema_ddl(schema), _rows(table)


METADATA_TABLES = ("fragments", "versions", "indices")


def _fragments(ds) -> tuple[str, list[list]]:
    covering: dict[int, list[str]] = {}
    for name, e in index_state(ds).items():
        for fid in e["covered"]:
            covering.setdefault(fid, []).append(name)
    rows = []
    for f in ds.get_fragments():
        m = f.metadata
        d = m.deletion_file
        live, deleted = live_and_deleted(m)
        rows.append([f.fragment_id, live, deleted, m.physical_rows,
                     [x.path for x in m.files],
                     data_bytes([m]) or 0,
                     d.path(f.fragment_id) if d else None,
                     sorted(covering.get(f.fragment_id, []))])
    return ("`id` BIGINT, `live_rows` BIGINT, `deleted_rows` BIGINT, `physical_rows` BIGINT, "
            "`data_files` ARRAY<STRING>, `bytes` BIGINT, `deletion_file` STRING, "
            "`indices` ARRAY<STRING>"), rows


def _operation(ds, version: int) -> tuple[str | None, Any]:
    """(name, operation object) of the transaction that committed ``version``; the object is
    None when pylance cannot build it, both None when the transaction is gone."""
    try:
        t = ds.read_transaction(version)
    except TypeError as e:
        return ("Rewrite" if undecodable_rewrite(e) else None), None
    except (OSError, ValueError):
        return None, None
    if t is None or t.operation is None:
        return None, None
    return type(t.operation).__name__, t.operation


def version_records(ds) -> list[dict[str, Any]]:
    """Per version, oldest first: ``version``, ``timestamp`` (datetime), ``operation`` (the
    transaction's kind), ``transaction`` (pylance's operation object, or None),
    ``fragments`` and ``rows`` (the manifest's summary), and for compactions (Lance's
    Rewrite) ``fragments_removed`` / ``fragments_added``. The ``versions`` metadata table and
    lance.system.maintenance_history are both made of these."""
    records = []
    versions = sorted(ds.versions(), key=lambda x: x["version"])
    known = {x["version"] for x in versions}
    ops = {x["version"]: _operation(ds, x["version"]) for x in versions}
    for info in versions:
        v = info["version"]
        meta = info.get("metadata") or {}
        op, obj = ops[v]
        if op == "BaseOperation" and ops.get(v + 1, (None,))[0] == "Rewrite":
            op = "ReserveFragments"  # a compaction's first commit (no Python class in pylance)
        removed = added = None
        if op == "Rewrite" and v - 1 in known:
            now = {f.fragment_id for f in ds.checkout_version(v).get_fragments()}
            then = {f.fragment_id for f in ds.checkout_version(v - 1).get_fragments()}
            removed, added = len(then - now), len(now - then)
        fragments = meta.get("total_fragments")
        live = meta.get("total_rows")
        records.append({"version": v, "timestamp": info.get("timestamp"), "operation": op, "transaction": obj,
                        "fragments": int(fragments) if fragments is not None else None,
                        "rows": int(live) if live is not None else None,
                        "fragments_removed": removed, "fragments_added": added})
    return records


def micros(when) -> int | None:
    """A datetime as microseconds since the epoch (Spark's TIMESTAMP in JSON rows)."""
    return int(when.timestamp() * 1_000_000) if when else None


def _versions(ds) -> tuple[str, list[list]]:
    """A row per version: when, which operation, fragments and live rows (from the
    manifest's summary), and for compactions (Lance's Rewrite) what they removed and added."""
    rows = [[r["version"], micros(r["timestamp"]), r["operation"], r["fragments"], r["rows"],
             r["fragments_removed"], r["fragments_added"]] for r in version_records(ds)]
    return ("`version` BIGINT, `timestamp` TIMESTAMP, `operation` STRING, `fragments` BIGINT, "
            "`rows` BIGINT, `fragments_removed` BIGINT, `fragments_added` BIGINT"), rows


def _indices(ds) -> tuple[str, list[list]]:
    rows = [[name, e["type"], e["fields"], len(e["covered"]), e["unindexed_ids"]]
            for name, e in sorted(index_state(ds).items())]
    return ("`name` STRING, `type` STRING, `columns` ARRAY<STRING>, `fragments_covered` BIGINT, "
            "`unindexed_fragments` ARRAY<BIGINT>"), rows


def metadata_table(request_json: str) -> tuple[str, list[list]]:
    """One of the table's metadata tables (``kind``: fragments, versions, indices)."""
    raw = json.loads(request_json)
    kind = raw.get("kind")
    if kind not in METADATA_TABLES:
        raise CompactionError(f"no metadata table {kind!r}; there are {', '.join(METADATA_TABLES)}")
    ds = open_request(raw)
    return {"fragments": _fragments, "versions": _versions, "indices": _indices}[kind](ds)
