"""Every cancel a PySpark Classic caller can send, and Ctrl-C in a plain script and at
spark-sql's prompt (issue 42): the statement stops, its answer is LANCE_CANCELLED saying nothing
was committed (or what landed before), the table keeps its version, rows exact.

One real PySpark session (local[2]) with a short cancel grace (``cancelGrace`` 2 s: a worker
that does not stop within it is killed). Statements are held right before a commit by the test
hook ``writers.mark_then_hold`` (the engine waits there until the test releases it), so a
cancel lands at a known moment: released within the grace, the run reaches its commit check,
which refuses; not released, the worker is killed, which commits nothing. The PySpark API runs
each statement on a runner thread (python/lance_compact/call_runner.py); an interrupt of the
waiting caller is what IPython's stop button and Ctrl-C do (SIGINT: PySpark's handler cancels
all jobs and raises KeyboardInterrupt). Times from the cancel to the answer are printed.
"""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time

import lance
import pytest

import writers
from engine_pool import engine_processes
from conftest import ROOT, degraded_table_for, lance_session, spark_environment, wait_for as _wait_for
from oracle import content
from terminal import CTRL_C, Terminal

wait_for = functools.partial(_wait_for, step=0.02)

os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"
GRACE_S = 2
HOLD = {"test_before_commit": "writers.mark_then_hold"}
ANSWER_BOUND_S = GRACE_S + 12  # the grace, the kill, the answer's way back on 2 loaded cores


@pytest.fixture(scope="module")
def spark(warehouse):
    session = lance_session("local[2]", "lance-compact-cancel-callers", str(warehouse),
                            {"spark.lance.compact.engine.cancelGrace": f"{GRACE_S}s"})
    yield session
    session.stop()


@pytest.fixture
def table(warehouse, request):
    return degraded_table_for(warehouse, request, fragments=24)


def held(path) -> bool:
    return os.path.exists(writers.at_commit(str(path)))


def versions_after_the_grace(path) -> int:
    """The table's version once a killed worker would have been killed and a late commit would
    have landed."""
    time.sleep(GRACE_S + 2)
    return lance.dataset(str(path)).version


def rewrites_since(path, version: int) -> list[int]:
    ds = lance.dataset(str(path))
    return [v for v in range(version + 1, ds.version + 1)
            if type(ds.read_transaction(v).operation).__name__ == "Rewrite"]


# ---------------------------------------------------------------------------------------------
# The caller interrupted: a notebook's stop (the progress line on), Ctrl-C in a script (off)

@pytest.mark.parametrize("line", ["progress line on", "progress line off"])
def test_an_interrupted_caller_hears_the_statements_cancel(spark, table, line):
    """compact() waits on the main thread while the statement is held before its commit; the
    main thread is interrupted as SIGINT does (PySpark's handler: cancelAllJobs, then
    KeyboardInterrupt) and the run released: the commit check refuses, the caller gets a
    KeyboardInterrupt whose message is the statement's LANCE_CANCELLED answer, nothing lands,
    and the main thread's Py4J connection still answers right."""
    from lance_compact import compact, progress_line
    from lance_compact.errors import StatementInterrupted

    assert threading.current_thread() is threading.main_thread()
    t, path = table
    before = lance.dataset(str(path))
    sent: list[float] = []

    def interrupt() -> None:
        wait_for(lambda: held(path), timeout=120)
        sent.append(time.monotonic())
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # as a terminal's Ctrl-C
        time.sleep(0.3)
        writers.release(str(path))

    spark.conf.set(progress_line.SETTING, "true" if line.endswith("on") else "false")
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            compact(spark, t, target_rows_per_fragment=300, options=HOLD)
        seconds = time.monotonic() - sent[0]
    finally:
        spark.conf.unset(progress_line.SETTING)
    print(f"\ncaller interrupted ({line}) -> KeyboardInterrupt with the answer after {seconds:.2f} s")
    assert isinstance(e.value, StatementInterrupted), repr(e.value)
    message = str(e.value)
    assert message.startswith("[LANCE_CANCELLED]") and "cancelled before a commit" in message, message
    assert "nothing was committed" in message and "Py4J" not in message, message
    assert seconds < ANSWER_BOUND_S
    assert versions_after_the_grace(path) == before.version
    assert content(lance.dataset(str(path))) == content(before)
    assert spark.range(7).count() == 7  # this thread's Py4J connection is whole
    r = compact(spark, t, target_rows_per_fragment=300).collect()[0]
    assert r.new_version > before.version and content(lance.dataset(str(path))) == content(before)


def test_an_interrupt_after_a_commit_says_what_landed(spark, table):
    """Partial progress, two commits: the first is let through, the caller is interrupted while
    the second is held. The answer names the version that landed before the cancel."""
    from lance_compact import compact

    t, path = table
    before = lance.dataset(str(path))

    def interrupt() -> None:
        wait_for(lambda: held(path), timeout=120)
        writers.release(str(path))  # the first commit lands
        wait_for(lambda: held(path), timeout=120)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(0.3)
        writers.release(str(path))

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt) as e:
        compact(spark, t, target_rows_per_fragment=300, partial_progress=True, max_commits=2, options=HOLD)
    message = str(e.value)
    landed = rewrites_since(path, before.version)
    assert len(landed) == 1, landed
    assert message.startswith("[LANCE_CANCELLED]"), message
    assert f"version {landed[0]} was committed before the cancel; nothing after" in message, message
    assert versions_after_the_grace(path) == lance.dataset(str(path)).version
    assert rewrites_since(path, before.version) == landed
    assert content(lance.dataset(str(path))) == content(before)


def test_the_runner_keeps_the_callers_job_group_tags_and_pool(spark, table):
    """The statement runs on a runner thread with the caller's local properties: its Spark jobs
    are in the caller's job group, carry the caller's tag and run in its pool; the runner's
    own tag is added to them."""
    from lance_compact import compact

    t, path = table
    sc = spark.sparkContext
    sc.setJobGroup("caller-group", "the caller's description")
    sc.addJobTag("caller-tag")
    sc.setLocalProperty("spark.scheduler.pool", "caller-pool")
    try:
        compact(spark, t, target_rows_per_fragment=300)
    finally:
        sc.removeJobTag("caller-tag")
        sc.setLocalProperty("spark.scheduler.pool", None)
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup("caller-group")
    assert jobs, "no job of the statement ran in the caller's job group"
    store = sc._jsc.sc().statusStore()
    for j in jobs:
        data = store.job(j)
        tags = set(data.jobTags().mkString(",").split(","))
        assert "caller-tag" in tags and any(x.startswith("lance-compact-call-") for x in tags), tags
    assert sc.getLocalProperty("spark.job.tags") in (None, "")  # the caller's own thread unchanged


# ---------------------------------------------------------------------------------------------
# Cancels from another thread, the statement held right before its commit


class Statement:
    """A PySpark API call on a thread of its own, in a job group and with a job tag, as an
    application's worker thread runs one."""

    def __init__(self, spark, run, group: str) -> None:
        self.spark, self.group, self.tag = spark, group, f"{group}-tag"
        self.error: BaseException | None = None
        self.result = None
        self.ended: float | None = None

        def body() -> None:
            sc = spark.sparkContext
            sc.setJobGroup(self.group, "a statement to cancel", interruptOnCancel=False)
            sc.addJobTag(self.tag)
            try:
                self.result = run()
            except BaseException as e:  # noqa: B036 - asserted by the test
                self.error = e
            finally:
                self.ended = time.monotonic()
                sc.removeJobTag(self.tag)
                sc.setLocalProperty("spark.jobGroup.id", None)

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the statement did not end within {timeout} s"


FORMS = {
    "cancelJobGroup": lambda s: s.spark.sparkContext.cancelJobGroup(s.group),
    "cancelJobsWithTag": lambda s: s.spark.sparkContext.cancelJobsWithTag(s.tag),
    "cancelAllJobs": lambda s: s.spark.sparkContext.cancelAllJobs(),
    "interruptAll": lambda s: s.spark.interruptAll(),
}


@pytest.mark.parametrize("form,released", [(f, "released") for f in FORMS]
                         + [("cancelAllJobs", "held past the grace")])
def test_a_cancel_right_before_the_commit_commits_nothing(spark, table, form, released):
    """Released at once: the commit check refuses (the cancel's own words); held past the
    grace: the worker is killed (LANCE_CANCELLED "... was killed: nothing was committed after
    the cancel"; the kill does not depend on the form, which the released cases cover each).
    Either way nothing lands, then or later."""
    from lance_compact import compact

    t, path = table
    before = lance.dataset(str(path))
    s = Statement(spark, lambda: compact(spark, t, target_rows_per_fragment=300, options=HOLD), f"g-{form}")
    wait_for(lambda: held(path), timeout=120)
    cancelled_at = time.monotonic()
    FORMS[form](s)
    if released == "released":
        time.sleep(0.2)
        assert writers.release(str(path))
    s.join(60)
    seconds = s.ended - cancelled_at
    message = str(s.error)
    print(f"\n{form}, {released} -> LANCE_CANCELLED after {seconds:.2f} s")
    assert s.error is not None and "[LANCE_CANCELLED]" in message, message
    if released == "released":
        assert "cancelled before a commit" in message and "nothing was committed" in message, message
    else:
        assert f"did not stop within {GRACE_S}.0 s" in message and "was killed" in message, message
        assert "nothing was committed after the cancel" in message, message
        assert GRACE_S - 0.5 < seconds < ANSWER_BOUND_S
        writers.release(str(path), timeout=0)
    assert seconds < ANSWER_BOUND_S
    assert versions_after_the_grace(path) == before.version
    assert content(lance.dataset(str(path))) == content(before)


# ---------------------------------------------------------------------------------------------
# The index build in the engine

VECTOR_ROWS, DIM = 5000, 32


@pytest.fixture
def vectors(warehouse, request):
    return degraded_table_for(warehouse, request, fragments=5, rows_per_fragment=VECTOR_ROWS // 5)


def heavy_index_sql(t: str) -> str:
    """issue 42's build: each option within its bound, minutes of one process's CPU."""
    return (f"CREATE INDEX hnsw ON lance.{t} USING IVF_HNSW_FLAT (vector) "
            "OPTIONS (num_partitions 1, m 256, ef_construction 5000)")


@pytest.mark.parametrize("form", ["cancelJobGroup", "interruptAll"])
def test_a_heavy_index_build_cancelled_commits_no_index(spark, vectors, form):
    """The build was cancelled 3 s in (the issue: cancelJobGroup and interruptAll were ignored
    and the statement answered OK with the index committed). The statement answers
    LANCE_CANCELLED within the grace and its margin; no index is committed then or later."""
    t, path = vectors
    before = lance.dataset(str(path))
    s = Statement(spark, lambda: spark.sql(heavy_index_sql(t)).collect(), f"idx-{form}")
    time.sleep(3)
    assert s.thread.is_alive(), f"the build ended within 3 s: {s.error or s.result}"
    cancelled_at = time.monotonic()
    FORMS[form](s)
    s.join(60)
    seconds = s.ended - cancelled_at
    message = str(s.error)
    print(f"\nheavy index build, {form} -> answered after {seconds:.2f} s: {message[:160]}")
    assert s.error is not None and "[LANCE_CANCELLED]" in message, message
    assert "nothing was committed" in message, message
    assert seconds < ANSWER_BOUND_S
    time.sleep(GRACE_S + 3)
    after = lance.dataset(str(path))
    assert after.version == before.version and not after.describe_indices()


# ---------------------------------------------------------------------------------------------
# Ctrl-C in a plain PySpark script

SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from conftest import lance_session
from lance_compact import compact
spark = lance_session("local[2]", "ctrl-c-script", {warehouse!r},
                      {{"spark.lance.compact.engine.cancelGrace": "{grace}s"}})
print("session ready", flush=True)
compact(spark, {table!r}, target_rows_per_fragment=300, options={hold!r})
print("compact returned", flush=True)
"""


def test_ctrl_c_in_a_plain_script(tmp_path, warehouse, request):
    """A script (no notebook, no progress line) runs compact(); SIGINT reaches it, as the
    terminal's Ctrl-C does, while the statement is held before its commit. The script ends with
    the KeyboardInterrupt whose message is the statement's LANCE_CANCELLED answer, no Py4J error
    and no reentrant call; the table keeps its version (the issue: 301 -> 303 two seconds later)."""
    t, path = degraded_table_for(warehouse, request, fragments=24)
    before = lance.dataset(str(path))
    spark_environment()
    script = tmp_path / "compact_script.py"
    script.write_text(SCRIPT.format(tests=str(ROOT / "tests"), warehouse=str(warehouse), grace=GRACE_S,
                                    table=t, hold=HOLD))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp_path, env=dict(os.environ))
    try:
        wait_for(lambda: held(path) or p.poll() is not None, timeout=240)
        assert p.poll() is None, p.communicate()
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)
        writers.release(str(path))
        out, err = p.communicate(timeout=120)
        seconds = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(30)
    print(f"\nscript: SIGINT -> exited ({p.returncode}) after {seconds:.2f} s; its last line: {err.strip().splitlines()[-1]}")
    assert "compact returned" not in out
    last = err.strip().splitlines()[-1]
    assert last.startswith("lance_compact.errors.StatementInterrupted: [LANCE_CANCELLED]"), err[-3000:]
    assert "cancelled before a commit" in last and "nothing was committed" in last, last
    assert "Py4J" not in err and "reentrant" not in err, err[-3000:]
    assert p.returncode in (-signal.SIGINT, 130, 1), p.returncode
    assert versions_after_the_grace(path) == before.version
    assert content(lance.dataset(str(path))) == content(before)


SQL_SCRIPT = """
import os, sys, time
sys.path.insert(0, {tests!r})
from conftest import lance_session
spark = lance_session("local[2]", "ctrl-c-sql-script", {warehouse!r},
                      {{"spark.lance.compact.engine.cancelGrace": "{grace}s"}})
print("session ready", flush=True)
try:
    spark.sql("CALL lance.compact(table => '{table}', target_rows_per_fragment => 300, "
              "options => map('test_before_commit', 'writers.mark_then_hold'))").collect()
    print("call returned", flush=True)
except KeyboardInterrupt as e:
    print("interrupted:", type(e).__name__, flush=True)
# the script goes on (a long-running application, a script that catches ^C): its session lives
deadline = time.monotonic() + 120
while not os.path.exists({done!r}) and time.monotonic() < deadline:
    time.sleep(0.1)
"""


def test_ctrl_c_during_spark_sql_call_in_a_plain_script(tmp_path, warehouse, request):
    """A script's own ``spark.sql("CALL ...")`` (not the PySpark API) interrupted by SIGINT while
    held before its commit, the script going on afterwards with its session: PySpark's handler
    sends ``cancelAllJobs`` (from a thread of its own, sigint_cancel.py: from the interrupted
    thread it failed with a Py4JError and never reached Spark), the statement is cancelled, and
    no commit lands after the Ctrl-C (before: it committed 20 s later, and nobody was told)."""
    t, path = degraded_table_for(warehouse, request, fragments=24)
    before = lance.dataset(str(path))
    spark_environment()
    script, done = tmp_path / "sql_script.py", tmp_path / "done"
    script.write_text(SQL_SCRIPT.format(tests=str(ROOT / "tests"), warehouse=str(warehouse), grace=GRACE_S,
                                        table=t, done=str(done)))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp_path, env=dict(os.environ))
    try:
        wait_for(lambda: held(path) or p.poll() is not None, timeout=240)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)
        writers.release(str(path))
        assert versions_after_the_grace(path) == before.version, "a commit landed after the Ctrl-C"
        assert p.poll() is None, "the script did not go on after the interrupt"
        done.touch()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(30)
    assert "interrupted: KeyboardInterrupt" in out and "call returned" not in out, out + err[-3000:]
    assert "Py4JError" not in err, err[-3000:]
    assert content(lance.dataset(str(path))) == content(before)


# ---------------------------------------------------------------------------------------------
# Ctrl-C at spark-sql's prompt (lance-spark-sql), in a pseudo-terminal

def test_ctrl_c_at_the_spark_sql_prompt(tmp_path, warehouse, request):
    """lance-spark-sql at its prompt runs a CALL held before its commit; the terminal's Ctrl-C
    (^C written to the terminal: SIGINT to its foreground group) cancels it. spark-sql's handler
    cancels all jobs; the statement answers LANCE_CANCELLED "nothing was committed" (was: an
    internal error, the engine process exited with code 1), the engine's workers survive (they
    left the terminal's group), the table keeps its version, and the next statement works."""
    t, path = degraded_table_for(warehouse, request, fragments=24)
    before = lance.dataset(str(path))
    spark_environment()  # its engine finds tests/writers.py (the hold hook)
    env = {**os.environ, "TERM": "dumb"}
    term = Terminal([str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse),
                     "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                     "--conf", f"spark.lance.compact.engine.cancelGrace={GRACE_S}s"], tmp_path, env)
    try:
        term.read_until(r"spark-sql.*> ", timeout=240)
        term.type(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, "
                  "options => map('test_before_commit', 'writers.mark_then_hold'));\n")
        wait_for(lambda: held(path), timeout=240)
        workers = engine_processes(term.process.pid)
        assert workers, "no engine worker of spark-sql's JVM found"
        sent = time.monotonic()
        term.type(CTRL_C)  # SIGINT to the terminal's foreground group
        time.sleep(0.3)
        writers.release(str(path))
        answer = term.read_until(r"spark-sql.*> ", timeout=120)
        seconds = time.monotonic() - sent
        print(f"\nspark-sql: Ctrl-C -> prompt again after {seconds:.2f} s")
        assert "[LANCE_CANCELLED]" in answer and "nothing was committed" in answer, answer
        assert "LANCE_INTERNAL_ERROR" not in answer and "exited with code" not in answer, answer
        assert all(os.path.exists(f"/proc/{pid}") for pid in workers), "an engine worker died of the Ctrl-C"
        assert versions_after_the_grace(path) == before.version
        assert content(lance.dataset(str(path))) == content(before)
        term.type(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300);\n")
        row = term.read_until(r"spark-sql.*> ", timeout=120)
        assert lance.dataset(str(path)).version > before.version, row
        assert content(lance.dataset(str(path))) == content(before)
        term.type("exit;\n")
    finally:
        term.close()


def test_ctrl_c_during_spark_sql_e(tmp_path, warehouse, request):
    """lance-spark-sql -e "CALL ...": spark-sql runs -e statements without its prompt's Ctrl-C
    handler, so the terminal's Ctrl-C ends its JVM (exit code 130), whose shutdown stops the
    pool's workers. The CALL was held before its commit: nothing lands, then or later, and no
    worker is left."""
    t, path = degraded_table_for(warehouse, request, fragments=24)
    before = lance.dataset(str(path))
    spark_environment()
    term = Terminal([str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse),
                     "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                     "-e", f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, "
                           "options => map('test_before_commit', 'writers.mark_then_hold'))"],
                    tmp_path, {**os.environ, "TERM": "dumb"})
    try:
        wait_for(lambda: held(path), timeout=240)
        workers = engine_processes(term.process.pid)
        assert workers, "no engine worker of spark-sql's JVM found"
        sent = time.monotonic()
        term.type(CTRL_C)
        code = term.process.wait(120)
        print(f"\nspark-sql -e: Ctrl-C -> the JVM exited ({code}) after {time.monotonic() - sent:.2f} s")
        assert code == 130, code
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in workers), timeout=30)
    finally:
        term.close()
        writers.release(str(path), timeout=0)
    assert versions_after_the_grace(path) == before.version
    assert content(lance.dataset(str(path))) == content(before)
