"""The engine's boundary, typed: a request as the JVM sends it (Scala ``EngineRequest``),
parsed once into an :class:`Envelope` -- the :class:`Target` table (name, location, storage
options, catalog and its maintenance settings), the procedure's parameters checked against
parameters.json with defaults filled, the warehouse's tables, and the few fields a handler
of its own needs -- and every answer as a :class:`Result` that owns its columns; rows are
made from it only at the edge (``engine.handle``).

Request fields (JSON object; all optional but what an action needs): ``table``, ``uri``,
``storage_options``, ``catalog``, ``maintain_settings``, ``version``, ``params`` (named CALL
parameters, typed by Spark), ``options`` (the options map, text), ``strategy``, ``namespace``,
``tables`` (``[{"namespace", "table", "uri"}]``), ``warehouse`` (the catalog's warehouse, in
normal form), and per action its own (``op``, ``kind``, ``columns``, ``filter``, ...:
:attr:`Envelope.extras`).

Every location a request names (``uri``, each of ``tables``, a directory namespace's ``root``)
is checked here, once, on the text the engine will open (runtime/locations.py): Lance must
read it as written, and it must lie inside ``warehouse`` when the catalog has one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..errors import CompactionError
from ..options import columns_ddl, procedure_args, result_columns, spec
from .catalog_service import for_table
from .locations import check as check_location

# The catalog a request belongs to when it names none (a handler called outside the JVM);
# error hints then say spark.sql.catalog.lance.<key>. configure_spark_with_lance_compact and
# the PySpark API use the same name by default.
DEFAULT_CATALOG = "lance"

# Fields every request may carry; the others are the action's own (Envelope.extras).
_COMMON = ("table", "uri", "storage_options", "catalog", "maintain_settings", "version", "params",
           "options", "strategy", "namespace", "tables", "warehouse")

# The parameters.json section of each procedure whose parameters the engine checks here.
# compact, plan and layout take compaction options, checked with their strategy's settings
# (compaction/request.py).
PARAMETER_SECTIONS = {
    "cleanup": "cleanup_parameters",
    "optimize_indices": "optimize_indices_parameters",
    "create_index": "create_index_parameters",
    "drop_index": "drop_index_parameters",
    "maintain": "maintain_parameters",
    "maintain_warehouse": "maintain_warehouse_parameters",
}


@dataclass(frozen=True)
class Target:
    """One table: its name as the user knows it, where it is, how to reach it, and the
    catalog whose settings apply to it."""

    table: str
    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict)
    catalog: str = DEFAULT_CATALOG
    maintain_settings: Mapping[str, str] = field(default_factory=dict)
    version: int | None = None

    def open(self, version: int | None = None):
        """The dataset (at ``version``, else the target's, else the latest), with errors that
        say what is wrong (runtime/tables.py)."""
        from .tables import open_dataset  # pylance: not imported by the boundary itself

        v = version if version is not None else self.version
        return open_dataset(self.table, self.uri, dict(self.storage_options), version=v)

    def other(self, table: str, uri: str, table_id: Sequence[str] | None = None) -> "Target":
        """Another table of the same catalog and store (a warehouse's); ``table_id``: its
        identifier, by which a catalog service opens it (runtime/catalog_service.py)."""
        storage = self.storage_options if table_id is None else for_table(self.storage_options, table_id)
        return replace(self, table=table, uri=uri, version=None, storage_options=storage)


@dataclass(frozen=True)
class TableEntry:
    """A table of a warehouse-wide request: its namespace (dotted), name and location."""

    namespace: str
    name: str
    uri: str

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}" if self.namespace else self.name

    @property
    def table_id(self) -> list[str]:
        """The table's identifier as a catalog service knows it (the JVM lists no service
        namespace whose name holds a dot)."""
        return [p for p in self.namespace.split(".") if p] + [self.name]


@dataclass(frozen=True)
class Envelope:
    """One request, parsed once. ``target`` is None when the request names no table
    location (a warehouse-wide request names its ``tables``); ``args`` are the procedure's
    parameters checked against parameters.json (:data:`PARAMETER_SECTIONS`) with the
    defaults of its own (non-policy) parameters filled; ``params`` and ``options`` are the
    raw parameters and options map for the compaction's own parsing."""

    action: str
    target: Target | None
    args: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    strategy: str | None = None
    namespace: str | None = None
    tables: tuple[TableEntry, ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict)
    storage_options: Mapping[str, str] = field(default_factory=dict)
    catalog: str | None = None  # as sent: None when the request names none (see catalog_name)
    maintain_settings: Mapping[str, str] = field(default_factory=dict)
    warehouse: str | None = None  # the catalog's warehouse (None: it has none)

    @property
    def catalog_name(self) -> str:
        """The catalog, as settings and hints name it."""
        return self.catalog or DEFAULT_CATALOG

    @property
    def where(self) -> str:
        """What the request is about, as errors name it: the table, else the namespace or
        the warehouse."""
        if self.target is not None:
            return self.target.table
        return f"namespace {self.namespace}" if self.namespace else "the warehouse"

    def require_target(self) -> Target:
        if self.target is None:
            raise CompactionError(f"engine: the {self.action} request names no table")
        return self.target

    @staticmethod
    def parse(action: str, text: str | Mapping[str, Any]) -> "Envelope":
        """Parse the JVM's request (JSON text, or its decoded object) for ``action``."""
        if isinstance(text, Mapping):
            raw = dict(text)
        else:
            try:
                raw = json.loads(text)
            except ValueError as e:
                raise CompactionError(f"engine: the {action} request is not valid JSON: {e}") from None
        if not isinstance(raw, dict):
            raise CompactionError(f"engine: the {action} request is not a JSON object")
        storage = _text_map(raw.get("storage_options"), "storage_options", action)
        catalog = raw.get("catalog") or None
        settings = _text_map(raw.get("maintain_settings"), "maintain_settings", action)
        target = None
        if raw.get("uri"):
            version = raw.get("version")
            target = Target(table=raw.get("table") or raw["uri"], uri=raw["uri"], storage_options=storage,
                            catalog=catalog or DEFAULT_CATALOG, maintain_settings=settings,
                            version=int(version) if version is not None else None)
        warehouse = raw.get("warehouse") or None
        _check_locations(action, raw, target, warehouse, catalog or DEFAULT_CATALOG)
        envelope = Envelope(
            action=action, target=target, params=dict(raw.get("params") or {}),
            options=dict(raw.get("options") or {}), strategy=raw.get("strategy") or None,
            namespace=raw.get("namespace") or None, tables=_tables(raw.get("tables"), action),
            extras={k: v for k, v in raw.items() if k not in _COMMON},
            storage_options=storage, catalog=catalog, maintain_settings=settings, warehouse=warehouse)
        section = PARAMETER_SECTIONS.get(action)
        if section is not None:
            envelope = replace(envelope, args=checked_args(action, envelope.params, envelope.where))
        return envelope


def checked_args(procedure: str, params: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """``procedure``'s parameters checked against its parameters.json section, with the
    defaults of its own parameters filled; a policy key (maintain's thresholds) is left unset
    when not given, so the table's property, the catalog's setting or the default applies."""
    section = PARAMETER_SECTIONS[procedure]
    args = procedure_args(procedure, section, dict(params or {}), where)
    policy = {o["name"] for o in spec()["policy_keys"]} | {
        o["name"] for o in spec()["maintain_parameters"] if o["name"] not in ("dry_run", "fail_on_error")}
    for o in spec()[section]:
        if o.get("default") is not None and o["name"] not in policy:
            args.setdefault(o["name"], o["default"])
    return args


def _check_locations(action: str, raw: Mapping[str, Any], target: Target | None, warehouse: str | None,
                     catalog: str) -> None:
    """Every location the request names, as the engine will open it: read by Lance as
    written, inside the catalog's warehouse (runtime/locations.py)."""
    if warehouse is not None:
        check_location(warehouse, None, f"catalog {catalog}'s warehouse", catalog)
    if target is not None:
        what = f"table {target.table}" if raw.get("table") else f"the {action} request"
        check_location(target.uri, warehouse, what, catalog)
    for e in raw.get("tables") or []:
        if isinstance(e, dict) and isinstance(e.get("uri"), str):
            check_location(e["uri"], warehouse, f"table {e.get('namespace') or ''}.{e.get('table')}".replace(
                "table .", "table "), catalog)
    if isinstance(raw.get("root"), str):  # a Lance directory namespace's root (catalog/namespaces.py)
        check_location(raw["root"], warehouse, f"catalog {catalog}'s root", catalog)


def _text_map(value: Any, name: str, action: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CompactionError(f"engine: the {action} request's {name} is not an object")
    return dict(value)


def _tables(value: Any, action: str) -> tuple[TableEntry, ...]:
    """The warehouse's tables: objects ``{"namespace", "table", "uri"}`` (Scala
    ``EngineRequest.tables``)."""
    out = []
    for e in value or []:
        if not isinstance(e, dict) or not e.get("uri") or not e.get("table"):
            raise CompactionError(f"engine: the {action} request's tables must be objects with "
                                  f"table and uri, got {e!r}")
        out.append(TableEntry(namespace=e.get("namespace") or "", name=e["table"], uri=e["uri"]))
    return tuple(out)


@dataclass(frozen=True)
class Result:
    """A handler's answer: its schema (Spark DDL) and rows, each a sequence in schema order or
    a mapping by column name (``columns`` then names them, in order)."""

    schema: str
    rows: Sequence[Sequence[Any] | Mapping[str, Any]] = ()
    columns: tuple[str, ...] | None = None

    @staticmethod
    def of(kind: str, records: Sequence[Mapping[str, Any]]) -> "Result":
        """Rows as mappings, in the columns of parameters.json's section ``kind``."""
        columns = result_columns(kind)
        return Result(columns_ddl(columns), list(records), tuple(n for n, _ in columns))

    def json_rows(self) -> list[list[Any]]:
        """The rows as the JVM reads them: lists in schema order (a missing column is NULL)."""
        if self.columns is None:
            rows = self.rows
            # lists and tuples are JSON arrays as they are: no copy of a million-row answer
            # (the fragments table's) just to make its rows lists
            if isinstance(rows, list) and all(type(r) in (list, tuple) for r in rows):
                return rows
            return [list(r) for r in rows]
        return [[r.get(c) for c in self.columns] if isinstance(r, Mapping) else list(r)
                for r in self.rows]

    def records(self) -> list[dict[str, Any]]:
        """The rows as mappings by column name (what a caller inside the engine reads)."""
        if self.columns is None:
            raise ValueError("this result's columns are not named")
        return [dict(r) if isinstance(r, Mapping) else dict(zip(self.columns, r)) for r in self.rows]
