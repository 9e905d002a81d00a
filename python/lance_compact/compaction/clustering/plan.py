"""What a clustering run rewrites: the group of source fragments (today: every fragment of
the table but the excluded ones, clustered together), and how many range partitions the sort
uses so each Spark task holds about one target-size fragment of rows."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import lance

from ...errors import CompactionError
from ...options import effective
from .sort_order import SortOrder


# Partitions are planned this full: bounds come from a sample, so a partition's size is off
# by a few percent, and one just over the target would otherwise end in a tiny fragment.
FILL = 0.9


@dataclass(frozen=True)
class ClusterGroup:
    """Source fragments rewritten together into one Rewrite group, and their sizes (from the
    manifest: nothing is read)."""

    fragment_ids: tuple[int, ...]
    rows: int
    deleted_rows: int
    bytes: int


@dataclass(frozen=True)
class ClusterPlan:
    """The plan at ``read_version``: the group, the partitions, the target rows per fragment."""

    read_version: int
    order: SortOrder
    group: ClusterGroup
    partitions: int
    target_rows: int
    max_bytes_per_file: int | None

    def reason(self) -> str:
        return (f"cluster by {self.order.text()}: {self.group.rows} live rows range-partitioned into "
                f"{self.partitions} sorted partitions of about {self.target_rows} rows")


def _fragment_bytes(meta: Any) -> int:
    return sum(f.file_size_bytes or 0 for f in meta.data_files())


def plan_clustering(dataset: lance.LanceDataset, order: SortOrder, options: dict[str, Any],
                    table: str) -> ClusterPlan:
    """The plan on ``dataset`` (its version is the read version)."""
    excluded = set(options.get("excluded_fragment_ids") or [])
    metas = [f.metadata for f in dataset.get_fragments() if f.fragment_id not in excluded]
    rows = sum(m.num_rows for m in metas)  # live rows (num_deletions are not in it)
    if rows == 0:
        raise CompactionError(f"table {table}: no live rows to cluster at version {dataset.version} "
                              f"({len(metas)} fragments considered)")
    target = int(effective(dataset.config(), options, "target_rows_per_fragment"))
    group = ClusterGroup(tuple(m.id for m in metas), rows, sum(m.num_deletions for m in metas),
                         sum(_fragment_bytes(m) for m in metas))
    partitions = max(1, math.ceil(rows / (target * FILL)))
    return ClusterPlan(dataset.version, order, group, partitions, target,
                       options.get("max_bytes_per_file"))
