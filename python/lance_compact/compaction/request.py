"""What one CALL asks for, parsed from the JSON the JVM sends and validated against the
option spec: a compaction's (:class:`CompactionRequest`, with the chosen strategy's settings)
or another procedure's (:class:`ProcedureRequest`: cleanup, optimize_indices, maintain)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import CompactionError
from ..options import parse_options, procedure_args, run_defaults
from .planners import planner_class
from ..runtime.tables import open_dataset


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


@dataclass(frozen=True)
class ProcedureRequest:
    """What a CALL of a procedure other than compaction asks for: the table, where it is, its
    storage options and its parameters, checked against parameters.json's
    ``<procedure>_parameters``; ``raw`` keeps the rest of the request."""

    table: str
    uri: str
    storage_options: dict[str, str] | None
    args: dict[str, Any]
    raw: dict[str, Any]

    @staticmethod
    def from_json(text: str, procedure: str) -> "ProcedureRequest":
        """Parse the request the JVM sends for ``procedure`` and check its parameters."""
        raw = json.loads(text)
        table, uri = raw.get("table") or raw["uri"], raw["uri"]
        args = procedure_args(procedure, f"{procedure}_parameters", raw.get("params"), table)
        return ProcedureRequest(table=table, uri=uri, storage_options=raw.get("storage_options"),
                                args=args, raw=raw)

    def open(self):
        """The table's dataset at its latest version."""
        return open_dataset(self.table, self.uri, self.storage_options)
