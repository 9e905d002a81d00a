"""Planning strategies. Adding one: a new module here and one line in ``STRATEGIES``."""
from __future__ import annotations

import importlib

from ..errors import CompactionError
from .base import Planner
from .default import DefaultPlanner

STRATEGIES: dict[str, type[Planner]] = {
    DefaultPlanner.name: DefaultPlanner,
}


def get_planner(strategy: str, table: str) -> Planner:
    """The planner for ``strategy``: a registered name or a dotted ``module.Class`` path."""
    if strategy in STRATEGIES:
        return STRATEGIES[strategy]()
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
        return cls()
    raise CompactionError(
        f"table {table}: unknown strategy {strategy!r}; valid strategies are: "
        + ", ".join(sorted(STRATEGIES)) + ", or a dotted class name")


__all__ = ["Planner", "STRATEGIES", "get_planner"]
