"""The clustering's Spark jobs, run from the engine process on the driver; each covers every
group of the run (a group: source fragments rewritten together, with bounds of their own):

1. :func:`sample_groups`: each source fragment's key columns are read on an executor and a
   random sample of them comes back (small: about 1,000 rows of the key columns per output
   partition of its group);
2. :func:`rewrite`: each source fragment is read on an executor, in chunks of at most the
   target rows, every row gets its range partition (from its group's bounds, or the
   z-value's; group g owns a consecutive range of partition ids, :class:`Layout`), the rows
   are shuffled as Arrow IPC bytes (``partitionBy``), and each partition is sorted and
   written with ``lance.fragment.write_fragments`` on its executor. Only the new fragments'
   metadata comes back, through an accumulator (so the driver knows what finished tasks
   wrote even when another task fails the job).

A task holds one chunk (map side) or one partition (reduce side): about one target-size
fragment of rows, times the sort's copy. Everything pickled into the jobs is a frozen
dataclass of plain values.
"""
from __future__ import annotations

import bisect
import json
import re
import resource
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import lance
import numpy as np
import pyarrow as pa

from ...runtime.catalog_service import resolved_options
from ...runtime.tables import dataset
from ...runtime.task_outcomes import AsTasksFinish, drop as drop_outcomes, outcomes_accumulator
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
        return dataset(self.uri, self.storage_options, self.read_version)


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
    shares: dict[int, float]  # per fragment: the fraction of its live rows to keep (its group's)

    def __call__(self, fragment_ids: Iterator[int]) -> Iterator[tuple[int, bytes]]:
        ds = self.source.open()
        for fid in fragment_ids:
            keys = ds.scanner(fragments=[ds.get_fragment(fid)], columns=self.order.columns).to_table()
            n = min(keys.num_rows, max(1, int(round(keys.num_rows * self.shares[fid]))))
            pick = np.random.default_rng(fid).choice(keys.num_rows, size=n, replace=False) if n else []
            yield fid, to_ipc(keys.take(pa.array(np.sort(pick), pa.int64())))


def sample_share(rows: int, partitions: int) -> float:
    """The fraction of a group's live rows its sample keeps."""
    want = min(rows, max(MIN_SAMPLE, min(MAX_SAMPLE, partitions * SAMPLE_PER_PARTITION)))
    return want / rows if rows else 1.0


def sample_groups(sc, source: Source, order: SortOrder, groups: list[tuple[list[int], int, int]]) -> list[pa.Table]:
    """A random sample of the key columns of each group (fragment ids, live rows,
    partitions), all groups in ONE Spark job (job 1); the samples in the groups' order."""
    shares = {f: sample_share(rows, parts) for ids, rows, parts in groups for f in ids}
    fragment_ids = [f for ids, _, _ in groups for f in ids]
    blobs = dict(sc.parallelize(fragment_ids, max(1, min(len(fragment_ids), sc.defaultParallelism)))
                 .mapPartitions(_Sampler(source, order, shares)).collect()) if fragment_ids else {}
    out = []
    for ids, _, _ in groups:
        parts = [from_ipc(blobs[f]) for f in ids if f in blobs]
        out.append(pa.concat_tables(parts) if parts else pa.table({}))
    return out


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
    """What one partition's task wrote: new fragments' metadata (JSON), rows and bytes; or,
    with partial progress, the error its group failed with on its last attempt."""

    partition: int
    fragments: tuple[str, ...]
    rows: int
    bytes: int
    peak_rss: int = 0  # the Python worker's peak resident memory so far, bytes (Linux)
    ranges: tuple[tuple[int, int], ...] = ()  # per new fragment: its lowest and highest code (state.py)
    group: int = 0  # the plan's group this partition belongs to
    error: str | None = None  # the group failed (partial progress): nothing of it is committed
    task_ms: int = 0  # the reduce task's run time (its shuffle read, sort and write)


# A map task that failed its last attempt under partial progress sends this, then its error,
# to every partition of the fragment's group: that group then fails, the others go on.
FAILED = b"\x00lance-compact-failed:"


def _attempt() -> int:
    from pyspark import TaskContext
    context = TaskContext.get()
    return context.attemptNumber() if context else 0


@dataclass(frozen=True)
class Layout:
    """The partitions of a rewrite over several groups: group g owns the partitions
    ``offsets[g] .. offsets[g] + bounds[g].partitions - 1`` and routes by ``bounds[g]``."""

    bounds: tuple[Bounds, ...]
    group_of: dict[int, int]  # source fragment id -> group

    @property
    def offsets(self) -> tuple[int, ...]:
        out, at = [], 0
        for b in self.bounds:
            out.append(at)
            at += b.partitions
        return tuple(out)

    @property
    def partitions(self) -> int:
        return sum(b.partitions for b in self.bounds)

    def group_at(self, partition: int) -> int:
        return bisect.bisect_right(self.offsets, partition) - 1

    def owned(self, group: int) -> range:
        start = self.offsets[group]
        return range(start, start + self.bounds[group].partitions)


@dataclass(frozen=True)
class Faults:
    """How task failures are handled: with partial progress a task's error on its last
    attempt fails its group only (reported, not raised); test hooks (runtime/hooks.py)."""

    partial: bool = False
    max_attempts: int = 1
    hooks: dict = None  # type: ignore[assignment]
    storage_options: dict = None  # type: ignore[assignment]

    def last(self) -> bool:
        return self.partial and _attempt() + 1 >= self.max_attempts

    def text(self, e: Exception) -> str:
        from ...runtime.secrets import redact
        return redact(f"{type(e).__name__}: {e}", self.storage_options or {})


@dataclass(frozen=True)
class _Router:
    """Map side: read a source fragment in chunks, route every row to its group's partitions."""

    source: Source
    order: SortOrder
    layout: Layout
    chunk_rows: int
    faults: Faults = Faults()
    spent: Any = None  # an accumulator of the map tasks' run time, ms (the cost kept with the table)

    def __call__(self, fragment_ids: Iterator[int]) -> Iterator[tuple[int, bytes]]:
        started = time.monotonic()
        try:
            ds = self.source.open()
            offsets = self.layout.offsets
            for fid in fragment_ids:
                g = self.layout.group_of[fid]
                try:
                    yield from self._fragment(ds, fid, self.layout.bounds[g], offsets[g])
                except Exception as e:
                    if not self.faults.last():
                        raise
                    blob = FAILED + self.faults.text(e).encode()
                    for p in self.layout.owned(g):
                        yield p, blob
        finally:
            if self.spent is not None:
                self.spent.add(int((time.monotonic() - started) * 1000))

    def _fragment(self, ds, fid: int, bounds: Bounds, offset: int) -> Iterator[tuple[int, bytes]]:
        linear = from_ipc(bounds.linear) if bounds.linear is not None else None
        columns = [from_ipc(c) for c in bounds.columns]
        zb = np.array(bounds.z, dtype=np.uint64)
        rng = np.random.default_rng(fid)  # same routing if the task runs again
        scanner = ds.scanner(fragments=[ds.get_fragment(fid)], batch_size=min(self.chunk_rows, 65_536))
        pending: list[pa.RecordBatch] = []
        held = 0
        for batch in scanner.to_batches():
            pending.append(batch)
            held += batch.num_rows
            if held >= self.chunk_rows:
                yield from self._route(pa.Table.from_batches(pending), linear, columns, zb, rng, offset)
                pending, held = [], 0
        if held:
            yield from self._route(pa.Table.from_batches(pending), linear, columns, zb, rng, offset)

    def _route(self, chunk: pa.Table, linear, columns, zb, rng, offset: int) -> Iterator[tuple[int, bytes]]:
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
            yield offset + int(ordered[a]), to_ipc(taken.slice(int(a), int(b - a)))


@dataclass(frozen=True)
class _Writer:
    """Reduce side: sort one partition and write it as new, uncommitted fragments; report
    what it wrote (or, on its last attempt under partial progress, its group's failure)
    through the accumulator, so the driver knows it even when another task fails the job."""

    source: Source
    order: SortOrder
    layout: Layout
    target_rows: int
    max_bytes_per_file: int | None
    domain: tuple[bytes, ...] = ()  # the record's code bounds (state.py)
    faults: Faults = Faults()

    def __call__(self, outcomes, index: int, items: Iterator[tuple[int, bytes]]) -> Iterator[None]:
        from ...runtime import hooks
        started = time.monotonic()
        g = self.layout.group_at(index)
        try:
            hooks.task_fault(self.faults.hooks or {}, g, _attempt())
            hooks.task_sleep(self.faults.hooks or {}, index)  # tests: this partition sleeps before it writes
            written = self._write(index, g, items)
        except Exception as e:
            if not self.faults.last():
                raise
            written = Written(index, (), 0, 0, group=g, error=self.faults.text(e))
        outcomes.add([replace(written, task_ms=int((time.monotonic() - started) * 1000))])
        return iter(())

    def _write(self, index: int, g: int, items: Iterator[tuple[int, bytes]]) -> Written:
        parts = []
        for _, blob in items:
            if blob.startswith(FAILED):  # a source fragment of this group failed to be read
                return Written(index, (), 0, 0, group=g, error=blob[len(FAILED):].decode(errors="replace"))
            parts.append(from_ipc(blob))
        if not parts:
            return Written(index, (), 0, 0, group=g)
        rows = pa.concat_tables(parts)
        del parts
        bounds = self.layout.bounds[g]
        if self.order.zorder:
            columns = [from_ipc(c) for c in bounds.columns]
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
                                             storage_options=resolved_options(self.source.storage_options) or None,
                                             **kwargs)
        written = sum(f.file_size_bytes or 0 for m in new for f in m.data_files())
        ranges: list[tuple[int, int]] = []
        if self.domain:  # the new fragments hold consecutive slices of the sorted rows
            code = codes(rows, self.order, open_domain(self.domain))
            at = 0
            for m in new:
                piece = code[at:at + m.physical_rows]
                at += m.physical_rows
                ranges.append((int(piece.min()), int(piece.max())) if len(piece) else (0, 0))
        return Written(index, tuple(json.dumps(m.to_json()) for m in new), rows.num_rows, written,
                       resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, tuple(ranges), g)


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


class RewriteFailed(Exception):
    """The rewrite job failed (not only a group of it): ``error`` is Spark's, ``written`` what
    the finished tasks wrote (uncommitted; the caller removes it)."""

    def __init__(self, error: Exception, written: list[Written]) -> None:
        super().__init__(str(error))
        self.error, self.written = error, written


_GAVE_UP = re.compile(r"Task (\d+) in stage (\d+)\.\d+ failed (\d+) times")


def _failed_partition(sc, error: Exception) -> int | None:
    """The reduce partition a failed job gave up on, or None (a map task, or not known):
    stages of a PySpark shuffle are named after the call that made them, the map side's
    ``partitionBy``."""
    m = _GAVE_UP.search(str(error))
    if not m:
        return None
    info = sc.statusTracker().getStageInfo(int(m.group(2)))
    if info is None or "partitionBy" in (info.name or ""):
        return None
    return int(m.group(1))


def rewrite(sc, source: Source, order: SortOrder, layout: Layout, fragment_ids: list[int],
            target_rows: int, max_bytes_per_file: int | None, domain: tuple[bytes, ...] = (),
            faults: Faults = Faults(), stage: Callable[[list[Written]], None] | None = None
            ) -> tuple[list[Written], dict[int, str], int]:
    """Job 2, all groups in ONE Spark job: route, shuffle, sort and write; (the partitions'
    outcomes in partition order, the groups that failed -> why, the map tasks' run time in ms,
    summed: each reduce task's is in its outcome). Without partial progress a
    failed task fails the job: :class:`RewriteFailed`. With it, a task that fails its last
    attempt fails its group; when Spark gave up on a reduce task (its worker died on every
    attempt), that group fails and the other groups' unfinished partitions run again
    (their shuffle input is kept). ``stage``: called with the finished partitions' outcomes
    while the job runs (task_outcomes.AsTasksFinish), to stage their files."""
    from ...runtime import cancellation
    spent = sc.accumulator(0)
    router = _Router(source, order, layout, target_rows, faults, spent)
    writer = _Writer(source, order, layout, target_rows, max_bytes_per_file, domain, faults)
    n = layout.partitions
    outcomes = outcomes_accumulator(sc)
    failed: dict[int, str] = {}
    # A map task reads its fragments one chunk at a time, so it may take several: as many
    # tasks as output partitions (at least one per core) is enough.
    slices = min(len(fragment_ids), max(sc.defaultParallelism, n))
    rdd = sc.parallelize(fragment_ids, slices).mapPartitions(router).partitionBy(n, _identity) \
        .mapPartitionsWithIndex(lambda i, items: writer(outcomes, i, items))
    todo = list(range(n))
    finishing = AsTasksFinish(outcomes, stage, name="lance-compact-clustering-as-tasks-finish")
    try:
        while todo:
            try:
                sc.runJob(rdd, _drain, todo)
                break
            except Exception as e:
                p = _failed_partition(sc, e) if faults.partial else None
                if p is None or cancellation.job_cancelled(str(e)):
                    raise RewriteFailed(e, sorted(outcomes.value, key=lambda w: w.partition)) from None
                g = layout.group_at(p)
                from ...runtime.failures import job_failure
                failed[g] = f"task {p} failed all its attempts ({job_failure(e)})"
                done = {w.partition for w in outcomes.value}
                todo = [q for q in todo if q not in done and layout.group_at(q) not in failed]
    finally:
        finishing.stop()
        drop_outcomes(outcomes)
    written = sorted(outcomes.value, key=lambda w: w.partition)
    for w in written:
        if w.error is not None:
            failed.setdefault(w.group, w.error)
    return written, failed, int(spent.value)


def _drain(items: Iterator[None]) -> list[int]:
    for _ in items:
        pass
    return [0]


def _identity(partition: int) -> int:
    return partition


__all__ = ["Bounds", "Faults", "Layout", "RewriteFailed", "Source", "Written", "code_ranges", "make_bounds",
           "rewrite", "sample_groups"]
