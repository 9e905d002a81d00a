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
from .fragments import changed_fragments, data_bytes, deleted_rows
from .request import CompactionRequest
from .tables import open_dataset

log = logging.getLogger(__name__)


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
    return out


def commit_results(request: CompactionRequest, read_version: int, results: list[RewriteResult],
                   dataset: lance.LanceDataset | None = None) -> CommitOutcome:
    """Commit ``results`` atomically; on a conflicting concurrent change, commit those whose
    fragments it left unchanged and return the others as conflicted.

    ``dataset`` is the table as the run last saw it (its plan or its previous commit), which
    saves reopening a large manifest; Lance checks every newer version at commit all the
    same. Lance's own Rewrite transaction is the record of the compaction (``history.py``).
    """
    if dataset is None:
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
