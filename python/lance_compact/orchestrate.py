"""The one orchestration of a compaction run, in three phases the JVM drives in order.

1. ``plan``   (driver): validate the request, open the table, plan with the strategy, keep
   the plan under the run's id, return one summary row per task.
2. ``rewrite`` + ``commit``: the planned tasks become Spark tasks; each executes on an
   executor (``execute_task``); the writer's commit runs once on the driver
   (``commit_run``) and keeps the measured result under the run's id.
3. ``result`` (driver): the result row, then the run's state is removed.

Both the CALL procedure and the PySpark API go through these phases: the PySpark API
issues the CALL. A run's state lives in a driver-local folder because every phase that
reads or writes it runs in a Python worker on the driver; executors get all they need
inside their Spark task.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from lance.optimize import RewriteResult

from .commit import commit_results
from .errors import CompactionError
from .execute import TaskOutcome
from .options import CompactionRequest, result_columns
from .planners import as_plan, get_planner
from .tables import open_dataset

RUNS_DIR = Path(tempfile.gettempdir()) / "lance-compact-runs"
STALE_RUN_SECONDS = 24 * 3600
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


class RunStore:
    """Driver-local state of one run: the plan, then the result."""

    def __init__(self, run_id: str) -> None:
        if not _RUN_ID.match(run_id or ""):
            raise CompactionError(f"invalid run id {run_id!r}")
        self.run_id = run_id
        self.path = RUNS_DIR / run_id

    def save(self, name: str, value: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{name}.json.tmp"
        tmp.write_text(json.dumps(value))
        os.replace(tmp, self.path / f"{name}.json")

    def load(self, name: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.path / f"{name}.json").read_text())
        except FileNotFoundError:
            return None

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    @staticmethod
    def sweep_stale(now: float) -> None:
        """Remove state left by runs that died (a driver killed mid-run)."""
        if not RUNS_DIR.exists():
            return
        for entry in RUNS_DIR.iterdir():
            try:
                if now - entry.stat().st_mtime > STALE_RUN_SECONDS:
                    shutil.rmtree(entry, ignore_errors=True)
            except FileNotFoundError:
                pass


def plan_run(run_id: str, request_json: str, dry_run: bool = False) -> list[tuple]:
    """Phase 1: plan; keep the selected tasks for phase 2 unless ``dry_run``; a row per task
    (selected or left for later), in the columns of parameters.json's ``plan_columns``."""
    started = time.time()
    request = CompactionRequest.from_json(request_json)
    planner = get_planner(request.strategy, request.table, request.settings)
    dataset = open_dataset(request.table, request.uri, request.storage_options)
    plan = as_plan(planner.plan(dataset, request.options), dataset, request.options)
    rows = [(i, plan.read_version, t.selected, t.fragment_ids, len(t.fragment_ids), t.rows,
             t.deleted_rows, t.bytes, t.reason, t.expected_output_fragments)
            for i, t in enumerate(plan.tasks)]
    if not dry_run:
        RunStore.sweep_stale(started)
        RunStore(run_id).save("plan", {
            "request": request.to_json(),
            "read_version": plan.read_version,
            "tasks": [t.task.json() for t in plan.selected],
            "tasks_left": len(plan.left),
            "fragments_left": sum(len(t.fragment_ids) for t in plan.left),
            "started": started,
        })
        # Only what runs now goes on to the rewrite.
        rows = [r for r in rows if r[2]]
    return rows


def _planned(run_id: str) -> dict[str, Any]:
    plan = RunStore(run_id).load("plan")
    if plan is None:
        raise CompactionError(f"run {run_id} has no plan on this driver")
    return plan


def rewrite_inputs(run_id: str) -> tuple[CompactionRequest, list[str]]:
    """Phase 2 input: the request and the planned tasks' JSON, in task order."""
    plan = _planned(run_id)
    return CompactionRequest.from_json(plan["request"]), plan["tasks"]


def commit_run(run_id: str, outcomes: list[TaskOutcome]) -> None:
    """Phase 2 end, on the driver: commit every finished task atomically, keep the result."""
    store = RunStore(run_id)
    plan = _planned(run_id)
    request = CompactionRequest.from_json(plan["request"])
    outcomes = sorted(outcomes, key=lambda o: o.task_id)
    if len(outcomes) != len(plan["tasks"]):
        raise CompactionError(
            f"table {request.table}: {len(outcomes)} of {len(plan['tasks'])} tasks reported back; "
            "nothing was committed")
    results = [RewriteResult.from_json(o.result_json) for o in outcomes]
    metrics = commit_results(request, plan["read_version"], results) if results else {}
    store.save("result", {**metrics, "committed": time.time()})


def result_row(run_id: str) -> tuple:
    """Phase 3: the run's result row, measured; the run's state is then removed."""
    store = RunStore(run_id)
    plan = _planned(run_id)
    request = CompactionRequest.from_json(plan["request"])
    result = store.load("result")
    if result is None and plan["tasks"]:
        raise CompactionError(f"table {request.table}: run {run_id} has no committed result")
    result = result or {}
    ended = result.get("committed", time.time())
    row = {
        "table": request.table,
        "strategy": request.strategy,
        "tasks_left": plan.get("tasks_left", 0),
        "fragments_left": plan.get("fragments_left", 0),
        "read_version": plan["read_version"],
        "new_version": result.get("new_version", plan["read_version"]),
        "elapsed_ms": int((ended - plan["started"]) * 1000),
    }
    for name, _ in result_columns():
        row.setdefault(name, result.get(name, 0))
    store.discard()
    return tuple(row[name] for name, _ in result_columns())
