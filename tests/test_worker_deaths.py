"""A death is said as a death (issue 42): the processes doing a statement's work SIGKILLed mid-task
and around each commit, on one real local Spark session whose tasks get two attempts
(``local[2,2]``) and whose batches and index segments run as Spark tasks.

- An executor's Python worker killed while its task sleeps (``test_task_sleep_ms``; the task's
  worker is found by the hook's marker, tests/worker_kills.py) in a compaction task and in an
  index segment task: killed once, Spark's retry saves the statement (rows exact, one commit);
  killed on both attempts, the statement fails as LANCE_WORKER_LOST naming the Python worker's
  death (not the object store, not the input) and saying nothing was committed, which is true.
- The statement's engine worker killed before the commit gate (held by ``writers.mark_then_hold``
  as ``test_before_commit``), after a first commit, and inside the commit (held the same way by
  ``test_fail_at 'commit:...'``, after the gate let it begin): LANCE_WORKER_LOST saying whether it
  was committing and what landed before, checked against the table's versions; a statement on
  another worker meanwhile is unaffected, the next statement on the table works, and what the
  dead worker wrote and had not committed is removed."""
from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import lance
import pytest

from conftest import compact_call, degraded_table_for, wait_for
from engine_pool import engine_processes, leased_pids, wait_for_leased
from oracle import content, degraded_table
from worker_kills import TaskWorkerKiller
import writers

SPARK_MASTER = "local[2,2]"  # two attempts per task: one kill is retried, two exhaust it
SPARK_CONF = {"spark.lance.compact.engineRewrite.maxBatchBytes": "0"}  # tasks on Spark, not in the engine
SLEEP_MS = 3000  # a task's sleep before it writes: the moment its worker is killed
STATEMENT_S = 180  # a statement's bound on 2 loaded cores


def data_files(path) -> set[str]:
    return set(os.listdir(path / "data"))


@pytest.fixture
def table(warehouse, request):
    return degraded_table_for(warehouse, request, fragments=12, rows_per_fragment=50)


@pytest.fixture
def indexed(warehouse, request):
    """A table whose BTREE build has three segments (rows_per_segment 1000, the least)."""
    return degraded_table_for(warehouse, request, fragments=6, rows_per_fragment=500)


class Statement:
    """A statement run on a thread of its own: its rows or its error."""

    def __init__(self, spark, sql: str) -> None:
        self.rows, self.error = None, None

        def body() -> None:
            try:
                self.rows = spark.sql(sql).collect()
            except BaseException as e:  # noqa: B036 - asserted by the test
                self.error = e

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def join(self, timeout: float = STATEMENT_S) -> "Statement":
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the statement did not end within {timeout} s"
        return self


def compact_sql(t: str, args: str) -> str:
    return f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 300, {args})"


def index_sql(t: str, options: str) -> str:
    return (f"CALL lance.create_index(table => '{t}', column => 'id', index_type => 'BTREE', "
            f"options => map('rows_per_segment', '1000', {options}))")


def unchanged(path, before: lance.LanceDataset) -> None:
    after = lance.dataset(str(path))
    assert after.version == before.version and not after.describe_indices()
    assert content(after) == content(before)


# -- an executor's Python worker --------------------------------------------------------------


def test_a_compaction_task_whose_python_worker_is_killed_once_is_retried(spark, table):
    t, path = table
    before = lance.dataset(str(path))
    killer = TaskWorkerKiller(1)
    r = compact_call(spark, t, f"options => map('test_task_sleep_ms', 'all:{SLEEP_MS}')")
    assert len(killer.join()) == 1
    after = lance.dataset(str(path))
    assert r.commits == 1 and r.tasks_failed == 0 and r.new_version == after.version, r
    assert len(after.get_fragments()) < len(before.get_fragments())
    assert content(after) == content(before)


def test_a_compaction_task_whose_python_worker_is_killed_on_every_attempt_says_so(spark, table):
    t, path = table
    before, files = lance.dataset(str(path)), data_files(path)
    killer = TaskWorkerKiller(2)
    with pytest.raises(Exception) as e:
        compact_call(spark, t, f"options => map('test_task_sleep_ms', '0:{SLEEP_MS}')")
    assert len(killer.join()) == 2
    message = str(e.value).splitlines()[0]
    print(f"\nexecutor's Python worker killed on every attempt (compaction): {message}")
    assert "[LANCE_WORKER_LOST]" in message, message
    assert "a compaction task failed all its 2 attempts: an executor's Python worker died" in message, message
    assert "Python worker exited unexpectedly" in message and "nothing was committed" in message, message
    assert "object store" not in message and "unexpected error" not in message, message
    unchanged(path, before)
    # what its finished tasks wrote is removed with the failure
    wait_for(lambda: data_files(path) == files, timeout=60)


def test_an_index_segment_task_whose_python_worker_is_killed_once_is_retried(spark, indexed):
    t, path = indexed
    before = lance.dataset(str(path))
    killer = TaskWorkerKiller(1)
    [row] = spark.sql(index_sql(t, f"'test_task_sleep_ms', '0:{SLEEP_MS}'")).collect()
    assert len(killer.join()) == 1
    after = lance.dataset(str(path))
    assert len(after.describe_indices()) == 1 and after.version > before.version, row
    assert content(after) == content(before)
    for f in ("id = 7", "id < 30", "id >= 2990"):
        assert after.to_table(filter=f, columns=["id"]).sort_by("id") == \
            after.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id"), f


def test_an_index_segment_task_whose_python_worker_is_killed_on_every_attempt_says_so(spark, indexed):
    t, path = indexed
    before = lance.dataset(str(path))
    killer = TaskWorkerKiller(2)
    with pytest.raises(Exception) as e:
        spark.sql(index_sql(t, f"'test_task_sleep_ms', '0:{SLEEP_MS}'")).collect()
    assert len(killer.join()) == 2
    message = str(e.value).splitlines()[0]
    print(f"\nexecutor's Python worker killed on every attempt (index segment): {message}")
    assert "[LANCE_WORKER_LOST]" in message and "an index segment task failed" in message, message
    assert "an executor's Python worker died" in message and "nothing was committed" in message, message
    assert "object store" not in message and "unexpected error" not in message, message
    unchanged(path, before)


# -- the statement's engine worker ----------------------------------------------------------


def _kill_held_worker(spark, path) -> int:
    """Once the statement is held at its commit (writers.mark_then_hold's marker): SIGKILL its
    engine worker, the one the pool has leased; its pid."""
    wait_for(lambda: os.path.exists(writers.at_commit(str(path))), timeout=STATEMENT_S, step=0.05)
    [pid] = wait_for_leased(spark)
    os.kill(pid, signal.SIGKILL)
    return pid


def _lost(s: Statement, pid: int) -> str:
    s.join()
    assert s.error is not None, f"the statement answered: {s.rows}"
    message = str(s.error).splitlines()[0]
    assert "[LANCE_WORKER_LOST]" in message and f"(pid {pid}," in message and "killed by signal 9" in message, message
    return message


def _cleared(path, files: set) -> None:
    """The dead worker's uncommitted files are removed (by another worker: discard_staged)."""
    wait_for(lambda: data_files(path) <= files, timeout=60)
    for marker in (writers.at_commit(str(path)),):
        if os.path.exists(marker):
            os.remove(marker)


def test_an_engine_worker_killed_before_the_commit_gate_commits_nothing_and_others_go_on(
        spark, table, warehouse, request):
    t, path = table
    other, other_path = f"{t}_beside", warehouse / "db" / f"{t.split('.')[1]}_beside.lance"
    shutil.rmtree(other_path, ignore_errors=True)
    degraded_table(str(other_path), fragments=8, rows_per_fragment=50)
    before, files = lance.dataset(str(path)), data_files(path)
    other_before = lance.dataset(str(other_path))
    s = Statement(spark, compact_sql(t, "options => map('test_before_commit', 'writers.mark_then_hold')"))
    wait_for(lambda: os.path.exists(writers.at_commit(str(path))), timeout=STATEMENT_S, step=0.05)
    [pid] = leased_pids(spark)
    beside = Statement(spark, compact_sql(other, "options => map('test_task_sleep_ms', 'all:2000')"))
    wait_for(lambda: len(leased_pids(spark)) == 2, timeout=60, step=0.05)
    os.kill(pid, signal.SIGKILL)
    message = _lost(s, pid)
    print(f"\nengine worker killed before the gate: {message[:400]}")
    assert "it was not committing: nothing was committed by it" in message and "before that" not in message, message
    assert "are being removed" in message, message
    unchanged(path, before)
    _cleared(path, files)
    # the statement beside it, on another worker, finished as if nothing happened
    beside.join()
    assert beside.error is None, beside.error
    other_after = lance.dataset(str(other_path))
    assert beside.rows[0].commits == 1 and other_after.version == beside.rows[0].new_version
    assert content(other_after) == content(other_before)
    # and the next statement on the table works
    r = compact_call(spark, t)
    assert r.commits == 1 and content(lance.dataset(str(path))) == content(before)


def test_an_engine_worker_killed_while_it_starts_for_a_statement_is_started_again(spark, table):
    """The free workers are killed and a statement comes at once: the pool starts a worker for it
    (none is free), and that one is killed too before it is ready. The pool starts another for
    the statement, which then runs as usual (before: it failed with LANCE_INTERNAL_ERROR "did not
    start: it exited with code 137"). The pool's count of statements given another worker says
    the statement's own was the one killed (a spare the pool starts meanwhile may be first: then
    again). A free worker killed as the statement leased it (its death not yet seen) is the same
    case: it died before it took the statement, which then runs in another."""
    from engine_pool import pool, workers

    t, path = table
    before = lance.dataset(str(path))
    jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    for attempt in range(3):
        wait_for(lambda: any(not w["leased"] for w in workers(spark)), timeout=60)
        restarted = pool(spark).restartedStarts()
        known = set(engine_processes(jvm))
        for pid in known:
            os.kill(pid, signal.SIGKILL)
        s = Statement(spark, compact_sql(t, "strategy => 'default'"))
        # the first start seen (and any begun with it) is killed before it is ready; the one the
        # pool starts after noticing that death (50 ms on) is left to start
        killed: set[int] = set()
        first_seen, deadline = None, time.monotonic() + 30
        while time.monotonic() < deadline and (first_seen is None or time.monotonic() - first_seen < 0.03):
            for pid in set(engine_processes(jvm)) - known - killed:
                first_seen = first_seen or time.monotonic()
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            time.sleep(0.002)
        assert killed, "no worker was started for the statement"
        s.join()
        assert s.error is None, str(s.error)
        assert content(lance.dataset(str(path))) == content(before)
        if pool(spark).restartedStarts() > restarted:
            break
    else:
        raise AssertionError("in 3 attempts the start killed was never the statement's own")
    assert lance.dataset(str(path)).version > before.version


def _killed_mid_job(spark, path, sql: str, written: int, what: str) -> None:
    """``sql`` runs until ``written`` new data files are in the table (its other task sleeps
    before it writes); its engine worker is killed once they were staged. Nothing committed,
    and the pool removes them."""
    before, files = lance.dataset(str(path)), data_files(path)
    s = Statement(spark, sql)
    wait_for(lambda: len(data_files(path) - files) >= written, timeout=STATEMENT_S, step=0.05)
    time.sleep(1.5)  # staged within a tenth of a second of the task's end (task_outcomes.POLL_S)
    [pid] = leased_pids(spark)
    os.kill(pid, signal.SIGKILL)
    message = _lost(s, pid)
    print(f"\nengine worker killed during its {what}: {message[:400]}")
    assert "it was not committing: nothing was committed by it" in message and "are being removed" in message, message
    unchanged(path, before)
    _cleared(path, files)


def test_an_engine_worker_killed_while_its_rewrite_job_runs_leaves_no_finished_tasks_files(spark, table):
    """Tasks on Spark (this module's setting), one finished and one still asleep before it
    writes: the statement's engine worker is killed. The finished task's file was staged as it
    finished (spark_job._as_tasks_finish), so the pool removes it; the sleeping task is
    cancelled with the statement's jobs before it writes. Nothing committed, no file left (before:
    the finished tasks' files stayed until a cleanup past the floor: the attacker's 4-18 a kill)."""
    t, path = table
    plan = spark.sql(f"CALL lance.plan_compaction(table => '{t}', target_rows_per_fragment => 100)").collect()
    assert len(plan) >= 2, plan
    _killed_mid_job(spark, path, f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 100, "
                                 f"options => map('test_task_sleep_ms', '{plan[-1].task_id}:120000'))",
                    len(plan) - 1, "rewrite job")


def test_an_engine_worker_killed_while_its_clustering_job_runs_leaves_no_finished_partitions_files(spark, table):
    """The same for a clustering (sort_order): its sort-and-write job's finished partitions
    wrote their fragments while partition 1 sleeps before it writes; the engine worker is
    killed. Their files were staged as they finished (clustering/run._stage through
    task_outcomes.AsTasksFinish), so the pool removes them; nothing committed (before: they
    stayed until a cleanup past the version floor)."""
    t, path = table  # 600 rows: 6 partitions of 100
    _killed_mid_job(spark, path, f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 100, "
                                 f"sort_order => 'category', options => map('test_task_sleep_ms', '1:120000'))",
                    3, "clustering job")


def test_an_engine_worker_killed_after_a_first_commit_says_what_landed(spark, warehouse, request):
    t, path = degraded_table_for(warehouse, request, fragments=60)  # several tasks: two commits
    before = lance.dataset(str(path))
    s = Statement(spark, compact_sql(t, "partial_progress => true, max_commits => 2, "
                                        "options => map('test_before_commit', 'writers.mark_then_hold')"))
    wait_for(lambda: os.path.exists(writers.at_commit(str(path))), timeout=STATEMENT_S, step=0.05)
    assert writers.release(str(path))  # the first commit goes ahead
    pid = _kill_held_worker(spark, path)  # held before the second
    landed = lance.dataset(str(path)).version
    files = data_files(path)
    message = _lost(s, pid)
    print(f"\nengine worker killed after a first commit: {message[:400]}")
    assert landed > before.version
    assert "it was not committing: nothing was committed by it after its last commit" in message, message
    assert f"before that it committed version {landed}" in message, message
    after = lance.dataset(str(path))
    assert after.version == landed and content(after) == content(before)
    _cleared(path, files)
    r = compact_call(spark, t)
    assert r.commits == 1 and content(lance.dataset(str(path))) == content(before)


def test_an_engine_worker_killed_inside_the_commit_says_it_may_have_landed(spark, table):
    t, path = table
    before, files = lance.dataset(str(path)), data_files(path)
    s = Statement(spark, compact_sql(t, "options => map('test_fail_at', 'commit:writers.mark_then_hold')"))
    pid = _kill_held_worker(spark, path)
    message = _lost(s, pid)
    print(f"\nengine worker killed inside the commit: {message[:400]}")
    assert f"it died while committing (table {t}: committing a compaction of" in message, message
    assert "that commit may or may not have landed" in message, message
    # the truth: Lance's commit had not begun, so it did not land
    unchanged(path, before)
    _cleared(path, files)
    r = compact_call(spark, t)
    assert r.commits == 1 and content(lance.dataset(str(path))) == content(before)


def test_an_engine_worker_killed_before_an_index_commit_commits_nothing(spark, indexed):
    t, path = indexed
    before = lance.dataset(str(path))
    s = Statement(spark, index_sql(t, "'test_before_commit', 'writers.mark_then_hold'"))
    pid = _kill_held_worker(spark, path)
    message = _lost(s, pid)
    print(f"\nengine worker killed before an index commit: {message[:400]}")
    assert "it was not committing: nothing was committed by it" in message, message
    unchanged(path, before)
    # its segments, written by executors and not committed, are removed
    indices = path / "_indices"
    wait_for(lambda: not indices.exists() or not os.listdir(indices), timeout=60)
    if os.path.exists(writers.at_commit(str(path))):
        os.remove(writers.at_commit(str(path)))
    [row] = spark.sql(index_sql(t, "'merge_fan_in', '8'")).collect()
    assert len(lance.dataset(str(path)).describe_indices()) == 1, row


_ABORTED = ("An error occurred while calling t.runJob.\n: org.apache.spark.SparkException: Job aborted due to stage "
            "failure: Task 0 in stage 3.0 failed 2 times, most recent failure: Lost task 0.1 in stage 3.0 (TID 4) "
            "({where}): {error}\n\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages("
            "DAGScheduler.scala:3122)\nDriver stacktrace:")


@pytest.mark.parametrize("where,error,phrase", [
    ("localhost executor driver", "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). "
     "Consider setting 'spark.python.worker.faulthandler.enabled' configuration to 'true' for the better Python "
     "traceback.", "an executor's Python worker died"),
    ("localhost executor driver", "java.net.SocketException: Connection reset", "an executor's Python worker died"),
    ("localhost executor driver", "java.io.EOFException", "an executor's Python worker died"),
    ("127.0.0.1 executor 2", "ExecutorLostFailure (executor 2 exited caused by one of the running tasks) Reason: "
     "Remote RPC client disassociated. Likely due to containers exceeding thresholds, or network issues.",
     "the executor running the task was lost"),
    ("127.0.0.1 executor 1", "ExecutorLostFailure (executor 1 exited caused by one of the running tasks) Reason: "
     "Executor heartbeat timed out after 125017 ms", "the executor running the task was lost"),
])
def test_spark_words_for_a_lost_process_name_it(where, error, phrase):
    """Spark's words for a task whose Python worker or executor was lost (as PySpark 4.2 raises
    them from runJob) name a lost worker, never the object store ("Connection reset" here is the
    JVM's end of the worker's socket) or an unexpected error."""
    from lance_compact.engine import failure_kind
    from lance_compact.errors import CompactionError
    from lance_compact.runtime.failures import WORKER_LOST, classify, job_failure

    text = _ABORTED.format(where=where, error=error)
    said = job_failure(text)
    assert classify(text).kind == WORKER_LOST and said.startswith(phrase), said
    assert "object store" not in said and "an unexpected error" not in said, said
    assert failure_kind(CompactionError(f"table db.t: a task failed: {said}; nothing was committed")) == WORKER_LOST


def test_a_lance_error_inside_a_python_exception_stays_what_it_is():
    """The object store's own "connection reset", raised by Lance in the task (a PythonException),
    is still the object store's."""
    from lance_compact.runtime.failures import STORAGE, classify, job_failure

    text = _ABORTED.format(where="localhost executor driver", error=(
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        "  File \"/x/segments.py\", line 131, in __call__\n"
        "OSError: LanceError(IO): Generic S3 error: Error performing GET http://127.0.0.1:1/b: connection reset"))
    assert classify(text).kind == STORAGE and job_failure(text).startswith("object store unreachable"), job_failure(text)
