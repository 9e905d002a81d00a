"""A procedure's CALL for the PySpark API, run on a thread of its own so that an interrupt of the
caller (Ctrl-C in a script, a notebook's stop) cancels it cleanly.

A CALL runs while ``spark.sql`` analyses it. Run on the caller's thread, a Ctrl-C in a plain
script landed inside that Py4J call: PySpark's SIGINT handler called ``cancelAllJobs`` on the
same Py4J connection (a reentrant call, which fails), the connection was left mid-answer, and
the statement's work, often no Spark job at that moment, went on and committed. Here the
statement runs on a runner thread while the caller waits in Python, so PySpark's handler works
as it should. Runner threads are kept and reused (one per call running at once): a warm CALL
starts no thread and opens no Py4J connection. Each call hands its runner the caller's local
properties (job group, tags, pool, description, as pyspark's ``InheritableThread`` does, and the
caller's session tags) plus a job tag of the call's own.

On an interrupt of the caller the call cancels that tag (the statement's cancel watch,
CancelWatch.scala, takes it as the statement's cancel) and interrupts the statement's JVM
thread (as Thrift's cancel does: it also stops a statement that has not reached its engine
worker yet, which a tag cancel would miss), waits for the statement's answer (bounded: the
pool's ``cancelGrace``, after which a worker that did not stop is killed, plus a margin) and
raises :class:`~lance_compact.errors.StatementInterrupted`, a ``KeyboardInterrupt`` whose
message is that answer: "... cancelled ...; nothing was committed", or what landed if the
commit came first. Over Spark Connect the same with the session's tags: the runner adds the
caller's tags and one of the call's own, and the interrupt is ``interruptTag``.
"""
from __future__ import annotations

import queue
import threading
import time
import uuid
from typing import Any, Callable, Generic, TypeVar

from .errors import StatementInterrupted

T = TypeVar("T")

TAG_PREFIX = "lance-compact-call-"
GRACE_SETTING = "spark.lance.compact.engine.cancelGrace"
GRACE_DEFAULT_MS = 10_000
MARGIN_S = 5.0  # past the grace: the killed worker's answer reaching the caller
SPARE_RUNNERS = 4  # idle runners kept for later calls; more end when idle
# How often the waiting caller wakes: a signal handled on another thread (or simulated, as
# _thread.interrupt_main does) reaches it at its next wake.
WAKE_S = 0.25


class Call(Generic[T]):
    """One statement handed to a runner: what it returned or raised, once ``done`` is set."""

    def __init__(self, statement: Callable[[], T], prepare: Callable[[], None]) -> None:
        self.statement, self.prepare = statement, prepare
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.jvm_thread: Any = None  # the runner's JVM thread (Classic), for an interrupt
        self.lock = threading.Lock()
        self.cancelled = False  # the caller cancelled it (checked before the statement starts)

    def started(self, jvm_thread: Any = None) -> None:
        """On the runner, last before the statement: it starts, unless cancelled already."""
        with self.lock:
            if self.cancelled:
                raise NotStarted()
            self.jvm_thread = jvm_thread

    def run(self) -> None:
        try:
            self.prepare()
            self.value = self.statement()
        except BaseException as e:  # noqa: B036 - handed to the caller as it is
            self.error = e
        finally:
            self.done.set()


class NotStarted(Exception):
    """The call was cancelled before its statement started."""


class _Runner(threading.Thread):
    """A daemon thread that runs calls one at a time and then waits, idle, for the next (a
    daemon: a statement the caller stopped waiting for does not hold the interpreter's exit)."""

    def __init__(self) -> None:
        super().__init__(name="lance-compact-call", daemon=True)
        self.calls: "queue.SimpleQueue[Call[Any]]" = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            self.calls.get().run()
            with _lock:
                if len(_idle) >= SPARE_RUNNERS:
                    return
                _idle.append(self)


_lock = threading.Lock()
_idle: list[_Runner] = []


def _start(call: Call[Any]) -> None:
    with _lock:
        runner = _idle.pop() if _idle else None
    if runner is None:
        runner = _Runner()
        runner.start()
    runner.calls.put(call)


def background(work: Callable[[], None]) -> None:
    """``work()`` on a runner thread, not waited for (a progress line's poll of the JVM)."""
    call: Call[None] = Call(work, lambda: None)
    _start(call)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session."""
    try:
        from pyspark.sql.utils import is_remote

        return bool(is_remote()) or type(spark).__module__.startswith("pyspark.sql.connect")
    except Exception:
        return type(spark).__module__.startswith("pyspark.sql.connect")


def _pinned(spark: Any) -> bool:
    """Whether PySpark Classic runs each Python thread on a JVM thread of its own (pinned
    thread mode, the default): only then do local properties set on the runner apply to it."""
    try:
        from py4j.clientserver import ClientServer
        from pyspark import SparkContext

        return isinstance(SparkContext._gateway, ClientServer) and spark.sparkContext._jvm is not None
    except Exception:
        return False


class _JvmHandles:
    """The JVM objects every call uses, looked up once per SparkContext (each Py4J name lookup
    is a round trip)."""

    _cached: "tuple[Any, _JvmHandles] | None" = None

    def __init__(self, sc: Any) -> None:
        self.jsc = sc._jsc.sc()
        self.thread = sc._jvm.java.lang.Thread
        self.cancel_watch = sc._jvm.io.github.lancecompact.spark.engine.CancelWatch

    @classmethod
    def of(cls, sc: Any) -> "_JvmHandles":
        cached = cls._cached
        if cached is None or cached[0] is not sc._jsc:
            cached = cls._cached = (sc._jsc, cls(sc))
        return cached[1]


class _Classic:
    """The caller's side of a call in PySpark Classic: its properties for the runner, and the
    cancel."""

    def __init__(self, spark: Any, tag: str, properties: dict[str, str]) -> None:
        self.sc = spark.sparkContext
        self.jvm = _JvmHandles.of(self.sc)
        # The caller's local properties (job group, tags, pool, description), and its session's
        # tags: Spark Classic keeps SparkSession.addTag's per thread, and CancelWatch reads them
        # on the statement's thread as the engine does, so they go with the call as job tags.
        self.caller_props = self.jvm.jsc.getLocalProperties()
        self.session_tags = str(self.jvm.cancel_watch.sessionTags().mkString(","))
        self.tag, self.properties = tag, properties

    def prepare(self, call: Call[Any]) -> Callable[[], None]:
        def on_runner() -> None:
            props = self.caller_props.clone()  # the caller waits meanwhile: it changes nothing
            tags = (props.getProperty("spark.job.tags") or "").split(",") + self.session_tags.split(",")
            props.setProperty("spark.job.tags", ",".join(dict.fromkeys([t for t in tags if t] + [self.tag])))
            for k, v in self.properties.items():
                props.setProperty(k, v)
            me = self.jvm.thread.currentThread()
            self.jvm.thread.interrupted()  # an interrupt meant for an earlier call of this runner: not ours
            self.jvm.jsc.setLocalProperties(props)
            call.started(me)
        return on_runner

    def cancel(self, call: Call[Any]) -> None:
        with call.lock:
            call.cancelled = True
            thread = call.jvm_thread
        self.sc.cancelJobsWithTag(self.tag)
        if thread is not None and not call.done.is_set():
            thread.interrupt()

    def grace_s(self) -> float:
        return self.jvm.jsc.getConf().getTimeAsMs(GRACE_SETTING, f"{GRACE_DEFAULT_MS}ms") / 1000


class _Connect:
    """The caller's side of a call over Spark Connect: the caller's tags and the call's own on
    the runner (the client keeps tags per thread), the cancel by ``interruptTag``."""

    def __init__(self, spark: Any, tag: str) -> None:
        self.spark, self.tag = spark, tag
        local = spark.client.thread_local
        self.tags = set(getattr(local, "tags", set())) | {tag}

    def prepare(self, call: Call[Any]) -> Callable[[], None]:
        def on_runner() -> None:
            self.spark.client.thread_local.tags = set(self.tags)
            call.started()
        return on_runner

    def cancel(self, call: Call[Any]) -> None:
        with call.lock:
            call.cancelled = True
        self.spark.interruptTag(self.tag)

    def grace_s(self) -> float:
        return GRACE_DEFAULT_MS / 1000  # the server's setting is not the client's to read


def run(spark: Any, what: str, statement: Callable[[], T], *, properties: dict[str, str] | None = None,
        waiting: Callable[[Call[T]], None] | None = None) -> T:
    """``statement()`` (a ``spark.sql`` CALL on ``spark``) on a runner thread; ``what`` names it
    in the message of an interrupt ("compact of db.t"). ``properties``: more local properties
    for the statement (Classic). ``waiting(call)``, if given, is what the caller does while the
    statement runs (drawing its progress line); it returns once ``call.done`` is set.

    Raises :class:`StatementInterrupted` when the caller is interrupted meanwhile (see the
    module's doc); otherwise returns or raises what the statement did. PySpark Classic without
    pinned threads runs the statement on the caller's thread, as before."""
    connect = is_connect(spark)
    if not connect and not _pinned(spark):
        return statement()
    tag = f"{TAG_PREFIX}{uuid.uuid4().hex}"
    side: _Classic | _Connect = _Connect(spark, tag) if connect else _Classic(spark, tag, properties or {})
    call: Call[T] = Call(statement, lambda: None)
    call.prepare = side.prepare(call)
    _start(call)
    try:
        if waiting is not None:
            waiting(call)
        while not call.done.wait(WAKE_S):
            pass
    except KeyboardInterrupt:
        raise _interrupted(side, call, what) from None
    if call.error is not None:
        raise call.error
    return call.value


def _interrupted(side: _Classic | _Connect, call: Call[Any], what: str) -> StatementInterrupted:
    """Cancel the call's statement, wait for its answer (bounded) and say it."""
    started = time.monotonic()
    try:
        bound = side.grace_s() + MARGIN_S
        side.cancel(call)
    except Exception as e:  # the JVM or the server is going away: say what is known
        return StatementInterrupted(f"{what} was interrupted; its cancel could not be sent "
                                    f"({type(e).__name__}): see the table's versions for what landed")
    try:
        finished = call.done.wait(bound)
    except KeyboardInterrupt:
        return StatementInterrupted(
            f"{what} was cancelled; stopped waiting for its answer (interrupted again): nothing is "
            "committed after the cancel, and its engine worker is killed if it does not stop within "
            f"{GRACE_SETTING}")
    seconds = time.monotonic() - started
    if not finished:
        return StatementInterrupted(
            f"{what} was cancelled and did not answer within {bound:.0f} s ({GRACE_SETTING} plus "
            f"{MARGIN_S:.0f} s): nothing is committed after the cancel; its engine worker is killed once "
            "the grace has passed", seconds=seconds)
    if isinstance(call.error, NotStarted):
        return StatementInterrupted(f"{what} was cancelled before it started: nothing ran and nothing "
                                    "was committed", seconds=seconds)
    if call.error is not None:
        return StatementInterrupted(_message(call.error), answer=call.error, seconds=seconds)
    return StatementInterrupted(
        f"{what} finished before the cancel took effect (its commit came first): {_summary(call.value)}",
        result=call.value, seconds=seconds)


def _message(error: BaseException) -> str:
    """A statement's error as its caller reads it: Spark's message (condition and text), no JVM
    stack."""
    get = getattr(error, "getMessage", None)
    try:
        text = get() if callable(get) else str(error)
    except Exception:
        text = str(error)
    return str(text).split("\n\nJVM stacktrace:")[0].strip()


def _summary(result: Any) -> str:
    """A procedure's result, said in one line (its first row)."""
    try:
        rows = result.collect() if hasattr(result, "collect") else list(result)
    except Exception as e:
        return f"(its result could not be read: {type(e).__name__})"
    if not rows:
        return "no rows"
    first = rows[0].asDict() if hasattr(rows[0], "asDict") else dict(rows[0])
    text = ", ".join(f"{k}={v}" for k, v in first.items())
    return (text[:400] + "...") if len(text) > 400 else text + (f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else "")
