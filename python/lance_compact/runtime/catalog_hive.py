"""A Hive Metastore as a catalog service (``impl=hive2``, ``impl=hive3``): lance-namespace-impls'
``Hive2Namespace`` / ``Hive3Namespace`` (Python, the metastore's Thrift API), adapted to what the
engine and Lance expect of a namespace client (runtime/catalog_service.py wraps the result as it
wraps every service's client).

What the adaptation adds:

* **Identifiers as lance-spark maps them.** A Hive 2 metastore is databases > tables: Spark's
  ``lance.db.t`` is ``["db", "t"]``. A Hive 3 metastore has a catalog level above: without
  ``parent`` Spark names it (``lance.hive.db.t``); with ``parent=hive`` (split on
  ``parent_delimiter``, default ``.``) every identifier is prefixed with it (``lance.db.t``).
  The Python Hive 3 client passes no catalog to the metastore (it reads the default catalog,
  ``hive``, whatever the name), so only that catalog is served: another name is not found, and
  the root listing names ``hive`` alone (the same tables are never listed twice). The
  metastore's ``default`` database, which the clients leave out of their listings, is listed.
* **A missing table or namespace said as Lance Namespace says it**: the clients raise
  ``ValueError("Table [...] does not exist")``, ``"... is not a Lance table"`` (a Hive table of
  another format is no table of this catalog) or ``"Invalid identifier"`` (too many levels).
* **One call at a time per client**: a client keeps one Thrift connection in a field that each
  call opens and closes, so two threads at once would close each other's.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping
from urllib.parse import urlsplit

DEFAULT_CATALOG = "hive"
DEFAULT_DATABASE = "default"
# Properties of the adapter, not of the metastore client.
OWN = ("parent", "parent_delimiter")
# Every property accepted (lance-spark's keys for a Hive catalog): the metastore's Thrift address,
# where new tables go, the user and groups the metastore is told, the pool size (the Python
# client opens one connection per call and ignores it).
KEYS = ("uri", "root", "ugi", "client.pool-size", *OWN)
_MISSING = ("does not exist", "is not a Lance table", "Invalid identifier", "Invalid namespace identifier")


def connect(impl: str, properties: Mapping[str, str]) -> "HiveNamespace":
    """The client of the metastore ``properties`` name (``uri``, ``root``, ``ugi``,
    ``client.pool-size``; ``parent``, ``parent_delimiter``). Raises ImportError when the
    ``hive`` extra is not installed."""
    if impl == "hive2":
        from lance_namespace_impls.hive2 import HIVE_AVAILABLE, Hive2Namespace as cls
    else:
        from lance_namespace_impls.hive3 import HIVE_AVAILABLE, Hive3Namespace as cls
    if not HIVE_AVAILABLE:
        raise ImportError("hive-metastore-client and thrift are not installed")
    check(impl, properties)
    props = {k: v for k, v in properties.items() if k not in OWN}
    delimiter = properties.get("parent_delimiter") or "."
    parent = tuple(p for p in (properties.get("parent") or "").split(delimiter) if p)
    return HiveNamespace(cls(**props), impl, parent)


def check(impl: str, properties: Mapping[str, str]) -> None:
    """Refuses properties the client would misread: an unknown key, a ``uri`` that is not
    ``thrift://host:port``, a pool size that is not a positive number."""
    from ..errors import CompactionError

    unknown = sorted(set(properties) - set(KEYS))
    if unknown:
        raise CompactionError(f"impl={impl}: catalog service properties {', '.join(unknown)} are not accepted; "
                              f"expected {', '.join(KEYS)}")
    uri = properties.get("uri") or ""
    parts = urlsplit(uri)
    if parts.scheme != "thrift" or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise CompactionError(f"impl={impl}: uri '{uri}' is not a metastore's Thrift address (thrift://host:port)")
    size = properties.get("client.pool-size")
    if size is not None and not (size.strip().isdigit() and int(size) > 0):
        raise CompactionError(f"impl={impl}: client.pool-size '{size}' is not a positive whole number")


class HiveNamespace:
    """A Hive namespace client with lance-spark's identifiers and Lance Namespace's errors."""

    def __init__(self, inner: Any, impl: str, parent: tuple[str, ...]) -> None:
        self._inner = inner
        self._impl = impl
        self._parent = parent
        self._lock = threading.Lock()

    def namespace_id(self) -> str:
        return self._inner.namespace_id()

    def _lance_id(self, spark_id: list[str] | None) -> list[str]:
        return [*self._parent, *(spark_id or [])]

    def _served(self, lance_id: list[str]) -> bool:
        """Whether the id lies in what is served: Hive 3's default catalog only."""
        return self._impl != "hive3" or not lance_id or lance_id[0].lower() == DEFAULT_CATALOG

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not the client's (nor asked before __init__ set ours)
            raise AttributeError(name)
        call = getattr(self._inner, name)
        if not callable(call):
            return call
        return lambda request=None, *args, **kwargs: self._call(name, call, request, *args, **kwargs)

    def _call(self, name: str, call: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        from lance_namespace.errors import NamespaceNotFoundError, TableNotFoundError

        lance_id = None
        if request is not None and hasattr(request, "id"):
            lance_id = self._lance_id(request.id)
            if not self._served(lance_id):
                table = "table" in name and name != "list_tables"
                raise (TableNotFoundError if table else NamespaceNotFoundError)(
                    f"{'Table' if table else 'Namespace'} {lance_id} does not exist: only the metastore's "
                    f"catalog '{DEFAULT_CATALOG}' is served")
            request = request.model_copy(update={"id": lance_id})
        try:
            with self._lock:
                response = call(request, *args, **kwargs) if request is not None else call(*args, **kwargs)
        except ValueError as e:
            text = str(e)
            if any(m in text for m in _MISSING):
                raise (NamespaceNotFoundError if "namespace" in text.lower() else TableNotFoundError)(text) from None
            raise
        if name == "list_namespaces" and self._impl == "hive3" and lance_id == []:
            response.namespaces = [n for n in response.namespaces or [] if n.lower() == DEFAULT_CATALOG]
        elif name == "list_namespaces" and lance_id == ([] if self._impl == "hive2" else [DEFAULT_CATALOG]):
            # the clients leave the metastore's `default` database out of their listings: its
            # tables would be missing from every catalog-wide view (maintain_warehouse among them)
            if DEFAULT_DATABASE not in (response.namespaces or []):
                response.namespaces = [*(response.namespaces or []), DEFAULT_DATABASE]
        return response
