"""What a clustering run rewrites: its groups of source fragments (a full run: one group of
every fragment but the excluded ones, since a global sort needs them all; an incremental run:
one group per independent component of overlapping key ranges it picked), and how many range
partitions each group's sort uses so each Spark task holds about one target-size fragment of
rows. Each group is one Lance RewriteGroup: its old fragments -> its new ones."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import lance

from .. import bounds
from ...errors import CompactionError
from ...options import effective
from .sort_order import SortOrder
from .state import components, depth


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
    partitions: int = 1  # range partitions (Spark tasks) of its sort


def _group(metas: list[Any], target: int) -> ClusterGroup:
    rows = sum(m.num_rows for m in metas)  # live rows (num_deletions are not in it)
    return ClusterGroup(tuple(m.id for m in metas), rows, sum(m.num_deletions for m in metas),
                        sum(_fragment_bytes(m) for m in metas), max(1, math.ceil(rows / (target * FILL))))


@dataclass(frozen=True)
class ClusterPlan:
    """The plan at ``read_version``: the groups (none: nothing to do), the target rows per
    fragment; ``incremental``: the groups are what an incremental run picked (``left``:
    fragments needing clustering that the budgets left for a later run)."""

    read_version: int
    order: SortOrder
    groups: tuple[ClusterGroup, ...]
    target_rows: int
    max_bytes_per_file: int | None
    incremental: bool = False
    left: int = 0

    @property
    def partitions(self) -> int:
        return sum(g.partitions for g in self.groups)

    @property
    def fragment_ids(self) -> list[int]:
        return [f for g in self.groups for f in g.fragment_ids]

    def reason(self, group: ClusterGroup | None = None) -> str:
        """Why ``group`` (or the plan when it has none) is rewritten, for plan_compaction."""
        if group is None:
            return (f"cluster by {self.order.text()}: nothing to do (no fragment unclustered, overlapping, "
                    "or holding a row the where matches)")
        how = (f"incremental: group of {len(group.fragment_ids)} unclustered or overlapping fragments, "
               f"one of {len(self.groups)} independent groups"
               + (f", {self.left} fragments left for a later run by the budgets" if self.left else "")
               if self.incremental else "full")
        return (f"cluster by {self.order.text()} ({how}): {group.rows} live rows range-partitioned into "
                f"{group.partitions} sorted partitions of about {self.target_rows} rows")


def _fragment_bytes(meta: Any) -> int:
    return sum(f.file_size_bytes or 0 for f in meta.data_files())


BUDGETS = ("max_source_fragments", "max_source_rows", "max_source_bytes")

# Size-tiered merging, as in an LSM tree: new rows are clustered into a layer of their own, and an
# earlier layer is merged into them only once it holds no more rows than they do (so each row is
# rewritten about log2(table / appends) times, not once per run), or while a component would
# otherwise hold more than MAX_LAYERS layers.
MERGE_RATIO = 1.0
MAX_LAYERS = 8


def layers(ids: list[int], ranges: dict[int, tuple[int, int]]) -> list[list[int]]:
    """Clustered fragments as layers of ranges that do not overlap (first fit, by lowest code;
    sharing an end code is no overlap, as in ``components``): a sorted run is one layer."""
    out: list[list[int]] = []
    ends: list[int] = []
    for f in sorted(ids, key=lambda f: (ranges[f][0], ranges[f][1], f)):
        lo, hi = ranges[f]
        for i, end in enumerate(ends):
            if lo >= end:
                out[i].append(f)
                ends[i] = hi
                break
        else:
            out.append([f])
            ends.append(hi)
    return out


def tiered(component: list[int], unclustered: set[int], ranges: dict[int, tuple[int, int]],
           rows: dict[int, int]) -> list[int]:
    """What to rewrite of one component of overlapping fragments: its unclustered fragments,
    with the earlier layers that are no bigger than what is being clustered (smallest first),
    and more while the component would keep over MAX_LAYERS layers. Empty when that changes
    nothing (no unclustered fragment and at most one layer to merge)."""
    fresh = [f for f in component if f in unclustered]
    old = sorted(layers([f for f in component if f not in unclustered and f in ranges], ranges),
                 key=lambda layer: (sum(rows[f] for f in layer), layer[0]))
    picked, size, merged = list(fresh), sum(rows[f] for f in fresh), 0
    while old and (sum(rows[f] for f in old[0]) <= MERGE_RATIO * size
                   or len(old) + (1 if picked else 0) > MAX_LAYERS):
        layer = old.pop(0)
        picked += layer
        size += sum(rows[f] for f in layer)
        merged += 1
    return sorted(picked) if fresh or merged > 1 else []


def select_incremental(metas: list[Any], known: dict[int, tuple[int, int]],
                       unclustered_ranges: dict[int, tuple[int, int]],
                       options: dict[str, Any]) -> tuple[list[list[int]], int]:
    """What an incremental run rewrites: in each group of fragments whose key ranges overlap
    (the unclustered ones with their ranges read now), what :func:`tiered` picks; deepest group
    first, each whole while the budgets allow, then as much of the next as fits; (the groups
    picked, each sorted, deepest first: each becomes its own Rewrite group; fragments left).
    Fragments with no live rows read (no range) join the first group."""
    by_id = {m.id: m for m in metas}
    unclustered = {m.id for m in metas if m.id not in known}
    ranges = {f: r for f, r in known.items() if f in by_id}
    ranges.update({f: unclustered_ranges[f] for f in unclustered if f in unclustered_ranges})
    rows = {m.id: m.num_rows for m in metas}
    todo = [t for c in components(ranges) if (t := tiered(c, unclustered, ranges, rows))]
    # fragments with no range (no live rows read): rewrite them too
    rangeless = sorted(unclustered - set(ranges))
    todo.sort(key=lambda c: (-depth([ranges[f] for f in c if f in ranges], 0), -len(c), c[0]))
    limits = {k: options.get(k) for k in BUDGETS if options.get(k) is not None}
    used = {"max_source_fragments": 0, "max_source_rows": 0, "max_source_bytes": 0}
    picked: list[list[int]] = []
    wanted = sum(len(c) for c in todo) + len(rangeless)

    def cost(f: int) -> dict[str, int]:
        m = by_id[f]
        return {"max_source_fragments": 1, "max_source_rows": m.num_rows, "max_source_bytes": _fragment_bytes(m)}

    def fits(extra: dict[str, int]) -> bool:
        return all(used[k] + extra[k] <= v for k, v in limits.items())

    def take(members: list[int]) -> list[int]:
        nonlocal used
        got = []
        for f in members:
            if fits(cost(f)):
                got.append(f)
                used = {k: used[k] + cost(f)[k] for k in used}
        return got

    for c in todo:
        whole = {k: sum(cost(f)[k] for f in c) for k in used}
        members = c if fits(whole) else sorted(c, key=lambda f: (f not in unclustered, ranges.get(f, (0, 0))))
        got = take(members)
        if got:
            picked.append(sorted(got))
    extra = take(rangeless)
    if extra:
        if picked:
            picked[0] = sorted(picked[0] + extra)
        else:
            picked.append(extra)
    return picked, wanted - sum(len(g) for g in picked)


def plan_clustering(dataset: lance.LanceDataset, order: SortOrder, options: dict[str, Any],
                    table: str, known: dict[int, tuple[int, int]] | None = None,
                    ranges_of: Callable[[list[int]], dict[int, tuple[int, int]]] | None = None) -> ClusterPlan:
    """The plan on ``dataset`` (its version is the read version): every fragment (a full run,
    ``known`` None), or an incremental run's choice given the record's ranges ``known`` and
    ``ranges_of`` (reads the unclustered fragments' ranges)."""
    excluded = set(options.get("excluded_fragment_ids") or [])
    metas = [f.metadata for f in dataset.get_fragments() if f.fragment_id not in excluded]
    rows = sum(m.num_rows for m in metas)  # live rows (num_deletions are not in it)
    if rows == 0:
        raise CompactionError(f"table {table}: no live rows to cluster at version {dataset.version} "
                              f"({len(metas)} fragments considered)")
    config = dataset.config()
    target = int(effective(config, options, "target_rows_per_fragment"))
    if known is None:
        plan = ClusterPlan(dataset.version, order, (_group(metas, target),), target,
                           options.get("max_bytes_per_file"))
    else:
        unclustered = [m.id for m in metas if m.id not in known]
        picked, left = select_incremental(metas, known, ranges_of(unclustered) if ranges_of else {}, options)
        by_id = {m.id: m for m in metas}
        groups = tuple(_group([by_id[f] for f in ids], target) for ids in picked)
        plan = ClusterPlan(dataset.version, order, groups, target, options.get("max_bytes_per_file"), True, left)
    check_bounds(plan, options, config, table)
    return plan


def check_bounds(plan: ClusterPlan, options: dict[str, Any], config: dict[str, str] | None, table: str) -> None:
    """The run's partitions and the fragments it would write within their bounds (bounds.py),
    before anything is sampled or written."""
    rows = sum(g.rows for g in plan.groups)
    most = bounds.allowed("max_cluster_partitions", rows)
    bounds.check("max_cluster_partitions", table, plan.partitions, rows, "range partitions (Spark tasks)",
                 bounds.target_cause(options, config, plan.target_rows),
                 f"ask for at least {bounds.least_target(rows, most, FILL):,} rows per fragment")
    bounds.check_fragments_written(table, [(g.rows, g.partitions, g.bytes) for g in plan.groups],
                                   options, config, plan.target_rows)
