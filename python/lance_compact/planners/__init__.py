"""Planning strategies. Adding one: a module here and one line in ``STRATEGIES`` (and its
settings, if any, in parameters.json)."""
from __future__ import annotations

import importlib

from ..errors import CompactionError
from .base import Plan, PlannedTask, Planner, as_plan
from .default import DefaultPlanner
from .deletion_only import DeletionOnlyPlanner
from .incremental import IncrementalPlanner
from .io_bounded import IoBoundedPlanner

STRATEGIES: dict[str, type[Planner]] = {
    DefaultPlanner.name: DefaultPlanner,
    IoBoundedPlanner.name: IoBoundedPlanner,
    DeletionOnlyPlanner.name: DeletionOnlyPlanner,
    IncrementalPlanner.name: IncrementalPlanner,
}


def planner_class(strategy: str, table: str) -> type[Planner]:
    """The planner class for ``strategy``: a registered name or a dotted ``module.Class``."""
    if strategy in STRATEGIES:
        return STRATEGIES[strategy]
    if "." in strategy:
        module_name, _, cls_name = strategy.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError) as e:
            raise CompactionError(
                f"table {table}: strategy {strategy!r} cannot be loaded ({e})") from None
        if not (isinstance(cls, type) and issubclass(cls, Planner)):
            raise CompactionError(
                f"table {table}: strategy {strategy!r} is not a lance_compact.planners.Planner")
        return cls
    raise CompactionError(
        f"table {table}: unknown strategy {strategy!r}; valid strategies are: "
        + ", ".join(sorted(STRATEGIES)) + ", or a dotted class name")


def get_planner(strategy: str, table: str, settings: dict | None = None) -> Planner:
    """An instance of the strategy's planner with its settings."""
    return planner_class(strategy, table)(settings)


__all__ = ["Plan", "PlannedTask", "Planner", "STRATEGIES", "as_plan", "get_planner",
           "planner_class"]
