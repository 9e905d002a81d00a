"""The layout report: what a user looks at to decide whether to compact."""
from __future__ import annotations

from collections import defaultdict

from .history import committed_at, last_compaction
from .options import effective, result_columns
from .request import CompactionRequest
from .tables import open_dataset


def layout_row(request_json: str) -> tuple:
    """One row in the columns of parameters.json's ``layout_columns``.

    The request's target_rows_per_fragment and materialize_deletions_threshold, if given,
    set what counts as small and as over the threshold; else the table's, else Lance's.
    """
    request = CompactionRequest.from_json(request_json)
    ds = open_dataset(request.table, request.uri, request.storage_options)
    config = ds.config() or {}
    target = effective(config, request.options, "target_rows_per_fragment")
    threshold = effective(config, request.options, "materialize_deletions_threshold")

    ids, live_rows, deleted_rows, fractions = [], [], [], []
    size = 0
    for f in ds.get_fragments():
        m = f.metadata
        deleted = m.deletion_file.num_deleted_rows or 0 if m.deletion_file else 0
        ids.append(f.fragment_id)
        live_rows.append(m.physical_rows - deleted)
        deleted_rows.append(deleted)
        fractions.append(deleted / m.physical_rows if m.physical_rows else 0.0)
        size += sum(d.file_size_bytes or 0 for d in m.files)

    covered: dict[str, set] = defaultdict(set)
    kinds: dict[str, tuple] = {}
    for ix in ds.list_indices():
        if ix["name"].startswith("__"):  # Lance's own system indices
            continue
        covered[ix["name"]] |= set(ix["fragment_ids"] or [])
        kinds[ix["name"]] = (ix["type"], list(ix["fields"]))
    indices = [(name, kinds[name][0], kinds[name][1],
                sum(1 for i in ids if i not in covered[name])) for name in sorted(covered)]

    last = last_compaction(ds)
    how = None
    if last:
        how = f"{last.fragments_removed} fragments -> {last.fragments_added}"
    row = {
        "table": request.table,
        "version": ds.version,
        "fragments": len(ids),
        "rows": sum(live_rows),
        "deleted_rows": sum(deleted_rows),
        "bytes": size,
        "target_rows_per_fragment": target,
        "small_fragments": sum(1 for r in live_rows if r < target),
        "fragments_with_deletions": sum(1 for d in deleted_rows if d),
        "fragments_over_deletion_threshold": sum(1 for x in fractions if x > threshold),
        "max_deleted_fraction": max(fractions, default=0.0),
        "fragment_rows": live_rows,
        "indices": indices,
        "last_compacted_version": last.version if last else None,
        "last_compacted_at": committed_at(ds, last.version) if last else None,
        "last_compaction": how,
    }
    return tuple(row[name] for name, _ in result_columns("layout_columns"))
