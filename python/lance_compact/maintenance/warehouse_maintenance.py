"""``CALL lance.maintain_warehouse``: every table of the warehouse (or of one namespace)
evaluated from its health, the due ones maintained with ``maintain``'s steps, worst health
first (then priority), within budgets; one row per table and step.

1. evaluate (side by side, metadata only): open each table, resolve its policy (call
   arguments, then table properties, then catalog settings, then defaults), decide what is
   due with it, and score the table's health with its own policy (no call arguments), so
   ``health_before``/``health_after`` are the numbers ``lance.system.table_health`` shows;
   unreadable, opted-out, excluded and healthy tables get one ``all`` row saying why;
2. order the due ones (health, then priority, then name) and apply ``max_tables`` and
   ``max_total_rewrite_bytes`` (estimated from the manifest);
3. maintain them ``parallelism`` at a time: each table in its own thread runs
   ``table_maintenance.run_step`` for compact, optimize_indices and cleanup in order (its commits
   atomic and in order, its conflict re-plans its own), while this (the request's) thread
   packs the rewrite tasks of every table then compacting into shared Spark jobs
   (``shared_jobs.py``). A table that fails gets its error in its row; the others go on.
   With ``fail_on_error`` the statement then fails (:class:`MaintenanceFailed`, the rows
   attached for the JVM's metrics), naming each failed table and why and what the others
   committed (:func:`failure_message`).

``max_duration`` is counted from the call's start (the engine's receipt of the request, or
the JVM's ``started_at_ms`` when it sends one) and covers the evaluation too: no table is
evaluated and no step is started once it is spent; steps in flight finish. The rows say so
("the max_duration budget (5 s) was spent after N of M tables; not started").

A dry run reads metadata only: each table is opened once, and its step rows are its health's
decisions (the same rules and words as the steps'), so nothing is opened or planned again.
"""
from __future__ import annotations

import re
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Mapping

from ..runtime import cancellation, durations, progress
from ..errors import CompactionError, MaintenanceFailed
from ..runtime.failures import describe
from . import retention
from ..compaction import rules
from ..compaction.fragment_facts import FragmentFacts, data_bytes_of
from .health import STEPS as HEALTH_STEPS
from .health_cache import EVALUATION_THREADS, HEALTH, call_policy_key, own_policy_key
from .table_maintenance import SHOWN_FAILURES, STEPS, Target, committed_steps, failed_tasks, run_step, shorten
from ..options import result_columns
from .policy import resolve_policy
from ..runtime.envelope import Envelope
from ..runtime.secrets import redact
from ..compaction.shared_jobs import SharedJobs

log = logging.getLogger(__name__)

# Parameters of the run itself; the others are policy keys (maintain's thresholds).
RUN_KEYS = ("dry_run", "max_tables", "max_total_rewrite_bytes", "max_duration", "parallelism", "exclude",
            "sort_order", "fail_on_error")
def parse_duration(text: str, what: str = "max_duration") -> timedelta:
    """'10 minutes', '90 seconds', '10m', an INTERVAL's text (runtime/durations.py)."""
    return durations.duration(text, f"maintain_warehouse: {what}")


@dataclass
class Table:
    """One table of the run: what evaluating it found, and its rows once done."""

    target: Target
    policy: Any = None
    health: Any = None
    own: Any = None  # the table's own policy (no call arguments): what its score is measured with
    error: str | None = None
    estimate: int = 0  # bytes its compaction would read, from the manifest
    rank: int | None = None
    health_after: int | None = None
    evaluated_ms: int = 0
    cancelled: str | None = None  # why a step of it was cancelled
    rows: list[dict[str, Any]] = field(default_factory=list)
    sort_order: str | None = None  # the call's sort_order (clustering/table_clustering.py)
    ds: Any = None  # the evaluation's open of the table, for its first step (dropped once done)

    @property
    def score(self) -> int | None:
        """The table's health score under its own policy, as lance.system.table_health and
        describe_layout show it at the same moment (the call's thresholds decide what runs,
        not the number): one score for a table everywhere."""
        return None if self.health is None else self.health.score if self.own is None else self.own.score

    @property
    def priority(self) -> int | None:
        return None if self.policy is None else self.policy.priority

    def args(self) -> dict[str, Any]:
        """maintain's thresholds from the table's policy."""
        return {**self.policy.maintain_args(), "sort_order": self.sort_order,
                "target_origin": self.policy.origin("target_rows_per_fragment")}

    def skip(self, reason: str, error: str | None = None) -> None:
        self.rows = [{"step": "all", "ran": False, "reason": reason, "outcome": None, "error": error,
                      "version": None, "bytes_rewritten": 0, "elapsed_ms": self.evaluated_ms}]


def _error_text(e: Exception, storage: dict[str, str]) -> str:
    # what Lance raised named as failures.py names it (an unexpected one: its traceback to the
    # engine's log, which the words name)
    text = e.message if isinstance(e, CompactionError) else f"{type(e).__name__}: {describe(e)}"
    return redact(text.splitlines()[0] if text else type(e).__name__, storage)


def _compaction_bytes(ds, policy) -> int:
    """Bytes of the fragments compaction would take: under the target, or over the deletion
    threshold (the same candidates Lance's planner takes)."""
    thresholds = rules.Thresholds.of_maintenance(ds.config() or {}, policy)
    facts = FragmentFacts.of(ds)
    return data_bytes_of(ds, facts.ids[facts.candidates(thresholds.target, thresholds.threshold)].tolist()) or 0


class Budget:
    """``max_duration``, from the call's start: whether it is spent, and the words that say
    after how many of how many tables."""

    def __init__(self, started: float, seconds: float | None) -> None:
        self.deadline = None if seconds is None else started + seconds
        self.seconds = seconds
        self.lock = threading.Lock()
        self.evaluated = 0
        self.started = 0
        self.closed = False  # evaluation is over: a late one is dropped

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _what(self) -> str:
        return f"the max_duration budget ({self.seconds:g} s)"

    def count(self, what: str) -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + 1)

    def unevaluated(self, listed: int) -> str:
        return f"left: {self._what()} was spent after {self.evaluated} of {listed} tables were evaluated; not evaluated, not started"

    def unstarted(self, chosen: int) -> str:
        return f"left: {self._what()} was spent after {self.started} of {chosen} due tables were started; not started"

    def step_unstarted(self) -> str:
        return f"not started: {self._what()} was spent before this step"


def _evaluate(t: Table, call_args: dict[str, Any], settings: dict[str, str], catalog: str,
              budget: Budget | None = None, estimate_bytes: bool = True) -> None:
    if budget is not None and budget.spent():
        return  # t.health stays None: plan_tables leaves it, saying why
    clock = time.monotonic()
    policy = health = error = ds = None
    estimate = 0
    try:
        def policies(config: Mapping[str, str]) -> list:
            """The call's policy, and the table's own when the call overrides a threshold (the
            score is measured with the table's own, as table_health shows it)."""
            call = resolve_policy(call_args, config, settings, t.target.table, catalog)
            own = resolve_policy(None, config, settings, t.target.table, catalog)
            return [call] if own.values == call.values else [call, own]

        # no history lookup: neither the score nor what is due depends on the last compaction;
        # the table is read again only when it changed since this worker last evaluated it
        ev = HEALTH.evaluate(t.target.uri, t.target.storage_options, t.target.open, policies, history=False,
                             policy_key=call_policy_key(t.target.table, catalog, settings, call_args))
        ds, policy, health = ev.ds, ev.policies[0], ev.healths[0]
        if len(ev.healths) > 1:
            t.own = ev.healths[1]
        if "compact" in health.due and estimate_bytes:  # only max_total_rewrite_bytes asks (reads every fragment's metadata)
            ds = ds if ds is not None else t.target.open()
            estimate = _compaction_bytes(ds, policy)
    except Exception as e:  # unreadable table, invalid policy: its row says so
        error = _error_text(e, t.target.storage_options)
    if budget is not None:
        with budget.lock:
            if budget.closed:  # the budget ran out while this table was read: the run went on without it
                return
            budget.evaluated += 1
    t.policy, t.health, t.error, t.estimate = policy, health, error, estimate
    t.ds = ds if error is None else None
    t.evaluated_ms = int((time.monotonic() - clock) * 1000)


def _health_row(t: Table, step: str) -> dict[str, Any]:
    """A step's row as the table's health decided it (health.py decides as the steps do, with
    the same words): for a dry run, and for a step not due while no earlier step of this call
    changed the table -- without opening the table again."""
    assert tuple(STEPS) == HEALTH_STEPS
    row = {"step": step, "ran": False, "reason": t.health.reasons[step], "outcome": None, "error": None,
           "version": t.health.parts["version"], "elapsed_ms": 0}
    if step == "compact":
        row["bytes_rewritten"] = 0
    return row


def _maintain(t: Table, jobs: SharedJobs, dry: bool, budget: Budget, chosen: int,
              probe: Callable[[], str | None] | None = None) -> None:
    """The table's steps in order, in this thread; an error stops the table, not the run; a
    cancel of the statement (``probe``, the request's) stops every table before its next step;
    a spent ``max_duration`` starts no further step."""
    with cancellation.serving(probe):
        try:
            _maintain_steps(t, jobs, dry, budget, chosen)
        finally:
            t.ds = None  # the table is done: its open (its manifest) is not kept for the rest of the run


def _maintain_steps(t: Table, jobs: SharedJobs, dry: bool, budget: Budget, chosen: int) -> None:
    if budget.spent():
        t.skip(budget.unstarted(chosen))
        return
    budget.count("started")
    if dry:
        t.rows.extend(_health_row(t, step) for step in STEPS)
        return
    args = t.args()
    failed = None
    changed = False  # whether a step of this call changed the table (health no longer says)
    # The open the next step looks at: the evaluation's, until a compaction commits (its run
    # commits through an open of its own: the next step opens the table afresh); Lance moves
    # an open to the version optimize_indices commits, and cleanup commits nothing.
    ds = t.ds
    for step in STEPS:
        if failed is None and cancellation.reason():
            failed = "cancelled"
        if failed is None and budget.spent():
            t.rows.append({"step": step, "ran": False, "reason": budget.step_unstarted(), "outcome": None,
                           "error": None, "version": None, "bytes_rewritten": 0, "elapsed_ms": 0})
            continue
        if failed is not None:
            why = "the statement was cancelled" if failed == "cancelled" else f"{failed} failed"
            t.rows.append({"step": step, "ran": False, "reason": f"not run: {why}", "outcome": None,
                           "error": None, "version": None, "bytes_rewritten": 0, "elapsed_ms": 0})
            continue
        if not changed and step not in t.health.due:
            t.rows.append(_health_row(t, step))
            continue
        clock = time.monotonic()
        if step == "compact":
            jobs.expect()
        try:
            # What health decided stands for compaction on the evaluation's own open (nothing
            # of this call changed the table before it) and for cleanup (old versions stay old).
            decided = t.health.reasons[step] if step in t.health.due and (
                step == "cleanup" or (step == "compact" and ds is not None and ds is t.ds)) else None
            if ds is None and not (step == "cleanup" and decided):
                ds = t.target.open()
            row = run_step(step, t.target, args, jobs, dry, ds, decided=decided)
            row["error"] = None
            if step == "compact" and row["ran"]:
                ds = None
        except Exception as e:
            failed = step
            ds = None  # what the failed step left is read afresh
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
        changed = changed or bool(row["ran"])
        t.rows.append(row)
    if not dry:
        try:
            # the last step's open: at the table's version (cleanup commits nothing); its
            # versions and indices are read afresh
            # kept for the next evaluation (through HEALTH): a maintained table is not read again
            # by the next dry run unless it changes after this
            after = HEALTH.evaluate(
                t.target.uri, t.target.storage_options, lambda: ds if ds is not None else t.target.open(),
                lambda config: [resolve_policy(None, config, t.target.maintain_settings, t.target.table,
                                               t.target.catalog)],  # as score measures it
                history=False, policy_key=own_policy_key(t.target.table, t.target.catalog, t.target.maintain_settings))
            t.health_after = after.healths[0].score
        except Exception as e:
            log.warning("maintain_warehouse: table %s: health after: %s", t.target.table,
                        _error_text(e, t.target.storage_options))


def _skip_reason(t: Table, excluded: set[str]) -> tuple[str, str | None] | None:
    """Why the table is left alone before any budget (None: it is due)."""
    if t.target.table in excluded:
        return "skipped: excluded by the caller (exclude), not evaluated", None
    if t.error is not None:
        return "failed: the table could not be evaluated", t.error
    if t.health is None:
        return None  # not evaluated: the max_duration budget was spent first
    if not t.policy.enabled:
        return (f"skipped: opted out (enabled=false, from the {t.policy.source('enabled')} policy: "
                "table property lance_compact.maintain.enabled or catalog setting maintain.enabled)"), None
    if not t.health.due:
        reasons = "; ".join(f"{s}: {r}" for s, r in sorted(t.health.reasons.items()))
        return f"skipped: healthy (score {t.health.score}), nothing due" + (f" ({reasons})" if reasons else ""), None
    return None


def plan_tables(tables: list[Table], args: dict[str, Any], excluded: set[str],
                budget: Budget | None = None) -> list[Table]:
    """Rank every readable table, mark those left alone, and return the due ones to
    maintain, in order, within ``max_tables`` and ``max_total_rewrite_bytes`` (those the spent
    ``budget`` left unevaluated get a row saying so)."""
    readable = sorted((t for t in tables if t.error is None and t.health is not None),
                      key=lambda t: (t.score, -t.priority, t.target.table))
    for i, t in enumerate(readable):
        t.rank = i + 1
    chosen: list[Table] = []
    spent = 0
    total_bytes = args.get("max_total_rewrite_bytes")
    for t in readable + [t for t in tables if t.error is not None or t.health is None]:
        why = _skip_reason(t, excluded)
        if why is None and t.health is None:  # the max_duration budget ran out first
            listed = sum(x.target.table not in excluded for x in tables)
            t.skip(budget.unevaluated(listed) if budget else "left: not evaluated")
        elif why is not None:
            t.skip(*why)
        elif args.get("max_tables") is not None and len(chosen) >= args["max_tables"]:
            t.skip(f"left: the max_tables budget ({args['max_tables']}) went to worse tables first")
        elif total_bytes is not None and spent + t.estimate > total_bytes:
            t.skip(f"left: compacting it would read about {t.estimate:,} bytes, over what is left of the "
                   f"max_total_rewrite_bytes budget ({total_bytes - spent:,} of {total_bytes:,})")
        else:
            spent += t.estimate
            chosen.append(t)
    return chosen


def listed_namespaces(request: Envelope) -> str:
    """How many namespaces the catalog listed to find the request's tables (a namespace
    argument or a pushed namespace filter lists only those), as the log lines say it; empty
    when the JVM did not say."""
    n = request.extras.get("listed_namespaces")
    return f"; the catalog listed {n} namespaces" if isinstance(n, int) and not isinstance(n, bool) else ""


# The lanes' threads, kept between requests: py4j gives each thread that calls the JVM (the
# cancel checks) a connection of its own -- a socket, a handshake and a JVM thread -- so
# fresh threads per request would open up to ``parallelism`` new ones each time. Bounded by
# the largest parallelism; lanes of concurrent requests beyond it wait their turn.
_LANES = ThreadPoolExecutor(256, thread_name_prefix="maintain-warehouse")


def _call_start(extras: Mapping[str, Any], received: float) -> float:
    """The call's start on this process's monotonic clock: the JVM's ``started_at_ms`` (epoch
    ms, when it sends one: binding and listing the tables took time before the request came)
    if it is earlier than the receipt and plausible (at most an hour before), else the receipt."""
    at = extras.get("started_at_ms")
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        return received
    before = time.time() - at / 1000
    return received - before if 0 < before <= 3600 else received


def maintain_warehouse(request: Envelope, run_packed: Callable,
                       in_engine: tuple[int, int] | None = None) -> list[Table]:
    """Serve one ``maintain_warehouse`` request (parsed by the engine: its tables, checked
    parameters with defaults, catalog settings and storage options); the tables with their rows.
    Rewrites go to shared Spark jobs (``run_packed``), or a small batch to the engine itself
    (``in_engine``: ``SharedJobs``)."""
    started = time.monotonic()  # max_duration counts from here (or the JVM's earlier start)
    where = request.where
    args = dict(request.args)
    dry = bool(args["dry_run"])
    budget = Budget(_call_start(request.extras, started), parse_duration(args["max_duration"]).total_seconds()
                    if args.get("max_duration") else None)
    excluded = {x.strip() for x in (args.get("exclude") or "").split(",") if x.strip()}
    call_args = {k: v for k, v in args.items() if k not in RUN_KEYS}
    if call_args.get("older_than") is not None:  # the call's own argument: refused, not a failure per table
        try:
            retention.check_older_than(call_args["older_than"], where)  # nor below the version floor
        except CompactionError as e:
            raise CompactionError("maintain_warehouse: older_than " + e.message.split("older_than ", 1)[1]) from None
    if args.get("sort_order") is not None:  # its columns' names, once for the call (runtime/identifiers.py)
        from ..compaction.clustering.sort_order import parse_sort_order
        try:
            parse_sort_order(str(args["sort_order"]), where)
        except CompactionError as e:  # the call's own argument: refused, not a failure per table
            raise CompactionError(e.message.replace(f"table {where}: ", f"maintain_warehouse of {where}: ", 1)) from None
    storage = dict(request.storage_options)
    settings = dict(request.maintain_settings)
    catalog = request.catalog_name
    base = Target("", "", storage, catalog, settings)
    tables = [Table(base.other(e.qualified, e.uri, e.table_id), sort_order=args.get("sort_order")) for e in request.tables]
    workers = max(1, min(args["parallelism"], len(tables) or 1))
    evaluated = [t for t in tables if t.target.table not in excluded]
    # Metadata only, I/O bound: as many at once as table_health evaluates (most tables only
    # listed, the full reads bounded by the cache: health_cache.py), each table opened at most
    # once. When max_duration runs out, the run goes on without the tables still being read
    # (reads only: their threads end on their own, their results are dropped).
    pool = ThreadPoolExecutor(max(1, min(EVALUATION_THREADS, len(evaluated))),
                              thread_name_prefix="maintain-warehouse-evaluate")
    try:
        estimate = args.get("max_total_rewrite_bytes") is not None
        reads = [pool.submit(_evaluate, t, call_args, settings, catalog, budget, estimate) for t in evaluated]
        wait(reads, timeout=budget.remaining())
        with budget.lock:
            budget.closed = True
        for t, f in zip(evaluated, reads):
            if f.done() and not f.cancelled() and f.exception() is not None:  # our bug: its row says so
                t.error = _error_text(f.exception(), storage)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    log.info("maintain_warehouse: %d tables evaluated in %d ms%s", budget.evaluated,
             (time.monotonic() - started) * 1000, listed_namespaces(request))
    chosen = plan_tables(tables, args, excluded, budget)
    log.info("maintain_warehouse: %d tables, %d due and chosen, %d threads", len(tables), len(chosen), workers)
    jobs = SharedJobs(run_packed, in_engine=in_engine)
    finished = threading.Event()
    probe = cancellation.current_probe()
    waiting = list(reversed(chosen))  # popped from the end: the run's order
    lock = threading.Lock()
    reporter = progress.current()
    finished_tables = [0]
    lines = None
    if reporter is not None and chosen:
        reporter(f"maintain_warehouse: 0 of {len(chosen)} due tables done")
        # each table's steps say so too: "tables 3 of 12 done; db.t: compact"
        lines = progress.PerTable(reporter, lambda: f"tables {finished_tables[0]} of {len(chosen)} done; ")

    def lane() -> None:
        """One of ``parallelism`` lanes: the next table in order, until none is left."""
        while True:
            with lock:
                if not waiting:
                    return
                t = waiting.pop()
            try:
                with progress.serving(lines.table(t.target.table) if lines is not None else None):
                    _maintain(t, jobs, dry, budget, len(chosen), probe)
            except Exception as e:  # our bug: the table's row says so
                t.skip("failed", _error_text(e, storage))
            with lock:
                finished_tables[0] += 1

    lanes = [_LANES.submit(lane) for _ in range(min(workers, len(chosen)))]
    waiter = threading.Thread(target=lambda: ([f.exception() for f in lanes], finished.set()), daemon=True)
    waiter.start()
    jobs.serve(finished)  # on this thread: the Spark jobs run under the caller's job group
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


def table_failure(t: Table) -> str | None:
    """Why table ``t`` failed in this run, in words (None: it did not): it could not be
    evaluated, a step failed (and what its earlier steps committed), or compaction tasks failed
    all their attempts while the others were committed."""
    parts = []
    for r in t.rows:
        if not r.get("error"):
            continue
        if r["step"] == "all":
            what = r["reason"].removeprefix("failed").lstrip(": ")
            parts.append(f"{what}: {shorten(r['error'])}" if what else shorten(r["error"]))
        else:
            done = committed_steps(t.rows)
            parts.append(f"{r['step']} failed: {shorten(r['error'])}"
                         + (f" (committed before it: {done})" if done else ""))
    tasks = failed_tasks(t.rows)
    if tasks:
        parts.append(tasks)
    return "; ".join(parts) or None


def failure_message(tables: list[Table], where: str, catalog: str, dry: bool) -> str | None:
    """``fail_on_error``'s message: each failed table and why (the first
    :data:`SHOWN_FAILURES`, then how many more), and what was committed for the others; None
    when no table failed."""
    failed = [(t.target.table, why) for t in tables for why in [table_failure(t)] if why]
    if not failed:
        return None
    shown = "; ".join(f"{name}: {why}" for name, why in failed[:SHOWN_FAILURES])
    more = f"; and {len(failed) - SHOWN_FAILURES} more failed tables" if len(failed) > SHOWN_FAILURES else ""
    names = {name for name, _ in failed}
    done = [f"{t.target.table}: {committed_steps(t.rows)}" for t in tables
            if t.target.table not in names and committed_steps(t.rows)]
    if dry:
        committed = "A dry run: nothing was committed"
    elif done:
        committed = ("Committed for the tables that succeeded: " + "; ".join(done[:SHOWN_FAILURES])
                     + (f"; and {len(done) - SHOWN_FAILURES} more tables" if len(done) > SHOWN_FAILURES else ""))
    else:
        committed = "No other table was changed"
    how = "a dry run" if dry else "every other table was maintained as due"
    return (f"maintain_warehouse of {where} (catalog {catalog}): {len(failed)} of {len(tables)} tables failed "
            f"(fail_on_error => true; {how}): {shown}{more}. {committed}. "
            "Without fail_on_error the statement returns these as rows (error)")


def maintain_warehouse_rows(request: Envelope, run_packed: Callable,
                            in_engine: tuple[int, int] | None = None) -> list[tuple]:
    """The result rows (parameters.json's ``maintain_warehouse_columns``), in the run's order.
    With ``fail_on_error`` and a failed table: :class:`MaintenanceFailed`, holding the rows."""
    tables = maintain_warehouse(request, run_packed, in_engine)
    ordered = sorted(tables, key=lambda t: (t.rank is None, t.rank or 0, t.target.table))
    out = []
    for t in ordered:
        for r in t.rows:
            row = {**r, "table": t.target.table, "health_before": t.score,
                   "health_after": t.health_after, "priority": t.priority, "rank": t.rank}
            out.append(tuple(row.get(c) for c, _ in result_columns("maintain_warehouse_columns")))
    if request.args.get("fail_on_error"):
        message = failure_message(ordered, request.where, request.catalog_name, bool(request.args["dry_run"]))
        if message:
            log.warning("%s", message)
            raise MaintenanceFailed(message, "maintain_warehouse_columns", out)
    return out


def maintain_warehouse_on_spark(request: Envelope, sc: Any) -> list[tuple]:
    """The engine's handler: rewrite tasks run as shared Spark jobs on ``sc``'s cluster, a
    table's batch small enough (``spark.lance.compact.engineRewrite.maxBatchBytes``: by default in
    local mode only) in the engine, as a single CALL's is."""
    from ..compaction import engine_rewrite
    from ..compaction.spark_job import run_packed
    from ..runtime.driver_conf import max_task_attempts
    limit = engine_rewrite.engine_settings(sc)
    return maintain_warehouse_rows(request, lambda entries: run_packed(sc, entries),
                                   (limit, max_task_attempts(sc)) if limit > 0 else None)
