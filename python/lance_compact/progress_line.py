"""A live line while a procedure runs, where the caller looks: a notebook cell's output, or a
terminal's stderr.

A CALL runs during ``spark.sql``, so the call itself shows nothing until it returns. Here the
statement runs on a thread of its own (``InheritableThread``: the caller's job group, tags and
pool go with it) under a key set as the local property ``lance_compact.progress``; the engine's
words for it (runtime/progress.py) and the task counts of its running Spark jobs come back from
the JVM (``Progress.line``) every half second:

    lance_compact maintain_warehouse · 14 s · tables 3 of 12 done; db.events: compact (5 of 12 tasks done)

An interrupt of the waiting caller (a notebook's stop button, Ctrl-C) cancels the statement's
Spark work by a job tag of its own, which the catalog's cancel observer takes as the statement's
cancel, and is raised again.

On by default in a notebook kernel (IPython with a kernel), off elsewhere; the session setting
``spark.lance.compact.progress`` (``true``/``false``) decides when set. Needs the JVM in this
process (PySpark Classic): over Spark Connect the statement runs as it is, without the line.
"""
from __future__ import annotations

import sys
import threading
import time
import uuid
from typing import Any, Callable, TypeVar

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


def run(spark: Any, what: str, statement: Callable[[], T]) -> T:
    """``statement()`` (a ``spark.sql`` CALL), drawing its progress line while it runs when
    :func:`wanted`; ``what`` names it on the line ("compact")."""
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None) if not _is_connect(spark) else None
    if jvm is None or not wanted(spark):
        return statement()
    from pyspark.util import InheritableThread

    sc = spark.sparkContext
    key = uuid.uuid4().hex
    tag = f"lance-compact-progress-{key}"
    outcome: dict[str, Any] = {}

    def work() -> None:
        sc.setLocalProperty(KEY_PROPERTY, key)
        sc.addJobTag(tag)
        try:
            outcome["value"] = statement()
        except BaseException as e:  # noqa: B036 - handed to the caller as it is
            outcome["error"] = e
        finally:
            sc.removeJobTag(tag)
            sc.setLocalProperty(KEY_PROPERTY, None)

    thread = InheritableThread(target=work, daemon=True)
    line = _Line()
    started = time.monotonic()
    thread.start()
    try:
        while thread.is_alive():
            thread.join(POLL_SECONDS)
            said = ""
            try:
                said = jvm.io.github.lancecompact.spark.engine.Progress.line(key)
            except Exception:
                pass
            line.show(f"lance_compact {what} · {time.monotonic() - started:.0f} s" + (f" · {said}" if said else ""))
    except KeyboardInterrupt:
        sc.cancelJobsWithTag(tag)  # the statement's cancel (its jobs, and its driver-side work)
        thread.join(30)
        raise
    finally:
        line.close()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _is_connect(spark: Any) -> bool:
    try:
        from pyspark.sql.utils import is_remote

        return bool(is_remote()) or type(spark).__module__.startswith("pyspark.sql.connect")
    except Exception:
        return type(spark).__module__.startswith("pyspark.sql.connect")
