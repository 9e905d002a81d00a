"""Distributed reads of catalog tables: a Spark Python data source whose partitions are
groups of a table's fragments, read on the executors as Arrow batches.

The catalog's scan (Scala ``LanceScanBuilder``) asks the engine for the groups
(:func:`read_plan`) and hands them, with the pruned columns, the Lance filter and the pinned
version, to this source; Spark finds it through the top-level module
``pyspark_lance_compact`` (Spark's automatic registration of ``pyspark_*`` modules). Every
partition reads the same version, so a query sees one snapshot of the table.

Nothing here imports pylance at module level: Spark imports the module once per JVM to
register it.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAME = "lance_compact_read"


def read_plan(request_json: str) -> tuple[str, list[list]]:
    """Groups of fragment ids, one Spark partition each: consecutive fragments until a group
    holds ``partition_bytes`` of data files (Spark's maxPartitionBytes); a fragment larger
    than that is a group of its own. One row per group: ``(fragment_ids JSON, rows, bytes)``."""
    from .fragments import data_bytes, live_and_deleted  # pylance, on the driver's engine only
    from .metadata import open_request

    raw = json.loads(request_json)
    ds = open_request(raw)
    limit = max(1, int(raw.get("partition_bytes", 128 << 20)))
    groups: list[list] = []
    ids: list[int] = []
    rows = size = 0
    for f in ds.get_fragments():
        m = f.metadata
        fbytes = data_bytes([m]) or 0
        if ids and size + fbytes > limit:
            groups.append([json.dumps(ids), rows, size])
            ids, rows, size = [], 0, 0
        ids.append(f.fragment_id)
        rows += live_and_deleted(m)[0]
        size += fbytes
    if ids:
        groups.append([json.dumps(ids), rows, size])
    return "`fragment_ids` STRING, `rows` BIGINT, `bytes` BIGINT", groups


def arrow_type_for_spark(t: Any) -> Any:
    """The Arrow type Spark reads for a Lance column's Arrow type (see
    :func:`lance_compact.metadata.spark_type`): vectors as lists, unsigned ints widened,
    large and view types as plain ones, timestamps in microseconds."""
    import pyarrow as pa

    if pa.types.is_uint8(t):
        return pa.int16()
    if pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_uint64(t):
        return pa.decimal128(20, 0)
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_date(t):
        return pa.date32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", t.tz)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(pa.field("element", arrow_type_for_spark(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, arrow_type_for_spark(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(arrow_type_for_spark(t.key_type), arrow_type_for_spark(t.item_type))
    if pa.types.is_dictionary(t):
        return arrow_type_for_spark(t.value_type)
    return t


class _FragmentGroup(InputPartition):
    def __init__(self, fragment_ids: list[int]) -> None:
        super().__init__(fragment_ids)
        self.fragment_ids = fragment_ids


class LanceFragmentReader(DataSourceReader):
    """Reads one group of fragments per partition at the pinned version."""

    def __init__(self, options: dict[str, str]) -> None:
        self.request = json.loads(options["request"])
        self.groups = json.loads(options["partitions"])

    def partitions(self) -> list[InputPartition]:
        # Planned by the engine already: no Lance call here (this runs in a driver-side worker).
        return [_FragmentGroup(g) for g in self.groups] or [_FragmentGroup([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # What fails here reaches Spark's task failure, its logs and event log: redacted, as
        # the compaction path's errors are.
        from .secrets import redact

        try:
            yield from self._read(partition)
        except Exception as e:
            raise RuntimeError(redact(f"reading {self.request.get('table') or self.request.get('uri')}: "
                                      f"{type(e).__name__}: {e}", self.request.get("storage_options"))
                               ) from None

    def _read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from .metadata import open_request

        ids = partition.value
        if not ids:
            return
        ds = open_request(self.request)
        columns = self.request["columns"]
        target = pa.schema([pa.field(c, arrow_type_for_spark(ds.schema.field(c).type)) for c in columns])
        scanner = ds.scanner(columns=columns, filter=self.request.get("filter") or None,
                             fragments=[ds.get_fragment(i) for i in ids])
        for batch in scanner.to_batches():
            if batch.num_rows:
                yield batch.select(columns).cast(target)


class LanceFragmentSource(DataSource):
    """``lance_compact_read``: used by the catalog's scans, not meant to be named by users
    (its options are the engine's read plan)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        raise ValueError(f"{NAME} is read through the lance catalog (SELECT ... FROM lance.db.t)")

    def reader(self, schema: Any) -> DataSourceReader:
        return LanceFragmentReader(dict(self.options))
