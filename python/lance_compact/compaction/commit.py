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

from ..runtime import hooks
from ..errors import CompactionError
from ..runtime.failures import CONFLICT, classify
from .fragment_facts import data_paths, file_path, original_facts
from .fragments import changed_fragments, data_bytes
from .rebase import carry_over, commit_carried, describe, is_id_collision
from .request import CompactionRequest
from ..runtime.tables import open_dataset

log = logging.getLogger(__name__)


def is_retryable_conflict(error: Exception) -> bool:
    text = str(error).lower()
    return "retryable commit conflict" in text or "preempted by concurrent transaction" in text


def remove_uncommitted(uri: str, latest: lance.LanceDataset, paths: Iterable[str]) -> int:
    """Delete data files (names under ``data/``) that were written and never committed: local
    tables only (elsewhere ``CALL lance.cleanup`` removes them). A file the latest version
    references is kept whatever happened, so this can never break the table. Returns how many
    it removed."""
    if "://" in uri and not uri.startswith("file://"):
        return 0
    root = uri[len("file://"):] if uri.startswith("file://") else uri
    referenced = data_paths(latest)
    removed = 0
    for path in set(paths) - referenced:
        try:
            os.remove(os.path.join(root, "data", path))
            removed += 1
        except OSError:
            pass
    return removed


def checkout(dataset: lance.LanceDataset, request: CompactionRequest,
             version: int | None = None) -> lance.LanceDataset:
    """The table at ``version`` (None: the latest, read from the store now) through
    ``dataset``'s session and caches (Lance's ``checkout_version``: no new object-store client
    or cache, a no-op when ``dataset`` is at that version); where Lance cannot, a new open, for
    its error that says what is wrong (runtime/tables.py)."""
    try:
        return dataset.checkout_version(version if version is not None else (None, None))
    except Exception:  # Lance raises OSError or ValueError: open_dataset says which and why
        return open_dataset(request.table, request.uri, request.storage_options, version=version)


def remove_new_files(request: CompactionRequest, results: Iterable[RewriteResult]) -> int:
    """Delete the data files of results that were never committed (:func:`remove_uncommitted`)."""
    uri = request.uri
    if "://" in uri and not uri.startswith("file://"):
        return 0
    # A fresh open, always: whether a file is referenced is asked of the latest version.
    latest = open_dataset(request.table, uri, request.storage_options)
    return remove_uncommitted(uri, latest, (d.path for r in results for f in r.new_fragments for d in f.files))


@dataclass
class CommitOutcome:
    """What committing a batch of results made of it."""

    metrics: dict[str, Any] = field(default_factory=dict)  # empty: nothing committed
    committed: list[RewriteResult] = field(default_factory=list)
    conflicted: list[RewriteResult] = field(default_factory=list)
    commits: int = 0
    rebased: int = 0  # tasks committed with concurrent deletions carried over
    refusals: list[str] = field(default_factory=list)  # why a conflicted task was not carried over
    versions: list[int] = field(default_factory=list)  # the versions committed, in order

    def add(self, metrics: dict[str, Any], committed: list[RewriteResult]) -> None:
        for k, v in metrics.items():
            if k == "new_version":
                self.metrics[k] = v
            else:
                prev = self.metrics.get(k, 0)
                self.metrics[k] = None if v is None or prev is None else prev + v
        self.committed += committed
        self.commits += 1
        if metrics.get("new_version") is not None:
            self.versions.append(metrics["new_version"])


def result_bytes(results: Iterable[RewriteResult]) -> tuple[int, int]:
    """Bytes the tasks of ``results`` read (their original fragments' data files) and wrote
    (their new ones), as a commit of them reports them; an unknown size counts 0."""
    results = list(results)
    read = sum(o.bytes or 0 for o in (original_facts(r) for r in results))
    written = data_bytes([f for r in results for f in r.new_fragments]) or 0
    return read, written


def _commit(dataset: lance.LanceDataset, request: CompactionRequest,
            results: list[RewriteResult]) -> dict[str, Any]:
    hooks.fault_at(request, "commit")  # tests: a failure of the commit itself, as Lance raises it
    # The same options as the plan: without them Lance silently drops defer_index_remap.
    metrics = Compaction.commit(dataset, results, request.options)
    # The originals from each result's JSON: ``original_fragments`` builds an object per
    # fragment (seconds for a task of 100,000); the new fragments are few.
    originals = [original_facts(r) for r in results]
    news = [f for r in results for f in r.new_fragments]
    read = [o.bytes for o in originals]
    return {
        "new_version": dataset.version,
        "tasks": len(results),
        "fragments_removed": metrics.fragments_removed,
        "fragments_added": metrics.fragments_added,
        "files_removed": metrics.files_removed,
        "files_added": metrics.files_added,
        "rows_rewritten": sum(f.physical_rows for f in news),
        "deleted_rows_removed": sum(int(o.deleted.sum()) for o in originals),
        "bytes_read": None if None in read else sum(read),
        "bytes_written": data_bytes(news),
    }


def _incompatible(request: CompactionRequest, error: Exception,
                  results: list[RewriteResult] | None = None, before: int | None = None) -> CompactionError:
    """A commit failed for another reason than a conflict Lance calls retryable: say what
    (a concurrent writer's incompatible operation, the object store, a full disk, ...). When
    the store failed, look whether the commit landed all the same (its answer may have been
    lost); a commit that did not land has its files removed (local tables: nothing references
    them). ``before``: the table's version the commit was tried on."""
    failure = classify(error)
    if failure.kind == CONFLICT:
        return CompactionError(
            f"table {request.table}: a concurrent {failure.operation} by another writer is "
            f"incompatible with compaction ({failure.detail}); this commit did not land and the "
            f"table is as the other writer left it; {_remove_unlanded(request, results or [])}")
    landed, version = _landed(request, results or [], before)
    if version is None and not landed.startswith("whether"):
        landed += f"; {_remove_unlanded(request, results or [])}"
    error = CompactionError(f"table {request.table}: committing failed: {failure.phrase} "
                            f"({failure.detail}); {landed}", failure.kind)
    error.landed_version = version  # the run counts it among what was committed
    return error


def _remove_unlanded(request: CompactionRequest, results: list[RewriteResult]) -> str:
    """Remove the files of ``results``, whose commit did not land (local tables; a file the
    latest version references is kept whatever happened), in words."""
    if "://" in request.uri and not request.uri.startswith("file://"):
        return (f"the files it wrote are left for CALL lance.cleanup(table => '{request.table}', "
                "delete_unverified => true)")
    try:
        return f"the {remove_new_files(request, results)} files it wrote were removed"
    except CompactionError as e:
        return (f"the files it wrote could not be removed ({e.message}): CALL lance.cleanup(table => "
                f"'{request.table}', delete_unverified => true) removes them")


def _landed(request: CompactionRequest, results: list[RewriteResult],
            before: int | None = None) -> tuple[str, int | None]:
    """Whether the latest version holds every file the results wrote (the commit landed), in
    words, and the version it landed as (None: it did not, or that is not known). ``before``:
    the version the commit was tried on (newer ones that are not this commit are said to be
    others': Lance's reservation of fragment ids, another writer)."""
    files = {file_path(d) for r in results for f in r.new_fragments for d in f.files}
    if not files:
        return "this commit did not land", None
    try:
        # A fresh open: the question is what the store holds now, after a failed answer.
        latest = open_dataset(request.table, request.uri, request.storage_options)
        have = data_paths(latest)
    except CompactionError:
        return ("whether this commit landed could not be checked: see the table's versions "
                f"(SELECT * FROM lance.{request.table}.versions)"), None
    if files <= have:
        return f"this commit landed all the same, as version {latest.version}", latest.version
    others = ""
    if before is not None and latest.version > before:
        others = (f"; {'versions' if latest.version > before + 1 else 'version'} "
                  f"{before + 1}{f'-{latest.version}' if latest.version > before + 1 else ''} changed no row of "
                  "this compaction (Lance's reservation of fragment ids, or another writer)")
    return f"this commit did not land (the table is at version {latest.version}{others})", None


# Tries to carry deletions over when yet another change lands between carrying and committing.
CARRY_ATTEMPTS = 5


def _carry(request: CompactionRequest, base: lance.LanceDataset, latest: lance.LanceDataset,
           results: list[RewriteResult], outcome: CommitOutcome) -> list[RewriteResult]:
    """Commit ``results`` with the deletions made since ``base`` (the plan's version) carried
    over onto their new fragments; returns those that could not be (to plan again).
    ``latest``: the table as the caller last read it; each further try reads it again, since
    another change landed meanwhile."""
    pending = list(results)
    refused: list[RewriteResult] = []
    for attempt in range(CARRY_ATTEMPTS):
        if attempt:
            latest = checkout(latest, request)
        carried = None
        try:
            carried = carry_over(request.uri, request.storage_options, pending, base, latest)
            for i in sorted(carried.refused):
                refused.append(pending[i])
                outcome.refusals.append(carried.refused[i])
            if not carried.carried:
                return refused
            hooks.before_carried_commit(request)
            committed = commit_carried(request.uri, request.storage_options, carried.carried, latest.version)
        except OSError as e:
            # Another writer landed meanwhile (a delete, or an append that took the ids): again.
            if not (is_retryable_conflict(e) or is_id_collision(e)):
                raise _incompatible(request, e, [c.result for c in carried.carried] if carried else []) from None
            log.info("table %s: carrying deletions over met another change (%s); again",
                     request.table, str(e).split(",")[0])
            pending = [r for r in pending if r not in refused]
            continue
        outcome.add({**describe(carried.carried), "new_version": committed.version},
                    [c.result for c in carried.carried])
        outcome.rebased += len(carried.carried)
        log.info("table %s: %d tasks committed with %d concurrently deleted rows carried over",
                 request.table, len(carried.carried), sum(c.deleted for c in carried.carried))
        return refused
    outcome.refusals.append(f"other changes kept landing ({CARRY_ATTEMPTS} tries)")
    return refused + pending


def commit_results(request: CompactionRequest, read_version: int, results: list[RewriteResult],
                   dataset: lance.LanceDataset | None = None,
                   outcome: CommitOutcome | None = None) -> CommitOutcome:
    """Commit ``results`` atomically. On a conflicting concurrent change: commit those whose
    fragments it left unchanged, commit those it only deleted rows from with the deletions
    carried over (``rebase.py``), and return the others as conflicted (to plan again).

    ``dataset`` is the table as the run last saw it (its plan or its previous commit), which
    saves reopening a large manifest; Lance checks every newer version at commit all the
    same. Lance's own Rewrite transaction is the record of the compaction (``history.py``).
    ``outcome`` (a new one if not given) holds what was committed even when this raises.
    """
    if dataset is None:
        dataset = open_dataset(request.table, request.uri, request.storage_options)
    outcome = CommitOutcome() if outcome is None else outcome
    before = dataset.version
    try:
        outcome.add(_commit(dataset, request, results), list(results))
        return outcome
    except (OSError, ValueError) as e:  # Lance raises store failures as either
        if not is_retryable_conflict(e):
            raise _incompatible(request, e, results, before) from None
        log.info("table %s: commit conflict: %s", request.table, str(e).split(",")[0])
    # Lance refused the commit because a newer version landed: read it now; the plan's version
    # is ``dataset`` itself when it has not moved since (checkout is then a no-op).
    latest = checkout(dataset, request)
    base = checkout(dataset, request, read_version)
    changed = changed_fragments(base, latest)
    safe = [r for r in results if not {f.id for f in r.original_fragments} & changed]
    touched = [r for r in results if r not in safe]
    if safe:
        try:
            outcome.add(_commit(latest, request, safe), safe)
        except OSError as e:
            if not is_retryable_conflict(e):
                raise _incompatible(request, e, safe) from None
            touched = list(results)  # everything changed again: carry over what can be
    if touched and request.run.get("carry_over_deletes", True):
        touched = _carry(request, base, latest, touched, outcome)
    outcome.conflicted = touched
    return outcome
