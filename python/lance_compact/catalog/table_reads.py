"""What the catalog reads of a table on the driver, through the engine: its schema in Spark
types, live rows, version and config (``describe``), and its rows (``read``: for
``distributed_reads=false``, count(*), and checks). Answers are ``(schema DDL, rows)``."""
from __future__ import annotations

import pyarrow as pa

from ..errors import CompactionError
from ..runtime.envelope import Envelope, Result
from ..runtime.json_rows import json_rows
from ..runtime.spark_types import schema_ddl
from ..compaction.clustering.state import shown_config


def describe(request: Envelope) -> Result:
    """The table's schema as Spark DDL, its live rows, its version and its config (what
    SHOW TBLPROPERTIES shows): one row."""
    target = request.require_target()
    ds = target.open()
    return Result("`schema` STRING, `rows` BIGINT, `version` BIGINT, `config` MAP<STRING, STRING>",
                  [(schema_ddl(ds.schema, target.table), ds.count_rows(), ds.version, shown_config(dict(ds.config() or {})))])


DRIVER_READ_MAX_BYTES = 32 << 20


def read(request: Envelope) -> Result:
    """Rows of the table (``columns``, Lance ``filter``, ``version``) read on the driver; a
    read that would return more than ``max_rows`` rows or ``DRIVER_READ_MAX_BYTES`` of data
    is refused (``distributed_reads=false``, or no Python data source)."""
    raw = request.extras
    target = request.require_target()
    ds = target.open()
    table_name = target.table
    columns = raw.get("columns")
    filt = raw.get("filter") or None
    limit = int(raw.get("max_rows", 1_000_000))
    if raw.get("count_only"):
        return Result("`count` BIGINT", [[ds.count_rows(filter=filt)]])
    n = ds.count_rows(filter=filt)
    if n > limit:
        raise CompactionError(
            f"table {table_name}: this driver-side read would return {n:,} rows, more than "
            f"spark.sql.catalog.<name>.read_max_rows = {limit:,}; leave "
            "spark.sql.catalog.<name>.distributed_reads on (the default) to read on the executors")
    names = columns if columns is not None else ds.schema.names
    table = ds.to_table(columns=names, filter=filt)
    if table.nbytes > DRIVER_READ_MAX_BYTES:
        # The rows cross to the JVM as JSON, many times their Arrow size: refuse rather than
        # exhaust the driver's heap.
        raise CompactionError(
            f"table {table_name}: this driver-side read holds {table.nbytes / 2**20:,.0f} MiB of "
            f"data, more than the {DRIVER_READ_MAX_BYTES >> 20} MiB a driver read carries; leave "
            "spark.sql.catalog.<name>.distributed_reads on (the default) to read on the executors")
    schema = pa.schema([ds.schema.field(c) for c in names])
    return Result(schema_ddl(schema), json_rows(table))
