"""Planning strategies. Adding one: a module here and one line in ``STRATEGIES`` (and its
settings, if any, in parameters.json). A user's own strategy is registered by whoever
configures the catalog (``spark.sql.catalog.<catalog>.strategies.<name> = module.Class``,
see :mod:`lance_compact.runtime.driver_conf`) and chosen by that name."""
from __future__ import annotations

import importlib

from ...runtime import driver_conf
from ...runtime.envelope import DEFAULT_CATALOG
from ...errors import CompactionError
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


def planner_class(strategy: str, table: str, catalog: str | None = None) -> type[Planner]:
    """The planner class for ``strategy``: a built-in name, or one the catalog's operator
    registered (``spark.sql.catalog.<catalog>.strategies.<name> = module.Class`` in the
    driver's static Spark configuration; its ``module.Class`` is accepted too). Nothing else
    is imported: a SQL user's argument never names code."""
    if strategy in STRATEGIES:
        return STRATEGIES[strategy]
    registered = driver_conf.strategies(catalog)
    target = registered.get(strategy.lower())
    if target is None and strategy in registered.values():
        target = strategy
    if target is None:
        hint = (f"spark.sql.catalog.{catalog or DEFAULT_CATALOG}.strategies.<name> = module.Class")
        raise CompactionError(
            f"table {table}: unknown strategy {strategy!r}; valid strategies are: "
            + ", ".join(sorted(STRATEGIES) + sorted(registered))
            + f" (a custom strategy is registered by whoever configures the catalog: {hint} "
            "in the driver's Spark configuration)")
    module_name, _, cls_name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError, ValueError) as e:
        raise CompactionError(
            f"table {table}: registered strategy {strategy!r} ({target}) cannot be loaded ({e})") from None
    if not (isinstance(cls, type) and issubclass(cls, Planner)):
        raise CompactionError(
            f"table {table}: registered strategy {strategy!r} ({target}) is not a "
            "lance_compact.compaction.planners.Planner")
    return cls


def get_planner(strategy: str, table: str, settings: dict | None = None,
                catalog: str | None = None) -> Planner:
    """An instance of the strategy's planner with its settings."""
    return planner_class(strategy, table, catalog)(settings)


__all__ = ["Plan", "PlannedTask", "Planner", "STRATEGIES", "as_plan", "get_planner",
           "planner_class"]
