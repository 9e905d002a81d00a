"""The driver's engine pool as tests see it (EnginePool.scala): its workers' pids, which one
serves a statement now."""
from __future__ import annotations

import json
import os
import time
from typing import Any


def pool(spark: Any) -> Any:
    """The JVM's EnginePool of ``spark``'s SparkContext."""
    return spark._jvm.io.github.lancecompact.spark.engine.EnginePool.of(spark._jsparkSession)


def workers(spark: Any) -> list[dict[str, Any]]:
    """Each worker now: ``{"pid", "leased", "served", "table"}``."""
    return json.loads(pool(spark).workersJson())


def leased_pids(spark: Any) -> list[int]:
    return [w["pid"] for w in workers(spark) if w["leased"]]


def wait_for_leased(spark: Any, count: int = 1, timeout: float = 60.0) -> list[int]:
    """The pids of the workers serving statements, once ``count`` are."""
    deadline = time.monotonic() + timeout
    while True:
        pids = leased_pids(spark)
        if len(pids) >= count:
            return pids
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} leased engine workers expected, saw {workers(spark)}")
        time.sleep(0.05)


def engine_processes(jvm: int) -> list[int]:
    """The engine worker processes (``python -m lance_compact.engine``) the JVM ``jvm`` started,
    read from /proc (a worker still starting included, which the pool does not list yet)."""
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == jvm and b"lance_compact.engine" in cmdline:
            pids.append(int(entry))
    return sorted(pids)
