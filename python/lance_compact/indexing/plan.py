"""The fragment groups of an index build, one segment (one Spark task) each: whole fragments in
id order, a group ending at ``rows_per_segment`` live rows or ``bytes_per_segment`` estimated
bytes of the column, the number of groups bounded (``max_index_segments``); and the dry run's
plan (groups, rows, estimated bytes, training sample size)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import lance
import pyarrow as pa

from ..options import spec

# A group of at least this many rows by default: a segment costs a Spark task and a merge input.
MIN_DEFAULT_ROWS = 1_000_000
# A new index's groups are merged into one segment at its commit (16 at a time), so they may be
# smaller: a 1M-row table on 2 cores is 4 tasks, not 1 (128 MiB of 128-d float32 vectors a group).
MIN_BUILD_ROWS = 262_144


@dataclass(frozen=True)
class FragmentSize:
    """One fragment as the plan sees it."""

    fragment_id: int
    rows: int  # live rows
    estimated_bytes: int  # of the indexed column


@dataclass(frozen=True)
class Group:
    """Fragments built into one segment."""

    fragment_ids: tuple[int, ...]
    rows: int
    estimated_bytes: int

    def as_row(self) -> list[Any]:
        return [list(self.fragment_ids), self.rows, self.estimated_bytes]


def allowed(name: str, rows: int) -> int:
    """What bound ``name`` (parameters.json ``bounds``) allows for ``rows`` live rows: max(floor,
    rows / rows_per), at most its ceiling (compaction/bounds.py reads the same figures)."""
    b = next(b for b in spec()["bounds"] if b["name"] == name)
    return min(int(b["ceiling"]), max(int(b["floor"]), math.ceil(rows / int(b["rows_per"]))))


def value_bytes(t: pa.DataType) -> int | None:
    """Bytes of one value of a fixed-width type (a vector: dimension x element), else None."""
    if hasattr(t, "storage_type"):
        t = t.storage_type
    if pa.types.is_fixed_size_list(t):
        inner = value_bytes(t.value_type)
        return None if inner is None else inner * t.list_size
    try:
        return max(1, t.bit_width // 8)
    except ValueError:
        return None


def fragment_sizes(ds: lance.LanceDataset, column: str) -> list[FragmentSize]:
    """Every fragment of ``ds`` with live rows: its rows and the column's estimated bytes (exact
    for a fixed-width column; else the bytes of the fragment's data files that hold the column, a
    bound from above: shared evenly among the table's columns, one large text column beside many
    small ones was estimated at a hundredth of its size, and its full-text build was sent to the
    engine worker, where it ran into the worker's time limit)."""
    width = value_bytes(ds.schema.field(column).type)
    field_id = ds.lance_schema.field(column).id() if width is None else None
    out = []
    for f in ds.get_fragments():
        meta = f.metadata
        deleted = meta.deletion_file.num_deleted_rows if meta.deletion_file is not None else 0
        rows = max(0, (meta.physical_rows or 0) - (deleted or 0))
        if rows == 0:
            continue
        if width is not None:
            size = rows * width
        else:
            size = sum(d.file_size_bytes or 0 for d in meta.files if field_id in d.fields)
        out.append(FragmentSize(f.fragment_id, rows, size))
    return out


def decoded_within(ds: lance.LanceDataset, column: str, limit: float,
                   fragment_ids: Sequence[int] | None = None) -> bool:
    """Whether ``column`` (of ``fragment_ids``, else every fragment) holds at most ``limit``
    bytes once decoded: what an index build in the engine worker reads and tokenizes. A
    fixed-width column's estimate is exact (True); a variable-width one is read until the
    limit is passed, so at most about ``limit`` bytes are decoded. Its files cannot say: Lance
    compresses text (81 MB of repeated words were 0.04 MB of files, and their full-text build
    took 47 s), and a build's modelled cost counts rows."""
    if value_bytes(ds.schema.field(column).type) is not None or (fragment_ids is not None and not fragment_ids):
        return True
    fragments = None if fragment_ids is None else [ds.get_fragment(i) for i in fragment_ids]
    seen = 0
    for batch in ds.scanner(columns=[column], fragments=fragments, batch_size=16).to_batches():
        seen += batch.column(0).nbytes
        if seen > limit:
            return False
    return True


def group(fragments: Sequence[FragmentSize], rows_per_segment: int, bytes_per_segment: int,
          most: int) -> list[Group]:
    """Whole fragments in id order into groups of about ``rows_per_segment`` live rows (or
    ``bytes_per_segment``), at most ``most`` groups (the row target is raised to keep within)."""
    total = sum(f.rows for f in fragments)
    rows_per_segment = max(rows_per_segment, math.ceil(total / max(1, most)))
    groups: list[Group] = []
    ids: list[int] = []
    rows = size = 0
    for f in sorted(fragments, key=lambda f: f.fragment_id):
        if ids and (rows + f.rows > rows_per_segment or size + f.estimated_bytes > bytes_per_segment) \
                and len(groups) + 1 < most:
            groups.append(Group(tuple(ids), rows, size))
            ids, rows, size = [], 0, 0
        ids.append(f.fragment_id)
        rows += f.rows
        size += f.estimated_bytes
    if ids:
        groups.append(Group(tuple(ids), rows, size))
    return groups


def default_rows_per_segment(total_rows: int, cores: int, floor: int = MIN_DEFAULT_ROWS) -> int:
    """The live rows spread over twice the cluster's cores, at least ``floor`` (the segments an
    index keeps: :data:`MIN_DEFAULT_ROWS`)."""
    return max(floor, math.ceil(total_rows / max(1, 2 * cores)))


def plan_groups(ds: lance.LanceDataset, column: str, build: Mapping[str, Any], cores: int,
                only: set[int] | None = None) -> list[Group]:
    """The groups of ``ds``'s fragments (``only``: just these fragment ids) by the build's
    settings (rows_per_segment, bytes_per_segment)."""
    sizes = [f for f in fragment_sizes(ds, column) if only is None or f.fragment_id in only]
    total = sum(f.rows for f in sizes)
    per = build.get("rows_per_segment") or default_rows_per_segment(total, cores, MIN_BUILD_ROWS)
    return group(sizes, int(per), int(build.get("bytes_per_segment") or (2 << 30)),
                 allowed("max_index_segments", total))
