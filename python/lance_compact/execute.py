"""Rewrite: run one Lance compaction task. Runs on an executor."""
from __future__ import annotations

import time
from dataclasses import dataclass

from lance.optimize import CompactionTask

from .tables import open_dataset


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
    result = task.execute(dataset)
    return TaskOutcome(task_id, result.json(), int((time.monotonic() - started) * 1000))
