"""A batch of compaction tasks as one Spark job: a partition per task, largest first, each
executed on an executor by ``execute.py``. Runs in the engine process on the driver.

Finished tasks report through an accumulator rather than the job's result: Spark merges a
task's accumulator updates when that task succeeds, so when another task fails all its
attempts the driver still knows what the finished ones wrote (to commit them under partial
progress, or to remove their files).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Iterator

import lance
from pyspark import SparkContext, TaskContext

from ..runtime import hooks
from ..runtime import cancellation, progress
from ..runtime.cancellation import job_cancelled
from ..runtime.driver_conf import max_task_attempts
from ..errors import MARKER, CompactionError
from .execute import TaskOutcome, check_same_pylance, execute_task
from ..runtime.failures import BUG, bug_phrase, classify, first_part, lost
from .request import CompactionRequest
from ..runtime.secrets import redact
from ..runtime.task_outcomes import AsTasksFinish, drop as drop_outcomes, outcomes_accumulator
from ..runtime.spark_jobs import bind_bridge, request_tag, run_job, settle  # noqa: F401 - engine.py binds through here
from .orchestrate import Batch, BatchFailure
from . import engine_rewrite

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Executor:
    """What a Spark task needs to run its compaction task (pickled into the job)."""

    table: str
    uri: str
    storage_options: dict[str, str]
    hooks: dict[str, Any]
    partial_progress: bool
    max_attempts: int
    pylance: str  # the driver's; executors must run the same

    def __call__(self, outcomes: Any, rows: Iterator[tuple[int, str]]) -> Iterator[None]:
        check_same_pylance(self.pylance)
        context = TaskContext.get()
        attempt = context.attemptNumber() if context else 0
        for task_id, task_json in rows:
            try:
                hooks.task_fault(self.hooks, task_id, attempt)
                hooks.task_sleep(self.hooks, task_id)
                outcome = execute_task(self.table, self.uri, self.storage_options, task_id, task_json)
            except Exception as e:
                # Spark logs a failed task's error on the executor and the driver: never a credential.
                text = redact(f"{type(e).__name__}: {e}", self.storage_options)
                if not (self.partial_progress and attempt + 1 >= self.max_attempts):
                    if text == f"{type(e).__name__}: {e}":
                        raise
                    raise CompactionError(text) from None
                outcome = TaskOutcome(task_id, None, 0, text)
            outcomes.add([outcome])
        return iter(())


def _imported(rows: Iterator[Any]) -> Iterator[None]:
    # Unpickling this function imported this module, and with it pylance: nothing else to do.
    return iter(())


def start_workers(sc: SparkContext) -> None:
    """Start a Python worker on the executors' cores, with pylance imported, so the first
    compaction does not wait for it (Spark keeps idle workers for reuse)."""
    n = sc.defaultParallelism
    # A job of its own, never in a statement's group or tags: this thread's JVM side may have
    # inherited a statement's local properties (seen under load: the warm-up ran late, inside a
    # caller's job group, and looked like that statement's rewrite job).
    for key in ("spark.jobGroup.id", "spark.job.tags", "spark.job.interruptOnCancel", "spark.scheduler.pool"):
        sc.setLocalProperty(key, None)
    # the JVM waits for this group's job at exit (StartJobAtExit.scala: the same literal)
    sc.setJobGroup("lance_compact-start-workers", "lance_compact: starting Python workers")
    sc.setJobDescription("lance_compact: starting Python workers")
    try:
        sc.parallelize(range(n), n).mapPartitions(_imported).count()
    finally:
        sc.setJobDescription(None)
        sc.setLocalProperty("spark.jobGroup.id", None)


_GAVE_UP = re.compile(r"Task (\d+) in stage [\d.]+ failed (\d+) times")
_PYTHON_ERROR = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.*)$", re.M)


def job_failure(error: Exception, table: str) -> BatchFailure:
    """What a failed Spark job says, for the user: cancelled (and why), the engine's own
    message if a task raised one, else the task's error named by kind (``failures.py``:
    object store, corrupt file, ...); and the partition Spark gave up on. It does not say
    what was committed: the run adds that."""
    text = str(error)
    cancelled = job_cancelled(text)
    if cancelled:
        return BatchFailure(cancelled, None, cancelled=True)
    m = _GAVE_UP.search(text)
    attempts = f" failed all its {m.group(2)} attempts" if m and m.group(2) != "1" else " failed"
    dead = lost(text)  # its Python worker or its executor, not the task's own error
    if dead is not None:
        return BatchFailure(f"table {table}: a compaction task{attempts}: {dead.phrase} ({dead.detail})",
                            int(m.group(1)) if m else None)
    if MARKER in text:
        return BatchFailure(text[text.index(MARKER) + len(MARKER):].strip().splitlines()[0].strip(),
                            int(m.group(1)) if m else None)
    after = text[text.index("Traceback"):] if "Traceback" in text else text
    cause = next((f"{e.group(1)}: {e.group(2).strip()}" for e in _PYTHON_ERROR.finditer(after)
                  if not e.group(1).startswith(("org.", "py4j."))), None)
    if cause is None:
        cause = next((line.strip() for line in text.splitlines() if line.strip()), "unknown")
    return BatchFailure(f"table {table}: a compaction task{attempts}{task_error_kind(cause)} ({first_part(cause)})",
                        int(m.group(1)) if m else None)


def task_error_kind(cause: str) -> str:
    """": <what kind of failure>" for a task's error (``failures.py``), an unexpected one said as
    such (the caller's error condition is then LANCE_INTERNAL_ERROR, not bad input)."""
    kind = classify(cause, keep=False)
    return f": {bug_phrase()}" if kind.kind == BUG else f": {kind.phrase}"


# Shared with the index builds (runtime/spark_jobs.py); the names this module always had.
_settle = settle
_request_tag = request_tag


class SparkBatchRunner:
    """Runs batches on the Spark cluster behind ``sc``; a batch that reads at most
    ``spark.lance.compact.engineRewrite.maxBatchBytes`` (default: 256 MiB in local mode, 0 on a
    cluster) in the engine process instead (``engine_rewrite.py``)."""

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc
        self.engine_max_bytes = engine_rewrite.engine_settings(sc)  # the static conf: read once

    def run(self, request: CompactionRequest, batch: Batch, number: int,
            dataset: lance.LanceDataset | None = None
            ) -> tuple[list[TaskOutcome], BatchFailure | None]:
        sc = self.sc
        here = engine_rewrite.run_if_small(request, batch, number, dataset, self.engine_max_bytes,
                                           max_task_attempts(sc))
        if here is not None:
            return here
        # Largest tasks first, so the last to finish is a small one.
        order = sorted(range(len(batch.ids)), key=lambda i: -(batch.rows[i][7] or 0))
        items = [(batch.ids[i], batch.tasks[i]) for i in order]
        executor = _Executor(request.table, request.uri, request.storage_options, hooks.with_slowdowns(request.hooks),
                             request.run["partial_progress"], max_task_attempts(sc),
                             lance.__version__)
        outcomes = outcomes_accumulator(sc)
        sc.setJobDescription(
            f"lance.compact {request.table}: rewriting {len(items)} tasks planned at version "
            f"{batch.read_version} (batch {number})")
        failure = None
        finishing = _as_tasks_finish(outcomes, {None: request}, batch.so_far)
        try:
            run_job(sc.parallelize(items, len(items)).mapPartitions(lambda rows: executor(outcomes, rows)))
        except Exception as e:  # a task failed all its attempts, or the job was cancelled
            failed = job_failure(e, request.table)
            # The partition Spark names is a place in the job's order, not the batch's.
            position = (order[failed.position]
                        if failed.position is not None and failed.position < len(order) else None)
            if failed.cancelled:  # a cancelled job cancels the whole statement
                cancellation.cancel(failed.message)
            settled = _settle(sc, _request_tag(sc))
            failure = BatchFailure(failed.message, position, failed.cancelled, settled)
        finally:
            finishing.stop()
            sc.setJobDescription(None)
            drop_outcomes(outcomes)
        done = list(outcomes.value)
        log.info("table %s: batch %d: task times %s ms", request.table, number,
                 [o.elapsed_ms for o in sorted(done, key=lambda o: o.task_id)])
        return done, failure


def _as_tasks_finish(outcomes: Any, requests: dict[int | None, CompactionRequest],
                     so_far: tuple[int, int] | None = None) -> AsTasksFinish:
    """While a batch's Spark job runs (task_outcomes.AsTasksFinish): its finished tasks' files
    staged for their table (orchestrate.stage_outcomes), so a worker that dies mid-job has them
    removed by the pool; with ``so_far`` (the statement's bytes read and written by its earlier
    commits) the bytes so far said to the Lance tab's Running page (progress.figures).
    ``requests``: by the outcome's table index in a packed job (``(k, outcome)``), or
    ``{None: request}``."""
    reporter = progress.current() if so_far is not None else None

    def stage(now: list) -> None:
        from .orchestrate import stage_outcomes
        by_table: dict[int | None, list[TaskOutcome]] = {}
        for item in now:
            k, o = (None, item) if isinstance(item, TaskOutcome) else item
            if o.result_json and k in requests:
                by_table.setdefault(k, []).append(o)
        for k, done in by_table.items():
            stage_outcomes(requests[k], done)

    def view(now: list) -> None:
        from lance.optimize import RewriteResult
        from .commit import result_bytes
        read, written = result_bytes(RewriteResult.from_json(o.result_json) for o in now if o.result_json)
        reporter.figures({"kind": "progress", "bytes_read": so_far[0] + read, "bytes_written": so_far[1] + written})

    return AsTasksFinish(outcomes, stage, view if reporter is not None else None)


class _Tagged:
    """An accumulator seen through one table's eyes: its outcomes are tagged with the
    table's place in a packed job (pickled into the job with the accumulator)."""

    def __init__(self, outcomes: Any, k: int) -> None:
        self.outcomes, self.k = outcomes, k

    def add(self, items: list) -> None:
        self.outcomes.add([(self.k, o) for o in items])


# Tasks reading less than this share a partition with others (at least one partition per
# core): a Spark task costs tens of milliseconds of scheduling and a Python round trip, about
# what rewriting a small table's fragments costs. Bigger tasks get a partition each.
SMALL_TASK_BYTES = 32 << 20


def pack_partitions(sized: list[tuple[int, int, int, str]], cores: int
                    ) -> list[list[tuple[int, int, str]]]:
    """(bytes, table index, task id, task JSON) -> partitions of (table index, task id, task
    JSON): each big task alone, the small ones spread over ``max(cores, total / SMALL_TASK_BYTES)``
    partitions, largest first onto the lightest (so the partitions end together)."""
    ordered = sorted(sized, key=lambda t: -t[0])
    big = [[(k, tid, tj)] for b, k, tid, tj in ordered if b >= SMALL_TASK_BYTES]
    small = [t for t in ordered if t[0] < SMALL_TASK_BYTES]
    if not small:
        return big
    n = min(len(small), max(cores, -(-sum(t[0] for t in small) // SMALL_TASK_BYTES)))
    bins: list[list[tuple[int, int, str]]] = [[] for _ in range(n)]
    loads = [0] * n
    for b, k, tid, tj in small:
        i = loads.index(min(loads))
        bins[i].append((k, tid, tj))
        loads[i] += b or 1
    return big + bins


def run_packed(sc: SparkContext, entries: list[tuple[CompactionRequest, Batch, int]]
               ) -> list[tuple[list[TaskOutcome], BatchFailure | None, bool]]:
    """Batches of several tables' runs as ONE Spark job: every task tagged with its table, a
    partition per big task and small tasks packed together (:func:`pack_partitions`), so many
    small tables cost one job of a few partitions while a big table's tasks still spread over
    every executor.

    A task's error on its last attempt is caught and reported as that table's outcome, so
    one table's failing task fails that table only: a table without partial progress gets
    its BatchFailure (and its finished outcomes, whose files its run removes), one with
    partial progress gets the failed outcome counted. Per entry: (outcomes, failure,
    innocent), ``innocent`` when the whole job failed for another table's task (its run may
    try again)."""
    attempts = max_task_attempts(sc)
    executors = [_Executor(r.table, r.uri, r.storage_options, hooks.with_slowdowns(r.hooks), True, attempts,
                           lance.__version__)
                 for r, _, _ in entries]
    sized = [(entries[k][1].rows[i][7] or 0, k, entries[k][1].ids[i], entries[k][1].tasks[i])
             for k, (_, b, _) in enumerate(entries) for i in range(len(b.ids))]
    parts = pack_partitions(sized, sc.defaultParallelism)
    outcomes = outcomes_accumulator(sc)

    def rewrite(rows: Iterator[list[tuple[int, int, str]]]) -> Iterator[None]:
        for part in rows:
            for k, task_id, task_json in part:
                executors[k](_Tagged(outcomes, k), iter([(task_id, task_json)]))
        return iter(())

    tables = len({r.table for r, _, _ in entries})
    sc.setJobDescription(f"lance.maintain_warehouse: rewriting {len(sized)} tasks of {tables} tables "
                         f"in {len(parts)} partitions")
    failed: BatchFailure | None = None
    owner: int | None = None
    failed_task: int | None = None
    finishing = _as_tasks_finish(outcomes, {k: r for k, (r, _, _) in enumerate(entries)})
    try:
        run_job(sc.parallelize(parts, len(parts)).mapPartitions(rewrite))
    except Exception as e:  # a task failed all its attempts outside Lance (its worker died, say)
        failed = job_failure(e, "(shared job)")
        if failed.cancelled:  # the statement was cancelled: every table of it stops, none retries
            cancellation.cancel(failed.message)
            failed = BatchFailure(failed.message, None, True, _settle(sc, _request_tag(sc)))
        elif failed.position is not None and failed.position < len(parts):
            owners = {k for k, _, _ in parts[failed.position]}
            if len(owners) == 1:  # a partition of one table's tasks: that table's failure
                owner = owners.pop()
                failed_task = parts[failed.position][0][1] if len(parts[failed.position]) == 1 else None
    finally:
        finishing.stop()
        sc.setJobDescription(None)
        drop_outcomes(outcomes)
    by_table: list[list[TaskOutcome]] = [[] for _ in entries]
    for k, o in outcomes.value:
        by_table[k].append(o)
    out = []
    for k, (request, batch, number) in enumerate(entries):
        done = by_table[k]
        if failed is not None and failed.cancelled:
            out.append((done, failed, False))
            continue
        if failed is not None:
            mine = owner == k or owner is None
            position = next((i for i, tid in enumerate(batch.ids) if tid == failed_task), None) \
                if owner == k else None
            message = failed.message.replace("table (shared job)", f"table {request.table}")
            out.append((done, BatchFailure(message, position), not mine))
            continue
        errors = [o for o in done if o.error is not None]
        if errors and not request.run["partial_progress"]:
            out.append(([o for o in done if o.error is None], BatchFailure(
                f"table {request.table}: a compaction task failed{task_error_kind(str(errors[0].error))} "
                f"({first_part(str(errors[0].error))}); nothing was committed"),
                False))
        else:
            out.append((done, None, False))
        log.info("table %s: batch %d: task times %s ms", request.table, number,
                 [o.elapsed_ms for o in sorted(done, key=lambda o: o.task_id)])
    return out
