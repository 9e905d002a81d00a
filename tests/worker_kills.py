"""Killing the processes that do a statement's work, for the death tests: an executor's Python
worker while its task sleeps (the ``test_task_sleep_ms`` hook marks a sleeping task's worker in
``$LANCE_COMPACT_TEST_STATE/sleeping/<pid>``: runtime/hooks.py), the statement's engine worker."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path


def _sleeping() -> Path:
    return Path(os.environ["LANCE_COMPACT_TEST_STATE"]) / "sleeping"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class TaskWorkerKiller:
    """In the background: SIGKILL the Python worker of each of the next ``count`` sleeping task
    attempts (each a worker not killed before), as they start sleeping; ``killed``: their pids.
    Bounded: gives up after ``timeout`` seconds."""

    def __init__(self, count: int, timeout: float = 120.0) -> None:
        self.count, self.killed = count, []
        folder = _sleeping()
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.iterdir():  # left by workers killed before
            stale.unlink(missing_ok=True)
        self._deadline = time.monotonic() + timeout
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        folder = _sleeping()
        while len(self.killed) < self.count and time.monotonic() < self._deadline:
            for marker in list(folder.iterdir()):
                pid = int(marker.name)
                if pid in self.killed or not _alive(pid):
                    continue
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
                marker.unlink(missing_ok=True)
                break
            time.sleep(0.05)

    def join(self, timeout: float = 30.0) -> list[int]:
        """The pids killed, once done (or the deadline passed)."""
        self._thread.join(timeout)
        return self.killed
