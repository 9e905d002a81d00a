"""Bounds on what one run may make the cluster do, whoever chose the numbers behind it (a
CALL's argument, a table property, a catalog's maintain setting): checked on the plan, before
any Spark job runs or anything is written, so a run over a bound is refused with the bound's
name, the value that led there and the limit, and the table's version is unchanged.

The figures are parameters.json's ``bounds`` (the reference lists them). Each is relative to the
table's live rows with a floor, so no real table is refused: a fragment under about 1,000 rows
is never what a user of a columnar format wants, and tables under 100,000 rows get the floor.
(Seen before these bounds: ``target_rows_per_fragment => 1`` planned 1,111,112 partitions for
1,000,000 rows, and wrote one fragment per row on 300.)
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Mapping

from ..errors import CompactionError
from ..options import convert_value, option_specs, spec


class BoundExceeded(CompactionError):
    """A run refused by one of the bounds; ``bound`` is its name."""

    def __init__(self, message: str, bound: str) -> None:
        super().__init__(message)
        self.bound = bound


@lru_cache(maxsize=None)
def bound(name: str) -> Mapping[str, Any]:
    """The spec of bound ``name`` (parameters.json ``bounds``)."""
    return next(b for b in spec()["bounds"] if b["name"] == name)


def allowed(name: str, rows: int) -> int:
    """What bound ``name`` allows for a run over ``rows`` live rows: max(floor, rows /
    rows_per), at most its ceiling."""
    b = bound(name)
    return min(int(b["ceiling"]), max(int(b["floor"]), math.ceil(rows / int(b["rows_per"]))))


def _limit_text(name: str) -> str:
    b = bound(name)
    return f"max({b['floor']:,}, live rows / {b['rows_per']:,}), at most {b['ceiling']:,}"


def check(name: str, table: str, planned: int, rows: int, what: str, cause: str, remedy: str) -> None:
    """Refuse a run that would make ``planned`` of ``what`` (e.g. "range partitions (Spark
    tasks)") for ``rows`` live rows, over what bound ``name`` allows; ``cause`` names the value
    that led there, ``remedy`` what to change."""
    most = allowed(name, rows)
    if planned > most:
        raise BoundExceeded(
            f"table {table}: refused by the bound {name}: {cause} would make {planned:,} {what} "
            f"for {rows:,} live rows; at most {most:,} are allowed ({_limit_text(name)}): {remedy}; "
            "nothing ran and the table is unchanged", name)


def check_table_config(table: str, config: Mapping[str, str] | None) -> None:
    """The table's own ``lance.compaction.<option>`` values within the options' ranges: Lance
    reads them on every plan and task, and one written around ALTER TABLE (which checks them)
    would otherwise reach it unchecked (``num_threads`` = 100000, ``batch_size`` = 1)."""
    for name, o in option_specs().items():
        text = (config or {}).get(f"lance.compaction.{name}")
        if text is None or (o.min is None and o.max is None):
            continue
        try:
            convert_value(o, text, table)
        except CompactionError as e:
            raise CompactionError(e.message.replace(f"option {name}", f"table property lance.compaction.{name}", 1)
                                  + f"; nothing ran and the table is unchanged (ALTER TABLE {table} UNSET "
                                    f"TBLPROPERTIES ('lance.compaction.{name}') removes it)") from None


def target_cause(options: Mapping[str, Any], config: Mapping[str, str] | None, target: int) -> str:
    """Where the run's target_rows_per_fragment came from, in words."""
    if "target_rows_per_fragment" in options:
        return f"target_rows_per_fragment {target:,}"
    if (config or {}).get("lance.compaction.target_rows_per_fragment") is not None:
        return f"target_rows_per_fragment {target:,} (the table property lance.compaction.target_rows_per_fragment)"
    return f"target_rows_per_fragment {target:,}"


def least_target(rows: int, most: int, fill: float = 1.0) -> int:
    """The smallest target rows per fragment that keeps ``rows`` within ``most`` outputs of
    ``target * fill`` rows each."""
    return max(1, math.ceil(rows / (most * fill)))


def check_fragments_written(table: str, estimates: list[tuple[int, int, int | None]],
                            options: Mapping[str, Any], config: Mapping[str, str] | None,
                            target: int) -> None:
    """``max_fragments_written`` over a plan: per task (live rows, fragments Lance writes from
    the row target, bytes read or None); ``max_bytes_per_file`` also cuts a task's output."""
    check_table_config(table, config)
    most_bytes = options.get("max_bytes_per_file")
    rows = sum(r for r, _, _ in estimates)
    planned = sum(max(n, math.ceil(b / most_bytes) if most_bytes and b else 0) for _, n, b in estimates)
    cause = target_cause(options, config, target)
    if most_bytes:
        cause += f" and max_bytes_per_file {most_bytes:,}"
    most = allowed("max_fragments_written", rows)
    check("max_fragments_written", table, planned, rows, "new fragments", cause,
          f"ask for at least {least_target(rows, most):,} rows per fragment"
          + (" and larger files" if most_bytes else ""))
