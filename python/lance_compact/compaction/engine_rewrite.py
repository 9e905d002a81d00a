"""Small batches rewritten in the engine process itself, as pylance's ``compact_files`` does,
instead of as a Spark job (``spark_job.py``).

A Spark job costs a warm CALL about 0.1-0.2 s on top of the rewrite on 2 cores: serializing
the tasks into an RDD, scheduling, a Python worker's round trip (the task JSON in, the result
JSON back through an accumulator), and Lance's uneven tasks (a plan of 207 and 393 fragments
keeps one Spark task busy for 2/3 of the work while pylance runs both with all threads). For
a batch that reads little that is most of the CALL; Lance already uses every core of the
process inside one task. So a batch reading at most
``spark.lance.compact.engineRewrite.maxBatchBytes`` runs here, its tasks against the run's own
dataset (no open per task, no JSON round trip of the results), as many at once as the machine
has cores, as ``compact_files`` runs them.

Where work runs: by default only in local mode (``local``, ``local[N]``), where executors are
threads of the driver's JVM on the same machine anyway (default 256 MiB); on a cluster the
default is 0 (always a Spark job, on executors) and an operator may raise it. Cancel: the
statement's cancel watch (CancelWatch.scala) sees its cancel while no job runs, and the
cancel is asked before each task starts and before the commit; tasks already running finish
(bounded by the size limit) and their files are removed. Test hooks that act on Spark tasks
(``test_fail_task``, ``test_task_sleep_ms``, ...) keep a batch on Spark.
"""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import lance
from lance.optimize import CompactionTask, RewriteResult

from ..errors import CompactionError
from ..runtime import cancellation, driver_conf, hooks
from ..runtime.failures import BUG, CORRUPT, classify, first_part
from ..runtime.secrets import redact
from .execute import TaskOutcome
from .fragments import name_damage
from .orchestrate import Batch, BatchFailure
from .request import CompactionRequest

log = logging.getLogger(__name__)

# The setting and its reader live with the operator's other static settings (index builds read it too).
MAX_BATCH_BYTES, FORMER_MAX_BYTES, LOCAL_DEFAULT = driver_conf.MAX_BATCH_BYTES, driver_conf.FORMER_MAX_BYTES, driver_conf.LOCAL_DEFAULT
is_local, max_batch_bytes = driver_conf.is_local, driver_conf.max_batch_bytes


def fits(request: CompactionRequest, batch: Batch, limit: int) -> bool:
    """Whether ``batch`` runs in the engine: it reads at most ``limit`` bytes (every task's size
    known) and no test hook acts on its Spark tasks."""
    if limit <= 0 or hooks.with_slowdowns(request.hooks):
        return False
    sizes = [row[7] for row in batch.rows]
    return all(s is not None for s in sizes) and sum(sizes) <= limit


# Tasks run side by side, as compact_files runs them (Lance executes a plan's tasks
# concurrently, as many as the machine has cores): one after another, a plan of 207 and 393
# fragments took the sum of its tasks (measured 0.47 s against pylance's 0.39 s on the
# streaming table). The threads are kept (a request's thread alone asks the JVM about cancel).
_WIDTH = max(1, os.cpu_count() or 1)
_POOL = ThreadPoolExecutor(_WIDTH, thread_name_prefix="engine-rewrite")


def _execute(task_json: str, dataset: lance.LanceDataset, attempts: int,
             table: str = "", storage_options: dict[str, str] | None = None
             ) -> tuple[str | None, Exception | None, int]:
    """One task, retried up to ``attempts`` times: (its result JSON, or the last error, a
    damaged file named (file, fragment); ms)."""
    task = CompactionTask.from_json(task_json)
    clock = time.monotonic()
    for attempt in range(attempts):
        try:
            result: RewriteResult = task.execute(dataset)
            return result.json(), None, int((time.monotonic() - clock) * 1000)
        except BaseException as e:  # noqa: B036 - Lance's or the store's: as a Spark task's failure
            panic = type(e).__name__ == "PanicException"
            if not isinstance(e, Exception) and not panic:
                raise
            if attempt + 1 == attempts or panic:
                named = name_damage(dataset, [f.id for f in task.fragments], e, storage_options)
                if named is None and panic:
                    raise  # a panic no damaged file explains: the engine reports it as one
                failure = CompactionError(f"table {table}: {named}", CORRUPT) if named else e
                return None, failure, int((time.monotonic() - clock) * 1000)
    raise AssertionError("unreachable")


def run_in_engine(request: CompactionRequest, batch: Batch, number: int, dataset: lance.LanceDataset,
                  attempts: int) -> tuple[list[TaskOutcome], BatchFailure | None]:
    """Run ``batch``'s tasks here against ``dataset`` (any version of the table: a task checks
    out its own read version), up to the machine's cores at once, started in plan order. The
    same answers as a Spark job's: the outcomes of the tasks that finished (in plan order), and
    a failure when one failed all its ``attempts`` (without partial progress) or the statement
    was cancelled. After either, no task is started and the running ones are waited for, so
    that what they wrote is among the outcomes (and removed by the caller)."""
    waiting = list(enumerate(zip(batch.ids, batch.tasks)))
    running: dict[Future, tuple[int, int]] = {}
    finished: dict[int, TaskOutcome] = {}
    failed: tuple[int, Exception, str] | None = None  # (position, error, its text)
    cancelled: str | None = None
    threads = request.options.get("num_threads")  # Lance's own option bounds compact_files' tasks too
    width = max(1, min(_WIDTH, len(waiting), threads if isinstance(threads, int) and threads > 0 else _WIDTH))
    while waiting or running:
        while waiting and len(running) < width and failed is None and cancelled is None:
            cancelled = cancellation.reason()  # asked before each task starts, on this thread
            if cancelled:
                break
            position, (task_id, task_json) = waiting.pop(0)
            running[_POOL.submit(_execute, task_json, dataset, attempts, request.table,
                                  request.storage_options)] = (position, task_id)
        if not running:
            break
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            position, task_id = running.pop(future)
            result_json, error, elapsed = future.result()
            if error is None:
                finished[position] = TaskOutcome(task_id, result_json, elapsed)
                continue
            text = redact(f"{type(error).__name__}: {error}", request.storage_options)
            if request.run["partial_progress"]:
                finished[position] = TaskOutcome(task_id, None, elapsed, text)
            elif failed is None:
                failed = (position, error, text)
    outcomes = [finished[p] for p in sorted(finished)]
    if cancelled:
        return outcomes, BatchFailure(cancelled, None, cancelled=True, settled=True, stopped=0)
    if failed is not None:
        position, error, text = failed
        return outcomes, BatchFailure(_message(request, error, text, attempts), position)
    log.info("table %s: batch %d: rewritten in the engine process, %d at once; task times %s ms",
             request.table, number, width, [o.elapsed_ms for o in outcomes])
    return outcomes, None


def run_if_small(request: CompactionRequest, batch: Batch, number: int, dataset: lance.LanceDataset | None,
                 limit: int, attempts: int) -> tuple[list[TaskOutcome], BatchFailure | None] | None:
    """The batch run here (:func:`run_in_engine`) when it fits ``limit`` and the run's table is
    at hand; None: the caller runs it as a Spark job."""
    if dataset is None or not fits(request, batch, limit):
        return None
    return run_in_engine(request, batch, number, dataset, attempts)


def _message(request: CompactionRequest, error: Exception, text: str, attempts: int) -> str:
    """A failed task's message, in the words a failed Spark job's has (spark_job.job_failure)."""
    table = request.table
    if isinstance(error, CompactionError):
        return redact(error.message, request.storage_options)
    kind = classify(error)
    what = "" if kind.kind == BUG else f": {kind.phrase}"
    tried = f" failed all its {attempts} attempts" if attempts > 1 else " failed"
    return f"table {table}: a compaction task{tried}{what} ({first_part(text)})"


def engine_settings(sc: Any) -> int:
    """This engine's limit (``driver_conf.engine_limit``: the static conf, read once per SparkContext)."""
    return driver_conf.engine_limit(sc)
