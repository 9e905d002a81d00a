"""The planner interface (seed 004's CompactionPlanner, in Python).

A strategy chooses fragments, filters them, and plans tasks over them. Strategies build on
Lance's own planner (its budgets and ``excluded_fragment_ids``) rather than re-implementing
bin packing, so every task is a real ``lance.optimize.CompactionTask``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import lance
from lance.optimize import CompactionPlan


class Planner(ABC):
    """A compaction planning strategy.

    Subclasses set ``name`` and implement :meth:`plan`; ``settings`` holds the
    strategy-specific settings from the options map, already validated against
    :attr:`settings_spec` (name -> python type).
    """

    name: ClassVar[str]
    settings_spec: ClassVar[dict[str, type]] = {}

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = dict(settings or {})

    def get_fragments(self, dataset: lance.LanceDataset,
                      options: dict[str, Any]) -> list[lance.LanceFragment]:
        """All fragments, in id order (Lance's planner walks them in this order)."""
        return sorted(dataset.get_fragments(), key=lambda f: f.fragment_id)

    def filter_fragments(self, dataset: lance.LanceDataset,
                         fragments: list[lance.LanceFragment],
                         options: dict[str, Any]) -> list[lance.LanceFragment]:
        """No filtering by default."""
        return fragments

    @abstractmethod
    def plan(self, dataset: lance.LanceDataset, options: dict[str, Any]) -> CompactionPlan:
        """Plan tasks for ``dataset`` under Lance ``options``."""
