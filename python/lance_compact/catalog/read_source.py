"""Distributed reads of catalog tables: a Spark Python data source whose partitions are
groups of a table's fragments, read on the executors as Arrow batches.

The catalog's scan (Scala ``LanceScanBuilder``) asks the engine for the groups
(:func:`read_plan`) and hands them, with the pruned columns, the Lance filter and the pinned
version, to this source. Every partition reads the same version, so a query sees one snapshot
of the table.

The source is registered under no name (no ``pyspark_*`` module, no
``spark.dataSource.register``): a registered name can be given by any SQL user with options of
their choosing (``CREATE TEMPORARY VIEW v USING <name> OPTIONS (request '...')``), and the
``request`` option says which table to open, where, with which storage options. The JVM builds
the source itself, this class by reference, for the catalog's scans only (Scala
``LanceCompactReadSource``, ``FragmentScan``), so every request it reads is one the catalog
made from a table it resolved inside its warehouse, with its credential rule applied.

Nothing here imports pylance at module level: Spark's driver-side workers import the module
to create the source and plan its partitions.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

if TYPE_CHECKING:
    from ..runtime.envelope import Envelope, Result

NAME = "lance_compact_read"


def read_plan(request: "Envelope") -> "Result":
    """Groups of fragment ids, one Spark partition each: consecutive fragments until a group
    holds ``partition_bytes`` of data files (Spark's maxPartitionBytes); a fragment larger
    than that is a group of its own. One row per group: ``(fragment_ids JSON, rows, bytes)``."""
    from ..compaction.fragments import data_bytes, live_and_deleted  # pylance, on the driver's engine only
    from ..runtime.envelope import Result

    ds = request.require_target().open()
    limit = max(1, int(request.extras.get("partition_bytes", 128 << 20)))
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
    return Result("`fragment_ids` STRING, `rows` BIGINT, `bytes` BIGINT", groups)


class _FragmentGroup(InputPartition):
    def __init__(self, fragment_ids: list[int]) -> None:
        super().__init__(fragment_ids)
        self.fragment_ids = fragment_ids


class LanceFragmentReader(DataSourceReader):
    """Reads one group of fragments per partition at the pinned version."""

    def __init__(self, options: dict[str, str]) -> None:
        from ..runtime.envelope import Envelope

        self.request = Envelope.parse("read", options["request"])  # the catalog scan's (TableRef)
        self.groups = json.loads(options["partitions"])

    def partitions(self) -> list[InputPartition]:
        # Planned by the engine already: no Lance call here (this runs in a driver-side worker).
        return [_FragmentGroup(g) for g in self.groups] or [_FragmentGroup([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # What fails here reaches Spark's task failure, its logs and event log: redacted, as
        # the compaction path's errors are.
        from ..runtime.failures import BUG, classify
        from ..runtime.secrets import redact

        try:
            yield from self._read(partition)
        except Exception as e:
            failure = classify(e)
            what = f"{type(e).__name__}: {e}" if failure.kind == BUG else f"{failure.phrase} ({failure.detail})"
            raise RuntimeError(redact(f"reading {self.request.where}: {what}",
                                      dict(self.request.storage_options))) from None

    def _read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from ..runtime.spark_types import arrow_type_for_spark

        ids = partition.value
        if not ids:
            return
        ds = self.request.require_target().open()
        columns = self.request.extras["columns"]
        target = pa.schema([pa.field(c, arrow_type_for_spark(ds.schema.field(c).type)) for c in columns])
        scanner = ds.scanner(columns=columns, filter=self.request.extras.get("filter") or None,
                             fragments=[ds.get_fragment(i) for i in ids])
        for batch in scanner.to_batches():
            if batch.num_rows:
                yield batch.select(columns).cast(target)


class LanceFragmentSource(DataSource):
    """``lance_compact_read``: built by the catalog's scans alone, registered under no name
    (its options are the engine's read plan: see the module's docstring)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        raise ValueError(f"{NAME} is read through the lance catalog (SELECT ... FROM lance.db.t)")

    def reader(self, schema: Any) -> DataSourceReader:
        return LanceFragmentReader(dict(self.options))
