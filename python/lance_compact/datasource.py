"""The Spark Python data source ``lance_compact``: how the JVM reaches the engine.

Every read or write names an ``action`` and a ``run_id``:

- read ``action=plan`` (+ ``request`` JSON, optional ``dry_run``): plans on the driver,
  returns the first batch's rows (a dry run: every task's);
- read ``action=rewrite``: one partition per task of the current batch, each row carries
  its task;
- write ``action=commit`` (+ ``max_attempts``) of that read: each Spark task executes its
  compaction task on an executor, the commit runs once on the driver;
- read ``action=step`` (+ ``failed_partition`` after a failed batch): the next batch's
  size in ``_next_tasks``, or 0 there and the run's metrics row when it is done;
- read ``action=layout`` / ``action=cleanup`` (+ ``request``): one report row.
"""
from __future__ import annotations

from typing import Callable, Iterator

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceWriter,
                                    InputPartition, WriterCommitMessage)

import lance
from pyspark import TaskContext

from . import hooks, orchestrate
from .errors import CompactionError
from .execute import TaskOutcome, check_same_pylance, execute_task
from .cleanup import cleanup_row
from .layout import layout_row
from .options import result_columns

NAME = "lance_compact"


def _ddl(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{n}` {t}" for n, t in columns)


_SCHEMAS = {
    "plan": _ddl(result_columns("plan_columns")),
    "rewrite": _ddl([("task_id", "int"), ("task", "string")]),
    # Columns starting with "_" are the engine's to the JVM, not the user's.
    "step": _ddl(result_columns() + orchestrate.STEP_COLUMNS),
    "layout": _ddl(result_columns("layout_columns")),
    "cleanup": _ddl(result_columns("cleanup_columns")),
}


def _action(options: dict[str, str], allowed: tuple[str, ...]) -> str:
    action = (options.get("action") or "").lower()
    if action not in allowed:
        raise CompactionError(
            f"data source {NAME}: option action must be one of {', '.join(allowed)}, got {action!r}")
    return action


class RowsPartition(InputPartition):
    """A partition holding its rows (the plan summary or the result)."""

    def __init__(self, rows: list[tuple]) -> None:
        super().__init__(len(rows))
        self.rows = rows


class TaskPartition(InputPartition):
    """One planned compaction task, as JSON."""

    def __init__(self, task_id: int, task_json: str) -> None:
        super().__init__(task_id)
        self.task_id = task_id
        self.task_json = task_json


def _plan(o: dict[str, str]) -> list[tuple]:
    return orchestrate.plan_run(o.get("run_id", ""), o.get("request", ""),
                                (o.get("dry_run") or "false").lower() == "true")


def _step(o: dict[str, str]) -> list[tuple]:
    failed = o.get("failed_partition")
    return [orchestrate.step(o.get("run_id", ""), int(failed) if failed else None)]


def _layout(o: dict[str, str]) -> list[tuple]:
    return [layout_row(o.get("request", ""))]


def _cleanup(o: dict[str, str]) -> list[tuple]:
    return [cleanup_row(o.get("request", ""))]


class _DriverRowsReader(DataSourceReader):
    """Rows computed on the driver (in ``partitions``), handed back in one partition."""

    def __init__(self, compute: Callable[[dict[str, str]], list[tuple]],
                 options: dict[str, str]) -> None:
        self.compute = compute
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        return [RowsPartition(self.compute(self.options))]

    def read(self, partition: RowsPartition) -> Iterator[tuple]:
        yield from partition.rows


class _RewriteReader(DataSourceReader):
    """One partition per task of the current batch; each row carries its task."""

    def __init__(self, options: dict[str, str]) -> None:
        self.run_id = options.get("run_id", "")

    def partitions(self) -> list[InputPartition]:
        _, tasks = orchestrate.rewrite_inputs(self.run_id)
        if not tasks:
            raise CompactionError(f"run {self.run_id}: nothing to rewrite")
        return [TaskPartition(i, t) for i, t in tasks]

    def read(self, partition: TaskPartition) -> Iterator[tuple]:
        yield (partition.task_id, partition.task_json)


_DRIVER_ROWS = {"plan": _plan, "step": _step, "layout": _layout, "cleanup": _cleanup}


class _Outcomes(WriterCommitMessage):
    def __init__(self, outcomes: list[TaskOutcome]) -> None:
        self.outcomes = outcomes


class _CommitWriter(DataSourceWriter):
    """Executes tasks in ``write`` (executors) and commits them in ``commit`` (driver)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.run_id = options.get("run_id", "")
        # Built on the driver, where the plan is; executors get what they need from here.
        request, _ = orchestrate.rewrite_inputs(self.run_id)
        self.table = request.table
        self.uri = request.uri
        self.storage_options = request.storage_options
        self.hooks = request.hooks
        self.partial_progress = request.run["partial_progress"]
        # Spark's task attempts (from the JVM: local[N] has 1, local[N,F] F, clusters
        # spark.task.maxFailures): a task failing its last one is counted, not fatal,
        # under partial progress.
        self.max_attempts = int(options.get("max_attempts") or 1)
        self.pylance = lance.__version__  # the driver's; executors must match it

    def write(self, iterator: Iterator) -> _Outcomes:
        check_same_pylance(self.pylance)
        context = TaskContext.get()
        attempt = context.attemptNumber() if context else 0
        outcomes = []
        for row in iterator:
            try:
                hooks.task_fault(self.hooks, row.task_id, attempt)
                outcomes.append(execute_task(self.table, self.uri, self.storage_options,
                                             row.task_id, row.task))
            except Exception as e:
                if not (self.partial_progress and attempt + 1 >= self.max_attempts):
                    raise
                outcomes.append(TaskOutcome(row.task_id, None, 0, f"{type(e).__name__}: {e}"))
        return _Outcomes(outcomes)

    def commit(self, messages: list[_Outcomes]) -> None:
        orchestrate.commit_run(self.run_id, [o for m in messages if m for o in m.outcomes])

    def abort(self, messages: list[_Outcomes]) -> None:
        # Nothing was committed: remove what finished tasks wrote; drop the run.
        orchestrate.abort_run(self.run_id, [o for m in messages if m for o in m.outcomes])


class LanceCompactDataSource(DataSource):
    """Registered in every Spark 4 session as ``lance_compact`` through ``pyspark_lance_compact``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return _SCHEMAS[_action(self.options, tuple(_SCHEMAS))]

    def reader(self, schema) -> DataSourceReader:
        action = _action(self.options, ("rewrite",) + tuple(_DRIVER_ROWS))
        if action == "rewrite":
            return _RewriteReader(self.options)
        return _DriverRowsReader(_DRIVER_ROWS[action], self.options)

    def writer(self, schema, overwrite: bool) -> DataSourceWriter:
        _action(self.options, ("commit",))
        return _CommitWriter(self.options)
