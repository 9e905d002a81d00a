"""The clustering kept with the table: the table property ``lance_compact.cluster_by`` (in the
Lance table's own config, so it travels with the table), set by ``ALTER TABLE t CLUSTER BY
(a, b)`` / ``CLUSTER BY NONE`` or ``SET / UNSET TBLPROPERTIES ('lance_compact.cluster_by' =
...)``, and applied by ``compact``, ``plan_compaction``, ``maintain`` and ``maintain_warehouse``
when they are given no ``sort_order`` (``sort_order => 'none'``: a plain compaction).

``CLUSTER BY (a)`` is a linear sort by ``a``; ``CLUSTER BY (a, b, ...)`` is ``hilbert(a, b, ...)``
(multi-column clustering on a Hilbert curve, as Delta's liquid clustering: no column dominates,
and it clusters better than a z-order, measured in docs/clustering.md). The value is
checked against the schema when set (the same checks as ``sort_order``) and stored normalized.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa

from ...errors import CompactionError
from ...runtime import identifiers
from .sort_order import SortKey, SortOrder, check_columns, parse_sort_order

CLUSTER_BY_PROPERTY = "lance_compact.cluster_by"
# Keys under this prefix are the clustering's own record (state.py); UNSET may remove them.
STATE_PREFIX = "lance_compact.clustering."
# sort_order => 'none': no clustering for this run, whatever the table's property says.
NO_CLUSTERING = "none"


def checked_property(table: str, text: str, schema: pa.Schema | None) -> str:
    """The normalized sort order for the property, or a clear error naming what is wrong
    (``schema`` None: its columns are checked as names only, before the table is opened)."""
    try:
        order = parse_sort_order(str(text), table)
        if schema is not None:
            check_columns(order, schema, table)
    except CompactionError as e:
        message = e.message.replace("sort_order", f"table property {CLUSTER_BY_PROPERTY}", 1)
        raise CompactionError(message if message.endswith("nothing was changed")
                              else message + "; nothing was changed") from None
    return order.text()


def check_names(table: str, set_: dict[str, Any], cluster_by: list[list[str]] | None) -> None:
    """Before the table is opened: the columns an ALTER TABLE names (``CLUSTER BY (a, b)``, the
    property's sort order), each checked as a column name (runtime/identifiers.py)."""
    for key, value in set_.items():
        if isinstance(key, str) and key.strip().lower() == CLUSTER_BY_PROPERTY:
            checked_property(table, value, None)
    for path in cluster_by or []:
        for part in path:
            identifiers.check(identifiers.COLUMN, table, part, "CLUSTER BY")


def from_columns(table: str, columns: list[list[str]], schema: pa.Schema) -> str | None:
    """``CLUSTER BY (a, b)``'s columns (each a field path) as the property's value; None for NONE."""
    if not columns:
        return None
    for path in columns:
        if len(path) != 1:
            raise CompactionError(f"table {table}: CLUSTER BY column {identifiers.shown('.'.join(path))} is a nested field; "
                                  "only top-level columns can be clustered by; nothing was changed")
    names = [p[0] for p in columns]
    order = SortOrder(tuple(SortKey(n, False, False) for n in names), zorder=len(names) > 1, curve="hilbert") \
        if len(set(names)) == len(names) else None
    if order is None:
        raise CompactionError(f"table {table}: CLUSTER BY names a column twice ({', '.join(names)}); "
                              "nothing was changed")
    try:
        check_columns(order, schema, table)
    except CompactionError as e:
        raise CompactionError(e.message.replace("sort_order column", "CLUSTER BY column", 1)
                              + "; nothing was changed") from None
    if order.zorder:
        return order.text()
    return SortOrder((SortKey(names[0]),)).text()


def split_changes(table: str, schema: pa.Schema, set_: dict[str, Any], unset: list[str],
                  cluster_by: list[list[str]] | None) -> tuple[dict[str, Any], list[str], dict[str, str | None]]:
    """Take the clustering's keys out of an ALTER TABLE change: (the other SETs, the other
    UNSETs, the clustering's own update: key -> text, None to remove)."""
    rest_set, rest_unset, update = {}, [], {}
    for key, value in set_.items():
        name = key.strip().lower()
        if name == CLUSTER_BY_PROPERTY:
            update[name] = checked_property(table, value, schema)
        elif name.startswith(STATE_PREFIX):
            raise CompactionError(f"table {table}: table property {name} is the clustering's own record, "
                                  "written by clustering runs; it cannot be set (UNSET forgets it: every "
                                  "fragment then counts as unclustered)")
        else:
            rest_set[key] = value
    for key in unset:
        name = key.strip().lower()
        if name == CLUSTER_BY_PROPERTY or name.startswith(STATE_PREFIX):
            if name in update:
                raise CompactionError(f"table {table}: table property {name} is both set and unset")
            update[name] = None
        else:
            rest_unset.append(key)
    if cluster_by is not None:
        update[CLUSTER_BY_PROPERTY] = from_columns(table, cluster_by, schema)
    return rest_set, rest_unset, update


def table_sort_order(config: dict[str, str] | None) -> str | None:
    """The table's clustering (its property), or None."""
    value = (config or {}).get(CLUSTER_BY_PROPERTY)
    return value if value and value.strip() else None


def effective_sort_order(given: str | None, config: dict[str, str] | None) -> str | None:
    """The order a run clusters by: the one given, else the table's; None for a plain
    compaction (``'none'`` given, or no clustering)."""
    if given is not None:
        return None if given.strip().lower() == NO_CLUSTERING else given
    return table_sort_order(config)


def with_table_clustering(request: Any, config: dict[str, str] | None) -> Any:
    """``request`` (a CompactionRequest) with its run's sort_order resolved against the table's
    clustering; a request whose sort_order was taken from the table remembers it
    (``run['sort_order_from_table']``) so an error can say where the order came from."""
    given = request.run.get("sort_order")
    order = effective_sort_order(given, config)
    if order is None and request.run.get("full"):
        raise CompactionError(f"table {request.table}: full => true re-clusters a table; it needs a sort_order "
                              f"or the table's clustering (table property {CLUSTER_BY_PROPERTY}), and this "
                              "compaction has neither")
    if order is None and request.run.get("require_sort_order"):
        raise CompactionError(f"table {request.table}: strategy 'sort' rewrites rows in an order; it needs a "
                              f"sort_order or the table's clustering (table property {CLUSTER_BY_PROPERTY}), "
                              "and this compaction has neither")
    run = dict(request.run)
    run["sort_order"] = order
    if given is None and order is not None:
        run["sort_order_from_table"] = True
    return replace(request, run=run)


def clustering_step(params: dict[str, Any], options: dict[str, Any], sort_order: str | None,
                    config: dict[str, str] | None, max_bytes: int | None) -> bool:
    """For maintain's compaction step: put the call's ``sort_order`` into the compaction's
    ``params`` and, when the step clusters (the call's order, else the table's), its
    ``max_bytes`` budget into ``options`` as the incremental run's ``max_source_bytes``; True
    when it clusters."""
    if sort_order is not None:
        params["sort_order"] = sort_order
    clustered = effective_sort_order(sort_order, config) is not None
    if clustered and max_bytes is not None:
        options["max_source_bytes"] = str(max_bytes)
    return clustered
