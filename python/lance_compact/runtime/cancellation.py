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
import time
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


class Gate:
    """The JVM's side of a request's commits (``EngineBridge.beginCommit``/``endCommit``/``staged``):
    a commit begins only if no cancel was recorded, atomically with the cancel, so nothing
    commits after a cancel, and the worker is not killed for a cancel while a commit begun
    before it is under way."""

    def __init__(self, bridge: object, request_id: str) -> None:
        self._bridge = bridge
        self._id = request_id

    def begin(self, what: str) -> str | None:
        """None: the commit may go ahead; else why it may not (the statement's cancel)."""
        try:
            return self._bridge.beginCommit(self._id, what) or None
        except Exception as e:  # the JVM is gone or unreachable: commit nothing for nobody
            return f"the driver could not be asked whether the statement was cancelled ({type(e).__name__})"

    def end(self, landed: str) -> None:
        try:
            self._bridge.endCommit(self._id, landed)
        except Exception:  # the JVM is going away: nothing waits for this answer
            pass

    def cancel(self, why: str) -> None:
        """Cancel the request itself (it ran past a bound of its own): its Spark jobs stop, no
        commit of it begins, and a worker that does not answer within the grace is killed."""
        try:
            self._bridge.cancel(self._id, why)
        except Exception:  # the JVM is gone: nothing of this request commits anyway
            pass

    def staged(self, uri: str, paths_json: str) -> None:
        try:
            self._bridge.staged(self._id, uri, paths_json)
        except Exception:
            pass


class Statement:
    """One request's cancel state, shared by every thread that works for it: the JVM's answer
    (``probe``: an interrupt of the statement's thread, a job of it cancelled in any form, or a
    cancel of its group, tags or all jobs, ``CancelWatch.scala``) or a cancel this process saw first
    (:func:`cancel`, where one of its jobs failed as cancelled). Once cancelled, it stays so.
    ``gate`` (in the engine) orders its commits with its cancel (:func:`committing`)."""

    # How long a "not cancelled" answer of the JVM stands before it is asked again, in the
    # engine (a gate: the probe is a Py4J round trip). Every thread of a request checks before
    # each step (a warehouse run over 60 tables: about 600 checks, each costing both processes
    # CPU); a cancel is still seen within this much, and a commit never relies on it (the gate
    # asks the JVM itself, atomically with the cancel).
    PROBE_INTERVAL_S = 0.05

    def __init__(self, probe: Callable[[], str | None] | None, gate: Gate | None = None) -> None:
        self._probe = probe
        self._why: str | None = None
        self._from_jvm = False
        self._asked = -1e9  # monotonic time of the JVM's last "not cancelled"
        self._interval = self.PROBE_INTERVAL_S if gate is not None else 0.0
        self.gate = gate

    def cancel(self, why: str) -> None:
        if self._why is None:
            self._why = why

    def __call__(self) -> str | None:
        # The JVM's reason first: it knows the statement's own cancel ("the statement was
        # interrupted"), which says more than the job failure this process saw.
        if not self._from_jvm and self._probe is not None:
            now = time.monotonic()
            # A cancel this process saw (a job of it failed as cancelled) asks the JVM at once:
            # when the JVM cancelled the request's jobs for the caller's cancel, the job's text
            # names the request's own tag, and the caller's form (its job group, ...) is the JVM's.
            if self._why is None and now - self._asked < self._interval:
                return None
            try:
                said = self._probe() or None
            except Exception:  # the JVM is going away: the request ends with it anyway
                said = None
            if said:
                self._why, self._from_jvm = _phrase(said), True
            else:
                self._asked = now
        return self._why


def _phrase(text: str) -> str:
    """The JVM's reason as the user reads it (Spark's "Job N cancelled ..." reworded)."""
    m = _JOB_CANCELLED.search(text)
    if m is None:
        return text
    why = _why(m.group(1))
    return f"a Spark job of the statement was cancelled{(' (' + why + ')') if why else ''}"


@contextmanager
def serving(probe: Callable[[], str | None] | None, gate: Gate | None = None) -> Iterator[None]:
    """Within the block, :func:`reason` asks ``probe`` (None or a reason) on this thread; a
    :class:`Statement` (:func:`current_probe` of another thread) is shared as it is. ``gate``:
    the JVM's commit gate of the request (the engine's requests have one)."""
    previous = getattr(_local, "probe", None)
    _local.probe = probe if isinstance(probe, Statement) or probe is None else Statement(probe, gate)
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


@contextmanager
def committing(what: str, cancelled: Callable[[str], BaseException]) -> Iterator[Callable[[str], None]]:
    """The block commits (or deletes files) for the current request: it runs only if the
    statement was not cancelled, decided with the JVM atomically with a cancel (``Gate``); a
    cancel recorded first raises ``cancelled(why)`` and the block does not run. Inside, call the
    yielded ``landed(text)`` with what the commit landed ("version 12"): a caller that cancels
    or loses the worker afterwards is told so. Outside the engine (no gate) only
    :func:`reason` is asked."""
    probe = getattr(_local, "probe", None)
    gate = probe.gate if isinstance(probe, Statement) else None
    why = reason()
    if why is None and gate is not None:
        why = gate.begin(what)
        if why is not None and isinstance(probe, Statement):
            probe.cancel(why)
    if why is not None:
        raise cancelled(why)
    said: list[str] = []
    try:
        yield said.append
    finally:
        if gate is not None:
            gate.end("; ".join(said))


def staged(uri: str, paths: list[str]) -> None:
    """The current request wrote ``paths`` (relative to table location ``uri``) and has not
    committed them (an empty list: none any more): if its worker dies or is killed, the pool
    removes them (``discard_staged``)."""
    import json

    probe = getattr(_local, "probe", None)
    gate = probe.gate if isinstance(probe, Statement) else None
    if gate is not None:
        gate.staged(uri, json.dumps(sorted(paths)))


def cancel(why: str) -> None:
    """A job of the current request was seen cancelled: the whole statement is (every thread
    of it stops at its next check)."""
    probe = getattr(_local, "probe", None)
    if probe is not None:
        probe.cancel(why)


def cancel_statement(why: str) -> None:
    """The current request cancels its own statement (a time limit it ran past): as a cancel
    from its caller, also in the JVM (:meth:`Gate.cancel`)."""
    probe = getattr(_local, "probe", None)
    if isinstance(probe, Statement):
        probe.cancel(why)
        if probe.gate is not None:
            probe.gate.cancel(why)


def _why(rest: str) -> str:
    return re.split(r"[.]\s|\tat |\s*SQLSTATE:", rest)[0].strip().rstrip(".")


def job_cancelled(text: str) -> str | None:
    """Spark's reason when ``text`` (a failed job's error) says the job was cancelled."""
    m = _JOB_CANCELLED.search(text)
    if m is None:
        return None
    why = _why(m.group(1))
    return f"its Spark job was cancelled{(' (' + why + ')') if why else ''}"
