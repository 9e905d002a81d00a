"""``CALL lance.maintain``: a table's everyday maintenance in one call -- compaction, then
index optimization, then cleanup of old versions -- each only when the table's layout says
it is due (thresholds are parameters), one result row per step that ran or was skipped and
why. ``dry_run`` reports what it would do. A cancel is seen between steps (and within the
compaction, before each batch and commit); a failure or a cancel says which steps ran before
it, with the versions they left, and which did not run."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from . import cancellation, orchestrate
from .cleanup import cleanup_row, parse_older_than
from .errors import CompactionError
from .fragments import live_and_deleted
from .indices import index_state, optimize_indices_row
from .options import effective, procedure_args, result_columns, spec
from .tables import open_dataset


def _args(raw: dict[str, Any], table: str) -> dict[str, Any]:
    defaults = {o["name"]: o["default"] for o in spec()["maintain_parameters"] if o.get("default") is not None}
    return {**defaults, **procedure_args("maintain", "maintain_parameters", raw.get("params"), table)}


def _compaction_due(ds, target: int, threshold: float, min_small: int) -> tuple[bool, str]:
    small = heavy = 0
    for f in ds.get_fragments():
        m = f.metadata
        live, deleted = live_and_deleted(m)
        small += live < target
        heavy += bool(m.physical_rows) and deleted / m.physical_rows > threshold
    facts = f"{small} fragments under {target:,} rows, {heavy} over the deletion threshold {threshold:g}"
    return (small >= min_small and small > 1) or heavy > 0, facts


STEPS = ("compact", "optimize_indices", "cleanup")


def maintain_rows(request_json: str, runner: Any) -> list[tuple]:
    raw = json.loads(request_json)
    table, uri, storage = raw.get("table") or raw["uri"], raw["uri"], raw.get("storage_options")
    args = _args(raw, table)
    dry = bool(args.get("dry_run"))
    base = {"table": table, "uri": uri, "storage_options": storage or {}}
    rows: list[dict[str, Any]] = []
    steps = {"compact": _compact_step, "optimize_indices": _indices_step, "cleanup": _cleanup_step}
    for name in STEPS:
        why = cancellation.reason()
        if why:
            raise cancellation.Cancelled(f"table {table}: maintain was cancelled before its {name} step "
                                         f"({why}); {_progress(rows, name)}")
        try:
            rows.append(steps[name](table, uri, storage, args, dry, base, runner))
        except CompactionError as e:
            kind = cancellation.Cancelled if isinstance(e, cancellation.Cancelled) else CompactionError
            raise kind(f"{e.message}; maintain: the {name} step "
                       f"{'was cancelled' if kind is cancellation.Cancelled else 'failed'}; "
                       f"{_progress(rows, name)}") from None
    return [tuple({**r, "table": table}[c] for c, _ in result_columns("maintain_columns")) for r in rows]


def _progress(rows: list[dict[str, Any]], stopped: str) -> str:
    """Which steps ran (and the version each left) before ``stopped``, and which did not run."""
    ran = [f"{r['step']} (version {r['version']})" for r in rows if r["ran"]]
    later = list(STEPS[STEPS.index(stopped) + 1:])
    text = ("steps done before: " + ", ".join(ran)) if ran else "no earlier step changed the table"
    return text + (f"; not run: {', '.join(later)}" if later else "")


def _compact_step(table, uri, storage, args, dry, base, runner) -> dict[str, Any]:
    ds = open_dataset(table, uri, storage)
    config = ds.config() or {}
    given = {"target_rows_per_fragment": args["target_rows_per_fragment"]} if "target_rows_per_fragment" in args else {}
    target = effective(config, given, "target_rows_per_fragment")
    threshold = effective(config, {}, "materialize_deletions_threshold")
    due, facts = _compaction_due(ds, target, threshold, args["min_small_fragments"])
    row = {"step": "compact", "ran": False, "version": ds.version, "outcome": None,
           "reason": ("due: " if due else f"not due (fewer than {args['min_small_fragments']} small fragments "
                      "and none over the deletion threshold): ") + facts}
    if due and not dry:
        request = {**base, "params": dict(given)}
        if "max_bytes" in args:  # a budget: the best tasks first, committed as they finish
            request.update(strategy="io_bounded", options={"max_bytes": str(args["max_bytes"])})
            request["params"].update(partial_progress=True, max_commits=4)
        r = dict(zip([c for c, _ in result_columns()], orchestrate.compact(json.dumps(request), runner)))
        row.update(ran=True, version=r["new_version"],
                   outcome=f"{r['tasks']} tasks, {r['fragments_removed']} fragments -> {r['fragments_added']}, "
                           f"{r['deleted_rows_removed']} deleted rows removed"
                           + (f", {r['tasks_left']} tasks left for later" if r.get("tasks_left") else "")
                           + (f"; {r['conflicts']}" if r.get("conflicts") else ""))
    return row


def _indices_step(table, uri, storage, args, dry, base, runner) -> dict[str, Any]:
    ds = open_dataset(table, uri, storage)
    state = index_state(ds)
    lagging = {n: e["unindexed"] for n, e in state.items() if e["unindexed"] >= args["min_unindexed_fragments"]}
    row = {"step": "optimize_indices", "ran": False, "version": ds.version, "outcome": None,
           "reason": (f"due: unindexed fragments {lagging}" if lagging else
                      (f"not due: every index covers all but fewer than {args['min_unindexed_fragments']} fragments"
                       if state else "not due: the table has no indices"))}
    if lagging and not dry:
        names = ",".join(sorted(lagging))
        r = dict(zip([c for c, _ in result_columns("optimize_indices_columns")],
                     optimize_indices_row(json.dumps({**base, "params": {"indices": names}}))))
        row.update(ran=True, version=r["new_version"],
                   outcome=f"{r['indices_optimized']} indices: unindexed fragments "
                           f"{r['unindexed_fragments_before']} -> {r['unindexed_fragments_after']}")
    return row


def _cleanup_step(table, uri, storage, args, dry, base, runner) -> dict[str, Any]:
    ds = open_dataset(table, uri, storage)
    cutoff = datetime.now(timezone.utc) - parse_older_than(args["older_than"], table)
    old = [v for v in sorted(ds.versions(), key=lambda v: v["version"])[:-1]
           if v["timestamp"].astimezone(timezone.utc) < cutoff]
    row = {"step": "cleanup", "ran": False, "version": ds.version, "outcome": None,
           "reason": (f"due: {len(old)} versions older than {args['older_than']}" if old
                      else f"not due: no version older than {args['older_than']}")}
    if old and not dry:
        params = {"older_than": args["older_than"]}
        if "retain_versions" in args:
            params["retain_versions"] = args["retain_versions"]
        r = dict(zip([c for c, _ in result_columns("cleanup_columns")],
                     cleanup_row(json.dumps({**base, "params": params}))))
        row.update(ran=True, version=r["version"],
                   outcome=f"{r['old_versions']} versions, {r['data_files_removed']} data files, "
                           f"{r['bytes_removed']:,} bytes removed")
    return row
