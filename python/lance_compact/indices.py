"""``CALL lance.optimize_indices``: Lance's own index optimization (``optimize_indices``):
the rows of fragments an index does not cover yet -- appended since it was built, or
compacted with their deletions carried over -- are added to it (or it is retrained), so
searches stop scanning them. Runs on the driver, in the engine."""
from __future__ import annotations

import json
import time
from typing import Any

from .errors import CompactionError
from .options import procedure_args, result_columns
from .tables import open_dataset


def index_state(ds) -> dict[str, dict[str, Any]]:
    """Per user index: its type, the fragments it does not cover, its segments (deltas)."""
    fragments = {f.fragment_id for f in ds.get_fragments()}
    state: dict[str, dict[str, Any]] = {}
    for ix in ds.list_indices():
        if ix["name"].startswith("__"):  # Lance's own system indices
            continue
        e = state.setdefault(ix["name"], {"type": ix["type"], "covered": set(), "segments": 0})
        e["covered"] |= set(ix["fragment_ids"] or [])
        e["segments"] += 1
    for e in state.values():
        e["unindexed"] = len(fragments - e["covered"])
    return state


def optimize_indices_row(request_json: str) -> tuple:
    """Optimize (or with dry_run, report) the chosen indices; one row of parameters.json's
    ``optimize_indices_columns``."""
    started = time.monotonic()
    raw = json.loads(request_json)
    table, uri = raw.get("table") or raw["uri"], raw["uri"]
    args = procedure_args("optimize_indices", "optimize_indices_parameters", raw.get("params"), table)
    ds = open_dataset(table, uri, raw.get("storage_options"))
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
        ds = open_dataset(table, uri, raw.get("storage_options"))
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
