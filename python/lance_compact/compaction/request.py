"""What one compaction CALL asks for (``compact``, ``plan_compaction``, ``describe_layout``'s
thresholds), from the engine's parsed request (runtime/envelope.py) and validated against the
option spec with the chosen strategy's settings. Other procedures take their checked
parameters from the envelope itself."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import CompactionError
from ..options import parse_options, run_defaults
from .planners import planner_class
from ..runtime.envelope import DEFAULT_CATALOG, Envelope, Target


# Iceberg's rewrite_data_files strategies, as its users write them: 'binpack' merges files
# without reordering rows (here: a plain compaction by the default planner, even of a table kept
# clustered); 'sort' rewrites them ordered by sort_order (here: a clustering run, by the
# sort_order given or the table's CLUSTER BY). The planners keep their own names (default,
# io_bounded, deletion_only, incremental, registered ones).
ICEBERG_STRATEGIES = ("binpack", "sort")


def iceberg_strategy(table: str, strategy: str | None, params: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``strategy`` and ``params`` with Iceberg's strategy names put in this project's terms."""
    name = (strategy or "").strip().lower()
    if name not in ICEBERG_STRATEGIES:
        return strategy, params
    order = params.get("sort_order")
    if name == "binpack":
        if order is not None and str(order).strip().lower() != "none":
            raise CompactionError(f"table {table}: strategy 'binpack' merges fragments without reordering rows; "
                                  f"it takes no sort_order (given {order!r}): use strategy 'sort' to cluster")
        return "default", {**params, "sort_order": "none"}
    if order is not None and str(order).strip().lower() == "none":
        raise CompactionError(f"table {table}: strategy 'sort' needs a sort_order (or the table's CLUSTER BY); "
                              "sort_order 'none' asks for none")
    return "sort", params


@dataclass(frozen=True)
class CompactionRequest:
    """What one CALL asks for: the table, where it is, the strategy, Lance's options and the
    strategy's settings."""

    table: str
    uri: str
    strategy: str = "default"
    options: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=run_defaults)
    hooks: dict[str, Any] = field(default_factory=dict)
    storage_options: dict[str, str] = field(default_factory=dict)
    catalog: str | None = None  # the Spark catalog of the CALL: whose registered strategies apply

    @staticmethod
    def of(envelope: Envelope) -> "CompactionRequest":
        """The compaction an engine request asks for (``compact``, ``plan``, ``layout``):
        its parameters and options map checked with the chosen strategy's settings."""
        t = envelope.target
        if t is None:
            raise CompactionError("request names no table")
        extra = dict(envelope.options)
        strategy = envelope.strategy or extra.pop("strategy", None)
        extra.pop("strategy", None)
        params = dict(envelope.params)
        strategy, params = iceberg_strategy(t.table, strategy, params)
        must_sort = strategy == "sort"
        strategy = "default" if must_sort else strategy
        if not strategy:
            # Asking for changes since a version is asking for the incremental strategy.
            given = params.get("since_version") is not None or "since_version" in extra
            strategy = "incremental" if given else "default"
        cls = planner_class(strategy, t.table, envelope.catalog)
        options, settings, run, hooks = parse_options(
            t.table, strategy, cls.settings_spec(), params, extra)
        if must_sort:
            run = {**run, "require_sort_order": True}  # with_table_clustering checks it
        return CompactionRequest(table=t.table, uri=t.uri, strategy=strategy, options=options,
                                 settings=settings, run=run, hooks=hooks,
                                 storage_options=dict(t.storage_options), catalog=envelope.catalog)

    @staticmethod
    def from_json(text: str) -> "CompactionRequest":
        """Parse and validate a request as the JVM sends it (tests; the engine parses once,
        into an :class:`Envelope`, and uses :meth:`of`)."""
        return CompactionRequest.of(Envelope.parse("compact", text))

    @property
    def target(self) -> Target:
        """The table, as the rest of the engine names one."""
        return Target(self.table, self.uri, self.storage_options, self.catalog or DEFAULT_CATALOG)

    def to_json(self) -> str:
        return json.dumps({"table": self.table, "uri": self.uri, "strategy": self.strategy,
                           "params": {**self.options, **self.settings, **self.run, **self.hooks},
                           "storage_options": self.storage_options, "catalog": self.catalog})
