"""The one orchestration of a compaction run, in three phases the JVM drives in order.

1. ``plan``   (driver): validate the request, open the table, plan with the strategy, keep
   the selected tasks as batches (one, or up to max_commits with partial_progress) under
   the run's id; return the first batch's rows.
2. per batch, ``rewrite`` + ``commit``: the batch's tasks become Spark tasks; each executes
   on an executor (``execute_task``); the writer's commit runs once on the driver
   (``commit_run``): an atomic commit, and on a conflicting concurrent change a commit of
   what it left alone plus a re-planned batch for the rest.
3. ``step`` (driver), after the plan and after each batch: the next batch's size, or, when
   the run is done, the result row (then the run's state is removed).

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


def _rows(plan: Plan, first_id: int = 0) -> list[list]:
    return [[first_id + i, plan.read_version, t.selected, t.fragment_ids, len(t.fragment_ids),
             t.rows, t.deleted_rows, t.bytes, t.reason, t.expected_output_fragments]
            for i, t in enumerate(plan.tasks)]


def _batches(plan: Plan, groups: int, first_id: int = 0) -> list[dict[str, Any]]:
    """The selected tasks in up to ``groups`` batches of consecutive tasks, each committed
    on its own. A task keeps its id (``first_id`` + its place in the plan) for the run."""
    rows = [r for r in _rows(plan, first_id) if r[2]]
    tasks = [t.task.json() for t in plan.selected]
    n = min(groups, len(tasks))
    bounds = [round(i * len(tasks) / n) for i in range(n + 1)] if n else []
    return [{"read_version": plan.read_version, "ids": [r[0] for r in rows[a:b]],
             "tasks": tasks[a:b], "rows": rows[a:b], "carried": []}
            for a, b in zip(bounds, bounds[1:])]


def plan_run(run_id: str, request_json: str, dry_run: bool = False) -> list[tuple]:
    """Phase 1: plan. A dry run returns a row per task (selected or left for later);
    otherwise the selected tasks are kept as batches and the first batch's rows returned."""
    started = time.time()
    request = CompactionRequest.from_json(request_json)
    planner = get_planner(request.strategy, request.table, request.settings)
    dataset = open_dataset(request.table, request.uri, request.storage_options)
    if dataset.count_rows() == 0:
        # Most likely the wrong table (or one a job emptied): say so rather than succeed.
        raise CompactionError(
            f"table {request.table}: the table is empty at version {dataset.version} "
            f"({len(dataset.get_fragments())} fragments, no live rows); nothing to compact")
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
        "next_id": len(plan.tasks),
        "current": None,
        "aborted": None,
        "tasks_left": len(plan.left),
        "fragments_left": sum(len(t.fragment_ids) for t in plan.left),
        "commits": 0, "retries": 0, "tasks_conflicted": 0, "tasks_failed": 0,
        "totals": {},
    }
    return _advance(RunStore(run_id), state)


def next_batch(run_id: str, failed_partition: int | None = None) -> list[tuple]:
    """Between batches: the next batch's rows (empty when the run is done).

    After a failed batch (``abort_run`` kept it under partial progress) the task Spark gave
    up on (``failed_partition``, its place in the batch) is counted as failed, and the
    batch's other unfinished tasks run again with its finished ones carried to their
    commit. Without partial progress the run is gone and this raises.
    """
    store = RunStore(run_id)
    state = _state(store)
    aborted = state.pop("aborted", None)
    if aborted is not None:
        batch = state["current"]
        failed_id = (batch["ids"][failed_partition]
                     if failed_partition is not None and 0 <= failed_partition < len(batch["ids"])
                     else None)
        finished = [o for o in aborted if o["result_json"] is not None]
        reported = {o["task_id"] for o in aborted}
        redo = [i for i, tid in enumerate(batch["ids"]) if tid not in reported and tid != failed_id]
        # Tasks that raised on their last attempt, the one Spark gave up on, and (when that
        # one is not known) every unfinished one count as failed.
        state["tasks_failed"] += len(batch["ids"]) - len(finished) - len(redo)
        again = {k: [batch[k][i] for i in redo] for k in ("ids", "tasks", "rows")}
        again.update(read_version=batch["read_version"], carried=batch["carried"] + finished)
        if redo:
            state["pending"].insert(0, again)
        elif again["carried"]:
            state["current"] = again
            _commit_batch(state, [])
    return _advance(store, state)


def _advance(store: RunStore, state: dict[str, Any]) -> list[tuple]:
    state["current"] = state["pending"].pop(0) if state["pending"] else None
    store.save("state", state)
    return [tuple(r) for r in state["current"]["rows"]] if state["current"] else []


def _state(store: RunStore) -> dict[str, Any]:
    state = store.load("state")
    if state is None:
        raise CompactionError(f"run {store.run_id} has no plan on this driver")
    return state


def rewrite_inputs(run_id: str) -> tuple[CompactionRequest, list[tuple[int, str]]]:
    """Phase 2 input: the request and the current batch's (task id, task JSON), in order."""
    state = _state(RunStore(run_id))
    current = state["current"] or {"ids": [], "tasks": []}
    return CompactionRequest.from_json(state["request"]), list(zip(current["ids"], current["tasks"]))


def commit_run(run_id: str, outcomes: list[TaskOutcome]) -> None:
    """Phase 2 end, on the driver: commit the batch's finished tasks atomically; on a
    conflicting concurrent change, commit what it left alone and re-plan the rest."""
    store = RunStore(run_id)
    state = _state(store)
    _commit_batch(state, outcomes)
    store.save("state", state)


def _commit_batch(state: dict[str, Any], outcomes: list[TaskOutcome]) -> None:
    request = CompactionRequest.from_json(state["request"])
    batch = state["current"]
    if sorted(o.task_id for o in outcomes) != sorted(batch["ids"]):
        raise CompactionError(
            f"table {request.table}: {len(outcomes)} of {len(batch['ids'])} tasks reported back; "
            "nothing was committed")
    hooks.before_commit(request)
    done = [o.result_json for o in outcomes if o.error is None]
    results = [RewriteResult.from_json(j) for j in done + [c["result_json"] for c in batch["carried"]]]
    state["tasks_failed"] += sum(1 for o in outcomes if o.error is not None)
    outcome = commit_results(request, batch["read_version"], results) if results else CommitOutcome()
    if outcome.metrics:
        state["commits"] += 1
        totals = state["totals"]
        for k, v in outcome.metrics.items():
            totals[k] = v if k == "new_version" else (
                None if v is None or totals.get(k, 0) is None else totals.get(k, 0) + v)
    if outcome.conflicted:
        remove_new_files(request, outcome.conflicted)
        replanned = _replan(request, outcome.conflicted) if state["retries"] < request.run["max_retries"] else None
        if replanned is None:
            state["tasks_conflicted"] += len(outcome.conflicted)
        else:
            state["retries"] += 1
            state["pending"][:0] = _batches(replanned, 1, state["next_id"])
            state["next_id"] += len(replanned.tasks)
    state["current"] = None
    state["ended"] = time.time()


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
    """A task of the batch failed all its attempts (its worker died, say). With partial
    progress the finished tasks are kept for ``next_batch``; otherwise nothing is
    committed, what the finished tasks wrote is removed and the run ends."""
    store = RunStore(run_id)
    state = store.load("state")
    if state is None:
        return
    request = CompactionRequest.from_json(state["request"])
    if request.run["partial_progress"] and state["current"]:
        state["aborted"] = [{"task_id": o.task_id, "result_json": o.result_json} for o in outcomes]
        store.save("state", state)
        return
    remove_new_files(request, [RewriteResult.from_json(o.result_json)
                                   for o in outcomes if o.error is None])
    store.discard()


STEP_COLUMNS = [("_next_tasks", "long"), ("_next_read_version", "long")]


def step(run_id: str, failed_partition: int | None = None) -> tuple:
    """After the plan or a batch: hand out the next batch — (None for every result column,
    its task count, its read version) — or, when the run is done, the result row with
    (0, None). One Spark job serves as both 'next batch' and 'result'."""
    rows = next_batch(run_id, failed_partition)
    if rows:
        return (None,) * len(result_columns()) + (len(rows), rows[0][1])
    return result_row(run_id) + (0, None)


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
