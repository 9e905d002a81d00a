"""The driver's engine pool as tests see it (EnginePool.scala): its workers' pids, which one
serves a statement now."""
from __future__ import annotations

import json
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
