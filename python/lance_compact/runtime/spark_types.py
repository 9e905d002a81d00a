"""The one map from a Lance column's Arrow type to Spark's: the Spark SQL type DESCRIBE shows
(:func:`spark_type`) and the Arrow type Spark reads the column as (:func:`arrow_type_for_spark`):
vectors as arrays, unsigned ints widened, large and view types as plain ones, timestamps in
microseconds.

Both come from :data:`RULES`, so they cannot disagree. The JVM turns the engine's JSON rows into
Spark values by Spark type (Scala ``JsonRows``); ``tests/test_catalog_reads.py`` reads a column of
every rule's example types through that path and through the distributed reads.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa

from ..errors import CompactionError
from .identifiers import shown

_t = pa.types


def _same(name: str) -> Callable[[pa.DataType], tuple[str, pa.DataType]]:
    return lambda t: (name, t)


def _as(name: str, read: pa.DataType) -> Callable[[pa.DataType], tuple[str, pa.DataType]]:
    return lambda t: (name, read)


def _array(t: pa.DataType) -> tuple[str, pa.DataType]:
    name, read = spark_and_arrow(t.value_type)
    return f"ARRAY<{name}>", pa.list_(pa.field("element", read))


def quoted(name: str) -> str:
    """A column name as a Spark SQL identifier: in back-quotes, a back-quote in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def _struct(t: pa.DataType) -> tuple[str, pa.DataType]:
    parts = [(f.name, *spark_and_arrow(f.type)) for f in t]
    return ("STRUCT<" + ", ".join(f"{quoted(n)}: {s}" for n, s, _ in parts) + ">",
            pa.struct([pa.field(n, a) for n, _, a in parts]))


def _map(t: pa.DataType) -> tuple[str, pa.DataType]:
    (k, ka), (v, va) = spark_and_arrow(t.key_type), spark_and_arrow(t.item_type)
    return f"MAP<{k}, {v}>", pa.map_(ka, va)


# (which Arrow types, -> (Spark SQL type, Arrow type Spark reads), example Arrow types), in order.
RULES: tuple[tuple[Callable[[pa.DataType], bool], Callable[[pa.DataType], tuple[str, pa.DataType]],
                   tuple[pa.DataType, ...]], ...] = (
    (_t.is_boolean, _same("BOOLEAN"), (pa.bool_(),)),
    (_t.is_int8, _same("TINYINT"), (pa.int8(),)),
    (lambda t: _t.is_int16(t) or _t.is_uint8(t), _as("SMALLINT", pa.int16()), (pa.int16(), pa.uint8())),
    (lambda t: _t.is_int32(t) or _t.is_uint16(t), _as("INT", pa.int32()), (pa.int32(), pa.uint16())),
    (lambda t: _t.is_int64(t) or _t.is_uint32(t), _as("BIGINT", pa.int64()), (pa.int64(), pa.uint32())),
    (_t.is_uint64, _as("DECIMAL(20,0)", pa.decimal128(20, 0)), (pa.uint64(),)),
    (lambda t: _t.is_float16(t) or _t.is_float32(t), _as("FLOAT", pa.float32()), (pa.float16(), pa.float32())),
    (_t.is_float64, _same("DOUBLE"), (pa.float64(),)),
    (_t.is_decimal, lambda t: (f"DECIMAL({t.precision},{t.scale})", t), (pa.decimal128(12, 3),)),
    (lambda t: _t.is_string(t) or _t.is_large_string(t) or _t.is_string_view(t), _as("STRING", pa.string()),
     (pa.string(), pa.large_string())),
    (lambda t: _t.is_binary(t) or _t.is_large_binary(t) or _t.is_fixed_size_binary(t), _as("BINARY", pa.binary()),
     (pa.binary(), pa.large_binary(), pa.binary(2))),
    (_t.is_date, _as("DATE", pa.date32()), (pa.date32(),)),
    # an instant in any zone is read as UTC (Spark's TIMESTAMP: the same instant, Arrow keeps UTC
    # values; a column of 'America/New_York' was refused by Spark's read as a schema mismatch)
    (_t.is_timestamp, lambda t: ("TIMESTAMP", pa.timestamp("us", "UTC")) if t.tz else
     ("TIMESTAMP_NTZ", pa.timestamp("us")),
     (pa.timestamp("ns"), pa.timestamp("us", "UTC"))),
    (lambda t: _t.is_list(t) or _t.is_large_list(t) or _t.is_fixed_size_list(t), _array,
     (pa.large_list(pa.int32()), pa.list_(pa.float32(), 3))),
    (_t.is_struct, _struct, (pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64())), ("t", pa.timestamp("us")),
                                    ("d", pa.date32()), ("m", pa.decimal128(5, 2))]),)),
    (_t.is_map, _map, (pa.map_(pa.string(), pa.int64()),)),
    (_t.is_dictionary, lambda t: spark_and_arrow(t.value_type), (pa.dictionary(pa.int32(), pa.string()),)),
)


def spark_and_arrow(t: pa.DataType) -> tuple[str, pa.DataType]:
    """The Spark SQL type of an Arrow type and the Arrow type Spark reads it as."""
    for matches, convert, _ in RULES:
        if matches(t):
            return convert(t)
    raise CompactionError(f"Arrow type {t} has no Spark type here")


def spark_type(t: pa.DataType) -> str:
    """The Spark SQL type of an Arrow type (fixed-size-list vectors become arrays)."""
    return spark_and_arrow(t)[0]


def arrow_type_for_spark(t: pa.DataType) -> pa.DataType:
    """The Arrow type Spark reads for a Lance column's Arrow type (see :func:`spark_type`)."""
    return spark_and_arrow(t)[1]


def schema_ddl(schema: pa.Schema, table: str | None = None) -> str:
    """A table's schema as Spark DDL; a column of a type Spark has none for is named (with
    ``table``) in the error."""
    out = []
    for f in schema:
        try:
            out.append(f"{quoted(f.name)} {spark_type(f.type)}")
        except CompactionError as e:
            where = f"table {table}: " if table else ""
            raise CompactionError(f"{where}column {shown(f.name)}: {e.message}, so Spark cannot read the table "
                                  "through this catalog (Lance reads it; compaction and maintenance of it "
                                  "work)") from None
    return ", ".join(out)
