"""``CALL lance.optimize_indices``: Lance's own index optimization (``optimize_indices``):
the rows of fragments an index does not cover yet -- appended since it was built, or
compacted with their deletions carried over -- are added to it (or it is retrained), so
searches stop scanning them. Runs on the driver, in the engine."""
from __future__ import annotations

import time
from typing import Any

from ..errors import CompactionError
from ..options import result_columns
from ..compaction.fragments import index_state
from ..compaction.request import ProcedureRequest


def optimize_indices_row(request_json: str) -> tuple:
    """Optimize (or with dry_run, report) the chosen indices; one row of parameters.json's
    ``optimize_indices_columns``."""
    started = time.monotonic()
    request = ProcedureRequest.from_json(request_json, "optimize_indices")
    table, args = request.table, request.args
    ds = request.open()
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
        ds.optimize.optimize_indices(**kwargs)
        ds = request.open()
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
    return tuple(row[name] for name, _ in result_columns("optimize_indices_columns"))
