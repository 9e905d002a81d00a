"""Carrying concurrent deletions over onto a finished task's new fragments, so that the task
commits at the latest version instead of running again. Runs on the driver.

When a writer deletes (or updates: deletes and appends) rows in fragments a task rewrote,
Lance refuses the task's commit. The rows it deleted since the task's read version are
known (live then, gone now), and so is where each of the task's old rows landed in its new
fragments: Lance's ``RewriteResult.row_addrs`` (old row addresses in new-row order) when
indices needed remapping, else the old fragments' live rows at the read version, in order.
So the same rows are deleted from the new fragments, by Lance itself:

1. the new fragments get ids above the table's highest (``max_fragment_id`` of the latest
   manifest); Lance refuses a commit that would give two fragments one id, so an append
   landing meanwhile makes this try again with fresh ids, never collide;
2. they are committed as a *detached* Append (not part of the table's history) only to get
   fragment handles, on which ``LanceFragment.delete_rows`` writes the deletion files
   (named with those ids) -- a deletion file's name holds its fragment's id, which is why
   ``Compaction.commit``, which assigns new ids itself, cannot take these fragments;
3. one ``Rewrite`` of the old fragments (as they are now) into these is committed at the
   latest version; the detached manifest is then removed.

The cost: indices are not remapped onto carried-over fragments (pylance has no remap call
for a hand-made Rewrite); they count as unindexed -- queries stay exact, scanning them --
until the indices are optimized. Everything else (a fragment gone or its data replaced, a
Merge, a concurrent Rewrite) cannot be carried over and is planned again.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring
from lance import LanceOperation
from lance.file import LanceFileSession
from lance.fragment import FragmentMetadata
from lance.optimize import RewriteResult

from ..runtime import protobuf
from ..runtime.catalog_service import commit_arguments, resolved_options

log = logging.getLogger(__name__)


def max_fragment_id(dataset: lance.LanceDataset) -> int:
    """The highest fragment id the table ever used (manifest field 11, ``max_fragment_id``):
    ids of removed fragments are never handed out again. -1 for a table without fragments."""
    for number, value in protobuf.fields(dataset._ds.serialized_manifest(), "the manifest"):
        if number == 11 and isinstance(value, int):
            return value
    return max((f.fragment_id for f in dataset.get_fragments()), default=-1)


@dataclass
class Carried:
    """A task whose concurrent deletions are carried over: its rewrite group at ``version``."""

    result: RewriteResult
    old_fragments: list[FragmentMetadata]  # as they are at ``version``
    new_fragments: list[FragmentMetadata]  # with ids and the carried deletion files
    deleted: int  # rows deleted concurrently, now deleted in the new fragments


@dataclass
class RebaseOutcome:
    """What carrying over made of a set of conflicted results."""

    carried: list[Carried] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)  # index in the input -> why not


def _live_addresses(dataset: lance.LanceDataset, fragment_ids: list[int]) -> "pa.Array":
    """Row addresses of the live rows of these fragments, sorted (one scan of row addresses)."""
    table = dataset.scanner(columns=[], with_row_address=True,
                            fragments=[dataset.get_fragment(i) for i in fragment_ids]).to_table()
    return table["_rowaddr"].combine_chunks().sort()


def _same_data(a: FragmentMetadata, b: FragmentMetadata) -> bool:
    return [f.path for f in a.files] == [f.path for f in b.files] and a.physical_rows == b.physical_rows


def _deleted_positions(result: RewriteResult, base: lance.LanceDataset,
                       latest: lance.LanceDataset) -> tuple[list[int] | None, str]:
    """Positions, among the task's new rows, of the rows deleted since its read version;
    None (and why) when the change is more than deletions."""
    now = {f.fragment_id: f for f in latest.get_fragments()}
    ids = []
    for old in result.original_fragments:
        current = now.get(old.id)
        if current is None:
            return None, f"fragment {old.id} was removed"
        if not _same_data(old, current.metadata):
            return None, f"fragment {old.id} had its data replaced"
        ids.append(old.id)
    then = _live_addresses(base, ids)  # the task's input rows
    gone = pc.filter(then, pc.invert(pc.is_in(then, value_set=_live_addresses(latest, ids))))
    new_rows = sum(f.physical_rows for f in result.new_fragments)
    raw = json.loads(result.json()).get("row_addrs")
    if raw:  # old row addresses in new-row order (sorted: Lance reads its input in order)
        addresses = pyroaring.BitMap64.deserialize(bytes(raw))
        if len(addresses) != new_rows:
            return None, "the task's row mapping does not match its new rows"
        return sorted(addresses.rank(a) - 1 for a in gone.to_pylist()), ""
    if len(then) != new_rows:
        return None, "the task's new rows do not match its old live rows"
    # Without a mapping the new rows are the input's live rows in fragment order.
    order = sorted(range(len(ids)), key=lambda k: ids[k]) == list(range(len(ids)))
    if not order:
        return None, "the task's fragments are not in id order"
    return pc.index_in(gone, value_set=then).to_pylist(), ""


def _remove_detached(uri: str, storage_options: dict[str, str] | None, version: int) -> None:
    """Remove a detached version's manifest (it was never part of the table's history)."""
    try:
        session = LanceFileSession(uri.rstrip("/"), resolved_options(storage_options) or None)
        for name in session.list("_versions"):
            if name.rsplit("/", 1)[-1].startswith(f"d{version}."):
                session.delete_file(name if name.startswith("_versions") else f"_versions/{name}")
    except (OSError, RuntimeError) as e:  # only tidiness: lance.cleanup removes it too
        log.warning("could not remove detached version %s of %s: %s", version, uri, str(e).splitlines()[0])


def carry_over(uri: str, storage_options: dict[str, str] | None, results: list[RewriteResult],
               base: lance.LanceDataset, latest: lance.LanceDataset) -> RebaseOutcome:
    """Carry the deletions made between ``base`` (the results' read version) and ``latest``
    over onto the results' new fragments; the deletion files are written, nothing is
    committed. Results that cannot be carried over are listed with the reason."""
    outcome = RebaseOutcome()
    plans: list[tuple[int, RewriteResult, list[int]]] = []
    for i, r in enumerate(results):
        positions, why = _deleted_positions(r, base, latest)
        if positions is None:
            outcome.refused[i] = why
        else:
            plans.append((i, r, positions))
    if not plans:
        return outcome
    next_id = max_fragment_id(latest) + 1
    staged: list[tuple[RewriteResult, list[dict], list[int]]] = []
    for _, r, positions in plans:
        news = [json.loads(json.dumps(f.to_json())) for f in r.new_fragments]
        for f in news:
            f["id"] = next_id
            next_id += 1
        staged.append((r, news, positions))
    handles = LanceOperation.Append([FragmentMetadata.from_json(json.dumps(f))
                                     for _, news, _ in staged for f in news])
    detached = lance.LanceDataset.commit(uri, handles, read_version=latest.version, detached=True,
                                         **commit_arguments(storage_options))
    try:
        now = {f.fragment_id: f.metadata for f in latest.get_fragments()}
        for r, news, positions in staged:
            fragments: list[FragmentMetadata] = []
            start = 0
            for f in news:
                n = f["physical_rows"]
                mine = [p - start for p in positions if start <= p < start + n]
                start += n
                meta = FragmentMetadata.from_json(json.dumps(f))
                if mine:
                    meta = detached.get_fragment(f["id"]).delete_rows(mine)
                if meta is not None:  # None: every row of it was deleted concurrently
                    fragments.append(meta)
            outcome.carried.append(Carried(r, [now[o.id] for o in r.original_fragments],
                                           fragments, len(positions)))
    finally:
        _remove_detached(uri, storage_options, detached.version)
    return outcome


def commit_carried(uri: str, storage_options: dict[str, str] | None, carried: list[Carried],
                   version: int) -> lance.LanceDataset:
    """Commit the carried-over tasks as one Rewrite at ``version`` (the version their
    deletions were read from). Raises Lance's OSError on a conflict, like any commit."""
    op = LanceOperation.Rewrite(
        groups=[LanceOperation.RewriteGroup(old_fragments=c.old_fragments, new_fragments=c.new_fragments)
                for c in carried],
        rewritten_indices=[])
    return lance.LanceDataset.commit(uri, op, read_version=version, **commit_arguments(storage_options))


def is_id_collision(error: Exception) -> bool:
    """Lance refused a commit that would give two fragments one id (an append took ours)."""
    return "two fragments with id" in str(error)


def describe(carried: list[Carried]) -> dict[str, Any]:
    """Metrics of carried-over tasks, as ``_commit`` reports Lance's."""
    from .fragments import data_bytes, deleted_rows

    olds = [f for c in carried for f in c.result.original_fragments]
    news = [f for c in carried for f in c.new_fragments]
    return {
        "tasks": len(carried),
        "fragments_removed": len(olds),
        "fragments_added": len(news),
        "files_removed": sum(len(f.files) for f in olds),
        "files_added": sum(len(f.files) for f in news),
        "rows_rewritten": sum(f.physical_rows for c in carried for f in c.result.new_fragments),
        "deleted_rows_removed": deleted_rows(olds),
        "bytes_read": data_bytes(olds),
        "bytes_written": data_bytes(news),
    }
