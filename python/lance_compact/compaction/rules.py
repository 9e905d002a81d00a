"""When maintenance is due, in one place: what "small" and "over the deletion threshold" mean
for a fragment, the effective target rows per fragment and deletion threshold, when each step
(compact, optimize_indices, cleanup) is due, and the words that say why. Table health, the
layout report, the planners' task reasons, ``maintain`` and ``maintain_warehouse`` all ask here,
so they cannot disagree.

* A fragment is **small** when it holds fewer live rows than the target rows per fragment.
* A fragment is **over the deletion threshold** when its deleted rows are more than the
  threshold's fraction of its physical rows (Lance's ``materialize_deletions_threshold``).
* The **target** is, first found: the call's, the table property's, the catalog setting's,
  the default (for maintenance: the policy, maintenance/policy.py; for a compaction and its
  report: the option given, else the table's ``lance.compaction.*``, else Lance's default --
  what Lance's planner will use). The **threshold** is the option given, else the table's
  ``lance.compaction.materialize_deletions_threshold``, else Lance's 0.1.
* **compact** is due when at least ``min_small_fragments`` fragments (and more than one) are
  small, or any fragment is over the deletion threshold; for a table kept clustered (CLUSTER
  BY), also when :data:`UNCLUSTERED_DUE` of its rows are not yet clustered, or when its
  clustering depth is above ``max_clustering_depth`` and some fragment is not yet clustered.
* **optimize_indices** is due when an index leaves at least ``min_unindexed_fragments``
  fragments uncovered.
* **cleanup** is due when a version other than the current one (and the newest
  ``retain_versions``) was committed before ``now - older_than``.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import numpy as np

from ..options import effective
from .fragment_facts import FragmentFacts
from .fragments import live_and_deleted

TARGET = "target_rows_per_fragment"
THRESHOLD = "materialize_deletions_threshold"


def is_small(live_rows: int, target: int) -> bool:
    """Whether a fragment of ``live_rows`` live rows is small under ``target``."""
    return live_rows < target


def over_deletion_threshold(deleted_rows: int, physical_rows: int, threshold: float) -> bool:
    """Whether a fragment's deleted rows exceed ``threshold`` of its physical rows."""
    return bool(physical_rows) and deleted_rows / physical_rows > threshold


def deleted_fraction(deleted_rows: int, physical_rows: int) -> float:
    return deleted_rows / physical_rows if physical_rows else 0.0


def compaction_target(config: Mapping[str, str], options: Mapping[str, Any]) -> int:
    """The target a compaction uses: the option given, else the table's
    ``lance.compaction.target_rows_per_fragment``, else Lance's default."""
    return effective(config, options, TARGET)


def deletion_threshold(config: Mapping[str, str], options: Mapping[str, Any] | None = None) -> float:
    """The deletion threshold: the option given, else the table's
    ``lance.compaction.materialize_deletions_threshold``, else Lance's default."""
    return effective(config, options or {}, THRESHOLD)


@dataclass(frozen=True)
class Thresholds:
    """What counts as small (``target``) and as over the deletion threshold (``threshold``)."""

    target: int
    threshold: float

    @staticmethod
    def of_maintenance(config: Mapping[str, str], policy: Any) -> "Thresholds":
        """Maintenance's: the policy's target (call > table property > catalog setting >
        default, maintenance/policy.py; ``policy`` is a Policy or maintain's resolved
        arguments), Lance's threshold for the table."""
        target = policy.get(TARGET)
        return Thresholds(int(target) if target is not None else compaction_target(config, {}),
                          deletion_threshold(config))

    @staticmethod
    def of_compaction(config: Mapping[str, str], options: Mapping[str, Any]) -> "Thresholds":
        """A compaction's (and its report's): what Lance's planner will use."""
        return Thresholds(compaction_target(config, options), deletion_threshold(config, options))

    def is_candidate(self, m: Any) -> bool:
        """Whether Lance's planner would take the fragment (metadata ``m``): small, or over
        the deletion threshold."""
        live, deleted = live_and_deleted(m)
        return is_small(live, self.target) or over_deletion_threshold(deleted, m.physical_rows, self.threshold)


@dataclass(frozen=True)
class CompactionNeed:
    """Whether compaction is due, the counts it rests on, and the facts in words."""

    due: bool
    small: int
    heavy: int
    facts: str
    min_small: int
    unclustered_share: float | None = None  # for a table kept clustered (CLUSTER BY)
    max_depth: float | None = None          # its max_clustering_depth

    @property
    def reason(self) -> str:
        if self.due:
            return "due: " + self.facts
        clustered = (f", under {UNCLUSTERED_DUE:.0%} of rows not yet clustered"
                     + (f" and the clustering depth at most {self.max_depth:g}" if self.max_depth is not None else "")
                     if self.unclustered_share is not None else "")
        return (f"not due (fewer than {self.min_small} small fragments and none over the deletion "
                f"threshold{clustered}): {self.facts}")


# A table kept clustered (CLUSTER BY, lance_compact.cluster_by) is due for compaction -- an
# incremental clustering run -- once this share of its rows sits in fragments no run has
# clustered yet, however large those fragments are (appends of full-size fragments would never
# make it due by size alone, and their rows would stay unclustered).
UNCLUSTERED_DUE = 0.1


def compaction_need(fragments: FragmentFacts | Iterable[Any], thresholds: Thresholds, min_small: int,
                    unclustered_share: float | None = None,
                    clustered_ids: frozenset[int] = frozenset(),
                    depth: float | None = None, unclustered_fragments: int = 0,
                    max_depth: float | None = None) -> CompactionNeed:
    """maintain's rule for compaction over the fragments' metadata; ``unclustered_share``: the
    share of rows not yet clustered by the table's own clustering (None when it has none or the
    call does not apply it); ``clustered_ids``: its clustered fragments, which do not count as
    small (a clustering run leaves each range's last fragment short of the target, and an
    incremental run does not merge clustered fragments: a full re-cluster does); ``depth``,
    ``unclustered_fragments``: its clustering depth now and its fragments not yet clustered;
    ``max_depth``: the policy's max_clustering_depth (a run is due above it while a fragment
    is unclustered: depth that only the clustered layers make is not cured by a run).
    ``fragments``: the table's facts (fragment_facts.py), or its fragments' metadata."""
    table = fragments if isinstance(fragments, FragmentFacts) else FragmentFacts.of_metadata(fragments)
    small_ones = table.small(thresholds.target)
    if clustered_ids:
        small_ones &= ~np.isin(table.ids, np.fromiter(clustered_ids, np.int64, len(clustered_ids)))
    small = int(small_ones.sum())
    heavy = int(table.over_threshold(thresholds.threshold).sum())
    facts = (f"{small} fragments under {thresholds.target:,} rows, {heavy} over the deletion threshold "
             f"{thresholds.threshold:g}")
    unclustered = unclustered_share is not None and unclustered_share >= UNCLUSTERED_DUE
    clustered = unclustered_share is not None
    deep = (clustered and depth is not None and max_depth is not None and unclustered_fragments > 0
            and depth > max_depth)
    if clustered:
        facts += f", {unclustered_share:.0%} of rows not yet clustered by the table's clustering"
        if depth is not None:
            facts += (f", clustering depth {depth:g}" + (f" (above {max_depth:g})" if deep else ""))
    return CompactionNeed((small >= min_small and small > 1) or heavy > 0 or unclustered or deep, small, heavy,
                          facts, min_small, unclustered_share, max_depth if clustered else None)


def compaction_due(fragments: Iterable[Any], target: int, threshold: float,
                   min_small: int) -> tuple[bool, int, int, str]:
    """(due, small fragments, fragments over the deletion threshold, facts in words)."""
    need = compaction_need(fragments, Thresholds(target, threshold), min_small)
    return need.due, need.small, need.heavy, need.facts


def lagging_indices(state: Mapping[str, Mapping[str, Any]], min_unindexed: int) -> dict[str, int]:
    """Indices (name -> unindexed fragments) that leave at least ``min_unindexed`` fragments
    uncovered (compaction/fragments.index_state's ``state``): optimize_indices is due for them."""
    return {n: e["unindexed"] for n, e in sorted(state.items()) if e["unindexed"] >= min_unindexed}


def optimize_indices_reason(state: Mapping[str, Any], lagging: Mapping[str, int], min_unindexed: int) -> str:
    if lagging:
        return f"due: unindexed fragments {dict(lagging)}"
    if state:
        return f"not due: every index covers all but fewer than {min_unindexed} fragments"
    return "not due: the table has no indices"


def reclaimable(versions: list[dict[str, Any]], cutoff: datetime, retain: int | None) -> list[int]:
    """Versions cleanup would remove: not the current one nor among the newest ``retain``,
    committed before ``cutoff``."""
    ordered = sorted(versions, key=lambda v: v["version"])
    keep = max(1, retain or 1)
    return [v["version"] for v in ordered[:-keep] if v["timestamp"].astimezone(timezone.utc) < cutoff]


def cleanup_reason(old: list[int], older_than: str, retain: int | None) -> str:
    kept = f"the newest {retain}" if retain else "the current one"
    if old:
        return f"due: {len(old)} versions older than {older_than} (keeping {kept})"
    return f"not due: no version older than {older_than} beyond {kept}"
