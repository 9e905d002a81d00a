"""An index kept up to date incrementally (``optimize_indices``, and the same path for
``maintain``, ``maintain_warehouse`` and the coverage a compaction or clustering restores): the
rows of the fragments it does not cover are built as a NEW segment with the index's own model
(existing.py), by Spark tasks (segments.py; a small build in the engine, by the compaction's rule
``spark.lance.compact.engineRewrite.maxBatchBytes``), and committed beside its segments (a Lance
``CreateIndex`` adding the new segment and removing only the segments it replaces), so the
work of a run follows the new rows, not the index. Segments are merged size-tiered (tiers.py).

How segments merge, per kind (../shared/NOTES.md "Incremental index upkeep"):
- vector: a merge REBUILDS the merged segments' rows from the data, as shards with the index's
  model merged once (``merge_existing_index_segments`` of fresh shards only), never a merge of a
  merged segment (lance issue 7731: re-merging packed/transposed codes dropped recall 0.495 ->
  0.07; pylance 14.0.2 refuses it for PQ). Recall measured unchanged by such a merge.
  IVF_SQ/IVF_HNSW_SQ are built as one shard (shards train their own bounds; merging them lost
  recall).
- scalar: the new rows' shards and the committed segments picked are merged by Lance
  (exact for BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER, NGRAM: answers equal a scan).
- any other index (INVERTED, several columns, a shallow clone's): pylance's
  ``optimize_indices`` in the engine, and the row says so.

``retrain``: a fresh model (indexing/train.py) and every fragment built
again (indexing/build.py's run), replacing every segment in one commit.

A concurrent writer is Lance's to judge at the commit (read version = the build's): an append,
a delete or an update commits (new fragments stay unindexed, deleted rows are masked); a
compaction of the fragments built or replaced, or another index change, conflicts: the run plans
again on the new version (``MAX_RETRIES`` times), else says so. Segment files never committed are
removed (local tables; ``cleanup`` elsewhere)."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Mapping

import lance
from lance import LanceOperation
from lance.dataset import Index

from ..errors import CompactionError
from ..runtime import cancellation, commit_gate, cost_records, identifiers, progress
from ..runtime.driver_conf import INDEX_MAX_BYTES, INDEX_TIMEOUT, index_engine_limits, max_task_attempts
from ..runtime import hooks as test_hooks
from ..runtime.cancellation import Cancelled
from ..runtime.catalog_service import commit_arguments
from ..runtime.envelope import Target
from ..runtime.failures import classify
from . import existing, tiers
from .commit import is_conflict, merge_segments, remove_unreferenced
from .plan import FragmentSize, allowed, decoded_within, default_rows_per_segment, fragment_sizes, group

log = logging.getLogger(__name__)

SPARK, ENGINE, PYLANCE = "spark tasks", "engine", "pylance (engine)"
MAX_RETRIES = 2
MERGE_FAN_IN = 16


@dataclass
class Upkeep:
    """What one run does to one index: build ``build_fragments`` (the unindexed ``new``, and for
    a vector index the fragments of the segments it replaces) and replace ``merged`` (committed
    segments) with the result; ``route``: "segments", "pylance" (``why``) or "retrain"."""

    index: existing.ExistingIndex
    read_version: int
    new: list[int]
    new_rows: int
    merged: list[Index]
    build_fragments: list[int]
    rows: int
    estimated_bytes: int
    route: str
    why: str = ""
    dead: tuple[str, ...] = ()  # of ``merged``: segments covering no live fragment (dropped, not merged)

    @property
    def due(self) -> bool:
        return self.route == "retrain" or bool(self.new or (self.route == "segments" and self.merged))


@dataclass
class Outcome:
    """What a run did to one index (its row's per-index fields)."""

    built_by: str = ""
    rows_indexed: int = 0
    segments_built: int = 0
    segments_merged: int = 0
    new_version: int | None = None
    retries: int = 0
    notes: list[str] = field(default_factory=list)
    # the table at new_version, as the commit returned it (so the caller need not open it again)
    latest: Any = field(default=None, repr=False, compare=False)


def plan(ds: lance.LanceDataset, name: str, num_to_merge: int | None = None, retrain: bool = False) -> Upkeep:
    """The run for index ``name`` of ``ds`` (nothing read but metadata)."""
    ix = existing.describe(ds, name)
    # a nested or multi-column index (left to pylance): rows per fragment by the first column
    sized = ix.column if ix.column in ds.schema.names else ds.schema.names[0]
    sizes = {f.fragment_id: f for f in fragment_sizes(ds, sized)}
    covered = {f for s in ix.segments for f in s.fragment_ids}
    new = sorted(f for f in sizes if f not in covered)
    new_rows = sum(sizes[f].rows for f in new)
    if ix.build_type is None:
        return Upkeep(ix, ds.version, new, new_rows, [], new, new_rows, 0, "pylance", ix.why)
    if retrain:
        every = sorted(sizes)
        return Upkeep(ix, ds.version, new, new_rows, list(ix.segments), every, sum(sizes[f].rows for f in every),
                      sum(sizes[f].estimated_bytes for f in every), "retrain")
    rows_of = {s.uuid: sum(sizes[f].rows for f in s.fragment_ids if f in sizes) for s in ix.segments}
    picked = set(tiers.pick([tiers.SegmentSize(s.uuid, rows_of[s.uuid], s.dataset_version) for s in ix.segments],
                            new_rows, num_to_merge))
    merged = [s for s in ix.segments if s.uuid in picked]
    build = set(new)
    if ix.is_vector:  # a vector merge rebuilds the merged segments' rows (never re-merges their codes)
        build |= {f for s in merged for f in s.fragment_ids if f in sizes}
    build_fragments = sorted(build)
    return Upkeep(ix, ds.version, new, new_rows, merged, build_fragments, sum(sizes[f].rows for f in build_fragments),
                  sum(sizes[f].estimated_bytes for f in build_fragments), "segments",
                  dead=tuple(s.uuid for s in merged if rows_of[s.uuid] <= 0))


def active_spark() -> Any:
    """The engine's SparkContext (None outside a Spark driver: the build then runs here)."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    return SparkContext._active_spark_context


_CORES: list[float] = [0.0, 2]  # (monotonic time read, the Spark context's default parallelism)


def _cores() -> int:
    """The Spark context's default parallelism (its executors' cores), read again after a few
    seconds (executors come and go): a Py4J round trip each table of a warehouse run paid."""
    now = time.monotonic()
    if now - _CORES[0] > 5.0:
        _CORES[:] = [now, getattr(active_spark(), "defaultParallelism", 2) or 2]
    return int(_CORES[1])


def run(target: Target, ds: lance.LanceDataset, ups: list[Upkeep], procedure: str = "optimize_indices",
        sc: Any = None, hooks: Mapping[str, Any] | None = None) -> tuple[dict[str, Outcome], list[int]]:
    """Carry out ``ups`` (planned on ``ds``) on ``target``: the indices kept in segments built
    (each its own Spark job) and committed together in ONE ``CreateIndex`` (one version, as
    pylance's optimize_indices commits), then those pylance keeps or retrains, each its own
    commit. ``procedure`` names the Spark jobs (``lance.<procedure> db.t: ...``). Returns each
    index's outcome and the versions committed. A failure raises a CompactionError saying what
    was committed before it; a conflict that outlasts the retries an :class:`UpkeepConflict`.
    ``hooks``: the caller's test hooks (``test_fail_at = 'index_commit:...'`` acts right before
    the commit)."""
    from ..runtime.failures import committed_phrase

    sc = sc if sc is not None else active_spark()
    outcomes: dict[str, Outcome] = {}
    versions: list[int] = []
    segmented = [u for u in ups if u.route == "segments" and u.due]
    try:
        if segmented:
            outcomes.update(_segments(target, ds, segmented, procedure, sc, dict(hooks or {})))
            versions += sorted({o.new_version for o in outcomes.values() if o.new_version is not None})
        for up in (u for u in ups if u.route != "segments" and u.due):
            if versions:  # planned again on what was just committed
                ds = target.open()
                up = plan(ds, up.index.name, None, up.route == "retrain")
            out = _retrain(target, ds, up, procedure, sc) if up.route == "retrain" else _pylance(target, ds, up, False)
            outcomes[up.index.name] = out
            if out.new_version is not None:
                versions.append(out.new_version)
    except CompactionError as e:
        if not versions:
            raise
        said = f"{e.message} ({committed_phrase(versions)})"
        raise (Cancelled(said) if isinstance(e, Cancelled) else type(e)(said, e.kind)) from None
    return outcomes, versions


class _Conflict(Exception):
    """The commit was preempted by a concurrent writer (retryable)."""


class UpkeepConflict(CompactionError):
    """A concurrent change conflicted with the indices' commit every time it was tried: nothing
    was committed for them (the next run does it)."""


def keep_up(target: Target, ds: lance.LanceDataset, names: list[str], procedure: str,
            hooks: Mapping[str, Any] | None = None) -> int:
    """Cover every fragment of ``ds`` in each of the indices ``names`` (the coverage a compaction
    restores): one commit for those kept in segments. Returns the latest version; raises
    :class:`UpkeepConflict` or a CompactionError (the versions committed before it said)."""
    _, versions = run(target, ds, [plan(ds, n) for n in names], procedure, hooks=hooks)
    return versions[-1] if versions else ds.version


def _segments(target: Target, ds: lance.LanceDataset, ups: list[Upkeep], procedure: str, sc: Any,
              hooks: dict[str, Any]) -> dict[str, Outcome]:
    """Build every index's new segments, commit them in one transaction; plan again after a
    conflict (``MAX_RETRIES``)."""
    written: list[str] = []
    names = [u.index.name for u in ups]
    outcomes: dict[str, Outcome] = {}
    try:
        for attempt in range(MAX_RETRIES + 1):
            outcomes = {u.index.name: Outcome(retries=attempt) for u in ups}
            try:
                _once(target, ds, ups, procedure, sc, outcomes, written, hooks)
                return outcomes
            except _Conflict as c:
                if attempt == MAX_RETRIES:
                    raise UpkeepConflict(
                        f"table {target.table}: {procedure}: indices {', '.join(names)}: a concurrent change "
                        f"conflicted with the commit {MAX_RETRIES + 1} times ({c}); nothing was committed for them"
                    ) from None
                ds = target.open()
                ups = [u for u in (plan(ds, n) for n in names) if u.route == "segments" and u.due]
                log.info("table %s: %s: the index commit met a concurrent change (%s); planned again at version %d",
                         target.table, procedure, c, ds.version)
                if not ups:
                    return {}
        return {}
    finally:
        committed = next((o.latest for o in outcomes.values() if o.latest is not None), None)
        remove_unreferenced(target, written, "optimize_indices", committed)
        commit_gate.stage(target.uri, [])  # committed, removed, or (not removable) left for cleanup


def _once(target: Target, ds: lance.LanceDataset, ups: list[Upkeep], procedure: str, sc: Any,
          outcomes: dict[str, Outcome], written: list[str], hooks: dict[str, Any]) -> None:
    from .build import engine_limit, run_bounded
    from .segments import SegmentJob, build_one, build_segments, io_since

    table = target.table
    clock = time.monotonic()
    io_since(ds)  # this worker's reads and writes (models, in-worker builds, merges) from here
    tasks = [0, 0, 0]  # what Spark tasks measured: bytes read, written, task ms
    engine_ms = 0
    new_segments: list[Any] = []
    removed: list[Index] = []
    for up in ups:
        ix, out = up.index, outcomes[up.index.name]
        model, metric = existing.model(ds, ix, target.uri, target.storage_options)
        groups = _groups(up, ds)
        # in the worker only when small (create_index's size bound; the model is the index's own:
        # no training); else Spark tasks, where it can be scheduled and cancelled
        most = None if sc is None else min(engine_limit(sc), index_engine_limits(sc)[INDEX_MAX_BYTES])
        in_engine = most is None or (up.estimated_bytes <= most and decoded_within(
            ds, ix.column, most, [f for g in groups for f in g]))
        job = SegmentJob(table, target.uri, dict(target.storage_options), up.read_version, ix.column, ix.build_type,
                         ix.name, {}, metric, True)
        _check_cancel(table, procedure, ix.name, "before building")
        shards: list[Any] = []
        if groups:
            progress.report(f"{table}: {procedure}: {identifiers.escape(ix.name)}: building {up.rows:,} rows in {len(groups)} segments")
            if in_engine:
                timeout = index_engine_limits(sc)[INDEX_TIMEOUT] if sc is not None else None
                for g in groups:  # bounded in time as create_index's worker builds (build.run_bounded)
                    started = time.monotonic()
                    shard = run_bounded(lambda g=g: build_one(ds, job, g, model), timeout, table, procedure)
                    engine_ms += int((time.monotonic() - started) * 1000)
                    written.append(str(shard.uuid))
                    _stage(target, [str(shard.uuid)])
                    shards.append(shard)
            else:
                _stage(target, job.segment_uuids(len(groups), max_task_attempts(sc)))
                built, failure = build_segments(
                    sc, job, groups, model,
                    f"lance.{procedure} {table}: building {len(groups)} {ix.build_type} segments of {identifiers.escape(ix.name)} "
                    f"({up.rows:,} rows; {len(up.new)} unindexed fragments, {len(up.merged)} segments merged) "
                    f"planned at version {up.read_version}")
                written += [str(s.index.uuid) for s in built]
                _stage(target, [str(s.index.uuid) for s in built])
                for s in built:
                    tasks = [tasks[0] + s.bytes_read, tasks[1] + s.bytes_written, tasks[2] + s.elapsed_ms]
                progress.figures({"kind": "progress", "bytes_read": tasks[0], "bytes_written": tasks[1]})
                if failure is not None:
                    if failure.cancelled:
                        why = cancellation.reason() or failure.message  # the statement's own cancel says more
                        raise Cancelled(f"table {table}: {procedure} cancelled ({why}); nothing was "
                                        f"committed for the indices")
                    raise CompactionError(f"{failure.message}; nothing was committed for the indices")
                shards = [s.index for s in built]
        ordered = sorted(shards, key=lambda s: min(s.fragment_ids) if len(s.fragment_ids) else 0)
        if ix.is_vector:
            merged = merge_segments(ds, ordered, MERGE_FAN_IN)
        else:  # scalar: the committed segments picked and the new shards merged by Lance, once
            inputs = [s for s in up.merged if s.uuid not in up.dead] + ordered
            merged = [ds.merge_existing_index_segments(inputs)] if inputs else []
        written += [str(s.uuid) for s in merged]
        _stage(target, [str(s.uuid) for s in merged])
        new_segments += merged
        removed += up.merged
        out.built_by = ENGINE if in_engine else SPARK
        out.rows_indexed = up.new_rows
        out.segments_built = len(shards)
        out.segments_merged = len(up.merged)
    _check_cancel(table, procedure, ", ".join(u.index.name for u in ups), "before the commit")
    if hooks:
        test_hooks.fault_at(SimpleNamespace(hooks=hooks, uri=target.uri, storage_options=dict(target.storage_options)),
                            "index_commit")
    here = io_since(ds)
    operation = LanceOperation.CreateIndex(new_indices=new_segments, removed_indices=removed)
    read_version = ups[0].read_version
    try:
        # the gate: no commit once a cancel is recorded; a cancel after it waits and hears what landed
        with commit_gate.gate(table, f"{procedure}: the commit of indices {', '.join(u.index.name for u in ups)}"
                              ) as landed:
            committed = lance.LanceDataset.commit(target.uri, operation, read_version=read_version,
                                                  **commit_arguments(target.storage_options))
            landed(f"version {committed.version}")
    except CompactionError:  # the gate's refusal (Cancelled)
        raise
    except Exception as e:  # Lance's CommitConflictError (an OSError), or the store's
        if is_conflict(e):
            raise _Conflict(str(e).split(", /")[0][:200]) from None
        raise CompactionError(f"table {table}: {procedure}: the index commit failed: {classify(e).phrase} "
                              f"({classify(e).detail}); nothing was committed for the indices") from None
    kept = {str(s.uuid) for s in new_segments}
    written[:] = [u for u in written if u not in kept]  # the versions from now on hold them
    for out in outcomes.values():
        out.new_version, out.latest = committed.version, committed
    # its cost kept with the table (runtime/cost_records.py): the bytes Lance read and wrote in
    # this worker (the indices' models, builds here, merges) and in the Spark tasks (each
    # measured its own), the tasks' time (a build here: its time), this attempt's elapsed time
    cost_records.record(table, target.uri, target.storage_options, cost_records.Cost(
        version=committed.version, step="index optimization", bytes_read=here[0] + tasks[0],
        bytes_written=here[1] + tasks[1], task_ms=engine_ms + tasks[2],
        elapsed_ms=int((time.monotonic() - clock) * 1000)))


def _groups(up: Upkeep, ds: lance.LanceDataset) -> list[list[int]]:
    """The build's fragment groups (a segment each): by rows and bytes as create_index groups;
    one group for the types whose shards may not be merged (SQ)."""
    if not up.build_fragments:
        return []
    if up.index.build_type in existing.ONE_SHARD:
        return [list(up.build_fragments)]
    sizes = {f.fragment_id: f for f in fragment_sizes(ds, up.index.column)}
    chosen = [sizes.get(f, FragmentSize(f, 0, 0)) for f in up.build_fragments]
    cores = _cores()
    rows = sum(f.rows for f in chosen)
    return [list(g.fragment_ids) for g in group(chosen, default_rows_per_segment(rows, cores), 2 << 30,
                                                 allowed("max_index_segments", rows))]


def _pylance(target: Target, ds: lance.LanceDataset, up: Upkeep, retrain: bool) -> Outcome:
    """pylance's optimize_indices of this one index, in the engine (one commit)."""
    from .segments import io_since

    before, clock = ds.version, time.monotonic()
    io_since(ds)
    try:
        # pylance's optimize_indices commits inside the call and has no uncommitted form: the whole
        # call goes through the gate (a cancel after it began waits for it; only indices no segment
        # route keeps come here: INVERTED, several columns, a shallow clone's)
        with commit_gate.gate(target.table, f"optimize_indices of {identifiers.escape(up.index.name)} "
                                            "(pylance's, which commits itself)") as landed:
            ds.optimize.optimize_indices(index_names=[up.index.name], retrain=retrain)
            if ds.version != before:
                landed(f"version {ds.version}")
    except CompactionError:  # the gate's refusal (Cancelled)
        raise
    except Exception as e:
        if is_conflict(e):
            raise UpkeepConflict(f"table {target.table}: index {identifiers.escape(up.index.name)}: a concurrent change conflicted with "
                                  f"pylance's optimize_indices ({str(e).split(', /')[0][:200]}); nothing was committed "
                                  "for this index") from None
        raise CompactionError(f"table {target.table}: index {identifiers.escape(up.index.name)}: pylance's optimize_indices failed: "
                              f"{classify(e).phrase} ({classify(e).detail}); nothing was committed for this index"
                              ) from None
    why = f" ({up.why})" if up.why else ""
    changed = ds.version != before
    if changed:  # its cost (cost_records.py): all in this worker; its bytes include the commit's own
        read, wrote = io_since(ds)
        elapsed = int((time.monotonic() - clock) * 1000)
        cost_records.record(target.table, target.uri, target.storage_options, cost_records.Cost(
            version=ds.version, step="index optimization", bytes_read=read, bytes_written=wrote,
            task_ms=elapsed, elapsed_ms=elapsed))
    return Outcome(PYLANCE, up.rows if retrain else up.new_rows, 1 if changed else 0, 0,
                   ds.version if changed else None, notes=[f"pylance{why}"], latest=ds if changed else None)


def _retrain(target: Target, ds: lance.LanceDataset, up: Upkeep, procedure: str, sc: Any) -> Outcome:
    """A fresh model and every fragment built again (create_index's run with replace)."""
    from . import build as building
    from . import spec as specs
    from .plan import Group

    ix = up.index
    if sc is None:
        return _pylance(target, ds, up, retrain=True)
    lance_kwargs: dict[str, Any] = {}
    model, metric = existing.model(ds, ix, target.uri, target.storage_options)
    for k in ("num_partitions", "num_sub_vectors", "num_bits"):
        if k in model:
            lance_kwargs[k] = model[k]
    dimension = ds.schema.field(ix.column).type.list_size if ix.is_vector else None
    req = specs.IndexRequest(target.table, ix.column, ix.build_type, ix.name, metric, True, False,
                             lance_kwargs, {}, {}, dimension)
    sizes = [f for f in fragment_sizes(ds, ix.column)]
    rows = sum(f.rows for f in sizes)
    row: dict[str, Any] = {"sample_rows": 0, "train_ms": 0, "build_ms": 0, "commit_ms": 0, "segments_built": 0,
                           "segments_committed": 0, "retries": 0, "new_version": ds.version, "groups": []}
    most = min(building.engine_limit(sc), index_engine_limits(sc)[INDEX_MAX_BYTES])
    if up.estimated_bytes <= most and decoded_within(ds, ix.column, most):
        # small: one uncommitted segment in this worker, Lance training afresh, committed through the
        # gate (as create_index's worker builds; pylance's own retrain would commit by itself)
        building._in_engine(target, ds, req, model.get("num_partitions"), row,
                            index_engine_limits(sc)[INDEX_TIMEOUT], [f.fragment_id for f in sizes])
        return Outcome(ENGINE, rows, 1, len(ix.segments), row["new_version"])
    if ix.build_type in existing.ONE_SHARD:
        groups = [Group(tuple(f.fragment_id for f in sizes), rows, sum(f.estimated_bytes for f in sizes))]
    else:
        groups = group(sizes, default_rows_per_segment(rows, sc.defaultParallelism), 2 << 30,
                       allowed("max_index_segments", rows))
    partitions = model.get("num_partitions")
    building._on_spark(sc, target, ds, req, groups, partitions, allowed("max_training_rows", rows) if ix.is_vector else 0,
                       row)
    return Outcome(SPARK, rows, row["segments_built"], len(ix.segments), row["new_version"], row["retries"])


def _stage(target: Target, uuids: list[str]) -> None:
    """Segment folders written (or about to be) and not committed: a dead worker's are removed by the pool."""
    commit_gate.add(target.uri, [f"_indices/{u}" for u in uuids], dict(target.storage_options))


def _check_cancel(table: str, procedure: str, name: str, where: str) -> None:
    why = cancellation.reason()
    if why:
        raise Cancelled(f"table {table}: {procedure} cancelled {where} ({why}); nothing was committed for index {identifiers.escape(name)}")
