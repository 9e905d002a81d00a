"""Test-only fault injection, set through the options map (parameters.json ``test_hooks``).

Never needed in production; the tests use them to fail a task attempt, kill its Python
worker, change the table concurrently right before a commit, or kill the driver between
the rewrite and the commit.
"""
from __future__ import annotations

import importlib
import os
import signal
from typing import Any

from .errors import CompactionError


def task_fault(hooks: dict[str, Any], task_id: int, attempt: int) -> None:
    """``test_fail_task = '<task>:<attempt|all>:<raise|kill|kill_executor>'``: fail that task
    attempt (kill ends its Python worker; kill_executor its executor JVM, on a cluster)."""
    spec = hooks.get("test_fail_task")
    if not spec:
        return
    task, when, mode = spec.split(":")
    if int(task) != task_id or (when != "all" and int(when) != attempt):
        return
    if mode == "kill":
        os._exit(137)  # the Python worker dies, as if killed
    if mode == "kill_executor":
        os.kill(_jvm_pid(), signal.SIGKILL)
        os._exit(137)
    raise RuntimeError(f"injected failure of task {task_id}, attempt {attempt}")


def _jvm_pid() -> int:
    """The JVM this Python worker belongs to (the driver, or on a cluster the executor): the
    nearest java ancestor process (Linux)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"java" in f.read().split(b"\0")[0]:
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise CompactionError("test hook: no driver JVM found among this worker's ancestors")


def before_commit(request: Any) -> None:
    """Run the commit hooks of ``request`` (on the driver, before each commit)."""
    name = request.hooks.get("test_before_commit")
    if name:
        module, _, func = name.rpartition(".")
        getattr(importlib.import_module(module), func)(request.uri, request.storage_options)
    if request.hooks.get("test_kill_driver_before_commit"):
        _kill_driver()


def before_carried_commit(request: Any) -> None:
    """On the driver, after deletions were carried over and before that commit."""
    if request.hooks.get("test_kill_driver_before_carried_commit"):
        _kill_driver()


def _kill_driver() -> None:
    os.kill(_jvm_pid(), signal.SIGKILL)
    os._exit(137)  # and this process, which would otherwise go on to commit


def task_sleep(hooks: dict[str, Any], task_id: int) -> None:
    """``test_task_sleep_ms = '<task|all>:<ms>'``: that task (or every one) sleeps first,
    before it writes anything (to cancel a run while it is running)."""
    spec = hooks.get("test_task_sleep_ms")
    if spec:
        task, ms = spec.split(":")
        if task == "all" or int(task) == task_id:
            import time
            time.sleep(int(ms) / 1000)
