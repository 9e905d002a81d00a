"""``io_bounded``: a run reads at most a budget, most valuable work first; the rest is left
for later runs, which converge to the layout ``default`` gives in one run."""
from __future__ import annotations

from typing import Any

import lance

from ...errors import CompactionError
from .base import Plan, PlannedTask, Planner

BUDGETS = ("max_rewrite_bytes", "max_rewrite_rows", "max_rewrite_fragments")


def benefit(t: PlannedTask) -> float:
    """Fragments a task removes, plus its deleted rows counted in fragments' worth."""
    removed = len(t.fragment_ids) - t.expected_output_fragments
    physical = t.rows + t.deleted_rows
    return removed + (t.deleted_rows / physical * len(t.fragment_ids) if physical else 0.0)


class IoBoundedPlanner(Planner):
    """Lance's plan, then the tasks with the most benefit per byte read, within the budget
    (``max_rewrite_bytes``, ``max_rewrite_rows``, ``max_rewrite_fragments``; at least one)."""

    name = "io_bounded"

    def select(self, dataset: lance.LanceDataset, plan: Plan, options: dict[str, Any]) -> Plan:
        budget = {k: self.settings[k] for k in BUDGETS if self.settings.get(k) is not None}
        if not budget:
            raise CompactionError(
                "strategy io_bounded needs a budget: set max_rewrite_bytes, max_rewrite_rows or "
                "max_rewrite_fragments in options")
        used = dict.fromkeys(BUDGETS, 0)

        def cost(t: PlannedTask) -> dict[str, int]:
            return {"max_rewrite_bytes": t.bytes or 0, "max_rewrite_rows": t.rows + t.deleted_rows,
                    "max_rewrite_fragments": len(t.fragment_ids)}

        def score(t: PlannedTask) -> float:
            return benefit(t) / max(1, t.bytes or 0)

        for t in sorted(plan.tasks, key=lambda t: (-score(t), t.fragment_ids[0])):
            c = cost(t)
            over = [k for k in budget if used[k] + c[k] > budget[k]]
            per_mb = benefit(t) / max(1e-9, (t.bytes or 0) / 1e6)
            if over:
                t.selected = False
                t.reason += (f"; left for a later run: {', '.join(over)} budget "
                             f"({', '.join(f'{used[k] + c[k]:,} > {budget[k]:,}' for k in over)})")
            else:
                for k in used:
                    used[k] += c[k]
                t.reason += f"; chosen: {benefit(t):.1f} fragments' worth, {per_mb:.1f} per MB read"
        return plan
