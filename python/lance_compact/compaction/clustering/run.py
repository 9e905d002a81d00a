"""The orchestration of a clustering run (``compact`` with ``sort_order``), on the driver in
the engine process:

1. check the request and the sort order against the schema (nothing is read yet);
2. plan the groups at the latest version (:mod:`.plan`): one for a full run, one per
   independent component of overlapping key ranges for an incremental one;
3. Spark job 1 samples the keys of every group, the driver picks each group's bounds; job 2
   routes, shuffles, sorts and writes every group's partitions on executors (:mod:`.jobs`):
   two jobs however many groups;
4. per commit (one; with ``partial_progress`` up to ``max_commits``, consecutive groups):
   cancellation check, the test hook, one Rewrite of its groups on the read version, then
   the record of exactly those groups. On a conflict with a concurrent delete/update the
   groups it did not touch are committed alone, the touched groups' files removed (local
   tables), and the run goes again at the new version (only what is still unclustered or
   overlapping: the conflicted groups), up to ``max_retries`` times, then they are reported;
   with partial progress a group whose task fails its last attempt is counted in
   ``tasks_failed`` and the others land;
5. indices that cover less than the table are optimized (``restore_indices``, default true):
   those the Rewrite left uncovered and any left so before (an interrupted run, appends):
   ``compaction/index_restore.py``;

A failure after a commit names the table and the versions committed (and that nothing after
was); a commit that fails for another reason than a concurrent change removes the files the
run wrote (local tables); a damaged source file is named (file, fragment).
6. the result row (parameters.json ``result_columns``).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import lance
from lance.fragment import FragmentMetadata

from ...runtime import cancellation, commit_gate, cost_records, progress
from ...runtime.failures import CORRUPT, classify, committed_phrase, describe, job_failure, keep_traceback

from ...runtime import hooks
from ...errors import CompactionError
from ...options import result_columns
from ..commit import is_retryable_conflict
from ..fragments import name_damage
from .. import index_restore, layout_figures
from ..index_restore import IndexCoverage
from ..request import CompactionRequest
from ...runtime.tables import open_dataset
from . import jobs
from .commit import (CommitResult, changed_fragments, commit_rewrite, indices_covering, new_fragments,
                     remove_files)
from .plan import ClusterGroup, ClusterPlan, plan_clustering
from .sort_order import SortOrder, check_columns, parse_sort_order
from .state import STATE_KEY, ClusteringState, make_domain, open_domain
from .table_clustering import CLUSTER_BY_PROPERTY, table_sort_order

log = logging.getLogger(__name__)

# Lance options that mean something to a clustering run; the others would be silently
# ignored, so they are refused.
ALLOWED_OPTIONS = {"target_rows_per_fragment", "max_bytes_per_file", "excluded_fragment_ids",
                   "max_source_fragments", "max_source_rows", "max_source_bytes"}
# Run settings whose defaults a clustering run accepts but whose other values it cannot honour yet.
UNSUPPORTED_RUN = {"min_input_fragments": 1, "task_order": "plan"}


def _check_request(request: CompactionRequest) -> None:
    """Refuse what a clustering run cannot honour, naming it (and, when the order is the
    table's own clustering, how to compact without it)."""
    try:
        _check_options(request)
    except CompactionError as e:
        if not request.run.get("sort_order_from_table"):
            raise
        raise CompactionError(
            f"{e.message} (the sort order {request.run['sort_order']!r} is the table's clustering, table "
            f"property {CLUSTER_BY_PROPERTY}; pass sort_order => 'none' for a plain compaction)") from None


def _check_options(request: CompactionRequest) -> None:
    t = request.table
    if request.strategy not in ("default",):
        raise CompactionError(f"table {t}: sort_order cannot be combined with strategy {request.strategy!r} "
                              "(a clustering run plans its own group)")
    extra = sorted(set(request.options) - ALLOWED_OPTIONS)
    if extra:
        raise CompactionError(f"table {t}: option {extra[0]} does not apply with sort_order; a clustering run "
                              f"takes {', '.join(sorted(ALLOWED_OPTIONS))}")
    for name, default in UNSUPPORTED_RUN.items():
        if request.run.get(name, default) != default:
            raise CompactionError(f"table {t}: {name} is not supported with sort_order yet")


def prepare(request: CompactionRequest) -> tuple[SortOrder, lance.LanceDataset]:
    """The parsed, checked order and the table at its latest version; raises before reading data."""
    _check_request(request)
    order = parse_sort_order(request.run["sort_order"], request.table)
    dataset = open_dataset(request.table, request.uri, request.storage_options)
    check_columns(order, dataset.schema, request.table)
    if dataset.has_stable_row_ids:
        raise CompactionError(
            f"table {request.table}: the table has stable row ids; clustering would have to carry every "
            "row's id into its new place, which this version does not do yet (compact without sort_order)")
    return order, dataset


def _record(request: CompactionRequest, order: SortOrder, dataset: lance.LanceDataset) -> ClusteringState | None:
    """The clustering's record for this order, unless the run is a full one."""
    if request.run.get("full"):
        return None
    state = ClusteringState.from_config(dataset.config())
    return state.for_order(order) if state is not None else None


def _plan(sc: Any, request: CompactionRequest, order: SortOrder, dataset: lance.LanceDataset,
          state: ClusteringState | None) -> ClusterPlan:
    """A full plan without a record, else the incremental one (the unclustered fragments' key
    ranges are read on executors, key columns only). ``where``: only fragments holding a
    matching row are candidates (as for a plain compaction)."""
    options = dict(request.options)
    where = request.run.get("where")
    if where:
        from ..fragments import fragments_matching
        others = {f.fragment_id for f in dataset.get_fragments()} - fragments_matching(dataset, where, request.table)
        options["excluded_fragment_ids"] = sorted(others | set(options.get("excluded_fragment_ids") or []))
        if len(others) == len(dataset.get_fragments()):  # as a plain compaction: nothing to do
            return ClusterPlan(dataset.version, order, (), 0, None, True)
    if request.run.get("full"):
        return plan_clustering(dataset, order, options, request.table)
    if state is None:  # nothing clustered by this order yet: every fragment is unclustered
        return plan_clustering(dataset, order, options, request.table, {})
    source = jobs.Source(request.uri, request.storage_options, dataset.version)

    def ranges_of(ids: list[int]) -> dict[int, tuple[int, int]]:
        sc.setJobDescription(f"lance.compact {request.table}: key ranges of {len(ids)} unclustered fragments")
        try:
            return jobs.code_ranges(sc, source, order, state.domain, ids)
        finally:
            sc.setJobDescription(None)
    return plan_clustering(dataset, order, options, request.table, state.ranges, ranges_of)


def _context() -> Any:
    from pyspark import SparkContext
    return SparkContext._active_spark_context


def dry_run(request: CompactionRequest) -> list[tuple]:
    """plan_compaction with sort_order: one row per group (parameters.json ``plan_columns``)."""
    order, dataset = prepare(request)
    plan = _plan(_context(), request, order, dataset, _record(request, order, dataset))
    if not plan.groups:
        return [(0, plan.read_version, True, [], 0, 0, 0, 0, plan.reason(), 0)]
    return [(i, plan.read_version, True, list(g.fragment_ids), len(g.fragment_ids), g.rows,
             g.deleted_rows, g.bytes, plan.reason(g), g.partitions) for i, g in enumerate(plan.groups)]


@dataclass
class _Totals:
    read_version: int = 0
    new_version: int = 0
    partitions: int = 0
    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0
    rows: int = 0
    deleted_rows: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    commits: int = 0
    retries: int = 0
    conflicted: int = 0  # groups given up on after max_retries re-plans
    failed: int = 0  # groups whose task failed its last attempt (partial progress)
    conflicts: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lost: set[str] = field(default_factory=set)  # indices that covered rewritten fragments
    coverage: IndexCoverage | None = None
    left: int = 0
    versions: list[int] = field(default_factory=list)  # committed by this run, in order
    map_ms: int = 0  # the attempt's map tasks' time, not yet in a kept cost (its first commit takes it)
    clock: float = 0.0  # when the attempt began, or its last commit landed (a kept cost's elapsed time)
    after: Any = None  # the table as the last Rewrite left it (its layout, said to the Lance tab)


@dataclass
class _Done:
    """A group whose sort and write finished: the plan's group, what its partitions wrote."""

    index: int
    group: ClusterGroup
    written: list[jobs.Written]

    @property
    def new(self) -> list:
        return [m for w in self.written for m in new_fragments(list(w.fragments))]


def _batches(done: list[_Done], request: CompactionRequest) -> list[list[_Done]]:
    """One commit of every group; with partial progress up to ``max_commits`` commits of
    consecutive groups (the plan's order: deepest first)."""
    if not done:
        return []
    n = min(int(request.run.get("max_commits") or 1), len(done)) if request.run.get("partial_progress") else 1
    cuts = [round(i * len(done) / n) for i in range(n + 1)]
    return [done[a:b] for a, b in zip(cuts, cuts[1:])]


def _remove(request: CompactionRequest, fragments: list) -> int:
    if not fragments:
        return 0
    return remove_files(request.uri, open_dataset(request.table, request.uri, request.storage_options), fragments)


def _job_error(request: CompactionRequest, totals: _Totals, e: Exception, removed: int,
               dataset: lance.LanceDataset | None = None, ids: tuple[int, ...] = ()) -> Exception:
    """A failed sampling or sort/write job: cancelled, a damaged source file (named: file,
    fragment), or the executor's own error; with what was committed and what became of the
    files."""
    why = cancellation.job_cancelled(str(e))
    if why:
        cancellation.cancel(why)
        why = cancellation.reason() or why  # the statement's own cancel ("job group g") says more
    files = (f"the {removed} files finished tasks wrote were removed; any other is left for "
             f"CALL lance.cleanup(table => '{request.table}', delete_unverified => true)")
    done = committed_phrase(totals.versions, "the cancel" if why else "the failure")
    if why:
        return cancellation.Cancelled(f"table {request.table}: the clustering was cancelled ({why}); "
                                      f"{done}; {files}")
    damaged = name_damage(dataset, ids, e, request.storage_options) if dataset is not None and ids else None
    return CompactionError(f"table {request.table}: the clustering job failed: {damaged or job_failure(e)}; "
                           f"{done}; {files}", CORRUPT if damaged else None)


def _attempt(sc: Any, request: CompactionRequest, order: SortOrder, dataset: lance.LanceDataset,
             totals: _Totals) -> int:
    """Plan, sample, rewrite and commit the groups once; how many groups conflicted with a
    concurrent change (then the caller runs again at the new version: the committed groups
    are clustered now, so an incremental run picks only the conflicted ones again)."""
    state = _record(request, order, dataset)
    plan: ClusterPlan = _plan(sc, request, order, dataset, state)
    source = jobs.Source(request.uri, request.storage_options, plan.read_version)
    totals.left = plan.left
    totals.read_version = totals.read_version or plan.read_version
    if not plan.groups:  # incremental and nothing to do
        return 0
    totals.clock = time.monotonic()
    if not totals.versions:  # the layout this clustering starts from, as the plan read it (no extra read)
        layout_figures.said(request.table, request.catalog, dataset, "before compaction")
    groups = plan.groups
    ids = plan.fragment_ids
    sc.setJobDescription(f"lance.compact {request.table}: sampling {order.text()} over {len(groups)} groups "
                         f"at version {plan.read_version}")
    progress.report(f"{request.table}: sampling the keys of {len(groups)} groups")
    from ...runtime.driver_conf import max_task_attempts
    faults = jobs.Faults(bool(request.run.get("partial_progress")), max_task_attempts(sc),
                         hooks.with_slowdowns(request.hooks), request.storage_options)
    try:
        hooks.fault_at(request, "sampling")
        samples = jobs.sample_groups(sc, source, order, [(list(g.fragment_ids), g.rows, g.partitions) for g in groups])
        domain = state.domain if state is not None else make_domain(samples[0], order)
        columns = open_domain(domain) if order.zorder else None
        layout = jobs.Layout(tuple(jobs.make_bounds(sm, order, g.partitions, columns) for sm, g in zip(samples, groups)),
                             {f: i for i, g in enumerate(groups) for f in g.fragment_ids})
        del samples
        sc.setJobDescription(f"lance.compact {request.table}: clustering {len(ids)} fragments of {len(groups)} "
                             f"groups into {plan.partitions} partitions by {order.text()}")
        progress.report(f"{request.table}: clustering {len(ids)} fragments into {plan.partitions} partitions")
        written, failed, totals.map_ms = jobs.rewrite(sc, source, order, layout, ids, plan.target_rows,
                                                      plan.max_bytes_per_file, domain, faults,
                                                      stage=lambda done: _stage(request, done))
    except jobs.RewriteFailed as e:
        removed = _remove(request, [m for w in e.written for m in new_fragments(list(w.fragments))])
        raise _job_error(request, totals, e.error, removed, dataset, ids) from None
    except Exception as e:
        raise _job_error(request, totals, e, 0, dataset, ids) from None
    finally:
        sc.setJobDescription(None)
    try:
        hooks.fault_at(request, "write")  # tests: as if the write job failed after its tasks wrote
    except Exception as e:
        removed = _remove(request, [m for w in written for m in new_fragments(list(w.fragments))])
        raise _job_error(request, totals, e, removed) from None
    log.info("table %s: %d partitions written, %d rows; largest partition %d rows; peak worker memory %d MB",
             request.table, len(written), sum(w.rows for w in written), max((w.rows for w in written), default=0),
             max((w.peak_rss for w in written), default=0) >> 20)
    by_group: dict[int, list[jobs.Written]] = {}
    for w in sorted({w.partition: w for w in reversed(written)}.values(), key=lambda w: w.partition):  # one each
        by_group.setdefault(w.group, []).append(w)
    done = [_Done(i, g, by_group[i]) for i, g in enumerate(groups)
            if i not in failed and len(by_group.get(i, [])) == g.partitions]
    finished = {d.index for d in done}
    # A group that failed (or did not report every partition): its files go, it stays as it was.
    _remove(request, [m for i, ws in by_group.items() if i not in finished
                      for w in ws for m in new_fragments(list(w.fragments))])
    totals.failed += len(groups) - len(done)
    for i, why in sorted(failed.items()):
        log.warning("table %s: group %d (%d fragments) failed and stays as it was: %s", request.table, i,
                    len(groups[i].fragment_ids), why)
    totals.failures += [f"group {i}: {why}" for i, why in sorted(failed.items())]
    conflicted = 0
    batches = _batches(done, request)
    for k, batch in enumerate(batches):
        progress.report(f"{request.table}: committing" + (f" {k + 1} of {len(batches)}" if len(batches) > 1 else ""))
        try:
            conflicted += _commit(request, order, dataset, plan, state, domain, batch, totals)
        except BaseException:
            _remove(request, [m for b in batches[k + 1:] for d in b for m in d.new])
            raise
    return conflicted


def _data_files(fragments: Iterable[FragmentMetadata]) -> list[str]:
    """The data files of new fragments, as the commit gate stages them (``data/<name>``)."""
    return [f"data/{p.path}" for m in fragments for p in m.data_files()]


def _stage(request: CompactionRequest, done: list[jobs.Written]) -> None:
    """The files the finished partitions wrote, staged as the job runs: a dead worker's are the
    pool's to remove (what the run removes or commits itself is unstaged by it, or forgotten
    when the statement ends; the pool never removes a file the table's latest version holds)."""
    files = _data_files(m for w in done for m in new_fragments(list(w.fragments)))
    if files:
        commit_gate.add(request.uri, files, request.storage_options)


def _commit(request: CompactionRequest, order: SortOrder, dataset: lance.LanceDataset, plan: ClusterPlan,
            state: ClusteringState | None, domain: tuple[bytes, ...], batch: list[_Done], totals: _Totals) -> int:
    """Commit ``batch``'s groups in one Rewrite on the read version, then the record. On a
    conflict, the groups whose source fragments the concurrent change left alone are
    committed without the others (whose files are removed); how many groups conflicted."""
    files = _data_files(m for d in batch for m in d.new)
    commit_gate.add(request.uri, files, request.storage_options)  # a dead worker's are the pool's to remove
    hooks.before_commit(request)  # test-only moments before the commit: the gate comes after them

    def refused(why: str) -> cancellation.Cancelled:
        removed = _remove(request, [m for d in batch for m in d.new])
        return cancellation.Cancelled(f"table {request.table}: the clustering was cancelled before a commit "
                                      f"({why}); {committed_phrase(totals.versions, 'the cancel')}; "
                                      f"{removed} new files removed")

    before = list(totals.versions)
    try:
        # The gate: no commit once a cancel is recorded; a cancel after it waits for the
        # Rewrite (and its record) and hears what landed.
        with commit_gate.committing(f"table {request.table}: committing a clustering of {len(batch)} groups",
                                    refused) as landed:
            try:
                return _commit_gated(request, order, dataset, plan, state, domain, batch, totals)
            finally:
                new = [v for v in totals.versions if v not in before]
                if new:
                    landed(f"version{'s' if len(new) > 1 else ''} {', '.join(map(str, new))}")
    finally:
        commit_gate.drop(request.uri, files)  # committed, or removed by this run (or left for cleanup, said)


def _commit_gated(request: CompactionRequest, order: SortOrder, dataset: lance.LanceDataset, plan: ClusterPlan,
                  state: ClusteringState | None, domain: tuple[bytes, ...], batch: list[_Done],
                  totals: _Totals) -> int:
    """:func:`_commit` once the gate let it begin."""
    olds = {d.index: [dataset.get_fragment(i).metadata for i in d.group.fragment_ids] for d in batch}
    result = _commit_rewrite(request, plan, olds, batch, totals)
    if result.version is None:
        totals.conflicts.append(result.conflict or "conflict")
        latest = open_dataset(request.table, request.uri, request.storage_options)
        touched = changed_fragments(dataset, latest, [f for d in batch for f in d.group.fragment_ids])
        keep = [d for d in batch if not touched & set(d.group.fragment_ids)]
        lose = [d for d in batch if touched & set(d.group.fragment_ids)]
        _remove(request, [m for d in lose for m in d.new])
        if not keep or not lose:  # nothing to tell apart: the whole batch runs again
            _remove(request, [m for d in keep for m in d.new])
            return len(batch)
        result = _commit_rewrite(request, plan, olds, keep, totals)
        if result.version is None:
            totals.conflicts.append(result.conflict or "conflict")
            _remove(request, [m for d in keep for m in d.new])
            return len(batch)
        batch = keep
    totals.after = result.dataset
    _committed(request, order, dataset, plan, state, domain, batch, totals, result.version)
    return len(olds) - len(batch)


def _commit_rewrite(request: CompactionRequest, plan: ClusterPlan, olds: dict[int, list], batch: list[_Done],
                    totals: _Totals) -> CommitResult:
    """The Rewrite of ``batch`` (:func:`commit_rewrite`). A failure that is not a concurrent
    change: when the store's answer was lost but the commit landed, its version; else the
    batch's files are removed (local tables) and the error says so, with what this run
    committed before."""
    try:
        hooks.fault_at(request, "commit")
        return commit_rewrite(request.uri, request.storage_options, plan.read_version,
                              [(olds[d.index], d.new) for d in batch])
    except Exception as e:  # noqa: B902 - Lance's OSError, the store's, a panic's text
        error = e
    new = [m for d in batch for m in d.new]
    files = {p.path for m in new for p in m.data_files()}
    try:
        latest = open_dataset(request.table, request.uri, request.storage_options)
    except CompactionError as e:
        raise CompactionError(
            f"table {request.table}: committing the clustering failed: {describe(error)}; whether this commit "
            f"landed could not be checked ({e.message}): see SELECT * FROM lance.{request.table}.versions; "
            f"{committed_phrase(totals.versions)} before it; its files are left for CALL lance.cleanup(table => "
            f"'{request.table}', delete_unverified => true)", classify(error).kind) from None
    if files and files <= {p.path for f in latest.get_fragments() for p in f.metadata.data_files()}:
        log.warning("table %s: the clustering's commit failed (%s) but landed, as version %d", request.table,
                    error, latest.version)
        return CommitResult(latest.version, dataset=latest)
    removed = remove_files(request.uri, latest, new)
    local = "://" not in request.uri or request.uri.startswith("file://")
    left = (f"the {removed} files it wrote were removed" if local else
            f"the files it wrote are left for CALL lance.cleanup(table => '{request.table}', delete_unverified => true)")
    raise CompactionError(
        f"table {request.table}: committing the clustering failed: {describe(error)}; this commit did not land "
        f"(the table is at version {latest.version}); {committed_phrase(totals.versions)}; {left}",
        classify(error).kind) from None


def _committed(request: CompactionRequest, order: SortOrder, dataset: lance.LanceDataset, plan: ClusterPlan,
               state: ClusteringState | None, domain: tuple[bytes, ...], batch: list[_Done], totals: _Totals,
               version: int) -> None:
    """Count a committed Rewrite of ``batch`` and write the record for exactly its groups."""
    old = [dataset.get_fragment(i).metadata for d in batch for i in d.group.fragment_ids]
    new = [m for d in batch for m in d.new]
    written = [w for d in batch for w in d.written]
    totals.versions.append(version)
    totals.new_version = version
    totals.partitions += len(written)
    totals.fragments_removed += len(old)
    totals.fragments_added += len(new)
    totals.files_removed += sum(len(m.data_files()) + (1 if m.deletion_file else 0) for m in old)
    totals.files_added += sum(len(m.data_files()) for m in new)
    totals.rows += sum(w.rows for w in written)
    totals.deleted_rows += sum(d.group.deleted_rows for d in batch)
    totals.bytes_read += sum(d.group.bytes for d in batch)
    totals.bytes_written += sum(w.bytes for w in written)
    totals.commits += 1
    # its cost kept with the table (runtime/cost_records.py), as a plain compaction's: the bytes
    # of the groups' source fragments and of the new fragments, the reduce tasks' time and the
    # map tasks' (those of the attempt, with its first commit), elapsed since the attempt began
    # (or its previous commit)
    now = time.monotonic()
    cost_records.record(request.table, request.uri, request.storage_options, cost_records.Cost(
        version=version, step="compaction", bytes_read=sum(d.group.bytes for d in batch),
        bytes_written=sum(w.bytes for w in written), task_ms=sum(w.task_ms for w in written) + totals.map_ms,
        elapsed_ms=int((now - totals.clock) * 1000)), request.catalog)
    totals.map_ms, totals.clock = 0, now
    progress.figures({"kind": "progress", "bytes_read": totals.bytes_read, "bytes_written": totals.bytes_written})
    totals.lost |= set(indices_covering(dataset, {i for d in batch for i in d.group.fragment_ids}))
    recorded = record_clustering(request, order, domain, state, written)
    if recorded is not None:
        totals.commits += 1
        totals.new_version = recorded
        totals.versions.append(recorded)


# A concurrent run's record update makes ours incompatible (the same config key): read it again.
RECORD_ATTEMPTS = 5


def record_clustering(request: CompactionRequest, order: SortOrder, domain: tuple[bytes, ...],
                      state: ClusteringState | None, written: list[jobs.Written]) -> int | None:
    """Write the record (state.py) after a Rewrite: the new fragments' ranges, and the entries
    of the latest record (an earlier commit of this run, or another run's) for the same order
    and domain whose fragments are still in the table. Not for an order other than the
    table's own clustering (the table's record stays). Another run's record update in between
    (Lance refuses ours then) is read and merged, and a record that names a fragment a
    concurrent commit removed meanwhile is written again without it. A failure here is
    logged, not raised: the new fragments then count as unclustered, which is safe. The
    version written, or None."""
    try:
        hooks.fault_at(request, "record")
        for attempt in range(RECORD_ATTEMPTS):
            latest = open_dataset(request.table, request.uri, request.storage_options)
            ranges = _merged_ranges(request, order, domain, state, written, latest)
            if ranges is None:
                return None
            current = ClusteringState.from_config(latest.config())
            if attempt and current is not None and current.ranges == ranges and current.domain == domain:
                return latest.version  # a retry found the record exact already
            try:  # inside the clustering's commit gate (_commit)
                latest.update_config({STATE_KEY: ClusteringState(order.text(), domain, ranges).to_config()})
            except OSError as e:
                if "incompatible" not in str(e).lower() and not is_retryable_conflict(e):
                    raise
                continue  # another run's record (or config change) landed first: merge with it
            after = open_dataset(request.table, request.uri, request.storage_options)
            present = {f.fragment_id for f in after.get_fragments()}
            if set(ranges) <= present:
                return after.version
            # a concurrent commit (a plain compaction, another clustering) removed a recorded fragment
        log.warning("table %s: the clustering's record was not settled after %d attempts (concurrent "
                    "changes); fragments it misses count as unclustered", request.table, RECORD_ATTEMPTS)
        return open_dataset(request.table, request.uri, request.storage_options).version
    except Exception as e:  # the clustering is committed; only its record is missing
        log.warning("table %s: the clustering's record was not written (%s); its new fragments count "
                    "as unclustered", request.table, e)
        return None


def _merged_ranges(request: CompactionRequest, order: SortOrder, domain: tuple[bytes, ...],
                   state: ClusteringState | None, written: list[jobs.Written],
                   latest: lance.LanceDataset) -> dict[int, tuple[int, int]] | None:
    """The record's ranges at ``latest``: its present fragments' entries of the latest record
    (same order and domain, else this run's starting record), plus the fragments ``written``
    (found by their data file); None when the table's own clustering is another order."""
    config = latest.config() or {}
    own = table_sort_order(config)
    if own is not None and parse_sort_order(own, request.table).text() != order.text():
        return None
    by_path = {f.metadata.data_files()[0].path: f.fragment_id for f in latest.get_fragments()
               if f.metadata.data_files()}
    present = set(by_path.values())
    current = ClusteringState.from_config(config)
    base = current if current is not None and current.order == order.text() and current.domain == domain \
        else (state if state is not None and state.domain == domain else None)
    ranges = {k: v for k, v in (base.ranges if base is not None else {}).items() if k in present}
    for w in written:
        for text, r in zip(w.fragments, w.ranges):
            meta = new_fragments([text])[0]
            fid = by_path.get(meta.data_files()[0].path)
            if fid is not None:
                ranges[fid] = r
    return ranges


def cluster(request: CompactionRequest, sc: Any) -> tuple:
    """Run the clustering ``request`` on the Spark cluster behind ``sc``; the result row."""
    started = time.time()
    order, dataset = prepare(request)
    totals = _Totals(read_version=0)
    first_read = dataset.version
    retries = int(request.run.get("max_retries", 3))
    try:
        while True:
            conflicted = _attempt(sc, request, order, dataset, totals)
            if not conflicted:
                break
            if totals.retries >= retries:
                totals.conflicted = conflicted
                break
            dataset = open_dataset(request.table, request.uri, request.storage_options)
            totals.retries += 1
            log.info("table %s: clustering conflicted (%s); running it again", request.table, totals.conflicts[-1])
    except cancellation.Cancelled:
        raise
    except CompactionError as e:  # its words say what was committed, when anything was
        if totals.versions and "committed" not in e.message:
            raise CompactionError(f"{e.message}; {committed_phrase(totals.versions)}", e.kind) from None
        raise
    except Exception as e:  # noqa: B902 - Lance's or ours: name it, and say what was committed
        keep_traceback(e, f"table {request.table}: the clustering failed", request.storage_options)
        raise CompactionError(f"table {request.table}: the clustering failed: {type(e).__name__}: {describe(e)}; "
                              f"{committed_phrase(totals.versions)}", classify(e).kind) from None
    if totals.after is not None:
        layout_figures.said(request.table, request.catalog, totals.after, "after compaction")
    # Every index covering less than the table, whoever left it so (raises naming what was committed).
    totals.coverage = index_restore.restore(request, totals.lost, totals.versions)
    if totals.coverage is not None and totals.coverage.restored:
        totals.commits += 1
        totals.new_version = totals.coverage.version
        totals.versions.append(totals.coverage.version)
    return _row(request, order, totals, first_read, started)


def _row(request: CompactionRequest, order: SortOrder, t: _Totals, first_read: int, started: float) -> tuple:
    conflicts = None
    if t.conflicts:
        what = "; ".join(sorted(set(t.conflicts))[:3])
        conflicts = (f"a concurrent change conflicted {len(t.conflicts)} times ({what}); "
                     + ("the conflicted groups were run again at the new version" if not t.conflicted
                        else f"gave up after {t.retries} re-runs: {t.conflicted} groups not committed"))
    committed = t.commits > 0
    row = {
        "table": request.table,
        "strategy": "clustering",
        "read_version": t.read_version or first_read,
        "new_version": t.new_version if committed else first_read,
        "tasks": t.partitions, "tasks_left": 0, "fragments_left": t.left,
        "fragments_removed": t.fragments_removed, "fragments_added": t.fragments_added,
        "files_removed": t.files_removed, "files_added": t.files_added,
        "rows_rewritten": t.rows, "deleted_rows_removed": t.deleted_rows,
        "bytes_read": t.bytes_read, "bytes_written": t.bytes_written,
        "commits": t.commits, "retries": t.retries, "tasks_conflicted": t.conflicted,
        "tasks_rebased": 0, "conflicts": conflicts, "tasks_failed": t.failed,
        "elapsed_ms": int((time.time() - started) * 1000),
        "sort_order": order.text(),
        "index_coverage": t.coverage.text(request.table) if t.coverage else None,
    }
    return tuple(row.get(name) for name, _ in result_columns())
