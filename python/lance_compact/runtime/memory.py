"""The engine process's memory over weeks: what it holds is bounded (the Lance session's caches,
runtime/tables.py; commit times, maintenance/version_ages.py), and memory freed after requests
is given back to the operating system.

Lance allocates with the C library's malloc. glibc keeps what a thread frees in that thread's
arena for reuse and returns little of it by itself (measured in maintain_warehouse soaks: 2-3
MiB a minute came back with ``malloc_trim``; 35-40 MiB of a 430-500 MiB engine when tracemalloc
was on as well). One thread here trims once a minute, only after requests were served (a trim
takes up to tens of milliseconds: never on a request's path), and logs what the process holds
against its bounds, so its level over days is visible in the engine's log.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

INTERVAL_S = 60.0


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


def _trimmer() -> Callable[[], None] | None:
    """glibc's ``malloc_trim(0)``, or None on another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class Keeper:
    """Trims freed memory and logs the process's figures, at most once per ``interval`` and
    only after :meth:`served` was called since the last time."""

    def __init__(self, figures: Callable[[], str], interval: float = INTERVAL_S) -> None:
        self._figures = figures
        self._interval = interval
        self._trim = _trimmer()
        self._busy = threading.Event()

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
                log.info("memory: rss %d MiB (%d MiB returned to the system); %s", after >> 20,
                         max(0, before - after) >> 20, self._figures())
            except Exception as e:  # never let this thread end the engine's upkeep silently
                log.warning("memory: upkeep failed: %s", e)
