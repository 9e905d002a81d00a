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
import time
from dataclasses import dataclass
from typing import Any, Iterator

import lance
from pyspark import SparkContext, TaskContext
from pyspark.accumulators import AccumulatorParam, _accumulatorRegistry

from . import hooks
from .cancellation import job_cancelled
from .errors import MARKER, CompactionError
from .execute import TaskOutcome, check_same_pylance, execute_task
from .failures import BUG, classify, first_part
from .request import CompactionRequest
from .secrets import redact
from .orchestrate import Batch, BatchFailure

log = logging.getLogger(__name__)


class _Outcomes(AccumulatorParam):
    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, a: list, b: list) -> list:
        a.extend(b)
        return a


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
    sc.setJobDescription("lance_compact: starting Python workers")
    try:
        sc.parallelize(range(n), n).mapPartitions(_imported).count()
    finally:
        sc.setJobDescription(None)


def max_task_attempts(sc: SparkContext) -> int:
    """How many attempts Spark gives a task: local[N] 1, local[N,F] F, else spark.task.maxFailures."""
    master = sc.master.replace(" ", "")
    m = re.fullmatch(r"local\[(?:\d+|\*),(\d+)\]", master)
    if m:
        return int(m.group(1))
    if re.fullmatch(r"local(?:\[(?:\d+|\*)\])?", master):
        return 1
    return int(sc.getConf().get("spark.task.maxFailures", "4"))


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
    if MARKER in text:
        return BatchFailure(text[text.index(MARKER) + len(MARKER):].strip().splitlines()[0].strip(),
                            int(m.group(1)) if m else None)
    after = text[text.index("Traceback"):] if "Traceback" in text else text
    cause = next((f"{e.group(1)}: {e.group(2).strip()}" for e in _PYTHON_ERROR.finditer(after)
                  if not e.group(1).startswith(("org.", "py4j."))), None)
    if cause is None:
        cause = next((line.strip() for line in text.splitlines() if line.strip()), "unknown")
    attempts = f" failed all its {m.group(2)} attempts" if m else " failed"
    kind = classify(cause)
    what = "" if kind.kind == BUG else f": {kind.phrase}"
    return BatchFailure(f"table {table}: a compaction task{attempts}{what} ({first_part(cause)})",
                        int(m.group(1)) if m else None)


def _settle(sc: SparkContext, tag: str | None, timeout: float = 15.0) -> bool:
    """After a job of this request failed or was cancelled: wait (bounded) until none of its
    tasks still runs, so nothing of this run is written after the statement ends. Returns
    whether they all ended."""
    if not tag:
        return True
    tracker = sc._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while True:
        running = 0
        for job in tracker.getJobIdsForTag(tag):
            info = tracker.getJobInfo(job)
            if info.isEmpty():
                continue
            for stage in info.get().stageIds():
                s = tracker.getStageInfo(stage)
                if not s.isEmpty():
                    running += s.get().numActiveTasks()
        if running == 0:
            return True
        if time.monotonic() > deadline:
            log.warning("%d tasks still running %.0f s after their job failed", running, timeout)
            return False
        time.sleep(0.2)


def _request_tag(sc: SparkContext) -> str | None:
    """The job tag the JVM gave this request's jobs (EngineBridge.adopt)."""
    tags = sc.getLocalProperty("spark.job.tags") or ""
    return next((t for t in tags.split(",") if t.startswith("lance-compact-") and "-request-" in t), None)


class SparkBatchRunner:
    """Runs batches on the Spark cluster behind ``sc``."""

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc

    def run(self, request: CompactionRequest, batch: Batch, number: int
            ) -> tuple[list[TaskOutcome], BatchFailure | None]:
        sc = self.sc
        # Largest tasks first, so the last to finish is a small one.
        order = sorted(range(len(batch.ids)), key=lambda i: -(batch.rows[i][7] or 0))
        items = [(batch.ids[i], batch.tasks[i]) for i in order]
        executor = _Executor(request.table, request.uri, request.storage_options, request.hooks,
                             request.run["partial_progress"], max_task_attempts(sc),
                             lance.__version__)
        outcomes = sc.accumulator([], _Outcomes())
        sc.setJobDescription(
            f"lance.compact {request.table}: rewriting {len(items)} tasks planned at version "
            f"{batch.read_version} (batch {number})")
        failure = None
        try:
            sc.parallelize(items, len(items)).mapPartitions(
                lambda rows: executor(outcomes, rows)).count()
        except Exception as e:  # a task failed all its attempts, or the job was cancelled
            failed = job_failure(e, request.table)
            # The partition Spark names is a place in the job's order, not the batch's.
            position = (order[failed.position]
                        if failed.position is not None and failed.position < len(order) else None)
            settled = _settle(sc, _request_tag(sc))
            failure = BatchFailure(failed.message, position, failed.cancelled, settled)
        finally:
            sc.setJobDescription(None)
            _accumulatorRegistry.pop(outcomes.aid, None)
        done = list(outcomes.value)
        log.info("table %s: batch %d: task times %s ms", request.table, number,
                 [o.elapsed_ms for o in sorted(done, key=lambda o: o.task_id)])
        return done, failure
