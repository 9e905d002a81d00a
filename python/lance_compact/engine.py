"""The driver's long-lived engine process: ``python -m lance_compact.engine``.

Started once per SparkContext by the JVM (``EngineProcess.scala``), it connects back over
Py4J with the port and secret in its environment, wraps the driver's SparkContext in a
PySpark one, and serves every procedure call: ``compact`` (plan, Spark jobs that rewrite on
executors, commits), ``plan``, ``layout``, ``cleanup``. pylance is imported once, and a
call costs no Spark job of its own beyond the rewrite.

Requests are long-polled from the JVM; each is served on its own thread (so a Thrift
server's concurrent statements run side by side), under its caller's job group and tags.
Each request is parsed once into a typed ``Envelope`` (runtime/envelope.py); each handler
answers a ``Result`` that owns its columns, made into rows only in :func:`handle`.
Responses are JSON: ``{"ok": true, "schema": DDL, "rows": [[...]]}`` or ``{"ok": false,
"error": message, "kind": what kind of failure}`` (:func:`failure_kind`; a maintenance that
failed with ``fail_on_error`` also carries its ``schema`` and ``rows``). Nothing here logs a request: it holds storage credentials.
"""
from __future__ import annotations

import json
import importlib
import logging
import os
import re
import sys
import threading
import time
import traceback
from typing import Any, Callable

from .runtime.envelope import Envelope, Result

log = logging.getLogger("lance_compact.engine")


Handler = Callable[[Envelope], Result]


def _on_first_use(module: str, function: str) -> Handler:
    """A handler whose module is imported when it is first called, not at engine start."""
    def handle_request(request: Envelope) -> Result:
        return getattr(importlib.import_module(f".{module}", __package__), function)(request)
    return handle_request


def _handlers(sc: Any) -> dict[str, Handler]:
    """Every action's handler: it takes the parsed request and returns its :class:`Result`."""
    from .compaction import orchestrate
    from .compaction.request import CompactionRequest
    from .maintenance.version_cleanup import cleanup
    from .report.layout import layout_result
    from .compaction.spark_job import SparkBatchRunner
    from .catalog.warehouse import warehouse_rows
    from .catalog import metadata_tables
    from .catalog import table_reads
    from .maintenance.indices import optimize_indices
    from .maintenance.table_maintenance import maintain

    runner = SparkBatchRunner(sc)

    def system_table(function: str) -> Handler:
        # imported on first use: no CALL needs it
        def handle_request(request: Envelope) -> Result:
            module = importlib.import_module(".catalog.system_tables", __package__)
            return Result(*getattr(module, function)(request))
        return handle_request

    def warehouse_maintenance(request: Envelope) -> Result:
        # imported on first use, like the namespace handlers: no CALL but its own needs it
        module = importlib.import_module(".maintenance.warehouse_maintenance", __package__)
        return Result.of("maintain_warehouse_columns", module.maintain_warehouse_on_spark(request, sc))

    return {
        "compact": lambda r: Result.of("result_columns", [orchestrate.compact(CompactionRequest.of(r), runner)]),
        "plan": lambda r: Result.of("plan_columns", orchestrate.dry_run(CompactionRequest.of(r))),
        "layout": layout_result,  # the layout row, or the histogram's lines
        "cleanup": lambda r: Result.of("cleanup_columns", [cleanup(r.require_target(), r.args, r.options)]),
        "warehouse": warehouse_rows,
        "describe": table_reads.describe,
        "read": table_reads.read,
        # imported on first use: lance.namespace alone takes about 1 s to import cold, and
        # neither is on a CALL's path
        "read_plan": _on_first_use("catalog.read_source", "read_plan"),
        "namespace": _on_first_use("catalog.namespaces", "namespace_rows"),
        "metadata": metadata_tables.metadata_table,
        "maintain": lambda r: Result.of("maintain_columns", maintain(r, runner)),
        "optimize_indices": lambda r: Result.of("optimize_indices_columns",
                                                [optimize_indices(r.require_target(), r.args)]),
        "maintain_warehouse": warehouse_maintenance,
        # the cluster builds an index (indexing/build.py); imported on first use
        "create_index": lambda r: Result.of("create_index_columns", [
            importlib.import_module(".indexing.build", __package__).create_index(r, sc)]),
        "drop_index": lambda r: Result.of("drop_index_columns", [
            importlib.import_module(".maintenance.index_drop", __package__).drop_index(r.require_target(), r.args)]),
        "table_health": system_table("table_health_rows"),
        "maintenance_history": system_table("maintenance_history_rows"),
        "alter_properties": _on_first_use("catalog.table_properties", "alter_properties"),
        # the pool: what a dead or killed worker's statement wrote and did not commit
        "discard_staged": _on_first_use("maintenance.staged_files", "discard_staged"),
    }


# Actions whose work is said as it starts (progress.py): those that change a table or run
# long; compact, maintain and maintain_warehouse say their own steps.
_STEPS_SHOWN = {"cleanup": "cleanup", "optimize_indices": "optimize_indices", "drop_index": "drop_index"}


def handle(handlers: dict[str, Handler], action: str, request: str) -> dict[str, Any]:
    """Serve one request: parsed once (``Envelope.parse``), handed to the action's handler,
    its :class:`Result` made into rows here. Every failure becomes ``{"ok": false, "error":
    ...}``: a Lance panic (pyo3's ``PanicException``, a ``BaseException``) and a ``SystemExit``
    or ``KeyboardInterrupt`` raised by a handler included, so no statement is left unanswered
    and the engine keeps serving."""
    from .errors import CompactionError, MaintenanceFailed
    from .runtime.secrets import redact, request_secrets

    try:
        raw = json.loads(request)
    except ValueError:
        raw = None
    storage = raw.get("storage_options") if isinstance(raw, dict) else None
    storage = storage if isinstance(storage, dict) else None
    # This request's secrets are redacted from its own log lines only (not remembered).
    # named in an unexpected error's message (as the request gives it: a fault may come before
    # the request is parsed)
    table = raw.get("table") if isinstance(raw, dict) and isinstance(raw.get("table"), str) else None
    with request_secrets(storage):
        try:
            if action not in handlers:
                raise CompactionError(f"engine: unknown action {action!r}")
            if not isinstance(raw, dict):
                raise CompactionError(f"engine: the {action} request is not a JSON object")
            # the pool's discard_staged carries a statement's request: never its test faults
            envelope = Envelope.parse(action, raw if action == "discard_staged" else _test_fault(raw))
            if action in _STEPS_SHOWN and envelope.target is not None:  # a job named for its table in the UI
                from .runtime import progress
                progress.report(f"{envelope.target.table}: {_STEPS_SHOWN[action]}")
            result = handlers[action](envelope)
            return {"ok": True, "schema": result.schema, "rows": result.json_rows()}
        except CompactionError as e:
            answer = {"ok": False, "error": _one_line(redact(scrub(e.message), storage)), "kind": failure_kind(e)}
            if isinstance(e, MaintenanceFailed):  # the run's rows too: the JVM records them, then fails
                result = Result.of(e.section, e.rows)
                answer.update(schema=result.schema, rows=result.json_rows())
            return answer
        except Exception as e:  # a bug or an unexpected Lance error: say what, keep serving
            from .runtime.failures import classify, describe, keep_traceback

            keep_traceback(e, f"engine: {action} failed", storage)  # once: describe names the log
            where = f"table {table}: " if table else ""
            return {"ok": False, "error": _one_line(redact(
                scrub(f"{where}lance_compact engine: {action} failed: {type(e).__name__}: {describe(e)}"), storage)),
                    "kind": classify(e).kind}
        except _LoseResponse:
            raise
        except BaseException as e:  # noqa: B036 - a panic, SystemExit, KeyboardInterrupt
            log.error("engine: %s failed: %s", action, redact(traceback.format_exc(), storage))
            return {"ok": False, "error": _one_line(redact(_base_exception_message(action, e), storage))}


def _one_line(message: str) -> str:
    """An error as the caller gets it: one line, every character that is not printable escaped
    (runtime/identifiers.py): Spark's servers log a failed statement's error, and a name in it
    (a table's column, a Lance error quoting an index) must not write a line of its own there."""
    from .runtime.identifiers import escape
    return escape(message)


# The words runtime/failures.py promises in messages built from a Failure, by kind; the first
# match wins (a conflict's message may also name the store).
_KIND_WORDS = (("worker_lost", ("python worker died", "executor running the task was lost")),
               ("conflict", ("concurrent",)),
               ("storage", ("object store", "storage failure", "storage full", "no space left")),
               ("corrupt", ("corrupt or unreadable file", "a data file the table references is missing")),
               ("missing", ("does not exist (no lance dataset", "is not a lance dataset",
                            "no such table", "version of the table does not exist")),
               # failures.bug_phrase: an error no rule names (LANCE_INTERNAL_ERROR, not bad input)
               ("bug", ("please report it with the engine's log",)))


# A Rust source location in Lance's words (", /home/runner/work/lance/.../planner.rs:951:33"):
# the user is shown what failed, not where in Lance's sources.
_SOURCE_PATH = re.compile(r"(?:,\s*)?(?:/[^\s,()]*|[\w.-]+(?:/[\w.-]+)*)\.rs:\d+(?::\d+)?")
# It is tried at every position and backtracks over a long path: over a message that repeats a
# statement's 120,000-character table path it held the GIL for a minute (the worker's heartbeat
# stopped). So it is matched only in a bounded window before each ".rs:<line>".
_RS_LINE = re.compile(r"\.rs:\d+")
_SCRUB_WINDOW = 512


def scrub(message: str) -> str:
    """``message`` without Rust source locations (linear in its length)."""
    out: list[str] = []
    done = floor = 0
    for rs in _RS_LINE.finditer(message):
        m = _SOURCE_PATH.search(message, max(floor, rs.start() - _SCRUB_WINDOW), rs.end() + 12)
        floor = rs.end()
        if m is not None and m.start() >= done:
            out.append(message[done:m.start()])
            done = m.end()
    out.append(message[done:])
    return "".join(out)


def failure_kind(e: Exception) -> str:
    """What kind of failure a :class:`CompactionError` is, for the JVM's error condition: its
    own ``kind``, else the words its message holds (runtime/failures.py's phrases), else bad
    input."""
    from .errors import INVALID

    kind = getattr(e, "kind", None)
    if kind:
        return kind
    low = getattr(e, "message", str(e)).lower()
    for name, words in _KIND_WORDS:
        if any(w in low for w in words):
            return name
    return INVALID


def _base_exception_message(action: str, e: BaseException) -> str:
    """What a ``BaseException`` that is not an ``Exception`` means for the user."""
    from .runtime.failures import first_part

    text = first_part(str(e)) or "(no message)"
    if type(e).__name__ == "PanicException":  # pyo3_runtime.PanicException: Rust panicked
        return (f"Lance panicked: {text} (lance_compact engine: {action}; an input Lance cannot "
                "handle: nothing was committed by the failing step; the engine keeps serving)")
    return (f"lance_compact engine: {action} was stopped by {type(e).__name__}: {text} "
            "(the engine keeps serving)")


# Test-only (LANCE_COMPACT_TEST_HOOKS=1): options-map key test_engine_fault of a CALL
# (panic | system_exit | keyboard_interrupt | lose_response | unrecognized: an exception no rule
# of runtime/failures.py names) makes its request fail so.
TEST_FAULT = "test_engine_fault"


def _test_fault(raw: dict[str, Any]) -> dict[str, Any]:
    from .options import hooks_enabled

    options = raw.get("options")
    if not hooks_enabled() or not isinstance(options, dict) or TEST_FAULT not in options:
        return raw
    fault = options.pop(TEST_FAULT, None)
    if fault == "panic":  # a real Lance panic: `DateTime - TimeDelta` overflowed
        import datetime
        import lance
        lance.dataset(raw["uri"], storage_options=raw.get("storage_options") or None) \
            .explain_cleanup_old_versions(older_than=datetime.timedelta(days=10 ** 8))
        raise AssertionError("Lance no longer panics here: choose another panic for the test")
    if fault == "system_exit":
        raise SystemExit(3)
    if fault == "keyboard_interrupt":
        raise KeyboardInterrupt("injected")
    if fault == "lose_response":
        raise _LoseResponse()
    if fault == "unrecognized":
        _injected_bug()
    return raw


def _injected_bug() -> None:
    """Test-only: fails as a bug of ours would (the traceback must reach the engine's log)."""
    raise ZeroDivisionError("injected by test_engine_fault: no rule names this error")


class _LoseResponse(BaseException):
    """Test-only: the serving thread ends without answering (as if it had died)."""


def _exit_with_parent() -> None:
    """The JVM holds our stdin: when it ends (or dies), so do we."""
    try:
        while sys.stdin.buffer.read(1 << 16):
            pass
    finally:
        _remove_own_staged()
        os._exit(0)


def _remove_own_staged() -> None:
    """Before exiting because the JVM is gone (no pool is left to do it): remove what this
    worker's requests wrote and did not commit (maintenance/staged_files.py), within 10 s; and
    the Lance warm-up's scratch folder if the exit came during it."""
    _remove_warm_folder()
    try:
        from .maintenance.staged_files import remove_own
        remove_own(10.0)
    except BaseException as e:  # noqa: B036 - exiting anyway
        log.warning("engine: removing uncommitted files before exiting failed: %s", e)


def _exit_when_orphaned() -> None:
    """Also end when the JVM that started us is gone (we were re-parented): a child process
    that inherited our stdin's write end would otherwise keep us alive after a SIGKILL."""
    parent = os.getppid()
    while True:
        time.sleep(1)
        if os.getppid() != parent:
            _remove_own_staged()
            os._exit(0)


def _preload() -> None:
    # Overlaps the imports a first call needs with connecting to the JVM.
    import lance  # noqa: F401
    from .compaction import orchestrate, spark_job  # noqa: F401
    from .maintenance import version_cleanup  # noqa: F401
    from .report import layout  # noqa: F401
    _warm_lance()


def _warm_lance() -> None:
    """Lance's write, compaction and read paths run once on a scratch table in a temporary
    folder (about 0.05-0.1 s) before this worker is ready: its runtime's threads, allocators and
    first-run code are then warm for the first statement (measured on a 600-fragment
    compaction: 0.54-0.81 s first in a fresh process, 0.47-0.50 s after this). Never fails the start."""
    import tempfile

    import lance
    import pyarrow as pa

    global _WARM_FOLDER
    _remove_dead_workers_warm_folders()
    folder = _WARM_FOLDER = tempfile.mkdtemp(prefix=f"{WARM_PREFIX}{os.getpid()}-")
    try:
        uri = os.path.join(folder, "warm.lance")
        rows = pa.table({"id": pa.array(range(64), pa.int64()), "s": pa.array([f"r{i}" for i in range(64)])})
        lance.write_dataset(rows, uri)
        lance.write_dataset(rows, uri, mode="append")
        lance.dataset(uri).optimize.compact_files()
        lance.dataset(uri).to_table()
    except Exception as e:  # only a head start
        log.debug("warming Lance failed: %s", e)
    finally:
        _remove_warm_folder()


# The warm-up's scratch folder (a worker's pid in its name), while it exists: an exit during
# the warm-up (the JVM gone: os._exit from another thread) removes it; one left by a worker
# that was killed is removed by the next worker that warms up on this machine.
WARM_PREFIX = "lance-compact-warm-"
_WARM_FOLDER: str | None = None


def _remove_warm_folder() -> None:
    global _WARM_FOLDER
    import shutil

    folder, _WARM_FOLDER = _WARM_FOLDER, None
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def _remove_dead_workers_warm_folders() -> None:
    """Scratch folders of workers no longer running (killed during their warm-up)."""
    import shutil
    import tempfile

    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        pid = name[len(WARM_PREFIX):].split("-", 1)[0] if name.startswith(WARM_PREFIX) else ""
        if not (pid.isascii() and pid.isdigit()) or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # gone: its folder is nobody's
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except (PermissionError, OverflowError, ValueError):  # another user's process, or no pid
            pass


def _start_workers(sc: Any) -> None:
    # While this process finishes starting and plans, the executors start their Python workers
    # (once per pool: its first worker).
    if os.environ.get("LANCE_COMPACT_ENGINE_WORKER", "1") != "1":
        return
    try:
        from .compaction.spark_job import start_workers
        clock = time.monotonic()
        start_workers(sc)
        log.info("Python workers started in %d ms", (time.monotonic() - clock) * 1000)
    except Exception as e:  # only a head start: a compaction starts its workers anyway
        log.warning("starting Python workers ahead of time failed: %s", e)


class _Serving:
    """The requests this engine took and has not answered: the heartbeat reports them, so
    the JVM fails a request whose serving thread is gone without answering instead of
    waiting for it while the engine is otherwise alive; and whether the memory keeper asks
    for this engine to be replaced (over its ceiling)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()
        self._taken = 0
        self.keeper: Any = None

    def take(self, request_id: str) -> None:
        with self._lock:
            self._taken += 1
            self._ids.add(request_id)

    def done(self, request_id: str) -> None:
        with self._lock:
            self._ids.discard(request_id)

    def report(self) -> str:
        """``<requests taken>;<id>,<id>...;<replace me: 1 or 0>``, what ``EngineBridge.heartbeat``
        reads."""
        over = int(bool(self.keeper is not None and self.keeper.over))
        with self._lock:
            return f"{self._taken};{','.join(sorted(self._ids))};{over}"


class _Workers:
    """The threads that serve requests, one request at a time each, kept for the next one: in
    Py4J's pinned-thread mode each Python thread has a connection and a JVM thread of its own,
    made on its first call (a few to tens of ms). A request never waits for a thread: with none
    idle, a new one starts, so concurrent statements run side by side as before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[Any] = []  # the inboxes of idle workers
        self._count = 0

    def run(self, function: Callable[..., None], *args: Any) -> None:
        """Run ``function(*args)`` on an idle worker, or on a new one."""
        import queue

        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self._count += 1
                number = self._count
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(inbox,), daemon=True,
                             name=f"request-worker-{number}").start()
        inbox.put((function, args))

    def _work(self, inbox: Any) -> None:
        while True:
            function, args = inbox.get()
            try:
                function(*args)
            except BaseException as e:  # noqa: B036 - serve answers itself; keep the worker
                log.warning("engine: a request's thread failed after answering: %s", e)
            with self._lock:
                self._idle.append(inbox)


def _heartbeat(bridge: Any, serving: _Serving) -> None:
    """Tell the JVM this process is alive, every few seconds: a caller waiting for an answer
    takes a silent engine as hung (``spark.lance.compact.engine.heartbeatTimeout``), and a
    request this engine no longer lists as served as lost."""
    interval = bridge.heartbeatIntervalMs() / 1000
    while True:
        try:
            bridge.heartbeat(serving.report())
        except Exception as e:  # the JVM is going away; stdin's end stops this process
            log.warning("heartbeat failed: %s", e)
        time.sleep(interval)


def _read_driver_settings(sc: Any) -> None:
    """Once, at start: what the operator configured (the SparkContext's static conf: registered
    strategies, the picture folder) and whether this engine was started for tests (its
    environment). No SQL statement can change either afterwards."""
    from .runtime import driver_conf
    from .runtime import secrets
    from .options import hooks_enabled

    conf = list(driver_conf.static_conf(sc).items())
    secrets.install_log_redaction()
    from .runtime.identifiers import guard_log_lines
    guard_log_lines()  # after the redaction: every record on lines of its own, names escaped
    secrets.remember_operator({k.rsplit(".", 1)[-1]: v for k, v in conf if ".storage." in k})
    # A catalog service's headers (spark.sql.catalog.<name>.headers.x-api-key) and Glue client's
    # credentials (.secret_access_key, ...): secrets too. Keyed by their own names, which say so.
    secrets.remember_operator({k: v for k, v in conf if k.startswith("spark.sql.catalog.") and (
        ".header." in k or ".headers." in k or k.endswith((".access_key_id", ".secret_access_key", ".session_token")))})
    driver_conf.load(conf)
    from .runtime import tables
    try:
        tables.configure(dict(conf))
    except ValueError as e:  # the operator's typo must not stop every statement: say it, keep the default
        log.error("engine: %s; the default is used", e)
    tables.lance_session()  # made now, before the first statement (a spare worker starts warm)
    if hooks_enabled():
        log.warning("test hooks are enabled ($LANCE_COMPACT_TEST_HOOKS=1): for tests only")
        from .runtime.hooks import load_slowdowns
        load_slowdowns(dict(conf))


def _memory_figures() -> str:
    """What the engine keeps, for the memory keeper's log line (runtime/memory.py)."""
    from .runtime.tables import session_figures
    figures = session_figures()
    ages = sys.modules.get(f"{__package__}.maintenance.version_ages")  # only once a request used it
    kept = sys.modules.get(f"{__package__}.maintenance.health_cache")
    return (figures + (f"; {ages.COMMIT_TIMES.figures()}" if ages is not None else "")
            + (f"; {kept.HEALTH.figures()}" if kept is not None else ""))


def _detach_from_terminal() -> None:
    """A terminal's Ctrl-C goes to its whole foreground process group, which this process
    would be in: spark-sql's statement is cancelled by its JVM (which tells us), and the worker
    must not die of the same signal (it answers "cancelled" instead). Its own session, and
    SIGINT ignored should it be sent to us alone."""
    import signal
    try:
        os.setsid()
    except OSError:  # already a group leader
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# EngineBridge methods whose arguments are only strings, numbers and booleans, which Py4J
# sends as they are: called thousands of times by a warehouse run (progress, figures, the
# commit gate), they skip PySpark's argument converters, whose checks (inspect.getattr_static
# a converter and an argument) cost more than the call's own round trip.
PLAIN_BRIDGE_METHODS = ("progress", "figures", "cancelled", "beginCommit", "endCommit", "staged",
                        "heartbeat", "adopt", "respond", "nextRequest", "cancel")


def _plain_arguments(obj: Any, names: tuple[str, ...]) -> None:
    """Py4J keeps one member object a method name on ``obj``: without converters, its calls
    send their arguments as they are (a list or dict argument would then fail: none is passed)."""
    for name in names:
        getattr(obj, name).converters = None


def main() -> None:
    from .runtime.memory import ARENAS, limit_arenas
    capped = limit_arenas()  # before any thread is made (runtime/memory.py)
    _detach_from_terminal()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s")
    if capped:
        log.info("memory: at most %d malloc arenas", ARENAS)
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    threading.Thread(target=_exit_when_orphaned, daemon=True).start()
    preload = threading.Thread(target=_preload, daemon=True)
    preload.start()

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway()  # PYSPARK_GATEWAY_PORT/SECRET from the JVM
    bridge = gateway.entry_point
    _plain_arguments(bridge, PLAIN_BRIDGE_METHODS)
    jsc = bridge.javaSparkContext()
    sc = SparkContext(gateway=gateway, jsc=jsc, conf=SparkConf(_jconf=jsc.sc().conf()))
    _read_driver_settings(sc)
    threading.Thread(target=_start_workers, args=(sc,), daemon=True).start()
    preload.join()
    handlers = _handlers(sc)
    from .runtime import spark_jobs
    spark_jobs.bind_bridge(bridge)  # every Spark job of a request hands its cancel watch over (spark_jobs.run_job)
    workers = _Workers()
    bridge.ready()
    serving = _Serving()
    threading.Thread(target=_heartbeat, args=(bridge, serving), daemon=True, name="heartbeat").start()
    from .runtime.memory import Keeper, settings as memory_settings
    from .runtime.tables import cache_bounds
    from .runtime.driver_conf import static_conf
    interval, ceiling = memory_settings(static_conf(sc), cache_bounds())
    keeper = Keeper(_memory_figures, interval, ceiling).start()
    serving.keeper = keeper
    log.info("engine ready (pid %d)", os.getpid())

    def serve(request_id: str, action: str, request: str) -> None:
        from .runtime import progress
        from .runtime import commit_gate
        from .runtime.cancellation import Gate, serving as checking_cancellation

        started = time.monotonic()
        text = None
        try:
            bridge.adopt(request_id)
            reporter = progress.Reporter(lambda said, ui: bridge.progress(request_id, said, ui),
                                         lambda figures: bridge.figures(request_id, figures))
            with checking_cancellation(lambda: bridge.cancelled(request_id), Gate(bridge, request_id)), \
                    progress.serving(reporter):
                try:
                    text = json.dumps(handle(handlers, action, request))
                finally:
                    commit_gate.forget()  # answered: what it staged is the JVM's to know no more
                    reporter.flush_figures()  # the Lance tab has them before the statement ends
        except _LoseResponse:
            return  # test-only: the JVM must notice from the heartbeat (finally still runs)
        except BaseException as e:  # noqa: B036 - the caller must always get an answer
            text = json.dumps({"ok": False, "error": f"lance_compact engine: {action}: {type(e).__name__}: {e}"})
        finally:
            try:
                if text is not None:
                    bridge.respond(request_id, text)  # first: the caller waits for nothing else
            finally:
                serving.done(request_id)  # the JVM fails it if it was not answered
                keeper.served()
                try:
                    bridge.adopt("")  # clear the caller's job group and tags from this thread
                except BaseException as e:  # noqa: B036
                    log.warning("engine: clearing the caller's properties failed: %s", e)
        log.info("served %s in %d ms", action, (time.monotonic() - started) * 1000)

    while True:
        raw = bridge.nextRequest(60_000)
        if raw is None:
            continue
        message = json.loads(raw)
        serving.take(message["id"])
        try:
            workers.run(serve, message["id"], message["action"], message["request"])
        except BaseException as e:  # noqa: B036 - e.g. no thread can be started: answer here
            serving.done(message["id"])
            bridge.respond(message["id"], json.dumps(
                {"ok": False, "error": f"lance_compact engine: cannot serve {message['action']}: {e}"}))


# What the JVM answers a worker's start once its SparkContext has stopped (the pool had started
# a spare just before the session ended).
_SESSION_ENDED = ('"org.apache.spark.SparkEnv$.get()" is null', "Cannot call methods on a stopped SparkContext",
                  "SparkContext has been shutdown", "SparkContext was shut down")


def run() -> None:
    """``main()``, ended by ``os._exit`` whatever way it ends: never Python's normal shutdown,
    which joins the executors' threads and waits on Lance's runtime. When the JVM dies the
    main loop's next call fails; a shutdown would then wait forever on a thread still inside a
    request (seen: an engine left behind by a SIGKILLed spark-sql, its stdin at end of file,
    the stdin watcher frozen by the shutdown before it could end the process)."""
    code = 1
    try:
        main()
        code = 0
    except BaseException as e:  # noqa: B036 - the JVM is gone (or we cannot reach it): end
        text = str(e)
        if any(m in text for m in _SESSION_ENDED):  # a spare started as the session stopped: said quietly
            logging.getLogger("lance_compact.engine").info(
                "engine: ending: the Spark session stopped while this worker started (%s)",
                text.strip().splitlines()[-1][:200] if text.strip() else type(e).__name__)
        else:
            logging.getLogger("lance_compact.engine").error(
                "engine: ending: the main loop failed (the JVM is gone or cannot be reached): %s: %s",
                type(e).__name__, e)
        _remove_own_staged()  # no pool is left to remove them (also when stdin's EOF came second)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: B036
                pass
        os._exit(code)


if __name__ == "__main__":
    run()
