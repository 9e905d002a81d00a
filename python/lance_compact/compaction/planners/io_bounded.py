"""``io_bounded``: a run reads at most a budget, most valuable work first; the rest is left
for later runs, which converge to the layout ``default`` gives in one run."""
from __future__ import annotations

from typing import Any

import lance
import numpy as np

from ...errors import CompactionError
from .base import Plan, PlannedTask, Planner, lance_plan

BUDGETS = ("max_rewrite_bytes", "max_rewrite_rows", "max_rewrite_fragments")


def benefit(t: PlannedTask) -> float:
    """Fragments a task removes, plus its deleted rows counted in fragments' worth."""
    removed = len(t.fragment_ids) - t.expected_output_fragments
    physical = t.rows + t.deleted_rows
    return removed + (t.deleted_rows / physical * len(t.fragment_ids) if physical else 0.0)


def cost(t: PlannedTask) -> dict[str, int]:
    """What a task spends of each budget."""
    return {"max_rewrite_bytes": t.bytes or 0, "max_rewrite_rows": t.rows + t.deleted_rows,
            "max_rewrite_fragments": len(t.fragment_ids)}


def score(t: PlannedTask) -> float:
    return benefit(t) / max(1, t.bytes or 0)


class IoBoundedPlanner(Planner):
    """Lance's plan, then the tasks with the most benefit per byte read, within the budget
    (``max_rewrite_bytes``, ``max_rewrite_rows``, ``max_rewrite_fragments``; at least one).
    When no task fits whole, the most valuable task's first fragments that fit, planned again
    by Lance (:meth:`_first_part`): every run of a huge table progresses."""

    name = "io_bounded"

    def select(self, dataset: lance.LanceDataset, plan: Plan, options: dict[str, Any]) -> Plan:
        budget = {k: self.settings[k] for k in BUDGETS if self.settings.get(k) is not None}
        if not budget:
            raise CompactionError(
                "strategy io_bounded needs a budget: set max_rewrite_bytes, max_rewrite_rows or "
                "max_rewrite_fragments in options")
        used = dict.fromkeys(BUDGETS, 0)
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
        if plan.tasks and not plan.selected:
            return self._first_part(dataset, plan, options, budget) or plan
        return plan

    def _first_part(self, dataset: lance.LanceDataset, plan: Plan, options: dict[str, Any],
                    budget: dict[str, int]) -> Plan | None:
        """No task fits the budget whole: Lance bins a huge table's small fragments into tasks
        of up to its target's rows (a million fragments of 10 rows: nine tasks of about 111,000
        fragments), and its own ``max_source_*`` limits then plan nothing either. So the most
        valuable task's first fragments that fit (rows and bytes counted per fragment, bytes in
        proportion to rows) are planned again by Lance alone, every other planned fragment
        excluded, halved while the new task still does not fit; the rest of the table waits for
        the next run. None when not even two fragments fit."""
        best = min(plan.tasks, key=lambda t: (-score(t), t.fragment_ids[0]))
        facts = best.source.facts()
        physical = np.cumsum(facts.physical)
        fit = len(facts.ids)
        if "max_rewrite_fragments" in budget:
            fit = min(fit, budget["max_rewrite_fragments"])
        if "max_rewrite_rows" in budget:
            fit = min(fit, int(np.searchsorted(physical, budget["max_rewrite_rows"], side="right")))
        if "max_rewrite_bytes" in budget and best.bytes and len(physical) and physical[-1]:
            fit = min(fit, int(np.searchsorted(physical * (best.bytes / physical[-1]),
                                               budget["max_rewrite_bytes"], side="right")))
        planned = {f for t in plan.tasks for f in t.fragment_ids}
        for _ in range(8):
            if fit < 2:
                return None
            again = lance_plan(dataset, options, planned - set(facts.ids[:fit].tolist()))
            tasks = again.tasks
            # all of them together within the budget (the bytes were estimated from the rows)
            if tasks and all(sum(cost(t)[k] for t in tasks) <= budget[k] for k in budget):
                for t in tasks:
                    t.reason += (f"; chosen: the first {len(t.fragment_ids):,} of a task of {len(facts.ids):,} "
                                 f"fragments over the budget ({', '.join(f'{k} {budget[k]:,}' for k in budget)}), "
                                 "planned again alone; the rest is left for a later run")
                others = [t for t in plan.tasks if t is not best]
                return Plan(again.read_version, tasks + others)
            fit //= 2
        return None
