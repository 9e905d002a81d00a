"""``CALL lance.optimize_indices``: the rows of fragments an index does not cover yet --
appended since it was built, or compacted with their deletions carried over -- are built as a
new segment of the index with its own model, by Spark tasks, and committed beside its segments;
segments are merged size-tiered (indexing/upkeep.py, indexing/tiers.py), so a run's work follows
the new rows, not the index. ``retrain`` trains a fresh model and builds every fragment again.
An index that cannot be kept in segments (indexing/existing.py says which) is optimized by
pylance's ``optimize_indices`` in the engine, and its row says so."""
from __future__ import annotations

import time
from typing import Any, Mapping

import lance

from ..errors import CompactionError
from ..compaction.fragments import index_state
from ..indexing import upkeep
from ..runtime import identifiers
from ..runtime.envelope import Target

_PER_INDEX = ("name", "type", "unindexed_fragments_before", "unindexed_fragments_after", "segments_before",
              "segments_after", "built_by", "rows_indexed", "segments_built", "segments_merged")


def optimize_indices(target: Target, args: Mapping[str, Any], ds: lance.LanceDataset | None = None,
                     procedure: str = "optimize_indices") -> dict[str, Any]:
    """Optimize (or with dry_run, report) the chosen indices of ``target`` with
    ``optimize_indices``' checked parameters; its row (parameters.json's
    ``optimize_indices_columns``) by column name. ``ds``: the table already open (maintain's),
    else it is opened here; ``procedure`` names the Spark jobs (``lance.<procedure> db.t: ...``)."""
    started = time.monotonic()
    table = target.table
    given = None
    if "indices" in args:  # each an existing index's name (runtime/identifiers.py), checked before the table is read
        given = [identifiers.check(identifiers.EXISTING_INDEX, table, n.strip(" "), procedure, "index name in indices")
                 for n in str(args["indices"]).split(",") if n.strip(" ")]
    ds = ds if ds is not None else target.open()
    before = index_state(ds)
    names = sorted(before)
    if given is not None:
        names = given
        unknown = [n for n in names if n not in before]
        if unknown:
            raise CompactionError(f"table {table}: no index named "
                                  f"{', '.join(identifiers.escape(n, identifiers.SHOWN) for n in unknown)}; "
                                  f"its indices are: "
                                  f"{', '.join(identifiers.escape(n, identifiers.SHOWN) for n in sorted(before)) or 'none'}")
    retrain = bool(args.get("retrain", False))
    dry_run = bool(args.get("dry_run", False))
    num_to_merge = args.get("num_indices_to_merge")
    read_version = ds.version
    ups = [up for up in (upkeep.plan(ds, n, None if num_to_merge is None else int(num_to_merge), retrain)
                         for n in names) if up.due]
    if dry_run:
        outcomes = {up.index.name: upkeep.Outcome(_would_build(up), up.rows if retrain else up.new_rows, 0,
                                                  len(up.merged)) for up in ups}
    elif ups:
        outcomes, versions = upkeep.run(target, ds, ups, procedure)
        if versions:  # the table as the last commit left it (opened only if no outcome holds it)
            latest = [o.latest for o in outcomes.values() if o.latest is not None and o.new_version == versions[-1]]
            ds = latest[0] if latest else target.open()
    else:
        outcomes = {}
    optimized = len(ups)
    after = index_state(ds)
    per_index = []
    for n in names:
        o = outcomes.get(n, upkeep.Outcome())
        per_index.append({"name": n, "type": before[n]["type"],
                          "unindexed_fragments_before": before[n]["unindexed"],
                          "unindexed_fragments_after": after.get(n, before[n])["unindexed"],
                          "segments_before": before[n]["segments"],
                          "segments_after": after.get(n, before[n])["segments"],
                          "built_by": o.built_by or None, "rows_indexed": o.rows_indexed,
                          "segments_built": o.segments_built, "segments_merged": o.segments_merged})
    where = sorted({i["built_by"] for i in per_index if i["built_by"]})
    row = {"table": table, "read_version": read_version, "new_version": ds.version,
           "dry_run": dry_run, "indices_optimized": 0 if dry_run else optimized,
           "unindexed_fragments_before": sum(i["unindexed_fragments_before"] for i in per_index),
           "unindexed_fragments_after": sum(i["unindexed_fragments_after"] for i in per_index),
           "indices": [[i[k] for k in _PER_INDEX] for i in per_index],
           "built_by": ", ".join(where) or None,
           "rows_indexed": sum(i["rows_indexed"] for i in per_index),
           "segments_built": sum(i["segments_built"] for i in per_index),
           "elapsed_ms": int((time.monotonic() - started) * 1000)}
    return row


def _would_build(up: upkeep.Upkeep) -> str:
    """Where a dry run's index would be built (the engine/Spark choice is made at run time)."""
    return upkeep.PYLANCE if up.route == "pylance" else "segments"
