"""A clustering sort order: parsed from the text a user gives (``sort_order => ...``) and
checked against the table's schema before anything is read.

Grammar (case-insensitive keywords; a column is a name or a back-quoted name)::

    linear := key ("," key)*          key := column [ASC | DESC] [NULLS FIRST | NULLS LAST]
    curve  := (ZORDER | HILBERT) "(" column "," column ("," column)* ")"

As in Spark SQL, ASC puts nulls first and DESC puts them last unless NULLS says otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from ...errors import CompactionError
from ...runtime import identifiers


@dataclass(frozen=True)
class SortKey:
    """One column of the order."""

    column: str
    descending: bool = False
    nulls_first: bool = True

    def arrow(self, name: str | None = None) -> tuple[str, str, str]:
        """This key as a pyarrow sort key (``name``: the column's name in the table sorted)."""
        return (name or self.column, "descending" if self.descending else "ascending",
                "at_start" if self.nulls_first else "at_end")

    def text(self) -> str:
        return (f"{_quote(self.column)} {'DESC' if self.descending else 'ASC'} "
                f"NULLS {'FIRST' if self.nulls_first else 'LAST'}")


@dataclass(frozen=True)
class SortOrder:
    """The keys in order; ``zorder``: the rows are ordered along a space-filling curve through
    the keys' range ids (every key ascending, nulls last) instead of key by key: ``curve``
    'zorder' (the ids' bits interleaved) or 'hilbert' (the Hilbert curve, whose neighbouring
    positions are always neighbouring cells: measured, it clusters better)."""

    keys: tuple[SortKey, ...]
    zorder: bool = False
    curve: str = "zorder"

    @property
    def columns(self) -> list[str]:
        return [k.column for k in self.keys]

    def text(self) -> str:
        """The normalized order, as the result row reports it."""
        if self.zorder:
            return f"{self.curve}({', '.join(_quote(c) for c in self.columns)})"
        return ", ".join(k.text() for k in self.keys)


_NAME = r"(?:`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)"
_KEY = re.compile(rf"^\s*({_NAME})(?:\s+(ASC|DESC))?(?:\s+NULLS\s+(FIRST|LAST))?\s*$", re.I)
CURVES = ("zorder", "hilbert")
_CURVE = re.compile(r"^\s*(zorder|hilbert)\s*\((.*)\)\s*$", re.I | re.S)


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _split(text: str) -> list[str]:
    """Split on commas outside back-quotes."""
    parts, current, quoted = [], "", False
    for ch in text:
        if ch == "`":
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts


def parse_sort_order(text: str, table: str) -> SortOrder:
    """Parse ``text``; a malformed order gets an error naming the part at fault."""
    def bad(why: str) -> CompactionError:
        return CompactionError(f"table {table}: sort_order {text!r} is not valid: {why}")

    if not text or not text.strip():
        raise bad("it is empty; expected 'col [ASC|DESC] [NULLS FIRST|LAST], ...', 'zorder(a, b, ...)' "
                  "or 'hilbert(a, b, ...)'")
    z = _CURVE.match(text)
    if z:
        curve = z.group(1).lower()
        names = [p.strip() for p in _split(z.group(2))]
        for n in names:
            if not re.fullmatch(_NAME, n):
                raise bad(f"{curve} takes plain column names, got {n!r}")
        columns = [_column(_unquote(n), table) for n in names]
        if len(columns) < 2:
            raise bad(f"{curve} needs at least two columns (for one column, sort by it: "
                      f"sort_order => '{_quote(columns[0]) if columns and columns[0] else 'col'}')")
        _no_duplicates(columns, bad)
        return SortOrder(tuple(SortKey(c, False, False) for c in columns), zorder=True, curve=curve)
    m = re.search(r"\b(zorder|hilbert)\s*\(", text, re.I)
    if m:
        raise bad(f"{m.group(1).lower()}(...) must be the whole sort order, not one of its keys")
    keys = []
    for part in _split(text):
        m = _KEY.match(part)
        if not m:
            raise bad(f"{part.strip()!r} is not 'column [ASC|DESC] [NULLS FIRST|NULLS LAST]'")
        descending = (m.group(2) or "asc").lower() == "desc"
        nulls = m.group(3)
        keys.append(SortKey(_column(_unquote(m.group(1)), table), descending,
                            (nulls.lower() == "first") if nulls else not descending))
    _no_duplicates([k.column for k in keys], bad)
    return SortOrder(tuple(keys))


def _column(name: str, table: str) -> str:
    """A key's column, checked as a column name (runtime/identifiers.py) before the table is read."""
    return identifiers.check(identifiers.COLUMN, table, name, "sort_order")


def _no_duplicates(columns: list[str], bad) -> None:
    seen = set()
    for c in columns:
        if c in seen:
            raise bad(f"column {c!r} appears twice")
        seen.add(c)


def _orderable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_temporal(t) or pa.types.is_decimal(t))


def check_columns(order: SortOrder, schema: pa.Schema, table: str) -> None:
    """Every key is a top-level column of the table whose type can be ordered."""
    names = schema.names
    for k in order.keys:
        if k.column not in names:
            close = [n for n in names if n.lower() == k.column.lower()]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise CompactionError(f"table {table}: sort_order column {k.column!r} does not exist{hint}; "
                                  f"the table's columns are: "
                                  f"{', '.join(identifiers.escape(n, identifiers.SHOWN) for n in names)}")
        t = schema.field(k.column).type
        if pa.types.is_fixed_size_list(t):
            raise CompactionError(f"table {table}: sort_order column {k.column!r} is a vector ({t}): "
                                  "vectors have no order to cluster by")
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) \
                or pa.types.is_struct(t) or pa.types.is_map(t):
            raise CompactionError(f"table {table}: sort_order column {k.column!r} is a nested column ({t}): "
                                  "only numbers, strings, binaries, booleans, dates, times and "
                                  "timestamps can be ordered")
        if not _orderable(t):
            raise CompactionError(f"table {table}: sort_order column {k.column!r} has type {t}, which "
                                  "cannot be ordered (expected a number, string, binary, boolean, date, "
                                  "time or timestamp)")
