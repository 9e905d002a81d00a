"""Rewrite: run one Lance compaction task. Runs on an executor."""
from __future__ import annotations

import time
from dataclasses import dataclass

import lance
from lance.optimize import CompactionTask

from ..errors import CompactionError
from ..runtime.tables import open_dataset
from .fragments import name_damage
from ..runtime.failures import CORRUPT


def check_same_pylance(driver_version: str) -> None:
    """Task JSON is not stable across pylance versions: refuse to run a task planned by a
    driver on another pylance than this executor's."""
    if lance.__version__ != driver_version:
        raise CompactionError(
            f"this executor runs pylance {lance.__version__} but the driver planned with "
            f"pylance {driver_version}: run the same Python environment everywhere "
            "(spark.sql.execution.pyspark.python)")


@dataclass(frozen=True)
class TaskOutcome:
    """What an executor sends back to the driver for one task (picklable, JSON inside)."""

    task_id: int
    result_json: str | None
    elapsed_ms: int
    error: str | None = None  # set when the task failed all its attempts (partial progress)


def execute_task(table: str, uri: str, storage_options: dict[str, str],
                 task_id: int, task_json: str) -> TaskOutcome:
    """Execute one serialized ``CompactionTask`` against the version it was planned on."""
    started = time.monotonic()
    task = CompactionTask.from_json(task_json)
    dataset = open_dataset(table, uri, storage_options, version=task.read_version)
    try:
        result = task.execute(dataset)
    except BaseException as e:  # noqa: B036 - Lance's errors and panics; a damaged file is named (file, fragment)
        if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
            raise
        named = name_damage(dataset, [f.id for f in task.fragments], e, storage_options)
        if named is None:
            raise
        raise CompactionError(f"table {table}: {named}", CORRUPT) from None
    return TaskOutcome(task_id, result.json(), int((time.monotonic() - started) * 1000))
