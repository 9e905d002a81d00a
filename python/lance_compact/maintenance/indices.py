"""``CALL lance.optimize_indices``: Lance's own index optimization (``optimize_indices``):
the rows of fragments an index does not cover yet -- appended since it was built, or
compacted with their deletions carried over -- are added to it (or it is retrained), so
searches stop scanning them. Runs on the driver, in the engine."""
from __future__ import annotations

import time
from typing import Any, Mapping

import lance

from ..errors import CompactionError
from ..compaction.fragments import index_state
from ..runtime.envelope import Target


def optimize_indices(target: Target, args: Mapping[str, Any], ds: lance.LanceDataset | None = None) -> dict[str, Any]:
    """Optimize (or with dry_run, report) the chosen indices of ``target`` with
    ``optimize_indices``' checked parameters; its row (parameters.json's
    ``optimize_indices_columns``) by column name. ``ds``: the table already open (maintain's),
    else it is opened here."""
    started = time.monotonic()
    table = target.table
    ds = ds if ds is not None else target.open()
    before = index_state(ds)
    names = sorted(before)
    if "indices" in args:
        names = [n.strip() for n in args["indices"].split(",") if n.strip()]
        unknown = [n for n in names if n not in before]
        if unknown:
            raise CompactionError(f"table {table}: no index named {', '.join(unknown)}; its indices are: "
                                  f"{', '.join(sorted(before)) or 'none'}")
    retrain = bool(args.get("retrain", False))
    due = [n for n in names if retrain or before[n]["unindexed"]]
    read_version = ds.version
    if due and not args.get("dry_run", False):
        kwargs: dict[str, Any] = {"index_names": due, "retrain": retrain}
        if "num_indices_to_merge" in args:
            kwargs["num_indices_to_merge"] = args["num_indices_to_merge"]
        ds.optimize.optimize_indices(**kwargs)  # Lance moves ds to the version it committed
    after = index_state(ds)
    per_index = [{"name": n, "type": before[n]["type"],
                  "unindexed_fragments_before": before[n]["unindexed"],
                  "unindexed_fragments_after": after.get(n, before[n])["unindexed"],
                  "segments_before": before[n]["segments"],
                  "segments_after": after.get(n, before[n])["segments"]} for n in names]
    row = {"table": table, "read_version": read_version, "new_version": ds.version,
           "dry_run": bool(args.get("dry_run", False)),
           "indices_optimized": 0 if args.get("dry_run") else len(due),
           "unindexed_fragments_before": sum(i["unindexed_fragments_before"] for i in per_index),
           "unindexed_fragments_after": sum(i["unindexed_fragments_after"] for i in per_index),
           "indices": [[i[k] for k in ("name", "type", "unindexed_fragments_before",
                                       "unindexed_fragments_after", "segments_before",
                                       "segments_after")] for i in per_index],
           "elapsed_ms": int((time.monotonic() - started) * 1000)}
    return row
