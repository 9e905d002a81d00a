"""Cancel means stop, and failures are named as what they are (issue 19, items 2 and 3).

A real PySpark session (local[2]) with a short engine heartbeat bound; small degraded tables
of 60 fragments whose compaction plans 6 tasks. A task is slowed only through the test-hook
``test_task_sleep_ms`` (this process enables test hooks, as the test suite does). Cancels come
from another thread, as a notebook's stop button, the Thrift server or Spark Connect send them:
the statement's job group, its job tag, an interrupt of the statement's thread. Every
assertion reads the table with pylance: versions before and after, rows exact, no orphan file.
"""
import os
import re
import signal
import sys
import threading
import time

import lance
import pytest

from conftest import ROOT, compact_call, degraded_table_for, wait_for
from oracle import content
from engine_pool import wait_for_leased, workers

os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"  # test hooks exist only in processes started so
HEARTBEAT_TIMEOUT_S = 6
SLOW = 120_000  # ms a slowed task sleeps: far longer than any test waits


@pytest.fixture(scope="module")
def spark(warehouse):
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(ROOT / "examples"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")] if p)
    builder = (SparkSession.builder.master("local[2]").appName("lance-compact-cancel-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.lance.compact.engine.heartbeatTimeout", f"{HEARTBEAT_TIMEOUT_S}s"))
    session = configure_spark_with_lance_compact(builder, warehouse=str(warehouse)).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def table(warehouse, request):
    return degraded_table_for(warehouse, request, fragments=60)



def engine(spark):
    return spark._jvm.io.github.lancecompact.spark.engine.EngineProcess.get(spark._jsparkSession)


def orphans(path) -> set[str]:
    """Data files no version of the table references."""
    referenced = set()
    for v in lance.dataset(str(path)).versions():
        ds = lance.dataset(str(path), version=v["version"])
        referenced |= {d.path for f in ds.get_fragments() for d in f.metadata.files}
    return set(os.listdir(path / "data")) - referenced


class Statement:
    """A CALL on its own thread, tagged as a client would tag it (job group or job tag); the
    JVM thread it runs on, for an interrupt (what the Thrift server and Connect do)."""

    def __init__(self, spark, sql: str, group: str | None = None, tag: str | None = None) -> None:
        self.spark, self.sql, self.group, self.tag = spark, sql, group, tag
        self.error: Exception | None = None
        self.result = None
        self.ended: float | None = None
        self.jvm_thread = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _run(self) -> None:
        sc = self.spark.sparkContext
        if self.group:
            sc.setJobGroup(self.group, "a statement to cancel", interruptOnCancel=False)
        if self.tag:
            sc.addJobTag(self.tag)
        self.jvm_thread = self.spark._jvm.java.lang.Thread.currentThread()
        self.ready.set()
        try:
            self.result = self.spark.sql(self.sql).collect()
        except Exception as e:
            self.error = e
        finally:
            self.ended = time.monotonic()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the statement did not end within {timeout} s"


def running_jobs(spark, group: str) -> tuple[int, int]:
    """(jobs of the group that run tasks so far, of which running)."""
    tracker = spark.sparkContext.statusTracker()
    ids = [i for i in tracker.getJobIdsForGroup(group)
           if tracker.getJobInfo(i) is not None and len(tracker.getJobInfo(i).stageIds) > 0]
    running = [i for i in ids if (tracker.getJobInfo(i) or None) and tracker.getJobInfo(i).status == "RUNNING"]
    return len(ids), len(running)


def finished_tasks(spark) -> int:
    """Tasks of the running stages that finished (Spark merged their accumulator updates, so
    the engine has their outcomes, before it counts them here)."""
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
    return sum(s.numCompletedTasks for s in stages if s is not None)


def rewrites_since(path, version: int) -> list[int]:
    """Versions after ``version`` whose transaction is a Rewrite (a compaction's commit)."""
    ds = lance.dataset(str(path))
    out = []
    for v in range(version + 1, ds.version + 1):
        t = ds.read_transaction(v)
        if t is not None and type(t.operation).__name__ == "Rewrite":
            out.append(v)
    return out


def slow_call(table: str, task: str, extra: str = "") -> str:
    return (f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 300{extra}, "
            f"options => map('test_task_sleep_ms', '{task}:{SLOW}'))")


# ---------------------------------------------------------------------------------------------
# Cancel means stop

def test_cancelling_the_job_group_stops_a_partial_progress_run(spark, table):
    """6 tasks in 3 batches of 2; task 4 (batch 3) sleeps. Cancelled while batch 3 runs: the CALL
    fails within seconds saying it was cancelled and which 2 versions were committed before;
    nothing commits afterwards, rows exact, no orphan file."""
    t, path = table
    before = lance.dataset(str(path))
    s = Statement(spark, slow_call(t, "4", ", partial_progress => true, max_commits => 3"), group="cancel-pp")
    wait_for(lambda: running_jobs(spark, "cancel-pp") == (3, 1))
    wait_for(lambda: finished_tasks(spark) == 1)  # batch 3's other task finished; task 4 sleeps
    committed = rewrites_since(path, before.version)
    assert len(committed) == 2
    cancelled_at = time.monotonic()
    spark.sparkContext.cancelJobGroup("cancel-pp")
    s.join(60)
    seconds = s.ended - cancelled_at
    print(f"\njob group cancel -> statement failed in {seconds:.2f} s")
    message = str(s.error)
    assert s.error is not None and "the compaction was cancelled during batch 3" in message, message
    assert "job group" in message
    assert (f"versions {committed[0]} and {committed[1]} were committed before the cancel; nothing after"
            in message), message
    assert "the 1 file of tasks that finished but were not committed was removed" in message
    assert "1 task had not reported (running or not yet started)" in message
    assert "still running" not in message
    assert seconds < 15
    after = lance.dataset(str(path))
    assert after.version == committed[-1]
    time.sleep(2)
    assert lance.dataset(str(path)).version == committed[-1]  # nothing commits afterwards
    assert content(after) == content(before)
    assert not orphans(path)


def _kill_stage_as_the_ui_does(spark, tag: str) -> None:
    sc = spark.sparkContext
    for stage in sc.statusTracker().getActiveStageIds():
        sc._jsc.sc().cancelStage(stage, "killed via the Web UI")


CANCELS = {
    "job tag": lambda spark, tag: spark.sparkContext.cancelJobsWithTag(tag),
    "all jobs": lambda spark, tag: spark.sparkContext.cancelAllJobs(),  # PySpark's Ctrl-C
    "Web UI": _kill_stage_as_the_ui_does,
}


@pytest.mark.parametrize("how", list(CANCELS))
def test_cancelling_stops_a_run_and_removes_what_it_wrote(spark, table, how):
    """One batch of 6 tasks; task 1 sleeps while the others finish. Cancelled by job tag, by
    cancelAllJobs, or by the UI's kill of the stage: nothing was committed, the finished tasks'
    files are removed, and the next CALL compacts."""
    t, path = table
    before = lance.dataset(str(path))
    files = set(os.listdir(path / "data"))
    s = Statement(spark, slow_call(t, "1"), tag="cancel-me")
    wait_for(lambda: finished_tasks(spark) == 5)  # the 5 other tasks finished; task 1 sleeps
    cancelled_at = time.monotonic()
    CANCELS[how](spark, "cancel-me")
    s.join(60)
    seconds = s.ended - cancelled_at
    print(f"\n{how} cancel -> statement failed in {seconds:.2f} s")
    message = str(s.error)
    assert "the compaction was cancelled during batch 1" in message and how in message, message
    assert "nothing was committed" in message
    removed = re.search(r"the (\d+) files? of tasks that finished but were not committed (?:were|was) removed", message)
    assert removed and int(removed.group(1)) == 5, message
    assert "1 task had not reported (running or not yet started)" in message
    assert seconds < 15
    assert lance.dataset(str(path)).version == before.version
    assert set(os.listdir(path / "data")) == files
    r = compact_call(spark, t)
    assert r.commits == 1 and content(lance.dataset(str(path))) == content(before)


def test_a_cancel_while_no_job_runs_stops_before_the_commit(spark, table):
    """A plain cancelJobGroup sent while batch 1 waits for its commit (no job of the statement
    runs then; Spark cancels active jobs only and says nothing when none is): the statement's
    cancel watch sees it in Spark's scheduler, so batch 1 is not committed and nothing starts
    after it."""
    t, path = table
    before = lance.dataset(str(path))
    s = Statement(spark, f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, "
                         "partial_progress => true, max_commits => 3, "
                         "options => map('test_before_commit', 'writers.slow_commit'))", group="between")
    wait_for(lambda: running_jobs(spark, "between") == (1, 0))  # batch 1 ran; its commit waits
    cancelled_at = time.monotonic()
    spark.sparkContext.cancelJobGroup("between")
    s.join(60)
    print(f"\njob group cancel while no job runs -> statement failed in {s.ended - cancelled_at:.2f} s")
    message = str(s.error)
    committed = rewrites_since(path, before.version)
    assert not committed and "the compaction was cancelled before a commit" in message, message
    assert "job group between" in message and "nothing was committed" in message, message
    assert s.ended - cancelled_at < 5  # the slow commit hook sleeps 3 s, then the check
    assert running_jobs(spark, "between") == (1, 0)  # batch 2 never started
    assert lance.dataset(str(path)).version == before.version
    assert content(lance.dataset(str(path))) == content(before)
    assert not orphans(path)


def test_interrupting_the_statement_thread_stops_the_run(spark, table):
    """The Thrift server's cancel and Spark Connect's interrupt interrupt the statement's
    thread, which waits for the engine: the engine's job is cancelled and the run stops."""
    t, path = table
    before = lance.dataset(str(path))
    s = Statement(spark, slow_call(t, "4", ", partial_progress => true, max_commits => 3"), group="interrupted")
    wait_for(lambda: running_jobs(spark, "interrupted") == (3, 1))
    wait_for(lambda: finished_tasks(spark) == 1)  # as above: only task 4 still runs
    committed = rewrites_since(path, before.version)
    interrupted_at = time.monotonic()
    s.jvm_thread.interrupt()
    s.join(60)
    seconds = s.ended - interrupted_at
    print(f"\nthread interrupt -> statement failed in {seconds:.2f} s")
    message = str(s.error)
    assert "the compaction was cancelled" in message and "the statement was interrupted" in message, message
    assert f"{committed[-1]} were committed before the cancel; nothing after" in message, message
    assert seconds < 15
    time.sleep(2)
    assert lance.dataset(str(path)).version == committed[-1]
    assert content(lance.dataset(str(path))) == content(before)
    assert not orphans(path)


@pytest.mark.usefixtures("no_version_floor")
def test_maintain_stops_between_steps_when_cancelled(warehouse, request):
    """maintain asks before each step (in the engine the probe asks the JVM; here it says
    cancelled after the first question): the compaction ran, the rest did not."""
    from lance_compact.runtime import cancellation
    from lance_compact.maintenance.table_maintenance import maintain
    from lance_compact.runtime.envelope import Envelope

    t, path = degraded_table_for(warehouse, request, fragments=4)
    lance.dataset(str(path)).optimize.compact_files(target_rows_per_fragment=1000)
    version = lance.dataset(str(path)).version
    asked = []

    def probe():
        asked.append(1)
        return None if len(asked) == 1 else "the statement was interrupted"

    with cancellation.serving(probe), pytest.raises(cancellation.Cancelled) as e:
        maintain(Envelope.parse("maintain", {"table": t, "uri": str(path)}), runner=None)
    assert ("maintain was cancelled before its optimize_indices step (the statement was interrupted); "
            "no earlier step changed the table; not run: cleanup") in e.value.message
    assert lance.dataset(str(path)).version == version


@pytest.mark.usefixtures("no_version_floor")
def test_maintain_warehouse_stops_every_table_when_cancelled(tmp_path):
    """maintain_warehouse's table threads ask the statement's probe before each step: after the
    cancel no step starts on any table, and the call fails saying nothing was changed."""
    import json

    import pyarrow as pa
    from lance_compact.runtime import cancellation
    from lance_compact.maintenance.warehouse_maintenance import maintain_warehouse
    from lance_compact.runtime.envelope import Envelope

    tables = []
    for name in ("a", "b"):
        uri = str(tmp_path / f"{name}.lance")
        lance.write_dataset(pa.table({"id": list(range(10))}), uri)
        lance.write_dataset(pa.table({"id": list(range(10, 20))}), uri, mode="append")
        tables.append({"namespace": "db", "table": name, "uri": uri})
    versions = {t["uri"]: lance.dataset(t["uri"]).version for t in tables}
    asked = []

    def probe():
        asked.append(1)
        return None if len(asked) == 1 else "the statement was interrupted"

    # cleanup is due on both (old versions); compaction is not (min_small_fragments)
    request = {"tables": tables, "params": {"older_than": "0 seconds", "min_small_fragments": 1000,
                                            "parallelism": 1}}
    with cancellation.serving(probe), pytest.raises(cancellation.Cancelled) as e:
        maintain_warehouse(Envelope.parse("maintain_warehouse", json.dumps(request)), run_packed=None)
    assert "maintain_warehouse was cancelled (the statement was interrupted)" in e.value.message
    assert "no table was changed" in e.value.message
    assert {t["uri"]: lance.dataset(t["uri"]).version for t in tables} == versions
    assert all(len(lance.dataset(t["uri"]).versions()) == 2 for t in tables)  # nothing cleaned up


# ---------------------------------------------------------------------------------------------
# The engine: a bound on a hung engine; a dead engine's Spark jobs are cancelled

def test_a_hung_engine_fails_the_call_and_is_replaced(spark, table):
    t, path = table
    before = lance.dataset(str(path))
    log = engine(spark).logFile().getPath()
    s = Statement(spark, slow_call(t, "all"), group="engine-hung")
    wait_for(lambda: running_jobs(spark, "engine-hung") == (1, 1))
    [pid] = wait_for_leased(spark)  # the statement's worker: it hangs from now on
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    try:
        s.join(HEARTBEAT_TIMEOUT_S + 30)
        seconds = time.monotonic() - started
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    print(f"\nhung engine -> statement failed after {seconds:.1f} s (bound {HEARTBEAT_TIMEOUT_S} s)")
    message = str(s.error)
    assert f"the lance_compact engine process (pid {pid}" in message, message
    assert "no heartbeat" in message and "LANCE_WORKER_LOST" in message, message
    assert log in message
    assert HEARTBEAT_TIMEOUT_S - 3 <= seconds < HEARTBEAT_TIMEOUT_S + 10  # from its last heartbeat
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
             timeout=15)
    assert lance.dataset(str(path)).version == before.version
    r = compact_call(spark, t)  # another worker
    assert pid not in [w["pid"] for w in workers(spark)] and r.commits == 1
    assert content(lance.dataset(str(path))) == content(before)


def test_a_killed_engine_has_its_spark_job_cancelled(spark, table):
    t, path = table
    before = lance.dataset(str(path))
    s = Statement(spark, slow_call(t, "all"), group="engine-killed")
    wait_for(lambda: running_jobs(spark, "engine-killed") == (1, 1))
    [pid] = wait_for_leased(spark)
    os.kill(pid, signal.SIGKILL)
    s.join(60)
    message = str(s.error)
    assert "LANCE_WORKER_LOST" in message and f"engine worker running compact (pid {pid}" in message, message
    assert "killed by signal 9" in message and "it was not committing: nothing was committed by it" in message
    assert "its Spark jobs were cancelled" in message
    tracker = spark.sparkContext.statusTracker()
    job = tracker.getJobIdsForGroup("engine-killed")[0]
    wait_for(lambda: tracker.getJobInfo(job).status == "FAILED", timeout=15)
    assert lance.dataset(str(path)).version == before.version
    r = compact_call(spark, t)
    assert r.commits == 1 and content(lance.dataset(str(path))) == content(before)


# ---------------------------------------------------------------------------------------------
# Failures named as what they are, with what was committed

def test_a_path_that_is_no_table_does_not_exist(spark, warehouse):
    with pytest.raises(Exception, match=r"db/gone\.lance does not exist \(no Lance dataset there\)"):
        spark.sql(f"CALL lance.compact(table => '{warehouse}/db/gone.lance')").collect()


def test_a_truncated_data_file_is_named_corrupt(spark, table):
    t, path = table
    version = lance.dataset(str(path)).version
    victim = sorted((path / "data").iterdir())[3]
    with open(victim, "r+b") as f:
        f.truncate(100)
    with pytest.raises(Exception) as e:
        compact_call(spark, t)
    message = str(e.value)
    assert "is damaged (a corrupt or unreadable file" in message and "LANCE_CORRUPT_FILE" in message, message
    assert "nothing was committed" in message
    assert lance.dataset(str(path)).version == version


def test_a_failure_after_two_commits_says_which_versions_landed(spark, table):
    """Partial progress: someone overwrites the table before the third commit."""
    t, path = table
    before = lance.dataset(str(path))
    with pytest.raises(Exception) as e:
        compact_call(spark, t, "partial_progress => true, max_commits => 4, "
                               "options => map('test_before_commit', 'writers.overwrite_before_third_commit')")
    message = str(e.value)
    committed = rewrites_since(path, before.version)
    assert len(committed) == 2
    assert "a concurrent Overwrite by another writer is incompatible with compaction" in message, message
    assert (f"versions {committed[0]} and {committed[1]} were committed before the failure; nothing after"
            in message), message
    assert lance.dataset(str(path)).count_rows() == 10  # as the other writer left it


def test_an_unreachable_object_store_is_named(s3):
    """moto's server stopped: opening a table on it says the object store is unreachable,
    not that the table is gone."""
    from lance_compact.errors import CompactionError
    from lance_compact.runtime.tables import open_dataset
    from s3_server import S3Server
    from oracle import degraded_table

    server = S3Server().start()
    try:
        uri = server.create_bucket("stopped") + "/t.lance"
        degraded_table(uri, fragments=2, storage_options=server.storage_options)
        assert open_dataset("db.t", uri, server.storage_options).count_rows() > 0
    finally:
        server.stop()
    with pytest.raises(CompactionError) as e:
        open_dataset("db.t", uri, server.storage_options)
    assert "object store unreachable" in e.value.message and "does not exist" not in e.value.message


@pytest.mark.parametrize("text,kind,expected", [
    ("Retryable commit conflict for version 7: This Rewrite transaction was preempted by concurrent "
     "transaction Delete at version 7. Please retry., /home/runner/work/lance/lance/rust/lance/src/io/commit/"
     "conflict_resolver.rs:1583:34", "conflict", "a concurrent Delete"),
    ("Incompatible transaction: This ReserveFragments transaction is incompatible with concurrent "
     "transaction Overwrite at version 9., /x/conflict_resolver.rs:2263:26", "conflict", "a concurrent Overwrite"),
    ("LanceError(IO): Generic S3 error: Error performing list request: Error performing GET http://127.0.0.1:1/"
     "b?list-type=2 in 123ms, after 1 retries, max_retries: 1, retry_timeout: 2s  - Server returned non-2xx "
     "status code: 503 Service Unavailable: , /x/object_store.rs:1576:42", "storage",
     "object store error (HTTP 503 Service Unavailable)"),
    ("LanceError(IO): Generic S3 error: Error performing GET http://127.0.0.1:1/b in 1ms - Server returned "
     "non-2xx status code: 403 Forbidden: , /x/object_store.rs:1576:42", "storage",
     "object store refused access (HTTP 403 Forbidden)"),
    ("LanceError(IO): Generic S3 error: Error performing GET http://127.0.0.1:1/b in 1ms, after 1 retries - "
     "Server returned non-2xx status code: 429 Too Many Requests: ", "storage",
     "object store error (HTTP 429 Too Many Requests): the store is throttling"),
    ("LanceError(IO): Generic S3 error: Error performing list request: Error performing GET "
     "http://127.0.0.1:1/b in 429ms, after 3 retries, max_retries: 3, retry_timeout: 180s  - HTTP error: "
     "error sending request, /x/object_store.rs:1576:42", "storage", "object store unreachable"),
    ("Dataset at path tmp/nope.lance was not found: Not found: tmp/nope.lance/_versions, /x/commit.rs:653:26",
     "missing", "does not exist"),
    ("External error: LanceError(IO): Generic memory error: Invalid range 0..1755 for object of size 100 "
     "bytes, /rustc/x/function.rs:250:5", "corrupt", "a corrupt or unreadable file"),
    ("External error: LanceError(IO): Generic N/A error: Not found: /t.lance/data/10001.lance, "
     "/x/object_reader.rs:335:56", "corrupt", "a data file the table references is missing"),
    ("OSError: LanceError(IO): Generic LocalFileSystem error: failed to fill whole buffer", "corrupt",
     "a corrupt or unreadable file"),
    ("RuntimeError: list index out of range", "bug", "an unexpected error"),
])
def test_failure_rules_on_texts_lance_raised(text, kind, expected):
    """The rules on texts captured from pylance 14.0.2 (conflicts, a store refusing, failing or
    unreachable, a missing table, truncated and missing files)."""
    from lance_compact.runtime.failures import classify, describe

    f = classify(text)
    assert f.kind == kind and expected in describe(text)
    assert ".rs:" not in describe(text)  # no Rust source locations for users


def test_in_the_engine_the_jvm_is_asked_at_most_every_50_ms_and_a_cancel_sticks():
    """In the engine (a request with a commit gate) the probe is a Py4J round trip: a "not
    cancelled" answer stands for PROBE_INTERVAL_S, so 600 checks of a warehouse run are not 600
    round trips; a cancel is seen at the next question after it and stays. Commits never rely
    on it: the gate asks the JVM atomically (test_commit_gate)."""
    import time

    from lance_compact.runtime import cancellation

    asked: list[float] = []
    said: list[str | None] = [None]

    def probe():
        asked.append(time.monotonic())
        return said[0]

    statement = cancellation.Statement(probe, cancellation.Gate(object(), "request-1"))
    started = time.monotonic()
    assert all(statement() is None for _ in range(100))
    # once, unless this loaded machine stopped the loop for more than an interval (then once more an interval)
    assert 1 <= len(asked) <= 1 + int((time.monotonic() - started) / cancellation.Statement.PROBE_INTERVAL_S)
    said[0] = "the statement was interrupted"
    time.sleep(cancellation.Statement.PROBE_INTERVAL_S * 1.5)
    before = len(asked)
    assert statement() == "the statement was interrupted" and len(asked) == before + 1
    time.sleep(cancellation.Statement.PROBE_INTERVAL_S * 1.5)
    assert statement() == "the statement was interrupted" and len(asked) == before + 1  # it stays, unasked
    # outside the engine (no gate) every check asks
    plain = cancellation.Statement(probe)
    said[0] = None
    for _ in range(3):
        plain()
    assert len(asked) == before + 4


def test_a_job_seen_cancelled_asks_the_jvm_at_once_for_the_callers_form():
    """The JVM cancels a request's jobs by the request's own tag when the caller cancels (its job
    group, ...): the failed job names that internal tag. A cancel this process saw first asks the
    JVM at once, inside the interval, so the statement says the caller's form (seen under load:
    "part of cancelled job tags lance-compact-14-request-..." for a cancelJobGroup)."""
    from lance_compact.runtime import cancellation

    said: list[str | None] = [None]
    asked: list[int] = []

    def probe():
        asked.append(1)
        return said[0]

    statement = cancellation.Statement(probe, cancellation.Gate(object(), "request-1"))
    assert statement() is None and len(asked) == 1  # "not cancelled" now stands for the interval
    said[0] = "its job group cluster-cancel was cancelled"
    statement.cancel("its Spark job was cancelled (part of cancelled job tags lance-compact-1-request-x)")
    assert statement() == "its job group cluster-cancel was cancelled" and len(asked) == 2
    assert statement() == "its job group cluster-cancel was cancelled" and len(asked) == 2  # it stays, unasked
    # the JVM has no reason (the job was cancelled alone, in the UI): the job's own text stands
    lone = cancellation.Statement(lambda: None, cancellation.Gate(object(), "request-2"))
    assert lone() is None
    lone.cancel("its Spark job was cancelled (killed via the Web UI)")
    assert lone() == "its Spark job was cancelled (killed via the Web UI)"
