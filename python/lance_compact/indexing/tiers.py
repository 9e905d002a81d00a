"""Which of an index's segments an upkeep run merges with the rows it indexes: size-tiered, as an
LSM tree and as the clustering's layers (compaction/clustering/plan.py). The unindexed rows
become a segment of their own; an existing segment joins them only once it holds no more live
rows than what is being built (``MERGE_RATIO`` x), smallest first, so each row is rebuilt about
log2(index / appends) times over the index's life, never once per run: a run's work follows the
new rows, not the index (lancedb issue 1502: pylance's default merged one appended row into a
40M-vector index, 612 s). An index keeps at most ``MAX_SEGMENTS`` segments: past that the smallest
are merged as well. A segment covering no live fragment (all its rows deleted or compacted away)
is dropped by any run that commits."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# The clustering's rule (its MERGE_RATIO): a segment joins what is being built once it is no
# bigger; with equal appends the segments are 1, 2, 4, ... appends in size, as a binary counter.
MERGE_RATIO = 1.0
# Every query searches every segment (an ANN query each segment's partitions), so their number is
# bounded: about log2(index / smallest append) + 1 under MERGE_RATIO, this at most.
MAX_SEGMENTS = 8


@dataclass(frozen=True)
class SegmentSize:
    """One committed segment as the policy sees it: its id, live rows, and the table version
    that last wrote it (newest = largest, for ``num_indices_to_merge``)."""

    uuid: str
    rows: int
    version: int = 0


def pick(segments: Sequence[SegmentSize], new_rows: int, num_to_merge: int | None = None) -> list[str]:
    """The uuids of ``segments`` to merge with ``new_rows`` unindexed rows into one new segment.

    ``num_to_merge`` given (``optimize_indices``' ``num_indices_to_merge``, Lance's meaning): the
    newest that many segments, whatever their size (0: none, the new rows alone). Otherwise
    size-tiered: smallest first, a segment is taken while it holds at most ``MERGE_RATIO`` x the
    rows taken so far (the new rows and the segments already taken), or while the index would
    keep more than ``MAX_SEGMENTS`` segments. Segments with no live rows are always taken (they
    cost nothing to drop). Empty when nothing changes: no new rows and fewer than two segments
    to merge (a lone segment is never rebuilt for nothing)."""
    dead = [s.uuid for s in segments if s.rows <= 0]
    live = [s for s in segments if s.rows > 0]
    if num_to_merge is not None:
        newest = sorted(live, key=lambda s: (-s.version, s.uuid))[:max(0, num_to_merge)]
        picked = dead + [s.uuid for s in newest]
        return picked if new_rows > 0 or len(newest) > 1 else []
    ordered = sorted(live, key=lambda s: (s.rows, s.uuid))
    taken: list[str] = []
    size = new_rows
    while ordered and (ordered[0].rows <= MERGE_RATIO * size
                       or len(ordered) + (1 if size > 0 or taken else 0) > MAX_SEGMENTS):
        s = ordered.pop(0)
        taken.append(s.uuid)
        size += s.rows
    if new_rows <= 0 and len(taken) < 2:
        return []
    return dead + taken


def rule() -> str:
    """The rule in words (docs and a dry run's row)."""
    return (f"size-tiered: the new rows form a segment; an existing segment joins it once it holds at most "
            f"{MERGE_RATIO:g} x the rows being built (smallest first); at most {MAX_SEGMENTS} segments per index")
