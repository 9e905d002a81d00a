"""The one orchestration of a compaction run, in three phases the JVM drives in order.

1. ``plan``   (driver): validate the request, open the table, plan with the strategy, keep
   the selected tasks as batches (one, or up to max_commits with partial_progress) under
   the run's id; return the first batch's rows.
2. per batch, ``rewrite`` + ``commit``: the batch's tasks become Spark tasks; each executes
   on an executor (``execute_task``); the writer's commit runs once on the driver
   (``commit_run``): an atomic commit, and on a conflicting concurrent change a commit of
   what it left alone plus a re-planned batch for the rest. ``next`` returns the next
   batch's rows, empty when done.
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

from lance.optimize import Compaction, RewriteResult

from . import hooks
from .commit import CommitOutcome, commit_results, remove_new_files
from .errors import CompactionError
from .execute import TaskOutcome
from .options import CompactionRequest, result_columns
from .planners import Plan, as_plan, get_planner
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


def _rows(plan: Plan) -> list[list]:
    return [[i, plan.read_version, t.selected, t.fragment_ids, len(t.fragment_ids), t.rows,
             t.deleted_rows, t.bytes, t.reason, t.expected_output_fragments]
            for i, t in enumerate(plan.tasks)]


def _batches(plan: Plan, groups: int) -> list[dict[str, Any]]:
    """The selected tasks in up to ``groups`` batches of consecutive tasks, each committed
    on its own."""
    rows = [r for r in _rows(plan) if r[2]]
    tasks = [t.task.json() for t in plan.selected]
    n = min(groups, len(tasks))
    bounds = [round(i * len(tasks) / n) for i in range(n + 1)] if n else []
    return [{"read_version": plan.read_version, "tasks": tasks[a:b], "rows": rows[a:b]}
            for a, b in zip(bounds, bounds[1:])]


def plan_run(run_id: str, request_json: str, dry_run: bool = False) -> list[tuple]:
    """Phase 1: plan. A dry run returns a row per task (selected or left for later);
    otherwise the selected tasks are kept as batches and the first batch's rows returned."""
    started = time.time()
    request = CompactionRequest.from_json(request_json)
    planner = get_planner(request.strategy, request.table, request.settings)
    dataset = open_dataset(request.table, request.uri, request.storage_options)
    plan = as_plan(planner.plan(dataset, request.options), dataset, request.options)
    if dry_run:
        return [tuple(r) for r in _rows(plan)]
    RunStore.sweep_stale(started)
    groups = request.run["max_commits"] if request.run["partial_progress"] else 1
    state = {
        "request": request.to_json(),
        "read_version": plan.read_version,
        "started": started,
        "pending": _batches(plan, groups),
        "current": None,
        "tasks_left": len(plan.left),
        "fragments_left": sum(len(t.fragment_ids) for t in plan.left),
        "commits": 0, "retries": 0, "tasks_conflicted": 0, "tasks_failed": 0,
        "totals": {},
    }
    return _advance(RunStore(run_id), state)


def next_batch(run_id: str) -> list[tuple]:
    """Between batches: the next batch's rows (empty when the run is done)."""
    store = RunStore(run_id)
    return _advance(store, _state(store))


def _advance(store: RunStore, state: dict[str, Any]) -> list[tuple]:
    state["current"] = state["pending"].pop(0) if state["pending"] else None
    store.save("state", state)
    return [tuple(r) for r in state["current"]["rows"]] if state["current"] else []


def _state(store: RunStore) -> dict[str, Any]:
    state = store.load("state")
    if state is None:
        raise CompactionError(f"run {store.run_id} has no plan on this driver")
    return state


def rewrite_inputs(run_id: str) -> tuple[CompactionRequest, list[str]]:
    """Phase 2 input: the request and the current batch's tasks (JSON), in task order."""
    state = _state(RunStore(run_id))
    current = state["current"] or {"tasks": []}
    return CompactionRequest.from_json(state["request"]), current["tasks"]


def commit_run(run_id: str, outcomes: list[TaskOutcome]) -> None:
    """Phase 2 end, on the driver: commit the batch's finished tasks atomically; on a
    conflicting concurrent change, commit what it left alone and re-plan the rest."""
    store = RunStore(run_id)
    state = _state(store)
    request = CompactionRequest.from_json(state["request"])
    batch = state["current"]
    if len(outcomes) != len(batch["tasks"]):
        raise CompactionError(
            f"table {request.table}: {len(outcomes)} of {len(batch['tasks'])} tasks reported back; "
            "nothing was committed")
    hooks.before_commit(request)
    results = [RewriteResult.from_json(o.result_json) for o in outcomes if o.error is None]
    state["tasks_failed"] += sum(1 for o in outcomes if o.error is not None)
    outcome = commit_results(request, batch["read_version"], results) if results else CommitOutcome()
    if outcome.metrics:
        state["commits"] += 1
        totals = state["totals"]
        for k, v in outcome.metrics.items():
            totals[k] = v if k == "new_version" else (
                None if v is None or totals.get(k, 0) is None else totals.get(k, 0) + v)
    if outcome.conflicted:
        remove_new_files(request.uri, outcome.conflicted)
        replanned = _replan(request, outcome.conflicted) if state["retries"] < request.run["max_retries"] else None
        if replanned is None:
            state["tasks_conflicted"] += len(outcome.conflicted)
        else:
            state["retries"] += 1
            state["pending"][:0] = _batches(replanned, 1)
    state["current"] = None
    state["ended"] = time.time()
    store.save("state", state)


def _replan(request: CompactionRequest, conflicted: list[RewriteResult]) -> Plan:
    """Lance's plan again, at the latest version, over what is left of the fragments the
    conflicted tasks had (a concurrent delete may have changed or removed them)."""
    dataset = open_dataset(request.table, request.uri, request.storage_options)
    wanted = {f.id for r in conflicted for f in r.original_fragments}
    excluded = {f.fragment_id for f in dataset.get_fragments()} - wanted
    options = dict(request.options)
    options["excluded_fragment_ids"] = sorted(excluded | set(options.get("excluded_fragment_ids", [])))
    return as_plan(Compaction.plan(dataset, options), dataset, request.options)


def abort_run(run_id: str, outcomes: list[TaskOutcome]) -> None:
    """The rewrite failed: nothing is committed; remove what the finished tasks wrote."""
    store = RunStore(run_id)
    state = store.load("state")
    if state is not None:
        request = CompactionRequest.from_json(state["request"])
        remove_new_files(request.uri, [RewriteResult.from_json(o.result_json)
                                       for o in outcomes if o.error is None])
    store.discard()


def result_row(run_id: str) -> tuple:
    """Phase 3: the run's result row, measured; the run's state is then removed."""
    store = RunStore(run_id)
    state = _state(store)
    request = CompactionRequest.from_json(state["request"])
    totals = state["totals"]
    row = {
        "table": request.table,
        "strategy": request.strategy,
        "read_version": state["read_version"],
        "new_version": totals.get("new_version", state["read_version"]),
        "elapsed_ms": int((state.get("ended", time.time()) - state["started"]) * 1000),
    }
    for name in ("tasks_left", "fragments_left", "commits", "retries", "tasks_conflicted",
                 "tasks_failed"):
        row[name] = state[name]
    for name, _ in result_columns():
        row.setdefault(name, totals.get(name, 0))
    store.discard()
    return tuple(row[name] for name, _ in result_columns())
