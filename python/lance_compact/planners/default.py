"""``default``: exactly Lance's own plan."""
from __future__ import annotations

from typing import Any

import lance
from lance.optimize import Compaction, CompactionPlan

from .base import Planner


class DefaultPlanner(Planner):
    """Lance's ``Compaction.plan`` with the given options, unchanged."""

    name = "default"

    def plan(self, dataset: lance.LanceDataset, options: dict[str, Any]) -> CompactionPlan:
        return Compaction.plan(dataset, options)
