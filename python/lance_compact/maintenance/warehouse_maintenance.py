"""``CALL lance.maintain_warehouse``: every table of the warehouse (or of one namespace)
evaluated from its health, the due ones maintained with ``maintain``'s steps, worst health
first (then priority), within budgets; one row per table and step.

1. evaluate (side by side, metadata only): open each table, resolve its policy (call
   arguments, then table properties, then catalog settings, then defaults), score its
   health; unreadable, opted-out, excluded and healthy tables get one ``all`` row saying why;
2. order the due ones (health, then priority, then name) and apply ``max_tables`` and
   ``max_bytes`` (estimated from the manifest);
3. maintain them ``parallelism`` at a time: each table in its own thread runs
   ``table_maintenance.run_step`` for compact, optimize_indices and cleanup in order (its commits
   atomic and in order, its conflict re-plans its own), while this (the request's) thread
   packs the rewrite tasks of every table then compacting into shared Spark jobs
   (``shared_jobs.py``). A table that fails gets its error in its row; the others go on.
   ``max_duration``: no table starts after it.
"""
from __future__ import annotations

import re
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

from ..runtime import cancellation
from ..errors import CompactionError
from . import version_cleanup
from ..compaction import rules
from ..compaction.fragments import data_bytes
from .health import table_health
from .table_maintenance import STEPS, Target, run_step
from ..options import result_columns
from .policy import resolve_policy
from ..runtime.envelope import Envelope
from ..runtime.secrets import redact
from ..compaction.shared_jobs import SharedJobs

log = logging.getLogger(__name__)

# Parameters of the run itself; the others are policy keys (maintain's thresholds).
RUN_KEYS = ("dry_run", "max_tables", "max_bytes", "max_duration", "parallelism", "exclude")
def parse_duration(text: str, what: str = "max_duration") -> timedelta:
    """'10 minutes', '90 seconds', '1 hour', '2 days' (version_cleanup's durations)."""
    duration = version_cleanup.parse_duration(text, f"maintain_warehouse: {what}")
    if duration is None:
        raise CompactionError(f"maintain_warehouse: {what} expects '<n> seconds|minutes|hours|days', got {text!r}")
    return duration


@dataclass
class Table:
    """One table of the run: what evaluating it found, and its rows once done."""

    target: Target
    policy: Any = None
    health: Any = None
    error: str | None = None
    estimate: int = 0  # bytes its compaction would read, from the manifest
    rank: int | None = None
    health_after: int | None = None
    evaluated_ms: int = 0
    cancelled: str | None = None  # why a step of it was cancelled
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def score(self) -> int | None:
        return None if self.health is None else self.health.score

    @property
    def priority(self) -> int | None:
        return None if self.policy is None else self.policy.priority

    def args(self) -> dict[str, Any]:
        """maintain's thresholds from the table's policy."""
        return self.policy.maintain_args()

    def skip(self, reason: str, error: str | None = None) -> None:
        self.rows = [{"step": "all", "ran": False, "reason": reason, "outcome": None, "error": error,
                      "version": None, "bytes_rewritten": 0, "elapsed_ms": self.evaluated_ms}]


def _error_text(e: Exception, storage: dict[str, str]) -> str:
    text = e.message if isinstance(e, CompactionError) else f"{type(e).__name__}: {e}"
    return redact(text.splitlines()[0] if text else type(e).__name__, storage)


def _compaction_bytes(ds, policy) -> int:
    """Bytes of the fragments compaction would take: under the target, or over the deletion
    threshold (the same candidates Lance's planner takes)."""
    thresholds = rules.Thresholds.of_maintenance(ds.config() or {}, policy)
    return data_bytes([f.metadata for f in ds.get_fragments() if thresholds.is_candidate(f.metadata)]) or 0


def _evaluate(t: Table, call_args: dict[str, Any], settings: dict[str, str], catalog: str) -> None:
    clock = time.monotonic()
    try:
        ds = t.target.open()
        t.policy = resolve_policy(call_args, ds.config() or {}, settings, t.target.table, catalog)
        t.health = table_health(ds, t.policy)
        if "compact" in t.health.due:
            t.estimate = _compaction_bytes(ds, t.policy)
    except Exception as e:  # unreadable table, invalid policy: its row says so
        t.error = _error_text(e, t.target.storage_options)
    t.evaluated_ms = int((time.monotonic() - clock) * 1000)


def _maintain(t: Table, jobs: SharedJobs, dry: bool, deadline: float | None,
              probe: Callable[[], str | None] | None = None) -> None:
    """The table's steps in order, in this thread; an error stops the table, not the run; a
    cancel of the statement (``probe``, the request's) stops every table before its next step."""
    with cancellation.serving(probe):
        _maintain_steps(t, jobs, dry, deadline)


def _maintain_steps(t: Table, jobs: SharedJobs, dry: bool, deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        t.skip("left: the max_duration budget was spent before this table's turn")
        return
    args = t.args()
    failed = None
    for step in STEPS:
        if failed is None and cancellation.reason():
            failed = "cancelled"
        if failed is not None:
            why = "the statement was cancelled" if failed == "cancelled" else f"{failed} failed"
            t.rows.append({"step": step, "ran": False, "reason": f"not run: {why}", "outcome": None,
                           "error": None, "version": None, "bytes_rewritten": 0, "elapsed_ms": 0})
            continue
        clock = time.monotonic()
        if step == "compact":
            jobs.expect()
        try:
            row = run_step(step, t.target, args, jobs, dry)
            row["error"] = None
        except Exception as e:
            failed = step
            if isinstance(e, cancellation.Cancelled):
                t.cancelled, failed = "a Spark job of its maintenance was cancelled", "cancelled"
                cancellation.cancel(t.cancelled)  # every other table stops at its next check too
            row = {"step": step, "ran": False, "reason": "due; failed", "outcome": None,
                   "error": _error_text(e, t.target.storage_options), "version": None, "bytes_rewritten": 0,
                   "elapsed_ms": int((time.monotonic() - clock) * 1000)}
            log.warning("maintain_warehouse: table %s: %s failed: %s", t.target.table, step, row["error"])
        finally:
            if step == "compact":
                jobs.settle()
        t.rows.append(row)
    if not dry:
        try:
            t.health_after = table_health(t.target.open(), t.policy).score
        except Exception as e:
            log.warning("maintain_warehouse: table %s: health after: %s", t.target.table,
                        _error_text(e, t.target.storage_options))


def _skip_reason(t: Table, excluded: set[str]) -> tuple[str, str | None] | None:
    """Why the table is left alone before any budget (None: it is due)."""
    if t.target.table in excluded:
        return "skipped: excluded by the caller (exclude), not evaluated", None
    if t.error is not None:
        return "failed: the table could not be evaluated", t.error
    if not t.policy.enabled:
        return (f"skipped: opted out (enabled=false, from the {t.policy.source('enabled')} policy: "
                "table property lance_compact.maintain.enabled or catalog setting maintain.enabled)"), None
    if not t.health.due:
        reasons = "; ".join(f"{s}: {r}" for s, r in sorted(t.health.reasons.items()))
        return f"skipped: healthy (score {t.health.score}), nothing due" + (f" ({reasons})" if reasons else ""), None
    return None


def plan_tables(tables: list[Table], args: dict[str, Any], excluded: set[str]) -> list[Table]:
    """Rank every readable table, mark those left alone, and return the due ones to
    maintain, in order, within ``max_tables`` and ``max_bytes``."""
    readable = sorted((t for t in tables if t.error is None and t.health is not None),
                      key=lambda t: (t.score, -t.priority, t.target.table))
    for i, t in enumerate(readable):
        t.rank = i + 1
    chosen: list[Table] = []
    spent = 0
    for t in readable + [t for t in tables if t.error is not None or t.health is None]:
        why = _skip_reason(t, excluded)
        if why is not None:
            t.skip(*why)
        elif args.get("max_tables") is not None and len(chosen) >= args["max_tables"]:
            t.skip(f"left: the max_tables budget ({args['max_tables']}) went to worse tables first")
        elif args.get("max_bytes") is not None and spent + t.estimate > args["max_bytes"]:
            t.skip(f"left: compacting it would read about {t.estimate:,} bytes, over what is left of the "
                   f"max_bytes budget ({args['max_bytes'] - spent:,} of {args['max_bytes']:,})")
        else:
            spent += t.estimate
            chosen.append(t)
    return chosen


def maintain_warehouse(request: Envelope, run_packed: Callable) -> list[Table]:
    """Serve one ``maintain_warehouse`` request (parsed by the engine: its tables, checked
    parameters with defaults, catalog settings and storage options); the tables with their rows."""
    where = request.where
    args = dict(request.args)
    dry = bool(args["dry_run"])
    deadline = (time.monotonic() + parse_duration(args["max_duration"]).total_seconds()
                if args.get("max_duration") else None)
    excluded = {x.strip() for x in (args.get("exclude") or "").split(",") if x.strip()}
    call_args = {k: v for k, v in args.items() if k not in RUN_KEYS}
    if call_args.get("older_than") is not None:  # the call's own argument: refused, not a failure per table
        try:
            version_cleanup.parse_older_than(call_args["older_than"], where)
        except CompactionError as e:
            raise CompactionError("maintain_warehouse: older_than " + e.message.split("older_than ", 1)[1]) from None
    storage = dict(request.storage_options)
    settings = dict(request.maintain_settings)
    catalog = request.catalog_name
    base = Target("", "", storage, catalog, settings)
    tables = [Table(base.other(e.qualified, e.uri)) for e in request.tables]
    workers = max(1, min(args["parallelism"], len(tables) or 1))
    with ThreadPoolExecutor(workers, thread_name_prefix="maintain-warehouse") as pool:
        list(pool.map(lambda t: _evaluate(t, call_args, settings, catalog),
                      [t for t in tables if t.target.table not in excluded]))
        chosen = plan_tables(tables, args, excluded)
        log.info("maintain_warehouse: %d tables, %d due and chosen, %d threads", len(tables), len(chosen), workers)
        jobs = SharedJobs(run_packed)
        finished = threading.Event()
        probe = cancellation.current_probe()
        futures = [pool.submit(_maintain, t, jobs, dry, deadline, probe) for t in chosen]
        waiter = threading.Thread(target=lambda: ([f.exception() for f in futures], finished.set()), daemon=True)
        waiter.start()
        jobs.serve(finished)  # on this thread: the Spark jobs run under the caller's job group
        for t, f in zip(chosen, futures):
            if f.exception() is not None:  # our bug: the table's row says so
                t.skip("failed", _error_text(f.exception(), storage))
    log.info("maintain_warehouse: %d shared rewrite jobs, %d tasks", jobs.jobs, jobs.tasks)
    why = cancellation.reason() or next((t.cancelled for t in chosen if t.cancelled), None)
    if why:
        done = [f"{t.target.table} {r['step']} (version {r['version']})" for t in chosen for r in t.rows if r["ran"]]
        # a compaction with partial progress may have committed before its cancel: its error says which
        done += [f"{t.target.table} {r['step']} ({m.group(1)})" for t in chosen for r in t.rows
                 if not r["ran"] and r["error"]
                 for m in [re.search(r"(versions? [\d, and]+) (?:was|were) committed before the cancel", r["error"])]
                 if m]
        raise cancellation.Cancelled(
            f"{where}: maintain_warehouse was cancelled ({why}); "
            + (f"done before the cancel: {', '.join(done)}" if done else "no table was changed")
            + "; no step started after it")
    return tables


def maintain_warehouse_rows(request: Envelope, run_packed: Callable) -> list[tuple]:
    """The result rows (parameters.json's ``maintain_warehouse_columns``), in the run's order."""
    tables = maintain_warehouse(request, run_packed)
    ordered = sorted(tables, key=lambda t: (t.rank is None, t.rank or 0, t.target.table))
    out = []
    for t in ordered:
        for r in t.rows:
            row = {**r, "table": t.target.table, "health_before": t.score,
                   "health_after": t.health_after, "priority": t.priority, "rank": t.rank}
            out.append(tuple(row.get(c) for c, _ in result_columns("maintain_warehouse_columns")))
    return out


def maintain_warehouse_on_spark(request: Envelope, sc: Any) -> list[tuple]:
    """The engine's handler: rewrite tasks run as shared Spark jobs on ``sc``'s cluster."""
    from ..compaction.spark_job import run_packed
    return maintain_warehouse_rows(request, lambda entries: run_packed(sc, entries))
