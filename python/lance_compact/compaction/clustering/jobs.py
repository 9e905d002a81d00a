"""The clustering's Spark jobs, run from the engine process on the driver:

1. :func:`sample_keys`: each source fragment's key columns are read on an executor and a
   random sample of them comes back (small: about 1,000 rows of the key columns per output partition);
2. :func:`rewrite`: each source fragment is read on an executor, in chunks of at most the
   target rows, every row gets its range partition (from the bounds, or the z-value's), the
   rows are shuffled as Arrow IPC bytes (``partitionBy``), and each partition is sorted and
   written with ``lance.fragment.write_fragments`` on its executor. Only the new fragments'
   metadata comes back.

A task holds one chunk (map side) or one partition (reduce side): about one target-size
fragment of rows, times the sort's copy. Everything pickled into the jobs is a frozen
dataclass of plain values.
"""
from __future__ import annotations

import json
import resource
from dataclasses import dataclass
from typing import Iterator

import lance
import numpy as np
import pyarrow as pa

from .keys import (column_bounds, from_ipc, linear_partitions, order_indices,
                   pick_bounds, to_ipc, z_bounds, z_partitions, zvalues)
from .sort_order import SortOrder
from .state import codes, open_domain

# The sample: this many rows per output partition (at least MIN_SAMPLE, at most MAX_SAMPLE).
SAMPLE_PER_PARTITION = 1_000  # a partition's size is then off by about 3%
MIN_SAMPLE = 16_384
MAX_SAMPLE = 500_000


@dataclass(frozen=True)
class Source:
    """Where the source fragments are: the table at its read version."""

    uri: str
    storage_options: dict[str, str]
    read_version: int

    def open(self) -> lance.LanceDataset:
        return lance.dataset(self.uri, version=self.read_version,
                             storage_options=self.storage_options or None)


@dataclass(frozen=True)
class Bounds:
    """How a row finds its partition: linear bounds (rows of the key columns k0, k1, ...) or,
    for z-order, per-column bounds and the z-value bounds; all as IPC bytes / lists."""

    partitions: int
    linear: bytes | None = None
    columns: tuple[bytes, ...] = ()
    z: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Sampler:
    source: Source
    order: SortOrder
    share: float  # fraction of each fragment's live rows to keep

    def __call__(self, fragment_ids: Iterator[int]) -> Iterator[bytes]:
        ds = self.source.open()
        for fid in fragment_ids:
            keys = ds.scanner(fragments=[ds.get_fragment(fid)], columns=self.order.columns).to_table()
            n = min(keys.num_rows, max(1, int(round(keys.num_rows * self.share))))
            pick = np.random.default_rng(fid).choice(keys.num_rows, size=n, replace=False) if n else []
            yield to_ipc(keys.take(pa.array(np.sort(pick), pa.int64())))


def sample_keys(sc, source: Source, order: SortOrder, fragment_ids: list[int], rows: int,
                partitions: int) -> pa.Table:
    """A random sample of the key columns over the source fragments (job 1)."""
    want = min(rows, max(MIN_SAMPLE, min(MAX_SAMPLE, partitions * SAMPLE_PER_PARTITION)))
    sampler = _Sampler(source, order, want / rows)
    blobs = sc.parallelize(fragment_ids, max(1, min(len(fragment_ids), sc.defaultParallelism))) \
        .mapPartitions(sampler).collect()
    return pa.concat_tables([from_ipc(b) for b in blobs]) if blobs else pa.table({})


def make_bounds(sample: pa.Table, order: SortOrder, partitions: int,
                columns: list[pa.Table] | None = None) -> Bounds:
    """Bounds from the sample (on the driver; the sample is small). A z-order takes the
    per-column bounds ``columns`` when given (the record's domain: then the z-values the rows
    are sorted by are the codes the record keeps, state.py)."""
    if not order.zorder:
        return Bounds(partitions, linear=to_ipc(pick_bounds(sample, order.keys, partitions)))
    columns = columns if columns is not None else column_bounds(sample, order)
    z = zvalues(sample, order, columns)
    return Bounds(partitions, columns=tuple(to_ipc(c) for c in columns),
                  z=tuple(int(v) for v in z_bounds(z, partitions)))


@dataclass(frozen=True)
class Written:
    """What one partition's task wrote: new fragments' metadata (JSON), rows and bytes."""

    partition: int
    fragments: tuple[str, ...]
    rows: int
    bytes: int
    peak_rss: int = 0  # the Python worker's peak resident memory so far, bytes (Linux)
    ranges: tuple[tuple[int, int], ...] = ()  # per new fragment: its lowest and highest code (state.py)


@dataclass(frozen=True)
class _Router:
    """Map side: read a source fragment in chunks, route every row to its partition."""

    source: Source
    order: SortOrder
    bounds: Bounds
    chunk_rows: int

    def __call__(self, fragment_ids: Iterator[int]) -> Iterator[tuple[int, bytes]]:
        ds = self.source.open()
        linear = from_ipc(self.bounds.linear) if self.bounds.linear is not None else None
        columns = [from_ipc(c) for c in self.bounds.columns]
        zb = np.array(self.bounds.z, dtype=np.uint64)
        for fid in fragment_ids:
            rng = np.random.default_rng(fid)  # same routing if the task runs again
            scanner = ds.scanner(fragments=[ds.get_fragment(fid)], batch_size=min(self.chunk_rows, 65_536))
            pending: list[pa.RecordBatch] = []
            held = 0
            for batch in scanner.to_batches():
                pending.append(batch)
                held += batch.num_rows
                if held >= self.chunk_rows:
                    yield from self._route(pa.Table.from_batches(pending), linear, columns, zb, rng)
                    pending, held = [], 0
            if held:
                yield from self._route(pa.Table.from_batches(pending), linear, columns, zb, rng)

    def _route(self, chunk: pa.Table, linear, columns, zb, rng) -> Iterator[tuple[int, bytes]]:
        if self.order.zorder:
            parts = z_partitions(zvalues(chunk, self.order, columns), zb, rng)
        else:
            parts = linear_partitions(chunk, linear, self.order, rng)
        by_part = np.argsort(parts, kind="stable")
        ordered = parts[by_part]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ends = np.r_[starts[1:], len(ordered)]
        taken = chunk.take(pa.array(by_part, pa.int64()))
        for a, b in zip(starts, ends):
            yield int(ordered[a]), to_ipc(taken.slice(int(a), int(b - a)))


@dataclass(frozen=True)
class _Writer:
    """Reduce side: sort one partition and write it as new, uncommitted fragments."""

    source: Source
    order: SortOrder
    bounds: Bounds
    target_rows: int
    max_bytes_per_file: int | None
    domain: tuple[bytes, ...] = ()  # the record's code bounds (state.py)

    def __call__(self, index: int, items: Iterator[tuple[int, bytes]]) -> Iterator[Written]:
        parts = [from_ipc(blob) for _, blob in items]
        if not parts:
            return iter(())
        rows = pa.concat_tables(parts)
        del parts
        if self.order.zorder:
            columns = [from_ipc(c) for c in self.bounds.columns]
            order = np.argsort(zvalues(rows, self.order, columns), kind="stable")
            rows = rows.take(pa.array(order, pa.int64()))
        else:
            rows = rows.take(order_indices(rows, self.order.keys))
        # Over the target (a partition the sample misjudged): equal fragments, no small tail.
        pieces = -(-rows.num_rows // self.target_rows)
        kwargs = {"max_rows_per_file": -(-rows.num_rows // pieces)}
        if self.max_bytes_per_file:
            kwargs["max_bytes_per_file"] = self.max_bytes_per_file
        new = lance.fragment.write_fragments(rows, self.source.uri,
                                             storage_options=self.source.storage_options or None, **kwargs)
        written = sum(f.file_size_bytes or 0 for m in new for f in m.data_files())
        ranges: list[tuple[int, int]] = []
        if self.domain:  # the new fragments hold consecutive slices of the sorted rows
            code = codes(rows, self.order, open_domain(self.domain))
            at = 0
            for m in new:
                piece = code[at:at + m.physical_rows]
                at += m.physical_rows
                ranges.append((int(piece.min()), int(piece.max())) if len(piece) else (0, 0))
        return iter([Written(index, tuple(json.dumps(m.to_json()) for m in new), rows.num_rows, written,
                             resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, tuple(ranges))])


@dataclass(frozen=True)
class _Ranger:
    """Each fragment's lowest and highest code (its key range under the record's domain)."""

    source: Source
    order: SortOrder
    domain: tuple[bytes, ...]

    def __call__(self, fragment_ids: Iterator[int]) -> Iterator[tuple[int, int, int]]:
        ds = self.source.open()
        domain = open_domain(self.domain)
        for fid in fragment_ids:
            keys = ds.scanner(fragments=[ds.get_fragment(fid)], columns=self.order.columns).to_table()
            if keys.num_rows:
                code = codes(keys, self.order, domain)
                yield fid, int(code.min()), int(code.max())


def code_ranges(sc, source: Source, order: SortOrder, domain: tuple[bytes, ...],
                fragment_ids: list[int]) -> dict[int, tuple[int, int]]:
    """The key range (codes) of each fragment, read on executors (key columns only)."""
    if not fragment_ids:
        return {}
    out = sc.parallelize(fragment_ids, max(1, min(len(fragment_ids), sc.defaultParallelism))) \
        .mapPartitions(_Ranger(source, order, domain)).collect()
    return {fid: (lo, hi) for fid, lo, hi in out}


def rewrite(sc, source: Source, order: SortOrder, bounds: Bounds, fragment_ids: list[int],
            target_rows: int, max_bytes_per_file: int | None, domain: tuple[bytes, ...] = ()) -> list[Written]:
    """Job 2: route, shuffle, sort and write; the partitions' outcomes in partition order."""
    router = _Router(source, order, bounds, target_rows)
    writer = _Writer(source, order, bounds, target_rows, max_bytes_per_file, domain)
    n = bounds.partitions
    # A map task reads its fragments one chunk at a time, so it may take several: as many
    # tasks as output partitions (at least one per core) is enough.
    slices = min(len(fragment_ids), max(sc.defaultParallelism, n))
    out = sc.parallelize(fragment_ids, slices).mapPartitions(router) \
        .partitionBy(n, _identity).mapPartitionsWithIndex(writer).collect()
    return sorted(out, key=lambda w: w.partition)


def _identity(partition: int) -> int:
    return partition


__all__ = ["Bounds", "Source", "Written", "code_ranges", "make_bounds", "rewrite", "sample_keys"]
