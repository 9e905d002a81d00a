"""Running one Spark job for the request served on this thread: through the engine's bridge
(under the request's job group, tags and pool, so a cancel of the statement reaches it), and,
after a job failed or was cancelled, waiting until none of its tasks still runs. Shared by the
compaction's rewrite jobs (compaction/spark_job.py) and the index builds (indexing/)."""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

# The engine's EngineBridge (engine.main binds it); None elsewhere: jobs run as PySpark runs them.
_bridge: Any = None


def bind_bridge(bridge: Any) -> None:
    """Run this process's Spark jobs through the engine's bridge (:func:`run_job`)."""
    global _bridge
    _bridge = bridge


# The environment of background tasks' Python workers: Spark keys its Python worker pools by
# their environment, so these tasks get worker processes of their own, which lower their CPU
# priority once (:func:`background_priority`) and run nothing else.
BACKGROUND_ENV = "LANCE_COMPACT_BACKGROUND_TASKS"
BACKGROUND_NICE = 10
_environment_lock = threading.Lock()


def run_job(rdd: Any, background: bool = False) -> None:
    """Run ``rdd`` to its end as one Spark job of the request served on this thread (its tasks
    report through accumulators). In the engine through ``EngineBridge.runJob``, on the JVM
    thread paired with this one (under the request's job group, tags and pool). Raises the
    job's failure, as an action does.

    ``background``: heavy work whose cost is not the caller's to wait for (index segments): its
    tasks run in Python workers of their own at a lower CPU priority, so another user's
    statement on the same cores is not held up by it (its tasks call
    :func:`background_priority`)."""
    if not background:
        _run(rdd)
        return
    with _environment_lock:  # the environment is read as the job's Python function is made
        env = rdd.ctx.environment
        env[BACKGROUND_ENV] = str(BACKGROUND_NICE)
        try:
            if _bridge is None:  # (outside the engine: count makes its function here)
                rdd.count()
                return
            rdd._jrdd  # noqa: B018 - made now, with the environment
        finally:
            env.pop(BACKGROUND_ENV, None)
    _run(rdd)


def _run(rdd: Any) -> None:
    if _bridge is None:
        rdd.count()
    else:
        _bridge.runJob(rdd._jrdd)


_lowered = False


def background_priority() -> None:
    """In a background task's Python worker (:func:`run_job` with ``background``): lower every
    thread of this process to nice 10, once (Linux sets niceness per thread; threads made later,
    Lance's among them, inherit it). A process of ordinary work never does: such workers are
    started for background jobs only. Where the system refuses, the task runs as it is."""
    global _lowered
    if _lowered or not os.environ.get(BACKGROUND_ENV):
        return
    _lowered = True
    try:
        nice = int(os.environ[BACKGROUND_ENV])
        for tid in os.listdir("/proc/self/task"):
            os.setpriority(os.PRIO_PROCESS, int(tid), max(nice, os.getpriority(os.PRIO_PROCESS, int(tid))))
    except (OSError, ValueError) as e:
        log.debug("background priority not set: %s", e)


def request_tag(sc: Any) -> str | None:
    """The job tag the JVM gave this request's jobs (EngineBridge.adopt)."""
    tags = sc.getLocalProperty("spark.job.tags") or ""
    return next((t for t in tags.split(",") if t.startswith("lance-compact-") and "-request-" in t), None)


def settle(sc: Any, tag: str | None, timeout: float = 15.0) -> bool:
    """After a job of this request failed or was cancelled: wait (bounded) until none of its
    tasks still runs, so nothing of this run is written after the statement ends. Returns
    whether they all ended."""
    if not tag:
        return True
    tracker = sc._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while True:
        running = 0
        for job in tracker.getJobIdsForTag(tag):
            info = tracker.getJobInfo(job)
            if info.isEmpty():
                continue
            for stage in info.get().stageIds():
                s = tracker.getStageInfo(stage)
                if not s.isEmpty():
                    running += s.get().numActiveTasks()
        if running == 0:
            return True
        if time.monotonic() > deadline:
            log.warning("%d tasks still running %.0f s after their job failed", running, timeout)
            return False
        time.sleep(0.2)
