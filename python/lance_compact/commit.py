"""Commit: apply finished tasks to the table in one atomic Lance transaction. Runs on the driver.

A concurrent writer's change is never overwritten: Lance rejects a commit whose fragments
changed since its read version. Then the results whose fragments are all unchanged are
committed on their own (Delta's rule: retry only when every input is still there) and the
rest are handed back to be planned again against the new version.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

import lance
from lance.optimize import Compaction, RewriteResult

from .errors import CompactionError
from .history import record_compaction
from .options import CompactionRequest
from .tables import open_dataset

log = logging.getLogger(__name__)


def data_bytes(fragments: Iterable[Any]) -> int | None:
    """Bytes of the fragments' data files, as Lance recorded them when it wrote each file.

    None when a file's size was not recorded (older datasets): a figure we did not measure
    is not reported.
    """
    total = 0
    for fragment in fragments:
        for data_file in fragment.files:
            if data_file.file_size_bytes is None:
                return None
            total += data_file.file_size_bytes
    return total


def deleted_rows(fragments: Iterable[Any]) -> int:
    """Rows marked deleted in the fragments' deletion files."""
    return sum(f.deletion_file.num_deleted_rows or 0 for f in fragments if f.deletion_file)


def fragment_signature(f: Any) -> tuple:
    """What identifies a fragment's content: its data files and its deletion file."""
    d = f.deletion_file
    return (tuple(x.path for x in f.files),
            None if d is None else (d.read_version, d.id, d.num_deleted_rows))


def changed_fragments(old: lance.LanceDataset, new: lance.LanceDataset) -> set[int]:
    """Ids of fragments of ``old`` that ``new`` no longer holds unchanged."""
    now = {f.fragment_id: fragment_signature(f.metadata) for f in new.get_fragments()}
    return {f.fragment_id for f in old.get_fragments()
            if now.get(f.fragment_id) != fragment_signature(f.metadata)}


def is_retryable_conflict(error: Exception) -> bool:
    text = str(error).lower()
    return "retryable commit conflict" in text or "preempted by concurrent transaction" in text


def remove_new_files(request: CompactionRequest, results: Iterable[RewriteResult]) -> int:
    """Delete the data files of results that were never committed (local tables only;
    elsewhere ``CALL lance.cleanup`` removes them). A file the latest version references is
    kept whatever happened, so this can never break the table. Returns how many it removed."""
    uri = request.uri
    if "://" in uri and not uri.startswith("file://"):
        return 0
    root = uri[len("file://"):] if uri.startswith("file://") else uri
    latest = open_dataset(request.table, uri, request.storage_options)
    referenced = {d.path for f in latest.get_fragments() for d in f.metadata.files}
    removed = 0
    for r in results:
        for f in r.new_fragments:
            for d in f.files:
                if d.path in referenced:
                    continue
                try:
                    os.remove(os.path.join(root, "data", d.path))
                    removed += 1
                except OSError:
                    pass
    return removed


@dataclass
class CommitOutcome:
    """What a commit made of a batch of results."""

    metrics: dict[str, Any] = field(default_factory=dict)  # empty: nothing committed
    committed: list[RewriteResult] = field(default_factory=list)
    conflicted: list[RewriteResult] = field(default_factory=list)


def _commit(dataset: lance.LanceDataset, request: CompactionRequest, read_version: int,
            results: list[RewriteResult]) -> dict[str, Any]:
    # The same options as the plan: without them Lance silently drops defer_index_remap.
    metrics = Compaction.commit(dataset, results, request.options)
    originals = [f for r in results for f in r.original_fragments]
    news = [f for r in results for f in r.new_fragments]
    out = {
        "new_version": dataset.version,
        "tasks": len(results),
        "fragments_removed": metrics.fragments_removed,
        "fragments_added": metrics.fragments_added,
        "files_removed": metrics.files_removed,
        "files_added": metrics.files_added,
        "rows_rewritten": sum(f.physical_rows for f in news),
        "deleted_rows_removed": deleted_rows(originals),
        "bytes_read": data_bytes(originals),
        "bytes_written": data_bytes(news),
    }
    try:
        record_compaction(dataset, request.strategy, read_version, out)
        out["new_version"] = dataset.version
    except Exception as e:  # the compaction is committed; only the record is missing
        log.warning("table %s: compaction committed at version %s but not recorded: %s",
                    request.table, out["new_version"], e)
    return out


def commit_results(request: CompactionRequest, read_version: int,
                   results: list[RewriteResult]) -> CommitOutcome:
    """Commit ``results`` atomically; on a conflicting concurrent change, commit those whose
    fragments it left unchanged and return the others as conflicted.

    The compaction is recorded in the table's config (``history.py``) for the
    ``incremental`` strategy and the layout report.
    """
    dataset = open_dataset(request.table, request.uri, request.storage_options)
    try:
        return CommitOutcome(_commit(dataset, request, read_version, results), list(results))
    except OSError as e:
        if not is_retryable_conflict(e):
            raise CompactionError(
                f"table {request.table}: a concurrent change is incompatible with compaction "
                f"({str(e).split(',')[0]}); nothing was committed and the table is as the other "
                "writer left it") from None
        log.info("table %s: commit conflict: %s", request.table, str(e).split(",")[0])
    latest = open_dataset(request.table, request.uri, request.storage_options)
    base = open_dataset(request.table, request.uri, request.storage_options, version=read_version)
    changed = changed_fragments(base, latest)
    safe = [r for r in results if not {f.id for f in r.original_fragments} & changed]
    conflicted = [r for r in results if r not in safe]
    if safe:
        try:
            return CommitOutcome(_commit(latest, request, read_version, safe), safe, conflicted)
        except OSError as e:
            if not is_retryable_conflict(e):
                raise CompactionError(
                    f"table {request.table}: a concurrent change is incompatible with compaction "
                    f"({str(e).split(',')[0]}); nothing was committed") from None
    return CommitOutcome({}, [], list(results))
