"""Warehouses laid out by a Lance directory namespace (what lance-spark's ``impl=dir``
catalog writes), resolved with Lance's own ``lance.namespace.DirectoryNamespace``.

Two layouts, as lance-spark names them:

* ``single_level_ns=true``: tables are ``<root>/<table>.lance``; Spark sees them in one
  virtual namespace, ``default`` (``lance.default.events``).
* ``single_level_ns=false`` (lance-spark's default): namespaces and tables are listed in the
  root's ``__manifest`` table and tables live in folders named by Lance
  (``<root>/<hash>_db$events``); Spark sees ``lance.db.events``.

A catalog service (``impl=rest``: runtime/catalog_service.py) is asked the same questions
through its client; its storage options name it (no ``root``).

The JVM catalog asks through the engine: ``{"root", "storage_options", "single_level",
"op", "id"}``; every answer is rows of ``(kind, name, location)``.
"""
from __future__ import annotations

import logging
from typing import Any

from lance import namespace as lance_ns
from lance_namespace.errors import NamespaceNotFoundError, TableNotFoundError

from ..errors import CompactionError
from ..runtime.catalog_service import (UnreadableLocation, client as catalog_client, lance_options, service_of,
                                       unreachable)
from ..runtime.envelope import Envelope, Result
from ..runtime.vended import printable

log = logging.getLogger(__name__)

DEFAULT = "default"
COLUMNS = "`kind` STRING, `name` STRING, `location` STRING"


def _namespace(request: Envelope) -> Any:
    """The catalog service the request's storage options name (runtime/catalog_service.py),
    else the directory namespace at the request's ``root``."""
    service = service_of(request.storage_options)
    if service is not None:
        return catalog_client(service)
    props = {f"storage.{k}": v for k, v in lance_options(request.storage_options).items()}
    return lance_ns.DirectoryNamespace(root=request.extras["root"], **props)


def _all(list_page: Any, request_type: Any, ident: list[str], attribute: str) -> list[str]:
    """Every name a listing returns, page after page (a service may page its answers)."""
    names: list[str] = []
    token = None
    for _ in range(100_000):
        response = list_page(request_type(id=ident, page_token=token))
        names.extend(getattr(response, attribute) or [])
        token = getattr(response, "page_token", None)
        if not token:
            return names
    raise CompactionError(f"namespace {'.'.join(ident)}: the listing did not end after 100,000 pages")


def _lance_id(raw: Any, ident: list[str]) -> list[str] | None:
    """The Lance namespace id of a Spark namespace (None: it does not exist)."""
    if not raw.get("single_level"):
        return ident
    return [] if ident in ([], [DEFAULT]) else None


def _exists(ns: lance_ns.DirectoryNamespace, lance_id: list[str] | None) -> bool:
    if lance_id is None:
        return False
    if not lance_id:
        return True
    try:
        ns.namespace_exists(lance_ns.NamespaceExistsRequest(id=lance_id))
        return True
    except NamespaceNotFoundError:
        return False


def _table_location(ns: lance_ns.DirectoryNamespace, lance_id: list[str]) -> str | None:
    """The table's location as the service gives it (None: no such table). A location Lance
    would read as another one is returned as given: the JVM's catalog refuses it by its own
    check, naming the table, and leaves it out of its listings (the engine never opens it)."""
    try:
        return ns.describe_table(lance_ns.DescribeTableRequest(id=lance_id)).location
    except (TableNotFoundError, NamespaceNotFoundError):
        return None
    except UnreadableLocation as e:
        if e.location is None:
            raise
        return e.location


def _listed(ns: Any, table_id: list[str]) -> bool:
    """Whether a Glue catalog lists the table: one whose location lies outside the catalog's
    ``root`` (or that Lance would read as another location) is left out, with a note in the log;
    a statement naming it is refused (runtime/catalog_service.py). Other services' tables are
    all listed (a Hive catalog's boundary is checked by the JVM, which leaves them out of the
    catalog-wide views itself)."""
    service = getattr(ns, "service", None)
    if service is None or service.impl != "glue":
        return True
    why = ns.refused_location(table_id)
    if why is not None:
        log.warning("leaving table %s out of listings: %s", printable(".".join(table_id), 300), why)
    return why is None


def namespace_rows(request: Envelope) -> Result:
    """Answer one catalog question about a directory-namespace warehouse.

    ops: ``namespace_exists`` (one row if it does), ``list_namespaces``, ``list_tables``,
    ``table`` (one row with the table's location if it exists), ``create_namespace``,
    ``drop_namespace``.
    """
    service = service_of(request.storage_options)
    try:
        return _rows(request, _namespace(request))
    except (CompactionError, NamespaceNotFoundError, TableNotFoundError):
        raise
    except Exception as e:  # the service's own failure (unreachable, refused): named, redacted
        if service is None:
            raise
        raise unreachable(service, e) from None


def _rows(request: Envelope, ns: Any) -> Result:
    raw = request.extras
    op, ident = raw["op"], list(raw.get("id") or [])
    single = bool(raw.get("single_level"))
    if op == "namespace_exists":
        return Result(COLUMNS, [["namespace", ".".join(ident), None]] if _exists(ns, _lance_id(raw, ident)) else [])
    if op == "list_namespaces":
        if single:
            return Result(COLUMNS, [["namespace", DEFAULT, None]] if not ident else [])
        names = _all(ns.list_namespaces, lance_ns.ListNamespacesRequest, ident, "namespaces")
        return Result(COLUMNS, [["namespace", n, None] for n in sorted(names) if not n.startswith("__")])
    if op == "list_tables":
        lance_id = _lance_id(raw, ident)
        if not _exists(ns, lance_id):
            return Result(COLUMNS, [])
        names = [n for n in sorted(_all(ns.list_tables, lance_ns.ListTablesRequest, lance_id, "tables"))
                 if not n.startswith("__")]
        return Result(COLUMNS, [["table", n, None] for n in names if _listed(ns, lance_id + [n])])
    if op == "table":
        lance_id = _lance_id(raw, ident[:-1])
        if lance_id is None or not ident:
            return Result(COLUMNS, [])
        location = _table_location(ns, lance_id + ident[-1:])
        return Result(COLUMNS, [["table", ident[-1], location]] if location else [])
    if op == "create_namespace":
        if single:
            raise CompactionError(f"with single_level_ns=true the only namespace is the virtual "
                                  f"'{DEFAULT}'; namespaces cannot be created")
        ns.create_namespace(lance_ns.CreateNamespaceRequest(id=ident))
        return Result(COLUMNS, [["namespace", ".".join(ident), None]])
    if op == "drop_namespace":
        if single:
            raise CompactionError(f"with single_level_ns=true the virtual namespace '{DEFAULT}' "
                                  "cannot be dropped")
        ns.drop_namespace(lance_ns.DropNamespaceRequest(id=ident))
        return Result(COLUMNS, [["namespace", ".".join(ident), None]])
    raise CompactionError(f"unknown namespace operation {op!r}")
