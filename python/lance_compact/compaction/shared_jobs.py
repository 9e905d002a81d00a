"""Rewrite tasks of several tables in shared Spark jobs: a :class:`BatchRunner` for runs
going on side by side (one thread per table, ``warehouse_maintenance.py``).

Each table's run (``orchestrate.Run``) hands its batch to :meth:`SharedJobs.run` and waits;
the thread that owns the Spark context (the engine's request thread, so the caller's job
group and tags apply) packs every batch waiting at that moment into one job
(``spark_job.run_packed``) and hands each run back its own outcomes. A job starts as soon as
every table still in its compaction step is waiting, or ``max_wait`` after the first batch
arrived; batches arriving while a job runs go into the next. Commits, conflict re-plans and
partial progress stay in each table's run, in its own thread, in order.

A cancelled statement starts no further job: once any job of it was cancelled (or the JVM
says the statement was), every batch still waiting is answered "cancelled" without running,
and no table retries a cancelled job.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..runtime import cancellation
from . import engine_rewrite
from .execute import TaskOutcome
from .orchestrate import Batch, BatchFailure
from .request import CompactionRequest

log = logging.getLogger(__name__)

Packed = Callable[[list[tuple[CompactionRequest, Batch, int]]],
                  list[tuple[list[TaskOutcome], BatchFailure | None, bool]]]


@dataclass
class _Waiting:
    request: CompactionRequest
    batch: Batch
    number: int
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple[list[TaskOutcome], BatchFailure | None] | None = None
    retried: bool = False


class SharedJobs:
    """Packs the batches of concurrent runs into shared Spark jobs (``run_packed``); a batch
    small enough for the engine (``in_engine``: the byte limit of ``engine_rewrite.py`` and
    the task attempts) is rewritten there instead, on its table's own thread."""

    def __init__(self, run_packed: Packed, max_wait: float = 0.1,
                 in_engine: tuple[int, int] | None = None) -> None:
        self._run_packed = run_packed
        self._max_wait = max_wait
        self._in_engine = in_engine
        self._cond = threading.Condition()
        self._queue: list[_Waiting] = []
        self._expected = 0
        self.jobs = 0
        self.tasks = 0

    def expect(self) -> None:
        """A table enters its compaction step: it may hand in batches until :meth:`settle`."""
        with self._cond:
            self._expected += 1

    def settle(self) -> None:
        """A table's compaction step ended: no more batches from it."""
        with self._cond:
            self._expected -= 1
            self._cond.notify_all()

    def run(self, request: CompactionRequest, batch: Batch, number: int, dataset: Any = None
            ) -> tuple[list[TaskOutcome], BatchFailure | None]:
        """The BatchRunner call, from a table's thread: rewrite a small batch here against
        ``dataset`` (the run's table), else wait for the shared job that runs it."""
        if self._in_engine is not None:
            here = engine_rewrite.run_if_small(request, batch, number, dataset, *self._in_engine)
            if here is not None:
                return here
        waiting = _Waiting(request, batch, number)
        with self._cond:
            self._queue.append(waiting)
            self._cond.notify_all()
        waiting.done.wait()
        assert waiting.result is not None
        return waiting.result

    def serve(self, finished: threading.Event) -> None:
        """Run shared jobs on this thread until ``finished`` is set and nothing waits."""
        while True:
            with self._cond:
                while not self._queue:
                    if finished.is_set():
                        return
                    self._cond.wait(0.05)
                first = time.monotonic()
                while len(self._queue) < self._expected:
                    left = self._max_wait - (time.monotonic() - first)
                    if left <= 0:
                        break
                    self._cond.wait(left)
                taken, self._queue = self._queue, []
            self._dispatch(taken)

    def _dispatch(self, taken: list[_Waiting]) -> None:
        why = cancellation.reason()  # this (the request's) thread asks the statement
        if why:
            for w in taken:
                w.result = ([], BatchFailure(why, None, cancelled=True))
                w.done.set()
            return
        self.jobs += 1
        self.tasks += sum(len(w.batch.ids) for w in taken)
        try:
            results = self._run_packed([(w.request, w.batch, w.number) for w in taken])
        except Exception as e:  # our bug or the bridge: every table of the job fails, said so
            log.exception("shared rewrite job failed")
            results = [([], BatchFailure(f"table {w.request.table}: the shared rewrite job failed "
                                         f"({type(e).__name__}: {e}); nothing was committed"), False)
                       for w in taken]
        again = []
        for w, (outcomes, failure, innocent) in zip(taken, results):
            if innocent and not w.retried and not outcomes and not (failure and failure.cancelled):
                # Another table's task brought the job down before this table's tasks ran:
                # once more, in the next job.
                w.retried = True
                again.append(w)
                continue
            w.result = (outcomes, failure)
            w.done.set()
        if again:
            with self._cond:
                self._queue[:0] = again
                self._cond.notify_all()
