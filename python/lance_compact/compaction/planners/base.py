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
from ..fragment_facts import task_facts


@dataclass
class PlannedTask:
    """A Lance task with what we know about it before running it."""

    task: CompactionTask
    reason: str
    fragment_ids: list[int]
    rows: int
    deleted_rows: int
    bytes: int | None
    expected_output_fragments: int
    selected: bool = True
    json: str | None = None  # the task's JSON, when describing it read it already

    def task_json(self) -> str:
        """What a Spark task receives: the task's JSON (read once)."""
        return self.json if self.json is not None else self.task.json()


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


def describe_all(tasks: list[CompactionTask], dataset: lance.LanceDataset,
                 options: dict[str, Any]) -> list[PlannedTask]:
    """:func:`describe` for every task, with the options Lance applied (read once)."""
    config = dataset.config() or {}
    thresholds = rules.Thresholds.of_compaction(config, options)
    effective_options = {"target_rows_per_fragment": thresholds.target,
                         "materialize_deletions_threshold": thresholds.threshold,
                         "materialize_deletions": effective(config, options, "materialize_deletions")}
    return [describe(t, **effective_options) for t in tasks]


def describe(task: CompactionTask, target_rows_per_fragment: int,
             materialize_deletions_threshold: float, materialize_deletions: bool) -> PlannedTask:
    """Facts about a Lance task from its fragments' metadata, and why Lance planned it."""
    target, threshold = target_rows_per_fragment, materialize_deletions_threshold
    # The task's fragments read from the JSON Lance serialized them in (kept: it is what a
    # Spark task receives); ``task.fragments`` builds a Python object per fragment (1 s per
    # 100,000 fragments).
    text = task.json()
    facts = task_facts(text)
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
    return PlannedTask(task=task, reason="; ".join(parts), fragment_ids=facts.ids.tolist(),
                       rows=live, deleted_rows=int(facts.deleted.sum()), bytes=facts.bytes,
                       # Lance writes a task's live rows as max(1, rows // target) fragments
                       # of even size (seen in pylance 14: 2,400 rows, target 1,000 -> 2 x 1,200).
                       expected_output_fragments=max(1, live // target) if live else 0,
                       json=text)


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
    return Plan(planned.read_version, describe_all(planned.tasks, dataset, options))


def as_plan(result: Plan | CompactionPlan, dataset: lance.LanceDataset,
            options: dict[str, Any]) -> Plan:
    """A user's planner may return Lance's own CompactionPlan."""
    if isinstance(result, Plan):
        return result
    return Plan(result.read_version, describe_all(result.tasks, dataset, options))
