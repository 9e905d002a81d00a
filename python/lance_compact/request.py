"""What one CALL asks for, parsed from the JSON the JVM sends and validated against the
option spec and the chosen strategy's settings."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .errors import CompactionError
from .options import parse_options, run_defaults
from .planners import planner_class


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
    def from_json(text: str) -> "CompactionRequest":
        """Parse and validate the request the JVM sends."""
        try:
            raw = json.loads(text)
        except ValueError as e:
            raise CompactionError(f"request is not valid JSON: {e}") from None
        table = raw.get("table") or raw.get("uri")
        uri = raw.get("uri")
        if not uri:
            raise CompactionError("request names no table")
        params = dict(raw.get("params") or {})
        extra = dict(raw.get("options") or {})
        strategy = raw.get("strategy") or extra.pop("strategy", None)
        extra.pop("strategy", None)
        if not strategy:
            # Asking for changes since a version is asking for the incremental strategy.
            given = params.get("since_version") is not None or "since_version" in extra
            strategy = "incremental" if given else "default"
        catalog = raw.get("catalog")
        cls = planner_class(strategy, table, catalog)
        options, settings, run, hooks = parse_options(
            table, strategy, cls.settings_spec(), params, extra)
        return CompactionRequest(table=table, uri=uri, strategy=strategy, options=options,
                                 settings=settings, run=run, hooks=hooks,
                                 storage_options=dict(raw.get("storage_options") or {}),
                                 catalog=catalog)

    def to_json(self) -> str:
        return json.dumps({"table": self.table, "uri": self.uri, "strategy": self.strategy,
                           "params": {**self.options, **self.settings, **self.run, **self.hooks},
                           "storage_options": self.storage_options, "catalog": self.catalog})
