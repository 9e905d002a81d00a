"""A live line while a procedure runs, where the caller looks: a notebook cell's output, or a
terminal's stderr.

A CALL runs during ``spark.sql``, so the call itself shows nothing until it returns. Every
PySpark API call runs its statement on a runner thread (call_runner.py: the caller's job group,
tags and pool go with it, and an interrupt of the waiting caller -- a notebook's stop button,
Ctrl-C -- cancels the statement and raises its answer as a ``KeyboardInterrupt``). With the line
on, the statement also carries a key set as the local property ``lance_compact.progress``; the
engine's words for it (runtime/progress.py) and the task counts of its running Spark jobs come
back from the JVM (``Progress.line``, asked on another runner thread) every half second:

    lance_compact maintain_warehouse · 14 s · tables 3 of 12 done; db.events: compact (5 of 12 tasks done)

On by default in a notebook kernel (IPython with a kernel), off elsewhere; the session setting
``spark.lance.compact.progress`` (``true``/``false``) decides when set. Needs the JVM in this
process (PySpark Classic): over Spark Connect the statement runs without the line.
"""
from __future__ import annotations

import sys
import time
import uuid
from typing import Any, Callable, TypeVar

from . import call_runner

T = TypeVar("T")

KEY_PROPERTY = "lance_compact.progress"
SETTING = "spark.lance.compact.progress"
POLL_SECONDS = 0.5


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    try:
        return shell is not None and getattr(shell.get_ipython(), "kernel", None) is not None
    except Exception:
        return False


def wanted(spark: Any) -> bool:
    """Whether to draw the line for a call on ``spark`` (see the module's doc)."""
    try:
        setting = spark.conf.get(SETTING, None)
    except Exception:
        setting = None
    if setting is not None and str(setting).strip().lower() in ("true", "false"):
        return str(setting).strip().lower() == "true"
    return _in_notebook()


class _Line:
    """Where the line goes: an updated display in a notebook, a rewritten stderr line on a
    terminal, nowhere else."""

    def __init__(self) -> None:
        self._handle = None
        self._tty = False
        self._width = 0
        if _in_notebook():
            from IPython.display import display

            self._handle = display("", display_id=True)
        else:
            self._tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()

    def show(self, text: str) -> None:
        if self._handle is not None:
            self._handle.update(text)
        elif self._tty:
            sys.stderr.write("\r" + text.ljust(self._width)[:200])
            sys.stderr.flush()
            self._width = max(self._width, len(text))

    def close(self) -> None:
        if self._tty and self._width:
            sys.stderr.write("\r" + " " * min(self._width, 200) + "\r")
            sys.stderr.flush()


def run(spark: Any, what: str, statement: Callable[[], T], table: str | None = None) -> T:
    """``statement()`` (a ``spark.sql`` CALL) on a runner thread (call_runner.py: an interrupt
    cancels it cleanly), drawing its progress line while it runs when :func:`wanted`; ``what``
    names the procedure on the line ("compact"), ``table`` its table in an interrupt's message."""
    named = f"{what} of {table}" if table else what
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None) if not call_runner.is_connect(spark) else None
    if jvm is None or not wanted(spark):
        return call_runner.run(spark, named, statement)
    key = uuid.uuid4().hex

    def waiting(call: call_runner.Call[T]) -> None:
        # The JVM is asked on another thread: this one (a notebook's main thread, where an
        # interrupt lands) waits in Python only, never inside a Py4J call.
        said = [""]

        def poll() -> None:
            while not call.done.wait(POLL_SECONDS):
                try:
                    said[0] = jvm.io.github.lancecompact.spark.engine.Progress.line(key)
                except Exception:
                    pass

        call_runner.background(poll)
        line = _Line()
        started = time.monotonic()
        try:
            while not call.done.wait(POLL_SECONDS):
                line.show(f"lance_compact {what} · {time.monotonic() - started:.0f} s"
                          + (f" · {said[0]}" if said[0] else ""))
        finally:
            line.close()

    return call_runner.run(spark, named, statement, properties={KEY_PROPERTY: key}, waiting=waiting)
