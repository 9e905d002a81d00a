"""Arrow data as the JSON rows the JVM reads back into Spark rows (Scala ``JsonRows``): a
row is an array of values in schema order, each written by its type."""
from __future__ import annotations

import base64
import datetime
import decimal
from typing import Any

import pyarrow as pa


_EPOCH_DAY = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)
_MICRO = datetime.timedelta(microseconds=1)


def json_value(v: Any, t: pa.DataType) -> Any:
    """A value of Arrow type ``t`` as the JVM reads it back (Scala ``JsonRows``): structs as
    arrays in field order, maps as objects, decimals as text, binary as base64, dates as days
    and timestamps as microseconds since the epoch."""
    if v is None:
        return None
    if pa.types.is_dictionary(t):
        return json_value(v, t.value_type)
    if pa.types.is_struct(t):
        return [json_value(v.get(f.name), f.type) for f in t]
    if pa.types.is_map(t):
        return {str(k): json_value(x, t.item_type) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [json_value(x, t.value_type) for x in v]
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode()
    if isinstance(v, datetime.datetime):
        epoch = _EPOCH.replace(tzinfo=datetime.timezone.utc) if v.tzinfo else _EPOCH
        return (v - epoch) // _MICRO
    if isinstance(v, datetime.date):
        return (v - _EPOCH_DAY).days
    return v


def json_rows(table: pa.Table) -> list[list]:
    """Rows of ``table`` in schema order, as :func:`json_value` writes values; top-level
    timestamps and dates are cast in Arrow (exact for nanoseconds)."""
    columns = []
    for f, col in zip(table.schema, table.columns):
        t = f.type
        if pa.types.is_timestamp(t):
            col, t = col.cast(pa.timestamp("us", t.tz)).cast(pa.int64()), pa.int64()
        elif pa.types.is_date(t):
            col, t = col.cast(pa.date32()).cast(pa.int32()), pa.int32()
        columns.append([json_value(v, t) for v in col.to_pylist()])
    return [list(r) for r in zip(*columns)] if columns else [[] for _ in range(table.num_rows)]
