"""Tables of a catalog service (a Lance Namespace: ``impl=rest``, ``glue``, ``hive2``, ``hive3``), opened through it.

A catalog configured with ``spark.sql.catalog.<name>.impl=rest`` (and ``uri``, ``headers.*``)
keeps its tables where the service says: their locations, and the storage options (vended,
expiring credentials among them) come from the service's DescribeTable. Such a table is opened
with ``lance.dataset(namespace_client=..., table_id=[...])``, so Lance overlays the service's
storage options on the operator's ``storage.*`` and refreshes them itself (it calls DescribeTable
again when they near ``expires_at_millis``), on the driver and on every executor alike, and
respects the service's managed versioning.

How the service travels: the JVM catalog adds reserved storage options (:data:`PREFIX`):
``lance_compact.catalog.impl``, the service's properties (``lance_compact.catalog.uri``,
``lance_compact.catalog.header.<name>``) and, per table, ``lance_compact.catalog.table_id`` (a
JSON list). Storage options already reach every place a table is opened (the engine, compaction
tasks, clustering jobs, distributed reads), so every open of the table goes through the service
without another field to carry; :func:`lance_options` removes them before Lance sees options.
The JVM refuses storage options a user gives under that prefix (Scala ``LanceCatalog``), and only
the operator's catalog may name a service.

The client wraps the service's (:class:`_Checked`): every location it returns is checked as
every location is (runtime/locations.py: Lance must read it as written), and a Glue catalog's
must lie under its ``root``; the storage options it vends may carry credentials only, never a
place (runtime/vended.py: a vended endpoint, region, ``allow_http``, ... that differs from the
operator's refuses the table); the secrets it vends are redacted from logs and errors
(runtime/secrets.py), and a service that does not answer is named (:func:`unreachable`).
Every DescribeTable answer passes there: the engine's own, Lance's when it opens a table with
``namespace_client=`` (``lance.dataset`` calls the client's ``describe_table``), and Lance's
refreshes of vended credentials (pylance 14.0.2 calls the Python client's ``describe_table``
from its own threads; checked by tests/test_rest_catalog.py).
"""
from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import CompactionError
from . import vended
from .locations import inside, reinterpreted
from .secrets import redact, remember_vended

log = logging.getLogger(__name__)

PREFIX = "lance_compact.catalog."
IMPL = PREFIX + "impl"
TABLE_ID = PREFIX + "table_id"
# Lance Namespace implementations a catalog may name by alias; also a Python class path
# (``package.module.Class``, a LanceNamespace taking its properties as keywords, as
# ``lance_namespace.connect`` takes one), imported here and on every executor. Only the operator's
# catalog names a service (the JVM refuses it in a catalog a session defines), so an import is the
# operator's choice. The dynamic context provider properties (which would import a class inside
# Lance, unchecked) are not accepted.
IMPLS = ("rest", "glue", "hive2", "hive3", "dir")
_CLASS_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
_REFUSED_PROPERTIES = ("dynamic_context_provider.",)


@dataclass(frozen=True)
class Service:
    """A catalog service: its implementation, its properties (``uri``, ``header.*``, ...), the
    table asked about (None for namespace-wide questions), and the operator's storage options
    of the catalog (what a vended option is compared with: runtime/vended.py; never shown)."""

    impl: str
    properties: tuple[tuple[str, str], ...]
    table_id: tuple[str, ...] | None = None
    storage: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def shown(self) -> str:
        """The service as errors name it: its implementation and endpoint, never a header."""
        props = dict(self.properties)
        where = props.get("uri") or props.get("endpoint") or props.get("root") or ""
        return f"catalog service {self.impl}" + (f" at {where}" if where else "")


def service_of(storage_options: Mapping[str, str] | None) -> Service | None:
    """The catalog service the storage options name, or None (a table of a folder warehouse)."""
    opts = storage_options or {}
    impl = opts.get(IMPL)
    if not impl:
        return None
    impl = impl.strip()
    if impl.lower() in IMPLS:
        impl = impl.lower()
    elif not _CLASS_PATH.fullmatch(impl):
        raise CompactionError(f"catalog service impl '{impl}' is not supported: expected a Python class path "
                              "(package.module.Class) or one of "
                              f"{', '.join(IMPLS)}")
    props = []
    for k, v in opts.items():
        if not k.startswith(PREFIX) or k in (IMPL, TABLE_ID):
            continue
        name = k[len(PREFIX):]
        if name.startswith("headers."):  # lance-spark's spelling; pylance's RestNamespace reads header.*
            name = "header." + name[len("headers."):]
        if name.startswith(_REFUSED_PROPERTIES):
            raise CompactionError(f"catalog service property '{name}' is not accepted (it names a class "
                                  "to import)")
        props.append((name, str(v)))
    table_id = None
    if opts.get(TABLE_ID):
        try:
            ident = json.loads(opts[TABLE_ID])
        except ValueError:
            ident = None
        if not isinstance(ident, list) or not ident or not all(isinstance(p, str) and p for p in ident):
            raise CompactionError(f"engine: storage option {TABLE_ID} is not a table identifier")
        table_id = tuple(ident)
    return Service(impl, tuple(sorted(props)), table_id, tuple(sorted(lance_options(opts).items())))


def lance_options(storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """The storage options Lance gets: without the reserved catalog-service keys."""
    return {k: v for k, v in (storage_options or {}).items() if not k.startswith(PREFIX)}


def for_table(storage_options: Mapping[str, str] | None, table_id: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The storage options of one table of the catalog (its id added) when the catalog is a
    service; the options unchanged otherwise."""
    opts = dict(storage_options or {})
    if opts.get(IMPL):
        opts[TABLE_ID] = json.dumps(list(table_id))
    return opts


def for_entry(storage_options: Mapping[str, str] | None, namespace: str, name: str) -> dict[str, str]:
    """:func:`for_table` of a listed table (a warehouse-wide request's ``namespace``, dotted, and
    ``table``): the JVM lists no service namespace whose name holds a dot."""
    return for_table(storage_options, [p for p in namespace.split(".") if p] + [name])


def unreachable(service: Service, error: BaseException) -> CompactionError:
    """The error for a service that failed to answer: it names the service, never its headers."""
    text = redact(f"{type(error).__name__}: {error}", {**dict(service.storage), **dict(service.properties)})
    return CompactionError(f"{service.shown} did not answer: {text}")


class RefusedLocation(CompactionError):
    """A table whose location the service gives is refused: a spelling Lance would read as
    another location (:class:`UnreadableLocation`), or (Glue) a location outside the catalog's
    ``root``. Listings leave such a table out; a statement naming it fails with this."""

    def __init__(self, message: str, location: str | None) -> None:
        super().__init__(message, kind="invalid")
        self.location = location


class UnreadableLocation(RefusedLocation):
    """A location Lance would read as another one (runtime/locations.py). Its table is never
    opened; the JVM's catalog, which checks every location the same way before anything else,
    is handed it as the service gave it (catalog/namespaces.py), so that its own refusal names
    the table and its listings leave it out."""


def glue_root(service: Service) -> str:
    """A Glue catalog's ``root``, where its Lance tables must lie (deny by default: Glue is
    shared with other tools, and a table's location there is whatever its last writer set);
    refused when missing or not in normal form."""
    root = (dict(service.properties).get("root") or "").strip()
    if not root:
        raise CompactionError(f"{service.shown}: impl=glue needs the catalog's root "
                              "(spark.sql.catalog.<catalog>.root, e.g. s3://bucket/lance): where its Lance tables "
                              "are; a table Glue places outside it is refused", kind="invalid")
    why = reinterpreted(root)
    if why is not None:
        raise CompactionError(f"{service.shown}: root '{vended.printable(root, 300)}' is refused: it holds {why}; "
                              "write it in normal form", kind="invalid")
    return root


class _Checked:
    """The service's client, as Lance and the engine use it: every location checked, vended
    secrets remembered for redaction, a missing table said as Lance Namespace says it. Lance
    calls it back (from its own threads) to refresh storage options."""

    def __init__(self, inner: Any, service: Service) -> None:
        self._inner = inner
        self._service = service

    def namespace_id(self) -> str:
        return self._inner.namespace_id()

    def describe_table(self, request: Any) -> Any:
        """The service's DescribeTable, checked: the location Lance reads as written (and, for
        Glue, under ``root``), the vended storage options credentials only or the operator's own
        values (runtime/vended.py). Every caller gets this answer or the refusal, Lance's own
        opens and credential refreshes included, before anything reaches the table's store."""
        from lance_namespace.errors import NamespaceNotFoundError, TableNotFoundError

        if isinstance(request, Mapping):  # Lance's refreshes ask with a dict ({"id", "vend_credentials"})
            from lance import namespace as lance_ns

            request = lance_ns.DescribeTableRequest.model_validate(dict(request))
        try:
            response = translated(self._inner.describe_table, request)
        except (TableNotFoundError, NamespaceNotFoundError):
            raise
        except Exception as e:
            raise unreachable(self._service, e) from None
        remember_vended(response.storage_options)
        table = vended.printable(".".join(request.id or []), 300)
        location = response.location
        why = reinterpreted(location) if isinstance(location, str) else "no location"
        if why is not None:
            raise UnreadableLocation(f"{self._service.shown}: table {table}: the location it gave, "
                                     f"'{vended.printable(location, 300)}', is refused: it holds {why}",
                                     location if isinstance(location, str) else None)
        if self._service.impl == "glue":
            root = glue_root(self._service)
            if not inside(location, root):
                raise RefusedLocation(f"{self._service.shown}: table {table}: the location the catalog service "
                                      f"gives, '{vended.printable(location, 300)}', is outside the catalog's root "
                                      f"{root}; refused", location)
        vended.check(response.storage_options, dict(self._service.storage), location, self._service.shown, table)
        return response

    def refused_location(self, table_id: list[str]) -> str | None:
        """Why the table's location is refused (for a listing to leave it out), None when it is
        not (or the table is gone)."""
        from lance import namespace as lance_ns
        from lance_namespace.errors import NamespaceNotFoundError, TableNotFoundError

        try:
            self.describe_table(lance_ns.DescribeTableRequest(id=list(table_id)))
        except RefusedLocation as e:
            return e.message
        except (TableNotFoundError, NamespaceNotFoundError):
            return None
        return None

    @property
    def service(self) -> Service:
        return self._service

    def namespace_exists(self, request: Any) -> Any:
        from lance import namespace as lance_ns
        from lance_namespace.errors import UnsupportedOperationError

        try:
            return translated(self._inner.namespace_exists, request)
        except UnsupportedOperationError:  # Glue's: a namespace exists when it can be described
            return translated(self._inner.describe_namespace, lance_ns.DescribeNamespaceRequest(id=request.id))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def translated(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, with a missing table or namespace raised as Lance Namespace's own
    errors: the Python implementations of lance-namespace-impls (Glue) raise ``RuntimeError("Table
    does not exist: ...")`` instead."""
    from lance_namespace.errors import NamespaceNotFoundError, TableNotFoundError

    try:
        return call(*args, **kwargs)
    except RuntimeError as e:
        text = str(e)
        if text.startswith("Table does not exist"):
            raise TableNotFoundError(text) from None
        if text.startswith("Namespace does not exist"):
            raise NamespaceNotFoundError(text) from None
        raise


_checked_cls: type | None = None


def _checked_class() -> type:
    """:class:`_Checked` as a ``LanceNamespace`` (what Lance accepts as a namespace client):
    every operation of the interface but DescribeTable passed to the service's client as is
    (the base class would answer each with "not supported")."""
    global _checked_cls
    if _checked_cls is None:
        from lance_namespace import LanceNamespace

        def passed(name: str):
            return lambda self, *a, **k: translated(getattr(self._inner, name), *a, **k)

        own = {"describe_table", "namespace_id", "namespace_exists"}
        methods = {n: passed(n) for n in dir(LanceNamespace)
                   if not n.startswith("_") and n not in own and callable(getattr(LanceNamespace, n))}
        _checked_cls = type("CheckedNamespace", (_Checked, LanceNamespace), methods)
    return _checked_cls


_clients: OrderedDict[Service, Any] = OrderedDict()
_clients_lock = threading.Lock()
_MOST_CLIENTS = 16


def client(service: Service) -> Any:
    """The process's client of ``service`` (one per implementation, properties and the
    operator's storage options, which its checks compare vended options with; a table's id is
    not part of it), made on first use."""
    key = Service(service.impl, service.properties, storage=service.storage)
    with _clients_lock:
        found = _clients.get(key)
        if found is not None:
            _clients.move_to_end(key)
            return found
    from lance import namespace as lance_ns

    if service.impl == "glue":
        glue_root(key)  # required before Glue is asked anything
        try:
            from lance_namespace_impls.glue import GlueNamespace
        except ImportError:
            raise CompactionError(f"{service.shown}: impl=glue needs the Python package "
                                  "lance-namespace-impls (with boto3) on the driver and every executor: "
                                  "pip install 'lance-spark-compact[glue]'") from None
        cls = GlueNamespace
    elif service.impl in ("hive2", "hive3"):
        from .catalog_hive import connect as hive

        def cls(**props: str) -> Any:
            try:
                return hive(service.impl, props)
            except ImportError:
                raise CompactionError(f"{service.shown}: impl={service.impl} needs the Python packages "
                                      "lance-namespace-impls, hive-metastore-client and thrift on the driver and "
                                      "every executor: pip install 'lance-spark-compact[hive]'") from None
    elif service.impl in IMPLS:
        cls = {"rest": lance_ns.RestNamespace, "dir": lance_ns.DirectoryNamespace}[service.impl]
    else:
        cls = _namespace_class(service)
    try:
        inner = cls(**dict(service.properties))
    except CompactionError:
        raise
    except Exception as e:
        raise CompactionError(f"{service.shown}: cannot connect: "
                              f"{redact(str(e), {**dict(service.storage), **dict(service.properties)})}") from None
    checked = _checked_class()(inner, key)
    with _clients_lock:
        _clients[key] = checked
        while len(_clients) > _MOST_CLIENTS:
            _clients.popitem(last=False)
    return checked


def _namespace_class(service: Service) -> type:
    """The LanceNamespace class a class-path impl names, imported (the operator's choice)."""
    import importlib

    from lance_namespace import LanceNamespace

    module, _, name = service.impl.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise CompactionError(f"{service.shown}: the class {service.impl} cannot be loaded here ({type(e).__name__}: "
                              f"{e}): it must be importable on the driver and on every executor") from None
    if not (isinstance(cls, type) and issubclass(cls, LanceNamespace)):
        raise CompactionError(f"{service.shown}: {service.impl} is not a LanceNamespace class")
    return cls


def resolved_options(storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """The storage options to reach a service table's files directly (listings, file sessions):
    the operator's, overlaid with what the service gives now; plain options for any other table."""
    service = service_of(storage_options)
    options = lance_options(storage_options)
    if service is None or service.table_id is None:
        return options
    from lance import namespace as lance_ns

    response = client(service).describe_table(lance_ns.DescribeTableRequest(id=list(service.table_id)))
    return {**options, **(response.storage_options or {})}


def commit_arguments(storage_options: Mapping[str, str] | None) -> dict[str, Any]:
    """The arguments of ``LanceDataset.commit`` (by location) that reach the table: for a
    service table the service's storage options, its client and the table's id (so a service
    that manages versions commits the version); the plain storage options otherwise."""
    service = service_of(storage_options)
    options = lance_options(storage_options)
    if service is None or service.table_id is None:
        return {"storage_options": options or None}
    from lance import namespace as lance_ns

    namespace = client(service)
    response = namespace.describe_table(lance_ns.DescribeTableRequest(id=list(service.table_id)))
    return {"storage_options": {**options, **(response.storage_options or {})} or None,
            "namespace_client": namespace, "table_id": list(service.table_id),
            "namespace_client_managed_versioning": getattr(response, "managed_versioning", None) is True}
