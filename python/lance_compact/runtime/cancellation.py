"""Whether the statement that started the request served on this thread was cancelled.

The engine serves each request on its own thread and installs a probe there
(:func:`serving`): it asks the JVM (``EngineBridge.cancelled``), which knows when the
statement's thread was interrupted (Thrift's cancel, Spark Connect's interrupt), when any
Spark job of the request was cancelled (by job group, tag, ``cancelAllJobs`` or the UI's kill),
and when its job group, tags or all jobs were cancelled while no job of it ran (its cancel
watch, ``CancelWatch.scala``, sees that in Spark's scheduler with no job of its own). A job
this process sees fail as cancelled first (``spark_job.py``) cancels the statement here
(:func:`cancel`). The orchestration asks :func:`reason` before each batch, before each commit
and between maintenance steps, in every thread of the request.
"""
from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import CANCELLED, CompactionError

_local = threading.local()

# Spark's text for a job it cancelled: "Job 7 cancelled part of cancelled job group g",
# "... as part of cancellation of all jobs", "... because Stage 3 was cancelled", ...
_JOB_CANCELLED = re.compile(r"Job \d+ cancelled\s*([^\n]*)")


class Cancelled(CompactionError):
    """The statement was cancelled; the message says what was committed before."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=CANCELLED)


class Statement:
    """One request's cancel state, shared by every thread that works for it: the JVM's answer
    (``probe``: an interrupt of the statement's thread, a job of it cancelled in any form, or a
    cancel of its group, tags or all jobs, ``CancelWatch.scala``) or a cancel this process saw first
    (:func:`cancel`, where one of its jobs failed as cancelled). Once cancelled, it stays so."""

    def __init__(self, probe: Callable[[], str | None] | None) -> None:
        self._probe = probe
        self._why: str | None = None
        self._from_jvm = False

    def cancel(self, why: str) -> None:
        if self._why is None:
            self._why = why

    def __call__(self) -> str | None:
        # The JVM's reason first: it knows the statement's own cancel ("the statement was
        # interrupted"), which says more than the job failure this process saw.
        if not self._from_jvm and self._probe is not None:
            try:
                said = self._probe() or None
            except Exception:  # the JVM is going away: the request ends with it anyway
                said = None
            if said:
                self._why, self._from_jvm = _phrase(said), True
        return self._why


def _phrase(text: str) -> str:
    """The JVM's reason as the user reads it (Spark's "Job N cancelled ..." reworded)."""
    m = _JOB_CANCELLED.search(text)
    if m is None:
        return text
    why = _why(m.group(1))
    return f"a Spark job of the statement was cancelled{(' (' + why + ')') if why else ''}"


@contextmanager
def serving(probe: Callable[[], str | None] | None) -> Iterator[None]:
    """Within the block, :func:`reason` asks ``probe`` (None or a reason) on this thread; a
    :class:`Statement` (:func:`current_probe` of another thread) is shared as it is."""
    previous = getattr(_local, "probe", None)
    _local.probe = probe if isinstance(probe, Statement) or probe is None else Statement(probe)
    try:
        yield
    finally:
        _local.probe = previous


def current_probe() -> Statement | None:
    """This thread's statement, for work this request hands to other threads (``serving`` there)."""
    return getattr(_local, "probe", None)


def reason() -> str | None:
    """Why the current request was cancelled, or None while it was not."""
    probe = getattr(_local, "probe", None)
    return None if probe is None else probe()


def cancel(why: str) -> None:
    """A job of the current request was seen cancelled: the whole statement is (every thread
    of it stops at its next check)."""
    probe = getattr(_local, "probe", None)
    if probe is not None:
        probe.cancel(why)


def _why(rest: str) -> str:
    return re.split(r"[.]\s|\tat |\s*SQLSTATE:", rest)[0].strip().rstrip(".")


def job_cancelled(text: str) -> str | None:
    """Spark's reason when ``text`` (a failed job's error) says the job was cancelled."""
    m = _JOB_CANCELLED.search(text)
    if m is None:
        return None
    why = _why(m.group(1))
    return f"its Spark job was cancelled{(' (' + why + ')') if why else ''}"
