"""Running one Spark job for the request served on this thread: through the engine's bridge
(under the request's job group, tags and pool, so a cancel of the statement reaches it), and,
after a job failed or was cancelled, waiting until none of its tasks still runs. Shared by the
compaction's rewrite jobs (compaction/spark_job.py) and the index builds (indexing/)."""
from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)

# The engine's EngineBridge (engine.main binds it); None elsewhere: jobs run as PySpark runs them.
_bridge: Any = None


def bind_bridge(bridge: Any) -> None:
    """Run this process's Spark jobs through the engine's bridge (:func:`run_job`)."""
    global _bridge
    _bridge = bridge


def run_job(rdd: Any) -> None:
    """Run ``rdd`` to its end as one Spark job of the request served on this thread (its tasks
    report through accumulators). In the engine through ``EngineBridge.runJob``, on the JVM
    thread paired with this one (under the request's job group, tags and pool). Raises the
    job's failure, as an action does."""
    if _bridge is None:
        rdd.count()
    else:
        _bridge.runJob(rdd._jrdd)


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
