"""Commit: apply finished tasks to the table in one atomic Lance transaction. Runs on the driver."""
from __future__ import annotations

from typing import Any, Iterable

from lance.optimize import Compaction, RewriteResult

from .history import record_compaction
from .options import CompactionRequest
from .tables import open_dataset


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


def commit_results(request: CompactionRequest, read_version: int,
                   results: list[RewriteResult]) -> dict[str, Any]:
    """Commit ``results`` with the same options the plan used; return measured metrics.

    The compaction is then recorded in the table's config (``history.py``) for the
    ``incremental`` strategy and the layout report.

    Lance checks the results against every version committed since their read version and
    raises a retryable conflict rather than overwrite a concurrent change.
    """
    dataset = open_dataset(request.table, request.uri, request.storage_options)
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
    record_compaction(dataset, request.strategy, read_version, out)
    out["new_version"] = dataset.version
    return out
