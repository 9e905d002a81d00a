"""What the request served on this thread is doing now, said where people look.

The engine installs a reporter for each request (:func:`serving`); the orchestration calls
:func:`report` at each step ("db.events: batch 2 of 3, rewriting 12 tasks"; "tables 3 of 12
done"). The reporter hands the text to the JVM (``EngineBridge.progress``), which

* shows it in the Spark UI as a job named for the table and step (a job of no tasks, posted
  under the statement's job group and tags), so even work done in the engine process without
  a Spark job (a small rewrite in local mode, a commit, cleanup) is seen there;
* keeps it for the caller that asked (``Progress.scala``): the PySpark API polls it, adds the
  live task counts of the statement's running Spark jobs, and draws a line in a notebook.

A report never fails the work: the JVM may be going away, and progress is only a view.
Reports are cheap (one Py4J call) but not free: say steps, not rows. A warehouse run shows only
each table's first step as a UI job (:class:`PerTable`); the caller's line and the driver's log
get the newest step at most every :data:`COALESCE_S` (a UI step at once).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from .identifiers import escape

log = logging.getLogger(__name__)
_local = threading.local()


class Reporter:
    """One request's progress line, shared by every thread that works for it."""

    def __init__(self, send: Callable[[str, bool], None], figures: Callable[[str], None] | None = None,
                 coalesce: bool = True) -> None:
        """``send(text, ui)``: ``ui`` False keeps the text from the Spark UI's job list;
        ``figures(json)``: the request's measured figures for the Lance tab (:func:`figures`).
        ``coalesce``: a line meant for the caller only (``ui`` False) within
        :data:`COALESCE_S` of the last one sent waits, and only the newest waiting one is sent."""
        self._send = send
        self._figures = figures
        self._coalesce = coalesce
        self._lock = threading.Lock()
        self._sent_at = -1e9  # monotonic time of the last send
        self._waiting: str | None = None  # the newest line not sent yet (coalesced)
        self.last: str | None = None
        # Lines are numbered as they are taken (under _lock) and sent in that order (under
        # _send_lock): a caller-only line taken earlier and sent later (the flusher's, beside a
        # thread's) is dropped, so the caller never sees an older line after a newer one.
        self._taken = 0
        self._delivered = 0
        self._send_lock = threading.Lock()
        # Figures wait up to COALESCE_S and go in one Py4J call (one JSON object a line): a
        # warehouse run says about five a table (layouts, costs, bytes), each a round trip that
        # both processes' CPU paid. The request's end sends what waits (:meth:`flush_figures`).
        self._figures_waiting: list[str] = []
        self._figures_at = -1e9
        self._figures_due = False
        self._figures_lock = threading.Lock()  # batches are sent in the order they were taken

    def __call__(self, text: str, ui: bool = True) -> None:
        text = escape(text)  # a name in it never breaks the line (the driver's log, a job's description)
        with self._lock:
            if text == self.last:
                return
            self.last = text
            now = time.monotonic()
            if self._coalesce and not ui and now - self._sent_at < COALESCE_S:
                first = self._waiting is None
                self._waiting = text
                if first:
                    _FLUSHER.later(self._flush, self._sent_at + COALESCE_S)
                return
            self._waiting = None
            self._sent_at = now
            self._taken += 1
            number = self._taken
        self._deliver(text, ui, number)

    def _deliver(self, text: str, ui: bool, number: int) -> None:
        with self._send_lock:
            if number < self._delivered and not ui:
                return  # a newer line is out already: this one only said less
            # A UI step is always sent: it is a job of the UI's list, and under a warehouse
            # run's parallel lanes two tables' first steps are both current (PerTable shows a
            # table once: a dropped first step would show its second instead).
            self._delivered = max(self._delivered, number)
            try:
                self._send(text, ui)
            except Exception as e:  # a view only: never fails the work
                log.debug("progress not reported: %s", e)

    def _flush(self) -> None:
        """The coalesced line, if no newer one was sent meanwhile (the flusher's thread)."""
        with self._lock:
            text, self._waiting = self._waiting, None
            if text is None:
                return
            self._sent_at = time.monotonic()
            self._taken += 1
            number = self._taken
        self._deliver(text, False, number)


    def figures(self, body: dict) -> None:
        """Hand measured figures to the JVM: at once if none went within :data:`COALESCE_S`,
        else with the next batch (never fails the work)."""
        if self._figures is None:
            return
        try:
            text = json.dumps(body)
        except (TypeError, ValueError) as e:  # a view only
            log.debug("figures not reported: %s", e)
            return
        with self._lock:
            self._figures_waiting.append(text)
            if time.monotonic() - self._figures_at < COALESCE_S:
                if not self._figures_due:
                    self._figures_due = True
                    _FLUSHER.later(self.flush_figures, self._figures_at + COALESCE_S)
                return
        self.flush_figures()

    def flush_figures(self) -> None:
        """Send the figures waiting, if any (the flusher's turn, or the request's end)."""
        if self._figures is None:
            return
        with self._figures_lock:
            with self._lock:
                batch, self._figures_waiting = self._figures_waiting, []
                self._figures_due = False
                if not batch:
                    return
                self._figures_at = time.monotonic()
            try:
                self._figures("\n".join(batch))  # json.dumps writes no raw line break
            except Exception as e:  # a view only
                log.debug("figures not reported: %s", e)


# A warehouse run's tables say about 15 steps each (600 tables' worth of Py4J round trips for
# 60 tables, both processes' CPU); the caller's line needs no more than a few a second.
COALESCE_S = 0.1


class _Flusher:
    """One thread for the process that sends reporters' coalesced lines and figures when their
    turn comes (one thread: Py4J gives each calling thread a connection of its own)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._thread: threading.Thread | None = None
        self._count = 0

    def later(self, send: Callable[[], None], at: float) -> None:
        import heapq
        with self._cond:
            self._count += 1
            heapq.heappush(self._due, (at, self._count, send))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="progress-flusher", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        import heapq
        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._cond.wait(None if not self._due else max(0.0, self._due[0][0] - time.monotonic()))
                _, _, send = heapq.heappop(self._due)
            try:
                send()
            except Exception as e:  # a view only: the flusher goes on for the other requests
                log.debug("progress not reported: %s", e)


_FLUSHER = _Flusher()


class PerTable:
    """A warehouse run's lines: ``parent``'s line with ``prefix()`` before each text ("tables 3
    of 12 done; " before a table's own "db.t: compact"), each table's first step shown in the UI
    (:meth:`table`: the reporter a table's lane serves). Each step as a job of the UI was 5 jobs
    a table, 300 for a run over 60 tables: they pushed the run's real jobs out of the UI's list
    (``spark.ui.retainedJobs``, 1,000) and cost the driver's JVM about 0.2 s of a 1.6 s warm run."""

    def __init__(self, parent: Reporter, prefix: Callable[[], str]) -> None:
        self._parent = parent
        self._prefix = prefix

    def table(self, name: str) -> Reporter:
        """The reporter of table ``name``'s steps: its first line is its UI job. Keyed by the
        table itself, not read from the text (a table's name may hold ': ')."""
        shown = threading.Event()
        parent, prefix = self._parent, self._prefix

        def send(text: str, ui: bool) -> None:
            first = ui and not shown.is_set()
            shown.set()
            parent(prefix() + text, first)

        line = Reporter(send, figures=None, coalesce=False)  # the parent coalesces what it sends
        line.figures = parent.figures  # type: ignore[method-assign]
        return line


@contextmanager
def serving(reporter: Reporter | None) -> Iterator[None]:
    """Within the block, :func:`report` on this thread goes to ``reporter``; a table's thread of
    a warehouse run shares its request's reporter (:func:`current` there)."""
    previous = getattr(_local, "reporter", None)
    _local.reporter = reporter
    try:
        yield
    finally:
        _local.reporter = previous


def current() -> Reporter | None:
    """This thread's reporter, for work the request hands to other threads."""
    return getattr(_local, "reporter", None)


def report(text: str) -> None:
    """Say what the current request is doing now (nothing happens outside a request)."""
    reporter = getattr(_local, "reporter", None)
    if reporter is not None:
        reporter(text)


def figures(body: dict) -> None:
    """Measured figures of the current request for the Lance tab (the JVM's
    ``LanceEngineFigures``): ``{"kind": "progress", "bytes_read", "bytes_written"}`` so far,
    ``{"kind": "cost", ...}`` a maintenance version's cost (cost_records.py), ``{"kind":
    "layout", "table", "row"}`` a table's layout before or after a maintenance. Nothing outside
    a request."""
    reporter = getattr(_local, "reporter", None)
    if reporter is not None:
        reporter.figures(body)
