"""The engine process's memory over weeks: what it holds is bounded (the Lance session's caches,
runtime/tables.py; commit times, maintenance/version_ages.py), and memory freed after requests
is given back to the operating system.

Lance allocates with the C library's malloc. glibc keeps what a thread frees in that thread's
arena for reuse and returns little of it by itself (measured in maintain_warehouse soaks: 2-3
MiB a minute came back with ``malloc_trim``; 35-40 MiB of a 430-500 MiB engine when tracemalloc
was on as well). One thread here trims once a minute, only after requests were served (a trim
takes up to tens of milliseconds: never on a request's path), and logs what the process holds
against its bounds, so its level over days is visible in the engine's log.

glibc also gives each thread that contends for the heap an arena of its own, up to 8 per core,
and freed memory stays in the arena it came from: Lance's runtime threads and the request
threads spread the same churn (manifests read, cached, evicted) over many arenas, each
fragmented on its own, which trimming does not undo. Measured (maintain_warehouse back to back
over 5 tables, 2 MiB caches, 2 shared cores): RSS after the trim rose 4.4 MiB a minute over
minutes 5-9 with glibc's default; with 2 arenas it stayed within 1 MiB. :func:`limit_arenas`
caps them at the engine's start, before its threads are made: at 8, not 2 (issue 42). Two
arenas made Lance's rewrite threads queue for the heap's locks: warm CALLs of the streaming
table took 0.47-0.59 s with 2 against 0.40-0.52 s with 8 (2026-11-28, paired runs); with 8,
four users' workers over an hour (the pool soak, benchmark.md) rose 4-6 MiB an hour each, as
with 2, and back-to-back maintenance held about 35 MiB more free heap after 12 minutes (a worker
is replaced after engine.maxStatements statements or over its ceiling, which bounds it).

What is left after that creeps (4-10 MiB an hour in soaks of hours: the native libraries' C
heap and its fragmentation, not Python's objects), so the engine also has a ceiling: once its
resident set after a trim stays over ``spark.lance.compact.engine.memoryCeiling`` (default: its
Lance caches' bounds plus 1 GiB), it asks the driver to replace it, which happens once no
statement uses it (EngineProcess.scala): a process started anew holds only what it needs.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import sys
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

INTERVAL_S = 60.0
CEILING_SETTING = "spark.lance.compact.engine.memoryCeiling"
INTERVAL_SETTING = "spark.lance.compact.engine.memoryCheckInterval"
# Beyond the caches' bounds: the engine holds about 230 MiB with its libraries loaded; an
# in-engine rewrite or index build takes up to engineRewrite.maxBatchBytes (256 MiB) more.
CEILING_MARGIN = 1 << 30


def rss_bytes(pid: int | str = "self") -> int:
    """A process's resident set, this one's by default (Linux; 0 where /proc is not there or
    the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


ARENAS = 8
# mallopt's M_ARENA_MAX (glibc's malloc.h)
_M_ARENA_MAX = -8


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas for the threads made from now on (call it first, while the
    process has one thread). ``$MALLOC_ARENA_MAX`` in the environment, which glibc reads
    itself, is left to win (the operator's choice). False where it does not apply (another C
    library, or the variable is set)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(_M_ARENA_MAX, arenas) == 1


def _trimmer() -> Callable[[], None] | None:
    """glibc's ``malloc_trim(0)``, or None on another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_bytes() -> tuple[int, int] | None:
    """glibc's heap summed over its arenas: (bytes in use, bytes free but held), or None
    (another C library, or glibc before 2.33). What is free but held is fragmentation once
    the heap was trimmed."""
    try:
        info = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    info.argtypes, info.restype = [], _MallInfo2
    m = info()
    return m.uordblks + m.hblkhd, m.fordblks


class Keeper:
    """Trims freed memory and logs the process's figures, at most once per ``interval`` and
    only after :meth:`served` was called since the last time; :attr:`over` once the resident
    set after a trim exceeds ``ceiling`` bytes (None: no ceiling)."""

    def __init__(self, figures: Callable[[], str], interval: float = INTERVAL_S,
                 ceiling: int | None = None) -> None:
        self._figures = figures
        self._interval = interval
        self._ceiling = ceiling
        self._trim = _trimmer()
        self._busy = threading.Event()
        self.over = False

    def served(self) -> None:
        """A request was served (its memory may be freed now)."""
        self._busy.set()

    def start(self) -> "Keeper":
        threading.Thread(target=self._run, daemon=True, name="memory-keeper").start()
        return self

    def release(self) -> tuple[int, int]:
        """Trim now: (resident bytes before, after)."""
        before = rss_bytes()
        if self._trim is not None:
            self._trim()
        return before, rss_bytes()

    def _run(self) -> None:
        while True:
            self._busy.wait()
            time.sleep(self._interval)
            self._busy.clear()
            try:
                before, after = self.release()
                heap = heap_bytes()
                # Python's own objects beside the C heap: which of the two a slow rise is in
                log.info("memory: rss %d MiB (%d MiB returned to the system%s); Python %d blocks, %d objects; %s",
                         after >> 20, max(0, before - after) >> 20,
                         f"; C heap {heap[0] >> 20} MiB in use, {heap[1] >> 20} MiB free" if heap else "",
                         sys.getallocatedblocks(), len(gc.get_objects()), self._figures())
                if self._ceiling and after > self._ceiling and not self.over:
                    self.over = True
                    log.warning("memory: rss %.1f MiB after trimming is over the engine's ceiling of %.1f MiB (%s): "
                                "the driver replaces this engine once no statement uses it",
                                after / 2**20, self._ceiling / 2**20, CEILING_SETTING)
            except Exception as e:  # never let this thread end the engine's upkeep silently
                log.warning("memory: upkeep failed: %s", e)


def settings(conf: dict[str, str], caches: int) -> tuple[float, int | None]:
    """The keeper's interval (seconds) and ceiling (bytes, None for none) from the driver's
    static settings; ``caches``: the Lance session caches' bounds. A malformed value is said
    in the log and the default kept: an operator's typo must not stop every statement."""
    from ..errors import CompactionError
    from .driver_conf import size_bytes
    from .durations import seconds

    interval, ceiling = INTERVAL_S, caches + CEILING_MARGIN
    if conf.get(INTERVAL_SETTING) is not None:
        try:
            interval = max(1.0, seconds(conf[INTERVAL_SETTING], INTERVAL_SETTING))
        except CompactionError as e:  # it names the forms accepted
            log.error("engine: %s; the default %g s is used", e, INTERVAL_S)
    if conf.get(CEILING_SETTING) is not None:
        try:
            ceiling = size_bytes(CEILING_SETTING, conf[CEILING_SETTING])
        except ValueError as e:
            log.error("engine: %s; the default %d MiB is used", e, ceiling >> 20)
    return interval, (ceiling or None)
