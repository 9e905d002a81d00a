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
        if not strategy:
            # Asking for changes since a version is asking for the incremental strategy.
            given = params.get("since_version") is not None or "since_version" in extra
            strategy = "incremental" if given else "default"
        cls = planner_class(strategy, t.table, envelope.catalog)
        options, settings, run, hooks = parse_options(
            t.table, strategy, cls.settings_spec(), params, extra)
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
