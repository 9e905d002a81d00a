"""Test-only fault injection, set through the options map (parameters.json ``test_hooks``).

Never needed in production; the tests use them to fail a task attempt, kill its Python
worker, change the table concurrently right before a commit, or kill the driver between
the rewrite and the commit. They exist only in an engine started for tests
(``$LANCE_COMPACT_TEST_HOOKS=1``, :func:`lance_compact.options.hooks_enabled`); otherwise
every ``test_*`` key is an unknown option. Executors get them only inside the request the
engine built.

Two slow-downs apply to every statement of an engine started for tests, for procedures that
take no options map (maintain, maintain_warehouse): ``$LANCE_COMPACT_TEST_TASK_SLEEP_MS``
(each rewrite task sleeps first) and ``$LANCE_COMPACT_TEST_DRIVER_PAUSE_MS`` (the driver
pauses, no Spark job running, before each commit and each maintenance step), taken from the
application's static ``spark.lance.compact.test.taskSleepMs`` / ``driverPauseMs``.
"""
from __future__ import annotations

import errno
import importlib
import os
import signal
from typing import Any

from ..errors import CompactionError
from ..options import hooks_enabled


def task_fault(hooks: dict[str, Any], task_id: int, attempt: int) -> None:
    """``test_fail_task = '<task>:<attempt|all>:<raise|kill|kill_executor|enospc>'``: fail that
    task attempt (kill ends its Python worker; kill_executor its executor JVM, on a cluster;
    enospc raises a full disk's error as Lance raises it)."""
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
    if mode in INJECTED:
        raise INJECTED[mode](f"task {task_id}, attempt {attempt}")
    raise RuntimeError(f"injected failure of task {task_id}, attempt {attempt}")


# Failures as Lance raises them (an OSError with the Rust error's text), by name.
INJECTED = {
    "enospc": lambda where: OSError(errno.ENOSPC, f"LanceError(IO): No space left on device (os error 28) "
                                                  f"(injected at {where})"),
    "quota": lambda where: OSError(f"LanceError(IO): Generic S3 error: Error performing PUT: HTTP status client "
                                   f"error (507 Insufficient Storage) status code: 507 (injected at {where})"),
    "store": lambda where: OSError(f"LanceError(IO): Generic S3 error: Error performing GET: HTTP status server "
                                   f"error (503 Service Unavailable) status code: 503 (injected at {where})"),
}
# Where ``test_fail_at`` can fail a run (the chaos tester's markers).
POINTS = ("sampling", "write", "commit", "record", "index_restore", "index_commit")


def fault_at(request: Any, point: str) -> None:
    """``test_fail_at = '<point>:<enospc|quota|store|kill|module.function>'`` (points:
    :data:`POINTS`): at that moment of a run, on the driver, raise a failure as Lance raises
    it, kill the driver, or call ``module.function(uri, storage_options)`` (a test filling the
    disk, say). ``request``: anything with ``hooks``, ``uri``, ``storage_options``."""
    spec = request.hooks.get("test_fail_at") if hooks_enabled() else None
    if not spec:
        return
    where, _, action = spec.partition(":")
    if where != point:
        return
    if action == "kill":
        _kill_driver()
    if action in INJECTED:
        raise INJECTED[action](f"the {point} point")
    module, _, func = action.rpartition(".")
    getattr(importlib.import_module(module), func)(request.uri, request.storage_options)


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
    if not hooks_enabled():  # never reached: parse_options refuses test_* keys then
        return
    driver_pause()
    name = request.hooks.get("test_before_commit")
    if name:
        module, _, func = name.rpartition(".")
        getattr(importlib.import_module(module), func)(request.uri, request.storage_options)
    if request.hooks.get("test_kill_driver_before_commit"):
        _kill_driver()


# Static Spark settings of an application started for tests -> this engine's slow-downs.
SLOWDOWNS = {"spark.lance.compact.test.taskSleepMs": "LANCE_COMPACT_TEST_TASK_SLEEP_MS",
             "spark.lance.compact.test.driverPauseMs": "LANCE_COMPACT_TEST_DRIVER_PAUSE_MS",
             "spark.lance.compact.test.gateHold": "LANCE_COMPACT_TEST_GATE_HOLD"}


def load_slowdowns(conf: dict[str, str]) -> None:
    """At engine start, with test hooks enabled: the application's test slow-downs (static
    settings, so each test module's Spark application has its own)."""
    for key, env in SLOWDOWNS.items():
        if conf.get(key):
            os.environ[env] = conf[key]


def with_slowdowns(request_hooks: dict[str, Any]) -> dict[str, Any]:
    """The hooks a rewrite task gets: the request's, plus this engine's task slow-down."""
    ms = os.environ.get("LANCE_COMPACT_TEST_TASK_SLEEP_MS") if hooks_enabled() else None
    if ms and not request_hooks.get("test_task_sleep_ms"):
        return {**request_hooks, "test_task_sleep_ms": f"all:{ms}"}
    return request_hooks


def driver_pause() -> bool:
    """``$LANCE_COMPACT_TEST_DRIVER_PAUSE_MS`` in a process started for tests: the driver
    pauses here (before a commit or a maintenance step), with no Spark job of it running.
    Whether it paused."""
    ms = os.environ.get("LANCE_COMPACT_TEST_DRIVER_PAUSE_MS") if hooks_enabled() else None
    if ms:
        import time
        time.sleep(int(ms) / 1000)
    return bool(ms)


def at_gate() -> None:
    """``$LANCE_COMPACT_TEST_GATE_HOLD`` (a folder; the application's static
    ``spark.lance.compact.test.gateHold``) in a process started for tests: every commit or
    deletion step, right before it asks the commit gate (runtime/commit_gate.py), writes
    ``<folder>/at-gate`` and waits (at most 120 s) until the test writes ``<folder>/release``, so a
    cancel lands at a known moment before the gate decides; both files are then removed."""
    folder = os.environ.get("LANCE_COMPACT_TEST_GATE_HOLD") if hooks_enabled() else None
    if folder:
        hold(os.path.join(folder, "at-gate"), os.path.join(folder, "release"))


def hold(marker: str, release: str, seconds: float = 120) -> None:
    """Test-only: write ``marker``, wait (at most ``seconds``) until ``release`` exists, then
    remove both, the marker first: once either is gone the release was taken, and once the
    release is gone the marker there is another hold's. Holds
    on one release take turns (``<release>.lock``, across processes): two steps waiting at once
    would otherwise both see one release, or one remove the marker the other wrote."""
    import fcntl
    import time
    with open(release + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        open(marker, "w").close()
        deadline = time.monotonic() + seconds
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
        for f in (marker, release):
            try:
                os.remove(f)
            except FileNotFoundError:
                pass


def before_carried_commit(request: Any) -> None:
    """On the driver, after deletions were carried over and before that commit."""
    if hooks_enabled() and request.hooks.get("test_kill_driver_before_carried_commit"):
        _kill_driver()


def _kill_driver() -> None:
    os.kill(_jvm_pid(), signal.SIGKILL)
    os._exit(137)  # and this process, which would otherwise go on to commit


def task_sleep(hooks: dict[str, Any], task_id: int) -> None:
    """``test_task_sleep_ms = '<task|all>:<ms>'``: that task (or every one) sleeps first,
    before it writes anything (to cancel a run while it is running)."""
    spec = hooks.get("test_task_sleep_ms") or (
        f"all:{os.environ['LANCE_COMPACT_TEST_TASK_SLEEP_MS']}"
        if hooks_enabled() and os.environ.get("LANCE_COMPACT_TEST_TASK_SLEEP_MS") else None)
    if spec:
        task, ms = spec.split(":")
        if task == "all" or int(task) == task_id:
            import time
            marker = _sleeping_marker()
            try:
                time.sleep(int(ms) / 1000)
            finally:
                if marker and os.path.exists(marker):
                    os.remove(marker)


def _sleeping_marker() -> str | None:
    """A sleeping task's Python worker says so, where the tests' state is
    (``$LANCE_COMPACT_TEST_STATE/sleeping/<pid>``), so a test can kill that very worker
    mid-task (tests/worker_kills.py); None without that folder (no test set it)."""
    state = os.environ.get("LANCE_COMPACT_TEST_STATE") if hooks_enabled() else None
    if not state:
        return None
    folder = os.path.join(state, "sleeping")
    os.makedirs(folder, exist_ok=True)
    marker = os.path.join(folder, str(os.getpid()))
    open(marker, "w").close()
    return marker
