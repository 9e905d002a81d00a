"""Finished tasks report what they wrote through an accumulator rather than the job's result:
Spark merges a task's accumulator updates when that task succeeds, so when another task fails
all its attempts the driver still knows what the finished ones wrote. Used by the compaction's
rewrite jobs and the clustering's sort-and-write job."""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

# _accumulatorRegistry: PySpark (4.0-4.3) has no public way to drop an accumulator the driver no
# longer needs; without the pop in drop() the long-lived engine would keep every job's outcomes.
from pyspark.accumulators import AccumulatorParam, _accumulatorRegistry


class _Outcomes(AccumulatorParam):
    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, a: list, b: list) -> list:
        a.extend(b)
        return a


log = logging.getLogger(__name__)


def outcomes_accumulator(sc: Any) -> Any:
    """A list accumulator: a task adds ``[outcome]``, the driver reads ``.value``."""
    return sc.accumulator([], _Outcomes())


def drop(accumulator: Any) -> None:
    """Forget the accumulator on the driver once its job's outcomes are read."""
    _accumulatorRegistry.pop(accumulator.aid, None)


# How often the accumulator is read while a job runs: a worker killed within this much of a
# task's end has not staged that task's files (they are left for cleanup's delete_unverified).
# Reading a local list is cheap; a stage call (a Py4J round trip) follows only new outcomes.
POLL_S = 0.1


class AsTasksFinish:
    """While a job runs, every :data:`POLL_S` in which more of its tasks finished (their outcomes
    reach the driver's accumulator as each task ends): ``stage(outcomes)``, on the statement's
    behalf, says what they wrote to the commit gate (runtime/commit_gate.py), so that if this
    engine worker dies before the job ends the pool removes those files (staged only after the
    job, a worker killed mid-job left its finished tasks' files behind); ``view(outcomes)``
    feeds a view (the Lance tab's bytes so far). Each gets every outcome so far.

    No ``stage`` runs once :meth:`stop` returned (the caller then stages, commits and unstages
    itself: a committed file is never staged again). Outside the engine (no statement) nothing
    is staged."""

    def __init__(self, outcomes: Any, stage: Callable[[list], None] | None,
                 view: Callable[[list], None] | None = None, name: str = "lance-compact-as-tasks-finish") -> None:
        from . import cancellation
        self._lock = threading.Lock()
        self._stopped = False
        self._done = threading.Event()
        statement = cancellation.current_probe()
        if statement is None:  # outside the engine: no pool to tell
            stage = None
        if stage is None and view is None:
            return

        def watch() -> None:
            seen = 0
            while not self._done.wait(POLL_S):
                now = list(outcomes.value)
                if len(now) == seen:
                    continue
                seen = len(now)
                if stage is not None:
                    with self._lock, cancellation.serving(statement):
                        if self._stopped:
                            return
                        try:
                            stage(now)
                        except Exception as e:  # a view of what is staged: the run stages again
                            log.info("staging finished tasks' files failed: %s", e)
                if view is not None:
                    try:
                        view(now)
                    except Exception:  # a view only
                        pass

        threading.Thread(target=watch, name=name, daemon=True).start()

    def stop(self) -> None:
        """No staging from here on (waits for one under way)."""
        self._done.set()
        with self._lock:
            self._stopped = True
