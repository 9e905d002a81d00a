"""Segments into one committed index: merged with bounded fan-in (``merge_existing_index_segments``,
each segment at most once: re-merging a merged segment lost recall upstream, lance issue 7731),
or, for IVF_FLAT, IVF_HNSW_FLAT, IVF_PQ and IVF_RQ on an object store, committed as they are
(:func:`keep_unmerged`), and
committed in one ``commit_existing_index_segments`` against the build's read version, so Lance's
conflict rules apply to a concurrent writer: an append or a delete is fine (new fragments stay
unindexed; deleted rows are masked), a rewrite of indexed fragments conflicts. A segment whose
fragments changed is never committed (Lance would commit it covering nothing: seen with a
segment over 4 fragments of which 3 were compacted away, the index then reported 0 indexed
fragments), so an index never points at wrong rows. Files of segments never committed are
removed (local tables; elsewhere ``CALL lance.cleanup`` does)."""
from __future__ import annotations

import logging
import os
import shutil
from typing import Any, Iterable, Sequence

import lance

log = logging.getLogger(__name__)


def is_conflict(error: BaseException) -> bool:
    """Whether Lance refused a commit because of a concurrent writer (retryable)."""
    text = str(error).lower()
    return "commit conflict" in text or "preempted by concurrent transaction" in text


# Types whose uncommitted segment is a staging layout that a merge finalizes, even alone: an
# INVERTED segment is ``staging/part_*`` files (seen committed alongside other segments: queries
# failed, "tokens.lance not found"); pylance's docstring asks NGRAM segments to be merged before
# commit when a deferred compaction came between.
MERGE_ALONE = frozenset({"INVERTED", "FTS", "NGRAM"})


def on_object_store(uri: str) -> bool:
    """Whether ``uri`` is on an object store (any scheme but ``file``), not a local disk."""
    return "://" in uri and not uri.startswith("file://")


# Vector types whose segments are committed as they are on an object store: pylance 14.0.2's
# merge is a chain of round trips there. Seen through a latency proxy at 20 ms a request, 100,000 x
# 128-d, 316 partitions, 4 segments of 25,000: IVF_FLAT's merge made 3,707 GETs of 16 B to 64 KiB,
# 69 s (issue 45: 0.41 s on local disk for 4x the rows), IVF_HNSW_FLAT's past 60 s; IVF_PQ's and
# IVF_RQ's about 70 requests, 1.4-1.5 s of a 4.2-4.6 s build (7 round trips a segment before any
# data). Segments built with one shared model (centroids, PQ codebook, RaBitQ rotation) answer as
# the merged index: IVF_PQ the same ids and distances on 50 of 50 queries, IVF_RQ the same ids
# (distances within 0.15, its estimates) and the same recall (pylance 14.0.2, 4 segments of
# 5,000 x 32-d, nprobes 4). Not IVF_HNSW_PQ or IVF_HNSW_SQ: their kept segments answered
# differently from the merged index (44 and 0 of 50 queries).
UNMERGED_ON_STORES = frozenset({"IVF_FLAT", "IVF_HNSW_FLAT", "IVF_PQ", "IVF_RQ"})


def keep_unmerged(uri: str, index_type: str, segments: int, most: int) -> bool:
    """Whether a new vector index's ``segments`` (built with one shared model) are committed as
    they are, not merged: a :data:`UNMERGED_ON_STORES` type on an object store, at most ``most``
    segments (the segments an index keeps, tiers.MAX_SEGMENTS). A query of such an index searches
    every segment with the same model and returns the merged index's answers (equal top-10 of
    exhaustive searches, tests/test_object_store.py), at more reads per query (a cold IVF_FLAT
    query at nprobes 16: 182 requests for 4 segments, 53 merged). On local disk merging stays: it is
    cheap and one segment is the fastest to query."""
    return on_object_store(uri) and index_type.upper() in UNMERGED_ON_STORES and 1 < segments <= most


def merge_segments(ds: lance.LanceDataset, segments: Sequence[Any], fan_in: int, index_type: str = "") -> list[Any]:
    """``segments`` (``lance.dataset.Index``) merged in runs of at most ``fan_in``, in their
    order, each run once; a run of one stays as it is (but for :data:`MERGE_ALONE` types). The
    merged segments (new files; the inputs' files are then unreferenced) in order."""
    out = []
    for i in range(0, len(segments), max(2, fan_in)):
        run = list(segments[i:i + max(2, fan_in)])
        alone = len(run) == 1 and index_type.upper() not in MERGE_ALONE
        out.append(run[0] if alone else ds.merge_existing_index_segments(run))
    return out


def fragment_fingerprint(ds: lance.LanceDataset, ids: Iterable[int]) -> dict[int, tuple] | None:
    """Per fragment id: its data files and physical rows at ``ds`` (None when one is gone)."""
    out = {}
    for i in ids:
        f = ds.get_fragment(i)
        if f is None:
            return None
        m = f.metadata
        out[i] = (tuple(sorted(d.path for d in m.files)), m.physical_rows)
    return out


def unchanged(read: lance.LanceDataset, latest: lance.LanceDataset, ids: Iterable[int]) -> bool:
    """Whether fragments ``ids`` hold the same files and rows at ``latest`` as at ``read`` (a
    deletion since is fine: the index masks deleted rows)."""
    ids = list(ids)
    before, after = fragment_fingerprint(read, ids), fragment_fingerprint(latest, ids)
    return before is not None and before == after


def commit_segments(ds: lance.LanceDataset, name: str, column: str, segments: Sequence[Any]) -> int:
    """Commit ``segments`` as index ``name`` on ``column`` against ``ds``'s version (its read
    version: a concurrent writer's change is checked by Lance); the new version. An index of
    the same name is replaced in the same commit when the segments were built with
    ``replace``."""
    ds.commit_existing_index_segments(name, column, list(segments))
    return ds.latest_version


def segment_uuids(segments: Iterable[Any]) -> list[str]:
    return [str(s.uuid) for s in segments]


def remove_segments(uri: str, latest: lance.LanceDataset, uuids: Iterable[str]) -> int:
    """Delete the folders (``_indices/<uuid>``) of segments never committed: local tables only
    (elsewhere ``CALL lance.cleanup`` removes them). A segment the latest version's indices
    reference is kept whatever happened. Returns how many it removed."""
    if "://" in uri and not uri.startswith("file://"):
        return 0
    root = uri[len("file://"):] if uri.startswith("file://") else uri
    referenced = {str(s.uuid) for i in latest.describe_indices() for s in i.segments} \
        if hasattr(latest, "describe_indices") else set()
    removed = 0
    for u in set(uuids) - referenced:
        folder = os.path.join(root, "_indices", u)
        if os.path.isdir(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def remove_unreferenced(target: Any, uuids: list[str], what: str, latest: Any = None) -> None:
    """After a run (``what``: create_index, optimize_indices): remove the segment folders it
    wrote that no index of the latest version holds (``latest``: the version the run committed,
    else the table is opened). Never fails the run: what is left, ``CALL lance.cleanup`` removes."""
    if not uuids:
        return
    try:
        removed = remove_segments(target.uri, latest if latest is not None else target.open(), uuids)
        log.info("table %s: %s: removed %d unreferenced index segment folders", target.table, what, removed)
    except Exception as e:  # the run's outcome stands
        log.warning("table %s: %s: could not remove uncommitted index segments: %s", target.table, what, e)
