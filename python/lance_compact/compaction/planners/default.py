"""``default``: exactly Lance's own plan."""
from __future__ import annotations

from .base import Planner


class DefaultPlanner(Planner):
    """Lance's ``Compaction.plan`` with the given options, every task selected."""

    name = "default"
