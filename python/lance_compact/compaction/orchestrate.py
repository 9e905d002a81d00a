"""The one orchestration of a compaction run, on the driver, in the engine process.

1. plan: validate the request, open the table, plan with the strategy, split the selected
   tasks into batches (one, or up to ``max_commits`` with partial progress);
2. per batch: the tasks run as one Spark job on executors (a :class:`BatchRunner`), then the
   finished ones are committed atomically here; on a conflicting concurrent change what
   it left alone is committed and the rest re-planned as a new batch (``max_retries``);
3. every index that covers less than the table is restored (``index_restore.py``,
   ``restore_indices``, default true), whoever left it so;
4. the measured result row.

Both the CALL procedure and the PySpark API reach this through the engine process
(``engine.py``); the run's state lives in memory for the length of the call.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import lance
from lance.optimize import Compaction, RewriteResult

from ..runtime import cancellation, commit_gate, cost_records, progress
from . import layout_figures
from . import bounds
from ..options import effective

from ..runtime import hooks
from .fragments import fragments_matching
from .commit import CommitOutcome, commit_results, remove_new_files
from ..errors import MARKER, CompactionError
from ..runtime.failures import committed_phrase, describe, keep_traceback
from ..runtime.secrets import redact
from .execute import TaskOutcome
from ..options import result_columns
from .request import CompactionRequest
from .planners import Plan, as_plan, get_planner
from ..runtime.tables import open_dataset

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """Tasks committed together: ids (fixed for the run), their JSON and plan rows, and
    results of an earlier attempt of this batch carried to its commit."""

    read_version: int
    ids: list[int]
    tasks: list[str]
    rows: list[list]
    carried: list[TaskOutcome] = field(default_factory=list)
    # bytes read and written by the run's earlier commits, for the "so far" its runner says
    so_far: tuple[int, int] = (0, 0)

    def subset(self, keep: list[int], carried: list[TaskOutcome]) -> "Batch":
        return Batch(self.read_version, [self.ids[i] for i in keep], [self.tasks[i] for i in keep],
                     [self.rows[i] for i in keep], carried)


@dataclass
class BatchFailure:
    """A batch's Spark job failed: its message, and the batch position Spark gave up on."""

    message: str
    position: int | None = None
    cancelled: bool = False  # the job was cancelled (message: why)
    settled: bool = True  # none of its tasks still ran when the runner returned
    stopped: int | None = None  # tasks stopped while running (None: every one that did not report)


class BatchRunner(Protocol):
    """Runs a batch's tasks as Spark tasks (``spark_job.py``; a small batch in the engine
    itself, ``engine_rewrite.py``, against ``dataset``: the run's table): returns the outcomes
    that reached the driver, and the failure when the job failed."""

    def run(self, request: CompactionRequest, batch: Batch, number: int,
            dataset: lance.LanceDataset | None = None
            ) -> tuple[list[TaskOutcome], BatchFailure | None]: ...


def plan_rows(plan: Plan, first_id: int = 0) -> list[list]:
    """Rows of parameters.json's ``plan_columns``, one per planned task."""
    return [[first_id + i, plan.read_version, t.selected, t.fragment_ids, len(t.fragment_ids),
             t.rows, t.deleted_rows, t.bytes, t.reason, t.expected_output_fragments]
            for i, t in enumerate(plan.tasks)]


def _batches(plan: Plan, groups: int, first_id: int = 0) -> list[Batch]:
    """The selected tasks in up to ``groups`` batches of consecutive tasks, each committed
    on its own. A task keeps its id (``first_id`` + its place in the plan) for the run."""
    rows = [r for r in plan_rows(plan, first_id) if r[2]]
    tasks = [t.task_json() for t in plan.selected]
    n = min(groups, len(tasks))
    bounds = [round(i * len(tasks) / n) for i in range(n + 1)] if n else []
    return [Batch(plan.read_version, [r[0] for r in rows[a:b]], tasks[a:b], rows[a:b])
            for a, b in zip(bounds, bounds[1:])]


def shape(plan: Plan, run: dict[str, Any]) -> Plan:
    """``min_input_fragments`` leaves small merges for later; ``task_order`` orders the tasks
    (which run first and, with partial progress, which commit first)."""
    n = run.get("min_input_fragments") or 1
    for t in plan.tasks:
        if t.selected and len(t.fragment_ids) < n:
            t.selected = False
            t.reason = f"{t.reason}; left: fewer than {n} input fragments (min_input_fragments)"
    key = {"bytes_desc": lambda t: -(t.bytes or 0), "bytes_asc": lambda t: t.bytes or 0,
           "fragments_desc": lambda t: -len(t.fragment_ids)}.get(run.get("task_order") or "plan")
    if key is not None:
        plan.tasks.sort(key=key)  # stable: Lance's order among equals
    return plan


def make_plan(request: CompactionRequest, dataset: lance.LanceDataset | None = None
              ) -> tuple[Plan, lance.LanceDataset]:
    """The strategy's plan at the table's latest version (``dataset``, just opened, or opened
    here), and the table it was made on: ``where`` narrows the candidates for every strategy,
    then :func:`shape`."""
    planner = get_planner(request.strategy, request.table, request.settings, request.catalog)
    if dataset is None:
        dataset = open_dataset(request.table, request.uri, request.storage_options)
    if dataset.count_rows() == 0:
        # Most likely the wrong table (or one a job emptied): say so rather than succeed.
        raise CompactionError(
            f"table {request.table}: the table is empty at version {dataset.version} "
            f"({len(dataset.fragment_ids())} fragments, no live rows); nothing to compact")
    options = dict(request.options)
    where = request.run.get("where")
    if where:
        matching = fragments_matching(dataset, where, request.table)
        others = set(dataset.fragment_ids()) - matching
        options["excluded_fragment_ids"] = sorted(others | set(options.get("excluded_fragment_ids", [])))
    plan = shape(as_plan(planner.plan(dataset, options), dataset, request.options), request.run)
    check_bounds(request, plan, dataset)
    return plan, dataset


def check_bounds(request: CompactionRequest, plan: Plan, dataset: lance.LanceDataset) -> None:
    """The fragments the selected tasks would write within their bound (bounds.py), before
    any task runs."""
    selected = plan.selected
    if not selected:
        return
    config = dataset.config() or {}
    target = int(effective(config, request.options, "target_rows_per_fragment"))
    bounds.check_fragments_written(request.table, [(t.rows, t.expected_output_fragments, t.bytes) for t in selected],
                                   request.options, config, target)


def table_clustering(request: CompactionRequest, dataset: lance.LanceDataset | None = None
                     ) -> CompactionRequest:
    """The request with the table's clustering (``lance_compact.cluster_by``, read from
    ``dataset`` or a new open) applied when it gives no sort_order, and without one for
    ``sort_order => 'none'``."""
    from .clustering.table_clustering import with_table_clustering
    if dataset is None:
        dataset = open_dataset(request.table, request.uri, request.storage_options)
    return with_table_clustering(request, dataset.config())


def _engine_context() -> Any:
    """The engine's SparkContext (a shared maintenance run's runner has none of its own)."""
    from pyspark import SparkContext
    return SparkContext._active_spark_context


def dry_run(request: CompactionRequest) -> list[tuple]:
    """``plan_compaction``: a row per task, selected or left for later; writes nothing."""
    dataset = open_dataset(request.table, request.uri, request.storage_options)  # once, for both
    request = table_clustering(request, dataset)
    if request.run.get("sort_order") is not None:  # clustered compaction plans its own group
        from .clustering.run import dry_run as cluster_dry_run
        return cluster_dry_run(request)
    return [tuple(r) for r in plan_rows(make_plan(request, dataset)[0])]


class Run:
    """One compaction run: its batches and its measured totals."""

    def __init__(self, request: CompactionRequest, plan: Plan, dataset: lance.LanceDataset,
                 started: float) -> None:
        self.request = request
        self.dataset = dataset  # the table as this run last saw it, reused by its commits
        self.started = started
        self.ended: float | None = None
        self.read_version = plan.read_version
        groups = request.run["max_commits"] if request.run["partial_progress"] else 1
        self.pending = _batches(plan, groups)
        self.next_id = len(plan.tasks)
        self.tasks_left = len(plan.left)
        self.fragments_left = sum(len(t.fragment_ids) for t in plan.left)
        self.counts = {"commits": 0, "retries": 0, "tasks_conflicted": 0, "tasks_rebased": 0,
                       "tasks_failed": 0}
        self.totals: dict[str, Any] = {}
        self.refusals: list[str] = []  # why conflicted tasks were not carried over
        self.task_errors: list[str] = []  # why tasks failed all their attempts (partial progress)
        self.committed_versions: list[int] = []  # in the order they were committed
        self.coverage: Any = None  # index_restore.IndexCoverage: indices found covering less than the table
        self.batch_clock = time.monotonic()  # when the batch being committed started (its cost's elapsed time)

    def execute(self, runner: BatchRunner) -> None:
        """Run every batch. A failure or a cancel ends the run with a message that says what
        was committed before it (with the versions) and that nothing was after."""
        try:
            self._execute(runner)
        except cancellation.Cancelled:
            raise
        except CompactionError as e:
            landed = getattr(e, "landed_version", None)
            if landed is None:
                raise CompactionError(f"{e.message}; {committed_phrase(self.versions)}", e.kind) from None
            # The failed commit landed all the same (its message says so, with the version).
            earlier = self.versions
            before = (f"; earlier in this run {'versions' if len(earlier) > 1 else 'version'} "
                      f"{', '.join(map(str, earlier))} committed" if earlier else "")
            raise CompactionError(f"{e.message}{before}; nothing after", e.kind) from None
        except Exception as e:  # Lance's or ours: name it, and say what was committed
            keep_traceback(e, f"table {self.request.table}: run failed", self.request.storage_options)
            raise CompactionError(f"table {self.request.table}: the compaction failed: "
                                  f"{type(e).__name__}: {describe(e)}; "
                                  f"{committed_phrase(self.versions)}") from None
        self.ended = time.time()

    def restore_indices(self) -> None:
        """After the batches: every index covering less than the table is optimized
        (``index_restore.py``), counted as a commit of this run; a failure says which versions
        this run committed before it."""
        from .index_restore import restore
        config = self.dataset.config() or {}
        if self.request.options.get("defer_index_remap") or str(
                config.get("lance.compaction.defer_index_remap", "")).lower() == "true":
            return  # the caller deferred index work (Lance's fragment-reuse index keeps queries right)
        self.coverage = restore(self.request, set(), self.versions, self.dataset)
        if self.coverage is not None and self.coverage.restored:
            self.committed_versions.append(self.coverage.version)
            self.counts["commits"] += 1
            self.totals["new_version"] = self.coverage.version
        self.ended = time.time()

    def _execute(self, runner: BatchRunner) -> None:
        number = 0
        while self.pending:
            self._check_cancelled(f"before batch {number + 1}", self.pending[0].carried)
            batch = self.pending.pop(0)
            number += 1
            clock = self.batch_clock = time.monotonic()
            progress.report(f"{self.request.table}: batch {number} of {number + len(self.pending)}, "
                            f"rewriting {len(batch.ids)} tasks")
            batch.so_far = (self.totals.get("bytes_read") or 0, self.totals.get("bytes_written") or 0)
            outcomes, failure = runner.run(self.request, batch, number, self.dataset)
            stage_outcomes(self.request, [o for o in outcomes if o.result_json] + batch.carried)
            ran = time.monotonic()
            if failure is not None and failure.cancelled:
                reported = [o for o in outcomes if o.result_json is not None]
                stopped = len(batch.ids) - len(outcomes) if failure.stopped is None else failure.stopped
                self._cancelled(failure.message, f"during batch {number}", reported + batch.carried,
                                stopped, failure.settled)
            if failure is None:
                progress.report(f"{self.request.table}: batch {number}: committing")
                self._commit(batch, outcomes)
            else:
                self._failed(batch, outcomes, failure)
            log.info("table %s: batch %d: %d tasks ran in %d ms, commit took %d ms", self.request.table,
                     number, len(batch.ids), (ran - clock) * 1000, (time.monotonic() - ran) * 1000)

    @property
    def versions(self) -> list[int]:
        """The versions this run committed so far."""
        return list(self.committed_versions)

    def _check_cancelled(self, where: str, uncommitted: list[TaskOutcome]) -> None:
        why = cancellation.reason()
        if why:
            self._cancelled(why, where, uncommitted)

    def _cancelled(self, why: str, where: str, uncommitted: list[TaskOutcome], stopped: int = 0,
                   settled: bool = True) -> None:
        """Stop: remove what finished tasks wrote and nobody committed (local tables), and
        fail saying the statement was cancelled, what was committed before, and what was left
        for cleanup (files of ``stopped`` tasks that never reported)."""
        raise self._cancel_error(why, where, uncommitted, stopped, settled)

    def _cancel_error(self, why: str, where: str, uncommitted: list[TaskOutcome], stopped: int = 0,
                      settled: bool = True) -> cancellation.Cancelled:
        """:meth:`_cancelled`'s error, the files removed (also the commit gate's refusal)."""
        request = self.request
        why = cancellation.reason() or why  # the statement's own cancel says more than Spark's
        results = [RewriteResult.from_json(o.result_json) for o in uncommitted if o.result_json]
        local = "://" not in request.uri or request.uri.startswith("file://")
        cleanup = (f"CALL lance.cleanup(table => '{request.table}', delete_unverified => true) once they "
                   "are older than the operator's floor (spark.lance.compact.cleanup.unverifiedMinAge)")
        if local:
            try:
                removed = remove_new_files(request, results) if results else 0
                files = ("the 1 file of tasks that finished but were not committed was removed" if removed == 1
                         else f"the {removed} files of tasks that finished but were not committed were removed"
                         if removed else "no finished task was left uncommitted")
            except CompactionError as e:  # the table could not be read: cleanup removes them later
                files = f"the files of finished tasks could not be removed ({e.message}): run {cleanup}"
            if stopped:
                # Spark does not say which of them had started: a task queued behind the slots counts too
                tasks = "1 task" if stopped == 1 else f"{stopped} tasks"
                files += (f"; {tasks} had not reported (running or not yet started) when the job was "
                          f"stopped: any file one was writing is left for {cleanup}")
                if not settled:
                    files += " (some were still running 15 s after the cancel)"
        else:
            files = f"files written by tasks that were not committed are left for {cleanup}"
        log.info("table %s: cancelled %s (%s)", request.table, where, why)
        if local:
            commit_gate.stage(request.uri, [])  # removed above (or left for cleanup, said)
        return cancellation.Cancelled(
            f"table {request.table}: the compaction was cancelled {where} ({why}); "
            f"{committed_phrase(self.versions, 'the cancel')}; {files}")

    def _failed(self, batch: Batch, outcomes: list[TaskOutcome], failure: BatchFailure) -> None:
        """A task of the batch failed all its attempts (its worker died, say). Without partial
        progress nothing is committed, what the finished tasks wrote is removed and the run
        fails. With it, the task Spark gave up on counts as failed and the batch's other
        unfinished tasks run again, carrying the finished ones to their commit."""
        finished = [o for o in outcomes if o.result_json is not None]
        if not self.request.run["partial_progress"]:
            remove_new_files(self.request, [RewriteResult.from_json(o.result_json)
                                            for o in finished + batch.carried])
            raise CompactionError(failure.message)
        failed_id = (batch.ids[failure.position]
                     if failure.position is not None and 0 <= failure.position < len(batch.ids)
                     else None)
        reported = {o.task_id for o in outcomes}
        redo = [i for i, tid in enumerate(batch.ids) if tid not in reported and tid != failed_id]
        # Tasks that raised on their last attempt, the one Spark gave up on, and (when that
        # one is not known) every unfinished one count as failed.
        self.counts["tasks_failed"] += len(batch.ids) - len(finished) - len(redo)
        self._task_failed(failure.message)
        again = batch.subset(redo, batch.carried + finished)
        if redo:
            self.pending.insert(0, again)
        elif again.carried:
            self._commit(again, [])

    def _commit(self, batch: Batch, outcomes: list[TaskOutcome]) -> None:
        request = self.request
        if sorted(o.task_id for o in outcomes) != sorted(batch.ids):
            raise CompactionError(
                f"table {request.table}: {len(outcomes)} of {len(batch.ids)} tasks reported back")
        hooks.before_commit(request)
        # Asked last, right before Lance commits: a cancel seen by then stops the commit.
        self._check_cancelled("before a commit", [o for o in outcomes if o.error is None] + batch.carried)
        # In plan order, whatever order the tasks finished in: Lance numbers the new
        # fragments in the order of the results, and the layout must equal its own.
        done = sorted([o for o in outcomes if o.error is None] + batch.carried, key=lambda o: o.task_id)
        results = [RewriteResult.from_json(o.result_json) for o in done]
        self.counts["tasks_failed"] += sum(1 for o in outcomes if o.error is not None)
        for o in outcomes:
            if o.error is not None:
                self._task_failed(o.error)
        outcome = CommitOutcome()
        uncommitted = [o for o in outcomes if o.error is None] + batch.carried
        try:
            if results:
                # The gate: no commit once a cancel is recorded (atomically with it); a cancel
                # after this waits for the commit and hears what landed.
                with commit_gate.committing(
                        f"table {request.table}: committing a compaction of {len(results)} tasks",
                        lambda why: self._cancel_error(why, "before a commit", uncommitted)) as landed:
                    try:
                        commit_results(request, batch.read_version, results, self.dataset, outcome)
                    finally:
                        if outcome.versions:
                            landed(f"version{'s' if len(outcome.versions) > 1 else ''} "
                                   f"{', '.join(map(str, outcome.versions))}")
        finally:
            self.committed_versions += outcome.versions
        self.counts["commits"] += outcome.commits
        self.counts["tasks_rebased"] += outcome.rebased
        self.refusals += outcome.refusals
        for k, v in outcome.metrics.items():
            self.totals[k] = v if k == "new_version" else (
                None if v is None or self.totals.get(k, 0) is None else self.totals.get(k, 0) + v)
        _unstage(request, results)  # committed; conflicted ones are removed next (or re-staged by a re-plan)
        if outcome.versions:
            self._keep_cost(outcome, [o for o in outcomes if o.error is None] + batch.carried)
        if outcome.conflicted:
            remove_new_files(request, outcome.conflicted)
            replanned = (_replan(request, outcome.conflicted)
                         if self.counts["retries"] < request.run["max_retries"] else None)
            if replanned is None:
                self.counts["tasks_conflicted"] += len(outcome.conflicted)
            else:
                self.counts["retries"] += 1
                self.pending[:0] = _batches(replanned, 1, self.next_id)
                self.next_id += len(replanned.tasks)

    def _keep_cost(self, outcome: CommitOutcome, done: list[TaskOutcome]) -> None:
        """The batch's cost, kept with the table under the version its commit left (a commit
        that carried concurrent deletions over made more than one: the last holds it), and the
        statement's bytes so far said to the Lance tab."""
        m = outcome.metrics
        cost_records.record(self.request.table, self.request.uri, self.request.storage_options, cost_records.Cost(
            version=outcome.versions[-1], step="compaction", bytes_read=m.get("bytes_read"),
            bytes_written=m.get("bytes_written"), task_ms=sum(o.elapsed_ms for o in done),
            elapsed_ms=int((time.monotonic() - self.batch_clock) * 1000)), self.request.catalog)
        progress.figures({"kind": "progress", "bytes_read": self.totals.get("bytes_read"),
                          "bytes_written": self.totals.get("bytes_written")})

    def _task_failed(self, message: str) -> None:
        """A task failed all its attempts and the run goes on (partial progress): said in the
        engine's log, and kept for maintain's fail_on_error."""
        message = message.replace("CompactionError: ", "", 1).replace(f"{MARKER} ", "")
        log.warning("table %s: a task failed all its attempts; the run goes on without it: %s",
                    self.request.table, redact(message, self.request.storage_options))
        self.task_errors.append(redact(message, self.request.storage_options))

    def _conflicts(self) -> str | None:
        c = self.counts
        parts = []
        if c["tasks_rebased"]:
            parts.append(f"{c['tasks_rebased']} tasks committed with concurrent deletes carried over")
        if self.refusals:
            reasons = sorted(set(self.refusals))
            parts.append(f"{len(self.refusals)} planned again ({'; '.join(reasons[:5])}"
                         + (f"; {len(reasons) - 5} more" if len(reasons) > 5 else "") + ")")
        if c["retries"] and not self.refusals:
            parts.append(f"{c['retries']} re-plans")
        if c["tasks_conflicted"]:
            parts.append(f"{c['tasks_conflicted']} tasks dropped after {c['retries']} re-plans")
        return "; ".join(parts) or None

    def result_row(self) -> tuple:
        """The run's result in parameters.json's ``result_columns``; every figure measured."""
        row = {
            "table": self.request.table,
            "strategy": self.request.strategy,
            "read_version": self.read_version,
            "new_version": self.totals.get("new_version", self.read_version),
            "tasks_left": self.tasks_left,
            "fragments_left": self.fragments_left,
            "elapsed_ms": int(((self.ended or time.time()) - self.started) * 1000),
            "conflicts": self._conflicts(),
            "sort_order": None,  # clustering's (clustering/run.py)
            "index_coverage": self.coverage.text(self.request.table) if self.coverage else None,
            **self.counts,
        }
        for name, _ in result_columns():
            row.setdefault(name, self.totals.get(name, 0))
        return tuple(row[name] for name, _ in result_columns())


def _new_files(results: list[RewriteResult]) -> list[str]:
    return [f"data/{d.path}" for r in results for f in r.new_fragments for d in f.files]


def stage_outcomes(request: CompactionRequest, outcomes: list[TaskOutcome]) -> None:
    """The data files the batch's finished tasks wrote, not committed yet: if this worker dies
    before the commit, the pool removes them (``discard_staged``). Also called while the batch's
    Spark job runs, as its tasks finish (spark_job.py)."""
    results = [RewriteResult.from_json(o.result_json) for o in outcomes if o.result_json]
    if results:
        commit_gate.add(request.uri, _new_files(results), request.storage_options)


def _unstage(request: CompactionRequest, results: list[RewriteResult]) -> None:
    commit_gate.drop(request.uri, _new_files(results))


def _replan(request: CompactionRequest, conflicted: list[RewriteResult]) -> Plan:
    """Lance's plan again, at the latest version, over what is left of the fragments the
    conflicted tasks had (a concurrent delete may have changed or removed them)."""
    dataset = open_dataset(request.table, request.uri, request.storage_options)
    wanted = {f.id for r in conflicted for f in r.original_fragments}
    excluded = set(dataset.fragment_ids()) - wanted
    options = dict(request.options)
    options["excluded_fragment_ids"] = sorted(excluded | set(options.get("excluded_fragment_ids", [])))
    return shape(as_plan(Compaction.plan(dataset, options), dataset, request.options), request.run)


def compact(request: CompactionRequest, runner: BatchRunner, task_errors: list[str] | None = None) -> tuple:
    """``compact``: plan, run every batch, commit; the result row (``result_columns``).
    ``task_errors``: receives why each task that failed all its attempts failed (partial
    progress; the row counts them in ``tasks_failed``)."""
    started = time.time()
    # One open for the clustering's record and the plan (each open reads the manifest: round
    # trips on an object store).
    dataset = open_dataset(request.table, request.uri, request.storage_options)
    request = table_clustering(request, dataset)
    if request.run.get("sort_order") is not None:  # clustered compaction: its own Spark jobs and commit
        from .clustering.run import cluster
        sc = getattr(runner, "sc", None) or _engine_context()
        if sc is None:
            raise CompactionError(f"table {request.table}: sort_order needs a Spark context of its own "
                                  "(not available in a shared maintenance run)")
        return cluster(request, sc)
    progress.report(f"{request.table}: planning")
    run = Run(request, *make_plan(request, dataset), started)
    if run.pending:  # the layout this compaction starts from, as the plan read it (no extra read)
        layout_figures.said(request.table, request.catalog, dataset, "before compaction")
    log.info("table %s: planned %d tasks in %d ms", request.table,
             sum(len(b.ids) for b in run.pending), (time.time() - started) * 1000)
    try:
        run.execute(runner)
    finally:
        if task_errors is not None:
            task_errors.extend(run.task_errors)
    progress.report(f"{request.table}: checking index coverage")
    run.restore_indices()
    if run.committed_versions:  # and the one it left, from the table as its last commit returned it
        layout_figures.said(request.table, request.catalog, run.dataset, "after compaction")
    return run.result_row()
