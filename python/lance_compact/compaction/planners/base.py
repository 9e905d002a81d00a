"""The planner interface (seed 004's CompactionPlanner, in Python).

A strategy chooses fragments (``get_fragments``), filters them (``filter_fragments``) and
plans (``plan``), then may keep only some of the planned tasks (``select``). Planning is
always Lance's own: fragments a strategy filters out reach ``lance.optimize.Compaction.plan``
as ``excluded_fragment_ids``, so every task is a real Lance ``CompactionTask`` and nothing
of Lance's bin packing is re-implemented.
"""
from __future__ import annotations

from abc import ABC
from dataclasses import dataclass, field
from typing import Any, ClassVar

import lance
import numpy as np
from lance.optimize import Compaction, CompactionPlan, CompactionTask

from ...options import OptionSpec, effective, setting_specs, spec
from .. import rules
from ..fragment_facts import TaskFacts, task_facts


class TaskJson:
    """A Lance task's JSON (what a Spark task receives, exactly ``CompactionTask.json()``):
    either the text itself or a span of its plan's JSON, cut only when :meth:`text` is asked
    for (a dry run never does: a task of 100,000 fragments is 24 MB of text)."""

    __slots__ = ("source", "start", "end", "tail")

    def __init__(self, source: str, start: int = 0, end: int | None = None, tail: str | None = None) -> None:
        self.source, self.start, self.tail = source, start, tail
        self.end = len(source) if end is None else end

    def text(self) -> str:
        if self.tail is None:
            return self.source if (self.start, self.end) == (0, len(self.source)) else self.source[self.start:self.end]
        return "".join(('{"task":', self.source[self.start:self.end], self.tail))

    def facts(self) -> TaskFacts:
        """The task's fragments (fragment_facts.task_facts), read in place."""
        return task_facts(self.source, self.start, self.end)


@dataclass
class PlannedTask:
    """A Lance task with what we know about it before running it. ``source`` holds the task's
    JSON; :attr:`task` is the ``CompactionTask`` itself, built from it when first asked for
    (planning never needs the object)."""

    reason: str
    fragment_ids: list[int]
    rows: int
    deleted_rows: int
    bytes: int | None
    expected_output_fragments: int
    source: TaskJson = field(repr=False)
    selected: bool = True
    lance_task: CompactionTask | None = field(default=None, repr=False)

    @property
    def task(self) -> CompactionTask:
        """The Lance ``CompactionTask`` (``execute`` runs it in this process)."""
        if self.lance_task is None:
            self.lance_task = CompactionTask.from_json(self.task_json())
        return self.lance_task

    def task_json(self) -> str:
        """What a Spark task receives: the task's JSON (cut from the plan's on each call)."""
        return self.source.text()

    @property
    def json(self) -> str:
        """The task's JSON (:meth:`task_json`), as a strategy's ``select`` read it before."""
        return self.task_json()


@dataclass
class Plan:
    """A strategy's plan: Lance tasks, each selected to run now or left for later."""

    read_version: int
    tasks: list[PlannedTask] = field(default_factory=list)

    @property
    def selected(self) -> list[PlannedTask]:
        return [t for t in self.tasks if t.selected]

    @property
    def left(self) -> list[PlannedTask]:
        return [t for t in self.tasks if not t.selected]


def describe_all(planned: CompactionPlan, dataset: lance.LanceDataset,
                 options: dict[str, Any]) -> list[PlannedTask]:
    """:func:`describe` for every task of ``planned``, with the options Lance applied (read once)."""
    config = dataset.config() or {}
    thresholds = rules.Thresholds.of_compaction(config, options)
    effective_options = {"target_rows_per_fragment": thresholds.target,
                         "materialize_deletions_threshold": thresholds.threshold,
                         "materialize_deletions": effective(config, options, "materialize_deletions")}
    return [describe(source, **effective_options) for source in task_sources(planned)]


# The plan's JSON is ``{"tasks":[T1,T2,...],"read_version":N,"options":{...}}`` and a task's
# ``{"task":Ti,"read_version":N,"options":{...}}`` (serde's order, pylance 14.0.2); a task body
# is ``{"fragments":[...]}``, and no fragment holds the key "fragments".
_PLAN_HEAD = '{"tasks":['
_BETWEEN_TASKS = ']},{"fragments":['
_PLAN_TAIL = ']}],"read_version":'


def task_sources(planned: CompactionPlan) -> list[TaskJson]:
    """Each task's JSON as a span of the plan's own JSON: ``CompactionPlan.tasks`` copies
    every task's fragments into new objects (0.02 s per 100,000 fragments, as long again to
    free them) and each task's ``json()`` serializes them again. The tasks' own route when the
    plan's text is not as expected."""
    count = planned.num_tasks()
    if count == 0:
        return []
    text = planned.json()
    end = text.rfind(_PLAN_TAIL)
    if not text.startswith(_PLAN_HEAD) or end < 0:
        return [TaskJson(t.json()) for t in planned.tasks]
    tail = text[end + 3:]  # ',"read_version":N,"options":{...}}'
    spans, start = [], len(_PLAN_HEAD)
    while len(spans) < count - 1:
        seam = text.find(_BETWEEN_TASKS, start, end)
        if seam < 0:
            return [TaskJson(t.json()) for t in planned.tasks]
        spans.append((start, seam + 2))  # a body ends with the seam's "]}"
        start = seam + 3  # the next begins at its '{"fragments":['
    if text.find(_BETWEEN_TASKS, start, end) >= 0:
        return [TaskJson(t.json()) for t in planned.tasks]
    spans.append((start, end + 2))
    return [TaskJson(text, a, b, tail) for a, b in spans]


def describe(source: TaskJson, target_rows_per_fragment: int,
             materialize_deletions_threshold: float, materialize_deletions: bool) -> PlannedTask:
    """Facts about a Lance task (its JSON) from its fragments' metadata, and why Lance planned
    it."""
    target, threshold = target_rows_per_fragment, materialize_deletions_threshold
    # The task's fragments read from the JSON (kept: it is what a Spark task receives);
    # ``task.fragments`` builds a Python object per fragment (1 s per 100,000 fragments).
    facts = source.facts()
    live = int(facts.physical.sum() - facts.deleted.sum())
    heavy = 0
    if materialize_deletions and facts.deleted.any():
        physical = np.maximum(facts.physical, 1)
        heavy = int(((facts.physical > 0) & (facts.deleted / physical > threshold)).sum())
    parts = []
    if heavy:
        parts.append(f"materialize deletions in {heavy} fragment(s) over "
                     f"{threshold:g} deleted")
    small = len(facts.ids) - heavy
    if small:
        parts.append(f"merge {small} fragment(s) under {target:,} rows")
    return PlannedTask(reason="; ".join(parts), fragment_ids=facts.ids.tolist(),
                       rows=live, deleted_rows=int(facts.deleted.sum()), bytes=facts.bytes,
                       # Lance writes a task's live rows as max(1, rows // target) fragments
                       # of even size (seen in pylance 14: 2,400 rows, target 1,000 -> 2 x 1,200).
                       expected_output_fragments=max(1, live // target) if live else 0,
                       source=source)


class Planner(ABC):
    """A compaction planning strategy. Subclasses set ``name`` and override what they change.

    ``self.settings`` holds the strategy's settings (parameters.json, ``settings``), already
    validated. A user's own planner may also override :meth:`plan` outright and return a
    Lance ``CompactionPlan``.
    """

    name: ClassVar[str]

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = dict(settings or {})

    @classmethod
    def settings_spec(cls) -> dict[str, OptionSpec]:
        """The settings this strategy takes: those parameters.json lists for its name."""
        names = {o["name"] for o in spec().get("settings", [])
                 if getattr(cls, "name", None) in o["strategies"]}
        return {n: s for n, s in setting_specs().items() if n in names}

    def get_fragments(self, dataset: lance.LanceDataset,
                      options: dict[str, Any]) -> list[lance.LanceFragment]:
        """All fragments, in id order (the order Lance's planner walks)."""
        return sorted(dataset.get_fragments(), key=lambda f: f.fragment_id)

    def filter_fragments(self, dataset: lance.LanceDataset,
                         fragments: list[lance.LanceFragment],
                         options: dict[str, Any]) -> list[lance.LanceFragment]:
        """The fragments this strategy may touch; by default all."""
        return fragments

    def plan(self, dataset: lance.LanceDataset, options: dict[str, Any]) -> Plan | CompactionPlan:
        """Lance's plan over the fragments kept by :meth:`filter_fragments`, then :meth:`select`."""
        excluded: set[int] = set()
        if (type(self).get_fragments is not Planner.get_fragments
                or type(self).filter_fragments is not Planner.filter_fragments):
            # Listing fragments costs Python objects per fragment (0.1 s per 50,000): only
            # when the strategy chooses among them.
            every = self.get_fragments(dataset, options)
            kept = {f.fragment_id for f in self.filter_fragments(dataset, every, options)}
            excluded = {f.fragment_id for f in every} - kept
        return self.select(dataset, lance_plan(dataset, options, excluded), options)

    def select(self, dataset: lance.LanceDataset, plan: Plan, options: dict[str, Any]) -> Plan:
        """Which planned tasks run now; by default all."""
        return plan


def lance_plan(dataset: lance.LanceDataset, options: dict[str, Any], excluded: set[int]) -> Plan:
    """Lance's own plan with ``options``, ``excluded`` fragments (and those the options exclude)
    left out, each task described."""
    lance_options = dict(options)
    if excluded:
        lance_options["excluded_fragment_ids"] = sorted(excluded | set(options.get("excluded_fragment_ids") or []))
    planned = Compaction.plan(dataset, lance_options)
    return Plan(planned.read_version, describe_all(planned, dataset, options))


def as_plan(result: Plan | CompactionPlan, dataset: lance.LanceDataset,
            options: dict[str, Any]) -> Plan:
    """A user's planner may return Lance's own CompactionPlan."""
    if isinstance(result, Plan):
        return result
    return Plan(result.read_version, describe_all(result, dataset, options))
