"""``CALL lance.maintain``: a table's everyday maintenance in one call -- compaction, then
index optimization, then cleanup of old versions -- each only when the table's layout says
it is due (thresholds are parameters), one result row per step that ran or was skipped and
why. ``dry_run`` reports what it would do. A cancel is seen between steps (and within the
compaction, before each batch and commit); a failure or a cancel says which steps ran before
it, with the versions they left, and which did not run.

The steps are functions of one table (:data:`STEPS`, :func:`run_step`): ``maintain`` runs
them for its table, ``maintain_warehouse`` (``warehouse_maintenance.py``) for every due table
of a warehouse, with a runner that packs several tables' rewrite tasks into shared Spark
jobs. (Named ``table_maintenance``, not ``maintain``: ``lance_compact.maintain`` is the
PySpark function, which a submodule of that name would shadow once imported.)
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable

import lance

from ..runtime import cancellation, progress

from ..runtime import hooks

from ..compaction import orchestrate
from ..compaction.request import CompactionRequest
from ..compaction import rules
from ..compaction.bounds import BoundExceeded
from .version_ages import version_facts
from .version_cleanup import cleanup, parse_older_than
from ..errors import CompactionError, MaintenanceFailed
from ..compaction.fragments import index_state
from ..compaction.fragment_facts import FragmentFacts
from ..compaction.clustering.state import measure_table
from ..compaction.clustering.table_clustering import clustering_step
from .indices import optimize_indices
from ..options import result_columns
from .policy import resolve_policy
from ..runtime.envelope import Envelope, Target

__all__ = ["STEPS", "Target", "maintain", "run_step"]


def _args(call: dict[str, Any], t: Target, ds: lance.LanceDataset) -> dict[str, Any]:
    """The thresholds from the table's policy: call arguments, then its table properties,
    then the catalog's maintain.* settings, then defaults (policy.py); and dry_run."""
    policy = resolve_policy(call, ds.config() or {}, t.maintain_settings, t.table, t.catalog)
    return {**policy.maintain_args(), "dry_run": bool(call.get("dry_run", False)),
            "fail_on_error": bool(call.get("fail_on_error", False)),
            "sort_order": call.get("sort_order"), "target_origin": policy.origin("target_rows_per_fragment")}


def compact_step(t: Target, args: dict[str, Any], runner: Any, dry: bool,
                 ds: lance.LanceDataset | None = None, decided: str | None = None) -> dict[str, Any]:
    """Compaction when due; ``runner`` runs its rewrite tasks (a BatchRunner). ``ds``: the
    table as the caller just opened it (else opened here); the compaction plans on its own
    fresh open. ``decided``: the caller's health found it due reading this same ``ds`` with
    the same policy (health.py decides by the same rule), and said so in these words: not
    decided again (unless the call gives a sort_order, which health does not know)."""
    ds = ds if ds is not None else t.open()
    given = {"target_rows_per_fragment": args["target_rows_per_fragment"]} \
        if args.get("target_rows_per_fragment") is not None else {}
    if decided is not None and args.get("sort_order") is None:
        due, reason = True, decided
    else:
        # the one rule (compaction/rules.py), so that a table's health and its maintenance agree
        # the table's own clustering counts unless the call gives a sort_order of its own (or 'none')
        facts = FragmentFacts.of(ds)
        clustering = measure_table(ds, facts) if args.get("sort_order") is None else None
        need = rules.compaction_need(facts, rules.Thresholds.of_maintenance(ds.config() or {}, args),
                                     args["min_small_fragments"],
                                     clustering.unclustered_share if clustering else None,
                                     clustering.clustered_ids if clustering else frozenset(),
                                     clustering.depth if clustering else None,
                                     clustering.unclustered_fragments if clustering else 0,
                                     args.get("max_clustering_depth"))
        due, reason = need.due, need.reason
    row = {"step": "compact", "ran": False, "version": ds.version, "outcome": None, "bytes_rewritten": 0,
           "reason": reason}
    if due and not dry:
        params: dict[str, Any] = dict(given)
        options: dict[str, Any] = {}
        strategy = None
        clustered = clustering_step(params, options, args.get("sort_order"), ds.config() or {},
                                    args.get("max_rewrite_bytes"))
        if not clustered:  # indices behind the table: the optimize_indices step next decides, by the policy
            options["restore_indices"] = "false"
        if args.get("max_rewrite_bytes") is not None and not clustered:  # a budget: the best tasks first, committed as they finish
            strategy = "io_bounded"
            options["max_rewrite_bytes"] = str(args["max_rewrite_bytes"])
            params.update(partial_progress=True, max_commits=4)
        request = CompactionRequest.of(Envelope(action="compact", target=t, params=params, options=options,
                                                strategy=strategy, catalog=t.catalog))
        task_errors: list[str] = []
        try:
            r = dict(zip([c for c, _ in result_columns()], orchestrate.compact(request, runner, task_errors)))
        except BoundExceeded as e:  # say where the policy's target came from
            raise BoundExceeded(_with_origin(e.message, given, args.get("target_origin")), e.bound) from None
        row.update(ran=True, version=r["new_version"], bytes_rewritten=r["bytes_read"] or 0,
                   outcome=f"{r['tasks']} tasks, {r['fragments_removed']} fragments -> {r['fragments_added']}, "
                           f"{r['deleted_rows_removed']} deleted rows removed"
                           + (f", {r['tasks_left']} tasks left for later" if r.get("tasks_left") else "")
                           + (f", {r['fragments_left']} fragments left for later" if r.get("sort_order")
                              and r.get("fragments_left") else "")
                           + (f", {r['tasks_failed']} tasks failed" if r.get("tasks_failed") else "")
                           + (f"; {r['conflicts']}" if r.get("conflicts") else ""),
                   # not columns: for fail_on_error (failed_tasks)
                   tasks_failed=r.get("tasks_failed") or 0, task_errors=task_errors, commits=r.get("commits") or 0)
    return row


# How many failures a fail_on_error message lists (the rest are counted), and how long each may be.
SHOWN_FAILURES = 10
SHOWN_ERROR_CHARS = 400


def shorten(text: str, limit: int = SHOWN_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def failed_tasks(rows: list[dict[str, Any]]) -> str | None:
    """The compaction tasks of ``rows`` (a table's step rows) that failed all their attempts
    while the run went on (partial progress), and why; None when none did."""
    count = sum(r.get("tasks_failed") or 0 for r in rows)
    if not count:
        return None
    errors = [e for r in rows for e in r.get("task_errors") or ()]
    shown = [shorten(e) for e in errors[:3]]
    why = (": " + "; ".join(shown) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")) if shown else ""
    return (f"{count} compaction task{'s' if count > 1 else ''} failed all {'their' if count > 1 else 'its'} "
            f"attempts{why} (the run's other tasks were committed; the failed tasks' fragments are as they were)")


def committed_steps(rows: list[dict[str, Any]]) -> str:
    """The steps of ``rows`` that committed, with the version each left ('compact (version 7),
    ...'): a compaction whose every task failed committed nothing; cleanup removes versions
    and commits none, but is listed (what it did is done)."""
    return ", ".join(f"{r['step']} (version {r['version']})" for r in rows
                     if r.get("ran") and r.get("commits", 1))


def _with_origin(message: str, given: dict[str, Any], origin: str | None) -> str:
    """``message`` with where the policy's target_rows_per_fragment came from."""
    if not given or not origin or origin.startswith("parameter"):
        return message
    named = f"target_rows_per_fragment {given['target_rows_per_fragment']:,}"
    return message.replace(named, f"{named} (the {origin})", 1)


def optimize_indices_step(t: Target, args: dict[str, Any], runner: Any, dry: bool,
                          ds: lance.LanceDataset | None = None, decided: str | None = None) -> dict[str, Any]:
    """Lance's index optimization when an index leaves enough fragments unindexed."""
    ds = ds if ds is not None else t.open()
    state = index_state(ds)
    lagging = rules.lagging_indices(state, args["min_unindexed_fragments"])
    row = {"step": "optimize_indices", "ran": False, "version": ds.version, "outcome": None,
           "reason": rules.optimize_indices_reason(state, lagging, args["min_unindexed_fragments"])}
    if lagging and not dry:
        names = ",".join(sorted(lagging))
        r = optimize_indices(t, {"indices": names}, ds, procedure="maintain")
        row.update(ran=True, version=r["new_version"],
                   outcome=f"{r['indices_optimized']} indices: unindexed fragments "
                           f"{r['unindexed_fragments_before']} -> {r['unindexed_fragments_after']}")
    return row


def cleanup_step(t: Target, args: dict[str, Any], runner: Any, dry: bool,
                 ds: lance.LanceDataset | None = None, decided: str | None = None) -> dict[str, Any]:
    """Lance's cleanup when versions are older than ``older_than``. ``decided``: the caller's
    health of this table (read during this call) found such versions: they still are (time
    only ages them, and newer versions only push older ones out of ``retain_versions``), so
    Lance's cleanup runs without every manifest being read for the decision first, and the
    reason counts the versions it removed."""
    retain = args.get("retain_versions")
    if decided is not None and not dry:
        row = {"step": "cleanup", "ran": False, "version": None, "outcome": None}
        old: list[int] | None = None
    else:
        ds = ds if ds is not None else t.open()
        cutoff = datetime.now(timezone.utc) - parse_older_than(args["older_than"], t.table)
        # from one listing and as few manifests as the answer needs (a table of streaming appends
        # keeps hundreds of versions; versions() would read every manifest), as health decides
        old = version_facts(ds, t.storage_options, cutoff, retain)[1]
        row = {"step": "cleanup", "ran": False, "version": ds.version, "outcome": None,
               "reason": rules.cleanup_reason(old, args["older_than"], retain)}
    if (old or old is None) and not dry:
        params = {"older_than": args["older_than"]}
        if args.get("retain_versions") is not None:
            params["retain_versions"] = args["retain_versions"]
        r = cleanup(t, params)
        if old is None:
            row["reason"] = rules.cleanup_reason(list(range(r["old_versions"])), args["older_than"], retain)
        row.update(ran=True, version=r["version"],
                   outcome=f"{r['old_versions']} versions, {r['data_files_removed']} data files, "
                           f"{r['bytes_removed']:,} bytes removed")
    return row


# The steps in the order they run: compaction first (it leaves fragments for the indices to
# cover), cleanup last (it removes what the others replaced).
STEPS: dict[str, Callable[..., dict[str, Any]]] = {
    "compact": compact_step, "optimize_indices": optimize_indices_step, "cleanup": cleanup_step}


def run_step(step: str, t: Target, args: dict[str, Any], runner: Any, dry: bool,
             ds: lance.LanceDataset | None = None, decided: str | None = None) -> dict[str, Any]:
    """One step of ``t``: its row (``step``, ``ran``, ``reason``, ``version``, ``outcome``,
    ``elapsed_ms``, and step figures such as ``bytes_rewritten``). ``ds``: the table already
    open at the version the step should look at (else the step opens it). ``decided``: the
    caller's health found the step due, and why (see :func:`compact_step` and
    :func:`cleanup_step` for when that stands; optimize_indices decides again)."""
    # tests only: a moment with no Spark job running; a cancel that came during it stops here
    why = cancellation.reason() if hooks.driver_pause() else None
    if why:
        raise cancellation.Cancelled(f"table {t.table}: the {step} step was not started: the statement "
                                     f"was cancelled ({why})")
    clock = time.monotonic()
    if not dry:
        progress.report(f"{t.table}: {step}")
    row = STEPS[step](t, args, runner, dry, ds, decided=decided)
    row["elapsed_ms"] = int((time.monotonic() - clock) * 1000)
    return row


def maintain(request: Envelope, runner: Any) -> list[dict[str, Any]]:
    """``CALL lance.maintain``: its rows (parameters.json's ``maintain_columns``) by column
    name, a row per step."""
    t = request.require_target()
    ds = t.open()
    args = _args(dict(request.args), t, ds)
    dry = bool(args.get("dry_run"))
    rows: list[dict[str, Any]] = []
    for step in STEPS:
        why = cancellation.reason()
        if why:
            raise cancellation.Cancelled(f"table {t.table}: maintain was cancelled before its {step} step "
                                         f"({why}); {_progress(rows, step)}")
        try:
            rows.append(run_step(step, t, args, runner, dry, ds))
            # The next step looks at the table as this one left it: a fresh open after a
            # step that committed; else the same open (nothing of ours changed it).
            ds = None if rows[-1]["ran"] else ds
        except CompactionError as e:
            kind = cancellation.Cancelled if isinstance(e, cancellation.Cancelled) else CompactionError
            raise kind(f"{e.message}; maintain: the {step} step "
                       f"{'was cancelled' if kind is cancellation.Cancelled else 'failed'}; "
                       f"{_progress(rows, step)}") from None
    failed = failed_tasks(rows) if args.get("fail_on_error") else None
    result = [{**r, "table": t.table} for r in rows]
    if failed:
        done = committed_steps(rows)
        raise MaintenanceFailed(f"table {t.table}: maintain failed (fail_on_error => true): its compact step: "
                                f"{failed}; {'committed: ' + done if done else 'nothing was committed'}",
                                "maintain_columns", result)
    return result


def _progress(rows: list[dict[str, Any]], stopped: str) -> str:
    """Which steps ran (and the version each left) before ``stopped``, and which did not run."""
    ran = [f"{r['step']} (version {r['version']})" for r in rows if r["ran"]]
    names = list(STEPS)
    later = names[names.index(stopped) + 1:]
    text = ("steps done before: " + ", ".join(ran)) if ran else "no earlier step changed the table"
    return text + (f"; not run: {', '.join(later)}" if later else "")
