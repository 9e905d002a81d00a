"""Whether the statement that started the request served on this thread was cancelled.

The engine serves each request on its own thread and installs a probe there
(:func:`serving`): it asks the JVM (``EngineBridge.cancelled``), which knows when the
statement's thread was interrupted (Thrift's cancel, Spark Connect's interrupt). A cancelled
Spark job of the request (its job group or tags cancelled, the UI's kill, ``cancelAllJobs``)
is seen where the job fails (``spark_job.py``). The orchestration calls :func:`check` before
each batch, before each commit and between maintenance steps.
"""
from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from .errors import CompactionError

_local = threading.local()

# Spark's text for a job it cancelled: "Job 7 cancelled part of cancelled job group g",
# "... as part of cancellation of all jobs", "... because Stage 3 was cancelled", ...
_JOB_CANCELLED = re.compile(r"Job \d+ cancelled\s*([^\n]*)")


class Cancelled(CompactionError):
    """The statement was cancelled; the message says what was committed before."""


@contextmanager
def serving(probe: Callable[[], str | None] | None) -> Iterator[None]:
    """Within the block, :func:`reason` asks ``probe`` (None or a reason) on this thread."""
    previous = getattr(_local, "probe", None)
    _local.probe = probe
    try:
        yield
    finally:
        _local.probe = previous


def current_probe() -> Callable[[], str | None] | None:
    """This thread's probe, for work this request hands to other threads (``serving`` there)."""
    return getattr(_local, "probe", None)


def reason() -> str | None:
    """Why the current request was cancelled, or None while it was not."""
    probe = getattr(_local, "probe", None)
    if probe is None:
        return None
    try:
        return probe() or None
    except Exception:  # the JVM is going away: the request ends with it anyway
        return None


def job_cancelled(text: str) -> str | None:
    """Spark's reason when ``text`` (a failed job's error) says the job was cancelled."""
    m = _JOB_CANCELLED.search(text)
    if m is None:
        return None
    why = re.split(r"[.]\s|\tat |\s*SQLSTATE:", m.group(1))[0].strip().rstrip(".")
    return f"its Spark job was cancelled{(' (' + why + ')') if why else ''}"
