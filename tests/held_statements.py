"""A SQL statement run on a thread of its own in a job group (as an application's worker thread
runs one), for tests that cancel it, kill its worker or hold it at its commit gate."""
from __future__ import annotations

import threading
import time
from typing import Any


class Statement:
    """``spark.sql(sql).collect()`` on a thread in job group ``group``: its ``rows`` or its
    ``error``, and when it ``ended`` (``time.monotonic()``)."""

    def __init__(self, spark: Any, sql: str, group: str) -> None:
        self.error: BaseException | None = None
        self.rows: list[Any] | None = None
        self.ended: float | None = None

        def body() -> None:
            sc = spark.sparkContext
            sc.setJobGroup(group, "a statement a test stops", interruptOnCancel=False)
            try:
                self.rows = spark.sql(sql).collect()
            except BaseException as e:  # noqa: B036 - asserted by the test
                self.error = e
            finally:
                self.ended = time.monotonic()
                sc.setLocalProperty("spark.jobGroup.id", None)

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 120) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the statement did not end within {timeout} s"
