"""Indices left covering less than the table, restored at the end of a compaction run (the
uncovered rows built as new segments of each index with its model, merged size-tiered, as
``optimize_indices`` does: indexing/upkeep.py), whoever left them so: a clustering's Rewrite
(its new fragments are not covered until then), an earlier run killed or failed between its
Rewrite and its restore, or appends no index optimization has covered yet. Coverage is read where
every part of the product reads it (``fragments.index_state``); what happened is said in the
result row's ``index_coverage`` and, when the restore fails after the run committed, in the error
with the versions committed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CompactionError
from ..indexing import upkeep
from ..runtime import hooks
from ..runtime.cancellation import Cancelled
from ..runtime.envelope import Target
from ..runtime.failures import classify, committed_phrase, describe
from ..runtime.tables import open_dataset
from .commit import is_retryable_conflict
from .fragments import index_state


@dataclass(frozen=True)
class IndexCoverage:
    """Indices that did not cover the whole table after the run's commits, and what became of
    them: ``lost``, those that covered fragments this run rewrote (a clustering); ``found``,
    (name, fragments covered, fragments in the table) of the others, left so before (an
    interrupted run, appends); ``restored`` by optimize_indices at ``version``, or not
    (``restore_indices=false``, or ``conflict``: a concurrent change won)."""

    lost: tuple[str, ...]
    restored: bool
    version: int | None = None
    found: tuple[tuple[str, int, int], ...] = ()
    conflict: str | None = None

    @property
    def names(self) -> list[str]:
        return sorted(set(self.lost) | {n for n, _, _ in self.found})

    def text(self, table: str) -> str | None:
        parts = []
        if self.lost:
            parts.append(f"{', '.join(self.lost)}: lost coverage of the rewritten rows")
        for name, covered, total in self.found:
            parts.append(f"{name}: covered {covered} of {total} fragments (left so before this run)")
        if not parts:
            return None
        what = "; ".join(parts)
        if self.restored:
            return f"{what}; restored by optimize_indices (version {self.version})"
        again = f"CALL lance.optimize_indices(table => '{table}')"
        if self.conflict:
            return (f"{what}; not restored: a concurrent change conflicted ({self.conflict}); the next compact "
                    f"or maintain, or {again}, restores it")
        return f"{what}; not restored (restore_indices=false): run {again}"


def restore(request: Any, lost: set[str], versions: list[int], dataset: Any = None) -> IndexCoverage | None:
    """After a run's commits (``versions``): every user index that covers less than the table
    at its latest version is optimized when ``request.run['restore_indices']`` (default true);
    ``lost``: the indices this run's Rewrite left uncovered. None when every index covers the
    whole table. A failure of the restore (other than a concurrent change, which is reported)
    raises an error naming the table, the indices, the versions this run committed and that
    the restore did not land. ``request``: a CompactionRequest; ``dataset``: the table as the
    run last saw it (its plan or its last commit: no new open), else it is opened here. With
    ``restore_indices=false`` and nothing lost, nothing is read."""
    if not request.run.get("restore_indices", True) and not lost:
        return None
    latest = dataset if dataset is not None else open_dataset(request.table, request.uri, request.storage_options)
    state = index_state(latest)
    behind = {n: e for n, e in state.items() if e["unindexed"]}
    if not behind:
        return None
    total = len(latest.get_fragments())
    lost_now = tuple(sorted(n for n in lost if n in behind))
    found = tuple((n, len(e["covered"]), total) for n, e in sorted(behind.items()) if n not in lost_now)
    if not request.run.get("restore_indices", True):
        return IndexCoverage(lost_now, False, found=found)
    names = sorted(behind)
    try:
        hooks.fault_at(request, "index_restore")
        # the new rows as new segments with each index's model, merged size-tiered (indexing/upkeep.py)
        version = upkeep.keep_up(Target(request.table, request.uri, dict(request.storage_options)), latest, names,
                                 "compact", request.hooks)
    except upkeep.UpkeepConflict as e:
        return IndexCoverage(lost_now, False, found=found, conflict=e.message.split(" (")[0][:200])
    except Cancelled as e:  # the restore's Spark jobs, or its commit gate, refused with the statement's cancel
        # the gate's refusal already says what the statement committed before (runtime/commit_gate.py)
        before = "" if "before the cancel" in e.message else f"; {committed_phrase(versions, 'the cancel')}"
        raise Cancelled(f"{e.message}{before}; the index restore did not land "
                        f"(queries stay correct, scanning what an index does not cover)") from None
    except Exception as e:  # noqa: B902 - Lance's (OSError, ValueError, ...) or the store's
        if is_retryable_conflict(e):
            return IndexCoverage(lost_now, False, found=found, conflict=str(e).split(",")[0][:200])
        left = ", ".join(f"{n} ({behind[n]['unindexed']} of {total} fragments not covered)" for n in names)
        raise CompactionError(
            f"table {request.table}: restoring the indices after the compaction failed: {describe(e)}; "
            f"{committed_phrase(versions)}; the index restore did not land: {left} (queries stay correct, "
            f"scanning what an index does not cover); the next compact or maintain, or CALL "
            f"lance.optimize_indices(table => '{request.table}'), restores them", classify(e).kind) from None
    return IndexCoverage(lost_now, True, version, found)
