"""Committing a clustering: one Lance ``Rewrite`` of its groups on the read version, and the
indices it leaves.

A concurrent Delete or Update of a source fragment makes Lance refuse the Rewrite (a
retryable conflict): the rewritten rows were read before that change, so committing them
would resurrect deleted rows. The caller runs the group again at the new version. Indices
keep their fragment bitmaps: the new fragments are not covered until ``optimize_indices``
adds them (queries stay right meanwhile, scanning what is not covered): the run restores them
at its end (``compaction/index_restore.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lance
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from ...runtime.catalog_service import commit_arguments
from ..commit import is_retryable_conflict, remove_uncommitted
from ..fragments import index_state


@dataclass(frozen=True)
class CommitResult:
    """The version committed, or None when a concurrent change conflicted (``conflict``: Lance's words)."""

    version: int | None
    conflict: str | None = None
    dataset: Any = None  # the table as the commit left it (its layout after, said to the Lance tab)


def new_fragments(fragment_json: list[str]) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_json(j) for j in fragment_json]


def commit_rewrite(uri: str, storage_options: dict[str, str], read_version: int,
                   groups: list[tuple[list[FragmentMetadata], list[FragmentMetadata]]]) -> CommitResult:
    """Replace each group's old fragments by its new ones, all in one transaction (one
    version) on ``read_version``."""
    operation = LanceOperation.Rewrite(
        groups=[LanceOperation.RewriteGroup(old_fragments=old, new_fragments=new) for old, new in groups],
        rewritten_indices=[])
    try:
        ds = lance.LanceDataset.commit(uri, operation, read_version=read_version,
                                       **commit_arguments(storage_options))
    except Exception as e:  # Lance's CommitConflictError (an OSError) or its text
        if is_retryable_conflict(e):
            return CommitResult(None, str(e).split(", /")[0][:300])
        raise
    return CommitResult(ds.version, dataset=ds)


def changed_fragments(read: lance.LanceDataset, latest: lance.LanceDataset, fragment_ids: list[int]) -> set[int]:
    """Those of ``fragment_ids`` (as of ``read``) that ``latest`` removed or changed (a
    deletion file, data files): the groups holding them conflict with that change."""
    now = {f.fragment_id: f.metadata for f in latest.get_fragments()}
    out = set()
    for i in fragment_ids:
        before = read.get_fragment(i).metadata
        after = now.get(i)
        if after is None or after.to_json() != before.to_json():
            out.add(i)
    return out


def remove_files(uri: str, dataset: lance.LanceDataset, fragments: list[FragmentMetadata]) -> int:
    """Delete the data files of uncommitted new fragments (:func:`lance_compact.compaction.commit.remove_uncommitted`)."""
    return remove_uncommitted(uri, dataset, (d.path for f in fragments for d in f.data_files()))


def indices_covering(dataset: lance.LanceDataset, fragment_ids: set[int]) -> list[str]:
    """Names of the user indices covering any of ``fragment_ids``."""
    return sorted(n for n, e in index_state(dataset).items() if e["covered"] & fragment_ids)
