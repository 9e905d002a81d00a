"""The orchestration of a clustering run (``compact`` with ``sort_order``), on the driver in
the engine process:

1. check the request and the sort order against the schema (nothing is read yet);
2. plan the group at the latest version (:mod:`.plan`);
3. Spark job 1 samples the keys, the driver picks bounds; job 2 routes, shuffles, sorts and
   writes the partitions on executors (:mod:`.jobs`);
4. cancellation check, the test hook, one Rewrite commit on the read version; on a conflict
   with a concurrent delete/update the written files are removed (local tables) and the group
   runs again at the new version, up to ``max_retries`` times, then it is reported;
5. indices that lost coverage are optimized (``restore_indices``, default true);
6. the result row (parameters.json ``result_columns``).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import lance

from ...runtime import cancellation
from ...runtime.failures import job_failure

from ...runtime import hooks
from ...errors import CompactionError
from ...options import result_columns
from ..request import CompactionRequest
from ...runtime.tables import open_dataset
from . import jobs
from .commit import (IndexCoverage, commit_rewrite, indices_covering, new_fragments, remove_files,
                     restore_indices)
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
UNSUPPORTED_RUN = {"partial_progress": False, "min_input_fragments": 1, "task_order": "plan"}


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
            return ClusterPlan(dataset.version, order, ClusterGroup((), 0, 0, 0), 0, 0, None, True)
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
    g = plan.group
    return [(0, plan.read_version, True, list(g.fragment_ids), len(g.fragment_ids), g.rows,
             g.deleted_rows, g.bytes, plan.reason(), plan.partitions)]


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
    conflicted: int = 0
    conflicts: list[str] = field(default_factory=list)
    coverage: IndexCoverage | None = None
    left: int = 0


def _attempt(sc: Any, request: CompactionRequest, order: SortOrder, dataset: lance.LanceDataset,
             totals: _Totals) -> int | None:
    """Plan, sample, rewrite and commit the group once; the new version, or None on a conflict."""
    state = _record(request, order, dataset)
    plan: ClusterPlan = _plan(sc, request, order, dataset, state)
    source = jobs.Source(request.uri, request.storage_options, plan.read_version)
    ids = list(plan.group.fragment_ids)
    totals.left = plan.left
    if not ids:  # incremental and nothing to do
        totals.read_version = totals.read_version or plan.read_version
        return plan.read_version
    sc.setJobDescription(f"lance.compact {request.table}: sampling {order.text()} at version {plan.read_version}")
    try:
        sample = jobs.sample_keys(sc, source, order, ids, plan.group.rows, plan.partitions)
        domain = state.domain if state is not None else make_domain(sample, order)
        bounds = jobs.make_bounds(sample, order, plan.partitions, open_domain(domain) if order.zorder else None)
        del sample
        sc.setJobDescription(f"lance.compact {request.table}: clustering {len(ids)} fragments into "
                             f"{plan.partitions} partitions by {order.text()}")
        written = jobs.rewrite(sc, source, order, bounds, ids, plan.target_rows, plan.max_bytes_per_file, domain)
    except Exception as e:
        why = cancellation.job_cancelled(str(e))
        files = f"files written by finished tasks are left for CALL lance.cleanup(table => '{request.table}', delete_unverified => true)"
        if why:
            raise cancellation.Cancelled(f"table {request.table}: the clustering was cancelled ({why}); "
                                         f"nothing was committed; {files}") from None
        raise CompactionError(f"table {request.table}: the clustering job failed: {job_failure(e)}; "
                              f"nothing was committed; {files}") from None
    finally:
        sc.setJobDescription(None)
    log.info("table %s: %d partitions written, %d rows; largest partition %d rows; peak worker memory %d MB",
             request.table, len(written), sum(w.rows for w in written), max((w.rows for w in written), default=0),
             max((w.peak_rss for w in written), default=0) >> 20)
    new = [m for w in written for m in new_fragments(list(w.fragments))]
    old = [dataset.get_fragment(i).metadata for i in ids]
    hooks.before_commit(request)  # test-only moments before the commit: the cancel check comes after them
    why = cancellation.reason()
    if why:
        removed = remove_files(request.uri, open_dataset(request.table, request.uri, request.storage_options), new)
        raise cancellation.Cancelled(f"table {request.table}: the clustering was cancelled before its commit "
                                     f"({why}); nothing was committed; {removed} new files removed")
    lost = indices_covering(dataset, set(ids))
    result = commit_rewrite(request.uri, request.storage_options, plan.read_version, old, new)
    if result.version is None:
        latest = open_dataset(request.table, request.uri, request.storage_options)
        remove_files(request.uri, latest, new)
        totals.conflicts.append(result.conflict or "conflict")
        return None
    totals.read_version = totals.read_version or plan.read_version
    totals.new_version = result.version
    totals.partitions = len(written)
    totals.fragments_removed = len(old)
    totals.fragments_added = len(new)
    totals.files_removed = sum(len(m.data_files()) + (1 if m.deletion_file else 0) for m in old)
    totals.files_added = sum(len(m.data_files()) for m in new)
    totals.rows = sum(w.rows for w in written)
    totals.deleted_rows = plan.group.deleted_rows
    totals.bytes_read = plan.group.bytes
    totals.bytes_written = sum(w.bytes for w in written)
    totals.commits += 1
    totals.coverage = IndexCoverage(tuple(lost), False)
    recorded = record_clustering(request, order, domain, state, written)
    if recorded is not None:
        totals.commits += 1
        totals.new_version = recorded
    return totals.new_version


def record_clustering(request: CompactionRequest, order: SortOrder, domain: tuple[bytes, ...],
                      state: ClusteringState | None, written: list[jobs.Written]) -> int | None:
    """Write the record (state.py) after the Rewrite: the new fragments' ranges, the old
    entries of fragments still in the table. Not for an order other than the table's own
    clustering (the table's record stays). A failure here is logged, not raised: the new
    fragments then count as unclustered, which is safe. The version written, or None."""
    try:
        latest = open_dataset(request.table, request.uri, request.storage_options)
        config = latest.config() or {}
        own = table_sort_order(config)
        if own is not None and parse_sort_order(own, request.table).text() != order.text():
            return None
        by_path = {f.metadata.data_files()[0].path: f.fragment_id for f in latest.get_fragments()
                   if f.metadata.data_files()}
        present = set(by_path.values())
        ranges = {k: v for k, v in (state.ranges if state is not None else {}).items() if k in present}
        for w in written:
            for text, r in zip(w.fragments, w.ranges):
                meta = new_fragments([text])[0]
                fid = by_path.get(meta.data_files()[0].path)
                if fid is not None:
                    ranges[fid] = r
        latest.update_config({STATE_KEY: ClusteringState(order.text(), domain, ranges).to_config()})
        return open_dataset(request.table, request.uri, request.storage_options).version
    except Exception as e:  # the clustering is committed; only its record is missing
        log.warning("table %s: the clustering's record was not written (%s); its new fragments count "
                    "as unclustered", request.table, e)
        return None


def cluster(request: CompactionRequest, sc: Any) -> tuple:
    """Run the clustering ``request`` on the Spark cluster behind ``sc``; the result row."""
    started = time.time()
    order, dataset = prepare(request)
    totals = _Totals(read_version=0)
    first_read = dataset.version
    retries = int(request.run.get("max_retries", 3))
    while True:
        version = _attempt(sc, request, order, dataset, totals)
        if version is not None:
            break
        if totals.retries >= retries:
            totals.conflicted = 1
            break
        totals.retries += 1
        log.info("table %s: clustering conflicted (%s); running it again", request.table, totals.conflicts[-1])
        dataset = open_dataset(request.table, request.uri, request.storage_options)
    if totals.coverage is not None and totals.coverage.lost and request.run.get("restore_indices", True):
        latest = open_dataset(request.table, request.uri, request.storage_options)
        restored = restore_indices(latest, list(totals.coverage.lost))
        restored = open_dataset(request.table, request.uri, request.storage_options).version
        totals.coverage = IndexCoverage(totals.coverage.lost, True, restored)
        totals.commits += 1
        totals.new_version = restored
    return _row(request, order, totals, first_read, started)


def _row(request: CompactionRequest, order: SortOrder, t: _Totals, first_read: int, started: float) -> tuple:
    conflicts = None
    if t.conflicts:
        what = "; ".join(sorted(set(t.conflicts))[:3])
        conflicts = (f"a concurrent change conflicted {len(t.conflicts)} times ({what}); "
                     + ("the group was run again at the new version" if not t.conflicted
                        else f"gave up after {t.retries} re-runs: nothing committed"))
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
        "tasks_rebased": 0, "conflicts": conflicts, "tasks_failed": 0,
        "elapsed_ms": int((time.time() - started) * 1000),
        "sort_order": order.text(),
        "index_coverage": t.coverage.text(request.table) if t.coverage else None,
    }
    return tuple(row.get(name) for name, _ in result_columns())
